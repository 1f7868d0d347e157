//! `fragprobe sweep`: the same real workload once per `PYTORCH_CUDA_ALLOC_CONF`, under the
//! probe on the simulated GPU, compared in one table.

use std::path::Path;

use fragprobe_tests::probe::{fragprobe, out_path, report_json};
use fragprobe_tests::sim::artifact_dir;
use serde_json::Value;

fn row<'a>(v: &'a Value, figure: &str) -> &'a Vec<Value> {
    v["comparison"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["figure"] == figure)
        .unwrap_or_else(|| panic!("no row {figure:?} in {v}"))["values"]
        .as_array()
        .unwrap()
}

/// A run's failed-allocation verdicts.
fn failures(run: &Value) -> Vec<&str> {
    run["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect()
}

#[test]
fn expandable_segments_avoid_the_demo_workloads_fragmentation_oom() {
    let dir = out_path("sweep");
    let exe = artifact_dir().join("fragprobe");
    let out = fragprobe()
        .args(["sweep", "--json", "--simulated-gpu", "1x4GiB", "-o"])
        .arg(&dir)
        .args([
            "--alloc-conf",
            "default",
            "--alloc-conf",
            "expandable_segments:True",
            "--",
        ])
        .arg(&exe)
        .arg("__demo-workload")
        .env("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True") // must be overridden
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(v["comparison"]["labels"][0], "default");
    assert_eq!(v["comparison"]["labels"][1], "expandable_segments:True");
    // The native allocator: the retry after flushing the cache fails for fragmentation.
    let f0 = failures(&runs[0]);
    assert_eq!(f0, ["capacity", "fragmentation"], "{v}");
    // Expandable segments: cuMemCreate fails once while the cache holds the memory; after
    // unmapping the cache the 1400 MiB request is mapped.
    let f1 = failures(&runs[1]);
    assert_eq!(f1, ["capacity"], "{v}");
    assert_eq!(row(&v, "fragmentation OOMs"), &[1.0, 0.0]);
    // Peak device memory: cudaMalloc'd segments vs mapped pages, the same workload.
    let mapped = row(&v, "peak mapped (VMM) bytes");
    assert_eq!(mapped[0], 0.0);
    assert!(
        mapped[1].as_f64().unwrap() >= (1400 << 20) as f64,
        "{mapped:?}"
    );
    // Only the native run has an arena of cudaMalloc'd blocks.
    let lfb = row(&v, "smallest largest free block");
    assert!(
        lfb[0].as_f64().unwrap() > 0.0 && lfb[1].is_null(),
        "{lfb:?}"
    );
    assert_eq!(row(&v, "exit code"), &[0.0, 0.0]);
    assert!(row(&v, "wall time s")
        .iter()
        .all(|w| w.as_f64().unwrap() > 0.0));
    // Each trace is kept and carries the configuration it ran with.
    for (i, conf) in [(0, ""), (1, "expandable_segments:True")] {
        let trace = Path::new(runs[i]["trace"].as_str().unwrap());
        assert!(trace.starts_with(&dir), "{}", trace.display());
        let p = &report_json(trace)["processes"][0];
        let got = p["alloc_conf"].as_str().unwrap_or("");
        assert_eq!(got, conf, "{p}");
    }
    assert!(stderr.contains("run 2/2: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"));
}

#[test]
fn a_bad_configuration_is_refused_before_anything_runs() {
    let dir = out_path("sweep-bad");
    let out = fragprobe()
        .args(["sweep", "-o"])
        .arg(&dir)
        .args([
            "--alloc-conf",
            "expandable_segments:True",
            "--alloc-conf",
            "max_split_size_mb:12",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("max_split_size_mb") && err.contains("nothing was run"),
        "{err}"
    );
    assert!(!dir.exists());
}

#[test]
fn the_exit_code_of_each_run_is_in_the_table_and_the_sweep_goes_on() {
    let dir = out_path("sweep-exit");
    let out = fragprobe()
        .args(["sweep", "--json", "-o"])
        .arg(&dir)
        .args([
            "--alloc-conf",
            "default",
            "--alloc-conf",
            "garbage_collection_threshold:0.5",
            "--",
            "sh",
            "-c",
        ])
        .arg("case \"$PYTORCH_CUDA_ALLOC_CONF\" in garbage*) exit 3;; esac; exit 0")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(row(&v, "exit code"), &[0.0, 3.0]);
    assert_eq!(v["runs"][1]["exit_code"], 3);
}
