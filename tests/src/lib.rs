//! Helpers for the end-to-end tests.

pub mod probe;
pub mod rng;
pub mod scratch;
pub mod sim;
