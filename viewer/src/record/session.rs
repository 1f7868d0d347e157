//! `fragprobe run`/`record`: start a command with the probe preloaded, drain every ring
//! its processes create, forward signals, and pass on the command's exit status.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicI32, Ordering};

use anyhow::Context;
use fragprobe_shared::format::Record;
use fragprobe_shared::ring::monotonic_ns;
use fragprobe_shared::trace::TraceWriter;

use super::recorder::{Recorder, RecorderOptions};
use super::sink::ModelSink;
use crate::exit;

/// How a session runs.
#[derive(Clone, Debug, Default)]
pub struct SessionOptions {
    /// The command and its arguments.
    pub command: Vec<OsString>,
    /// Where the trace goes (`None`: no trace file).
    pub trace: Option<PathBuf>,
    /// `Some(spec)`: run on the simulated GPU (`None` inside = default spec).
    pub simulated_gpu: Option<Option<String>>,
    /// Do not preload the probe (baseline for overhead measurements).
    pub no_probe: bool,
    /// Extra environment for the command.
    pub env: Vec<(OsString, OsString)>,
    /// `Some(max_entries)`: make PyTorch dump allocator snapshots next to the trace
    /// (`run --torch-snapshot`).
    pub torch_snapshot: Option<u64>,
    /// Write NVML samples into the trace this often (`None` or zero: none); see
    /// [`super::nvml`].
    pub nvml_interval: Option<std::time::Duration>,
}

/// A running session.
pub struct Session {
    /// The recorder draining the session's rings.
    pub recorder: Recorder,
    child: Child,
    dir: PathBuf,
    /// Held while the session lives: says to other `fragprobe` processes that the session
    /// directory is in use.
    _lock: std::fs::File,
    /// The trace file, if any.
    pub trace: Option<PathBuf>,
    started_ns: u64,
    /// When the command was started: a run's wall time counts from here, not from the
    /// session's set-up (ring directory, the simulated GPU's libraries, NVML), so the first
    /// run of a sweep is not charged for what the others reuse.
    pub spawned_at: std::time::Instant,
    /// When the command was seen to exit (set by [`Session::wait`]).
    pub exited_at: Option<std::time::Instant>,
}

static FORWARD: AtomicI32 = AtomicI32::new(0);
static CHILD_PID: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward_signal(sig: libc::c_int) {
    let pid = CHILD_PID.load(Ordering::Relaxed);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(pid, sig) };
    }
    FORWARD.store(sig, Ordering::Relaxed);
}

fn install_forwarding() {
    for sig in [
        libc::SIGINT,
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGQUIT,
        libc::SIGUSR1,
        libc::SIGUSR2,
    ] {
        // SAFETY: installing an async-signal-safe handler (it only calls kill and stores an atomic).
        unsafe { libc::signal(sig, forward_signal as *const () as libc::sighandler_t) };
    }
}

/// The probe library: `$FRAGPROBE_PROBE_LIB`, else in [`crate::install::artifact_dir`], else `../lib`.
pub fn probe_library() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("FRAGPROBE_PROBE_LIB") {
        return Ok(PathBuf::from(p));
    }
    let dir = crate::install::artifact_dir();
    for cand in [
        dir.join(crate::install::PROBE_LIB),
        dir.join("../lib").join(crate::install::PROBE_LIB),
    ] {
        if cand.is_file() {
            return Ok(cand);
        }
    }
    anyhow::bail!(
        "libfragprobe.so not found beside {} (build it with `cargo build --release`, or set FRAGPROBE_PROBE_LIB)",
        dir.display()
    )
}

/// A fresh private session directory for the rings of one run, under the first per-user
/// candidate with room for one ring of `ring_bytes` (`None`: no probe, no ring) — see
/// [`super::ringdir`] — and a note for each candidate passed over. The directory is held
/// locked (the returned file) for as long as the session lives.
pub fn session_dir(
    ring_bytes: Option<u64>,
) -> anyhow::Result<(PathBuf, std::fs::File, Vec<String>)> {
    let (base, notes) = super::ringdir::pick(ring_bytes)
        .map_err(|e| anyhow::anyhow!("cannot place the probe's rings: {e}"))?;
    let stem = format!("session-{}-{}", std::process::id(), monotonic_ns());
    let (dir, lock) = super::ringdir::new_session_dir(&base, &stem)
        .with_context(|| format!("making {}", base.join(&stem).display()))?;
    Ok((dir, lock, notes))
}

/// Removes a session directory when dropped, unless disarmed: a session that fails to
/// start leaves nothing behind.
struct DirGuard(Option<PathBuf>);

impl Drop for DirGuard {
    fn drop(&mut self) {
        if let Some(d) = self.0.take() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// `fragprobe-<command>-<YYYYMMDD-HHMMSS>.fpt`.
pub fn default_trace_name(command: &[OsString]) -> PathBuf {
    let prog = command
        .first()
        .map(|c| {
            Path::new(c)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default()
        })
        .unwrap_or_else(|| "run".into());
    let prog: String = prog
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
        .collect();
    PathBuf::from(format!(
        "fragprobe-{}-{}.fpt",
        if prog.is_empty() { "run" } else { &prog },
        utc_stamp()
    ))
}

/// The current UTC time as `YYYYMMDD-HHMMSS`, for default file names.
pub fn utc_stamp() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0) as i64;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}-{:02}{:02}{:02}",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// The NVML sampler for a session: the simulated GPU's NVML when the command runs on it,
/// reading the same state file and device spec as the command (this process takes the
/// command's settings first: the stand-in reads them from the environment), else the
/// driver's (or `$FRAGPROBE_NVML_LIB`).
fn nvml_feed(
    opts: &SessionOptions,
    sim_lib: Option<PathBuf>,
    every: std::time::Duration,
) -> Option<super::nvml::NvmlFeed> {
    use fragprobe_simgpu::config::{ENV_GPU, ENV_STATE};
    let Some(lib) = sim_lib else {
        let args = crate::nvml::NvmlArgs {
            nvml_lib: std::env::var_os("FRAGPROBE_NVML_LIB")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            simulated_gpu: None,
        };
        return super::nvml::NvmlFeed::start(args, every, false);
    };
    let spec = opts.simulated_gpu.clone().flatten();
    let mut wanted: Vec<(OsString, OsString)> = Vec::new();
    if let Some(s) = spec {
        // Trimmed, as the viewer's own NVML sets it: `run --view` then finds it set.
        wanted.push((ENV_GPU.into(), s.trim().into()));
    }
    wanted.extend(
        opts.env
            .iter()
            .filter(|(k, _)| k == ENV_GPU || k == ENV_STATE)
            .cloned(),
    );
    for (k, v) in wanted {
        if std::env::var_os(&k).as_ref() != Some(&v) {
            // Called on the thread that starts sessions, before this session's sampler
            // starts and after the previous one's has ended (simulated feeds are joined
            // when dropped); no other thread of `fragprobe` reads these variables.
            std::env::set_var(k, v);
        }
    }
    let args = crate::nvml::NvmlArgs {
        nvml_lib: Some(lib),
        simulated_gpu: None,
    };
    super::nvml::NvmlFeed::start(args, every, true)
}

/// Why a command could not be started, as the exit code a shell would give.
pub struct SpawnError {
    /// 126 or 127.
    pub code: u8,
    /// One line for the user.
    pub message: String,
}

impl Session {
    /// Starts the command. Errors that a shell would report (not found, not executable)
    /// come back as [`SpawnError`] inside the `Ok` so the caller can exit like a shell.
    pub fn start(opts: &SessionOptions) -> anyhow::Result<Result<Session, SpawnError>> {
        let Some(program) = opts.command.first() else {
            anyhow::bail!("no command given: use `fragprobe run -- CMD ARGS…`");
        };
        let need = (!opts.no_probe).then(|| super::ringdir::ring_bytes(&opts.env));
        let (dir, lock, passed_over) = session_dir(need)?;
        let mut guard = DirGuard(Some(dir.clone()));
        if !passed_over.is_empty() {
            eprintln!(
                "fragprobe: rings go to {} ({})",
                dir.parent().unwrap_or(&dir).display(),
                passed_over.join("; ")
            );
        }
        let mut cmd = Command::new(program);
        cmd.args(&opts.command[1..]);
        cmd.env("FRAGPROBE_RING_DIR", &dir);
        cmd.env("FRAGPROBE_SESSION", dir.file_name().unwrap_or_default());
        if !opts.no_probe {
            let probe = probe_library()?;
            let preload = match std::env::var_os("LD_PRELOAD") {
                Some(old) if !old.is_empty() => {
                    let mut v = probe.clone().into_os_string();
                    v.push(":");
                    v.push(old);
                    v
                }
                _ => probe.into_os_string(),
            };
            cmd.env("LD_PRELOAD", preload);
        }
        let mut sim_lib = None;
        if let Some(spec) = &opts.simulated_gpu {
            let lib_dir = fragprobe_simgpu::prepare_lib_dir(
                &crate::install::artifact_dir(),
                &dir.join("simgpu-lib"),
            )
            .context("preparing the simulated GPU's libraries")?;
            for (k, v) in fragprobe_simgpu::sim_env(spec.as_deref(), &lib_dir) {
                cmd.env(k, v);
            }
            sim_lib = Some(lib_dir.join("libnvidia-ml.so.1"));
        }
        for (k, v) in &opts.env {
            cmd.env(k, v);
        }
        let writer = match &opts.trace {
            Some(p) => Some(
                TraceWriter::create(p)
                    .with_context(|| format!("creating trace file {}", p.display()))?,
            ),
            None => None,
        };
        install_forwarding();
        let spawned_at = std::time::Instant::now();
        let child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                if let Some(p) = &opts.trace {
                    let _ = std::fs::remove_file(p);
                }
                let name = program.to_string_lossy();
                return Ok(Err(match e.kind() {
                    std::io::ErrorKind::NotFound => SpawnError {
                        code: exit::NOT_FOUND,
                        message: format!("fragprobe: {name}: command not found"),
                    },
                    std::io::ErrorKind::PermissionDenied => SpawnError {
                        code: exit::NOT_EXECUTABLE,
                        message: format!("fragprobe: {name}: permission denied"),
                    },
                    _ => SpawnError {
                        code: exit::NOT_EXECUTABLE,
                        message: format!("fragprobe: {name}: cannot execute: {e}"),
                    },
                }));
            }
        };
        guard.0 = None;
        CHILD_PID.store(child.id() as i32, Ordering::Relaxed);
        let mut recorder = Recorder::new(
            &dir,
            writer,
            RecorderOptions {
                remove_finished: true,
                ..RecorderOptions::default()
            },
        );
        if let Some(every) = opts
            .nvml_interval
            .filter(|d| !d.is_zero() && !opts.no_probe)
        {
            if let Some(feed) = nvml_feed(opts, sim_lib, every) {
                recorder.sample_nvml(feed);
            }
        }
        Ok(Ok(Session {
            recorder,
            child,
            dir,
            _lock: lock,
            trace: opts.trace.clone(),
            started_ns: monotonic_ns(),
            spawned_at,
            exited_at: None,
        }))
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The session's ring directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Nanoseconds since the command started.
    pub fn elapsed_ns(&self) -> u64 {
        monotonic_ns().saturating_sub(self.started_ns)
    }

    /// Drains until the command exits, then until its rings are done (children that
    /// outlive it get two more seconds). Calls `sink` for every record.
    pub fn wait(&mut self, sink: &mut ModelSink) -> anyhow::Result<ExitStatus> {
        self.wait_and(sink, &mut |_| Ok(()))
    }

    /// [`Session::wait`], then `before_close` while the trace is still open (to add run
    /// information that only exists once the command has ended).
    pub fn wait_and(
        &mut self,
        sink: &mut ModelSink,
        before_close: &mut dyn FnMut(&mut Recorder) -> anyhow::Result<()>,
    ) -> anyhow::Result<ExitStatus> {
        let mut idle = 0u32;
        let status = loop {
            let stats = self
                .recorder
                .poll(&mut |r: &Record, rec: &Recorder| sink.apply(r, rec))?;
            sink.checkpoint_if_due(&mut self.recorder)?;
            if let Some(st) = self.child.try_wait()? {
                self.exited_at = Some(std::time::Instant::now());
                break st;
            }
            idle = if stats.records == 0 {
                (idle + 1).min(20)
            } else {
                0
            };
            std::thread::sleep(std::time::Duration::from_micros(500 + 500 * idle as u64));
        };
        CHILD_PID.store(0, Ordering::Relaxed);
        self.recorder.drain_until(
            monotonic_ns() + 2_000_000_000,
            &mut |r: &Record, rec: &Recorder| sink.apply(r, rec),
        )?;
        // The trace is closed (its end marker written) even when `before_close` fails.
        let added = before_close(&mut self.recorder);
        self.recorder.close()?;
        added?;
        Ok(status)
    }

    /// Removes the session directory.
    pub fn cleanup(&self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The exit code a shell would report for `status`.
pub fn shell_code(status: &ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => c as u8,
        (None, Some(sig)) => 128u8.wrapping_add(sig as u8),
        _ => exit::INTERNAL,
    }
}
