//! The viewer's pipeline: every source ingests into the same model as a plain replay, and
//! the rewound cursor model equals a fresh replay up to the cursor.

mod gui_support;

use std::time::Duration;

use fragprobe_shared::model::Model;
use fragprobe_shared::trace::TraceWriter;
use fragprobe_viewer::pipeline::space::SpaceKey;
use fragprobe_viewer::pipeline::{feed, view, Run, Source};
use gui_support::*;

const WAIT: Duration = Duration::from_secs(60);

/// The figures that must agree: totals, arena, counts.
fn fingerprint(m: &Model, pid: u32) -> String {
    let sp = m.space_id(pid, 0).and_then(|s| m.space(s));
    let (t, a) = sp.map(|s| (*s.totals(), s.arena())).unwrap_or_default();
    format!(
        "{t:?} {a:?} events={} failed={} anomalies={}",
        m.counts().events,
        m.counts().failed_allocs,
        m.counts().anomalies
    )
}

#[test]
fn trace_ingest_equals_a_plain_replay() {
    let dir = temp_dir("ingest");
    let s = fragmented(4242, Some("expandable_segments:False"));
    let run = loaded_run(&s, &dir, "a.fpt", 0);
    let h = run.head();
    assert_eq!(h.applied(), s.records.len());
    assert_eq!(
        fingerprint(&h.model, 4242),
        fingerprint(&s.model_after(s.records.len()), 4242)
    );
    assert_eq!(h.first_exit, Some(s.exit_index()));
    assert_eq!(h.alloc_conf().as_deref(), Some("expandable_segments:False"));
    let b = h
        .baselines
        .get(&(4242, 0))
        .and_then(|b| b.at(u64::MAX))
        .expect("baseline from the first NVML sample");
    assert_eq!(b.bytes, 300 * MIB);
    assert_eq!(h.span().0, s.records[0].ts_ns);
    run.stop();
}

/// A process sampled first with 64 MiB tracked (NVML: 364 MiB), then with 164 MiB
/// (NVML: 514 MiB, 50 MiB the probe never saw); then, if `measured`, everything freed and
/// sampled with nothing tracked (NVML: `measured` MiB).
fn sampled_late(measured: Option<u64>) -> Synth {
    let mut s = Synth::new(4343, None);
    s.alloc(BASE, 64 * MIB);
    s.nvml(364 * MIB, 364 * MIB);
    s.alloc(BASE + 64 * MIB, 100 * MIB);
    s.nvml(514 * MIB, 514 * MIB);
    if let Some(m) = measured {
        s.free(BASE);
        s.free(BASE + 64 * MIB);
        s.nvml(m * MIB, m * MIB);
    }
    s
}

#[test]
fn a_process_first_sampled_with_allocations_gets_an_estimated_context() {
    let dir = temp_dir("estimated");
    let s = sampled_late(None);
    let first = s.records[3].ts_ns;
    let run = loaded_run(&s, &dir, "est.fpt", 0);
    let h = run.head();
    let b = h.baselines[&(4343, 0)].at(u64::MAX).expect("an estimate");
    assert_eq!(
        (b.ts_ns, b.bytes, b.estimated_with),
        (first, 300 * MIB, Some(64 * MIB))
    );
    // At the end: 164 MiB tracked + 300 MiB context, 50 MiB the probe never saw.
    let space = SpaceKey {
        pid: 4343,
        device: 0,
    };
    let f = view::figures(&h.model, &h, space, false, None, None);
    let c = f.crosscheck.expect("a cross-check");
    assert_eq!(c.unexplained(), Some(50 * MIB as i64));
    assert_eq!(c.baseline_estimated_with, Some(64 * MIB));
    drop(h);
    run.stop();

    // A sample with nothing tracked measures the context. The smaller of the two is in
    // effect (a larger one would hide what appeared in between), and only from when it
    // was taken.
    for (measured, in_effect, estimated) in [(280, 280, None), (350, 300, Some(64 * MIB))] {
        let t = sampled_late(Some(measured));
        let run = loaded_run(&t, &dir, &format!("measured-{measured}.fpt"), 0);
        let bs = run.head().baselines[&(4343, 0)];
        let b = bs.at(u64::MAX).unwrap();
        assert_eq!((b.bytes, b.estimated_with), (in_effect * MIB, estimated));
        let before = t.records.last().unwrap().ts_ns - 1;
        assert_eq!(bs.at(before).map(|b| b.bytes), Some(300 * MIB), "rewound");
        assert_eq!(bs.at(first - 1), None, "before any sample");
        run.stop();
    }
}

#[test]
fn rewinding_back_and_forth_matches_replays() {
    let dir = temp_dir("rewind");
    let s = fragmented(7, None);
    let run = loaded_run(&s, &dir, "r.fpt", 0);
    // Forward, back, forward again, and the start: each equals a fresh replay.
    for idx in [40, 90, 10, 70, 0, s.exit_index(), 2] {
        run.seek(Some(idx));
        assert!(run.wait_cursor(WAIT), "cursor reaches {idx}");
        let c = run.cursor();
        let c = c.as_ref().expect("cursor model");
        assert_eq!(c.index, idx);
        assert_eq!(
            fingerprint(&c.model, 7),
            fingerprint(&s.model_after(idx), 7),
            "at {idx}"
        );
    }
    // A target replaced before the rewinder got there: the last one wins.
    run.seek(Some(5));
    run.seek(Some(120));
    run.seek(Some(33));
    assert!(run.wait_cursor(WAIT));
    assert_eq!(run.cursor().as_ref().map(|c| c.index), Some(33));
    assert_eq!(
        fingerprint(&run.cursor().as_ref().unwrap().model, 7),
        fingerprint(&s.model_after(33), 7)
    );
    run.seek(None);
    std::thread::sleep(Duration::from_millis(50));
    assert!(!run.rewinding());
    run.stop();
}

#[test]
fn rewinding_uses_the_traces_checkpoints_and_stays_exact() {
    let dir = temp_dir("ckpt");
    let s = fragmented(9, None);
    let p = dir.join("c.fpt");
    let mut w = TraceWriter::create(&p).unwrap();
    for (pid, r, e) in &s.metas {
        w.write_meta(*pid, *r, e).unwrap();
    }
    w.write_records(&s.records[..60]).unwrap();
    w.write_checkpoint(60, &s.model_after(60).checkpoint())
        .unwrap();
    w.write_records(&s.records[60..]).unwrap();
    w.finish().unwrap();
    let run = Run::start(0, Source::Trace(p)).unwrap();
    assert!(run.wait_loaded(WAIT));
    assert_eq!(run.head().checkpoints().first().map(|c| c.0), Some(60));
    for idx in [100, 61, 60, 59] {
        run.seek(Some(idx));
        assert!(run.wait_cursor(WAIT));
        assert_eq!(
            fingerprint(&run.cursor().as_ref().unwrap().model, 9),
            fingerprint(&s.model_after(idx), 9),
            "at {idx}"
        );
    }
    run.stop();
}

#[test]
fn a_feed_is_ingested_like_a_trace_and_ends_when_the_sender_drops() {
    let s = fragmented(11, Some("max_split_size_mb:128"));
    let (tx, rx) = feed("run --view");
    let run = Run::start(0, Source::Feed(rx)).unwrap();
    assert!(run.live);
    send_from(&s, 0, &tx);
    tx.set_dropped(0);
    assert!(
        !run.wait_loaded(Duration::from_millis(100)) || run.head().applied() == s.records.len()
    );
    drop(tx);
    assert!(run.wait_loaded(WAIT));
    let h = run.head();
    assert_eq!(h.applied(), s.records.len());
    assert_eq!(
        fingerprint(&h.model, 11),
        fingerprint(&s.model_after(s.records.len()), 11)
    );
    assert_eq!(h.alloc_conf().as_deref(), Some("max_split_size_mb:128"));
    drop(h);
    run.stop();
}

#[test]
fn a_file_that_is_not_a_trace_fails_with_a_message_naming_it() {
    let dir = temp_dir("bad");
    let p = dir.join("notes.txt");
    std::fs::write(&p, b"hello, not a pickle").unwrap();
    let src = Source::detect(&p).unwrap();
    let run = Run::start(0, src).unwrap();
    assert!(run.wait_loaded(WAIT));
    let e = run.progress.error().expect("an error");
    assert!(e.contains("notes.txt"), "{e}");
    assert!(Source::detect(&dir.join("missing.fpt"))
        .unwrap_err()
        .contains("missing.fpt"));
}

#[test]
fn a_trace_with_checkpoints_opens_from_the_last_one_then_fills_the_history() {
    use fragprobe_shared::model::Metric;
    let dir = temp_dir("fast");
    let s = fragmented(12, Some("roundup_power2_divisions:4"));
    let p = dir.join("f.fpt");
    let mut w = TraceWriter::create(&p).unwrap();
    for (pid, r, e) in &s.metas {
        w.write_meta(*pid, *r, e).unwrap();
    }
    for cut in [30usize, 80] {
        let from = if cut == 30 { 0 } else { 30 };
        w.write_records(&s.records[from..cut]).unwrap();
        w.write_checkpoint(cut as u64, &s.model_after(cut).checkpoint())
            .unwrap();
    }
    w.write_records(&s.records[80..]).unwrap();
    w.finish().unwrap();
    let run = Run::start(0, Source::Trace(p)).unwrap();
    assert!(run.wait_loaded(WAIT));
    let all = s.records.len();
    let reference = s.model_after(all);
    assert_eq!(
        fingerprint(&run.head().model, 12),
        fingerprint(&reference, 12)
    );
    assert!(run.wait_history(WAIT));
    let h = run.head();
    let live = |m: &Model| {
        let sp = m.space(m.space_id(12, 0).unwrap()).unwrap();
        sp.series()
            .get(Metric::Live)
            .points()
            .map(|b| (b.t, b.max))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        live(&h.model),
        live(&reference),
        "the timelines cover the whole run"
    );
    assert_eq!(h.first_exit, Some(s.exit_index()));
    assert_eq!(
        h.baselines[&(12, 0)].at(u64::MAX).map(|b| b.bytes),
        Some(300 * MIB)
    );
    assert_eq!(
        h.alloc_conf().as_deref(),
        Some("roundup_power2_divisions:4")
    );
    assert_eq!(h.applied(), all);
    drop(h);
    // Rewinding still starts from the trace's checkpoints.
    run.seek(Some(85));
    assert!(run.wait_cursor(WAIT));
    assert_eq!(
        fingerprint(&run.cursor().as_ref().unwrap().model, 12),
        fingerprint(&s.model_after(85), 12)
    );
    run.stop();
}

#[test]
fn compare_overlays_runs_from_each_ones_first_allocation() {
    use fragprobe_viewer::pipeline::view::compare_run;
    let dir = gui_support::temp_dir("align");
    // The same workload twice; the second spends 600 ms in start-up before allocating.
    let a = gui_support::fragmented(31, None);
    let mut b = gui_support::fragmented(32, None);
    for r in b.records.iter_mut().skip(2) {
        r.ts_ns += 600_000_000;
    }
    let ra = gui_support::loaded_run(&a, &dir, "a.fpt", 0);
    let rb = gui_support::loaded_run(&b, &dir, "b.fpt", 1);
    let ca = compare_run(&ra.head(), "a", false, 200);
    let cb = compare_run(&rb.head(), "b", false, 200);
    let first_live = |pts: &[[f64; 2]]| pts.iter().find(|p| p[1] > 0.0).map(|p| p[0]).unwrap();
    let (xa, xb) = (first_live(&ca.live), first_live(&cb.live));
    assert!((xa - xb).abs() < 1e-3, "aligned: {xa} vs {xb}");
    assert!(xa < 0.01, "from the first allocation: {xa}");
    assert!(
        cb.stats.duration_s > ca.stats.duration_s + 0.5,
        "the duration still counts it"
    );
}

/// The GUI's Compare line and `fragprobe compare`'s figures of one trace file.
fn compare_both_ways(p: &std::path::Path) {
    use fragprobe_viewer::pipeline::view::compare_run;
    let run = Run::start(0, Source::Trace(p.to_path_buf())).unwrap();
    assert!(run.wait_loaded(WAIT));
    assert!(run.wait_history(WAIT));
    let gui = compare_run(&run.head(), "run", false, 200).stats;
    let cli = fragprobe_viewer::cmd::report::report_of(p, true).unwrap();
    let at = format!("{}: GUI {gui:?}", p.display());
    assert!(cli.bytes.peak_live > 0, "{at}");
    assert_eq!(gui.peak_live, cli.bytes.peak_live, "{at}");
    assert_eq!(gui.final_live, cli.bytes.final_live, "{at}");
    assert_eq!(gui.ratio_at_peak, cli.fragmentation.ratio_at_peak, "{at}");
    assert_eq!(gui.max_ratio, cli.fragmentation.max_ratio, "{at}");
    assert_eq!(
        gui.min_largest_free.unwrap_or(0),
        cli.fragmentation.min_largest_free_block,
        "{at}"
    );
    assert_eq!(
        gui.failed_allocs,
        cli.failed_allocations.len() as u64,
        "{at}"
    );
    assert_eq!(gui.events, cli.events.total, "{at}");
}

#[test]
fn the_compare_tab_shows_the_figures_fragprobe_compare_prints() {
    // The frozen trace: 7 processes on 2 devices, VMM, pools, failed allocations.
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/format-v1.fpt");
    compare_both_ways(&fixture);
    // Two processes alive together on one device: the device peaks at 500 MiB while
    // neither process passes 300 MiB, so "the busiest process" would be the wrong answer.
    let mut a = Synth::new(41, None);
    let mut b = Synth::new(42, None);
    a.alloc(0x7f00_0000_0000, 300 * MIB);
    b.alloc(0x7f10_0000_0000, 200 * MIB);
    b.free(0x7f10_0000_0000);
    a.free(0x7f00_0000_0000);
    let mut both = Synth::new(41, None);
    both.records = a.records.iter().chain(&b.records).copied().collect();
    both.records.sort_by_key(|r| (r.ts_ns, r.pid));
    both.metas = a.metas.iter().chain(&b.metas).cloned().collect();
    let dir = gui_support::temp_dir("compare-figures");
    let p = dir.join("two.fpt");
    both.write(&p);
    compare_both_ways(&p);
    let run = Run::start(0, Source::Trace(p)).unwrap();
    assert!(run.wait_history(WAIT));
    let gui = fragprobe_viewer::pipeline::view::compare_run(&run.head(), "two", false, 200);
    assert_eq!(gui.stats.peak_live, 500 * MIB);
}
