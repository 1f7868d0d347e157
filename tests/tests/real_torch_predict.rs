//! `fragprobe simulate` predicts the real allocator: from one snapshot of a default-settings
//! run, the peak reserved bytes, segments made (pages mapped, for expandable segments),
//! retries and OOMs of the same workload under four other settings (a combination
//! included) equal what real PyTorch then does under each: three workloads, five settings,
//! torch 2.9.1 (CUDA 12) and 2.15.0 (CUDA 13); and `simulate --verify` replays each of those
//! 15 runs' own snapshots exactly. The driver is `tests/torch/predict_vs_real.py`
//! (its `--markdown` table is the README's).

use std::path::Path;
use std::process::Command;

use fragprobe_tests::cache;
use fragprobe_tests::probe::{ensure_fragprobe_built, output_text};
use fragprobe_tests::sim::{artifact_dir, ensure_sim_built};
use serde_json::Value;

fn predicted_equals_real(version: &str) {
    let Some(py) = cache::torch_python(version) else {
        return;
    };
    ensure_fragprobe_built();
    ensure_sim_built();
    let driver = Path::new(env!("CARGO_MANIFEST_DIR")).join("torch/predict_vs_real.py");
    let o = Command::new("python3")
        .arg(&driver)
        .arg(artifact_dir().join("fragprobe"))
        .arg(&py)
        .env("NO_COLOR", "1")
        .output()
        .expect("run predict_vs_real.py");
    let out = output_text(&o);
    assert!(o.status.success(), "torch {version}: {out}");
    let rows: Vec<Value> = o
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 15, "3 workloads × 5 settings: {out}");
    let differ: Vec<&Value> = rows
        .iter()
        .filter(|r| r["real"] != r["predicted"])
        .collect();
    assert!(
        differ.is_empty(),
        "torch {version}: predicted ≠ real in {} of 15 cells: {differ:#?}",
        differ.len()
    );
    // and every run's own snapshot replays exactly through the simulator
    let inexact: Vec<&Value> = rows.iter().filter(|r| r["verify"][0] != true).collect();
    assert!(
        inexact.is_empty(),
        "torch {version}: simulate --verify not exact on {} of 15 runs' snapshots: {inexact:#?}",
        inexact.len()
    );
    // the settings really change what the allocator does: not a table of equal numbers
    let peaks: std::collections::BTreeSet<u64> = rows
        .iter()
        .map(|r| r["real"][0].as_u64().unwrap())
        .collect();
    assert!(peaks.len() >= 6, "{peaks:?}");
    assert!(rows.iter().any(|r| r["real"][3] == 1) && rows.iter().any(|r| r["real"][3] == 0));
}

#[test]
fn simulate_predicts_real_pytorch_2_9() {
    predicted_equals_real("2.9.1");
}

#[test]
fn simulate_predicts_real_pytorch_2_15() {
    predicted_equals_real("2.15.0");
}
