//! `fragprobe attach [PID]`: find processes preloaded by hand and record one from where it
//! is, starting from an exact map (a resync from the probe's live table).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use fragprobe_shared::format::Record;
use fragprobe_shared::ring::{list_rings, ring_dirs, RingFileError, RingInfo};
use fragprobe_shared::trace::TraceWriter;

use crate::load::CodedError;
use crate::record::{Recorder, RecorderOptions};
use crate::report::print_summary;

use crate::record::ModelSink;

/// Options of `fragprobe attach`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// The process to record; without it, list the probed processes.
    pub pid: Option<u32>,
    /// Write the trace here (default: fragprobe-attach-<pid>-<time>.fpt).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Open the live viewer.
    #[arg(long)]
    pub view: bool,
    /// Stop after this many seconds (default: when the process exits or on Ctrl-C).
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// `--nvml-interval`.
    #[command(flatten)]
    pub nvml_interval: crate::record::nvml::IntervalArg,
    /// Where NVML comes from.
    #[command(flatten)]
    pub nvml: crate::nvml::NvmlArgs,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Every probed process in the per-user ring directories.
pub fn probed_processes() -> Vec<RingInfo> {
    let mut all = Vec::new();
    for d in ring_dirs() {
        all.extend(list_rings(&d));
    }
    all
}

fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|c| *c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// `fragprobe attach`.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let rings = probed_processes();
    let Some(pid) = args.pid else {
        if rings.iter().all(|r| !r.alive) {
            eprintln!("fragprobe: no probed process found (start one with LD_PRELOAD=libfragprobe.so CMD; rings live in {})",
                ring_dirs().first().map(|d| d.display().to_string()).unwrap_or_default());
            return Ok(ExitCode::from(crate::exit::NO_INPUT));
        }
        let mut table = format!("{:>8}  {:<6}  {:<40}  RING\n", "PID", "STATE", "COMMAND");
        for r in &rings {
            table += &format!(
                "{:>8}  {:<6}  {:<40}  {}\n",
                r.pid,
                if r.alive { "alive" } else { "ended" },
                cmdline(r.pid),
                r.path.display()
            );
        }
        crate::stdout::print(&table)?;
        return Ok(ExitCode::SUCCESS);
    };
    let Some(info) = rings
        .iter()
        .rev()
        .find(|r| r.pid == pid && r.alive)
        .or_else(|| rings.iter().rev().find(|r| r.pid == pid))
    else {
        eprintln!("fragprobe: process {pid} has no ring (was it started with LD_PRELOAD=libfragprobe.so, and has it used CUDA yet?)");
        return Ok(ExitCode::from(crate::exit::NO_INPUT));
    };
    let out = args.output.clone().unwrap_or_else(|| {
        let name = crate::record::default_trace_name(&[format!("attach-{pid}").into()]);
        name
    });
    let writer = TraceWriter::create(&out)?;
    let attached = Recorder::attach_file(
        &info.path,
        Some(writer),
        RecorderOptions {
            only_pid: Some(pid),
            attach_late: true,
            ..Default::default()
        },
    );
    let mut rec = match attached {
        Ok(r) => r,
        Err(e) => {
            // Nothing was recorded: leave no empty trace behind.
            let _ = std::fs::remove_file(&out);
            let code = match e.downcast_ref::<RingFileError>() {
                Some(RingFileError::Ring { .. }) => crate::exit::BAD_INPUT,
                Some(RingFileError::Io { .. }) => crate::exit::NO_INPUT,
                None => crate::exit::INTERNAL,
            };
            return Err(CodedError::new(code, format!("{e:#}")).into());
        }
    };
    if !args.nvml_interval.every.is_zero() {
        // Resolved here, before any thread starts (the simulated GPU's spec goes into the
        // environment); no NVML just means no samples.
        match crate::record::nvml::resolve(&args.nvml) {
            Ok(lib) => {
                if let Some(feed) =
                    crate::record::nvml::NvmlFeed::start(lib, args.nvml_interval.every, false)
                {
                    rec.sample_nvml(feed);
                }
            }
            Err(e) => eprintln!("fragprobe: no NVML samples in the trace: {e}"),
        }
    }
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores an atomic.
        unsafe { libc::signal(sig, on_stop as *const () as libc::sighandler_t) };
    }
    eprintln!(
        "fragprobe: recording process {pid} ({}) into {} — Ctrl-C to stop",
        cmdline(pid),
        out.display()
    );
    let mut sink = ModelSink::default();
    let duration = args.duration;
    let (sink, trace_error) = if args.view && super::run::display_available() {
        let (tx, rx) = crate::pipeline::feed(&format!("pid {pid}"));
        sink.feed = Some(tx);
        let worker = std::thread::Builder::new()
            .name("fragprobe-attach".into())
            .spawn(move || {
                let r = record_loop(&mut rec, &mut sink, duration);
                sink.feed = None;
                r.map(|e| (sink, e))
            })?;
        crate::cmd::view::open_live(rx, &crate::cmd::view::LiveOptions::default())?;
        STOP.store(true, Ordering::Relaxed);
        worker
            .join()
            .map_err(|_| anyhow::anyhow!("the recording thread panicked"))??
    } else {
        if args.view {
            eprintln!("fragprobe: no display (DISPLAY/WAYLAND_DISPLAY unset): recording headless");
        }
        let e = record_loop(&mut rec, &mut sink, duration)?;
        (sink, e)
    };
    print_summary(&sink.report(&out.display().to_string()), Some(&out));
    if let Some(e) = trace_error {
        eprintln!("{}", super::run::incomplete_trace_message(&out, &e));
        return Ok(ExitCode::from(crate::exit::TRACE_INCOMPLETE));
    }
    Ok(ExitCode::SUCCESS)
}

/// Drains until the process ends, Ctrl-C, or `duration` seconds; returns why the trace
/// stopped early, if it did.
fn record_loop(
    rec: &mut Recorder,
    sink: &mut ModelSink,
    duration: Option<f64>,
) -> anyhow::Result<Option<String>> {
    let start = std::time::Instant::now();
    loop {
        rec.poll(&mut |r: &Record, recd: &Recorder| sink.apply(r, recd))?;
        sink.checkpoint_if_due(rec)?;
        if !rec.active()
            || STOP.load(Ordering::Relaxed)
            || duration.is_some_and(|d| start.elapsed().as_secs_f64() >= d)
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    rec.finish(0, &mut |r: &Record, recd: &Recorder| sink.apply(r, recd))?;
    Ok(rec.trace_error().map(|e| e.to_string()))
}
