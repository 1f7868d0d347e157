//! `fragprobe report [--json] TRACE`.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::load::load;
use crate::report::{render, Report};

/// Options of `fragprobe report`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Print the versioned JSON schema (see the README) instead of text.
    #[arg(long)]
    pub json: bool,
    /// The trace file.
    pub trace: PathBuf,
}

/// Builds the report of a trace file.
pub fn report_of(path: &std::path::Path, quiet: bool) -> anyhow::Result<Report> {
    let l = load(path, quiet)?;
    let mut r = Report::build(
        &l.model,
        &path.display().to_string(),
        l.warnings,
        l.first_ns,
        l.last_ns,
    );
    r.torch_snapshots = crate::torchhook::join(&l.trace);
    Ok(r)
}

/// `fragprobe report`.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let r = report_of(&args.trace, args.json)?;
    for w in &r.warnings {
        eprintln!("fragprobe: warning: {w}");
    }
    if args.json {
        crate::stdout::println(&serde_json::to_string_pretty(&r)?)?;
    } else {
        crate::stdout::print(&render(&r))?;
    }
    Ok(ExitCode::SUCCESS)
}
