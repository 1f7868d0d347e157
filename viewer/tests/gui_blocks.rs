//! The allocator layer of a real PyTorch snapshot in the viewer: the pipeline publishes
//! segments, blocks, frames and allocator figures; the Blocks tab draws them, hovering a
//! block shows its sizes, state and frames, clicking pins it; the figures panel shows the
//! allocator-level figures; a probe trace has no such layer.

mod gui_support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use egui::{Event, Modifiers, PointerButton, Pos2};
use egui_kittest::kittest::Queryable as _;
use egui_kittest::Harness;
use fragprobe_shared::torch::{load_snapshot, BlockState};
use fragprobe_viewer::cmd::view::{self, Args};
use fragprobe_viewer::gui::app::Viewer;
use fragprobe_viewer::gui::blocks::colour;
use fragprobe_viewer::gui::options::{Options, Tab};
use fragprobe_viewer::gui::screenshot;
use fragprobe_viewer::pipeline::blocks::{AllocatorLayer, Category, DeviceLayer};
use fragprobe_viewer::pipeline::space::human_bytes;
use fragprobe_viewer::pipeline::{Run, Source};
use gui_support::*;

const WAIT: Duration = Duration::from_secs(120);
const MAGMA: &str = "MAGMA27__memory_snapshot.pickle";

fn fixture(name: &str) -> PathBuf {
    fragprobe_tests::snapshots::path(name)
}

fn snapshot_run(name: &str) -> Arc<Run> {
    let run = Run::start(0, Source::Snapshot(fixture(name))).unwrap();
    assert!(run.wait_loaded(WAIT), "{name} loads");
    assert_eq!(run.progress.error(), None);
    run
}

fn layer_of(run: &Run) -> Arc<AllocatorLayer> {
    run.head()
        .allocator
        .clone()
        .expect("a snapshot run publishes its allocator layer")
}

/// The largest allocated block with frames: (index, its frames).
fn chosen(layer: &AllocatorLayer, d: &DeviceLayer) -> (usize, Vec<String>) {
    let i = (0..d.blocks.len())
        .filter(|&i| d.blocks[i].state == BlockState::ActiveAllocated)
        .filter(|&i| !layer.frames(d.blocks[i].stack).is_empty())
        .max_by_key(|&i| d.blocks[i].size)
        .expect("an allocated block with frames");
    (i, layer.frames(d.blocks[i].stack))
}

#[test]
fn the_run_publishes_the_snapshots_allocator_layer() {
    if fragprobe_tests::snapshots::dir().is_none() {
        return;
    }
    for name in [
        MAGMA,
        "Wedsonlin__medium_128_inference_memory_snapshot.pickle",
    ] {
        let run = snapshot_run(name);
        let layer = layer_of(&run);
        let snap = load_snapshot(&fixture(name)).unwrap();
        let direct = AllocatorLayer::from_snapshot(&snap, true);
        assert_eq!(layer.devices.len(), direct.devices.len());
        for (got, want) in layer.devices.iter().zip(&direct.devices) {
            assert_eq!(got.device, want.device);
            assert_eq!(got.blocks, want.blocks, "{name}: blocks");
            assert_eq!(got.segments, want.segments, "{name}: segments");
            assert_eq!(got.counts, want.counts);
            assert_eq!(got.now, want.now, "{name}: figures now");
            assert_eq!(got.peak, want.peak, "{name}: peak figures");
            let blocks = snap
                .device_segments(got.device)
                .map(|s| s.blocks.len())
                .sum::<usize>();
            assert_eq!(got.blocks.len(), blocks);
            assert!(got.peak.is_some(), "{name} has a trace");
        }
        // The device layer went through the model as before: one region per segment alive.
        let h = run.head();
        let live: u64 = h.model.spaces().iter().map(|s| s.totals().live_bytes).sum();
        let reserved: u64 = layer.devices.iter().map(|d| d.now.reserved).sum();
        assert_eq!(live, reserved, "{name}: segments as live regions");
        run.stop();
    }
}

#[test]
fn a_probe_trace_has_no_allocator_layer_and_the_blocks_tab_says_so() {
    let dir = temp_dir("blocks-none");
    let run = loaded_run(&fragmented(111, None), &dir, "t.fpt", 0);
    assert!(run.head().allocator.is_none());
    let options = Options {
        tab: Tab::Blocks,
        ..Options::default()
    };
    let mut h = harness(Viewer::new(vec![run], options, None));
    h.run_steps(3);
    assert!(h
        .query_all_by(|n| label(n).is_some_and(|t| t.starts_with("No allocator layer")))
        .next()
        .is_some());
    assert!(h.query_by_label("allocator blocks").is_none());
}

fn label(n: &egui_kittest::kittest::AccessKitNode<'_>) -> Option<String> {
    n.label().or_else(|| n.value())
}

fn shown(h: &Harness<'_, Viewer>, text: &str) -> bool {
    h.query_all_by(|n| label(n).is_some_and(|t| t == text))
        .next()
        .is_some()
}

/// The text right of `label` on the same row.
fn value_of(h: &Harness<'_, Viewer>, label: &str) -> String {
    let l = h
        .query_all_by_label(label)
        .next()
        .unwrap_or_else(|| panic!("no {label:?} shown"));
    let (y, x) = (l.rect().center().y, l.rect().right());
    h.query_all_by(|n| n.bounding_box().is_some())
        .filter(|n| (n.rect().center().y - y).abs() < 3.0 && n.rect().left() > x)
        .filter(|n| text_of(n).is_some_and(|t| !t.is_empty()))
        .min_by(|a, b| a.rect().left().total_cmp(&b.rect().left()))
        .and_then(|n| text_of(&n))
        .unwrap_or_else(|| panic!("no value right of {label:?}"))
}

#[test]
fn hovering_a_block_shows_its_frames_and_clicking_pins_it() {
    if fragprobe_tests::snapshots::dir().is_none() {
        return;
    }
    let run = snapshot_run(MAGMA);
    let layer = layer_of(&run);
    let d = &layer.devices[0];
    let (i, frames) = chosen(&layer, d);
    let b = d.blocks[i];
    let options = Options {
        tab: Tab::Blocks,
        ..Options::default()
    };
    let mut h = harness(Viewer::new(vec![run.clone()], options, None));
    h.run_steps(3);
    assert!(shown(
        &h,
        &format!(
            "{} segments · {} blocks: {} allocated, {} pending free, {} inactive",
            d.segments.len(),
            d.blocks.len(),
            d.counts[0],
            d.counts[1],
            d.counts[2]
        )
    ));
    let rect = h.get_by_label("allocator blocks").rect();
    let rows = h.state().blocks.rows() as f64;
    let cols = rect.width().floor() as f64;
    let row_h = rect.height() as f64 / rows;
    let n = rows * cols;
    let cells = b.size as f64 / d.span as f64 * n;
    assert!(cells >= 3.0, "the chosen block is {cells} cells wide");
    let mid = d.offset_of(i) as f64 + b.size as f64 / 2.0;
    let pos = mid / d.span as f64 * n;
    let at = Pos2::new(
        rect.left() + (pos % cols) as f32,
        rect.top() + ((pos / cols).floor() * row_h + row_h * 0.4) as f32,
    );
    h.event(Event::PointerMoved(at));
    h.run_steps(2);
    assert_eq!(h.state().blocks.hovered, Some(i));
    assert!(shown(&h, "Block under the pointer"));
    assert!(shown(&h, &format!("{:#x}", b.address)), "its address");
    assert!(shown(
        &h,
        &format!("{} ({} bytes)", human_bytes(b.size), b.size)
    ));
    assert!(shown(
        &h,
        &format!("{} ({} bytes)", human_bytes(b.requested), b.requested)
    ));
    assert!(shown(&h, "allocated"), "its state");
    assert!(
        shown(&h, &format!("frames ({}, innermost first)", frames.len())),
        "the frame count"
    );
    for f in frames.iter().take(5) {
        assert!(shown(&h, f), "frame {f:?} is drawn");
    }
    // Click: pinned; the pointer leaves the band and the pinned block stays shown.
    for pressed in [true, false] {
        h.event(Event::PointerButton {
            pos: at,
            button: PointerButton::Primary,
            pressed,
            modifiers: Modifiers::default(),
        });
    }
    h.run_steps(2);
    assert_eq!(h.state().blocks.pinned, Some(i));
    h.event(Event::PointerMoved(Pos2::new(5.0, 890.0)));
    h.run_steps(2);
    assert_eq!(h.state().blocks.hovered, None);
    assert!(shown(&h, "Pinned block"));
    assert!(shown(&h, &frames[0]), "the pinned block's innermost frame");

    // The figures panel has the allocator-level figures of the snapshot's device.
    let now = &d.now;
    assert_eq!(
        value_of(&h, "non-releasable"),
        human_bytes(now.non_releasable)
    );
    assert_eq!(
        value_of(&h, "rounding waste"),
        human_bytes(now.internal_waste)
    );
    assert_eq!(value_of(&h, "requested"), human_bytes(now.requested));
    assert_eq!(
        value_of(&h, "1 − allocated/reserved"),
        format!("{:.1} %", 100.0 * now.unallocated_fraction())
    );
    let p = d.peak.unwrap().figures;
    assert_eq!(value_of(&h, "peak reserved"), human_bytes(p.peak_reserved));
    assert_eq!(
        value_of(&h, "GMLake peak active/reserved"),
        format!("{:.1} %", 100.0 * p.gmlake_utilization())
    );
    run.stop();
}

#[test]
fn screenshot_of_the_blocks_tab_shows_the_block_states() {
    if fragprobe_tests::snapshots::dir().is_none() {
        return;
    }
    let dir = temp_dir("blocks-shot");
    let out = dir.join("blocks.png");
    let args = Args {
        traces: vec![fixture(MAGMA)],
        screenshot: Some(out.clone()),
        size: "1400x900".into(),
        panel: Some("blocks".into()),
        no_nvml: true,
        ..Args::default()
    };
    view::run(&args).expect("screenshot renders");
    let (w, h, rgba) = read_png(&out);
    assert_eq!((w, h), (1400, 900));
    let allocated = count(&rgba, colour(Category::Requested));
    let free = count(&rgba, colour(Category::Free));
    assert!(allocated > 2000, "allocated pixels: {allocated}");
    assert!(free > 500, "inactive pixels: {free}");
}

#[test]
fn headless_picture_of_a_pinned_block_with_its_frames() {
    if fragprobe_tests::snapshots::dir().is_none() {
        return;
    }
    let run = snapshot_run(MAGMA);
    let layer = layer_of(&run);
    let (i, _) = chosen(&layer, &layer.devices[0]);
    let picture = |pin: Option<usize>| {
        let options = Options {
            tab: Tab::Blocks,
            ..Options::default()
        };
        let mut v = Viewer::new(vec![run.clone()], options, None);
        v.blocks.pinned = pin;
        let img = screenshot::render(&mut v, [1400, 900], WAIT).expect("renders");
        assert_eq!(v.blocks.pinned, pin, "the pin survives the frames");
        img
    };
    let plain = picture(None);
    let pinned = picture(Some(i));
    let scratch = temp_dir("blocks-pinned");
    let out = std::env::var_os("FRAGPROBE_BLOCKS_SCREENSHOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| scratch.join("pinned.png"));
    pinned.write_png(&out).unwrap();
    // The white outline replaces some of the block's allocated-colour cells.
    let blue =
        |img: &fragprobe_viewer::gui::raster::Image| count(&img.rgba, colour(Category::Requested));
    let white = |img: &fragprobe_viewer::gui::raster::Image| count(&img.rgba, egui::Color32::WHITE);
    assert!(
        blue(&pinned) + 20 < blue(&plain),
        "outline over the block: {} vs {}",
        blue(&pinned),
        blue(&plain)
    );
    assert!(white(&pinned) > white(&plain) + 20);
    run.stop();
}

/// A snapshot with `segments` × 256 blocks (no trace), written as a real pickle.
fn big_snapshot(path: &Path, segments: u64) -> u64 {
    use fragprobe_shared::torch::snapshot::{FormatInfo, SnapshotLayout};
    use fragprobe_shared::torch::stacks::{Frame, Stacks};
    use fragprobe_shared::torch::{Block, PoolKind, Segment, Snapshot};
    let mut stacks = Stacks::default();
    let f = stacks.frame(Frame {
        filename: "train.py".into(),
        line: 42,
        name: "step".into(),
    });
    let stack = stacks.stack(&[f]);
    let mut segs = Vec::new();
    let mut i = 0u64;
    for k in 0..segments {
        let base = 0x7000_0000_0000 + k * (64 << 20);
        let mut at = base;
        let mut blocks = Vec::with_capacity(256);
        for _ in 0..256 {
            let size = 512 * (1 + (i * 7919) % 64);
            let state = match i % 7 {
                0 | 3 => BlockState::Inactive,
                5 if i.is_multiple_of(5) => BlockState::ActivePendingFree,
                _ => BlockState::ActiveAllocated,
            };
            let requested = if state == BlockState::Inactive {
                0
            } else {
                size - (i % 3) * 100
            };
            blocks.push(Block {
                address: at,
                size,
                requested_size: requested,
                state,
                stack,
            });
            at += size;
            i += 1;
        }
        segs.push(Segment {
            device: 0,
            address: base,
            total_size: at - base,
            stream: 0,
            pool: PoolKind::Large,
            pool_id: (0, 0),
            is_expandable: false,
            stack,
            blocks,
        });
    }
    let snap = Snapshot {
        format: FormatInfo {
            layout: SnapshotLayout::Dict,
            pickle_protocol: 4,
            has_time_us: true,
            has_settings: false,
            legacy_history: false,
        },
        segments: segs,
        traces: vec![Vec::new()],
        settings: None,
        stacks,
        annotations: 0,
    };
    let f = std::fs::File::create(path).unwrap();
    fragprobe_shared::torch::write_snapshot_pickle(std::io::BufWriter::new(f), &snap).unwrap();
    i
}

#[test]
fn a_million_blocks_draw_without_a_slow_frame() {
    let dir = temp_dir("blocks-big");
    let path = dir.join("big.pickle");
    let n = big_snapshot(&path, 4096);
    assert_eq!(n, 1 << 20);
    let run = Run::start(0, Source::Snapshot(path)).unwrap();
    assert!(run.wait_loaded(Duration::from_secs(600)));
    assert_eq!(run.progress.error(), None);
    let layer = layer_of(&run);
    assert_eq!(layer.block_count(), 1 << 20);
    let options = Options {
        tab: Tab::Blocks,
        ..Options::default()
    };
    let mut h = harness(Viewer::new(vec![run.clone()], options, None));
    let t = std::time::Instant::now();
    h.run_steps(1);
    let first = t.elapsed();
    h.run_steps(2);
    let rect = h.get_by_label("allocator blocks").rect();
    // Frames with the pointer moving over the band: no rebuild, one lookup each.
    let mut times = Vec::new();
    for k in 0..10 {
        let p = Pos2::new(
            rect.left() + 10.0 + k as f32 * 97.0,
            rect.top() + 3.0 + k as f32 * rect.height() / 11.0,
        );
        h.event(Event::PointerMoved(p));
        let t = std::time::Instant::now();
        h.run_steps(1);
        times.push(t.elapsed());
        assert!(h.state().blocks.hovered.is_some(), "a block under {p:?}");
    }
    times.sort();
    let median = times[times.len() / 2];
    // Zooming rebuilds the cells of the new window.
    h.event(Event::MouseWheel {
        unit: egui::MouseWheelUnit::Point,
        delta: egui::vec2(0.0, 200.0),
        phase: egui::TouchPhase::Move,
        source: egui::MouseWheelSource::Wheel,
        modifiers: Modifiers::default(),
    });
    let t = std::time::Instant::now();
    h.run_steps(1);
    let zoom = t.elapsed();
    eprintln!(
        "1 Mi blocks: first frame {first:?}, hover frame median {median:?} (max {:?}), zoom frame {zoom:?}",
        times.last().unwrap()
    );
    assert!(h.state().blocks.view.is_some(), "the wheel zoomed in");
    // Generous bounds (unoptimised test builds on a shared machine): what matters is that
    // a frame does not walk the million blocks.
    assert!(
        median < Duration::from_millis(500),
        "hover frames: {median:?}"
    );
    run.stop();
}

#[test]
fn compare_shows_the_allocator_figures_of_each_snapshot() {
    if fragprobe_tests::snapshots::dir().is_none() {
        return;
    }
    let names = [MAGMA, "bcrafton__memory_snapshot.pickle"];
    let runs: Vec<Arc<Run>> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let r = Run::start(i, Source::Snapshot(fixture(n))).unwrap();
            assert!(r.wait_loaded(WAIT));
            r
        })
        .collect();
    let options = Options {
        tab: Tab::Compare,
        ..Options::default()
    };
    let mut h = harness(Viewer::new(runs.clone(), options, None));
    h.run_steps(3);
    assert!(shown(&h, "allocator (PyTorch snapshot)"));
    assert!(shown(&h, "GMLake peak active/reserved"));
    for r in &runs {
        let l = layer_of(r);
        let d = &l.devices[0];
        assert!(
            shown(&h, &human_bytes(d.now.non_releasable)),
            "{}: non-releasable {}",
            r.name,
            human_bytes(d.now.non_releasable)
        );
        let p = d.peak.unwrap().figures;
        assert!(shown(
            &h,
            &format!("{:.1} %", 100.0 * p.gmlake_utilization())
        ));
        r.stop();
    }
}

/// For a snapshot the Figures headline is PyTorch's view: reserved is the segments,
/// allocated and the free space are inside them (as the Allocator section says), not the
/// gaps between segments read as if they were free device memory.
#[test]
fn a_snapshots_figures_say_reserved_and_allocated_and_free_inside_the_segments() {
    let dir = temp_dir("blocks-figures");
    let path = dir.join("small.pickle");
    big_snapshot(&path, 3);
    let run = Run::start(0, Source::Snapshot(path)).unwrap();
    assert!(run.wait_loaded(WAIT));
    let layer = layer_of(&run);
    let now = layer.devices[0].now.clone();
    assert!(now.allocated > 0 && now.free > 0 && now.allocated < now.reserved);
    let mut h = harness(Viewer::new(vec![run.clone()], Options::default(), None));
    h.run_steps(2);
    assert!(run.wait_cursor(WAIT));
    h.run_steps(3);
    assert_eq!(
        value_of(&h, "reserved (segments)"),
        human_bytes(now.reserved)
    );
    assert_eq!(value_of(&h, "segments"), "3");
    assert_eq!(value_of(&h, "allocated"), human_bytes(now.allocated));
    assert_eq!(
        value_of(&h, "largest free block"),
        human_bytes(now.largest_free)
    );
    assert_eq!(value_of(&h, "total free"), human_bytes(now.free));
    assert!(!shown(&h, "live bytes"), "reserved is not called live");
    run.stop();
}
