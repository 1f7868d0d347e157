//! Documented exit codes of the `fragprobe` command.
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success (for `run`/`record`: the target's own status is passed through) |
//! | 1 | internal error |
//! | 2 | bad usage (clap) |
//! | 3 | input file missing or unreadable |
//! | 4 | input is not a fragprobe trace / snapshot, or is corrupt |
//! | 5 | input has an unsupported format version |
//! | 6 | NVML unavailable where it is required |
//! | 7 | an alert fired (`log --exit-on-alert`) / `doctor` found an OOM cause |
//! | 8 | `run`/`record`/`sweep`: the command succeeded (`attach`: the recording ended) but its trace could not be written in full (disk full…); the trace keeps what was written before |
//! | 9 | standard output could not be written (disk full, I/O error); a closed pipe (`\| head`) is not an error. `run`/`record` still pass the command's own status through |
//! | 126 | target command found but not executable |
//! | 127 | target command not found |
//! | 128+N | target killed by signal N |

/// Internal error.
pub const INTERNAL: u8 = 1;
/// Bad usage.
pub const USAGE: u8 = 2;
/// Missing or unreadable input.
pub const NO_INPUT: u8 = 3;
/// Not a trace / corrupt.
pub const BAD_INPUT: u8 = 4;
/// Unsupported version.
pub const VERSION: u8 = 5;
/// NVML unavailable.
pub const NO_NVML: u8 = 6;
/// An alert fired / doctor found a cause.
pub const FINDING: u8 = 7;
/// `run`/`record`: the trace stopped early (the command itself succeeded).
pub const TRACE_INCOMPLETE: u8 = 8;
/// Standard output could not be written.
pub const OUTPUT: u8 = 9;
/// Target not executable.
pub const NOT_EXECUTABLE: u8 = 126;
/// Target not found.
pub const NOT_FOUND: u8 = 127;
