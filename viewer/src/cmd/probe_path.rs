//! `fragprobe probe-path`: where `libfragprobe.so` is, for preloading it by hand.

use std::process::ExitCode;

/// Options of `fragprobe probe-path`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Args {
    /// Print the directory of the simulated GPU's libraries instead (put it first on
    /// `LD_LIBRARY_PATH` to run a program on the simulated GPU without `fragprobe run`).
    #[arg(long)]
    pub simulated_gpu_libs: bool,
}

/// `fragprobe probe-path`: prints the absolute path of the probe library (or of the
/// simulated GPU's library directory), so that `LD_PRELOAD=$(fragprobe probe-path) CMD`
/// works from any directory, from a cargo build and from the installed wheel alike.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let path = if args.simulated_gpu_libs {
        let nvml = crate::nvml::simulated::nvml_lib("").map_err(|e| anyhow::anyhow!(e))?;
        nvml.parent()
            .map(std::path::Path::to_path_buf)
            .unwrap_or(nvml)
    } else {
        crate::record::probe_library()?
    };
    let path = path.canonicalize().unwrap_or(path);
    crate::stdout::println(&path.display().to_string())?;
    Ok(ExitCode::SUCCESS)
}
