//! `fragprobe run --torch-snapshot`: PyTorch's own allocator history next to the probe's
//! trace, without touching the user's code.
//!
//! 1. [`install`] writes `sitecustomize.py` (this directory) into the session directory and
//!    puts it first on `PYTHONPATH`. In every Python process that imports torch it queues
//!    `torch.cuda.memory._record_memory_history()` for when the program itself initialises
//!    CUDA, registers an out-of-memory observer that dumps a snapshot (first three OOMs),
//!    and dumps one at exit: `<pid>-exit.pickle`, `<pid>-oom1.pickle`… A sitecustomize it
//!    shadows still runs.
//! 2. [`collect`] moves the snapshots next to the trace (`TRACE.torch/`) when the command
//!    has ended, and [`run_info`] names each one in the trace (a run-info entry with
//!    `source=torch_snapshot`, `path`, `pid`, `reason`), before the trace is closed.
//! 3. [`join`] reads a trace's snapshot entries back: every snapshot is loaded with the safe
//!    reader, its segments are matched against the probe's allocations of the same process
//!    (a `cudaMalloc` segment by address and size; an expandable segment's range by the
//!    probe's `cuMemMap` ranges), and its allocator-level figures are computed. `report`
//!    and `run` print it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use fragprobe_shared::format::{EventKind, MetaKind, MetaWriter, Record};
use fragprobe_shared::torch::figures::{allocator_oom, figures};
use fragprobe_shared::torch::load_snapshot;
use fragprobe_shared::torch::snapshot::{Action, Segment};
use fragprobe_shared::trace::Trace;
use serde::Serialize;

/// The hook, put on `PYTHONPATH`.
pub const SITECUSTOMIZE: &str = include_str!("sitecustomize.py");

/// Where the hook writes snapshots (set by `fragprobe`).
pub const ENV_DIR: &str = "FRAGPROBE_TORCH_SNAPSHOT_DIR";
/// The history length asked of PyTorch (`max_entries`).
pub const ENV_MAX_ENTRIES: &str = "FRAGPROBE_TORCH_MAX_ENTRIES";
/// The `source` value of a snapshot's run-info entry.
pub const RUN_INFO_SOURCE: &str = "torch_snapshot";

/// Writes the hook into `session_dir` and returns the environment that activates it,
/// with snapshots written to `out`.
pub fn install(
    session_dir: &Path,
    out: &Path,
    max_entries: u64,
) -> std::io::Result<Vec<(OsString, OsString)>> {
    let hook = session_dir.join("torch-hook");
    std::fs::create_dir_all(&hook)?;
    std::fs::create_dir_all(out)?;
    std::fs::write(hook.join("sitecustomize.py"), SITECUSTOMIZE)?;
    let mut path = hook.into_os_string();
    if let Some(old) = std::env::var_os("PYTHONPATH").filter(|p| !p.is_empty()) {
        path.push(":");
        path.push(old);
    }
    Ok(vec![
        ("PYTHONPATH".into(), path),
        (ENV_DIR.into(), out.canonicalize()?.into_os_string()),
        (ENV_MAX_ENTRIES.into(), max_entries.to_string().into()),
    ])
}

/// The hook of one run: a private directory for the hook and the snapshots while the
/// command runs, and `TRACE.torch/` where the snapshots end up.
#[derive(Clone, Debug)]
pub struct TorchHook {
    tmp: PathBuf,
    out: PathBuf,
    dest: PathBuf,
    dest_name: String,
    /// The environment that activates the hook.
    pub env: Vec<(OsString, OsString)>,
}

impl TorchHook {
    /// Prepares the hook for a run recorded to `trace`. Snapshots are staged in a hidden
    /// directory beside the trace (same file system: moved, never copied; never in a
    /// RAM-backed temporary directory).
    pub fn install(trace: &Path, max_entries: u64) -> anyhow::Result<TorchHook> {
        use anyhow::Context;
        let name = trace
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let tmp = trace.with_file_name(format!(".{name}.torch-staging-{}", std::process::id()));
        let out = tmp.join("out");
        let env = install(&tmp, &out, max_entries)
            .with_context(|| format!("preparing the torch hook in {}", tmp.display()))?;
        let dest_name = format!("{name}.torch");
        Ok(TorchHook {
            dest: trace.with_file_name(&dest_name),
            dest_name,
            tmp,
            out,
            env,
        })
    }

    /// Moves the snapshots next to the trace and returns the run-info entries that name
    /// them, for the trace (write them before it is closed); `rings_seen` is how many
    /// probed processes the recording saw. Problems are warnings: the recording itself is
    /// never lost over them.
    pub fn attach(&self, rings_seen: usize) -> Vec<Vec<u8>> {
        let found = match collect(&self.out, Some(&self.dest)) {
            Ok(f) => f,
            Err(e) => {
                eprintln!(
                    "fragprobe: warning: cannot move the torch snapshots from {} to {}: {e}",
                    self.out.display(),
                    self.dest.display()
                );
                return Vec::new();
            }
        };
        let partial = std::fs::read_dir(&self.out)
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".part"))
                    .count()
            })
            .unwrap_or(0);
        if partial > 0 {
            eprintln!("fragprobe: warning: {partial} torch snapshot(s) were still being written when the command ended (a process outlived it, or was killed while dumping); they are lost");
        }
        if found.is_empty() {
            let _ = std::fs::remove_dir(&self.dest);
            if rings_seen > 0 && partial == 0 {
                eprintln!("fragprobe: warning: --torch-snapshot: no PyTorch snapshot was written. The hook runs in Python processes that import torch and then use CUDA; it does not run under `python -I`, `-S` or `-E`, when a launcher replaces PYTHONPATH, or when the process ends with os._exit or a signal");
            }
            return Vec::new();
        }
        found
            .iter()
            .map(|f| {
                let name = f.path.file_name().unwrap_or_default();
                run_info(&Found {
                    path: Path::new(&self.dest_name).join(name),
                    ..f.clone()
                })
            })
            .collect()
    }

    /// Removes the staging directory.
    pub fn cleanup(&self) {
        let _ = std::fs::remove_dir_all(&self.tmp);
    }
}

/// A snapshot the hook wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// The process that wrote it.
    pub pid: u32,
    /// `exit`, `oom1`, `oom2`…
    pub reason: String,
    /// Where it is now.
    pub path: PathBuf,
}

/// Parses `<pid>-<reason>.pickle`.
fn parse_name(name: &str) -> Option<(u32, String)> {
    let stem = name.strip_suffix(".pickle")?;
    let (pid, reason) = stem.split_once('-')?;
    let ok = !reason.is_empty() && reason.chars().all(|c| c.is_ascii_alphanumeric());
    ok.then(|| pid.parse().ok().map(|p| (p, reason.to_string())))?
}

/// The snapshots in `dir` (unfinished `.part` files and strangers are left alone), in
/// (pid, reason) order; moved into `dest` when given.
pub fn collect(dir: &Path, dest: Option<&Path>) -> std::io::Result<Vec<Found>> {
    let mut found = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
        Err(e) => return Err(e),
    };
    if let Some(d) = dest {
        std::fs::create_dir_all(d)?;
    }
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some((pid, reason)) = parse_name(&name) else {
            continue;
        };
        let path = match dest {
            Some(d) if d != dir => {
                let to = d.join(&name);
                if std::fs::rename(e.path(), &to).is_err() {
                    std::fs::copy(e.path(), &to)?;
                    let _ = std::fs::remove_file(e.path());
                }
                to
            }
            _ => e.path(),
        };
        found.push(Found { pid, reason, path });
    }
    found.sort_by(|a, b| (a.pid, &a.reason).cmp(&(b.pid, &b.reason)));
    Ok(found)
}

/// The run-info `source` of a trace that `fragprobe import` wrote from a snapshot.
pub const IMPORT_SOURCE: &str = "pytorch-snapshot";

/// The run-info entry naming `f` in a trace.
pub fn run_info(f: &Found) -> Vec<u8> {
    let mut buf = vec![0u8; 256 + f.path.as_os_str().len()];
    let mut m = MetaWriter::new(&mut buf, MetaKind::RunInfo);
    m.field(b"source", RUN_INFO_SOURCE.as_bytes())
        .field(b"path", f.path.display().to_string().as_bytes())
        .field(b"pid", f.pid.to_string().as_bytes())
        .field(b"reason", f.reason.as_bytes());
    let (len, _) = m.finish();
    buf.truncate(len);
    buf
}

/// One snapshot joined with the probe's trace.
#[derive(Clone, Debug, Serialize)]
pub struct Joined {
    /// The process.
    pub pid: u32,
    /// Why it was dumped (`exit`, `oom1`…).
    pub reason: String,
    /// The snapshot file.
    pub path: String,
    /// Why it could not be read (the other fields are then zero).
    pub error: Option<String>,
    /// Segments in the snapshot.
    pub segments: usize,
    /// Of those, how many the probe saw allocated (or mapped) by the same process.
    pub segments_seen_by_probe: usize,
    /// `memory_reserved` at the dump.
    pub reserved: u64,
    /// `memory_allocated` at the dump.
    pub allocated: u64,
    /// Free blocks in split segments (`inactive_split_bytes`).
    pub non_releasable: u64,
    /// `1 − allocated / reserved` at the dump.
    pub unallocated_fraction: f64,
    /// Largest free block inside the segments.
    pub largest_free_block: u64,
    /// Entries of the allocator history.
    pub history_entries: usize,
    /// `oom` entries in the history.
    pub ooms: usize,
    /// `allocator_settings.PYTORCH_CUDA_ALLOC_CONF` of the snapshot: the configuration
    /// PyTorch itself says it ran with (`None` where the file has no settings).
    pub alloc_conf: Option<String>,
    /// For a snapshot dumped at an OOM: that OOM judged at the allocator layer (the driver
    /// may have had too little free for the request, while PyTorch held enough unallocated).
    pub oom: Option<JoinedOom>,
}

/// An OOM judged inside PyTorch's caching allocator
/// ([`fragprobe_shared::torch::figures::allocator_oom`]).
#[derive(Clone, Debug, Serialize)]
pub struct JoinedOom {
    /// The device.
    pub device: i32,
    /// Bytes asked for.
    pub request: u64,
    /// The device's free bytes, as PyTorch saw them.
    pub device_free: u64,
    /// Reserved but unallocated bytes inside PyTorch's segments on that device.
    pub cached_free: u64,
    /// Largest free block inside those segments.
    pub largest_free_block: u64,
    /// `capacity`, `fragmentation` or `other`.
    pub verdict: String,
    /// Whether the process ran with `expandable_segments` (from the snapshot's settings,
    /// else from its segments).
    pub expandable_segments: bool,
}

/// The last OOM of `snap`, judged against its state (call for snapshots dumped at an OOM).
fn oom_of(snap: &fragprobe_shared::torch::Snapshot) -> Option<JoinedOom> {
    let (device, e) = snap
        .devices()
        .into_iter()
        .filter_map(|d| {
            snap.trace(d)
                .iter()
                .rev()
                .find(|e| e.action == Action::Oom)
                .map(|e| (d, *e))
        })
        .max_by_key(|(_, e)| e.time_us)?;
    let segments: Vec<Segment> = snap.device_segments(device).cloned().collect();
    let o = allocator_oom(e.size, e.addr, &figures(&segments));
    Some(JoinedOom {
        device,
        request: o.request,
        device_free: o.device_free,
        cached_free: o.cached_free,
        largest_free_block: o.largest_free,
        verdict: o.verdict.name().to_string(),
        // recorded, else inferred from the file, as the simulator does
        expandable_segments: fragprobe_shared::torch::sim::Config::of_snapshot(
            snap,
            fragprobe_shared::torch::sim::Version::DEFAULT,
        )
        .is_ok_and(|c| c.expandable_segments),
    })
}

/// The probe's device memory per process: `cudaMalloc`-like allocations (address, size)
/// and mapped ranges.
#[derive(Default)]
struct Seen {
    allocs: std::collections::HashSet<(u64, u64)>,
    maps: Vec<(u64, u64)>,
}

impl Seen {
    fn covers(&self, s: &Segment) -> bool {
        if !s.is_expandable {
            return self.allocs.contains(&(s.address, s.total_size));
        }
        // Every byte of the range inside some mapping of this process.
        let mut at = s.address;
        let end = s.end();
        loop {
            if at >= end {
                return true;
            }
            let Some(next) = self
                .maps
                .iter()
                .filter(|(a, len)| *a <= at && at < a + len)
                .map(|(a, len)| a + len)
                .max()
            else {
                return false;
            };
            at = next;
        }
    }
}

fn seen_by_pid(trace: &Trace) -> std::collections::HashMap<u32, Seen> {
    let mut out: std::collections::HashMap<u32, Seen> = Default::default();
    let ok = |r: &Record| r.result == 0;
    for r in trace.records() {
        match EventKind::from_u16(r.kind) {
            Some(EventKind::Alloc | EventKind::AsyncAlloc) if ok(&r) => {
                out.entry(r.pid)
                    .or_default()
                    .allocs
                    .insert((r.addr, r.size));
            }
            Some(EventKind::MemMap) if ok(&r) => {
                out.entry(r.pid).or_default().maps.push((r.addr, r.size));
            }
            _ => {}
        }
    }
    out
}

/// The trace's snapshots, joined with its records. Relative paths are taken from the
/// trace's directory.
pub fn join(trace: &Trace) -> Vec<Joined> {
    let entries: Vec<(u32, String, String)> = trace
        .run_infos()
        .filter_map(|e| match e.get_str("source")? {
            RUN_INFO_SOURCE => Some((
                u32::try_from(e.get_u64("pid")?).ok()?,
                e.get_str("reason")?.to_string(),
                e.get_str("path")?.to_string(),
            )),
            // `fragprobe import` names the snapshot its records came from (as pid 0)
            IMPORT_SOURCE => Some((0, "import".to_string(), e.get_str("snapshot")?.to_string())),
            _ => None,
        })
        .collect();
    if entries.is_empty() {
        return Vec::new();
    }
    let seen = seen_by_pid(trace);
    let base = trace.path().parent().unwrap_or(Path::new("."));
    entries
        .into_iter()
        .map(|(pid, reason, path)| {
            let mut j = Joined {
                pid,
                reason,
                path: path.clone(),
                error: None,
                segments: 0,
                segments_seen_by_probe: 0,
                reserved: 0,
                allocated: 0,
                non_releasable: 0,
                unallocated_fraction: 0.0,
                largest_free_block: 0,
                history_entries: 0,
                ooms: 0,
                alloc_conf: None,
                oom: None,
            };
            let p = Path::new(&path);
            let full = if p.is_absolute() {
                p.to_path_buf()
            } else {
                base.join(p)
            };
            match load_snapshot(&full) {
                Err(e) => j.error = Some(e.to_string()),
                Ok(snap) => {
                    let none = Seen::default();
                    let mine = seen.get(&pid).unwrap_or(&none);
                    j.segments = snap.segments.len();
                    j.segments_seen_by_probe =
                        snap.segments.iter().filter(|s| mine.covers(s)).count();
                    let f = figures(&snap.segments);
                    j.reserved = f.reserved;
                    j.allocated = f.allocated;
                    j.non_releasable = f.non_releasable;
                    j.unallocated_fraction = f.unallocated_fraction();
                    j.largest_free_block = f.largest_free;
                    for d in snap.devices() {
                        let t = snap.trace(d);
                        j.history_entries += t.len();
                        j.ooms += t.iter().filter(|e| e.action == Action::Oom).count();
                    }
                    j.alloc_conf = snap.settings.as_ref().map(|s| s.conf.clone());
                    if j.reason.starts_with("oom") {
                        j.oom = oom_of(&snap);
                    }
                }
            }
            j
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_names() {
        assert_eq!(parse_name("123-exit.pickle"), Some((123, "exit".into())));
        assert_eq!(parse_name("9-oom2.pickle"), Some((9, "oom2".into())));
        assert_eq!(parse_name("9-oom2.pickle.part"), None);
        assert_eq!(parse_name("x-exit.pickle"), None);
        assert_eq!(parse_name("9-.pickle"), None);
        assert_eq!(parse_name("9-../a.pickle"), None);
    }

    #[test]
    fn collect_moves_finished_snapshots_only() {
        let d = std::env::temp_dir().join(format!("fragprobe-th-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let src = d.join("src");
        let dst = d.join("dst");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("7-exit.pickle"), b"a").unwrap();
        std::fs::write(src.join("7-oom1.pickle"), b"b").unwrap();
        std::fs::write(src.join("8-exit.pickle.part"), b"c").unwrap();
        std::fs::write(src.join("notes.txt"), b"d").unwrap();
        let f = collect(&src, Some(&dst)).unwrap();
        let names: Vec<_> = f.iter().map(|f| (f.pid, f.reason.as_str())).collect();
        assert_eq!(names, [(7, "exit"), (7, "oom1")]);
        assert!(dst.join("7-exit.pickle").exists() && !src.join("7-exit.pickle").exists());
        assert!(src.join("8-exit.pickle.part").exists());
        let e = MetaEntryOwned(run_info(&f[0]));
        assert_eq!(e.get("source"), Some(RUN_INFO_SOURCE.to_string()));
        assert_eq!(e.get("pid"), Some("7".to_string()));
        assert_eq!(e.get("reason"), Some("exit".to_string()));
        assert_eq!(collect(&d.join("missing"), None).unwrap(), vec![]);
        let _ = std::fs::remove_dir_all(&d);
    }

    struct MetaEntryOwned(Vec<u8>);
    impl MetaEntryOwned {
        fn get(&self, k: &str) -> Option<String> {
            fragprobe_shared::format::MetaEntry::parse(&self.0)?
                .get_str(k)
                .map(str::to_string)
        }
    }
}
