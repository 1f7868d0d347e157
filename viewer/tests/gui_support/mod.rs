//! Synthetic traces for the viewer's tests: a process that fragments a 1 GiB device and
//! then fails an allocation that fits in the free total but in no free block.

#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use egui_kittest::kittest::NodeT as _;
use egui_kittest::Harness;
use fragprobe_shared::format::{Api, EventKind, MetaEntry, MetaKind, MetaWriter, Record};
use fragprobe_shared::model::Model;
use fragprobe_shared::trace::TraceWriter;
use fragprobe_viewer::gui::app::Viewer;
use fragprobe_viewer::pipeline::{Run, Source};

/// Where the synthetic arena starts.
pub const BASE: u64 = 0x7f00_0000_0000;
/// A mebibyte.
pub const MIB: u64 = 1 << 20;
/// The synthetic device's size.
pub const DEVICE: u64 = 1 << 30;

/// Records being built, with the metadata entries they point at.
pub struct Synth {
    pub records: Vec<Record>,
    pub metas: Vec<(u32, u64, Vec<u8>)>,
    pub pid: u32,
    t: u64,
}

impl Synth {
    /// A process start (with `PYTORCH_CUDA_ALLOC_CONF` when given) and a 1 GiB device 0.
    pub fn new(pid: u32, conf: Option<&str>) -> Synth {
        let mut s = Synth {
            records: Vec::new(),
            metas: Vec::new(),
            pid,
            t: 1_000_000_000,
        };
        let mut buf = vec![0u8; 1024];
        let mut w = MetaWriter::new(&mut buf, MetaKind::ProcessInfo);
        w.field_u64(b"pid", pid as u64)
            .field(b"cmdline", b"python\0train.py");
        if let Some(c) = conf {
            w.field(b"PYTORCH_CUDA_ALLOC_CONF", c.as_bytes());
        }
        let (len, _) = w.finish();
        s.metas.push((pid, 1, buf[..len].to_vec()));
        s.push(Record {
            kind: EventKind::ProcessStart as u16,
            api: Api::Probe as u16,
            meta: 1,
            ..Record::default()
        });
        s.push(Record {
            kind: EventKind::Device as u16,
            api: Api::Probe as u16,
            size: DEVICE,
            ..Record::default()
        });
        s
    }

    /// Appends a record of this process at the next millisecond.
    pub fn push(&mut self, mut r: Record) {
        r.seq = self.records.len() as u64;
        r.ts_ns = self.t;
        r.pid = self.pid;
        r.tid = if r.tid == 0 { self.pid + 1 } else { r.tid };
        self.t += 1_000_000;
        self.records.push(r);
    }

    /// A successful `cudaMalloc`.
    pub fn alloc(&mut self, addr: u64, size: u64) {
        self.push(Record {
            kind: EventKind::Alloc as u16,
            api: Api::CudaMalloc as u16,
            addr,
            size,
            ..Record::default()
        });
    }

    /// A successful `cudaFree`.
    pub fn free(&mut self, addr: u64) {
        self.push(Record {
            kind: EventKind::Free as u16,
            api: Api::CudaFree as u16,
            addr,
            ..Record::default()
        });
    }

    /// A `cudaMalloc` that failed with out-of-memory.
    pub fn failed(&mut self, size: u64) {
        self.push(Record {
            kind: EventKind::Alloc as u16,
            api: Api::CudaMalloc as u16,
            size,
            result: 2,
            ..Record::default()
        });
    }

    /// An NVML sample: device used/total and this process's figure.
    pub fn nvml(&mut self, device_used: u64, process_used: u64) {
        self.push(Record {
            kind: EventKind::NvmlSample as u16,
            api: Api::Nvml as u16,
            size: device_used,
            aux: DEVICE,
            aux2: process_used,
            ..Record::default()
        });
    }

    /// The process exits.
    pub fn exit(&mut self) {
        self.push(Record {
            kind: EventKind::ProcessExit as u16,
            api: Api::Probe as u16,
            ..Record::default()
        });
    }

    /// Writes a complete trace file.
    pub fn write(&self, path: &Path) {
        let mut w = TraceWriter::create(path).expect("create trace");
        for (pid, r, e) in &self.metas {
            w.write_meta(*pid, *r, e).expect("meta");
        }
        w.write_records(&self.records).expect("records");
        w.finish().expect("finish");
    }

    /// The model after the first `n` records (the reference the viewer must match).
    pub fn model_after(&self, n: usize) -> Model {
        let mut m = Model::new();
        for r in &self.records[..n.min(self.records.len())] {
            let meta = self
                .metas
                .iter()
                .find(|(p, k, _)| *p == r.pid && *k == r.meta && r.meta != 0);
            match meta.and_then(|(_, _, b)| MetaEntry::parse(b)) {
                Some(e) => m.apply_with_meta(r, Some(&e)),
                None => m.apply(r),
            }
        }
        m
    }

    /// Index of the first `ProcessExit`.
    pub fn exit_index(&self) -> usize {
        self.records
            .iter()
            .position(|r| r.kind == EventKind::ProcessExit as u16)
            .unwrap_or(self.records.len())
    }
}

/// The standard scenario: 300 MiB context, 64 × 8 MiB allocations, every other one freed,
/// an allocation of 600 MiB that fails for fragmentation, then exit.
pub fn fragmented(pid: u32, conf: Option<&str>) -> Synth {
    let mut s = Synth::new(pid, conf);
    s.nvml(300 * MIB, 300 * MIB);
    for i in 0..64 {
        s.alloc(BASE + i * 8 * MIB, 8 * MIB);
    }
    for i in (0..64).step_by(2) {
        s.free(BASE + i * 8 * MIB);
    }
    s.nvml(
        300 * MIB + 256 * MIB + 100 * MIB,
        300 * MIB + 256 * MIB + 100 * MIB,
    );
    s.failed(600 * MIB);
    s.exit();
    s
}

/// A fresh directory under the system temp dir, removed when dropped unless the test is
/// failing (then it stays, to look at).
pub fn temp_dir(name: &str) -> fragprobe_tests::scratch::Scratch {
    fragprobe_tests::scratch::Scratch::at(
        std::env::temp_dir().join(format!("fragprobe-gui-{name}-{}", std::process::id())),
    )
}

/// Sends the records of `s` from the `from`-th on into the feed `tx`, each with the
/// metadata entry it points at (as the recorder's sink does).
pub fn send_from(s: &Synth, from: usize, tx: &fragprobe_viewer::pipeline::FeedSender) {
    for r in &s.records[from..] {
        let meta = s
            .metas
            .iter()
            .find(|(p, k, _)| *p == r.pid && *k == r.meta && r.meta != 0)
            .map(|m| m.2.as_slice());
        tx.send(r, meta);
    }
}

/// Writes `s` to `dir/name` and starts a run over it, loaded.
pub fn loaded_run(s: &Synth, dir: &Path, name: &str, id: usize) -> Arc<Run> {
    let p = dir.join(name);
    s.write(&p);
    let run = Run::start(id, Source::Trace(p)).expect("start run");
    assert!(run.wait_loaded(Duration::from_secs(60)), "trace loads");
    assert_eq!(run.progress.error(), None);
    run
}

/// Decodes an RGBA PNG (as `--screenshot` writes): width, height and pixels.
pub fn read_png(p: &Path) -> (u32, u32, Vec<u8>) {
    let dec = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(p).unwrap()));
    let mut r = dec.read_info().unwrap();
    let mut buf = vec![0; r.output_buffer_size().unwrap()];
    let info = r.next_frame(&mut buf).unwrap();
    assert_eq!(info.color_type, png::ColorType::Rgba);
    buf.truncate(info.buffer_size());
    (info.width, info.height, buf)
}

/// Pixels of colour `c` (alpha ignored) in RGBA pixels.
pub fn count(rgba: &[u8], c: egui::Color32) -> usize {
    rgba.chunks_exact(4)
        .filter(|p| p[0] == c.r() && p[1] == c.g() && p[2] == c.b())
        .count()
}

/// A 1400 x 900 test harness drawing `viewer`.
pub fn harness(viewer: Viewer) -> Harness<'static, Viewer> {
    Harness::builder()
        .with_size([1400.0, 900.0])
        .build_ui_state(|ui, v: &mut Viewer| v.ui(ui), viewer)
}

/// A node's accessible label, or else its value.
pub fn text_of(n: &egui_kittest::Node<'_>) -> Option<String> {
    let a = n.accesskit_node();
    a.label().or_else(|| a.value())
}
