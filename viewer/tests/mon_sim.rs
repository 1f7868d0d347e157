//! The monitoring commands against the simulated GPU's NVML, with the workload in another
//! process: the figures `watch` and `log` show are the simulation's, alerts fire once per
//! crossing, `doctor` finds leftover processes, a rising baseline and the causes of the
//! out-of-memory errors in a recorded trace.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use fragprobe_tests::probe::{out_path, probe_library, record_scenario};
use fragprobe_tests::sim::{
    build_scenario, fresh_state_path, nvml_library, parse_lines, sim_env_on, spawn_held, ENV_GPU,
    ENV_STATE,
};
use fragprobe_viewer::nvml::logfile::{self, LogRow};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const OVERHEAD: u64 = 300 * MIB;
const SPEC: &str = "1x4GiB";
/// 0.5 % of 4 GiB, rounded down to MiB: the stand-in's driver reservation.
const RESERVED: u64 = 20 * MIB;

/// A `leak --hold` workload holding its allocations until dropped.
struct Held {
    child: Child,
    pid: u32,
    /// Device bytes the simulation charges it: allocations (2 MiB pages) + context.
    used: u64,
}

impl Held {
    fn start(state: &Path, spec: &str, ring_dir: Option<&Path>) -> Held {
        Held::start_with(state, spec, ring_dir, &[])
    }

    fn start_with(state: &Path, spec: &str, ring_dir: Option<&Path>, env: &[(&str, &str)]) -> Held {
        let mut cmd = Command::new(build_scenario("leak"));
        sim_env_on(&mut cmd, Some(spec));
        cmd.env(ENV_STATE, state);
        for (k, v) in env {
            cmd.env(k, v);
        }
        if let Some(d) = ring_dir {
            cmd.env("LD_PRELOAD", probe_library())
                .env("FRAGPROBE_RING_DIR", d);
        }
        let (child, lines) = spawn_held(cmd);
        let calls = parse_lines(&lines);
        assert!(calls.iter().all(|c| c.res == 0), "{calls:?}");
        let allocated: u64 = calls
            .iter()
            .filter(|c| matches!(c.op.as_str(), "alloc" | "async_alloc" | "create"))
            .map(|c| c.size.div_ceil(2 * MIB) * 2 * MIB)
            .sum();
        assert_eq!(allocated, 82 * MIB);
        let pid = child.id();
        Held {
            child,
            pid,
            used: allocated + OVERHEAD,
        }
    }

    fn release(mut self) {
        drop(self.child.stdin.take());
        assert!(self.child.wait().expect("wait").success());
    }
}

/// A probed `leak --hold` with `env`, its ring in a fresh directory `rings` (returned).
fn probed(state: &Path, spec: &str, rings: &str, env: &[(&str, &str)]) -> (Held, PathBuf) {
    let ring_dir = out_path(rings);
    std::fs::create_dir_all(&ring_dir).unwrap();
    (
        Held::start_with(state, spec, Some(&ring_dir), env),
        ring_dir,
    )
}

fn fragprobe(state: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fragprobe"));
    c.env(ENV_STATE, state)
        .env(ENV_GPU, SPEC)
        .env("NO_COLOR", "1")
        .env("COLUMNS", "250")
        .env_remove("FRAGPROBE_NVML_LIB");
    c
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn row_of_pid(frame: &str, pid: u32) -> String {
    frame
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(&pid.to_string()))
        .unwrap_or_else(|| panic!("no row for pid {pid} in\n{frame}"))
        .to_string()
}

#[test]
fn watch_shows_the_simulated_figures_and_the_probed_process() {
    let state = fresh_state_path();
    let ring_dir = out_path("rings");
    std::fs::create_dir_all(&ring_dir).unwrap();
    let held = Held::start(&state, SPEC, Some(&ring_dir));
    assert!(
        fragprobe_shared::ring::list_rings(&ring_dir)
            .iter()
            .any(|r| r.pid == held.pid),
        "the probe made no ring"
    );
    let lib = nvml_library();
    for how in [
        vec!["--nvml-lib".to_string(), lib.display().to_string()],
        vec![format!("--simulated-gpu={SPEC}")],
    ] {
        let o = fragprobe(&state)
            .args(["watch", "--once"])
            .args(&how)
            .env("FRAGPROBE_RING_DIR", &ring_dir)
            .output()
            .unwrap();
        let (frame, err) = text(&o);
        assert!(o.status.success(), "{how:?}: {err}");
        let dev = frame
            .lines()
            .find(|l| l.starts_with("0 "))
            .unwrap_or_else(|| panic!("{frame}"));
        let used = format!("{}MiB", held.used / MIB);
        assert!(dev.contains(&format!("{used} /   4096MiB")), "{dev}");
        assert!(
            dev.contains(&format!("{}MiB", RESERVED / MIB)),
            "reserved: {dev}"
        );
        let row = row_of_pid(&frame, held.pid);
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells[0], "0");
        assert_eq!(cells[3], "C");
        assert_eq!(cells[4], used, "{row}");
        assert_eq!(cells[5], "yes", "probed: {row}");
        // Live table: 64 MiB + 16 MiB + a 2 MiB handle, three objects, in one piece.
        assert!(row.contains("82.0 MiB  3"), "{row}");
        assert!(row.contains("0.00"), "{row}");
        assert!(row.contains("leak --hold"), "{row}");
    }
    held.release();
    let o = fragprobe(&state)
        .args(["watch", "--once", "--nvml-lib"])
        .arg(&lib)
        .output()
        .unwrap();
    let (frame, _) = text(&o);
    assert!(frame.contains("Processes: none"), "{frame}");
    assert!(frame
        .lines()
        .find(|l| l.starts_with("0 "))
        .unwrap()
        .contains("0MiB /   4096MiB"));
}

#[test]
fn log_keeps_a_prometheus_textfile_with_the_probed_job() {
    let state = fresh_state_path();
    let (held, ring_dir) = probed(
        &state,
        SPEC,
        "prom-rings",
        &[("SLURM_JOB_ID", "fp-42"), ("RANK", "3")],
    );
    let dir = out_path("textfile");
    std::fs::create_dir_all(&dir).unwrap();
    let prom = dir.join("fragprobe.prom");
    let o = fragprobe(&state)
        .args(["log", "--count", "2", "-n", "0.05", "--prometheus"])
        .arg(&prom)
        .arg(format!("--simulated-gpu={SPEC}"))
        .env("FRAGPROBE_RING_DIR", &ring_dir)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    let (pid, used) = (held.pid, held.used);
    held.release();
    assert!(o.status.success(), "{err}");
    assert!(
        out.is_empty(),
        "no CSV on stdout with --prometheus alone: {out}"
    );
    let body = std::fs::read_to_string(&prom).unwrap();
    let value = |prefix: &str| -> f64 {
        body.lines()
            .find(|l| l.starts_with(prefix) && l.contains("job_id=\"fp-42\",rank=\"3\""))
            .and_then(|l| l.rsplit_once(' '))
            .map(|(_, v)| v.parse().unwrap())
            .unwrap_or_else(|| panic!("no {prefix} for the job in\n{body}"))
    };
    assert_eq!(value("fragprobe_process_memory_used_bytes{"), used as f64);
    assert_eq!(value("fragprobe_process_tracked_bytes{"), (82 * MIB) as f64);
    assert_eq!(value("fragprobe_process_fragmentation_ratio{"), 0.0);
    assert!(
        body.contains("fragprobe_gpu_memory_total_bytes{gpu=\"0\",uuid=\"GPU-"),
        "{body}"
    );
    assert!(!body.contains(&format!("pid=\"{pid}\"")), "{body}");
    // Only the file itself is left in the collector's directory.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    // A path that cannot be written is an error at once, not a warning forever.
    let o = fragprobe(&state)
        .args(["log", "--prometheus"])
        .arg(dir.join("missing/fragprobe.prom"))
        .arg(format!("--simulated-gpu={SPEC}"))
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains("cannot write") && err.contains("missing"),
        "{err}"
    );
}

#[test]
fn watch_puts_a_remapped_process_on_its_physical_gpu() {
    // CUDA_VISIBLE_DEVICES=1: the program's ordinal 0 is NVML's GPU 1.
    let spec = "2x4GiB";
    let state = fresh_state_path();
    let (held, ring_dir) = probed(
        &state,
        spec,
        "rings-remap",
        &[("CUDA_VISIBLE_DEVICES", "1")],
    );
    let o = fragprobe(&state)
        .args(["watch", "--once", &format!("--simulated-gpu={spec}")])
        .env("FRAGPROBE_RING_DIR", &ring_dir)
        .output()
        .unwrap();
    let (frame, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let used = format!("{}MiB", held.used / MIB);
    let gpu = |i: &str| {
        frame
            .lines()
            .find(|l| l.starts_with(&format!("{i} ")))
            .unwrap_or_else(|| panic!("{frame}"))
            .to_string()
    };
    assert!(gpu("0").contains("0MiB /   4096MiB"), "{frame}");
    assert!(gpu("1").contains(&format!("{used} /   4096MiB")), "{frame}");
    let row = row_of_pid(&frame, held.pid);
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[0], "1", "{row}");
    // The probe's objects of ordinal 0 are found on the GPU whose uuid it recorded.
    assert!(row.contains("82.0 MiB  3"), "{row}");
    held.release();
}

fn wait_rows(csv: &Path, what: &str, pred: impl Fn(&[LogRow]) -> bool) -> Vec<LogRow> {
    let t0 = Instant::now();
    loop {
        let rows = logfile::read(csv).map(|d| d.rows).unwrap_or_default();
        if pred(&rows) {
            return rows;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "timed out waiting for {what}: {rows:#?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn last_n_used(rows: &[LogRow], n: usize, used: u64) -> bool {
    rows.len() >= n && rows[rows.len() - n..].iter().all(|r| r.used == Some(used))
}

#[test]
fn log_writes_the_simulation_and_alerts_once_per_crossing() {
    let state = fresh_state_path();
    let csv = out_path("log.csv");
    let alerts = out_path("alerts.txt");
    let mut log = fragprobe(&state)
        .args(["log", "-n", "0.1", "--alert", "used>5%", "--nvml-lib"])
        .arg(nvml_library())
        .arg("--csv")
        .arg(&csv)
        .arg("--alert-cmd")
        .arg(format!(
            "printf '%s|%s|%s\\n' \"$FRAGPROBE_ALERT\" \"$FRAGPROBE_GPU\" \"$FRAGPROBE_VALUE\" >> '{}'",
            alerts.display()
        ))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_rows(&csv, "idle rows", |r| last_n_used(r, 3, 0));
    let a = Held::start(&state, SPEC, None);
    let busy = a.used;
    wait_rows(&csv, "first hold", |r| last_n_used(r, 3, busy));
    a.release();
    wait_rows(&csv, "release", |r| last_n_used(r, 3, 0));
    let b = Held::start(&state, SPEC, None);
    wait_rows(&csv, "second hold", |r| last_n_used(r, 3, busy));
    // A hang-up (closed terminal) does not stop it.
    // SAFETY: kill only sends a signal to our own child.
    assert_eq!(unsafe { libc::kill(log.id() as i32, libc::SIGHUP) }, 0);
    let n = logfile::read(&csv).unwrap().rows.len();
    wait_rows(&csv, "rows after SIGHUP", |r| r.len() >= n + 3);
    assert!(log.try_wait().unwrap().is_none(), "log died on SIGHUP");
    b.release();
    log.kill().unwrap();
    let out = log.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);

    let data = logfile::read(&csv).unwrap();
    assert!(data.skipped <= 1, "at most the line cut by the kill");
    for r in &data.rows {
        assert_eq!(
            (r.gpu, r.total, r.reserved),
            (0, Some(4 * GIB), Some(RESERVED)),
            "{r:?}"
        );
        let used = r.used.unwrap();
        assert!(used == 0 || used == busy, "{r:?}");
        assert_eq!(r.free, Some(4 * GIB - RESERVED - used));
        assert!(
            r.uuid.starts_with("GPU-") && r.name.contains("4GiB"),
            "{r:?}"
        );
        assert!(r.temp.is_some() && r.util_gpu.is_some());
    }
    let value = format!("{:.1}%", busy as f64 * 100.0 / (4 * GIB) as f64);
    let fired: Vec<&LogRow> = data.rows.iter().filter(|r| !r.alerts.is_empty()).collect();
    assert_eq!(fired.len(), 2, "two crossings, two alerts: {fired:?}");
    assert_eq!(err.matches(" ALERT gpu 0 ").count(), 2, "{err}");
    assert!(err.contains(&format!("used>5% (value {value})")), "{err}");
    let t0 = Instant::now();
    let lines = loop {
        let s = std::fs::read_to_string(&alerts).unwrap_or_default();
        if s.lines().count() >= 2 || t0.elapsed() > Duration::from_secs(10) {
            break s;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(lines, format!("used>5%|0|{value}\nused>5%|0|{value}\n"));
}

#[test]
fn doctor_on_a_live_gpu_names_the_leftover_process() {
    let state = fresh_state_path();
    let dir = out_path("leftover");
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("hold");
    let status = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(status.success());
    let out = dir.join("leak.out");
    // The shell starts the workload in the background and exits: its parent is gone. Its
    // stdin is the FIFO opened read-write (no blocking open, never end of file): it holds
    // until we end it by pid.
    let mut sh = Command::new("/bin/sh");
    sim_env_on(&mut sh, Some(SPEC));
    sh.env(ENV_STATE, &state).arg("-c").arg(format!(
        "'{}' --hold > '{}' 2>&1 <> '{}' & echo $!",
        build_scenario("leak").display(),
        out.display(),
        fifo.display()
    ));
    let o = sh.output().unwrap();
    let pid: u32 = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
    let end = || {
        // SAFETY: kill only sends a signal to the workload this test started.
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    };
    let t0 = Instant::now();
    while !std::fs::read_to_string(&out)
        .unwrap_or_default()
        .contains("FPSCN-HOLD")
    {
        if t0.elapsed() > Duration::from_secs(30) {
            end();
            panic!(
                "leftover never held: {}",
                std::fs::read_to_string(&out).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = fragprobe(&state)
        .args(["doctor", "--json", "--nvml-lib"])
        .arg(nvml_library())
        .output()
        .unwrap();
    let (json, err) = text(&o);
    end();
    assert_eq!(o.status.code(), Some(7), "{json}{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let r = &v["reports"][0];
    let other = r["evidence"]["others"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == pid)
        .expect("listed");
    assert_eq!(other["leftover"], true, "{other}");
    assert_eq!(other["used"], 82 * MIB + OVERHEAD);
    let f = &r["verdict"]["findings"][0];
    assert_eq!(f["cause"], "other_processes", "{f}");
    let acts: Vec<&str> = f["suggestions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["action"].as_str())
        .collect();
    assert!(
        acts.iter().any(|a| a.contains(&format!("kill {pid}"))),
        "{acts:?}"
    );
}

#[test]
fn doctor_on_a_log_sees_the_baseline_climb() {
    // Workloads that each keep their memory pile up: the baseline rises step by step.
    let state = fresh_state_path();
    let csv = out_path("climb.csv");
    let mut log = fragprobe(&state)
        .env(ENV_GPU, "1x16GiB")
        .args(["log", "-n", "0.05", "--nvml-lib"])
        .arg(nvml_library())
        .arg("--csv")
        .arg(&csv)
        .spawn()
        .unwrap();
    wait_rows(&csv, "first rows", |r| r.len() >= 5);
    let mut held = Vec::new();
    for k in 1..=9u64 {
        held.push(Held::start(&state, "1x16GiB", None));
        let busy = k * (82 * MIB + OVERHEAD);
        wait_rows(&csv, "the next step", |r| last_n_used(r, 6, busy));
    }
    log.kill().unwrap();
    log.wait().unwrap();
    for h in held {
        h.release();
    }
    let o = fragprobe(&state)
        .args(["doctor", "--json"])
        .arg(&csv)
        .output()
        .unwrap();
    let (json, err) = text(&o);
    assert_eq!(o.status.code(), Some(7), "{json}{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let f = &v["reports"][0]["verdict"]["findings"];
    assert!(
        f.as_array().unwrap().iter().any(|f| f["cause"] == "leak"),
        "{f}"
    );
}

fn causes(v: &serde_json::Value) -> Vec<String> {
    v["reports"][0]["verdict"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["cause"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn doctor_and_plot_on_a_recorded_fragmentation_oom() {
    let rec = record_scenario("frag_oom", &[], Some("1x1GiB"), &[]);
    let fails: Vec<_> = rec
        .lines
        .iter()
        .filter(|l| l.op == "alloc" && l.res != 0)
        .collect();
    assert_eq!(
        fails.len(),
        2,
        "filling the device, then the scattered request: {fails:?}"
    );
    let state = fresh_state_path();
    let o = fragprobe(&state)
        .args(["doctor", "--json"])
        .arg(&rec.trace)
        .output()
        .unwrap();
    let (json, err) = text(&o);
    assert_eq!(o.status.code(), Some(7), "{json}{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(causes(&v), vec!["peak_demand", "fragmentation"], "{json}");
    let f = &v["reports"][0]["evidence"]["failures"];
    assert_eq!(f[1]["request"], fails[1].size);
    // A C program, not PyTorch: no PyTorch settings are suggested.
    assert!(!json.contains("PYTORCH_CUDA_ALLOC_CONF"), "{json}");
    let o = fragprobe(&state)
        .args(["doctor"])
        .arg(&rec.trace)
        .output()
        .unwrap();
    let (out, _) = text(&o);
    assert!(
        out.contains("[fragmentation]") && out.contains("[peak_demand]"),
        "{out}"
    );

    let png = out_path("frag.png");
    let o = fragprobe(&state)
        .arg("plot")
        .arg(&rec.trace)
        .arg("-o")
        .arg(&png)
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("2 marker(s)"), "{err}");
    let pm = tiny_skia::Pixmap::decode_png(&std::fs::read(&png).unwrap()).unwrap();
    assert_eq!((pm.width(), pm.height()), (1200, 600));
}

/// Records `leak --hold --then-alloc 400` on a 1 GiB simulated GPU while another process
/// holds 382 MiB on it; the run's last request fails. Returns the trace and the run's pid.
fn record_beside_a_hog(state: &Path, name: &str, nvml_interval: &str) -> (std::path::PathBuf, u32) {
    use std::io::{BufRead, BufReader, Read};
    let trace = out_path(name);
    let mut child = fragprobe(state)
        .env(ENV_GPU, "1x1GiB")
        .args([
            "record",
            "--quiet",
            "--simulated-gpu=1x1GiB",
            "--nvml-interval",
            nvml_interval,
        ])
        .arg("-o")
        .arg(&trace)
        .arg("--")
        .arg(build_scenario("leak"))
        .args(["--hold", "--then-alloc", "400"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut text = String::new();
    while !text.contains("FPSCN-HOLD") {
        assert!(
            out.read_line(&mut text).unwrap() > 0,
            "ended before holding: {text}"
        );
    }
    // The run holds its memory: every sample from now on sees it (20 intervals of 50 ms).
    std::thread::sleep(Duration::from_secs(1));
    drop(child.stdin.take());
    out.read_to_string(&mut text).unwrap();
    assert!(child.wait().unwrap().success(), "{text}");
    let lines = parse_lines(&text);
    let last = lines.last().unwrap();
    assert_eq!(
        (last.op.as_str(), last.size, last.res),
        ("alloc", 400 * MIB, 2),
        "{text}"
    );
    (trace, last.pid)
}

#[test]
fn recorded_nvml_samples_let_doctor_tell_another_process_from_the_run() {
    use fragprobe_shared::format::EventKind;
    use fragprobe_tests::probe::read_trace;
    let state = fresh_state_path();
    let hog = Held::start(&state, "1x1GiB", None);
    let (trace, pid) = record_beside_a_hog(&state, "nvml-samples.fpt", "0.05");
    let (bare, _) = record_beside_a_hog(&state, "nvml-none.fpt", "0");
    hog.release();

    let recs = read_trace(&trace);
    let failed = recs
        .iter()
        .find(|r| r.kind() == Some(EventKind::Alloc) && !r.ok())
        .expect("the failed request");
    let samples: Vec<_> = recs
        .iter()
        .filter(|r| r.kind() == Some(EventKind::NvmlSample))
        .collect();
    assert!(samples.len() >= 5, "{} samples", samples.len());
    assert!(samples
        .iter()
        .all(|r| r.pid == pid && r.device == 0 && r.aux == GIB));
    assert!(samples.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns));
    // The last sample before the failure: the run's own figure (its allocations and its
    // context) and the device's (the run and the other process).
    let last = samples
        .iter()
        .rfind(|r| r.ts_ns <= failed.ts_ns)
        .expect("a sample before the failure");
    assert_eq!(last.aux2, 82 * MIB + OVERHEAD);
    assert_eq!(last.size, 2 * (82 * MIB + OVERHEAD));
    assert!(read_trace(&bare)
        .iter()
        .all(|r| r.kind() != Some(EventKind::NvmlSample)));

    let doctor = |t: &Path| {
        let o = fragprobe(&state)
            .args(["doctor", "--json"])
            .arg(t)
            .output()
            .unwrap();
        let (json, err) = text(&o);
        assert_eq!(o.status.code(), Some(7), "{json}{err}");
        serde_json::from_str::<serde_json::Value>(&json).unwrap()
    };
    // With NVML's figures, the 382 MiB beside the run are another process's…
    let v = doctor(&trace);
    assert_eq!(causes(&v), vec!["other_processes"], "{v}");
    assert_eq!(
        v["reports"][0]["evidence"]["others_unattributed"],
        82 * MIB + OVERHEAD
    );
    // …without them, only cuMemGetInfo's figure is there, and it is put down to the run.
    let v = doctor(&bare);
    assert_eq!(causes(&v), vec!["peak_demand"], "{v}");

    let o = fragprobe(&state)
        .args(["report", "--json"])
        .arg(&trace)
        .output()
        .unwrap();
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let n = &r["devices"][0]["nvml"];
    assert_eq!(n["peak_used"], 2 * (82 * MIB + OVERHEAD), "{n}");
    assert_eq!(n["total"], GIB);
}

/// CPU cost of `log` at 1 Hz and 10 Hz over 10 s each, with one process on the GPU.
/// Not a pass/fail timing test: run with `--ignored --nocapture` to print the figures.
#[test]
#[ignore = "measurement, 20 s: cargo test -p fragprobe-viewer --test mon_sim -- --ignored --nocapture"]
fn log_cpu_cost() {
    let state = fresh_state_path();
    let held = Held::start(&state, SPEC, None);
    for (interval, count) in [("1", "10"), ("0.1", "100")] {
        let csv = out_path("cost.csv");
        let t0 = Instant::now();
        let child = fragprobe(&state)
            .args(["log", "-n", interval, "--count", count, "--nvml-lib"])
            .arg(nvml_library())
            .arg("--csv")
            .arg(&csv)
            .spawn()
            .unwrap();
        let (cpu, ok) = wait_cpu(child);
        let wall = t0.elapsed().as_secs_f64();
        assert!(ok);
        println!(
            "log -n {interval} --count {count}: {:.3} s CPU over {wall:.2} s = {:.2} % of a core",
            cpu,
            cpu / wall * 100.0
        );
        assert_eq!(
            logfile::read(&csv).unwrap().rows.len(),
            count.parse::<usize>().unwrap()
        );
    }
    held.release();
}

fn wait_cpu(child: Child) -> (f64, bool) {
    let pid = child.id() as i32;
    let mut status = 0;
    // SAFETY: rusage is plain old data; wait4 fills it for our own child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child; the pointers refer to live locals.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    assert_eq!(r, pid);
    std::mem::forget(child);
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (
        t(ru.ru_utime) + t(ru.ru_stime),
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
    )
}
