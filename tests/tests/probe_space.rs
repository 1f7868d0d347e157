//! Short of space, nothing crashes and nothing is silently lost: a ring that does not fit
//! turns the probe off (never a SIGBUS or SIGXFSZ in the host), `fragprobe run` puts its
//! rings where one fits, and a trace that fills its disk keeps what it has and says so.
//!
//! The small file systems are tmpfs mounts inside a private user + mount namespace
//! (`unshare -Urm`), so no privilege is needed and nothing outside the test sees them. A
//! machine that forbids such namespaces (some containers) skips those tests, saying so.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use fragprobe_shared::trace::Trace;
use fragprobe_tests::probe::{fragprobe, op_of, out_path, probe_library, read_trace};
use fragprobe_tests::scratch::Scratch;
use fragprobe_tests::sim::{build_scenario, sim_env_on};

/// A pid above any kernel's pid_max: no process has it.
const DEAD: u32 = 2_000_000_000;

/// The scenario, preloaded, with rings in `ring_dir`.
fn preloaded(ring_dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(build_scenario("threads16"));
    sim_env_on(&mut cmd, None);
    cmd.env("LD_PRELOAD", probe_library())
        .env("FRAGPROBE_RING_DIR", ring_dir)
        .env_remove("FRAGPROBE_RING_CAPACITY")
        .env_remove("FRAGPROBE_LIVE_CAPACITY")
        .args(args);
    cmd
}

fn fresh_dir(name: &str) -> Scratch {
    Scratch::at(out_path(name))
}

/// Runs `inner` inside a private user + mount namespace where `mount` is a fresh tmpfs of
/// `mib` MiB and `/dev/shm` a private 1 GiB one: `fragprobe run` then picks its ring
/// directory there, before ever reaching `/tmp`, so the test neither sees nor leaves
/// anything in the machine's per-user ring directories, whoever runs it (`/tmp` itself
/// stays: the checkout may live there). Afterwards it
/// copies every file left in `mount` into `keep`. `None` (after saying why) where this
/// machine does not allow such namespaces.
fn in_small_tmpfs(mount: &Path, mib: u32, keep: &Path, inner: &Command) -> Option<Output> {
    let probe = Command::new("unshare")
        .args(["-Urm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs \"$0\""])
        .arg(mount)
        .output();
    match probe {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            eprintln!(
                "SKIPPED: no private mount namespace here (unshare -Urm: {})",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            return None;
        }
        Err(e) => {
            eprintln!("SKIPPED: no unshare here ({e})");
            return None;
        }
    }
    let script = format!(
        "mount -t tmpfs -o size={mib}m tmpfs \"$0\" && mount -t tmpfs -o size=1g tmpfs /dev/shm || exit 99; \"$@\"; rc=$?; cp -r \"$0\"/. \"$KEEP\"/ 2>/dev/null; exit $rc"
    );
    let mut cmd = Command::new("unshare");
    cmd.args(["-Urm", "sh", "-c", &script])
        .arg(mount)
        .arg(inner.get_program())
        .args(inner.get_args())
        .env("KEEP", keep);
    copy_env(inner, &mut cmd);
    let out = cmd.output().expect("run unshare");
    assert_ne!(out.status.code(), Some(99), "mounting the tmpfs failed");
    Some(out)
}

/// `inner` run by `sh -c "PREFIX; exec CMD…"`, with `inner`'s environment.
fn after_shell(prefix: &str, inner: &Command) -> Command {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", &format!("{prefix}; exec \"$@\""), "sh"])
        .arg(inner.get_program())
        .args(inner.get_args());
    copy_env(inner, &mut cmd);
    cmd
}

/// Gives `to` what `from` sets and removes in its environment.
fn copy_env(from: &Command, to: &mut Command) {
    for (k, v) in from.get_envs() {
        match v {
            Some(v) => to.env(k, v),
            None => to.env_remove(k),
        };
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn a_ring_over_the_file_size_limit_turns_the_probe_off_not_the_host() {
    let dir = fresh_dir("fsize-rings");
    let inner = preloaded(&dir, &["100", "--quiet"]);
    // Growing a file past RLIMIT_FSIZE raises SIGXFSZ, which would kill the host.
    let out = after_shell("ulimit -f 1024", &inner).output().unwrap();
    let err = text(&out.stderr);
    assert!(out.status.success(), "the host must run on: {out:?}");
    assert!(
        text(&out.stdout).contains("FPSCN-SUMMARY allocs=1600 frees=1600"),
        "{out:?}"
    );
    assert!(
        err.contains("fragprobe: a ring of 101 MiB is over this process's file-size limit (ulimit -f); probe off"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "no ring file was left"
    );
}

#[test]
fn a_ring_that_does_not_fit_its_directory_turns_the_probe_off_not_the_host() {
    let mnt = fresh_dir("small-ring-dir");
    let keep = fresh_dir("small-ring-dir-kept");
    // 88 MiB of records and 12 MiB of live table into 8 MiB. With a sparse ring file the
    // host died of SIGBUS once its stores passed 8 MiB.
    let mut big = preloaded(&mnt, &["20000", "--quiet"]);
    big.env("FRAGPROBE_RING_CAPACITY", "1048576");
    let Some(out) = in_small_tmpfs(&mnt, 8, &keep, &big) else {
        return;
    };
    let err = text(&out.stderr);
    assert!(out.status.success(), "the host must run on: {out:?}");
    assert!(
        text(&out.stdout).contains("FPSCN-SUMMARY allocs=320000 frees=320000"),
        "{out:?}"
    );
    let want = format!(
        "fragprobe: cannot make a ring of 101 MiB in {} (no space left on device); probe off.",
        mnt.display()
    );
    assert!(err.contains(&want), "{err}");
    assert!(err.contains("FRAGPROBE_RING_CAPACITY"), "{err}");
    assert_eq!(
        std::fs::read_dir(&keep).unwrap().count(),
        0,
        "the half-made ring file was removed"
    );

    // The same directory takes a ring that fits, and the probe records into it.
    let mut small = preloaded(&mnt, &["200", "--quiet"]);
    small
        .env("FRAGPROBE_RING_CAPACITY", "16384")
        .env("FRAGPROBE_LIVE_CAPACITY", "4096");
    let out = in_small_tmpfs(&mnt, 8, &keep, &small).expect("worked a moment ago");
    assert!(out.status.success(), "{out:?}");
    assert!(!text(&out.stderr).contains("probe off"), "{out:?}");
    let rings = fragprobe_shared::ring::list_rings(&keep);
    assert_eq!(rings.len(), 1, "{rings:?}");
    let ring = fragprobe_shared::ring::RingFile::open(&rings[0].path).unwrap();
    assert!(
        ring.tail() >= 16 * 200 * 2,
        "every call was written: {}",
        ring.tail()
    );
}

#[test]
fn fragprobe_run_puts_its_rings_where_one_fits_and_says_so() {
    let mnt = fresh_dir("small-xdg");
    let keep = fresh_dir("small-xdg-kept");
    let trace = out_path("small-xdg.fpt");
    let mut cmd = fragprobe();
    cmd.arg("record")
        .arg("-o")
        .arg(&trace)
        .args(["--simulated-gpu", "--quiet", "--"])
        .arg(build_scenario("threads16"))
        .args(["2000", "--quiet"])
        .env("XDG_RUNTIME_DIR", &mnt)
        .env("FRAGPROBE_RING_CAPACITY", "1048576");
    let Some(out) = in_small_tmpfs(&mnt, 8, &keep, &cmd) else {
        return;
    };
    let err = text(&out.stderr);
    assert!(out.status.success(), "{out:?}");
    let passed_over = format!(
        "{}/fragprobe: 8 MiB free of 8 MiB, too little for a 101 MiB ring",
        mnt.display()
    );
    assert!(err.contains("fragprobe: rings go to "), "{err}");
    assert!(err.contains(&passed_over), "{err}");
    assert!(!err.contains("probe off"), "{err}");
    let calls = read_trace(&trace)
        .iter()
        .filter(|r| op_of(r).is_some())
        .count();
    assert_eq!(calls, 16 * 2000 * 2, "every call is in the trace");
    let _ = std::fs::remove_file(&trace);
}

#[test]
fn a_trace_that_fills_its_disk_keeps_what_it_has_and_says_so() {
    let mnt = fresh_dir("small-trace-dir");
    let keep = fresh_dir("small-trace-dir-kept");
    let mut cmd = fragprobe();
    cmd.arg("record")
        .arg("-o")
        .arg(mnt.join("t.fpt"))
        .args(["--simulated-gpu", "--"])
        .arg(build_scenario("threads16"))
        .args(["20000", "--quiet"])
        .env("FRAGPROBE_RING_CAPACITY", "1048576");
    // 640 000 calls make a trace of about 4 MiB; it gets 1 MiB.
    let Some(out) = in_small_tmpfs(&mnt, 1, &keep, &cmd) else {
        return;
    };
    let err = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(8),
        "exit 8: the command succeeded, its trace is incomplete: {out:?}"
    );
    assert!(
        err.contains("fragprobe: writing the trace failed after about"),
        "said when it happened: {err}"
    );
    let end = format!(
        "fragprobe: the trace {} is incomplete: writing it failed (No space left on device (os error 28)); it holds the first ",
        mnt.join("t.fpt").display()
    );
    assert!(err.contains(&end), "said again at the end: {err}");
    // The summary (on stderr) still covers the whole run: every allocation was freed.
    assert!(err.contains("live at exit 0 B (0 objects)"), "{err}");

    // What reached the disk opens, and is the start of the run.
    let kept = keep.join("t.fpt");
    let t = Trace::open(&kept).unwrap_or_else(|e| panic!("open {}: {e}", kept.display()));
    let n = t.len();
    assert!(n > 1000 && n < 640_000, "a prefix of the run: {n} events");
    let said = err
        .split("it holds the first ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse::<u64>().ok());
    assert_eq!(said, Some(n), "the count it gave is the count read back");
    let report = fragprobe().arg("report").arg(&kept).output().unwrap();
    assert!(report.status.success(), "{report:?}");
}

/// A fresh `XDG_RUNTIME_DIR` and the per-user ring directory in it, `<xdg>/fragprobe`,
/// made 0700 as the probe makes it.
fn per_user_dir(name: &str) -> (Scratch, PathBuf) {
    let xdg = fresh_dir(name);
    let dir = xdg.join("fragprobe");
    std::fs::create_dir(&dir).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    (xdg, dir)
}

/// The scenario (10 pairs a thread), preloaded with no `FRAGPROBE_RING_DIR`, so its probe
/// takes the per-user directory under `xdg`.
fn run_per_user(xdg: &Path) -> Output {
    let mut cmd = preloaded(xdg, &["10", "--quiet"]);
    cmd.env_remove("FRAGPROBE_RING_DIR")
        .env("XDG_RUNTIME_DIR", xdg);
    cmd.output().unwrap()
}

#[test]
fn each_new_ring_clears_out_the_rings_of_processes_that_are_gone() {
    let (xdg, dir) = per_user_dir("sweep");
    let dead = DEAD;
    let plant = |name: String| {
        let p = dir.join(name);
        std::fs::write(&p, b"a ring").unwrap();
        p
    };
    let orphan = plant(format!("{dead}-5.ring"));
    // A dead pid whose file is still locked: a live owner in another pid namespace.
    let elsewhere = plant(format!("{}-6.ring", dead + 1));
    let held = std::fs::File::open(&elsewhere).unwrap();
    held.lock().unwrap();
    // A live pid without a lock: a host program that closed every descriptor.
    let closed_fds = plant(format!("{}-7.ring", std::process::id()));
    let other = plant("notes.txt".into());
    // Rings left half made: one by a maker that crashed two minutes ago, one that may be
    // in the moment between its creation and its maker's lock (in another pid namespace).
    let crashed = plant(format!("{dead}-8.ring.new"));
    std::fs::File::options()
        .write(true)
        .open(&crashed)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(120))
        .unwrap();
    let making = plant(format!("{dead}-9.ring.new"));

    let run = || {
        let out = run_per_user(&xdg);
        assert!(out.status.success(), "{out:?}");
        assert!(text(&out.stderr).is_empty(), "{out:?}");
    };
    let rings = || -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "ring"))
            .collect();
        v.sort();
        v
    };
    run();
    assert!(!orphan.exists(), "the dead process's ring is gone");
    assert!(elsewhere.exists(), "a locked ring stays");
    assert!(closed_fds.exists(), "a live pid's ring stays");
    assert!(other.exists(), "other files stay");
    assert!(!crashed.exists(), "a stale half-made ring is gone");
    assert!(making.exists(), "a ring maybe being made stays");
    let first: Vec<PathBuf> = rings()
        .into_iter()
        .filter(|p| p != &elsewhere && p != &closed_fds)
        .collect();
    assert_eq!(first.len(), 1, "the run's own ring: {first:?}");
    assert!(
        fragprobe_shared::ring::RingFile::open(&first[0])
            .unwrap()
            .tail()
            > 0
    );

    run();
    assert!(
        !first[0].exists(),
        "the first run's ring went with the second run"
    );
    assert_eq!(rings().len(), 3, "{:?}", rings());
    drop(held);
    run();
    assert!(
        !elsewhere.exists(),
        "unlocked, and its pid is gone: cleared"
    );
}

#[test]
fn a_backlog_of_dead_rings_drains_a_few_per_new_process() {
    let (xdg, dir) = per_user_dir("sweep-backlog");
    let dead = DEAD;
    for i in 0..12 {
        std::fs::write(dir.join(format!("{dead}-{i}.ring")), b"a ring").unwrap();
    }
    let count = || std::fs::read_dir(&dir).unwrap().count();
    let run = || assert!(run_per_user(&xdg).status.success());
    // The first call of a process pays for at most 8 removals (about 2 ms each on tmpfs).
    run();
    assert_eq!(count(), 12 - 8 + 1, "8 removed, its own ring added");
    run();
    assert_eq!(count(), 1, "the rest and the first run's ring removed");
}

#[test]
fn a_host_without_standard_streams_cannot_print_into_its_ring() {
    let dir = fresh_dir("no-stdio");
    let inner = preloaded(&dir, &["200"]);
    // The scenario prints a line per call to stdout: were the ring file given fd 1, every
    // line would land on the ring's header.
    let _ = after_shell("exec 1>&- 2>&-", &inner).output().unwrap();
    let rings = fragprobe_shared::ring::list_rings(&dir);
    assert_eq!(rings.len(), 1, "{rings:?}");
    let ring = fragprobe_shared::ring::RingFile::open(&rings[0].path)
        .unwrap_or_else(|e| panic!("the ring is intact: {e}"));
    assert!(ring.tail() >= 16 * 200 * 2, "{}", ring.tail());
}
