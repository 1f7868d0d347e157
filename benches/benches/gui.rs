//! The viewer's speed targets, on a generated trace of 10 M events that ends with 1 M live
//! regions (one process, one 80 GiB device, random frees so the arena is fragmented):
//!
//! * `gui/open_10M_events`: opening the trace until the window is usable — the model
//!   exact at the end of the trace, the map, figures and events ready — target ≤ 3 s. The
//!   trace carries a model checkpoint every 2^20 records, as `fragprobe run/record` write
//!   them, so opening restores the last one and replays the rest; the timelines' full
//!   history is then replayed in the background (its time is printed too);
//! * `gui/frame_1M_live`: one CPU frame of the whole window (building the UI and
//!   tessellating it) on the map with the 1 M live regions and the timelines over the 10 M
//!   events — target ≤ 16 ms;
//! * `gui/map_cells_1M_live`: rebuilding the map's cells from the model (what a frame
//!   costs when the model or the zoom just changed).
//!
//! `FRAGPROBE_BENCH_EVENTS` overrides the event count (e.g. 1000000 for a quick run).

use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use egui::{pos2, vec2, Rect};
use fragprobe_shared::format::{Api, EventKind, Record};
use fragprobe_shared::trace::TraceWriter;
use fragprobe_viewer::gui::app::Viewer;
use fragprobe_viewer::gui::cells::Cells;
use fragprobe_viewer::gui::options::Options;
use fragprobe_viewer::pipeline::space::RegionSource as _;
use fragprobe_viewer::pipeline::view::{self, ModelRegions};
use fragprobe_viewer::pipeline::{Run, Source};

use fragprobe_tests::rng::Rng;

const BASE: u64 = 0x7f00_0000_0000;
const DEVICE: u64 = 80 << 30;
/// Records written at a time.
const WRITE_BATCH: usize = 1 << 16;
/// Records between checkpoints (what `fragprobe run` writes; a multiple of the batch).
const CHECKPOINT_EVERY: usize = 1 << 20;

fn events() -> usize {
    std::env::var("FRAGPROBE_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000)
}

/// Writes the trace: 55 % allocations, 45 % frees of random live regions, so `events / 10`
/// regions are live at the end.
fn write_trace(path: &Path, n: usize) -> usize {
    let mut w = TraceWriter::create(path).expect("create trace");
    let mut model = fragprobe_shared::model::Model::new();
    let mut written = 0usize;
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut batch = Vec::with_capacity(WRITE_BATCH);
    let mut live: Vec<u64> = Vec::with_capacity(n / 8);
    let mut top = BASE;
    let mut seq = 0u64;
    let rec = |kind: EventKind, addr: u64, size: u64, seq: &mut u64| {
        let r = Record {
            seq: *seq,
            ts_ns: 1_000_000_000 + *seq * 1_000,
            addr,
            size,
            pid: 1,
            tid: 2,
            device: 0,
            kind: kind as u16,
            api: Api::CudaMalloc as u16,
            ..Record::default()
        };
        *seq += 1;
        r
    };
    batch.push(rec(EventKind::Device, 0, DEVICE, &mut seq));
    for i in 0..n.saturating_sub(1) {
        // 11 events in 20 are allocations: live grows by 1 per 10 events.
        let alloc = live.is_empty() || (i % 20) < 11;
        if alloc {
            let size = (1 + rng.next() % 128) * 512;
            batch.push(rec(EventKind::Alloc, top, size, &mut seq));
            live.push(top);
            top += size;
        } else {
            let k = (rng.next() % live.len() as u64) as usize;
            let addr = live.swap_remove(k);
            batch.push(rec(EventKind::Free, addr, 0, &mut seq));
        }
        if batch.len() == WRITE_BATCH {
            for r in &batch {
                model.apply(r);
            }
            w.write_records(&batch).expect("write");
            written += batch.len();
            batch.clear();
            // A checkpoint every 2^20 records, like the recorder writes.
            if written.is_multiple_of(CHECKPOINT_EVERY) {
                w.write_checkpoint(written as u64, &model.checkpoint())
                    .expect("checkpoint");
            }
        }
    }
    w.write_records(&batch).expect("write");
    w.finish().expect("finish");
    live.len()
}

fn trace_path() -> (PathBuf, usize) {
    let n = events();
    let dir = std::env::temp_dir().join("fragprobe-bench-gui");
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join(format!("churn-{n}.fpt"));
    let live = write_trace(&path, n);
    eprintln!(
        "gui bench: {} events, {live} live at the end, {}",
        n,
        path.display()
    );
    (path, live)
}

fn load(path: &Path) -> std::sync::Arc<Run> {
    let run = Run::start(0, Source::Trace(path.to_path_buf())).expect("start");
    assert!(run.wait_loaded(Duration::from_secs(600)));
    assert_eq!(run.progress.error(), None);
    run
}

fn raw_input(frame: u64) -> egui::RawInput {
    egui::RawInput {
        screen_rect: Some(Rect::from_min_size(pos2(0.0, 0.0), vec2(1600.0, 1000.0))),
        time: Some(frame as f64 / 60.0),
        ..egui::RawInput::default()
    }
}

/// CPU time of this process so far (all threads), in seconds.
fn cpu_seconds() -> f64 {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the rusage it is given; `ru` is valid for writes and zeroed.
    let ru = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr());
        ru.assume_init()
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn bench(c: &mut Criterion) {
    let (path, live) = trace_path();
    // Wall time suffers on a loaded machine; the CPU time of one open is reported too.
    let (cpu, wall) = (cpu_seconds(), std::time::Instant::now());
    let run = load(&path);
    eprintln!(
        "gui bench: one open took {:.2} s of CPU, {:.2} s of wall time",
        cpu_seconds() - cpu,
        wall.elapsed().as_secs_f64()
    );
    assert!(run.wait_history(Duration::from_secs(600)));
    eprintln!(
        "gui bench: with the timelines' full history: {:.2} s of CPU, {:.2} s of wall time",
        cpu_seconds() - cpu,
        wall.elapsed().as_secs_f64()
    );
    run.stop();
    let mut g = c.benchmark_group("gui");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(40));
    g.bench_function("open_10M_events", |b| {
        b.iter(|| {
            let run = load(&path);
            run.stop();
            run
        })
    });
    g.finish();

    let run = load(&path);
    assert!(run.wait_history(Duration::from_secs(600)));
    {
        let h = run.head();
        let sp = &h.model.spaces()[0];
        assert_eq!(
            sp.totals().live_count as usize,
            live,
            "the model holds every live region"
        );
    }
    let mut viewer = Viewer::new(vec![run.clone()], Options::default(), None);
    let ctx = egui::Context::default();
    let mut frame = 0u64;
    let mut one_frame = |viewer: &mut Viewer| {
        frame += 1;
        let mut out = ctx.run_ui(raw_input(frame), |ui| viewer.ui(ui));
        let prims = ctx.tessellate(std::mem::take(&mut out.shapes), out.pixels_per_point);
        out.textures_delta.clear();
        prims.len()
    };
    // Warm up: fonts, the map's cells and the space list are built once.
    for _ in 0..5 {
        one_frame(&mut viewer);
    }
    let mut g = c.benchmark_group("gui");
    g.sample_size(50);
    g.bench_function("frame_1M_live", |b| b.iter(|| one_frame(&mut viewer)));

    let h = run.head();
    let spaces = view::spaces(&h.model);
    let src = ModelRegions {
        model: &h.model,
        spaces: &spaces,
        log: None,
    };
    let seg = spaces[0].segments[0].clone();
    let key = spaces[0].key;
    g.sample_size(10);
    g.bench_function("map_cells_1M_live", |b| {
        b.iter(|| {
            let mut cells = Cells::new(seg.lo, seg.hi, 1600 * 24);
            src.visit(key, seg.lo, seg.hi, &mut |r| cells.add(r));
            cells.regions
        })
    });
    g.finish();
    drop(h);
    run.stop();
    let _ = std::fs::remove_file(&path);
}

criterion_group!(benches, bench);
criterion_main!(benches);
