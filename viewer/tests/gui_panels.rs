//! The viewer's panels driven like a user would (egui_kittest): what they show equals the
//! model's figures, and clicking, scrubbing and filtering change what is shown.

mod gui_support;

use std::sync::Arc;
use std::time::Duration;

use egui::{Event, Key, Modifiers, PointerButton, Pos2};
use egui_kittest::kittest::Queryable as _;
use egui_kittest::Harness;
use fragprobe_shared::format::{Api, EventKind, Record};
use fragprobe_shared::model::Model;
use fragprobe_viewer::gui::app::Viewer;
use fragprobe_viewer::gui::events::KindFilter;
use fragprobe_viewer::gui::options::{Options, Tab};
use fragprobe_viewer::pipeline::nvml::Sampler;
use fragprobe_viewer::pipeline::space::human_bytes;
use fragprobe_viewer::pipeline::{feed, Run, Source};
use gui_support::*;

const WAIT: Duration = Duration::from_secs(60);

/// Runs frames until the cursor's model is ready and the panels have caught up.
fn settle(h: &mut Harness<'_, Viewer>) {
    h.run_steps(2);
    let runs = h.state().runs.clone();
    for r in runs {
        assert!(r.wait_cursor(WAIT));
    }
    h.run_steps(3);
}

fn viewer_over(runs: Vec<Arc<Run>>) -> Viewer {
    Viewer::new(runs, Options::default(), None)
}

/// The text shown right of `label` on the same row (rightmost occurrence of the label:
/// the figures panel is on the right).
fn value_of(h: &Harness<'_, Viewer>, label: &str) -> String {
    let l = h
        .query_all_by_label(label)
        .max_by(|a, b| a.rect().left().total_cmp(&b.rect().left()))
        .unwrap_or_else(|| panic!("no {label:?} shown"));
    let (y, x) = (l.rect().center().y, l.rect().right());
    h.query_all_by(|n| n.bounding_box().is_some())
        .filter(|n| {
            (n.rect().center().y - y).abs() < 3.0
                && n.rect().left() > x
                && n.rect().left() < x + 300.0
        })
        .filter(|n| text_of(n).is_some_and(|t| !t.is_empty()))
        .min_by(|a, b| a.rect().left().total_cmp(&b.rect().left()))
        .and_then(|n| text_of(&n))
        .unwrap_or_else(|| {
            let near: Vec<String> = h
                .query_all_by(|n| n.bounding_box().is_some())
                .filter(|n| (n.rect().center().y - y).abs() < 12.0)
                .map(|n| format!("{:?}@{:?}", text_of(&n), n.rect()))
                .collect();
            panic!("no value right of {label:?} at {:?}: {near:?}", l.rect())
        })
}

fn expected_figures(m: &Model, pid: u32) -> Vec<(&'static str, String)> {
    let sp = m.space(m.space_id(pid, 0).unwrap()).unwrap();
    let t = sp.totals();
    let a = sp.arena().unwrap();
    vec![
        ("live bytes", human_bytes(t.live_bytes)),
        ("live count", t.live_count.to_string()),
        ("peak", human_bytes(sp.summary().peak_live)),
        ("fragmentation ratio", format!("{:.3}", a.ratio())),
        ("largest free block", human_bytes(a.largest_free)),
        ("total free", human_bytes(a.total_free)),
        ("failed allocations", m.counts().failed_allocs.to_string()),
        ("events", m.counts().events.to_string()),
    ]
}

fn assert_figures(h: &Harness<'_, Viewer>, m: &Model, pid: u32) {
    for (label, want) in expected_figures(m, pid) {
        assert_eq!(value_of(h, label), want, "{label}");
    }
}

fn press(h: &mut Harness<'_, Viewer>, key: Key) {
    h.key_press(key);
    h.run_steps(1);
}

fn text(h: &mut Harness<'_, Viewer>, s: &str) {
    h.event(Event::Text(s.into()));
    h.run_steps(1);
}

#[test]
fn figures_shown_equal_the_models_and_the_cross_check_flags_the_remainder() {
    let dir = temp_dir("figs");
    let s = fragmented(101, None);
    let run = loaded_run(&s, &dir, "f.fpt", 0);
    let mut h = harness(viewer_over(vec![run]));
    settle(&mut h);
    // A finished trace opens just before its process exited (the exit clears the state).
    assert_eq!(h.state().cursor, Some(s.exit_index()));
    assert_figures(&h, &s.model_after(s.exit_index()), 101);
    assert_eq!(value_of(&h, "fragmentation ratio"), "0.333");
    // NVML: 656 MiB for the process = 256 tracked + 300 context + 100 unexplained.
    assert_eq!(value_of(&h, "context baseline"), human_bytes(300 * MIB));
    assert_eq!(value_of(&h, "unexplained"), human_bytes(100 * MIB));
    assert!(h.query_by_label("Verdict: untracked allocations").is_some());
}

#[test]
fn scrubbing_and_stepping_rewind_the_figures() {
    let dir = temp_dir("scrub");
    let s = fragmented(102, None);
    let run = loaded_run(&s, &dir, "s.fpt", 0);
    let mut h = harness(viewer_over(vec![run]));
    settle(&mut h);

    press(&mut h, Key::Home);
    settle(&mut h);
    assert_eq!(h.state().cursor, Some(0));
    assert_eq!(value_of(&h, "events"), "0");

    // The failure button: the state right after the failed call.
    h.get_by_label("next failure").click();
    settle(&mut h);
    let fail = s.records.iter().position(|r| r.result != 0).unwrap();
    assert_eq!(h.state().cursor, Some(fail + 1));
    assert_figures(&h, &s.model_after(fail + 1), 102);

    // Step back one event with the keyboard.
    text(&mut h, ",");
    settle(&mut h);
    assert_eq!(h.state().cursor, Some(fail));
    assert_eq!(value_of(&h, "failed allocations"), "0");

    // The scrub slider: 30 ms after the start.
    h.get_by_role_and_label(egui::accesskit::Role::Slider, "scrub")
        .set_value_accesskit(0.030);
    settle(&mut h);
    let t = s.records[0].ts_ns + 30_000_000;
    let idx = s.records.iter().position(|r| r.ts_ns > t).unwrap();
    assert_eq!(h.state().cursor, Some(idx));
    assert_figures(&h, &s.model_after(idx), 102);

    // Back to the latest state: the process has exited, nothing is live.
    press(&mut h, Key::End);
    settle(&mut h);
    assert_eq!(h.state().cursor, None);
    assert_eq!(value_of(&h, "live bytes"), "0 B");
}

fn click_at(h: &mut Harness<'_, Viewer>, pos: Pos2) {
    h.event(Event::PointerMoved(pos));
    h.run_steps(1);
    for pressed in [true, false] {
        h.event(Event::PointerButton {
            pos,
            button: PointerButton::Primary,
            pressed,
            modifiers: Modifiers::default(),
        });
    }
    h.run_steps(2);
}

#[test]
fn clicking_the_map_pins_a_region_and_clicking_free_space_unpins() {
    let dir = temp_dir("map");
    let s = fragmented(103, None);
    let run = loaded_run(&s, &dir, "m.fpt", 0);
    let mut h = harness(viewer_over(vec![run]));
    settle(&mut h);
    let rect = h.get_by_label("address map").rect();
    let rows = h.state().options.map.rows as f32;
    let cols = rect.width().floor();
    let row_h = rect.height() / rows;
    // The arena is [BASE, BASE + 1 GiB): address → cell → pixel.
    let at = |addr: u64| {
        let pos = (addr - BASE) as f64 / (DEVICE as f64 / (cols * rows) as f64);
        let row = (pos / cols as f64).floor() as f32;
        let col = (pos % cols as f64) as f32;
        Pos2::new(
            rect.left() + col + 0.5,
            rect.top() + row * row_h + row_h * 0.4,
        )
    };
    // Allocation #1 (BASE + 8 MiB, 8 MiB) is still live; #0 was freed.
    click_at(&mut h, at(BASE + 12 * MIB));
    assert!(h.query_by_label("Pinned").is_some(), "a region is pinned");
    assert!(
        h.query_by_label("0x7f0000800000").is_some(),
        "its address is shown"
    );
    assert!(h.query_by_label("8.00 MiB (8388608 bytes)").is_some());
    assert!(h.query_by_label("cudaMalloc").is_some(), "its API");
    assert!(
        h.query_by_label("104").is_some(),
        "its thread (pid + 1 in the synthetic trace)"
    );
    click_at(&mut h, at(BASE + 4 * MIB));
    assert!(h.query_by_label("Pinned").is_none(), "free space unpins");
    // Zooming in with the keyboard shows fewer bytes per cell.
    let before = h.state().map.view;
    text(&mut h, "+");
    assert!(h.state().map.view.is_some() && h.state().map.view != before);
    text(&mut h, "0");
    assert_eq!(h.state().map.view, None);
}

#[test]
fn events_filter_finds_the_failure_and_selecting_it_moves_the_cursor() {
    let dir = temp_dir("events");
    let s = fragmented(104, None);
    let run = loaded_run(&s, &dir, "e.fpt", 0);
    let mut h = harness(viewer_over(vec![run]));
    settle(&mut h);
    text(&mut h, "3");
    assert_eq!(h.state().options.tab, Tab::Events);
    let n = s.records.len();
    h.run_steps(2);
    assert!(h.query_by_label(&format!("{n} of {n} events")).is_some());
    h.state_mut().events.filter.kind = KindFilter::Failures;
    h.run_steps(3);
    assert!(h.query_by_label(&format!("1 of {n} events")).is_some());
    let fail = s.records.iter().position(|r| r.result != 0).unwrap();
    h.get_by_label_contains(&format!("#{fail} ")).click();
    settle(&mut h);
    assert_eq!(h.state().cursor, Some(fail + 1));
    // A size filter that nothing passes, typed wrong first.
    h.state_mut().events.filter = Default::default();
    h.state_mut().events.filter.min_size = "lots".into();
    h.run_steps(2);
    assert!(
        h.query_by_label_contains("min size").is_some(),
        "the parse error is shown"
    );
    // (The Device record's size is the 1 GiB device; nothing is 2 GiB.)
    h.state_mut().events.filter.min_size = "2G".into();
    h.run_steps(3);
    assert!(h.query_by_label(&format!("0 of {n} events")).is_some());
}

#[test]
fn compare_shows_every_runs_label_and_figures() {
    let dir = temp_dir("cmp");
    let a = fragmented(105, Some("expandable_segments:True"));
    let mut b = Synth::new(106, Some("max_split_size_mb:512"));
    b.alloc(BASE, 100 * MIB);
    b.exit();
    let c = fragmented(107, None);
    let runs = vec![
        loaded_run(&a, &dir, "a.fpt", 0),
        loaded_run(&b, &dir, "b.fpt", 1),
        loaded_run(&c, &dir, "c.fpt", 2),
    ];
    let mut v = viewer_over(runs);
    v.options.tab = Tab::Compare;
    let mut h = harness(v);
    settle(&mut h);
    let shown = |h: &Harness<'_, Viewer>, l: &str| h.query_all_by_label(l).count() > 0;
    assert!(shown(&h, "expandable_segments:True"));
    assert!(shown(&h, "max_split_size_mb:512"));
    assert!(shown(&h, "c.fpt"), "no allocator config: the file name");
    assert!(shown(&h, &human_bytes(512 * MIB)), "a's peak");
    assert!(shown(&h, &human_bytes(100 * MIB)), "b's peak");
    // The run selector switches the map's run.
    h.get_by_label_contains("b.fpt ·").click();
    h.run_steps(2);
    assert_eq!(h.state().selected, 1);
}

#[test]
fn help_overlay_opens_with_f1_and_closes_with_escape() {
    let dir = temp_dir("help");
    let run = loaded_run(&fragmented(108, None), &dir, "h.fpt", 0);
    let mut h = harness(viewer_over(vec![run]));
    settle(&mut h);
    assert!(h.query_by_label("Keyboard shortcuts").is_none());
    press(&mut h, Key::F1);
    assert!(h.query_by_label("Keyboard shortcuts").is_some());
    assert!(h
        .query_by_label("next / previous failed allocation")
        .is_some());
    press(&mut h, Key::Escape);
    assert!(h.query_by_label("Keyboard shortcuts").is_none());
}

#[test]
fn processes_from_a_trace_are_listed_as_probed() {
    let dir = temp_dir("procs");
    let run = loaded_run(&fragmented(109, None), &dir, "p.fpt", 0);
    let mut v = viewer_over(vec![run]);
    v.options.tab = Tab::Processes;
    let mut h = harness(v);
    settle(&mut h);
    assert!(h.query_by_label("109").is_some());
    assert!(h.query_by_label("python train.py").is_some());
    assert!(h.query_by_label("probed").is_some());
}

#[test]
fn a_process_known_only_from_its_records_is_not_called_probed() {
    // What an imported PyTorch snapshot gives: allocations, and no process start from a
    // probe.
    let dir = temp_dir("procs-imported");
    let mut s = fragmented(111, None);
    s.records
        .retain(|r| r.kind != EventKind::ProcessStart as u16);
    let run = loaded_run(&s, &dir, "p.fpt", 0);
    let mut v = viewer_over(vec![run]);
    v.options.tab = Tab::Processes;
    let mut h = harness(v);
    settle(&mut h);
    assert!(h.query_by_label("111").is_some());
    assert!(h.query_by_label("probed").is_none());
}

#[test]
fn live_feed_shows_nvml_unavailable_and_ring_drops() {
    let (tx, rx) = feed("live");
    let run = Run::start(0, Source::Feed(rx)).unwrap();
    let mut s = Synth::new(110, None);
    s.alloc(BASE, 10 * MIB);
    s.push(Record {
        kind: EventKind::Loss as u16,
        api: Api::Consumer as u16,
        addr: 5,
        size: 7,
        ..Record::default()
    });
    send_from(&s, 0, &tx);
    let v = Viewer::new(
        vec![run.clone()],
        Options::default(),
        Some(Sampler::unavailable(
            "libnvidia-ml.so.1: cannot open shared object file",
        )),
    );
    let mut h = harness(v);
    for _ in 0..200 {
        if run.head().applied() == s.records.len() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    h.run_steps(3);
    assert!(h
        .query_by_label_contains("NVML unavailable: libnvidia-ml.so.1")
        .is_some());
    assert!(h
        .query_by_label_contains("the ring dropped 7 events")
        .is_some());
    assert!(
        h.query_by_label_contains("live: ").is_some(),
        "live progress line"
    );
    assert_eq!(value_of(&h, "live bytes"), human_bytes(10 * MIB));
    drop(tx);
    assert!(run.wait_loaded(WAIT));
    run.stop();
}

/// The records of two processes in one trace, in time order (records of kind 0, which
/// only spaced out a process's times, left out).
fn interleaved(a: &Synth, b: &Synth) -> Synth {
    let mut both = Synth::new(a.pid, None);
    both.records = a
        .records
        .iter()
        .chain(b.records.iter())
        .copied()
        .filter(|r| r.kind != 0)
        .collect();
    both.records.sort_by_key(|r| r.ts_ns);
    both.metas = a.metas.iter().chain(b.metas.iter()).cloned().collect();
    both
}

#[test]
fn two_processes_get_a_tab_each_or_merged_device_figures() {
    let dir = temp_dir("two");
    let mut a = Synth::new(201, None);
    a.alloc(BASE, 64 * MIB);
    let mut b = Synth::new(202, None);
    b.alloc(BASE, 16 * MIB);
    b.alloc(BASE + 32 * MIB, 16 * MIB);
    let run = loaded_run(&interleaved(&a, &b), &dir, "two.fpt", 0);
    let mut h = harness(viewer_over(vec![run]));
    settle(&mut h);
    // The busiest process first.
    assert_eq!(value_of(&h, "live bytes"), human_bytes(64 * MIB));
    h.get_by_label("pid 202 · GPU 0").click();
    h.run_steps(2);
    assert_eq!(value_of(&h, "live bytes"), human_bytes(32 * MIB));
    assert_eq!(value_of(&h, "live count"), "2");
    h.state_mut().options.merge_processes = true;
    h.run_steps(2);
    assert_eq!(value_of(&h, "live bytes"), human_bytes(96 * MIB));
    assert_eq!(value_of(&h, "live count"), "3");
}

#[test]
fn each_process_is_cross_checked_against_its_own_nvml_figure() {
    let dir = temp_dir("two-nvml");
    let mut a = Synth::new(203, None);
    a.alloc(BASE, 64 * MIB);
    a.nvml(480 * MIB, 364 * MIB);
    let mut b = Synth::new(204, None);
    b.alloc(BASE, 16 * MIB);
    b.push(Record::default()); // b's sample comes after a's
    b.nvml(480 * MIB, 116 * MIB);
    let run = loaded_run(&interleaved(&a, &b), &dir, "two-nvml.fpt", 0);
    let mut h = harness(viewer_over(vec![run]));
    settle(&mut h);
    // The device's last sample is b's; a's cross-check still uses a's own figure.
    assert_eq!(value_of(&h, "live bytes"), human_bytes(64 * MIB));
    assert_eq!(value_of(&h, "NVML, this process"), human_bytes(364 * MIB));
    h.get_by_label("pid 204 · GPU 0").click();
    h.run_steps(2);
    assert_eq!(value_of(&h, "NVML, this process"), human_bytes(116 * MIB));
}

#[test]
fn the_window_builds_the_map_off_the_ui_thread() {
    let dir = temp_dir("bg");
    let run = loaded_run(&fragmented(111, None), &dir, "bg.fpt", 0);
    let mut v = viewer_over(vec![run]);
    v.background = true;
    let mut h = harness(v);
    let mut drawn = 0;
    for _ in 0..400 {
        h.run_steps(1);
        drawn = h.state().map.regions_drawn;
        if drawn > 0 && h.query_by_label("address map").is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // The 32 allocations live before the exit, built by the "fragprobe-map" thread.
    assert_eq!(drawn, 32);
}

#[test]
fn frames_keep_coming_while_a_big_trace_loads_and_the_cursor_moves() {
    let dir = temp_dir("big");
    let mut s = Synth::new(112, None);
    for i in 0..100_000u64 {
        s.alloc(BASE + i * 4096, 4096);
        if i % 3 == 0 {
            s.free(BASE + i * 4096);
        }
    }
    let p = dir.join("big.fpt");
    s.write(&p);
    let run = Run::start(0, Source::Trace(p)).unwrap();
    let mut h = harness(viewer_over(vec![run.clone()]));
    // Frames while it loads (as many as the load takes) and then some, scrubbing all the
    // time: the rewinder, the ingest and the frames share the head without deadlocking.
    let mut frames = 0;
    while !run.progress.finished() || frames < 30 {
        h.run_steps(1);
        frames += 1;
        let applied = run.head().applied();
        h.state_mut().set_cursor(Some(applied / 2 + frames));
    }
    settle(&mut h);
    let c = h.state().cursor.unwrap();
    assert_eq!(value_of(&h, "events"), c.to_string());
}

#[test]
fn clicking_the_timeline_moves_the_cursor_and_the_map_follows() {
    let dir = temp_dir("tl");
    let s = fragmented(113, None);
    let run = loaded_run(&s, &dir, "t.fpt", 0);
    let mut h = harness(viewer_over(vec![run]));
    settle(&mut h);
    let before = h.state().cursor;
    // The bytes plot sits under the map's status line; click a third of the way in.
    let status = h.get_by_label_contains("regions drawn").rect();
    let map = h.get_by_label("address map").rect();
    let x = map.left() + 64.0 + (map.width() - 64.0) / 3.0;
    click_at(&mut h, Pos2::new(x, status.bottom() + 80.0));
    settle(&mut h);
    let after = h.state().cursor.expect("a cursor");
    assert_ne!(Some(after), before);
    assert!(
        after > 2 && after < s.exit_index(),
        "early in the run: {after}"
    );
    assert_figures(&h, &s.model_after(after), 113);
    assert_eq!(
        h.state().map.regions_drawn,
        s.model_after(after)
            .space(s.model_after(after).space_id(113, 0).unwrap())
            .unwrap()
            .totals()
            .live_count
    );
}

#[test]
fn at_peak_and_at_seconds_wait_for_the_trace_to_load() {
    use fragprobe_viewer::gui::app::At;
    // A window opens before its trace has loaded: `--at` must land where it says once
    // the records are in, not at the start.
    let mut s = fragmented(120, None);
    // Times off the millisecond grid: the scrub slider once rounded the cursor's time to
    // milliseconds and moved it there on the next frame.
    for (i, r) in s.records.iter_mut().enumerate() {
        r.ts_ns += i as u64 * 123_457;
    }
    let peak_at = s.model_after(s.records.len()).spaces()[0]
        .summary()
        .peak_at
        .unwrap()
        .ts_ns;
    for (at, want) in [
        (At::Peak, peak_at),
        (
            At::Seconds((peak_at - s.records[0].ts_ns) as f64 / 1e9),
            peak_at,
        ),
    ] {
        let (tx, rx) = feed("opening");
        let run = Run::start(0, Source::Feed(rx)).unwrap();
        let mut v = viewer_over(vec![run.clone()]);
        v.go_to(at);
        assert_eq!(v.pending_at, Some(at), "nothing is loaded yet");
        let mut h = harness(v);
        h.run_steps(2);
        assert_eq!(h.state().pending_at, Some(at), "{at:?} waits for the load");
        send_from(&s, 0, &tx);
        drop(tx);
        assert!(run.wait_loaded(WAIT));
        settle(&mut h);
        assert_eq!(h.state().pending_at, None);
        let cursor = h.state().cursor_time();
        assert_eq!(cursor, Some(want), "{at:?}");
        run.stop();
    }
}

#[test]
fn a_live_view_follows_the_newest_event_until_the_user_scrubs() {
    use fragprobe_viewer::gui::app::At;
    let (tx, rx) = feed("live");
    let run = Run::start(0, Source::Feed(rx)).unwrap();
    let mut v = viewer_over(vec![run.clone()]);
    v.go_to(At::End);
    let mut h = harness(v);
    let mut s = Synth::new(121, None);
    s.alloc(BASE, 10 * MIB);
    send_from(&s, 0, &tx);
    let wait_applied = |n: usize| {
        for _ in 0..400 {
            if run.head().applied() >= n {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!("the feed was not applied");
    };
    wait_applied(s.records.len());
    h.run_steps(3);
    assert_eq!(h.state().cursor, None, "the latest state");
    assert!(h
        .query_by_label_contains("following the newest event")
        .is_some());
    // More events arrive: still the newest.
    let before = s.records.len();
    s.alloc(BASE + 16 * MIB, 10 * MIB);
    send_from(&s, before, &tx);
    wait_applied(s.records.len());
    h.run_steps(3);
    assert_eq!(h.state().cursor, None);
    // The user goes to the start: the cursor holds there and the view says so.
    press(&mut h, Key::Home);
    h.run_steps(3);
    assert_eq!(h.state().cursor, Some(0));
    assert!(h.query_by_label_contains("cursor held at").is_some());
    drop(tx);
    run.stop();
}
