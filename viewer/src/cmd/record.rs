//! `fragprobe record -o FILE -- CMD…`: `run`, headless, with a required output file.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::record::SessionOptions;

/// Options of `fragprobe record`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// The trace file to write.
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// Run on the simulated GPU (SPEC like `2x80GiB`; default one 16 GiB device).
    #[arg(long, value_name = "SPEC", num_args = 0..=1, default_missing_value = "",
          value_parser = crate::nvml::simulated::spec_arg)]
    pub simulated_gpu: Option<String>,
    /// Print no summary at the end.
    #[arg(long, short)]
    pub quiet: bool,
    /// `--nvml-interval`.
    #[command(flatten)]
    pub nvml_interval: crate::record::nvml::IntervalArg,
    /// `--torch-snapshot`, as for `run`.
    #[command(flatten)]
    pub torch: super::run::TorchArgs,
    /// The command to record, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// `fragprobe record`.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let opts = SessionOptions {
        command: args.command.clone(),
        trace: Some(args.output.clone()),
        simulated_gpu: args
            .simulated_gpu
            .as_ref()
            .map(|s| (!s.is_empty()).then(|| s.clone())),
        torch_snapshot: args.torch.max_entries(),
        no_probe: false,
        env: Vec::new(),
        nvml_interval: Some(args.nvml_interval.every),
    };
    super::run::run_session(&opts, args.quiet, false, false)
}
