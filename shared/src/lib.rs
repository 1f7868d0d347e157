//! fragprobe's shared core: the record format, the shared-memory ring, and (with the
//! `consumer` feature) trace files and the pure address-space model.
//!
//! The probe links this crate with `default-features = false`: it then contains only
//! allocation-free, lock-free code (`format`, `ring`, `live`).

pub mod format;
pub mod live;
#[cfg(feature = "consumer")]
pub mod model;
pub mod ring;
#[cfg(feature = "consumer")]
pub mod torch;
#[cfg(feature = "consumer")]
pub mod trace;
