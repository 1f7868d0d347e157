//! The snapshot model: segments, blocks and per-device traces of PyTorch's caching
//! allocator, decoded from any of the pickle layouts PyTorch has written.
//!
//! Layouts understood:
//! - the dict of `_snapshot()` / `_dump_snapshot()`: `segments`, `device_traces`, and from
//!   about 2.4 on `allocator_settings` (plus `external_annotations`, kept as a count);
//! - older dicts without `time_us` in trace entries and without `allocator_settings`;
//! - the bare list of segments returned by `torch.cuda.memory_snapshot()`;
//! - 2.0-era blocks that carry `history` (`[{addr, real_size, frames}]`) instead of
//!   `requested_size`, and blocks without `address` (placed back to back in their segment).

use std::fmt;
use std::io::BufRead;
use std::path::Path;

use crate::model::hash::FxMap;

use super::pickle::{
    chunk_supply, read_pickle, read_pickle_bytes, read_pickle_bytes_supplied, Handle, Pickle,
    PickleError, Val,
};
use super::stacks::{Frame, FrameId, StackId, Stacks, EMPTY_STACK};

/// Which of PyTorch's two block pools a segment belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PoolKind {
    /// Requests ≤ 1 MiB, packed in 2 MiB segments.
    Small,
    /// Everything larger.
    Large,
}

impl PoolKind {
    /// `"small"` or `"large"`, as in snapshots.
    pub fn name(self) -> &'static str {
        match self {
            PoolKind::Small => "small",
            PoolKind::Large => "large",
        }
    }
}

/// A memory pool id: `(0, 0)` is the default pool, others are CUDA-graph / `MemPool` pools.
pub type PoolId = (i64, i64);

/// The state of one block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockState {
    /// Handed out to a tensor.
    ActiveAllocated,
    /// Freed by the program but still in use by another stream (`record_stream`).
    ActivePendingFree,
    /// Free, cached by the allocator.
    Inactive,
}

impl BlockState {
    /// The snapshot's spelling.
    pub fn name(self) -> &'static str {
        match self {
            BlockState::ActiveAllocated => "active_allocated",
            BlockState::ActivePendingFree => "active_pending_free",
            BlockState::Inactive => "inactive",
        }
    }
    /// Allocated or pending free (PyTorch's "active").
    pub fn is_active(self) -> bool {
        !matches!(self, BlockState::Inactive)
    }
}

/// One block of a segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    /// Device address.
    pub address: u64,
    /// Bytes the block spans (after rounding and, when not split, the whole remainder).
    pub size: u64,
    /// Bytes the program asked for (0 for free blocks in new snapshots).
    pub requested_size: u64,
    /// State.
    pub state: BlockState,
    /// Where it was last allocated.
    pub stack: StackId,
}

/// One segment (a `cudaMalloc`, or one contiguous mapped range of an expandable segment).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Device ordinal.
    pub device: i32,
    /// Start address.
    pub address: u64,
    /// Bytes.
    pub total_size: u64,
    /// The CUDA stream (`cudaStream_t` value, 0 = default stream).
    pub stream: u64,
    /// Small or large pool.
    pub pool: PoolKind,
    /// Memory pool id.
    pub pool_id: PoolId,
    /// Part of an expandable segment.
    pub is_expandable: bool,
    /// Where the segment was allocated.
    pub stack: StackId,
    /// Blocks in address order, covering the segment.
    pub blocks: Vec<Block>,
}

impl Segment {
    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.address + self.total_size
    }
}

/// What a trace entry records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// A tensor allocation (`size` = request before rounding).
    Alloc,
    /// The program freed a block (`size` = its requested size).
    FreeRequested,
    /// The block returned to the cache.
    FreeCompleted,
    /// `cudaMalloc` of a segment.
    SegmentAlloc,
    /// `cudaFree` of a segment.
    SegmentFree,
    /// Pages mapped into an expandable segment.
    SegmentMap,
    /// Pages unmapped from an expandable segment.
    SegmentUnmap,
    /// A snapshot was taken.
    Snapshot,
    /// An allocation failed (`size` = rounded request).
    Oom,
    /// A user annotation (`_record_memory_history` annotations).
    UserDefined,
    /// An action this build does not know.
    Other,
}

impl Action {
    /// Parses the snapshot spelling.
    pub fn parse(s: &str) -> Action {
        match s {
            "alloc" => Action::Alloc,
            "free_requested" => Action::FreeRequested,
            "free_completed" => Action::FreeCompleted,
            "segment_alloc" => Action::SegmentAlloc,
            "segment_free" => Action::SegmentFree,
            "segment_map" => Action::SegmentMap,
            "segment_unmap" => Action::SegmentUnmap,
            "snapshot" => Action::Snapshot,
            "oom" => Action::Oom,
            "user_defined" => Action::UserDefined,
            _ => Action::Other,
        }
    }
    /// The snapshot spelling.
    pub fn name(self) -> &'static str {
        match self {
            Action::Alloc => "alloc",
            Action::FreeRequested => "free_requested",
            Action::FreeCompleted => "free_completed",
            Action::SegmentAlloc => "segment_alloc",
            Action::SegmentFree => "segment_free",
            Action::SegmentMap => "segment_map",
            Action::SegmentUnmap => "segment_unmap",
            Action::Snapshot => "snapshot",
            Action::Oom => "oom",
            Action::UserDefined => "user_defined",
            Action::Other => "other",
        }
    }
}

/// One entry of a device trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceEvent {
    /// What happened.
    pub action: Action,
    /// Address (for `oom`: the device's free bytes, PyTorch's `device_free`).
    pub addr: u64,
    /// Bytes (see [`Action`]).
    pub size: u64,
    /// CUDA stream.
    pub stream: u64,
    /// Microseconds since the epoch, when recorded (≈ 2.1+).
    pub time_us: Option<i64>,
    /// Where it happened.
    pub stack: StackId,
}

/// `allocator_settings` of ≈ 2.4+ snapshots.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct AllocatorSettings {
    /// `PYTORCH_CUDA_ALLOC_CONF` as the process saw it.
    pub conf: String,
    /// `max_split_size` in bytes (`None` = unlimited, PyTorch's −1).
    pub max_split_size: Option<u64>,
    /// `garbage_collection_threshold` (0 = off).
    pub garbage_collection_threshold: f64,
    /// `expandable_segments`.
    pub expandable_segments: bool,
    /// `roundup_power2_divisions` per power-of-two interval starting at 1 MiB (index i covers
    /// `[2^i MiB, 2^(i+1) MiB)`; the first also covers everything below 1 MiB).
    pub roundup_power2_divisions: [u64; 16],
    /// Every other key, as `key=value` text.
    pub other: Vec<(String, String)>,
}

/// The pickle layout a snapshot came in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotLayout {
    /// A dict with `segments` (and usually `device_traces`).
    Dict,
    /// A bare list of segments (`torch.cuda.memory_snapshot()`).
    SegmentList,
}

/// Facts about how the file was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FormatInfo {
    /// Pickle layout.
    pub layout: SnapshotLayout,
    /// The pickle protocol.
    pub pickle_protocol: u8,
    /// Trace entries carry `time_us`.
    pub has_time_us: bool,
    /// The file has `allocator_settings`.
    pub has_settings: bool,
    /// Blocks carry 2.0-era `history` instead of `requested_size`.
    pub legacy_history: bool,
}

/// A decoded memory snapshot.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// How the file was written.
    pub format: FormatInfo,
    /// Segments, sorted by (device, address).
    pub segments: Vec<Segment>,
    /// One trace per device, oldest entry first (empty when history was not recorded).
    pub traces: Vec<Vec<TraceEvent>>,
    /// Allocator settings, when recorded.
    pub settings: Option<AllocatorSettings>,
    /// Interned frames and stacks.
    pub stacks: Stacks,
    /// Number of `external_annotations` entries.
    pub annotations: usize,
}

impl Snapshot {
    /// Devices that have segments or trace entries.
    pub fn devices(&self) -> Vec<i32> {
        let mut d: Vec<i32> = self.segments.iter().map(|s| s.device).collect();
        for (i, t) in self.traces.iter().enumerate() {
            if !t.is_empty() {
                d.push(i as i32);
            }
        }
        d.sort_unstable();
        d.dedup();
        d
    }

    /// The backend whose allocator wrote this snapshot, judged from its blocks: torch_npu
    /// (Ascend) sizes a block as its request plus 32 bytes rounded up to 512, where CUDA
    /// PyTorch rounds the request alone. `None`: nothing says it is not CUDA PyTorch.
    /// `Some((name, why))` names the other backend and the evidence.
    pub fn other_backend(&self) -> Option<(&'static str, String)> {
        let up = |x: u64| x.div_ceil(512) * 512;
        // Blocks where the two rules give different sizes (a request within 32 bytes of a
        // 512-byte boundary gives the same size under both, and says nothing).
        let (mut npu, mut cuda) = (0u64, 0u64);
        for b in self.segments.iter().flat_map(|s| &s.blocks) {
            if !b.state.is_active() || b.requested_size == 0 || b.size >= 1 << 20 {
                continue;
            }
            let (c, n) = (up(b.requested_size), up(b.requested_size + 32));
            if c == n {
                continue;
            }
            if b.size == n {
                npu += 1;
            } else if b.size == c {
                cuda += 1;
            }
        }
        (npu >= 8 && npu >= 9 * cuda).then(|| {
            (
                "torch_npu (Ascend)",
                format!(
                    "{npu} of {} small allocated blocks are their request + 32 bytes rounded up to 512, as torch_npu sizes blocks (CUDA PyTorch rounds the request alone); the simulator follows CUDA PyTorch's rules, so its replay of this file is not expected to be exact",
                    npu + cuda
                ),
            )
        })
    }

    /// Segments of one device.
    pub fn device_segments(&self, device: i32) -> impl Iterator<Item = &Segment> + '_ {
        self.segments.iter().filter(move |s| s.device == device)
    }

    /// The trace of one device (empty when none).
    pub fn trace(&self, device: i32) -> &[TraceEvent] {
        usize::try_from(device)
            .ok()
            .and_then(|d| self.traces.get(d))
            .map_or(&[], |t| t)
    }

    /// Total number of trace entries over all devices.
    pub fn event_count(&self) -> usize {
        self.traces.iter().map(Vec::len).sum()
    }
}

/// Why a file could not be imported.
#[derive(Debug, Clone, PartialEq)]
pub enum ImportError {
    /// The pickle itself was refused.
    Pickle(PickleError),
    /// The pickle is fine but is not shaped like a memory snapshot.
    Shape(String),
    /// The file could not be opened.
    Io(String),
}

impl fmt::Display for ImportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImportError::Pickle(e) => e.fmt(f),
            ImportError::Shape(m) => write!(f, "not a PyTorch memory snapshot: {m}"),
            ImportError::Io(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for ImportError {}

impl From<PickleError> for ImportError {
    fn from(e: PickleError) -> Self {
        ImportError::Pickle(e)
    }
}

/// Reads and decodes a snapshot pickle from a reader.
pub fn read_snapshot<R: BufRead>(r: R) -> Result<Snapshot, ImportError> {
    let p = read_pickle(r)?;
    decode(&p)
}

/// Reads and decodes a snapshot file: mapped and parsed in place when it is a regular
/// file (no copy of its bytes is made), read in chunks otherwise (a pipe, an empty file).
pub fn load_snapshot(path: &Path) -> Result<Snapshot, ImportError> {
    let f = std::fs::File::open(path)
        .map_err(|e| ImportError::Io(format!("cannot open {}: {e}", path.display())))?;
    // SAFETY: the mapping is read-only and private to this call. Another process could
    // still change or truncate the file while it is mapped; the pickle reader checks every
    // byte it uses (any content gives values or an error, never an out-of-bounds access),
    // and truncation under us would be a SIGBUS, the same as for any mapped reader. That
    // is the accepted cost of not copying a multi-gigabyte snapshot.
    match unsafe { memmap2::MmapOptions::new().map_copy_read_only(&f) } {
        Ok(m) => {
            let _ = m.advise(memmap2::Advice::Sequential);
            let p = std::thread::scope(|s| {
                if m.len() < PREFAULT_BYTES {
                    return read_pickle_bytes(&m);
                }
                // Page faults cost a big parse about a third of its time: mapping the
                // file's pages in (page-cache lookups, page-table updates), and fresh
                // memory for the values. A second thread touches one byte a page of the
                // file ahead of the parser, then makes item chunks with their pages
                // already written until the parse ends. A thread that cannot start
                // changes nothing.
                let bytes: &[u8] = &m;
                let (maker, supply) = chunk_supply();
                let _ = std::thread::Builder::new()
                    .name("fragprobe-prefault".into())
                    .spawn_scoped(s, move || {
                        touch_pages(bytes);
                        maker.run();
                    });
                read_pickle_bytes_supplied(&m, supply)
            })?;
            let snap = decode(&p);
            // Unmapping the file and freeing the pickle's values are tens of milliseconds
            // of page-table work for a big snapshot; the caller need not wait for them.
            if m.len() >= PREFAULT_BYTES {
                let _ = std::thread::Builder::new()
                    .name("fragprobe-free".into())
                    .spawn(move || drop((p, m)));
            }
            snap
        }
        Err(_) => read_snapshot(std::io::BufReader::with_capacity(1 << 16, f)),
    }
}

/// Files from this size on are prefaulted and freed on helper threads.
const PREFAULT_BYTES: usize = 16 << 20;

/// Reads one byte of every page of `bytes`, in order.
fn touch_pages(bytes: &[u8]) {
    for b in bytes.iter().step_by(4096) {
        std::hint::black_box(*b);
    }
}

/// Decodes a snapshot from an already-read pickle.
pub fn decode(p: &Pickle) -> Result<Snapshot, ImportError> {
    let mut d = Decoder::new(p);
    let root = p.root();
    let (layout, seg_list, traces_h, settings_h, annotations) = match p.view(root) {
        Val::Dict(_) => {
            let segs = p.get(root, "segments").ok_or_else(|| {
                shape("the top-level dict has no 'segments' key (is this a PyTorch memory snapshot?)")
            })?;
            let ann = p.get(root, "external_annotations").and_then(|a| p.seq(a)).map_or(0, |a| a.len());
            (
                SnapshotLayout::Dict,
                segs,
                p.get(root, "device_traces"),
                p.get(root, "allocator_settings"),
                ann,
            )
        }
        Val::List(_) => (SnapshotLayout::SegmentList, root, None, None, 0),
        other => {
            return Err(shape(format!(
                "the pickle holds a {}; a memory snapshot is a dict with 'segments' (or a list of segments)",
                other.type_name()
            )))
        }
    };
    let segs = p.seq(seg_list).ok_or_else(|| {
        shape(format!(
            "'segments' is a {}, not a list",
            p.view(seg_list).type_name()
        ))
    })?;
    let mut segments = Vec::with_capacity(segs.len());
    for (i, &s) in segs.iter().enumerate() {
        segments.push(d.segment(s, i)?);
    }
    segments.sort_by_key(|s| (s.device, s.address));

    let mut traces = Vec::new();
    let mut has_time = false;
    if let Some(t) = traces_h {
        if !matches!(p.view(t), Val::None) {
            let devs = p
                .seq(t)
                .ok_or_else(|| shape("'device_traces' is not a list"))?;
            for (dev, &dt) in devs.iter().enumerate() {
                let entries = p
                    .seq(dt)
                    .ok_or_else(|| shape(format!("device_traces[{dev}] is not a list")))?;
                let out = d.events(entries, dev)?;
                has_time |= out.iter().any(|ev| ev.time_us.is_some());
                traces.push(out);
            }
        }
    }
    let settings = match settings_h {
        Some(s) if p.is_dict(s) => Some(d.settings(s)),
        _ => None,
    };
    Ok(Snapshot {
        format: FormatInfo {
            layout,
            pickle_protocol: p.protocol,
            has_time_us: has_time,
            has_settings: settings.is_some(),
            legacy_history: d.legacy_history,
        },
        segments,
        traces,
        settings,
        stacks: d.stacks,
        annotations,
    })
}

fn shape(m: impl Into<String>) -> ImportError {
    ImportError::Shape(m.into())
}

struct Decoder<'p> {
    p: &'p Pickle,
    stacks: Stacks,
    /// Per container id: the interned frame (for frame dicts) or stack (for frame lists)
    /// already made from it, or [`NO_ID`]. Snapshots share these objects through the memo,
    /// so each is decoded once.
    ids: Vec<u32>,
    /// Per intern id of a string: its [`classify`] code, 0 until first seen.
    str_class: Vec<u8>,
    /// The stack made from each list storage ([`Pickle::items_key`]).
    by_items: FxMap<(u32, u32, u32), StackId>,
    /// The keys of the last trace entry decoded, and their [`classify`] codes.
    entry_keys: Vec<Handle>,
    entry_classes: Vec<u8>,
    scratch: Vec<FrameId>,
    legacy_history: bool,
}

/// Traces longer than this are decoded in two halves on two threads.
const PARALLEL_EVENTS: usize = 1 << 17;

impl<'p> Decoder<'p> {
    fn new(p: &'p Pickle) -> Self {
        Decoder {
            p,
            stacks: Stacks::default(),
            ids: vec![NO_ID; p.container_count()],
            str_class: vec![0; p.string_count()],
            by_items: FxMap::default(),
            entry_keys: Vec::new(),
            entry_classes: Vec::new(),
            scratch: Vec::new(),
            legacy_history: false,
        }
    }

    /// The events of device `dev`'s trace. A long trace's second half is decoded on a
    /// second thread with its own stack table, whose stacks are then interned here in
    /// their order of first appearance: ids and events come out exactly as one pass makes
    /// them, and the first malformed entry is still the one reported.
    fn events(&mut self, entries: &[Handle], dev: usize) -> Result<Vec<TraceEvent>, ImportError> {
        let two = std::thread::available_parallelism().is_ok_and(|n| n.get() > 1);
        if entries.len() < PARALLEL_EVENTS || !two {
            return self.events_from(entries, dev, 0);
        }
        let mid = entries.len() / 2;
        let p = self.p;
        // Each half writes its own part of the one output buffer: no second buffer to
        // append (a copy of half the trace, and its fresh pages, on this thread).
        let mut out: Vec<TraceEvent> = Vec::with_capacity(entries.len());
        let (lo, hi) = out.spare_capacity_mut()[..entries.len()].split_at_mut(mid);
        let (first, second) = std::thread::scope(|s| {
            let half = s.spawn(move || {
                let mut d = Decoder::new(p);
                let done = d.events_into(&entries[mid..], dev, mid, hi);
                (done, d.stacks)
            });
            let first = self.events_into(&entries[..mid], dev, 0, lo);
            (first, half.join())
        });
        first?;
        let (second, stacks) = match second {
            Ok(r) => r,
            // The half only decodes; a panic there is a bug: decode in one pass instead.
            Err(_) => return self.events_from(entries, dev, 0),
        };
        second?;
        // SAFETY: `events_into` returned `Ok` for both halves, and it does so only after
        // writing every slot it was given: together, the first `entries.len()` slots of
        // the capacity reserved above.
        unsafe { out.set_len(entries.len()) };
        let remap: Vec<StackId> = (0..stacks.stack_count() as StackId)
            .map(|id| {
                let frames: Vec<FrameId> = stacks
                    .frames(id)
                    .map(|f| self.stacks.frame(f.clone()))
                    .collect();
                self.stacks.stack(&frames)
            })
            .collect();
        for ev in &mut out[mid..] {
            ev.stack = remap[ev.stack as usize];
        }
        Ok(out)
    }

    /// Decodes `entries` (the trace's entries from index `first`) into `dst`, one slot
    /// each; `Ok` only once every slot of `dst` is written.
    fn events_into(
        &mut self,
        entries: &[Handle],
        dev: usize,
        first: usize,
        dst: &mut [std::mem::MaybeUninit<TraceEvent>],
    ) -> Result<(), ImportError> {
        assert_eq!(entries.len(), dst.len());
        for (j, (&e, slot)) in entries.iter().zip(dst.iter_mut()).enumerate() {
            slot.write(self.event(e, dev, first + j)?);
        }
        Ok(())
    }

    fn events_from(
        &mut self,
        entries: &[Handle],
        dev: usize,
        first: usize,
    ) -> Result<Vec<TraceEvent>, ImportError> {
        let mut out = Vec::with_capacity(entries.len());
        for (j, &e) in entries.iter().enumerate() {
            out.push(self.event(e, dev, first + j)?);
        }
        Ok(out)
    }

    fn int_field(
        &self,
        h: Handle,
        key: &str,
        at: &dyn Fn() -> String,
    ) -> Result<i128, ImportError> {
        let v = self
            .p
            .get(h, key)
            .ok_or_else(|| shape(format!("{} has no '{key}'", at())))?;
        self.p.int(v).ok_or_else(|| match self.p.view(v) {
            Val::BigInt(b) => shape(format!(
                "{}.{key} is an int of {} bytes, too wide for 128 bits",
                at(),
                b.le_bytes.len()
            )),
            other => shape(format!(
                "{}.{key} is a {}, not an int",
                at(),
                other.type_name()
            )),
        })
    }

    fn u64_field(&self, h: Handle, key: &str, at: &dyn Fn() -> String) -> Result<u64, ImportError> {
        let v = self.int_field(h, key, at)?;
        u64::try_from(v).map_err(|_| shape(format!("{}.{key} = {v} is out of range", at())))
    }

    fn opt_u64(&self, h: Handle, key: &str) -> Option<u64> {
        self.p
            .get(h, key)
            .and_then(|v| self.p.int(v))
            .and_then(|v| u64::try_from(v).ok())
    }

    /// Streams are `cudaStream_t` values; keep them bit-for-bit (negative ints wrap).
    fn stream(&self, h: Handle) -> u64 {
        self.p
            .get(h, "stream")
            .and_then(|v| self.p.int(v))
            .map_or(0, |v| v as u64)
    }

    /// `h`'s container id, and the frame or stack already made from it (see `ids`).
    #[inline]
    fn made_from(&self, h: Handle) -> (Option<usize>, Option<u32>) {
        let cid = self.p.container_id(h).map(|c| c as usize);
        let id = cid.and_then(|c| self.ids.get(c).copied());
        (cid, id.filter(|&id| id != NO_ID))
    }

    fn frame(&mut self, h: Handle) -> FrameId {
        let (cid, made) = self.made_from(h);
        if let Some(id) = made {
            return id;
        }
        let p = self.p;
        let text = |k: &str| {
            p.get(h, k)
                .and_then(|v| p.arc_str(v))
                .unwrap_or_else(|| std::sync::Arc::from(""))
        };
        let f = Frame {
            filename: text("filename"),
            line: p.get(h, "line").and_then(|v| p.int(v)).unwrap_or(0) as i64,
            name: text("name"),
        };
        let id = self.stacks.frame(f);
        if let Some(c) = cid {
            self.ids[c] = id;
        }
        id
    }

    fn stack_of(&mut self, frames: Option<Handle>) -> StackId {
        let Some(fl) = frames else { return EMPTY_STACK };
        // No context recorded (`frames: []`): nothing to look up or remember.
        if self.p.seq(fl).is_some_and(|items| items.is_empty()) {
            return EMPTY_STACK;
        }
        let (cid, made) = self.made_from(fl);
        if let Some(id) = made {
            return id;
        }
        // A list with the same items as an earlier one usually shares its storage.
        let key = self.p.items_key(fl);
        if let Some(&id) = key.and_then(|k| self.by_items.get(&k)) {
            if let Some(c) = cid {
                self.ids[c] = id;
            }
            return id;
        }
        let Some(items) = self.p.seq(fl) else {
            return EMPTY_STACK;
        };
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        for &f in items {
            if self.p.is_dict(f) {
                scratch.push(self.frame(f));
            }
        }
        let id = self.stacks.stack(&scratch);
        self.scratch = scratch;
        if let Some(c) = cid {
            self.ids[c] = id;
        }
        if let Some(k) = key {
            self.by_items.insert(k, id);
        }
        id
    }

    fn segment(&mut self, s: Handle, i: usize) -> Result<Segment, ImportError> {
        let p = self.p;
        if !p.is_dict(s) {
            return Err(shape(format!(
                "segments[{i}] is a {}, not a dict",
                p.view(s).type_name()
            )));
        }
        let at = || format!("segments[{i}]");
        let address = self.u64_field(s, "address", &at)?;
        let total_size = self.u64_field(s, "total_size", &at)?;
        if address.checked_add(total_size).is_none() {
            return Err(shape(format!(
                "{} extends past the end of the address space",
                at()
            )));
        }
        let device = p.get(s, "device").and_then(|v| p.int(v)).unwrap_or(0) as i32;
        let pool = match p.get(s, "segment_type").and_then(|v| p.str(v)) {
            Some("small") => PoolKind::Small,
            Some("large") => PoolKind::Large,
            Some(other) => {
                return Err(shape(format!(
                    "segments[{i}].segment_type is {other:?}, not small/large"
                )))
            }
            // Old files: infer from the size (small segments are exactly 2 MiB).
            None if total_size == 2 << 20 => PoolKind::Small,
            None => PoolKind::Large,
        };
        let pool_id = match p.get(s, "segment_pool_id").and_then(|v| p.seq(v)) {
            Some([a, b]) => (p.int(*a).unwrap_or(0) as i64, p.int(*b).unwrap_or(0) as i64),
            _ => (0, 0),
        };
        let is_expandable = p
            .get(s, "is_expandable")
            .and_then(|v| p.bool(v))
            .unwrap_or(false);
        let stack = self.stack_of(p.get(s, "frames"));
        let stream = self.stream(s);
        let blocks_h = p
            .get(s, "blocks")
            .ok_or_else(|| shape(format!("segments[{i}] has no 'blocks'")))?;
        let bl = p
            .seq(blocks_h)
            .ok_or_else(|| shape(format!("segments[{i}].blocks is not a list")))?;
        let mut blocks = Vec::with_capacity(bl.len());
        let mut next_addr = address;
        for (j, &b) in bl.iter().enumerate() {
            let at = || format!("segments[{i}].blocks[{j}]");
            if !p.is_dict(b) {
                return Err(shape(format!("{} is not a dict", at())));
            }
            let size = self.u64_field(b, "size", &at)?;
            let addr = self.opt_u64(b, "address").unwrap_or(next_addr);
            if addr < address
                || addr
                    .checked_add(size)
                    .is_none_or(|end| end > address + total_size)
            {
                return Err(shape(format!("{} lies outside its segment", at())));
            }
            let state = match p.get(b, "state").and_then(|v| p.str(v)) {
                Some("active_allocated") => BlockState::ActiveAllocated,
                Some("active_pending_free") | Some("active_awaiting_free") => {
                    BlockState::ActivePendingFree
                }
                Some("inactive") => BlockState::Inactive,
                Some(other) => return Err(shape(format!("{}.state is {other:?}", at()))),
                None => return Err(shape(format!("{} has no 'state'", at()))),
            };
            let (requested_size, stack) = if let Some(r) = self.opt_u64(b, "requested_size") {
                (r, self.stack_of(p.get(b, "frames")))
            } else if let Some(h0) = p
                .get(b, "history")
                .and_then(|h| p.seq(h))
                .and_then(|h| h.first().copied())
            {
                self.legacy_history = true;
                let real = self.opt_u64(h0, "real_size").unwrap_or(size);
                (real, self.stack_of(p.get(h0, "frames")))
            } else {
                let req = if state.is_active() { size } else { 0 };
                (req, self.stack_of(p.get(b, "frames")))
            };
            blocks.push(Block {
                address: addr,
                size,
                requested_size,
                state,
                stack,
            });
            next_addr = addr.saturating_add(size);
        }
        blocks.sort_by_key(|b| b.address);
        Ok(Segment {
            device,
            address,
            total_size,
            stream,
            pool,
            pool_id,
            is_expandable,
            stack,
            blocks,
        })
    }

    /// The [`classify`] code of string `h` (`K_OTHER` for non-strings), computed once per
    /// distinct string.
    #[inline]
    fn class(&mut self, h: Handle) -> u8 {
        let Some(id) = self.p.str_id(h) else {
            return K_OTHER;
        };
        let c = self.str_class[id as usize];
        if c != 0 {
            return c;
        }
        let c = classify(self.p.str(h).unwrap_or(""));
        self.str_class[id as usize] = c;
        c
    }

    /// One trace entry in a single pass over its keys (classified by intern id, no string
    /// compares); anything unusual goes to [`Decoder::event_checked`] for its exact message.
    fn event(&mut self, e: Handle, dev: usize, j: usize) -> Result<TraceEvent, ImportError> {
        let p = self.p;
        let Some(items) = p.dict_items(e) else {
            return self.event_checked(e, dev, j);
        };
        let (mut action, mut addr, mut dfree, mut size, mut stream, mut time, mut frames) =
            (None, None, None, None, None, None, None);
        // Entries repeat one key order: classify the keys once per order, not per entry.
        let same_keys = items.len() == 2 * self.entry_keys.len()
            && items
                .chunks_exact(2)
                .zip(&self.entry_keys)
                .all(|(kv, k)| kv[0] == *k);
        if !same_keys {
            self.entry_keys.clear();
            self.entry_classes.clear();
            for kv in items.chunks_exact(2) {
                self.entry_keys.push(kv[0]);
                let c = self.class(kv[0]);
                self.entry_classes.push(c);
            }
        }
        for (kv, &class) in items.chunks_exact(2).zip(&self.entry_classes) {
            let v = kv[1];
            match class {
                K_ACTION => action = Some(v),
                K_ADDR => addr = Some(v),
                K_DEVICE_FREE => dfree = Some(v),
                K_SIZE => size = Some(v),
                K_STREAM => stream = Some(v),
                K_TIME_US => time = Some(v),
                K_FRAMES => frames = Some(v),
                _ => {}
            }
        }
        let Some(a) = action.filter(|&a| p.str_id(a).is_some()) else {
            return self.event_checked(e, dev, j);
        };
        let code = self.class(a);
        let action = if code >= A_BASE {
            ACTIONS[(code - A_BASE) as usize]
        } else {
            Action::Other
        };
        let u = |v: Option<Handle>| v.and_then(|v| p.int(v)).and_then(|v| u64::try_from(v).ok());
        let addr = match action {
            Action::Oom => u(dfree).or_else(|| u(addr)).unwrap_or(0),
            Action::Snapshot | Action::UserDefined | Action::Other => u(addr).unwrap_or(0),
            _ => match u(addr) {
                Some(a) => a,
                None => return self.event_checked(e, dev, j),
            },
        };
        let size = u(size).unwrap_or(0);
        let time_us = time.and_then(|v| p.int(v)).map(|v| v as i64);
        let stream = stream.and_then(|v| p.int(v)).map_or(0, |v| v as u64);
        let stack = self.stack_of(frames);
        Ok(TraceEvent {
            action,
            addr,
            size,
            stream,
            time_us,
            stack,
        })
    }

    /// [`Decoder::event`] by key lookups, with a precise message for a malformed entry.
    fn event_checked(
        &mut self,
        e: Handle,
        dev: usize,
        j: usize,
    ) -> Result<TraceEvent, ImportError> {
        let p = self.p;
        let at = || format!("device_traces[{dev}][{j}]");
        if !p.is_dict(e) {
            return Err(shape(format!("{} is not a dict", at())));
        }
        let action = match p.get(e, "action").and_then(|v| p.str(v)) {
            Some(a) => Action::parse(a),
            None => return Err(shape(format!("{} has no 'action'", at()))),
        };
        let addr = match action {
            // PyTorch stores the device's free bytes of an OOM under `device_free`.
            Action::Oom => self
                .opt_u64(e, "device_free")
                .or_else(|| self.opt_u64(e, "addr"))
                .unwrap_or(0),
            Action::Snapshot | Action::UserDefined | Action::Other => {
                self.opt_u64(e, "addr").unwrap_or(0)
            }
            _ => self.u64_field(e, "addr", &at)?,
        };
        let size = self.opt_u64(e, "size").unwrap_or(0);
        let time_us = p.get(e, "time_us").and_then(|v| p.int(v)).map(|v| v as i64);
        let stack = self.stack_of(p.get(e, "frames"));
        Ok(TraceEvent {
            action,
            addr,
            size,
            stream: self.stream(e),
            time_us,
            stack,
        })
    }

    fn settings(&self, s: Handle) -> AllocatorSettings {
        let p = self.p;
        let mut out = AllocatorSettings::default();
        for (k, v) in p.items(s) {
            let Some(key) = p.str(k) else { continue };
            match key {
                "PYTORCH_CUDA_ALLOC_CONF" | "PYTORCH_ALLOC_CONF" => {
                    out.conf = p.str(v).unwrap_or("").to_string();
                }
                "max_split_size" => {
                    out.max_split_size = p.int(v).and_then(|m| u64::try_from(m).ok());
                }
                "garbage_collection_threshold" => {
                    out.garbage_collection_threshold = p.float(v).unwrap_or(0.0);
                }
                "expandable_segments" => out.expandable_segments = p.bool(v).unwrap_or(false),
                "roundup_power2_divisions" => match p.view(v) {
                    Val::Dict(_) => {
                        for (mk, dv) in p.items(v) {
                            let mb: Option<u64> = p.str(mk).and_then(|t| t.parse().ok());
                            if let (Some(mb), Some(d)) = (mb, p.int(dv)) {
                                if mb.is_power_of_two() {
                                    let idx = (mb.trailing_zeros() as usize).min(15);
                                    out.roundup_power2_divisions[idx] = d.max(0) as u64;
                                }
                            }
                        }
                    }
                    Val::Int(d) => out.roundup_power2_divisions = [d.max(0) as u64; 16],
                    Val::List(items) => {
                        for (i, &d) in items.iter().take(16).enumerate() {
                            out.roundup_power2_divisions[i] = p.int(d).unwrap_or(0).max(0) as u64;
                        }
                    }
                    _ => {}
                },
                other => out.other.push((other.to_string(), plain_text(p, v))),
            }
        }
        out
    }
}

const NO_ID: u32 = u32::MAX;
const K_OTHER: u8 = 1;
const K_ACTION: u8 = 2;
const K_ADDR: u8 = 3;
const K_DEVICE_FREE: u8 = 4;
const K_SIZE: u8 = 5;
const K_STREAM: u8 = 6;
const K_TIME_US: u8 = 7;
const K_FRAMES: u8 = 8;
/// Codes from `A_BASE` on are action names: `ACTIONS[code - A_BASE]`.
const A_BASE: u8 = 16;
const ACTIONS: [Action; 10] = [
    Action::Alloc,
    Action::FreeRequested,
    Action::FreeCompleted,
    Action::SegmentAlloc,
    Action::SegmentFree,
    Action::SegmentMap,
    Action::SegmentUnmap,
    Action::Snapshot,
    Action::Oom,
    Action::UserDefined,
];

/// A string's role in a trace entry: one of the keys it reads, an action name, or other.
fn classify(s: &str) -> u8 {
    match s {
        "action" => K_ACTION,
        "addr" => K_ADDR,
        "device_free" => K_DEVICE_FREE,
        "size" => K_SIZE,
        "stream" => K_STREAM,
        "time_us" => K_TIME_US,
        "frames" => K_FRAMES,
        _ => match Action::parse(s) {
            Action::Other => K_OTHER,
            a => A_BASE + ACTIONS.iter().position(|&x| x == a).unwrap_or(0) as u8,
        },
    }
}

fn plain_text(p: &Pickle, v: Handle) -> String {
    match p.view(v) {
        Val::None => "None".into(),
        Val::Bool(b) => if b { "True" } else { "False" }.into(),
        Val::Int(i) => i.to_string(),
        Val::Float(f) => f.to_string(),
        Val::Str(s) => s.to_string(),
        other => format!("<{}>", other.type_name()),
    }
}
