//! Real PyTorch from PyPI (torch 2.9.1, CUDA 12.8 build, unchanged) on the simulated GPU,
//! under the probe: what the probe recorded equals PyTorch's own counters
//! (`torch.cuda.memory_stats()`), under the native caching allocator and under
//! `expandable_segments:True`; cuBLAS GEMMs run.
//!
//! The venv comes from `cuda/torch-venv.sh` (once per machine, outside the checkout;
//! `.ci/run` calls it). Where it is missing the tests say so in one line and pass, except
//! under CI, where that is a failure.

use std::path::PathBuf;

use fragprobe_tests::cache;
use fragprobe_tests::probe::{
    export_torch_snapshot, fragprobe, out_path, report_json, succeed, torch_run, TORCH_TEST_ENV,
};
use serde_json::Value;

fn python() -> Option<PathBuf> {
    cache::torch_python("2.9.1")
}

/// A workload whose caching-allocator history is known: six tensors, every other one
/// freed, a big one allocated and freed, the cache emptied; then PyTorch's own counters.
const WORKLOAD: &str = r#"
import json, sys, torch
keep = []
for i in range(6):
    keep.append(torch.empty((i + 1) * 3 << 20, dtype=torch.uint8, device="cuda"))
del keep[::2]
big = torch.empty(300 << 20, dtype=torch.uint8, device="cuda")
del big
torch.cuda.empty_cache()
if len(sys.argv) > 1:
    a = torch.randn(256, 256, device="cuda")
    b = (a @ a).sum().item()
s = torch.cuda.memory_stats()
keys = ["segment.all.allocated", "segment.all.freed", "reserved_bytes.all.peak",
        "reserved_bytes.all.current", "num_ooms", "num_alloc_retries"]
print("STATS " + json.dumps({k: s[k] for k in keys}), flush=True)
"#;

/// Runs the workload under `fragprobe record`; returns PyTorch's stats and the report.
fn recorded(py: &PathBuf, conf: &str, args: &[&str]) -> (Value, Value) {
    let script = out_path("torch-workload.py");
    std::fs::write(&script, WORKLOAD).unwrap();
    let trace = out_path("torch.fpt");
    let (o, out) = torch_run("STATS ", || {
        fragprobe()
            .args(["record", "--simulated-gpu=1x16GiB", "-q", "-o"])
            .arg(&trace)
            .arg("--")
            .arg(py)
            .arg(&script)
            .args(args)
            .env("PYTORCH_CUDA_ALLOC_CONF", conf)
            .env_remove("PYTORCH_ALLOC_CONF")
            .envs(TORCH_TEST_ENV)
            .output()
            .unwrap()
    });
    assert!(o.status.success(), "{out}");
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("STATS "))
        .unwrap_or_else(|| panic!("no STATS line: {out}"));
    let stats: Value = serde_json::from_str(line).unwrap();
    let report = report_json(&trace);
    let _ = std::fs::remove_file(&trace);
    (stats, report)
}

#[test]
fn the_probe_equals_pytorchs_counters_under_the_native_allocator() {
    let Some(py) = python() else { return };
    let (s, r) = recorded(&py, "", &[]);
    assert_eq!(
        r["allocations"]["ok"], s["segment.all.allocated"],
        "{s} {r:#}"
    );
    assert_eq!(
        r["allocations"]["frees"], s["segment.all.freed"],
        "{s} {r:#}"
    );
    assert_eq!(
        r["bytes"]["peak_live"], s["reserved_bytes.all.peak"],
        "{s} {r:#}"
    );
    assert_eq!(
        r["bytes"]["final_live"], s["reserved_bytes.all.current"],
        "{s} {r:#}"
    );
    assert_eq!(r["events"]["anomalies"], 0);
    assert_eq!(s["num_ooms"], 0);
}

#[test]
fn the_probe_equals_pytorchs_counters_under_expandable_segments() {
    let Some(py) = python() else { return };
    let (s, r) = recorded(&py, "expandable_segments:True", &[]);
    // Expandable segments map 20 MiB pages into one reservation per pool: reserved bytes
    // are mapped bytes, and no segment is ever cudaMalloc'd.
    assert_eq!(s["segment.all.allocated"], 0, "{s}");
    assert_eq!(
        r["bytes"]["peak_mapped"], s["reserved_bytes.all.peak"],
        "{s} {r:#}"
    );
    assert_eq!(
        r["bytes"]["peak_live"], s["reserved_bytes.all.peak"],
        "{s} {r:#}"
    );
    assert_eq!(
        r["bytes"]["final_live"], s["reserved_bytes.all.current"],
        "{s} {r:#}"
    );
    assert!(
        r["events"]["by_kind"]["mem_map"].as_u64().unwrap() > 0,
        "{r:#}"
    );
    assert_eq!(r["events"]["anomalies"], 0);
}

#[test]
fn cublas_gemms_run_and_computed_values_are_zeros() {
    let Some(py) = python() else { return };
    // `a @ a` creates a cuBLAS handle and runs a GEMM; `.item()` copies back zeros.
    let (s, r) = recorded(&py, "", &["--gemm"]);
    assert_eq!(s["num_ooms"], 0);
    assert!(r["allocations"]["ok"].as_u64().unwrap() >= 6, "{r:#}");
}

/// `fragprobe demo --torch`: the real-PyTorch demo ends in a fragmentation OOM under the
/// default allocator and fits with expandable_segments:True, and fragprobe's account of
/// both runs agrees with what PyTorch itself printed (its `DEMO` line).
#[test]
fn the_torch_demo_ooms_from_fragmentation_and_fits_with_expandable_segments() {
    let Some(py) = python() else { return };
    let dir = out_path("demo-torch");
    let o = fragprobe()
        .args(["demo", "--torch", "--python"])
        .arg(&py)
        .arg("-o")
        .arg(&dir)
        .envs(TORCH_TEST_ENV)
        .env_remove("PYTORCH_CUDA_ALLOC_CONF")
        .env_remove("PYTORCH_ALLOC_CONF")
        .output()
        .unwrap();
    let out = fragprobe_tests::probe::output_text(&o);
    assert!(o.status.success(), "{out}");
    // PyTorch's own account: the request, and whether it fit, per run
    let demo: Vec<Value> = out
        .lines()
        .filter_map(|l| l.strip_prefix("DEMO "))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(demo.len(), 2, "{out}");
    assert_eq!(demo[0]["fits"], false, "{out}");
    assert_eq!(demo[0]["num_ooms"], 1, "{out}");
    assert_eq!(demo[1]["fits"], true, "{out}");
    assert_eq!(demo[1]["num_ooms"], 0, "{out}");
    // fragprobe's account of the same runs
    let native = report_json(&dir.join("01-default.fpt"));
    let oom = &native["torch_snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| !t["oom"].is_null())
        .unwrap_or_else(|| panic!("no OOM snapshot: {native}"))["oom"];
    let n = |v: &Value| v.as_u64().unwrap();
    let asked = n(&demo[0]["request_mib"]) << 20;
    assert!(
        n(&oom["request"]).abs_diff(asked) < 2 << 20,
        "{oom} vs {asked}"
    );
    assert_eq!(oom["verdict"], "fragmentation", "{oom}");
    assert!(n(&oom["device_free"]) < n(&oom["request"]), "{oom}");
    assert!(n(&oom["largest_free_block"]) < n(&oom["request"]), "{oom}");
    assert!(
        n(&oom["device_free"]) + n(&oom["cached_free"]) >= n(&oom["request"]),
        "{oom}"
    );
    assert_eq!(oom["expandable_segments"], false);
    let expandable = report_json(&dir.join("02-expandable_segments_True.fpt"));
    assert_eq!(expandable["allocations"]["failed"], 0, "{expandable}");
    assert!(expandable["torch_snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["oom"].is_null()));
    assert!(out.contains("expandable_segments:True avoided it"), "{out}");
    // PyTorch's own snapshot of the expandable run, imported, is what the probe recorded
    // of the same run: the same reservations, handles and maps, the same mapped peak.
    let snaps = dir.join("02-expandable_segments_True.fpt.torch");
    let exit = std::fs::read_dir(&snaps)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with("-exit.pickle"))
        .unwrap_or_else(|| panic!("no exit snapshot in {}", snaps.display()));
    let imported = dir.join("imported.fpt");
    succeed(fragprobe().args(["import", "-o"]).arg(&imported).arg(&exit));
    let im = report_json(&imported);
    assert_eq!(im["events"]["anomalies"], 0, "{im}");
    for kind in ["address_reserve", "mem_create", "mem_map"] {
        assert_eq!(
            im["events"]["by_kind"][kind], expandable["events"]["by_kind"][kind],
            "{kind}: imported {im} vs probed {expandable}"
        );
    }
    assert_eq!(
        im["bytes"]["peak_mapped"],
        expandable["bytes"]["peak_mapped"]
    );
    // and the simulator replays real PyTorch's expandable history exactly
    let o = fragprobe()
        .args(["simulate", "--verify", "--json"])
        .arg(&exit)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|_| panic!("{}", fragprobe_tests::probe::output_text(&o)));
    assert!(o.status.success(), "not exact: {v}");
    assert_eq!(v["alloc_events"], v["alloc_address_matches"], "{v}");
    assert_eq!(v["segment_maps"], v["segment_map_matches"], "{v}");
    // doctor on the default run: fragmentation inside the caching allocator, and the
    // setting it suggests is the one that fit, replayed on the run's own history to the
    // byte the second run really reached
    let o = fragprobe()
        .args(["doctor", "--json"])
        .arg(dir.join("01-default.fpt"))
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(7),
        "{}",
        fragprobe_tests::probe::output_text(&o)
    );
    let d: Value = serde_json::from_slice(&o.stdout).unwrap();
    let r = &d["reports"][0];
    let finding = &r["verdict"]["findings"][0];
    assert_eq!(finding["cause"], "fragmentation", "{r}");
    assert_eq!(
        finding["suggestions"][0]["action"], "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
        "{finding}"
    );
    let sim = r["evidence"]["simulated"].as_array().unwrap();
    let exp = sim
        .iter()
        .find(|c| c["conf"] == "expandable_segments:True")
        .unwrap();
    assert_eq!(exp["ooms"], 0);
    assert_eq!(
        exp["peak_reserved"], demo[1]["reserved_bytes.all.peak"],
        "{sim:?}"
    );
    assert!(sim.iter().any(|c| c["ooms"].as_u64() > Some(0)), "{sim:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The worked examples of PyTorch's allocator (from a PyTorch developer's log, and the
/// simulator's own tests in shared/tests/torch_sim.rs), run on real PyTorch.
const WORKED: &str = r#"
import json, torch
MiB = 1 << 20
def t(n): return torch.empty(n, dtype=torch.uint8, device="cuda")
def example(first, then):
    a = [t(first) for _ in range(8 if first == 16 * MiB else 4)]
    del a
    b = [t(then) for _ in range(4 if then == 32 * MiB else 8)]
    r = torch.cuda.memory_reserved()
    del b
    torch.cuda.empty_cache()
    return r // MiB
out = {"16_then_32": example(16 * MiB, 32 * MiB), "32_then_16": example(32 * MiB, 16 * MiB)}
x, y = t(2 * MiB), t(MiB // 2)
out["2_and_half"] = torch.cuda.memory_reserved() // MiB
print("WORKED " + json.dumps(out), flush=True)
"#;

const WORKED_EXPANDABLE: &str = r#"
import json, torch
MiB = 1 << 20
a = [torch.empty(16 * MiB, dtype=torch.uint8, device="cuda") for _ in range(8)]
after_16 = torch.cuda.memory_reserved() // MiB
del a
b = [torch.empty(32 * MiB, dtype=torch.uint8, device="cuda") for _ in range(4)]
print("WORKED " + json.dumps({"after_16": after_16, "after_32": torch.cuda.memory_reserved() // MiB}), flush=True)
"#;

#[test]
fn the_worked_examples_hold_on_real_pytorch() {
    let Some(py) = python() else { return };
    let run = |program: &str, conf: &str| -> (Value, Value) {
        let script = out_path("worked.py");
        std::fs::write(&script, program).unwrap();
        let trace = out_path("worked.fpt");
        let o = fragprobe()
            .args(["record", "--simulated-gpu=1x16GiB", "-q", "-o"])
            .arg(&trace)
            .arg("--")
            .arg(&py)
            .arg(&script)
            .env("PYTORCH_CUDA_ALLOC_CONF", conf)
            .env_remove("PYTORCH_ALLOC_CONF")
            .envs(TORCH_TEST_ENV)
            .output()
            .unwrap();
        let out = fragprobe_tests::probe::output_text(&o);
        assert!(o.status.success(), "{out}");
        let line = out.lines().find_map(|l| l.strip_prefix("WORKED ")).unwrap();
        (serde_json::from_str(line).unwrap(), report_json(&trace))
    };
    let (w, _) = run(WORKED, "");
    // 16 MiB segments never merge into 32 MiB ones; each 32 MiB block splits in two
    assert_eq!(w["16_then_32"], 256, "{w}");
    assert_eq!(w["32_then_16"], 128, "{w}");
    // a 2 MiB request opens a 20 MiB large-pool segment, 0.5 MiB a 2 MiB small-pool one
    assert_eq!(w["2_and_half"], 22, "{w}");
    let (w, rep) = run(WORKED_EXPANDABLE, "expandable_segments:True");
    // 8 × 16 MiB map 7 pages of 20 MiB; 4 × 32 MiB reuse them with no new mapping
    assert_eq!(
        (w["after_16"].as_u64(), w["after_32"].as_u64()),
        (Some(140), Some(140)),
        "{w}"
    );
    assert_eq!(rep["events"]["by_kind"]["mem_map"], 7, "{rep}");
}

/// `export --format torch-snapshot` of a probe trace opens in PyTorch's own viewer:
/// `python -m torch.cuda._memory_viz` (stats, trace, trace_plot, segment_plot) of real
/// torch reads it and shows what the probe recorded.
#[test]
fn an_exported_trace_opens_in_pytorchs_own_memory_viz() {
    let Some(py) = python() else { return };
    let script = out_path("keep.py");
    std::fs::write(
        &script,
        "import torch\nkeep = [torch.empty(64 << 20, dtype=torch.uint8, device='cuda') for _ in range(3)]\nprint('KEPT', flush=True)\n",
    )
    .unwrap();
    let trace = out_path("keep.fpt");
    succeed(
        fragprobe()
            .args(["record", "--simulated-gpu=1x8GiB", "-q", "-o"])
            .arg(&trace)
            .arg("--")
            .arg(&py)
            .arg(&script)
            .envs(TORCH_TEST_ENV),
    );
    let pickle = out_path("keep.pickle");
    export_torch_snapshot(&trace, &pickle);
    let viz = |args: &[&str]| {
        let o = std::process::Command::new(&py)
            .args(["-W", "ignore", "-m", "torch.cuda._memory_viz"])
            .args(args)
            .output()
            .unwrap();
        let out = fragprobe_tests::probe::output_text(&o);
        assert!(o.status.success(), "_memory_viz {args:?}: {out}");
        out
    };
    let p = pickle.to_str().unwrap();
    let stats = viz(&["stats", p]);
    assert!(
        stats.contains("segments: 3") && stats.contains("total_reserved: 192.0MiB"),
        "{stats}"
    );
    assert_eq!(viz(&["trace", p]).matches("cudaMalloc(").count(), 3);
    for plot in ["trace_plot", "segment_plot"] {
        let html = out_path(&format!("{plot}.html"));
        viz(&[plot, p, "-o", html.to_str().unwrap()]);
        let page = std::fs::read_to_string(&html).unwrap();
        // PyTorch's page embeds the file (base64) for its MemoryViz.js
        assert!(
            page.contains("add_local_files") && page.contains("\"base64\": \"gAS"),
            "{plot}: {page}"
        );
        let _ = std::fs::remove_file(&html);
    }
    let _ = std::fs::remove_file(&trace);
    let _ = std::fs::remove_file(&pickle);
}
