//! `fragprobe compare [--json] TRACE TRACE…`.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::report::compare::{compare, render};

/// Options of `fragprobe compare`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Two or more trace files.
    #[arg(required = true, num_args = 2..)]
    pub traces: Vec<PathBuf>,
}

/// `fragprobe compare`.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let mut reports = Vec::new();
    for t in &args.traces {
        reports.push(super::report::report_of(t, args.json)?);
    }
    let c = compare(&reports);
    if args.json {
        crate::stdout::println(&serde_json::to_string_pretty(&c)?)?;
    } else {
        crate::stdout::print(&render(&c))?;
    }
    Ok(ExitCode::SUCCESS)
}
