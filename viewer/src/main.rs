//! `fragprobe`: record, inspect and compare CUDA allocator fragmentation.

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::SUCCESS
}
