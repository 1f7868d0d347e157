//! One module per subcommand: each has `pub struct Args` (clap) and `pub fn run`.

pub mod attach;
pub mod compare;
pub mod demo;
pub mod demo_torch;
pub mod doctor;
pub mod export;
pub mod import;
pub mod log;
pub mod plot;
pub mod probe_path;
pub mod record;
pub mod report;
pub mod run;
pub mod simulate;
pub mod sweep;
pub mod view;
pub mod watch;

/// Opens the desktop viewer on a trace (used by `demo`).
pub fn open_viewer(trace: &std::path::Path) -> anyhow::Result<std::process::ExitCode> {
    view::run(&view::Args {
        traces: vec![trace.to_path_buf()],
        ..view::Args::default()
    })
}
