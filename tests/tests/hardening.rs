//! What a new user and a fuzzer found: standard output that goes away, FIFOs and truncated
//! rings where rings live, and bad arguments that used to be accepted. Each test fails on
//! the code before its fix.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use fragprobe_tests::probe::{
    export_torch_snapshot, fragprobe, out_path, probe_library, record_scenario,
};
use fragprobe_tests::scratch::Scratch;
use fragprobe_tests::sim::{build_scenario, sim_env_on};

/// The write end of a pipe whose read end is already closed: every write gets EPIPE.
fn closed_pipe() -> Stdio {
    let (read, write) = std::io::pipe().unwrap();
    drop(read);
    Stdio::from(write)
}

fn dev_full() -> Stdio {
    Stdio::from(
        std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap(),
    )
}

fn stderr_of(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Waits for `child` at most `secs`, killing it (and failing) if it hangs.
fn output_within(mut child: Child, secs: u64, what: &str) -> Output {
    let t = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if t.elapsed() > Duration::from_secs(secs) {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!("{what} hung for {secs} s: {}", stderr_of(&o));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn standard_output_that_goes_away_is_never_a_panic() {
    let rec = record_scenario("frag_oom", &[], Some("1x1GiB"), &[]);
    let trace = rec.trace.clone();
    let pickle = out_path("out.pickle");
    export_torch_snapshot(&trace, &pickle);
    let t = trace.to_str().unwrap();
    let p = pickle.to_str().unwrap();
    let commands: Vec<Vec<&str>> = vec![
        vec!["report", t],
        vec!["report", "--json", t],
        vec!["compare", t, t],
        vec!["compare", "--json", t, t],
        vec!["simulate", p],
        vec!["simulate", "--json", p],
        vec!["import", p],
        vec!["import", "--json", p],
        vec!["doctor", t],
        vec!["doctor", "--json", t],
    ];
    for args in &commands {
        // The code it exits with when its output is read.
        let normal = fragprobe().args(args).output().unwrap();
        assert!(
            !stderr_of(&normal).contains("panicked"),
            "{args:?}: {}",
            stderr_of(&normal)
        );
        let gone = fragprobe()
            .args(args)
            .stdout(closed_pipe())
            .output()
            .unwrap();
        assert_eq!(
            gone.status.code(),
            normal.status.code(),
            "{args:?} with a closed pipe: {}",
            stderr_of(&gone)
        );
        assert!(
            !stderr_of(&gone).contains("panicked") && !stderr_of(&gone).contains("standard output"),
            "{args:?} ends quietly on a closed pipe: {}",
            stderr_of(&gone)
        );
        let full = fragprobe().args(args).stdout(dev_full()).output().unwrap();
        let err = stderr_of(&full);
        assert_eq!(full.status.code(), Some(9), "{args:?} > /dev/full: {err}");
        assert!(
            err.contains("cannot write to standard output") && !err.contains("panicked"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn run_passes_the_commands_status_through_whatever_becomes_of_its_output() {
    for out in [dev_full(), closed_pipe()] {
        let o = fragprobe()
            .args([
                "run",
                "--simulated-gpu",
                "--no-record",
                "--json",
                "--",
                "sh",
                "-c",
                "exit 42",
            ])
            .stdout(out)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(42), "{}", stderr_of(&o));
        assert!(!stderr_of(&o).contains("panicked"), "{}", stderr_of(&o));
    }
}

#[test]
fn watch_once_that_cannot_write_says_so() {
    let o = fragprobe()
        .args(["watch", "--simulated-gpu", "--once"])
        .stdout(dev_full())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(9), "{}", stderr_of(&o));
    assert!(stderr_of(&o).contains("cannot write to standard output"));
    let o = fragprobe()
        .args(["watch", "--simulated-gpu", "--once"])
        .stdout(closed_pipe())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr_of(&o));
}

#[test]
fn a_malformed_simulated_gpu_spec_is_a_usage_error_before_anything_runs() {
    let dir = Scratch::at(out_path("bad-spec"));
    let marker = dir.join("ran");
    let touch = format!("touch {}", marker.display());
    for spec in ["garbage", "0x16GiB", "17x1GiB", "1x1B", "-1x80GiB", ","] {
        let flag = format!("--simulated-gpu={spec}");
        let trace = dir.join("t.fpt");
        let t = trace.to_str().unwrap();
        let runs: Vec<Vec<&str>> = vec![
            vec!["run", &flag, "--", "sh", "-c", &touch],
            vec!["record", "-o", t, &flag, "--", "sh", "-c", &touch],
            vec![
                "sweep",
                &flag,
                "--alloc-conf",
                "default",
                "--out-dir",
                t,
                "--",
                "sh",
                "-c",
                &touch,
            ],
            vec!["watch", &flag, "--once"],
            vec!["log", &flag, "--count", "1"],
            vec!["attach", &flag],
        ];
        for args in runs {
            let o = fragprobe().current_dir(&*dir).args(&args).output().unwrap();
            let err = stderr_of(&o);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
            assert!(
                err.contains("invalid simulated GPU spec"),
                "{args:?}: {err}"
            );
            assert!(!marker.exists(), "{args:?} started the command");
            assert!(!trace.exists(), "{args:?} left a trace");
        }
    }
}

#[test]
fn simulate_and_watch_refuse_what_they_cannot_honour() {
    let rec = record_scenario("frag_oom", &[], Some("1x1GiB"), &[]);
    let pickle = out_path("sim.pickle");
    let o = fragprobe()
        .args(["export", "--format", "torch-snapshot"])
        .arg(&rec.trace)
        .arg("-o")
        .arg(&pickle)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr_of(&o));
    let p = pickle.to_str().unwrap();
    let cases: [(&[&str], i32, &str); 5] = [
        (
            &["simulate", p, "--alloc-conf", "garbage"],
            4,
            "nothing was run",
        ),
        (
            &["simulate", p, "--capacity", "18446744073709551616"],
            2,
            "too large",
        ),
        (&["simulate", p, "--device", "99"], 2, "has no device 99"),
        (
            &["watch", "--simulated-gpu", "--once", "-n", "0.0000001"],
            2,
            "10 ms",
        ),
        (
            &["log", "--simulated-gpu", "--count", "1", "-n", "0.001"],
            2,
            "10 ms",
        ),
    ];
    for (args, code, says) in cases {
        let o = fragprobe().args(args).output().unwrap();
        let err = stderr_of(&o);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// A `sleep` that stands for a live process of ours.
fn sleeper() -> Child {
    Command::new("sleep").arg("30").spawn().unwrap()
}

fn mkfifo(path: &Path) {
    assert!(Command::new("mkfifo").arg(path).status().unwrap().success());
}

#[test]
fn a_fifo_named_like_a_ring_hangs_nothing() {
    let dir = Scratch::at(out_path("fifo-ring"));
    let mut live = sleeper();
    mkfifo(&dir.join(format!("{}.ring", live.id())));
    mkfifo(&dir.join("2000000000.ring"));
    for args in [
        vec!["attach".to_string()],
        vec!["attach".into(), live.id().to_string()],
    ] {
        let child = fragprobe()
            .args(&args)
            .env("FRAGPROBE_RING_DIR", &*dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let o = output_within(child, 20, &format!("{args:?}"));
        assert_eq!(o.status.code(), Some(3), "{args:?}: {}", stderr_of(&o));
    }
    // `run` sweeps the per-user directories before the command starts.
    let child = fragprobe()
        .args(["run", "--simulated-gpu", "--no-record", "--", "true"])
        .env("FRAGPROBE_RING_DIR", &*dir)
        .env("XDG_RUNTIME_DIR", &*dir)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let o = output_within(child, 30, "run");
    assert!(o.status.success(), "{}", stderr_of(&o));
    let _ = live.kill();
    let _ = live.wait();
}

#[test]
fn a_fifo_where_a_trace_is_expected_gets_a_clear_message() {
    let dir = Scratch::at(out_path("fifo-trace"));
    let fifo = dir.join("t.fpt");
    mkfifo(&fifo);
    let f = fifo.to_str().unwrap();
    for args in [
        vec!["report", f],
        vec!["compare", f, f],
        vec!["export", "--format", "csv", f, "-o", "-"],
    ] {
        let child = fragprobe()
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let o = output_within(child, 20, &format!("{args:?}"));
        let err = stderr_of(&o);
        assert_eq!(o.status.code(), Some(3), "{args:?}: {err}");
        assert!(
            err.contains("FIFO") && err.contains("not a regular file"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn a_ring_with_a_corrupt_header_fails_attach_once_and_leaves_no_trace() {
    let dir = Scratch::at(out_path("corrupt-ring"));
    let mut live = sleeper();
    let mut bytes = vec![0u8; 1 << 20];
    bytes[..8].copy_from_slice(b"FRAGRING");
    bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
    bytes[12..16].copy_from_slice(&7u32.to_le_bytes()); // header_len: nonsense
    std::fs::write(dir.join(format!("{}.ring", live.id())), &bytes).unwrap();
    let trace = dir.join("attach.fpt");
    let o = fragprobe()
        .args(["attach", &live.id().to_string(), "-o"])
        .arg(&trace)
        .env("FRAGPROBE_RING_DIR", &*dir)
        .output()
        .unwrap();
    let err = stderr_of(&o);
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    let first = err.find(".ring").unwrap();
    assert!(
        !err[first + 5..].contains(".ring:"),
        "the cause is said once: {err}"
    );
    assert!(!trace.exists(), "a failed attach leaves no trace behind");
    let _ = live.kill();
    let _ = live.wait();
}

#[test]
fn a_ring_truncated_while_attached_is_reported_not_a_sigbus() {
    let dir = Scratch::at(out_path("truncated-ring"));
    let mut cmd = Command::new(build_scenario("leak"));
    sim_env_on(&mut cmd, None);
    let mut child = cmd
        .arg("--hold")
        .env("LD_PRELOAD", probe_library())
        .env("FRAGPROBE_RING_DIR", &*dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for l in lines.by_ref() {
        if l.unwrap().starts_with("FPSCN-HOLD") {
            break;
        }
    }
    let ring: PathBuf = std::fs::read_dir(&*dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "ring"))
        .expect("the probe's ring");
    let trace = dir.join("attach.fpt");
    let attach = fragprobe()
        .args(["attach", &child.id().to_string(), "-o"])
        .arg(&trace)
        .env("FRAGPROBE_RING_DIR", &*dir)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    std::fs::OpenOptions::new()
        .write(true)
        .open(&ring)
        .unwrap()
        .set_len(4096)
        .unwrap();
    let o = output_within(attach, 30, "attach of a truncated ring");
    drop(child.stdin.take());
    let _ = child.wait();
    let err = stderr_of(&o);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(o.status.signal(), None, "attach died of a signal: {err}");
    assert!(
        err.contains("truncated") && err.contains("damaged"),
        "{err}"
    );
    assert!(trace.exists(), "what was read before is kept");
}
