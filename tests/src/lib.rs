//! Helpers for the end-to-end tests.

pub mod cache;
pub mod made;
pub mod probe;
pub mod rng;
pub mod scratch;
pub mod sim;
pub mod snapshots;
