//! Helpers for the end-to-end tests.

pub mod probe;
pub mod sim;
