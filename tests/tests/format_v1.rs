//! Format version 1, frozen: `tests/fixtures/format-v1.fpt` was recorded once with
//! `fragprobe record --simulated-gpu 2x4GiB` over five scenario programs in a row
//! (`expandable`, `pools`, `ctx_switch 4`, `fork`, `frag_oom`: VMM, stream-ordered pools,
//! two devices, seven processes, three failed allocations). Every later build must open it
//! and report the same figures (`format-v1.report.json`, the `report --json` of that day
//! without the path-dependent `source` and `label`). If a change breaks this on purpose, it
//! bumps `FORMAT_VERSION` and keeps a reader for version 1.

use fragprobe_shared::format::{EventKind, MetaKind, FORMAT_VERSION};
use fragprobe_shared::trace::Trace;
use fragprobe_tests::probe::report_json;
use fragprobe_tests::sim::workspace_root;
use serde_json::Value;

fn fixture(name: &str) -> std::path::PathBuf {
    workspace_root().join("tests/fixtures").join(name)
}

#[test]
fn the_version_1_trace_opens_whole() {
    assert_eq!(
        FORMAT_VERSION, 1,
        "a new version keeps a reader for this file"
    );
    let t = Trace::open(fixture("format-v1.fpt")).expect("format-v1.fpt opens");
    assert!(t.complete(), "it has its End chunk");
    assert!(t.truncated().is_none() && t.corrupt_at().is_none());
    assert!(t.warnings().is_empty(), "{:?}", t.warnings());
    assert_eq!(t.len(), 398);
    let recs: Vec<_> = t.records().collect();
    let count = |k: EventKind| recs.iter().filter(|r| r.kind == k as u16).count();
    assert_eq!(count(EventKind::ProcessStart), 7);
    assert_eq!(count(EventKind::ProcessExit), 7);
    assert_eq!(count(EventKind::MemMap), 8);
    // Every process start names its program in a metadata entry.
    for r in recs
        .iter()
        .filter(|r| r.kind == EventKind::ProcessStart as u16)
    {
        let m = t.meta_of(r).expect("process start has metadata");
        assert_eq!(m.kind, Some(MetaKind::ProcessInfo), "pid {}", r.pid);
    }
}

#[test]
fn the_version_1_trace_reports_the_same_figures() {
    let mut got = report_json(&fixture("format-v1.fpt"));
    let obj = got.as_object_mut().expect("report is an object");
    obj.remove("source");
    obj.remove("label");
    let want: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("format-v1.report.json")).expect("frozen report"),
    )
    .expect("frozen report JSON");
    assert_eq!(got, want);
}
