//! Snapshots the project makes itself, for the tests that must always run: plain segments
//! (and a trace) written as a real pickle by the project's own exporter.

use std::path::{Path, PathBuf};

use fragprobe_shared::torch::snapshot::{FormatInfo, SnapshotLayout};
use fragprobe_shared::torch::{write_snapshot_pickle, Segment, Snapshot, TraceEvent};

/// A snapshot of `segments` with one device's `trace`, without `allocator_settings` (as
/// PyTorch before ≈ 2.4 writes them).
pub fn snapshot(segments: Vec<Segment>, trace: Vec<TraceEvent>) -> Snapshot {
    Snapshot {
        format: FormatInfo {
            layout: SnapshotLayout::Dict,
            pickle_protocol: 4,
            has_time_us: false,
            has_settings: false,
            legacy_history: false,
        },
        segments,
        traces: vec![trace],
        settings: None,
        stacks: Default::default(),
        annotations: 0,
    }
}

/// Writes [`snapshot`] of `segments` and `trace` to `path`, and returns `path`.
pub fn write(path: &Path, segments: Vec<Segment>, trace: Vec<TraceEvent>) -> PathBuf {
    let f = std::fs::File::create(path).expect("create the snapshot file");
    write_snapshot_pickle(std::io::BufWriter::new(f), &snapshot(segments, trace))
        .expect("write the snapshot");
    path.to_path_buf()
}
