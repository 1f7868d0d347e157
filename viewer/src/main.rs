//! `fragprobe`: record, inspect and compare CUDA allocator fragmentation.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use fragprobe_viewer::cmd;

/// Find out why CUDA ran out of memory while nvidia-smi says gigabytes are free.
#[derive(Parser, Debug)]
#[command(name = "fragprobe", version, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a command with the probe preloaded, record its allocations, print a summary.
    Run(cmd::run::Args),
    /// Record a command to a trace file (headless `run`).
    Record(cmd::record::Args),
    /// List processes preloaded by hand, or record one of them from where it is.
    Attach(cmd::attach::Args),
    /// Summarise a trace: peak, fragmentation, failed allocations with verdicts, leaks.
    Report(cmd::report::Args),
    /// Compare traces side by side (e.g. different PYTORCH_CUDA_ALLOC_CONF settings).
    Compare(cmd::compare::Args),
    /// Export a trace as CSV or as a Chrome/Perfetto JSON trace.
    Export(cmd::export::Args),
    /// A built-in workload on the simulated GPU that ends in a fragmentation OOM.
    Demo(cmd::demo::Args),
    /// The desktop viewer: address-space map, timelines, replay, compare.
    View(cmd::view::Args),
    /// Import a PyTorch memory snapshot (never executed) into a fragprobe trace.
    Import(cmd::import::Args),
    /// Replay a PyTorch snapshot through a model of its caching allocator, or predict
    /// what other PYTORCH_CUDA_ALLOC_CONF settings would have done.
    Simulate(cmd::simulate::Args),
    /// Run a command once per PYTORCH_CUDA_ALLOC_CONF under the probe and compare the runs.
    Sweep(cmd::sweep::Args),
    /// Live device and process memory, like `watch -d nvidia-smi`.
    Watch(cmd::watch::Args),
    /// Log NVML samples to CSV/JSONL with threshold alerts.
    Log(cmd::log::Args),
    /// Plot a log or trace to PNG with the device total and a 95 % line.
    Plot(cmd::plot::Args),
    /// Explain why a run ran out of memory, from the evidence.
    Doctor(cmd::doctor::Args),
    /// Print the path of libfragprobe.so, for `LD_PRELOAD=$(fragprobe probe-path) CMD`.
    ProbePath(cmd::probe_path::Args),
    #[command(name = "__demo-workload", hide = true)]
    DemoWorkload {
        #[arg(default_value_t = 6)]
        iterations: u32,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Run(a) => cmd::run::run(a),
        Command::Record(a) => cmd::record::run(a),
        Command::Attach(a) => cmd::attach::run(a),
        Command::Report(a) => cmd::report::run(a),
        Command::Compare(a) => cmd::compare::run(a),
        Command::Export(a) => cmd::export::run(a),
        Command::Demo(a) => cmd::demo::run(a),
        Command::View(a) => cmd::view::run(a),
        Command::Import(a) => cmd::import::run(a),
        Command::Simulate(a) => cmd::simulate::run(a),
        Command::Sweep(a) => cmd::sweep::run(a),
        Command::Watch(a) => cmd::watch::run(a),
        Command::Log(a) => cmd::log::run(a),
        Command::Plot(a) => cmd::plot::run(a),
        Command::Doctor(a) => cmd::doctor::run(a),
        Command::ProbePath(a) => cmd::probe_path::run(a),
        Command::DemoWorkload { iterations } => cmd::demo::workload(*iterations),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fragprobe: {e:#}");
            ExitCode::from(fragprobe_viewer::load::exit_code_of(&e))
        }
    }
}
