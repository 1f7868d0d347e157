//! `fragprobe export --format csv|chrome|torch-snapshot TRACE -o OUT`.
//!
//! - `csv`: one row per event that changed a device's figures: time, live, mapped,
//!   reserved, NVML used and driver free where recorded, largest free block, total free,
//!   fragmentation ratio.
//! - `chrome`: a Chrome/Perfetto JSON trace: counter tracks (`ph:"C"`) for the curves,
//!   async slices (`ph:"b"/"e"`) for allocation lifetimes, metadata (`ph:"M"`) naming
//!   processes and threads. Opens in ui.perfetto.dev and chrome://tracing.
//! - `torch-snapshot`: a `torch.cuda.memory._dump_snapshot`-style pickle (plain builtins)
//!   of the trace's allocations, for PyTorch's memory_viz.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use fragprobe_shared::trace::Trace;

use crate::load::coded;
use crate::report::export::{chrome, csv};

/// Export formats.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Timeline as CSV with a header row.
    Csv,
    /// Chrome/Perfetto JSON trace.
    Chrome,
    /// A PyTorch memory snapshot pickle, for PyTorch's own memory_viz.
    TorchSnapshot,
}

/// Options of `fragprobe export`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Output format.
    #[arg(long, value_enum)]
    pub format: Format,
    /// The trace file.
    pub trace: PathBuf,
    /// Output file (`-` for stdout).
    #[arg(short, long, value_name = "OUT")]
    pub output: PathBuf,
}

fn open_out(p: &PathBuf) -> anyhow::Result<Box<dyn Write>> {
    if p.as_os_str() == "-" {
        return Ok(Box::new(std::io::BufWriter::new(std::io::stdout().lock())));
    }
    let f = std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?;
    Ok(Box::new(std::io::BufWriter::with_capacity(1 << 20, f)))
}

/// `fragprobe export`.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    if args.format == Format::TorchSnapshot {
        super::import::trace_to_pickle(&args.trace, &args.output)?;
        eprintln!(
            "fragprobe: wrote {} (open it in PyTorch's memory_viz)",
            args.output.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let trace = Trace::open(&args.trace).map_err(coded)?;
    for w in trace.warnings() {
        eprintln!("fragprobe: warning: {w}");
    }
    let mut out = open_out(&args.output)?;
    let n = match args.format {
        Format::Csv => csv(&trace, &mut *out)?,
        Format::Chrome => chrome(&trace, &mut *out)?,
        Format::TorchSnapshot => 0, // written above, before the trace was opened here
    };
    out.flush()?;
    if args.output.as_os_str() != "-" {
        eprintln!(
            "fragprobe: wrote {} ({} {})",
            args.output.display(),
            n,
            if args.format == Format::Csv {
                "rows"
            } else {
                "trace events"
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}
