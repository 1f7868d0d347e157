//! The README's picture: a PyTorch-like training run on a 16 GiB device that fragments
//! until allocations fail, rendered headlessly at the peak. The test checks the picture;
//! `FRAGPROBE_DOCS_SCREENSHOT=$PWD/docs/screenshot-map.png cargo test -p fragprobe-viewer
//! --test gui_docs` (from the repository root) rewrites the committed one.

mod gui_support;

use fragprobe_shared::format::{Api, EventKind, MetaKind, MetaWriter, Record};
use fragprobe_shared::trace::TraceWriter;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn the_readme_picture_renders_the_fragmented_arena() {
    let dir = std::env::temp_dir().join(format!("fragprobe-gui-docs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = match std::env::var_os("FRAGPROBE_DOCS_SCREENSHOT") {
        Some(p) => std::path::PathBuf::from(p),
        None => dir.join("screenshot-map.png"),
    };
    let trace = dir.join("train-step.fpt");
    let mut w = TraceWriter::create(&trace).unwrap();
    let mut buf = vec![0u8; 512];
    let mut m = MetaWriter::new(&mut buf, MetaKind::ProcessInfo);
    m.field_u64(b"pid", 4242)
        .field(b"cmdline", b"python\0train.py\0--batch\x0064")
        .field(b"PYTORCH_CUDA_ALLOC_CONF", b"max_split_size_mb:512");
    let (len, _) = m.finish();
    w.write_meta(4242, 1, &buf[..len]).unwrap();
    let mut recs = Vec::new();
    let mut seq = 0u64;
    let mut t = 1_000_000_000u64;
    let mut push = |recs: &mut Vec<Record>,
                    kind: EventKind,
                    api: Api,
                    addr: u64,
                    size: u64,
                    result: u32,
                    meta: u64,
                    aux: u64,
                    aux2: u64| {
        recs.push(Record {
            seq,
            ts_ns: t,
            addr,
            size,
            pid: 4242,
            tid: 4243 + (seq % 3) as u32,
            kind: kind as u16,
            api: api as u16,
            result,
            meta,
            aux,
            aux2,
            device: 0,
            ..Record::default()
        });
        seq += 1;
        t += 2_000_000;
    };
    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;
    let base = 0x7f00_0000_0000u64;
    push(
        &mut recs,
        EventKind::ProcessStart,
        Api::Probe,
        0,
        0,
        0,
        1,
        0,
        0,
    );
    push(
        &mut recs,
        EventKind::Device,
        Api::Probe,
        0,
        16 * GIB,
        0,
        0,
        0,
        0,
    );
    push(
        &mut recs,
        EventKind::NvmlSample,
        Api::Nvml,
        0,
        600 * MIB,
        0,
        0,
        16 * GIB,
        520 * MIB,
    );
    // First fit over a simple free list, like the simulated GPU.
    let mut live: Vec<(u64, u64)> = Vec::new();
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let place = |live: &Vec<(u64, u64)>, size: u64| -> Option<u64> {
        let mut v = live.clone();
        v.sort();
        let mut at = base;
        for (a, s) in v {
            if a >= at + size {
                return Some(at);
            }
            at = at.max(a + s);
        }
        if at + size <= base + 16 * GIB {
            Some(at)
        } else {
            None
        }
    };
    for step in 0..1400u64 {
        let r = rng.next() % 100;
        let size = if r < 45 {
            (1 + rng.next() % 8) * 2 * MIB
        } else if r < 85 {
            (20 + rng.next() % 60) * MIB
        } else {
            (200 + rng.next() % 300) * MIB
        };
        if live.len() > 20 && rng.next() % 100 < 47 {
            let k = (rng.next() % live.len() as u64) as usize;
            let (a, _) = live.swap_remove(k);
            push(&mut recs, EventKind::Free, Api::CudaFree, a, 0, 0, 0, 0, 0);
        }
        match place(&live, size) {
            Some(a) => {
                live.push((a, size));
                push(
                    &mut recs,
                    EventKind::Alloc,
                    Api::CudaMalloc,
                    a,
                    size,
                    0,
                    0,
                    0,
                    0,
                );
            }
            None => {
                push(
                    &mut recs,
                    EventKind::Alloc,
                    Api::CudaMalloc,
                    0,
                    size,
                    2,
                    0,
                    0,
                    0,
                );
            }
        }
        if step % 5 == 0 {
            let used: u64 = live.iter().map(|l| l.1).sum::<u64>() + 520 * MIB;
            push(
                &mut recs,
                EventKind::NvmlSample,
                Api::Nvml,
                0,
                used + 80 * MIB,
                0,
                0,
                16 * GIB,
                used,
            );
        }
    }
    w.write_records(&recs).unwrap();
    w.finish().unwrap();
    let args = fragprobe_viewer::cmd::view::Args {
        traces: vec![trace],
        screenshot: Some(out.clone()),
        size: "1600x1000".into(),
        at: Some("peak".into()),
        no_nvml: true,
        ..Default::default()
    };
    fragprobe_viewer::cmd::view::run(&args).unwrap();
    let (w, h, rgba) = gui_support::read_png(&out);
    assert_eq!((w, h), (1600, 1000));
    let count = |c: egui::Color32| gui_support::count(&rgba, c);
    use fragprobe_viewer::gui::{cells, map, timeline};
    use fragprobe_viewer::pipeline::space::RegionKind;
    // At the peak the arena is mostly allocated, with free holes between.
    assert!(
        count(cells::kind_colour(RegionKind::Plain)) > 100_000,
        "the arena band"
    );
    assert!(count(cells::FREE) > 2_000, "free holes");
    assert!(
        count(map::LARGEST_HOLE) > 20,
        "the largest free block outlined"
    );
    assert!(
        count(timeline::FAILURE) > 1_000,
        "failed allocations marked on the timelines"
    );
}
