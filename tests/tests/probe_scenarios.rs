//! Every scenario program of the simulated GPU under the probe (through `fragprobe record`),
//! compared with what the program itself printed: the same allocations (address, size,
//! device), frees and failures, nothing twice, nothing missing.

use fragprobe_shared::format::{EventKind, Flags, Record};
use fragprobe_shared::model::Model;
use fragprobe_tests::probe::{keys_of_lines, keys_of_records, op_of, record_scenario, Recorded};

fn model_of(records: &[Record]) -> Model {
    let mut m = Model::new();
    for r in records {
        m.apply(r);
    }
    m
}

/// Asserts the recorded calls equal the printed ones exactly (a multiset: nothing missing,
/// nothing twice), sizes included for allocations.
fn assert_same_calls(name: &str, rec: &Recorded) {
    assert!(
        rec.output.status.success(),
        "{name}: fragprobe failed: {}",
        String::from_utf8_lossy(&rec.output.stderr)
    );
    assert!(
        !rec.lines.is_empty(),
        "{name}: the scenario printed no FPSCN line"
    );
    let printed = keys_of_lines(&rec.lines);
    let recorded = keys_of_records(&rec.records);
    if printed != recorded {
        let missing: Vec<_> = printed
            .iter()
            .filter(|k| !recorded.contains(k))
            .take(10)
            .collect();
        let extra: Vec<_> = recorded
            .iter()
            .filter(|k| !printed.contains(k))
            .take(10)
            .collect();
        panic!(
            "{name}: {} calls printed, {} recorded\nmissing: {missing:#?}\nextra: {extra:#?}",
            printed.len(),
            recorded.len()
        );
    }
    // Sizes of allocations: exact, except pitched ones (the record holds pitch × height).
    // Addresses are reused, so the n-th printed call at an address pairs with the n-th
    // recorded one (the records of one process are in seq order).
    let mut by_addr: std::collections::HashMap<
        (u32, &str, u64),
        std::collections::VecDeque<&Record>,
    > = Default::default();
    let mut sorted: Vec<&Record> = rec.records.iter().collect();
    sorted.sort_by_key(|r| (r.pid, r.seq));
    for r in sorted {
        if let Some(op) = op_of(r) {
            by_addr.entry((r.pid, op, r.addr)).or_default().push_back(r);
        }
    }
    for l in &rec.lines {
        let Some(queue) = by_addr.get_mut(&(
            l.pid,
            l.op.as_str(),
            if l.op == "meminfo" { 0 } else { l.addr },
        )) else {
            continue;
        };
        let Some(r) = queue.pop_front() else { continue };
        if !matches!(
            l.op.as_str(),
            "alloc" | "managed" | "async_alloc" | "create" | "reserve" | "map"
        ) || l.res != 0
        {
            continue;
        }
        if r.flags & Flags::PITCH != 0 {
            assert_eq!(r.aux, l.aux, "{name}: pitch of {l:?}");
            assert!(
                r.size >= l.size,
                "{name}: pitched size {} < asked {}",
                r.size,
                l.size
            );
        } else {
            assert_eq!(r.size, l.size, "{name}: size of {l:?}");
        }
    }
    let m = model_of(&rec.records);
    assert_eq!(
        m.anomalies().total(),
        0,
        "{name}: anomalies {:?}",
        m.anomalies().nonzero().collect::<Vec<_>>()
    );
}

#[test]
fn door_link_exported_symbols_including_legacy_names() {
    let rec = record_scenario("door_link", &[], None, &[]);
    assert_same_calls("door_link", &rec);
    assert!(
        rec.lines.iter().any(|l| l.api == "cuMemAlloc"),
        "the legacy name is exercised"
    );
}

#[test]
fn door_dlsym() {
    assert_same_calls("door_dlsym", &record_scenario("door_dlsym", &[], None, &[]));
}

#[test]
fn door_getproc_flags_0_and_2_and_the_4_argument_form() {
    let rec = record_scenario("door_getproc", &[], None, &[]);
    assert_same_calls("door_getproc", &rec);
    assert!(
        rec.lines.iter().any(|l| l.api.ends_with("_ptsz")),
        "per-thread-stream variants are exercised"
    );
}

#[test]
fn door_runtime_is_recorded_once_with_the_runtime_name() {
    let rec = record_scenario("door_runtime", &[], None, &[]);
    assert_same_calls("door_runtime", &rec);
    // cudaMalloc's nested cuMemAlloc_v2 must not appear a second time.
    let mallocs = rec
        .records
        .iter()
        .filter(|r| {
            r.kind == EventKind::Alloc as u16 && r.api().map(|a| a.name()) == Some("cudaMalloc")
        })
        .count();
    assert!(mallocs > 0);
}

#[test]
fn torch_caching_pattern_with_flush_and_retry() {
    let rec = record_scenario("torch_caching", &[], Some("1x2GiB"), &[]);
    assert_same_calls("torch_caching", &rec);
    assert!(
        rec.lines.iter().any(|l| l.res == 2),
        "the scenario ran into an OOM"
    );
}

#[test]
fn expandable_segments_vmm_pattern() {
    let rec = record_scenario("expandable", &[], None, &[]);
    assert_same_calls("expandable", &rec);
    let m = model_of(&rec.records);
    assert!(m
        .devices()
        .iter()
        .any(|d| m.device_summary(d.id()).unwrap().peak_mapped > 0));
}

#[test]
fn llama_release_right_after_map_keeps_memory_until_unmap() {
    let rec = record_scenario("llama_release", &[], None, &[]);
    assert_same_calls("llama_release", &rec);
    let m = model_of(&rec.records);
    // Released-but-mapped handles still count: peak live is the mapped memory.
    assert!(m
        .devices()
        .iter()
        .any(|d| m.device_summary(d.id()).unwrap().peak_live > 0));
}

#[test]
fn stream_ordered_pools() {
    assert_same_calls("pools", &record_scenario("pools", &[], None, &[]));
}

#[test]
fn sixteen_threads_concurrently() {
    let rec = record_scenario("threads16", &["2000"], None, &[]);
    assert_same_calls("threads16", &rec);
}

#[test]
fn each_allocation_is_on_the_device_current_at_the_time() {
    // Context switches every way (set, push/pop, create/destroy, cudaSetDevice) between
    // allocations, another thread on the other device meanwhile: the probe's per-thread
    // device cache must follow every switch (assert_same_calls compares devices).
    let rec = record_scenario("ctx_switch", &["4"], Some("2x4GiB"), &[]);
    assert_same_calls("ctx_switch", &rec);
    for dev in [0, 1] {
        assert!(
            rec.lines
                .iter()
                .filter(|l| l.op == "alloc" && l.res == 0 && l.dev == dev)
                .count()
                >= 20,
            "allocations on device {dev}"
        );
    }
}

#[test]
fn fork_child_is_its_own_process() {
    let rec = record_scenario("fork", &[], None, &[]);
    assert_same_calls("fork", &rec);
    let pids: std::collections::BTreeSet<u32> = rec.lines.iter().map(|l| l.pid).collect();
    assert!(pids.len() >= 2, "parent and child both allocate");
    for pid in pids {
        assert!(
            rec.records
                .iter()
                .any(|r| r.pid == pid && r.kind == EventKind::ProcessStart as u16),
            "process {pid} has its own ProcessStart"
        );
    }
}

#[test]
fn exec_replaces_the_image_and_both_are_recorded() {
    let rec = record_scenario("exec", &[], None, &[]);
    assert_same_calls("exec", &rec);
    let starts = rec
        .records
        .iter()
        .filter(|r| r.kind == EventKind::ProcessStart as u16)
        .count();
    assert!(
        starts >= 2,
        "both images are described ({starts} ProcessStart)"
    );
}

#[test]
fn leaks_are_live_at_exit() {
    let rec = record_scenario("leak", &[], None, &[]);
    assert_same_calls("leak", &rec);
    let m = model_of(&rec.records);
    let leaked: u64 = m.leaks().iter().map(|g| g.size * g.count).sum();
    let printed: u64 = rec
        .lines
        .iter()
        .filter(|l| l.op == "alloc" && l.res == 0)
        .map(|l| l.size)
        .sum::<u64>()
        - rec
            .lines
            .iter()
            .filter(|l| l.op == "free" && l.res == 0)
            .map(|l| l.size)
            .sum::<u64>();
    assert!(
        leaked > 0 && leaked >= printed,
        "leaked {leaked} vs printed {printed}"
    );
}

#[test]
fn fragmentation_oom_gets_the_fragmentation_verdict() {
    let rec = record_scenario("frag_oom", &[], Some("1x1GiB"), &[]);
    assert_same_calls("frag_oom", &rec);
    let m = model_of(&rec.records);
    let failed = m.failed_allocs();
    assert!(!failed.is_empty(), "the scenario's last allocation failed");
    let last = failed.last().unwrap();
    assert_eq!(last.result, 2, "CUDA_ERROR_OUT_OF_MEMORY");
    assert_eq!(
        last.verdict,
        fragprobe_shared::model::Verdict::Fragmentation,
        "{last:?}"
    );
}
