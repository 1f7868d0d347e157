//! Importing a PyTorch memory snapshot as records, so the viewer shows it like a trace.
//!
//! The device layer (segments) comes from the snapshot importer's record conversion; this
//! module adds what the viewer needs around it: a `ProcessStart` carrying the snapshot's
//! `PYTORCH_CUDA_ALLOC_CONF` (the compare view's label) and the trace's `oom` entries as
//! failed allocations (the timeline's markers).

use std::path::Path;
use std::sync::Arc;

use fragprobe_shared::format::{Api, EventKind, MetaKind, MetaWriter, Record};
use fragprobe_shared::torch::records::to_records;
use fragprobe_shared::torch::{load_snapshot, Action, Snapshot};

/// `cudaErrorMemoryAllocation`.
const OOM: u32 = 2;

type Recs = Vec<(Record, Option<Arc<[u8]>>)>;

/// Reads and decodes `path`. The error names the file.
pub fn load(path: &Path) -> Result<Snapshot, String> {
    load_snapshot(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// The file name of `path` (the compare view's fallback label).
pub fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Reads `path` and turns it into records. The error names the file.
pub fn records(path: &Path) -> Result<Recs, String> {
    let snap = load(path)?;
    Ok(from_snapshot(&snap, &file_name(path)))
}

/// Turns a decoded snapshot into records (see the module documentation).
pub fn from_snapshot(snap: &Snapshot, name: &str) -> Recs {
    let mut recs = to_records(snap);
    let pid = recs.first().map_or(0, |r| r.pid);
    for dev in snap.devices() {
        let mut ts = 0u64;
        for e in snap.trace(dev) {
            if let Some(t) = e.time_us {
                ts = (t.max(0) as u64).saturating_mul(1000);
            }
            if e.action == Action::Oom {
                recs.push(Record {
                    ts_ns: ts,
                    size: e.size,
                    pid,
                    device: i16::try_from(dev).unwrap_or(-1),
                    result: OOM,
                    kind: EventKind::Alloc as u16,
                    api: Api::Synthetic as u16,
                    ..Record::default()
                });
            }
        }
    }
    recs.sort_by_key(|r| r.ts_ns);
    let t0 = recs.first().map_or(0, |r| r.ts_ns);

    let mut buf = vec![0u8; 4096];
    let mut w = MetaWriter::new(&mut buf, MetaKind::ProcessInfo);
    w.field_u64(b"pid", pid as u64);
    w.field(b"cmdline", format!("pytorch-snapshot\0{name}").as_bytes());
    if let Some(s) = snap.settings.as_ref().filter(|s| !s.conf.is_empty()) {
        w.field(b"PYTORCH_CUDA_ALLOC_CONF", s.conf.as_bytes());
    }
    let (len, _) = w.finish();
    let start = Record {
        ts_ns: t0,
        pid,
        meta: 1,
        kind: EventKind::ProcessStart as u16,
        api: Api::Synthetic as u16,
        ..Record::default()
    };
    let mut out: Recs = Vec::with_capacity(recs.len() + 1);
    out.push((start, Some(Arc::from(&buf[..len]))));
    out.extend(recs.into_iter().map(|r| (r, None)));
    for (i, (r, _)) in out.iter_mut().enumerate() {
        r.seq = i as u64;
    }
    out
}
