//! The `fragprobe` command and desktop viewer, as a library so tests can drive each part.
//!
//! Layout: `cmd/` one module per subcommand (each `pub struct Args` + `pub fn run`);
//! `pipeline/` sources of records (live rings, trace files, imports) feeding the model;
//! `gui/` the egui viewer (the UI thread only draws); `nvml/` the NVML sampler.

pub mod cmd;
pub mod exit;
pub mod gui;
pub mod install;
pub mod load;
pub mod nvml;
pub mod pipeline;
pub mod record;
pub mod report;
pub mod stdout;
pub mod torchhook;
