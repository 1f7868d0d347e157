//! Sources of records (trace files, live rings, imported snapshots) feeding one model per
//! run, on named background threads; the viewer only reads what they publish.

pub mod crosscheck;
pub mod log;
pub mod space;
