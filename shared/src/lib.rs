//! fragprobe's consumer-side core: trace files, ring files on disk, the pure address-space
//! model and the PyTorch snapshot layer.
//!
//! The record format, the ring and the live table are [`fragprobe_wire`] (the only crate
//! the probe links); they are re-exported here under the same names, so consumers write
//! `fragprobe_shared::format`, `fragprobe_shared::ring`, `fragprobe_shared::live`.

pub use fragprobe_wire::{format, live};
pub mod model;
pub mod replay;
pub mod ring;
pub mod torch;
pub mod trace;
