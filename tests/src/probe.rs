//! Running programs under the probe and the `fragprobe` command, and reading what they
//! recorded.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use fragprobe_shared::format::{Api, EventKind, Record};
use fragprobe_shared::trace::Trace;

use crate::sim::{
    artifact_dir, build_scenario, ensure_sim_built, fresh_state_path, parse_lines, ScenarioLine,
    ENV_STATE,
};

fn cargo_build(packages: &[&str]) {
    ensure_sim_built();
    crate::sim::cargo_build(packages);
}

/// Builds `libfragprobe.so` and the `fragprobe` binary (once per test process), with the
/// same cargo, target directory and profile as the running tests.
pub fn ensure_fragprobe_built() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| cargo_build(&["fragprobe-probe", "fragprobe-viewer"]));
}

/// The built probe (only the probe is built: benchmarks need no CLI).
pub fn probe_library() -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| cargo_build(&["fragprobe-probe"]));
    artifact_dir().join("libfragprobe.so")
}

/// A `fragprobe` command with a private simulated-GPU state and no colours.
pub fn fragprobe() -> Command {
    ensure_fragprobe_built();
    let mut cmd = Command::new(artifact_dir().join("fragprobe"));
    cmd.env(ENV_STATE, fresh_state_path())
        .env("NO_COLOR", "1")
        .env("NO_PROGRESS", "1");
    for k in [
        "FRAGPROBE_SIM_FAIL_NTH",
        "FRAGPROBE_SIM_FAIL_ABOVE",
        "FRAGPROBE_SIM_LATENCY_NS",
        "FRAGPROBE_DISABLE",
        "DISPLAY",
        "WAYLAND_DISPLAY",
    ] {
        cmd.env_remove(k);
    }
    cmd
}

/// `fragprobe report --json TRACE`, which must succeed.
pub fn report_json(trace: &Path) -> serde_json::Value {
    let out = fragprobe()
        .args(["report", "--json"])
        .arg(trace)
        .output()
        .expect("run fragprobe report");
    assert!(
        out.status.success(),
        "fragprobe report {}: {}",
        trace.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("report JSON")
}

/// Runs `cmd`, which must succeed (else the test fails with what it printed).
pub fn succeed(cmd: &mut Command) -> Output {
    let o = cmd.output().expect("run the command");
    assert!(o.status.success(), "{cmd:?}: {}", output_text(&o));
    o
}

/// `fragprobe export --format torch-snapshot TRACE -o OUT`, which must succeed.
pub fn export_torch_snapshot(trace: &Path, out: &Path) {
    succeed(
        fragprobe()
            .args(["export", "--format", "torch-snapshot"])
            .arg(trace)
            .arg("-o")
            .arg(out),
    );
}

/// A fresh path for an output file of this test process.
pub fn out_path(name: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = artifact_dir().join("test-out");
    std::fs::create_dir_all(&dir).expect("test output directory");
    dir.join(format!(
        "{}-{}-{name}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

/// What a scenario printed and what the probe recorded of it.
pub struct Recorded {
    /// The scenario's FPSCN lines.
    pub lines: Vec<ScenarioLine>,
    /// Every record of the trace.
    pub records: Vec<Record>,
    /// The trace file.
    pub trace: PathBuf,
    /// fragprobe's output.
    pub output: Output,
}

impl Drop for Recorded {
    /// A passing test leaves no trace behind (the 16-thread one is 250 MB); a failing one
    /// keeps its trace to look at.
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_file(&self.trace);
        }
    }
}

/// Runs `fragprobe record --simulated-gpu[=spec] -o TRACE -- scenario args…`.
pub fn record_scenario(
    name: &str,
    args: &[&str],
    spec: Option<&str>,
    env: &[(&str, &str)],
) -> Recorded {
    let prog = build_scenario(name);
    let trace = out_path(&format!("{name}.fpt"));
    let mut cmd = fragprobe();
    cmd.arg("record").arg("-o").arg(&trace);
    match spec {
        Some(s) => cmd.arg(format!("--simulated-gpu={s}")),
        None => cmd.arg("--simulated-gpu"),
    };
    cmd.arg("--quiet").arg("--").arg(&prog).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let output = cmd.output().expect("run fragprobe record");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let records = read_trace(&trace);
    Recorded {
        lines: parse_lines(&stdout),
        records,
        trace,
        output,
    }
}

/// Every record of a trace file (panics with the error when it does not open).
pub fn read_trace(path: &Path) -> Vec<Record> {
    let t = Trace::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    t.records().collect()
}

/// The scenario op a record corresponds to (`None` for records no program call made).
pub fn op_of(r: &Record) -> Option<&'static str> {
    if matches!(
        r.api(),
        Some(Api::Probe | Api::Consumer | Api::Nvml | Api::Synthetic) | None
    ) {
        return None;
    }
    Some(match r.kind()? {
        EventKind::Alloc => "alloc",
        EventKind::Free => "free",
        EventKind::ManagedAlloc => "managed",
        EventKind::AsyncAlloc => "async_alloc",
        EventKind::AsyncFree => "async_free",
        EventKind::AddressReserve => "reserve",
        EventKind::AddressFree => "addr_free",
        EventKind::MemCreate => "create",
        EventKind::MemRelease => "release",
        EventKind::MemMap => "map",
        EventKind::MemUnmap => "unmap",
        EventKind::MemGetInfo => "meminfo",
        _ => return None,
    })
}

/// The comparable identity of a call: (pid, op, api, addr, result, device for allocations).
pub type Key = (u32, String, String, u64, i32, i32);

/// Keys of the scenario's lines.
pub fn keys_of_lines(lines: &[ScenarioLine]) -> Vec<Key> {
    let mut v: Vec<Key> = lines
        .iter()
        .map(|l| {
            // The device of a failed call may be unknowable (no context): compare it on successes.
            let dev = if matches!(
                l.op.as_str(),
                "alloc" | "managed" | "async_alloc" | "create"
            ) && l.res == 0
            {
                l.dev
            } else {
                -2
            };
            let addr = if l.op == "meminfo" { 0 } else { l.addr };
            (l.pid, l.op.clone(), l.api.clone(), addr, l.res, dev)
        })
        .collect();
    v.sort();
    v
}

/// Keys of the program calls the probe recorded.
pub fn keys_of_records(records: &[Record]) -> Vec<Key> {
    let mut v: Vec<Key> = records
        .iter()
        .filter_map(|r| {
            let op = op_of(r)?;
            let dev =
                if matches!(op, "alloc" | "managed" | "async_alloc" | "create") && r.result == 0 {
                    r.device as i32
                } else {
                    -2
                };
            let addr = if op == "meminfo" { 0 } else { r.addr };
            Some((
                r.pid,
                op.to_string(),
                r.api()?.name().to_string(),
                addr,
                r.result as i32,
                dev,
            ))
        })
        .collect();
    v.sort();
    v
}

/// A finished command's standard output and standard error, as text (for assertion
/// messages and for finding the lines a program printed).
pub fn output_text(o: &std::process::Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The environment every real-PyTorch test program gets. `TORCH_AUTOGRAD_SHUTDOWN_WAIT_LIMIT=0`
/// leaves autograd's device threads asleep at exit instead of waking them to shut down:
/// woken while Python finalizes, such a thread takes the GIL, CPython ends it with
/// `pthread_exit`, and the forced unwind through a `noexcept` frame calls `std::terminate`
/// ("terminate called without an active exception", SIGABRT after the program's last
/// line; CPython bpo-42969). torch 2.15 on Python 3.11 lost that race in 4 of 26 trainings
/// during one full `cargo test` here and in CI once; the tests are about memory, not
/// teardown.
pub const TORCH_TEST_ENV: [(&str, &str); 1] = [("TORCH_AUTOGRAD_SHUTDOWN_WAIT_LIMIT", "0")];

/// Runs a real-PyTorch program (`run` starts it and waits) and returns its output and
/// text, running it once more if it finished its work (printed `finished`) and then died of
/// `SIGABRT` from C++'s `std::terminate` while the interpreter tore down (see
/// [`TORCH_TEST_ENV`] for the race behind the one seen so far; this catches another like
/// it). What it printed is shown, and twice in a row is returned as it is, for the caller
/// to fail on.
pub fn torch_run(
    finished: &str,
    mut run: impl FnMut() -> std::process::Output,
) -> (std::process::Output, String) {
    let o = run();
    let out = output_text(&o);
    let aborted_in_teardown = !o.status.success()
        && out.contains(finished)
        && out.contains("terminate called without an active exception")
        && out.contains("signal 6");
    if !aborted_in_teardown {
        return (o, out);
    }
    eprintln!(
        "aborted in interpreter teardown after its work; running it again. It printed:\n{out}"
    );
    let o = run();
    let out = output_text(&o);
    (o, out)
}
