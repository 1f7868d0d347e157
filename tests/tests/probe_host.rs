//! The probe never hurts its host: a full ring drops and counts but never blocks, children
//! that never use CUDA get nothing, `FRAGPROBE_DISABLE=1` turns it off, a process attached
//! late still gets an exact map, and the other doors (cudarc via `dlsym`, the real cudart's
//! `cuGetProcAddress_v2` requests) are seen.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use fragprobe_shared::format::EventKind;
use fragprobe_shared::live::resync_records;
use fragprobe_shared::ring::{list_rings, RingFile};
use fragprobe_tests::probe::{fragprobe, out_path, probe_library, read_trace, report_json};
use fragprobe_tests::sim::{
    artifact_dir, build_scenario, is_child, sim_env_on, workspace_root, ENV_CHILD,
};

/// A scenario started directly under LD_PRELOAD (no `fragprobe` consumer), rings in `dir`.
fn preloaded(scenario: &str, dir: &Path) -> Command {
    let mut cmd = Command::new(build_scenario(scenario));
    sim_env_on(&mut cmd, None);
    std::fs::create_dir_all(dir).unwrap();
    cmd.env("LD_PRELOAD", probe_library())
        .env("FRAGPROBE_RING_DIR", dir);
    cmd
}

fn fresh_dir(name: &str) -> PathBuf {
    let d = out_path(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn a_full_ring_drops_and_counts_and_never_blocks() {
    let dir = fresh_dir("full-ring");
    // Build the command (which may build the probe and the scenario) before timing the run.
    let mut cmd = preloaded("threads16", &dir);
    cmd.args(["2000", "--quiet"])
        .env("FRAGPROBE_RING_CAPACITY", "64");
    let t = std::time::Instant::now();
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(t.elapsed().as_secs() < 60, "the host was not blocked");
    let rings = list_rings(&dir);
    assert_eq!(rings.len(), 1, "{rings:?}");
    let ring = RingFile::open(&rings[0].path).unwrap();
    // Nobody drained: exactly the capacity was delivered, everything else was counted.
    assert_eq!(ring.tail(), 64);
    let calls = 16 * 2000 * 2;
    assert!(
        ring.dropped() >= calls + 3 - 64,
        "dropped {} of at least {}",
        ring.dropped(),
        calls + 3
    );
    // The live table is exact even though the ring overflowed: nothing is live at exit.
    assert_eq!(ring.live().totals(), (0, 0));
    let resync = resync_records(&ring);
    assert!(
        resync
            .iter()
            .all(|r| r.kind != EventKind::ResyncEntry as u16),
        "{resync:?}"
    );
}

#[test]
fn processes_that_never_use_cuda_get_no_ring_and_no_output() {
    let dir = fresh_dir("no-cuda");
    for argv in [
        &["sh", "-c", "true"][..],
        &["cc", "--version"][..],
        &["ls", "/"][..],
    ] {
        let out = Command::new(argv[0])
            .args(&argv[1..])
            .env("LD_PRELOAD", probe_library())
            .env("FRAGPROBE_RING_DIR", &dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{argv:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).is_empty(),
            "{argv:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "no ring files");
}

#[test]
fn fragprobe_disable_turns_the_probe_off() {
    let dir = fresh_dir("disabled");
    let out = preloaded("door_link", &dir)
        .env("FRAGPROBE_DISABLE", "1")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("op=alloc"),
        "the program still works"
    );
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "no ring files");
}

#[test]
fn attach_late_gets_an_exact_map_even_after_drops() {
    let dir = fresh_dir("attach");
    // A tiny ring: the process's first events overflow it before anyone attaches.
    let mut child = preloaded("leak", &dir)
        .arg("--hold")
        .env("FRAGPROBE_RING_CAPACITY", "8")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut printed = Vec::new();
    for l in lines.by_ref() {
        let l = l.unwrap();
        if l.starts_with("FPSCN-HOLD") {
            break;
        }
        printed.push(l);
    }
    let trace = out_path("attach.fpt");
    let attach = fragprobe()
        .args(["attach", &child.id().to_string(), "-o"])
        .arg(&trace)
        .env("FRAGPROBE_RING_DIR", &dir)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    drop(child.stdin.take()); // let the process finish
    assert!(child.wait().unwrap().success());
    let out = attach.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = report_json(&trace);
    // 64 MiB plain + 16 MiB async + 2 MiB VMM handle, never freed.
    assert_eq!(v["leaks"]["bytes"], (64u64 + 16 + 2) << 20, "{v:#}");
    assert_eq!(v["events"]["anomalies"], 0);
    let _ = printed;
}

#[test]
fn getproc_door_answers_every_real_cudart_request_like_the_driver() {
    let prog = artifact_dir().join("getproc_list");
    let st = Command::new("cc")
        .arg(workspace_root().join("tests/c/getproc_list.c"))
        .arg("-o")
        .arg(&prog)
        .arg("-ldl")
        .status()
        .unwrap();
    assert!(st.success());
    let list = workspace_root().join("cuda/fixtures/cudart-12.8-getproc-requests.txt");
    let run = |probe: bool| {
        let mut cmd = Command::new(&prog);
        sim_env_on(&mut cmd, None);
        cmd.arg(&list);
        if probe {
            cmd.env("LD_PRELOAD", probe_library())
                .env("FRAGPROBE_RING_DIR", fresh_dir("getproc"));
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let plain = run(false);
    let probed = run(true);
    let plain: Vec<&str> = plain.lines().collect();
    let probed: Vec<&str> = probed.lines().collect();
    assert_eq!(plain.len(), 419, "every request answered");
    assert_eq!(plain.len(), probed.len());
    let hooked_bases = [
        "cuMemAlloc",
        "cuMemAllocPitch",
        "cuMemFree",
        "cuMemGetInfo",
        "cuMemAllocManaged",
        "cuMemAllocAsync",
        "cuMemAllocFromPoolAsync",
        "cuMemFreeAsync",
        "cuMemPoolTrimTo",
        "cuMemAddressReserve",
        "cuMemAddressFree",
        "cuMemCreate",
        "cuMemRelease",
        "cuMemMap",
        "cuMemUnmap",
        "cuGetProcAddress",
        "cuIpcOpenMemHandle",
        "cuIpcCloseMemHandle",
        "cuMemImportFromShareableHandle",
        "cuMemPoolImportPointer",
    ];
    let mut wrapped = 0;
    for (a, b) in plain.iter().zip(&probed) {
        // Same name, version, flags, result, status and found-ness with and without the probe.
        let strip = |s: &str| s.rsplit_once(" probe=").map(|x| x.0.to_string()).unwrap();
        assert_eq!(strip(a), strip(b));
        let name = a.split_whitespace().nth(1).unwrap();
        let found = a.contains("found=1");
        let expect_hook = found && hooked_bases.contains(&name);
        assert_eq!(b.ends_with("probe=1"), expect_hook, "{b}");
        assert!(a.ends_with("probe=0"));
        wrapped += usize::from(expect_hook);
    }
    for must in [
        "cuMemAlloc 3020 0",
        "cuMemFree 3020 0",
        "cuMemAllocAsync 11020 2",
        "cuMemFreeAsync 11020 2",
        "cuGetProcAddress 12000 0",
        "cuGetProcAddress 11030 0",
    ] {
        assert!(
            probed
                .iter()
                .any(|l| l.contains(&format!("GETPROC {must} ")) && l.ends_with("probe=1")),
            "{must} is wrapped"
        );
    }
    assert!(wrapped >= 18, "{wrapped} wrapped");
}

const CUDARC_TEST: &str = "cudarc_through_the_dlsym_door_is_recorded";

#[test]
fn cudarc_through_the_dlsym_door_is_recorded() {
    if is_child(CUDARC_TEST) {
        use cudarc::driver::{CudaContext, DevicePtr};
        let ctx = CudaContext::new(0).expect("context");
        let stream = ctx.default_stream();
        // SAFETY: the buffer is never read.
        let buf = unsafe { stream.alloc::<u8>(3 << 20) }.expect("alloc");
        let (ptr, _s) = buf.device_ptr(&stream);
        println!("CUDARC-PTR 0x{ptr:x}");
        return;
    }
    let trace = out_path("cudarc.fpt");
    let out = fragprobe()
        .args(["record", "--quiet", "--simulated-gpu", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(std::env::current_exe().unwrap())
        .args([CUDARC_TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(ENV_CHILD, CUDARC_TEST)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ptr = stdout
        .lines()
        .find_map(|l| l.find("CUDARC-PTR 0x").map(|i| &l[i + 13..]))
        .expect("pointer line");
    let ptr = u64::from_str_radix(ptr.trim(), 16).unwrap();
    let recs = read_trace(&trace);
    let alloc = recs
        .iter()
        .find(|r| {
            r.addr == ptr && matches!(r.kind(), Some(EventKind::Alloc | EventKind::AsyncAlloc))
        })
        .expect("cudarc's allocation was recorded");
    assert_eq!(alloc.size, 3 << 20);
    assert!(
        recs.iter()
            .any(|r| r.addr == ptr
                && matches!(r.kind(), Some(EventKind::Free | EventKind::AsyncFree))),
        "and its free"
    );
}

#[test]
fn a_lossy_recording_stays_exact_through_resyncs() {
    // A tiny ring that overflows while fragprobe drains it: loss markers, resyncs from the
    // live table, and still an exact final map with no false anomalies.
    let trace = out_path("lossy.fpt");
    let out = fragprobe()
        .args(["record", "--quiet", "--simulated-gpu", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(build_scenario("threads16"))
        .args(["3000", "--quiet"])
        .env("FRAGPROBE_RING_CAPACITY", "16")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = report_json(&trace);
    assert!(
        v["events"]["dropped"].as_u64().unwrap() > 0,
        "the ring overflowed: {v:#}"
    );
    assert_eq!(v["events"]["anomalies"], 0, "{v:#}");
    assert_eq!(v["bytes"]["final_live"], 0, "{v:#}");
    assert_eq!(v["leaks"]["bytes"], 0, "{v:#}");
}
