//! One run: a source's records ingested on a named thread ("fragprobe-ingest") into the
//! head model, and a rewound copy of the model at the time cursor (see [`super::rewind`]).
//!
//! Locking: the head and the cursor model are behind `RwLock`s. The ingest thread takes
//! the head's write lock for one small batch at a time ([`BATCH`] records, a few
//! milliseconds), so the UI thread, which only reads, never waits long.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use fragprobe_shared::format::{EventKind, MetaEntry, Record};
use fragprobe_shared::model::Model;
use fragprobe_shared::trace::{Trace, TraceTail};

use super::blocks::AllocatorLayer;
use super::log::{EventLog, MemLog};
use super::progress::Progress;
use super::source::{LiveTarget, Source};

/// Records applied per write-lock of the head.
pub const BATCH: usize = 8192;
/// Records between the checkpoints the ingest takes itself (grows when they are costly).
pub const CHECKPOINT_EVERY: usize = 1 << 20;

/// The records of a run: a mapped trace file, then what arrived later, in memory.
#[derive(Default)]
pub struct Log {
    trace: Option<Arc<Trace>>,
    base: usize,
    mem: MemLog,
    metas: HashMap<(u32, u64), Arc<[u8]>>,
}

impl Log {
    fn get(&self, i: usize) -> Option<Record> {
        if i < self.base {
            self.trace.as_ref()?.record(i as u64)
        } else {
            self.mem.get(i - self.base)
        }
    }

    fn meta_bytes(&self, r: &Record) -> Option<Arc<[u8]>> {
        if r.meta == 0 {
            return None;
        }
        if let Some(m) = self.metas.get(&(r.pid, r.meta)) {
            return Some(m.clone());
        }
        trace_meta(self.trace.as_ref()?, r)
    }
}

/// A process's context: its NVML figure when the probe tracked nothing for it, or, until
/// such a sample comes, an estimate from its first sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Baseline {
    /// When (trace clock).
    pub ts_ns: u64,
    /// NVML's used bytes for the process then, less what the probe tracked then.
    pub bytes: u64,
    /// Taken while the probe already tracked memory (`tracked`): a process that allocates
    /// before its first sample (almost every one, sampled once a second) has no sample
    /// with nothing tracked. Whatever it held beyond the tracked bytes then counts as its
    /// context, so the cross-check watches what appears *after* the first sample.
    pub estimated_with: Option<u64>,
}

/// A process's context baselines on one device: the estimate from its first sample and
/// the first measured one (a sample with nothing tracked), whichever exist.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Baselines {
    /// From the first sample, when the probe already tracked memory then.
    pub estimated: Option<Baseline>,
    /// From the first sample taken with nothing tracked.
    pub measured: Option<Baseline>,
}

impl Baselines {
    /// The baseline in effect at `now_ns`: of those taken by then, the smaller. Both are
    /// the context plus whatever the probe missed at their time, so the smaller misses
    /// less; a later, larger one would hide memory that appeared in between.
    pub fn at(&self, now_ns: u64) -> Option<Baseline> {
        [self.estimated, self.measured]
            .into_iter()
            .flatten()
            .filter(|b| b.ts_ns <= now_ns)
            .min_by_key(|b| b.bytes)
    }

    /// Notes a sample of the process's own figure `own` taken while the probe tracked
    /// `tracked` bytes of it on this device.
    pub fn note(&mut self, ts_ns: u64, own: u64, tracked: u64) {
        if tracked == 0 {
            self.measured.get_or_insert(Baseline {
                ts_ns,
                bytes: own,
                estimated_with: None,
            });
        } else if self.estimated.is_none() && self.measured.is_none() {
            self.estimated = Some(Baseline {
                ts_ns,
                bytes: own.saturating_sub(tracked),
                estimated_with: Some(tracked),
            });
        }
    }
}

/// One process's NVML figures on one device: `(time, bytes or None where NVML could not
/// say)`, in time order.
pub type ProcessNvml = Vec<(u64, Option<u64>)>;

/// The head of a run: the model after every record ingested so far.
pub struct Head {
    /// The model.
    pub model: Model,
    log: Log,
    applied: usize,
    checkpoints: Vec<(usize, Arc<[u8]>)>,
    /// Timestamp of the first record with a non-zero time.
    pub t_first: u64,
    /// Timestamp of the last record.
    pub t_last: u64,
    /// Context baselines per (pid, device ordinal).
    pub baselines: HashMap<(u32, i16), Baselines>,
    /// Each process's own NVML figure per (pid, device ordinal), as sampled: `(time, bytes
    /// or None where NVML could not say)`, in time order. The model keeps the last sample
    /// per device, whichever process it was for; the cross-check needs each process's.
    pub nvml_process: HashMap<(u32, i16), ProcessNvml>,
    /// Events the live source reported lost (ring full).
    pub ring_dropped: u64,
    /// Index of the first `ProcessExit` record (the state just before it is the run's
    /// final picture: a process's regions are cleared when it exits).
    pub first_exit: Option<usize>,
    /// Problems with the input, one line each.
    pub warnings: Vec<String>,
    /// The allocator layer (segments, blocks, frames, allocator-level figures) of an
    /// imported PyTorch snapshot; `None` for probe traces, which have no such layer.
    pub allocator: Option<Arc<AllocatorLayer>>,
}

impl Head {
    fn new() -> Head {
        Head {
            model: Model::new(),
            log: Log::default(),
            applied: 0,
            checkpoints: Vec::new(),
            t_first: 0,
            t_last: 0,
            baselines: HashMap::new(),
            nvml_process: HashMap::new(),
            ring_dropped: 0,
            first_exit: None,
            warnings: Vec::new(),
            allocator: None,
        }
    }

    /// Records applied.
    pub fn applied(&self) -> usize {
        self.applied
    }

    /// The time span `(first, last)` of the records so far.
    pub fn span(&self) -> (u64, u64) {
        (self.t_first, self.t_last.max(self.t_first))
    }

    /// NVML's figure for process `pid` on device `ordinal` at the last sample taken at or
    /// before `now_ns` (`None`: none yet, or NVML could not say).
    pub fn nvml_process_at(&self, pid: u32, ordinal: i16, now_ns: u64) -> Option<u64> {
        let v = self.nvml_process.get(&(pid, ordinal))?;
        let n = v.partition_point(|(t, _)| *t <= now_ns);
        v.get(n.checked_sub(1)?)?.1
    }

    /// The records applied so far, for the events list.
    pub fn log(&self) -> HeadLog<'_> {
        HeadLog { head: self }
    }

    /// Checkpoints `(records before it, bytes)`, in order.
    pub fn checkpoints(&self) -> &[(usize, Arc<[u8]>)] {
        &self.checkpoints
    }

    /// Copies records `[from, to)` with the metadata they point at (for the rewinder).
    pub fn copy(&self, from: usize, to: usize, out: &mut Vec<(Record, Option<Arc<[u8]>>)>) {
        for i in from..to.min(self.applied) {
            if let Some(r) = self.log.get(i) {
                out.push((r, self.log.meta_bytes(&r)));
            }
        }
    }

    /// The index of the first record after time `t_ns` (records before it are the state
    /// at `t_ns`).
    pub fn index_at(&self, t_ns: u64) -> usize {
        self.log().partition_by_time(t_ns)
    }

    /// The `PYTORCH_CUDA_ALLOC_CONF` (or `FRAGPROBE_LABEL`) of the run's processes, if any.
    pub fn alloc_conf(&self) -> Option<String> {
        let ps = self.model.processes();
        ps.iter()
            .find_map(|p| p.info().label.clone())
            .or_else(|| ps.iter().find_map(|p| p.info().alloc_conf.clone()))
    }

    fn apply(&mut self, r: &Record, meta: Option<&MetaEntry<'_>>) {
        let (model, mut notes) = self.split();
        model.apply_with_meta(r, meta);
        notes.note(model, r);
    }

    /// Applies records read in place from a mapped trace through the one replay
    /// ([`fragprobe_shared::replay::chunk`]); the same as [`Head::apply`] on each.
    fn apply_trace(&mut self, trace: &Trace, recs: &[Record]) {
        let (model, mut notes) = self.split();
        fragprobe_shared::replay::chunk(trace, model, recs, |m, r| notes.note(m, r));
    }

    /// The model, and what is noted beside it.
    fn split(&mut self) -> (&mut Model, Notes<'_>) {
        let notes = Notes {
            t_first: &mut self.t_first,
            t_last: &mut self.t_last,
            first_exit: &mut self.first_exit,
            baselines: &mut self.baselines,
            nvml_process: &mut self.nvml_process,
            applied: &mut self.applied,
        };
        (&mut self.model, notes)
    }
}

/// What the head keeps about each applied record besides the model.
struct Notes<'a> {
    t_first: &'a mut u64,
    t_last: &'a mut u64,
    first_exit: &'a mut Option<usize>,
    baselines: &'a mut HashMap<(u32, i16), Baselines>,
    nvml_process: &'a mut HashMap<(u32, i16), ProcessNvml>,
    applied: &'a mut usize,
}

impl Notes<'_> {
    /// Notes `r`, just applied to `model`.
    fn note(&mut self, model: &Model, r: &Record) {
        if r.ts_ns != 0 {
            if *self.t_first == 0 || r.ts_ns < *self.t_first {
                *self.t_first = r.ts_ns;
            }
            *self.t_last = (*self.t_last).max(r.ts_ns);
        }
        match r.kind() {
            Some(EventKind::ProcessExit) if self.first_exit.is_none() => {
                *self.first_exit = Some(*self.applied);
            }
            Some(EventKind::NvmlSample) => {
                let own = (r.aux2 != u64::MAX).then_some(r.aux2);
                let v = self.nvml_process.entry((r.pid, r.device)).or_default();
                // Time order, whatever order the records came in.
                let at = v.partition_point(|(t, _)| *t <= r.ts_ns);
                v.insert(at, (r.ts_ns, own));
                if let Some(own) = own {
                    let tracked = model
                        .space_id(r.pid, r.device)
                        .and_then(|s| model.space(s))
                        .map_or(0, |s| s.totals().live_bytes);
                    self.baselines
                        .entry((r.pid, r.device))
                        .or_default()
                        .note(r.ts_ns, own, tracked);
                }
            }
            _ => {}
        }
        *self.applied += 1;
    }
}

/// The head's records as an [`EventLog`].
pub struct HeadLog<'a> {
    head: &'a Head,
}

impl EventLog for HeadLog<'_> {
    fn len(&self) -> usize {
        self.head.applied
    }
    fn get(&self, i: usize) -> Option<Record> {
        if i < self.head.applied {
            self.head.log.get(i)
        } else {
            None
        }
    }
}

/// The model rewound to the time cursor.
pub struct Cursor {
    /// The model after the first `index` records.
    pub model: Model,
    /// Records applied.
    pub index: usize,
}

#[derive(Default)]
pub(crate) struct Target {
    pub want: Option<usize>,
    pub serial: u64,
}

/// One run.
pub struct Run {
    /// Position in the viewer's list.
    pub id: usize,
    /// File name or "live".
    pub name: String,
    /// Whether the records come from running processes (rings, a feed).
    pub live: bool,
    /// Ingest progress.
    pub progress: Progress,
    head: RwLock<Head>,
    pub(crate) cursor: RwLock<Option<Cursor>>,
    pub(crate) target: Mutex<Target>,
    pub(crate) target_cv: Condvar,
    pub(crate) rewinding: AtomicBool,
    head_gen: AtomicU64,
    pub(crate) cursor_gen: AtomicU64,
    pub(crate) stop: AtomicBool,
}

impl Run {
    /// Starts ingesting `source` (thread "fragprobe-ingest") and the rewinder
    /// ("fragprobe-rewind"). Errors only when a thread cannot be spawned; input errors
    /// are reported through [`Progress::error`].
    pub fn start(id: usize, source: Source) -> std::io::Result<Arc<Run>> {
        let run = Arc::new(Run {
            id,
            name: source.name(),
            live: matches!(source, Source::Live(_) | Source::Feed(_)),
            progress: Progress::default(),
            head: RwLock::new(Head::new()),
            cursor: RwLock::new(None),
            target: Mutex::new(Target::default()),
            target_cv: Condvar::new(),
            rewinding: AtomicBool::new(false),
            head_gen: AtomicU64::new(0),
            cursor_gen: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let r = run.clone();
        std::thread::Builder::new()
            .name("fragprobe-ingest".into())
            .spawn(move || {
                if let Err(e) = ingest(&r, source) {
                    r.progress.fail(e);
                }
                r.progress.finish();
                r.head_gen.fetch_add(1, Ordering::Release);
            })?;
        let r = run.clone();
        std::thread::Builder::new()
            .name("fragprobe-rewind".into())
            .spawn(move || super::rewind::rewinder(&r))?;
        Ok(run)
    }

    /// The head (read lock; hold it briefly).
    pub fn head(&self) -> RwLockReadGuard<'_, Head> {
        self.head.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The model at the cursor, if a cursor is set and the rewinder has produced it.
    pub fn cursor(&self) -> RwLockReadGuard<'_, Option<Cursor>> {
        self.cursor.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Changes whenever the head changed.
    pub fn head_generation(&self) -> u64 {
        self.head_gen.load(Ordering::Acquire)
    }

    /// Changes whenever the cursor model changed.
    pub fn cursor_generation(&self) -> u64 {
        self.cursor_gen.load(Ordering::Acquire)
    }

    /// Asks for the model after the first `index` records (`None`: follow the head).
    pub fn seek(&self, index: Option<usize>) {
        if let Ok(mut t) = self.target.lock() {
            if t.want != index {
                t.want = index;
                t.serial += 1;
                self.target_cv.notify_all();
            }
        }
    }

    /// The index asked for last.
    pub fn wanted(&self) -> Option<usize> {
        self.target.lock().ok().and_then(|t| t.want)
    }

    /// Whether the rewinder is still working towards the wanted index.
    pub fn rewinding(&self) -> bool {
        let Some(want) = self.wanted() else {
            return false;
        };
        let want = want.min(self.head().applied);
        self.rewinding.load(Ordering::Acquire)
            || self.cursor().as_ref().map(|c| c.index) != Some(want)
    }

    /// Stops the threads (they exit at their next batch).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        if let Ok(_t) = self.target.lock() {
            self.target_cv.notify_all();
        }
    }

    /// Waits until the source is exhausted (or failed). Returns false on timeout.
    pub fn wait_loaded(&self, timeout: Duration) -> bool {
        wait_until(timeout, || self.progress.finished())
    }

    /// Waits until the time series cover the whole run (see [`Progress::history_ready`]).
    pub fn wait_history(&self, timeout: Duration) -> bool {
        wait_until(timeout, || self.progress.history_ready())
    }

    /// Waits until the cursor model is at the wanted index. Returns false on timeout.
    pub fn wait_cursor(&self, timeout: Duration) -> bool {
        wait_until(timeout, || !self.rewinding())
    }

    fn write_batch(&self, batch: &[(Record, Option<Arc<[u8]>>)], ck: &mut Checkpointing) {
        if batch.is_empty() {
            return;
        }
        let mut h = self.head.write().unwrap_or_else(|p| p.into_inner());
        for (r, m) in batch {
            let e = m.as_deref().and_then(MetaEntry::parse);
            h.apply(r, e.as_ref());
        }
        let applied = h.applied;
        drop(h);
        self.batch_done(applied, ck);
    }

    /// Applies records read in place from a mapped trace (no copy), one lock per batch.
    fn write_trace_records(&self, trace: &Trace, recs: &[Record], ck: &mut Checkpointing) {
        for part in recs.chunks(BATCH) {
            let mut h = self.head.write().unwrap_or_else(|p| p.into_inner());
            h.apply_trace(trace, part);
            let applied = h.applied;
            drop(h);
            self.batch_done(applied, ck);
        }
    }

    fn batch_done(&self, applied: usize, ck: &mut Checkpointing) {
        self.progress.set_done(applied as u64);
        self.head_gen.fetch_add(1, Ordering::Release);
        ck.maybe(self, applied);
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }
}

/// The ingest's own checkpoints, for sources without enough of them.
struct Checkpointing {
    every: usize,
    last: usize,
    apply_time: Instant,
}

impl Checkpointing {
    fn new() -> Checkpointing {
        Checkpointing {
            every: CHECKPOINT_EVERY,
            last: 0,
            apply_time: Instant::now(),
        }
    }

    fn maybe(&mut self, run: &Run, applied: usize) {
        if applied < self.last + self.every {
            return;
        }
        let h = run.head();
        if h.checkpoints
            .last()
            .is_some_and(|(i, _)| *i + self.every > applied)
        {
            self.last = h.checkpoints.last().map_or(0, |c| c.0);
            return;
        }
        let t = Instant::now();
        let bytes: Arc<[u8]> = Arc::from(h.model.checkpoint());
        let at = h.applied;
        drop(h);
        let cost = t.elapsed();
        let spent = self.apply_time.elapsed();
        // Keep checkpoints under ~10 % of the ingest time.
        if cost * 10 > spent {
            self.every = self.every.saturating_mul(2);
        }
        let mut h = run.head.write().unwrap_or_else(|p| p.into_inner());
        h.checkpoints.push((at, bytes));
        drop(h);
        self.last = at;
        self.apply_time = Instant::now();
    }
}

fn ingest(run: &Run, source: Source) -> Result<(), String> {
    match source {
        Source::Trace(path) => ingest_trace(run, &path),
        Source::Snapshot(path) => ingest_snapshot(run, &path),
        Source::Live(target) => ingest_live(run, &target),
        Source::Feed(rx) => ingest_feed(run, rx),
    }
}

fn ingest_trace(run: &Run, path: &Path) -> Result<(), String> {
    let trace = Arc::new(Trace::open(path).map_err(|e| e.to_string())?);
    let growing = !trace.complete() && trace.corrupt_at().is_none() && recently_modified(path);
    run.progress.set_total(trace.len());
    {
        let mut h = run.head.write().unwrap_or_else(|p| p.into_inner());
        h.warnings = trace.warnings().to_vec();
        h.log.trace = Some(trace.clone());
        h.log.base = trace.len() as usize;
        for (i, (at, _)) in trace.checkpoints().iter().enumerate() {
            h.checkpoints
                .push((*at as usize, Arc::from(trace.checkpoint_bytes(i))));
        }
    }
    let mut ck = Checkpointing::new();
    if !growing && fast_open(run, &trace, &mut ck) {
        return Ok(());
    }
    for chunk in trace.record_chunks() {
        run.write_trace_records(&trace, chunk, &mut ck);
        if run.stopped() {
            return Ok(());
        }
    }
    if growing {
        // Caught up with what is on disk: the window shows it; keep following.
        run.progress.finish();
        follow(run, path, trace.len(), &mut ck)?;
    }
    Ok(())
}

/// Opens a complete trace from its last checkpoint: the head is exact after restoring it
/// and replaying only the records after it (the window is usable then), and the full
/// history is replayed afterwards on this thread for the time series, which the model's
/// checkpoints do not hold. False (nothing done) when the trace has no usable checkpoint.
fn fast_open(run: &Run, trace: &Trace, ck: &mut Checkpointing) -> bool {
    let Some((i, at)) = trace
        .checkpoints()
        .iter()
        .enumerate()
        .rev()
        .find(|(_, (at, _))| *at > 0 && *at <= trace.len())
        .map(|(i, (at, _))| (i, *at as usize))
    else {
        return false;
    };
    let Ok(model) = Model::restore(trace.checkpoint_bytes(i)) else {
        return false;
    };
    run.progress.set_history_pending(true);
    {
        let mut h = run.head.write().unwrap_or_else(|p| p.into_inner());
        h.model = model;
        h.applied = at;
        let first = trace
            .records()
            .find(|r| r.ts_ns != 0)
            .map_or(0, |r| r.ts_ns);
        h.t_first = first;
        h.t_last = trace
            .record(at as u64 - 1)
            .map_or(first, |r| r.ts_ns.max(first));
    }
    run.progress.set_done(at as u64);
    let mut k = 0u64;
    for chunk in trace.record_chunks() {
        let n = chunk.len() as u64;
        if k + n > at as u64 {
            let skip = (at as u64).saturating_sub(k) as usize;
            run.write_trace_records(trace, &chunk[skip..], ck);
        }
        k += n;
        if run.stopped() {
            return true;
        }
    }
    // The window has everything but the timelines' history.
    run.progress.finish();
    let mut full = Head::new();
    let mut done = 0u64;
    for chunk in trace.record_chunks() {
        full.apply_trace(trace, chunk);
        done += chunk.len() as u64;
        run.progress.set_history_done(done);
        if run.stopped() {
            return true;
        }
    }
    {
        let mut h = run.head.write().unwrap_or_else(|p| p.into_inner());
        if h.applied == full.applied {
            h.model = full.model;
            h.baselines = full.baselines;
            h.nvml_process = full.nvml_process;
            h.first_exit = full.first_exit;
            h.t_first = full.t_first;
            h.t_last = full.t_last;
        }
    }
    run.head_gen.fetch_add(1, Ordering::Release);
    run.progress.set_history_pending(false);
    true
}

/// Whether a trace without an end marker is probably still being written (touched in the
/// last 10 seconds) rather than cut short by a crash.
fn recently_modified(path: &Path) -> bool {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age < Duration::from_secs(10))
}

fn trace_meta(trace: &Trace, r: &Record) -> Option<Arc<[u8]>> {
    if r.meta == 0 {
        return None;
    }
    let m = trace
        .metas()
        .iter()
        .find(|m| m.pid == r.pid && m.meta_ref == r.meta)?;
    Some(Arc::from(trace.bytes(m.bytes.clone())))
}

/// Follows a trace that has no end marker yet (still being recorded), from record `skip`.
fn follow(run: &Run, path: &Path, skip: u64, ck: &mut Checkpointing) -> Result<(), String> {
    let mut tail = TraceTail::open(path).map_err(|e| e.to_string())?;
    let mut seen = 0u64;
    while !run.stopped() && !tail.ended() {
        let recs = tail.poll().map_err(|e| e.to_string())?;
        if recs.is_empty() {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        let mut batch = Vec::with_capacity(recs.len());
        for r in recs {
            seen += 1;
            if seen <= skip {
                continue;
            }
            let bytes = if r.meta != 0 {
                tail.meta(r.pid, r.meta).map(|e| Arc::from(entry_bytes(&e)))
            } else {
                None
            };
            batch.push((r, bytes));
        }
        ingest_records(run, batch, ck);
        run.progress.set_total(run.head().applied as u64);
    }
    Ok(())
}

/// Re-encodes a parsed metadata entry (the tail hands out parsed entries only).
fn entry_bytes(e: &MetaEntry<'_>) -> Vec<u8> {
    let mut buf = vec![0u8; e.padded_len.max(64) + 64];
    let kind = e
        .kind
        .unwrap_or(fragprobe_shared::format::MetaKind::RunInfo);
    let mut w = fragprobe_shared::format::MetaWriter::new(&mut buf, kind);
    for (k, v) in e.fields.clone() {
        w.field(k, v);
    }
    let (len, _) = w.finish();
    buf.truncate(len);
    buf
}

fn ingest_records(run: &Run, recs: Vec<(Record, Option<Arc<[u8]>>)>, ck: &mut Checkpointing) {
    {
        let mut h = run.head.write().unwrap_or_else(|p| p.into_inner());
        for (r, m) in &recs {
            if let Some(m) = m {
                h.log.metas.insert((r.pid, r.meta), m.clone());
            }
            h.log.mem.push(*r);
        }
    }
    for part in recs.chunks(BATCH) {
        if run.stopped() {
            return;
        }
        run.write_batch(part, ck);
    }
}

fn ingest_snapshot(run: &Run, path: &Path) -> Result<(), String> {
    let snap = super::snapshot::load(path)?;
    // The allocator layer first (with the trace's peaks): it is complete when the records
    // that follow are in, so a loaded run always has both layers.
    let layer = Arc::new(AllocatorLayer::from_snapshot(&snap, true));
    run.head
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .allocator = Some(layer);
    let recs = super::snapshot::from_snapshot(&snap, &super::snapshot::file_name(path));
    drop(snap);
    run.progress.set_total(recs.len() as u64);
    let mut ck = Checkpointing::new();
    ingest_records(run, recs, &mut ck);
    Ok(())
}

fn ingest_feed(run: &Run, rx: super::feed::FeedReceiver) -> Result<(), String> {
    let mut ck = Checkpointing::new();
    while !run.stopped() {
        let t = rx.take();
        let metas: HashMap<(u32, u64), Arc<[u8]>> =
            t.metas.into_iter().map(|(p, m, b)| ((p, m), b)).collect();
        let recs: Vec<_> = t
            .records
            .into_iter()
            .map(|r| {
                let m = metas.get(&(r.pid, r.meta)).cloned();
                (r, m)
            })
            .collect();
        let empty = recs.is_empty();
        ingest_records(run, recs, &mut ck);
        run.head
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .ring_dropped = t.dropped;
        if t.closed {
            return Ok(());
        }
        if empty {
            std::thread::sleep(Duration::from_millis(15));
        }
    }
    Ok(())
}

fn ingest_live(run: &Run, target: &LiveTarget) -> Result<(), String> {
    use crate::record::{Recorder, RecorderOptions};
    let opts = RecorderOptions {
        only_pid: target.pid,
        remove_finished: false,
        attach_late: true,
    };
    let mut rec = Recorder::new(&target.dir, None, opts);
    let mut ck = Checkpointing::new();
    while !run.stopped() {
        let mut got: Vec<(Record, Option<Arc<[u8]>>)> = Vec::new();
        let mut sink = |r: &Record, recorder: &Recorder| {
            let m = if r.meta != 0 {
                recorder.meta_of(r).map(Arc::from)
            } else {
                None
            };
            got.push((*r, m));
        };
        rec.poll(&mut sink).map_err(|e| format!("live: {e:#}"))?;
        let empty = got.is_empty();
        ingest_records(run, got, &mut ck);
        run.head
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .ring_dropped = rec.lost();
        if empty {
            std::thread::sleep(Duration::from_millis(15));
        }
    }
    Ok(())
}

/// Polls `ready` every 2 ms until it holds (true) or `timeout` passes (false).
fn wait_until(timeout: Duration, ready: impl Fn() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while !ready() {
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    true
}
