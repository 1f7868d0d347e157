//! placeholder, filled in by the simulated-GPU work.
