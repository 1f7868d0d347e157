//! The `fragprobe` command end to end on the simulated GPU: run/record/report/compare/
//! export/demo, the JSON schema checked field by field against what a scenario printed, and
//! every kind of bad input with its one-line message and exit code.

use fragprobe_tests::probe::{
    export_torch_snapshot, fragprobe, out_path, record_scenario, report_json, succeed,
};
use fragprobe_tests::sim::build_scenario;
use serde_json::Value;

#[test]
fn report_json_matches_what_the_scenario_did() {
    let rec = record_scenario(
        "frag_oom",
        &[],
        Some("1x1GiB"),
        &[("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128")],
    );
    assert!(rec.output.status.success());
    let v = report_json(&rec.trace);
    assert_eq!(v["format_version"], 1);
    let ok_allocs = rec
        .lines
        .iter()
        .filter(|l| l.op == "alloc" && l.res == 0)
        .count() as u64;
    let failed = rec
        .lines
        .iter()
        .filter(|l| l.op == "alloc" && l.res != 0)
        .count() as u64;
    let frees = rec
        .lines
        .iter()
        .filter(|l| l.op == "free" && l.res == 0)
        .count() as u64;
    assert_eq!(v["allocations"]["ok"], ok_allocs);
    assert_eq!(v["allocations"]["failed"], failed);
    assert_eq!(v["allocations"]["frees"], frees);
    assert_eq!(v["events"]["dropped"], 0);
    assert_eq!(v["events"]["anomalies"], 0);
    let p = &v["processes"][0];
    assert_eq!(p["pid"], rec.lines[0].pid);
    assert_eq!(p["alloc_conf"], "max_split_size_mb:128");
    assert_eq!(v["label"], "max_split_size_mb:128");
    assert!(p["cmdline"][0].as_str().unwrap().ends_with("frag_oom"));
    // Peak live: replay the printed calls.
    let (mut live, mut peak) = (0i64, 0i64);
    let mut sizes = std::collections::HashMap::new();
    for l in &rec.lines {
        match (l.op.as_str(), l.res) {
            ("alloc", 0) => {
                live += l.size as i64;
                sizes.insert(l.addr, l.size as i64);
                peak = peak.max(live);
            }
            ("free", 0) => live -= sizes.remove(&l.addr).unwrap_or(0),
            _ => {}
        }
    }
    // The arena rounds to 512 bytes; the report counts requested bytes.
    assert_eq!(v["bytes"]["peak_live"], peak);
    // frag_oom fills the device first (capacity), then asks past the largest hole.
    let fa = v["failed_allocations"].as_array().unwrap().last().unwrap();
    let failing = rec
        .lines
        .iter()
        .rev()
        .find(|l| l.op == "alloc" && l.res != 0)
        .unwrap();
    assert_eq!(fa["size"], failing.size);
    assert_eq!(fa["result"], 2);
    assert_eq!(fa["verdict"], "fragmentation");
    assert!(fa["free_bytes"].as_u64().unwrap() >= failing.size);
    assert!(fa["largest_free_block"].as_u64().unwrap() < failing.size);
    assert!(v["fragmentation"]["max_ratio"].as_f64().unwrap() > 0.0);
}

#[test]
fn run_passes_the_exit_status_through_and_summarises() {
    let trace = out_path("run.fpt");
    let out = fragprobe()
        .args(["run", "--simulated-gpu", "--record"])
        .arg(&trace)
        .arg("--")
        .args(["sh", "-c"])
        .arg(format!(
            "{} >/dev/null; exit 3",
            build_scenario("leak").display()
        ))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("peak live") && err.contains("live at exit"),
        "{err}"
    );
    let v = report_json(&trace);
    assert_eq!(v["leaks"]["bytes"], (64u64 + 16 + 2) << 20);
    // Only the CUDA process has a ring: the shell is not in the report.
    assert_eq!(v["processes"].as_array().unwrap().len(), 1);
}

#[test]
fn a_command_that_does_not_exist_exits_127_and_a_killed_one_128_plus_signal() {
    let out = fragprobe()
        .args(["run", "--no-record", "--", "definitely-not-a-command-xyz"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert!(String::from_utf8_lossy(&out.stderr).contains("command not found"));
    let out = fragprobe()
        .args(["run", "--no-record", "--", "sh", "-c", "kill -9 $$"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(128 + 9));
    assert!(String::from_utf8_lossy(&out.stderr).contains("signal 9"));
}

#[test]
fn bad_inputs_get_one_line_and_a_distinct_exit_code() {
    let missing = fragprobe()
        .args(["report", "/nonexistent/trace.fpt"])
        .output()
        .unwrap();
    assert_eq!(
        missing.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
    let not_trace = out_path("not-a-trace.fpt");
    std::fs::write(
        &not_trace,
        b"hello, this is not a trace file at all........................................",
    )
    .unwrap();
    let out = fragprobe().arg("report").arg(&not_trace).output().unwrap();
    assert_eq!(out.status.code(), Some(4));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a fragprobe trace"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A newer version: the message names both versions.
    let rec = record_scenario("door_link", &[], None, &[]);
    let mut bytes = std::fs::read(&rec.trace).unwrap();
    let newer = out_path("newer.fpt");
    let pos = bytes
        .windows(4)
        .position(|w| w == 1u32.to_le_bytes())
        .unwrap();
    bytes[pos..pos + 4].copy_from_slice(&9u32.to_le_bytes());
    std::fs::write(&newer, &bytes).unwrap();
    let out = fragprobe().arg("report").arg(&newer).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(
        err.contains("version 9") && err.contains("version 1"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    // Truncated: still opens, says what is missing, reports what is there.
    let full = std::fs::read(&rec.trace).unwrap();
    let cut = out_path("cut.fpt");
    std::fs::write(&cut, &full[..full.len() * 2 / 3]).unwrap();
    let out = fragprobe()
        .args(["report", "--json"])
        .arg(&cut)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("warning"));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!v["warnings"].as_array().unwrap().is_empty());
    assert!(v["events"]["total"].as_u64().unwrap() > 0);
}

#[test]
fn compare_labels_columns_with_the_alloc_conf_and_marks_the_better_value() {
    let a = record_scenario(
        "torch_caching",
        &[],
        Some("1x2GiB"),
        &[("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")],
    );
    let b = record_scenario(
        "frag_oom",
        &[],
        Some("1x1GiB"),
        &[("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:512")],
    );
    let out = fragprobe()
        .args(["compare"])
        .arg(&a.trace)
        .arg(&b.trace)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(
        text.contains("expandable_segments:True") && text.contains("max_split_size_mb:512"),
        "{text}"
    );
    assert!(text.contains(" *"), "{text}");
    let out = fragprobe()
        .args(["compare", "--json"])
        .arg(&a.trace)
        .arg(&b.trace)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["labels"][0], "expandable_segments:True");
    let peak = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["figure"] == "peak live bytes")
        .unwrap();
    assert_eq!(peak["values"].as_array().unwrap().len(), 2);
}

#[test]
fn export_csv_and_chrome_trace() {
    let rec = record_scenario("expandable", &[], None, &[]);
    let csv = out_path("t.csv");
    let out = fragprobe()
        .args(["export", "--format", "csv"])
        .arg(&rec.trace)
        .arg("-o")
        .arg(&csv)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    for col in [
        "time_ns",
        "live_bytes",
        "mapped_bytes",
        "reserved_bytes",
        "nvml_used_bytes",
        "largest_free_block",
        "fragmentation_ratio",
    ] {
        assert!(header.contains(&col), "{col} in {header:?}");
    }
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert!(rows.iter().all(|r| r.len() == header.len()));
    let mapped = header.iter().position(|c| *c == "mapped_bytes").unwrap();
    assert!(
        rows.iter().any(|r| r[mapped].parse::<u64>().unwrap() > 0),
        "VMM mappings appear in the CSV"
    );

    let json = out_path("t.json");
    let out = fragprobe()
        .args(["export", "--format", "chrome"])
        .arg(&rec.trace)
        .arg("-o")
        .arg(&json)
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let ev = v["traceEvents"].as_array().unwrap();
    assert!(ev
        .iter()
        .any(|e| e["ph"] == "M" && e["name"] == "process_name"));
    assert!(ev
        .iter()
        .any(|e| e["ph"] == "C" && e["name"].as_str().unwrap().contains("memory")));
    let begins = ev.iter().filter(|e| e["ph"] == "b").count();
    let ends = ev.iter().filter(|e| e["ph"] == "e").count();
    assert!(
        begins > 0 && begins == ends,
        "{begins} allocation slices begin, {ends} end"
    );
}

#[test]
fn demo_ends_in_a_fragmentation_oom() {
    let trace = out_path("demo.fpt");
    let out = fragprobe()
        .args(["demo", "--no-view", "-o"])
        .arg(&trace)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("FRAGMENTATION"), "{text}");
    let v = report_json(&trace);
    let verdicts: Vec<&str> = v["failed_allocations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(verdicts.last(), Some(&"fragmentation"), "{verdicts:?}");
}

#[test]
fn a_snapshot_of_nothing_imports_and_simulate_says_what_to_record() {
    // A program that never touches CUDA: its trace, exported, is a snapshot with no
    // segments and no trace, as `torch.cuda.memory._snapshot()` gives before any allocation.
    let trace = out_path("nothing.fpt");
    let o = fragprobe()
        .args(["record", "--simulated-gpu=1x1GiB", "-q", "-o"])
        .arg(&trace)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let pickle = out_path("nothing.pickle");
    export_torch_snapshot(&trace, &pickle);
    // `import` shows what the file holds (nothing), with a note, and succeeds.
    for cmd in [&["import"][..], &["import", "--json"]] {
        let o = fragprobe().args(cmd).arg(&pickle).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{cmd:?}: {:?} {err}", o.status);
        assert!(!o.stdout.is_empty(), "{cmd:?} printed nothing");
        assert!(err.contains("no segments and no trace"), "{cmd:?}: {err}");
    }
    // `simulate` replays a trace, and there is none: it says how to record one.
    let o = fragprobe().arg("simulate").arg(&pickle).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert!(err.contains("_record_memory_history"), "{err}");
}

/// `demo --torch` with a Python that has no torch says so, and how to fix it, before
/// anything runs.
#[test]
fn the_torch_demo_without_torch_says_what_to_install() {
    let dir = out_path("no-torch");
    std::fs::create_dir_all(&dir).unwrap();
    let fake = dir.join("python");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    for (python, says) in [
        (
            fake.clone(),
            "cannot import torch (ModuleNotFoundError: No module named 'torch')",
        ),
        (dir.join("missing"), "cannot run"),
    ] {
        let o = fragprobe()
            .args(["demo", "--torch", "--python"])
            .arg(&python)
            .arg("-o")
            .arg(dir.join("out"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(3), "{err}");
        assert!(
            err.contains(says) && err.contains("pip install torch"),
            "{err}"
        );
        assert!(
            !dir.join("out").exists(),
            "nothing is written before torch is found"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A snapshot without `allocator_settings` (PyTorch before ≈ 2.4) whose segments are
/// expandable: `import` and `simulate --verify` say expandable_segments:True was inferred.
/// The file is made here, with the project's own allocator simulator and exporter.
#[test]
fn settings_a_snapshot_does_not_record_are_inferred_from_its_segments() {
    use fragprobe_shared::torch::sim::{Allocator, Config, FirstFit, Version};
    let mut cfg = Config::parse("expandable_segments:True", Version::DEFAULT).unwrap();
    cfg.device_total = Some(8 << 30);
    let mut a = Allocator::new(cfg);
    a.record_events(true);
    let mut src = FirstFit::new();
    let x: Vec<u64> = (1..=6u64)
        .map(|i| a.malloc(i * (3 << 20), 0, &mut src).unwrap())
        .collect();
    a.free(x[1]).unwrap();
    let path = fragprobe_tests::made::write(
        &out_path("no-settings.pickle"),
        a.segments(0),
        a.take_events(),
    );
    let o = fragprobe()
        .args(["import", "-o"])
        .arg(out_path("no-settings.fpt"))
        .arg(&path)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{text}");
    assert!(
        text.contains("settings: not recorded; expandable_segments:True inferred (the file has no allocator_settings"),
        "{text}"
    );
    let o = fragprobe()
        .args(["simulate", "--verify"])
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("settings: expandable_segments:True") && text.contains("inferred:"),
        "{text}"
    );
}

/// A PyTorch snapshot given where a trace is expected: the error says what it is and which
/// commands read it.
#[test]
fn a_snapshot_given_to_report_names_the_commands_that_read_it() {
    let path = out_path("snap.pickle");
    // protocol 4: PROTO 4, FRAME, an empty dict, STOP
    std::fs::write(&path, b"\x80\x04\x95\x02\x00\x00\x00\x00\x00\x00\x00}\x94.").unwrap();
    for cmd in ["report", "export"] {
        let mut c = fragprobe();
        c.arg(cmd);
        if cmd == "export" {
            c.args(["--format", "csv", "-o"]).arg(out_path("x.csv"));
        }
        let o = c.arg(&path).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(4), "{cmd}: {err}");
        assert!(
            err.contains("PyTorch memory snapshot") && err.contains("`fragprobe import`"),
            "{cmd}: {err}"
        );
    }
}

/// A snapshot from torch_npu (Ascend) is named as such by `import` and `simulate --verify`,
/// from its block sizes (request + 32 bytes rounded to 512), instead of a bare "not exact";
/// CUDA PyTorch's own rounding is not mistaken for it.
#[test]
fn a_torch_npu_snapshot_is_recognised_by_its_block_sizes() {
    use fragprobe_shared::torch::{Block, BlockState, PoolKind, Segment};
    let write = |extra: u64, name: &str| {
        let mut at = 0x12c0_0000_0000u64;
        let mut blocks = Vec::new();
        for k in 0..20u64 {
            let requested = 1000 + k * 4096; // within 32 bytes of a 512-byte boundary
            let size = (requested + extra).div_ceil(512) * 512;
            blocks.push(Block {
                address: at,
                size,
                requested_size: requested,
                state: BlockState::ActiveAllocated,
                stack: 0,
            });
            at += size;
        }
        let base = 0x12c0_0000_0000u64;
        blocks.push(Block {
            address: at,
            size: (2 << 20) - (at - base),
            requested_size: 0,
            state: BlockState::Inactive,
            stack: 0,
        });
        fragprobe_tests::made::write(
            &out_path(name),
            vec![Segment {
                device: 0,
                address: base,
                total_size: 2 << 20,
                stream: 0,
                pool: PoolKind::Small,
                pool_id: (0, 0),
                is_expandable: false,
                stack: 0,
                blocks,
            }],
            Vec::new(),
        )
    };
    let run = |path: &std::path::Path| {
        let o = fragprobe()
            .args(["import", "-o"])
            .arg(out_path("npu.fpt"))
            .arg(path)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let npu = run(&write(32, "npu.pickle"));
    assert!(
        npu.contains("backend: looks like torch_npu (Ascend): 20 of 20 small allocated blocks"),
        "{npu}"
    );
    let cuda = run(&write(0, "cuda.pickle"));
    assert!(!cuda.contains("backend:"), "{cuda}");
}

/// `report` of a trace that `import` wrote adds the snapshot's own figures, inside its
/// segments, beside the device-level ones: the largest free block is the one `import`
/// printed, not a gap between segments.
#[test]
fn the_report_of_an_imported_snapshot_has_its_allocator_figures() {
    let snap = out_path("imported.pickle");
    // the 8 × 16 MiB then 4 × 32 MiB example: 256 MiB reserved, 128 MiB allocated
    use fragprobe_shared::torch::sim::{Allocator, Config, FirstFit, Version};
    let mut a = Allocator::new(Config::parse("", Version::DEFAULT).unwrap());
    let mut src = FirstFit::new();
    let x: Vec<u64> = (0..8)
        .map(|_| a.malloc(16 << 20, 0, &mut src).unwrap())
        .collect();
    for p in x {
        a.free(p).unwrap();
    }
    for _ in 0..4 {
        a.malloc(32 << 20, 0, &mut src).unwrap();
    }
    fragprobe_tests::made::write(&snap, a.segments(0), Vec::new());
    let trace = out_path("imported.fpt");
    let o = succeed(fragprobe().args(["import", "-o"]).arg(&trace).arg(&snap));
    let summary = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(summary.contains("largest free block 16.0 MiB"), "{summary}");
    let r = report_json(&trace);
    let t = &r["torch_snapshots"][0];
    assert_eq!(t["reason"], "import", "{r}");
    assert_eq!(t["reserved"], 256u64 << 20);
    assert_eq!(t["allocated"], 128u64 << 20);
    assert_eq!(t["largest_free_block"], 16u64 << 20);
    let text = fragprobe().arg("report").arg(&trace).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("largest free block inside the segments 16.0 MiB"),
        "{text}"
    );
}
