//! A real PyTorch training loop (tests/torch/train.py: a GPT-style model with embeddings,
//! LayerNorm, scaled-dot-product attention, an MLP, AdamW, bf16 autocast and a sequence
//! length that changes step to step) runs unchanged on the simulated GPU under the probe,
//! for PyPI's torch 2.9.1 (CUDA 12.8) and 2.15.0 (CUDA 13.2), under every allocator
//! setting — and at every checkpoint inside the run, what the probe recorded up to that
//! instant equals PyTorch's own `torch.cuda.memory_stats()`:
//!
//! - native caching allocator (default, `max_split_size_mb`, `roundup_power2_divisions`,
//!   `garbage_collection_threshold`): segments made and freed = the probe's `cudaMalloc`s
//!   and `cudaFree`s; reserved bytes (current and peak) = the bytes those hold;
//! - `expandable_segments:True`: no segment is `cudaMalloc`'d; reserved bytes = the probe's
//!   mapped bytes (`cuMemMap` − `cuMemUnmap`), current and peak;
//! - `backend:cudaMallocAsync`: allocated bytes (current and peak) = the probe's
//!   `cudaMallocAsync` − `cudaFreeAsync` bytes, each rounded up to 512 (PyTorch asks the
//!   driver's pool for its "used" figure, which counts what the pool handed out).
//!
//! The venvs come from `cuda/torch-venv.sh` (once per machine; `.ci/run` calls it). Where
//! one is missing its tests say so in one line and pass, except under CI.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use fragprobe_shared::format::{Api, EventKind, Record};
use fragprobe_tests::cache;
use fragprobe_tests::probe::{fragprobe, out_path, read_trace, torch_run, TORCH_TEST_ENV};
use serde_json::Value;

fn train_py() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("torch/train.py")
}

/// What the probe saw up to one instant, in PyTorch's terms.
#[derive(Debug, Default, PartialEq)]
struct Seen {
    segments_made: u64,
    segments_freed: u64,
    segment_bytes: u64,
    segment_peak: u64,
    mapped: u64,
    mapped_peak: u64,
    async_bytes: u64,
    async_peak: u64,
}

/// Replays the program's calls with a timestamp ≤ `t_ns`.
fn seen_until(records: &[Record], t_ns: u64) -> Seen {
    let mut s = Seen::default();
    let mut segments: HashMap<u64, u64> = HashMap::new();
    let mut asyncs: HashMap<u64, u64> = HashMap::new();
    for r in records.iter().filter(|r| r.ts_ns <= t_ns && r.result == 0) {
        match (r.kind(), r.api()) {
            (Some(EventKind::Alloc), Some(Api::CudaMalloc)) => {
                segments.insert(r.addr, r.size);
                s.segments_made += 1;
                s.segment_bytes += r.size;
                s.segment_peak = s.segment_peak.max(s.segment_bytes);
            }
            (Some(EventKind::Free), Some(Api::CudaFree)) => {
                if let Some(n) = segments.remove(&r.addr) {
                    s.segments_freed += 1;
                    s.segment_bytes -= n;
                }
            }
            (Some(EventKind::MemMap), _) => {
                s.mapped += r.size;
                s.mapped_peak = s.mapped_peak.max(s.mapped);
            }
            (Some(EventKind::MemUnmap), _) => s.mapped -= r.size,
            (Some(EventKind::AsyncAlloc), Some(Api::CudaMallocAsync)) => {
                // PyTorch reads the pool's "used" figure, which counts each allocation
                // rounded up to the driver's 512-byte granularity.
                let n = r.size.div_ceil(512) * 512;
                asyncs.insert(r.addr, n);
                s.async_bytes += n;
                s.async_peak = s.async_peak.max(s.async_bytes);
            }
            (Some(EventKind::AsyncFree), Some(Api::CudaFreeAsync)) => {
                s.async_bytes -= asyncs.remove(&r.addr).unwrap_or(0);
            }
            _ => {}
        }
    }
    s
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("{k} missing in {v}"))
}

/// Trains under `conf` with torch `version`; checks every checkpoint; returns them.
fn trains_and_matches(version: &str, conf: &str) -> Option<Vec<Value>> {
    let py = cache::torch_python(version)?;
    let trace = out_path(&format!(
        "train-{version}-{}.fpt",
        conf.replace([':', ','], "_")
    ));
    let train = || {
        fragprobe()
            .args(["record", "--simulated-gpu=1x24GiB", "-q", "-o"])
            .arg(&trace)
            .arg("--")
            .arg(&py)
            .arg(train_py())
            .args(["--steps", "9", "--stats-every", "3"])
            // torch 2.9.1 honours only the older name; 2.15 either (the CUDA one wins).
            .env("PYTORCH_CUDA_ALLOC_CONF", conf)
            .env("PYTORCH_ALLOC_CONF", conf)
            // A simulated GPU of its own: the tests run at once, and thirteen trainings of
            // ~2.4 GB on one shared 24 GiB device would run each other out of memory.
            .env("FRAGPROBE_SIM_STATE", trace.with_extension("simgpu"))
            .envs(TORCH_TEST_ENV)
            .output()
            .unwrap()
    };
    let (o, out) = torch_run("DONE", train);
    let _ = std::fs::remove_file(trace.with_extension("simgpu"));
    assert!(o.status.success(), "torch {version} [{conf}]: {out}");
    assert!(out.contains("DONE"), "{out}");
    assert!(!out.contains("Traceback"), "{out}");
    let checkpoints: Vec<Value> = out
        .lines()
        .filter_map(|l| l.strip_prefix("STATS "))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(checkpoints.len(), 3, "{out}");
    let records = read_trace(&trace);
    for c in &checkpoints {
        let s = seen_until(&records, u(c, "t_ns"));
        let at = format!("torch {version} [{conf}] step {}: {c} vs {s:?}", c["step"]);
        assert_eq!(u(c, "num_ooms"), 0, "{at}");
        if conf.contains("cudaMallocAsync") {
            assert_eq!(s.async_bytes, u(c, "allocated_bytes.all.current"), "{at}");
            assert_eq!(s.async_peak, u(c, "allocated_bytes.all.peak"), "{at}");
            assert_eq!(s.segments_made, 0, "{at}");
        } else if conf.contains("expandable_segments:True") {
            assert_eq!(u(c, "segment.all.allocated"), 0, "{at}");
            assert_eq!(s.segments_made, 0, "{at}");
            assert_eq!(s.mapped, u(c, "reserved_bytes.all.current"), "{at}");
            assert_eq!(s.mapped_peak, u(c, "reserved_bytes.all.peak"), "{at}");
        } else {
            assert_eq!(s.segments_made, u(c, "segment.all.allocated"), "{at}");
            assert_eq!(s.segments_freed, u(c, "segment.all.freed"), "{at}");
            assert_eq!(s.segment_bytes, u(c, "reserved_bytes.all.current"), "{at}");
            assert_eq!(s.segment_peak, u(c, "reserved_bytes.all.peak"), "{at}");
        }
    }
    let _ = std::fs::remove_file(&trace);
    Some(checkpoints)
}

/// The peak reserved bytes at the last checkpoint.
fn final_reserved_peak(c: &[Value]) -> u64 {
    u(c.last().unwrap(), "reserved_bytes.all.peak")
}

macro_rules! training {
    ($($name:ident: $version:literal, $conf:literal;)*) => {$(
        #[test]
        fn $name() {
            trains_and_matches($version, $conf);
        }
    )*};
}

training! {
    torch_2_9_native: "2.9.1", "";
    torch_2_9_expandable_segments: "2.9.1", "expandable_segments:True";
    torch_2_9_max_split_size: "2.9.1", "max_split_size_mb:64";
    torch_2_9_roundup_power2_divisions: "2.9.1", "roundup_power2_divisions:4";
    torch_2_9_garbage_collection_threshold: "2.9.1", "garbage_collection_threshold:0.6,max_split_size_mb:128";
    torch_2_9_cuda_malloc_async: "2.9.1", "backend:cudaMallocAsync";
    torch_2_15_native: "2.15.0", "";
    torch_2_15_expandable_segments: "2.15.0", "expandable_segments:True";
    torch_2_15_max_split_size: "2.15.0", "max_split_size_mb:64";
    torch_2_15_roundup_power2_divisions: "2.15.0", "roundup_power2_divisions:4";
    torch_2_15_garbage_collection_threshold: "2.15.0", "garbage_collection_threshold:0.6,max_split_size_mb:128";
    torch_2_15_cuda_malloc_async: "2.15.0", "backend:cudaMallocAsync";
}

#[test]
fn the_settings_change_what_the_real_allocator_does() {
    // Not a restatement of the defaults: each setting reaches its own peak.
    let Some(native) = trains_and_matches("2.9.1", "") else {
        return;
    };
    let Some(split) = trains_and_matches("2.9.1", "max_split_size_mb:64") else {
        return;
    };
    let Some(exp) = trains_and_matches("2.9.1", "expandable_segments:True") else {
        return;
    };
    let (n, s, e) = (
        final_reserved_peak(&native),
        final_reserved_peak(&split),
        final_reserved_peak(&exp),
    );
    assert!(
        s > n && e < n,
        "native {n}, max_split 64 MiB {s}, expandable {e}"
    );
}
