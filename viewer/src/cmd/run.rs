//! `fragprobe run` and `fragprobe record`: start a command under the probe and record it.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use fragprobe_shared::trace::Trace;

use crate::record::{
    default_trace_name, shell_code, ModelSink, Recorder, Session, SessionOptions, SpawnError,
};
use crate::report::{print_summary, Report};
use crate::torchhook::TorchHook;

/// Options of `fragprobe run`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Write the trace here (default: fragprobe-<command>-<time>.fpt in the current directory).
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Do not write a trace file at all.
    #[arg(long, conflicts_with_all = ["record", "torch_snapshot"])]
    pub no_record: bool,
    /// Open the live viewer while the command runs.
    #[arg(long)]
    pub view: bool,
    /// Run on the simulated GPU (SPEC like `2x80GiB`; default one 16 GiB device).
    #[arg(long, value_name = "SPEC", num_args = 0..=1, default_missing_value = "",
          value_parser = crate::nvml::simulated::spec_arg)]
    pub simulated_gpu: Option<String>,
    /// Do not preload the probe (baseline for overhead measurements).
    #[arg(long, conflicts_with = "torch_snapshot")]
    pub no_probe: bool,
    /// Print no summary at the end.
    #[arg(long, short)]
    pub quiet: bool,
    /// Print the end-of-run report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// `--nvml-interval`.
    #[command(flatten)]
    pub nvml_interval: crate::record::nvml::IntervalArg,
    #[command(flatten)]
    pub torch: TorchArgs,
    /// The command to run, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// `--torch-snapshot` and its history length, shared by `run` and `record`.
#[derive(clap::Args, Debug, Clone)]
pub struct TorchArgs {
    /// Python programs that import torch: record PyTorch's allocator history and dump a
    /// memory snapshot at exit and on OOM (kept next to the trace in TRACE.torch/ and
    /// joined with it), without changing the program.
    #[arg(long)]
    pub torch_snapshot: bool,
    /// History entries PyTorch keeps for `--torch-snapshot` (its `max_entries`).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 100_000,
        requires = "torch_snapshot",
        value_parser = clap::value_parser!(u64).range(1..=1_000_000_000)
    )]
    pub torch_max_entries: u64,
}

impl TorchArgs {
    /// `Some(max_entries)` when `--torch-snapshot` was given.
    pub fn max_entries(&self) -> Option<u64> {
        self.torch_snapshot.then_some(self.torch_max_entries)
    }
}

impl Args {
    /// The session options these arguments ask for.
    pub fn session(&self) -> SessionOptions {
        let trace = if self.no_record || self.no_probe {
            None
        } else {
            Some(
                self.record
                    .clone()
                    .unwrap_or_else(|| default_trace_name(&self.command)),
            )
        };
        SessionOptions {
            command: self.command.clone(),
            trace,
            simulated_gpu: self
                .simulated_gpu
                .as_ref()
                .map(|s| (!s.is_empty()).then(|| s.clone())),
            no_probe: self.no_probe,
            env: Vec::new(),
            torch_snapshot: self.torch.max_entries(),
            nvml_interval: Some(self.nvml_interval.every),
        }
    }
}

/// What one recorded run produced.
pub struct Outcome {
    /// The command's exit code as a shell reports it (128+N for signal N).
    pub code: u8,
    /// The signal that killed the command, if one did.
    pub signal: Option<i32>,
    /// The end-of-run report built from the recorded model.
    pub report: Report,
    /// The trace file written, if any.
    pub trace: Option<PathBuf>,
    /// How many probed processes wrote a ring.
    pub rings_seen: usize,
    /// Why the trace stopped before the end (disk full, …), if it did.
    pub trace_error: Option<String>,
    /// Wall-clock time from start to the command's exit.
    pub wall: Duration,
}

/// Runs a session to completion without printing anything; `Ok(Err(_))` when the command
/// could not be started (the shell's 126/127, with its message).
pub fn record_session(
    opts: &SessionOptions,
    view: bool,
) -> anyhow::Result<Result<Outcome, SpawnError>> {
    let hook = match (opts.torch_snapshot, &opts.trace) {
        (Some(max), Some(trace)) => Some(TorchHook::install(trace, max)?),
        _ => None,
    };
    let with_hook;
    let opts = match &hook {
        Some(h) => {
            with_hook = SessionOptions {
                env: [opts.env.clone(), h.env.clone()].concat(),
                ..opts.clone()
            };
            &with_hook
        }
        None => opts,
    };
    // The staging directory goes whatever happens below.
    let _staging = hook.clone().map(Staging);
    let mut before_close = {
        let hook = hook.clone();
        move |rec: &mut Recorder| -> anyhow::Result<()> {
            if let Some(h) = &hook {
                let infos = h.attach(rec.rings_seen());
                rec.write_trace(|w| infos.iter().try_for_each(|i| w.write_run_info(i)));
            }
            Ok(())
        }
    };
    let mut session = match Session::start(opts)? {
        Ok(s) => s,
        Err(e) => return Ok(Err(e)),
    };
    let mut sink = ModelSink::default();
    let status = if view && display_available() {
        // The window must own the main thread: recording moves to a named thread and
        // feeds the viewer; closing the window leaves the command running to its end.
        let (tx, rx) = crate::pipeline::feed("live");
        sink.feed = Some(tx);
        let worker = std::thread::Builder::new()
            .name("fragprobe-record".into())
            .spawn(move || {
                let st = session.wait_and(&mut sink, &mut before_close);
                session.cleanup();
                sink.feed = None;
                (st, sink, session)
            })?;
        let mut live = crate::cmd::view::LiveOptions::default();
        if let Some(spec) = &opts.simulated_gpu {
            // The viewer's NVML panel reads the same simulated devices the command runs on.
            live.nvml = Some(crate::nvml::NvmlArgs {
                simulated_gpu: Some(spec.clone().unwrap_or_default()),
                ..Default::default()
            });
        }
        crate::cmd::view::open_live(rx, &live)?;
        let (st, s, sess) = worker
            .join()
            .map_err(|_| anyhow::anyhow!("the recording thread panicked"))?;
        sink = s;
        session = sess;
        st?
    } else {
        if view {
            eprintln!("fragprobe: no display (DISPLAY/WAYLAND_DISPLAY unset): recording headless; open the trace with `fragprobe view`");
        }
        let st = session.wait_and(&mut sink, &mut before_close);
        session.cleanup();
        st?
    };
    // Wall time from the command's start to its exit: not the set-up before it, nor the
    // draining and joining after.
    let wall = session.exited_at.map_or_else(
        || session.spawned_at.elapsed(),
        |t| t.duration_since(session.spawned_at),
    );
    let mut report = sink.report(&source_of(&session));
    if let (Some(_), Some(trace)) = (&hook, &session.trace) {
        report.torch_snapshots = match Trace::open(trace) {
            Ok(t) => crate::torchhook::join(&t),
            Err(e) => {
                eprintln!(
                    "fragprobe: cannot reopen {} to join the torch snapshots: {e}",
                    trace.display()
                );
                Vec::new()
            }
        };
    }
    Ok(Ok(Outcome {
        code: shell_code(&status),
        signal: status.signal(),
        report,
        trace: session.trace.clone(),
        rings_seen: session.recorder.rings_seen(),
        trace_error: session.recorder.trace_error().map(|e| e.to_string()),
        wall,
    }))
}

/// Removes a torch hook's staging directory when dropped.
struct Staging(TorchHook);

impl Drop for Staging {
    fn drop(&mut self) {
        self.0.cleanup();
    }
}

fn source_of(session: &Session) -> String {
    session
        .trace
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "(live)".into())
}

/// Runs a session to completion, printing the summary; returns the command's exit code.
pub fn run_session(
    opts: &SessionOptions,
    quiet: bool,
    json: bool,
    view: bool,
) -> anyhow::Result<ExitCode> {
    let out = match record_session(opts, view)? {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{}", e.message);
            return Ok(ExitCode::from(e.code));
        }
    };
    if !opts.no_probe && out.rings_seen == 0 && !quiet {
        warn_no_ring(opts);
    }
    if json {
        // The command's status passes through whatever becomes of our own output.
        if let Err(e) = crate::stdout::println(&serde_json::to_string_pretty(&out.report)?) {
            eprintln!("fragprobe: the report was not printed: {e:#}");
        }
    } else if !quiet && !opts.no_probe {
        print_summary(&out.report, out.trace.as_deref());
    }
    if let Some(sig) = out.signal {
        eprintln!("fragprobe: the command was killed by signal {sig}");
    }
    if let (Some(e), Some(trace)) = (&out.trace_error, &out.trace) {
        eprintln!("{}", incomplete_trace_message(trace, e));
        if out.code == 0 {
            return Ok(ExitCode::from(crate::exit::TRACE_INCOMPLETE));
        }
    }
    Ok(ExitCode::from(out.code))
}

/// What to tell the user about a trace that stopped early: how much it holds, read back
/// (`run`, `record`, `sweep`, `attach`).
pub fn incomplete_trace_message(trace: &Path, error: &str) -> String {
    let holds = match Trace::open(trace) {
        Ok(t) => format!(
            "it holds the first {} events and opens as it is (fragprobe report {})",
            t.len(),
            trace.display()
        ),
        Err(e) => format!("it cannot be read back ({e})"),
    };
    format!(
        "fragprobe: the trace {} is incomplete: writing it failed ({error}); {holds}. The run's figures (summary, report, comparison) cover all of it",
        trace.display()
    )
}

/// Says that no process of the command wrote a ring, and how to find out why.
pub fn warn_no_ring(opts: &SessionOptions) {
    eprintln!(
        "fragprobe: no process of `{}` used CUDA under the probe (if it did, the loader may have dropped libfragprobe.so: run with LD_DEBUG=libs to see why)",
        opts.command.first().map(|c| c.to_string_lossy().into_owned()).unwrap_or_default()
    );
}

/// Whether a window can be opened.
pub fn display_available() -> bool {
    std::env::var_os("DISPLAY").is_some_and(|d| !d.is_empty())
        || std::env::var_os("WAYLAND_DISPLAY").is_some_and(|d| !d.is_empty())
}

/// `fragprobe run`.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    run_session(&args.session(), args.quiet, args.json, args.view)
}
