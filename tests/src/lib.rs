//! Helpers for the end-to-end tests.

pub mod sim;
pub mod probe;
