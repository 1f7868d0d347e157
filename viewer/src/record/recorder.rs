//! Drains every ring in a directory (or one attached ring) into a trace and a sink.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use fragprobe_shared::format::{Api, EventKind, Record, DEVICE_UNKNOWN};
use fragprobe_shared::live::resync_records_at;
use fragprobe_shared::ring::{list_rings, monotonic_ns, DrainEnd, RingFile};
use fragprobe_shared::trace::TraceWriter;

use super::nvml::{sample_records, NvmlFeed, Timed};
use crate::nvml::live::described_devices;

/// The trace file a recorder writes.
pub type TraceOut = TraceWriter<std::io::BufWriter<std::fs::File>>;

/// How long a claimed-but-uncommitted slot may wait before it is skipped, when the
/// producing process is gone / still alive.
const PENDING_DEAD_NS: u64 = 50_000_000;
const PENDING_ALIVE_NS: u64 = 5_000_000_000;
/// A consumer heartbeat older than this lets another consumer take the ring over.
const STALE_CONSUMER_NS: u64 = 3_000_000_000;

/// What the recorder does with each ring.
#[derive(Clone, Debug, Default)]
pub struct RecorderOptions {
    /// Only this pid (for `attach PID`).
    pub only_pid: Option<u32>,
    /// Remove ring files of processes that ended once they are drained (rings of a
    /// `fragprobe run` session directory, never a user's per-user directory).
    pub remove_finished: bool,
    /// Start with a resync from the live table and skip the backlog (attaching to a
    /// process that has been running).
    pub attach_late: bool,
}

struct Attached {
    file: RingFile,
    pid: u32,
    seen_dropped: u64,
    seen_skipped: u64,
    pending_since: Option<(u64, u64)>,
    metas: HashSet<u64>,
    saw_exit: bool,
    finished: bool,
    /// Records with seq below this were already covered by a resync: skip them.
    skip_below: u64,
    /// The GPUs the process described ((CUDA ordinal, uuid)), for its NVML samples;
    /// read again whenever it has written more metadata.
    devices: Vec<(i16, String)>,
    devices_read_at: usize,
    /// The latest timestamp among its records that earlier polls already passed on.
    flushed_ts: u64,
}

/// Counters of one [`Recorder::poll`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PollStats {
    /// Records delivered (including synthesised loss/resync/exit records).
    pub records: u64,
    /// Rings attached this poll.
    pub attached: u32,
    /// Rings whose process ended and that are fully drained, this poll.
    pub finished: u32,
}

/// Drains rings into a trace writer and a sink.
pub struct Recorder {
    dir: Option<PathBuf>,
    opts: RecorderOptions,
    rings: Vec<Attached>,
    known: HashMap<PathBuf, ()>,
    writer: Option<TraceOut>,
    /// Why the trace stopped early (a write failed: disk full, quota, I/O error).
    trace_error: Option<std::io::Error>,
    batch: Vec<Record>,
    total: u64,
    lost: u64,
    pids: Vec<u32>,
    /// NVML samples to write next to the records (see [`Recorder::sample_nvml`]).
    nvml: Option<NvmlFeed>,
}

impl Recorder {
    /// A recorder over every ring that appears in `dir`.
    pub fn new(dir: &Path, writer: Option<TraceOut>, opts: RecorderOptions) -> Recorder {
        Recorder {
            dir: Some(dir.to_path_buf()),
            opts,
            rings: Vec::new(),
            known: HashMap::new(),
            writer,
            trace_error: None,
            batch: Vec::with_capacity(4096),
            total: 0,
            lost: 0,
            pids: Vec::new(),
            nvml: None,
        }
    }

    /// A recorder over one ring file (`attach`).
    pub fn attach_file(
        path: &Path,
        writer: Option<TraceOut>,
        opts: RecorderOptions,
    ) -> anyhow::Result<Recorder> {
        let mut r = Recorder {
            dir: None,
            ..Recorder::new(Path::new("."), writer, opts)
        };
        r.dir = None;
        let file = RingFile::open(path)?;
        r.adopt(path.to_path_buf(), file)?;
        Ok(r)
    }

    /// Writes the samples `feed` takes as `NvmlSample` records: one per probed process
    /// and GPU it described, at each poll after the sample was taken.
    pub fn sample_nvml(&mut self, feed: NvmlFeed) {
        self.nvml = Some(feed);
    }

    /// Processes seen so far.
    pub fn pids(&self) -> &[u32] {
        &self.pids
    }

    /// Records delivered so far.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Events the producers dropped (ring full) or that were skipped, so far.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Whether any ring is still attached and not finished.
    pub fn active(&self) -> bool {
        self.rings.iter().any(|r| !r.finished)
    }

    /// Rings ever attached.
    pub fn rings_seen(&self) -> usize {
        self.known.len()
    }

    fn adopt(&mut self, path: PathBuf, file: RingFile) -> anyhow::Result<()> {
        let now = monotonic_ns();
        if !file.acquire_consumer(now, STALE_CONSUMER_NS) {
            anyhow::bail!(
                "{} is being drained by another fragprobe (heartbeat within {} s); stop it first",
                path.display(),
                STALE_CONSUMER_NS / 1_000_000_000
            );
        }
        let pid = file.pid();
        self.known.insert(path, ());
        if !self.pids.contains(&pid) {
            self.pids.push(pid);
        }
        let mut a = Attached {
            pid,
            seen_dropped: file.dropped(),
            seen_skipped: file.skipped(),
            file,
            pending_since: None,
            metas: HashSet::new(),
            saw_exit: false,
            finished: false,
            skip_below: 0,
            devices: Vec::new(),
            // Read at the first sample, whatever was drained before (a late attach).
            devices_read_at: usize::MAX,
            flushed_ts: 0,
        };
        if self.opts.attach_late || a.seen_dropped > 0 || a.seen_skipped > 0 {
            let mut out = Vec::new();
            Self::resync(&mut a, &mut out);
            self.emit_vec(&mut a, out)?;
        }
        self.rings.push(a);
        Ok(())
    }

    /// Appends the resync records of `a`'s live table and skips, from now on, the records
    /// the resync already covers (seq below its watermark, `ResyncBegin.aux`).
    fn resync(a: &mut Attached, out: &mut Vec<Record>) {
        let recs = resync_records_at(&a.file, monotonic_ns());
        if let Some(begin) = recs.first() {
            a.skip_below = a.skip_below.max(begin.aux);
        }
        out.extend(recs);
    }

    fn discover(&mut self) -> u32 {
        let Some(dir) = self.dir.clone() else {
            return 0;
        };
        let mut n = 0;
        for info in list_rings(&dir) {
            if self.known.contains_key(&info.path) {
                continue;
            }
            if self.opts.only_pid.is_some_and(|p| p != info.pid) {
                continue;
            }
            match RingFile::open(&info.path) {
                Ok(f) => {
                    if let Err(e) = self.adopt(info.path.clone(), f) {
                        eprintln!("fragprobe: {e:#}");
                        self.known.insert(info.path, ());
                    } else {
                        n += 1;
                    }
                }
                Err(e) => {
                    // A ring that is being created may not be sized yet: try again next poll.
                    if std::fs::metadata(&info.path)
                        .map(|m| m.len() > 4096)
                        .unwrap_or(false)
                    {
                        eprintln!("fragprobe: skipping {}: {e}", info.path.display());
                        self.known.insert(info.path, ());
                    }
                }
            }
        }
        n
    }

    fn emit_vec(&mut self, a: &mut Attached, recs: Vec<Record>) -> anyhow::Result<()> {
        for r in recs {
            self.emit(a, r)?;
        }
        Ok(())
    }

    fn emit(&mut self, a: &mut Attached, r: Record) -> anyhow::Result<()> {
        if r.meta != 0 && a.metas.insert(r.meta) {
            if let Some(bytes) = a.file.meta(r.meta) {
                let pid = a.pid;
                self.write_trace(|w| w.write_meta(pid, r.meta, bytes));
            }
        }
        if r.kind == EventKind::ProcessExit as u16 {
            a.saw_exit = true;
        }
        self.batch.push(r);
        self.total += 1;
        Ok(())
    }

    fn flush_batch(&mut self, sink: &mut dyn FnMut(&Record, &Recorder)) -> anyhow::Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.batch);
        self.write_trace(|w| w.write_records(&batch));
        for r in &batch {
            sink(r, self);
        }
        self.batch = batch;
        self.batch.clear();
        Ok(())
    }

    /// Adds the NVML sample records of `a`'s process to this poll's batch of its records
    /// (drained first, so the GPUs it has described by now are known), each where its
    /// time puts it: after the records made before NVML's reading, before those made
    /// after, so the model applies it to what was tracked when it was taken.
    fn emit_nvml(&mut self, a: &mut Attached, samples: &[Timed]) {
        if a.metas.len() != a.devices_read_at {
            a.devices = described_devices(a.file.meta_area());
            a.devices_read_at = a.metas.len();
        }
        if a.devices.is_empty() {
            return;
        }
        for s in samples {
            let recs = sample_records(a.pid, a.file.head(), &a.devices, s, a.flushed_ts);
            let at = self
                .batch
                .iter()
                .position(|r| r.ts_ns > s.mono_ns)
                .unwrap_or(self.batch.len());
            for (k, r) in recs.into_iter().enumerate() {
                self.batch.insert(at + k, r);
                self.total += 1;
            }
        }
    }

    /// The metadata entry a record points at, from its process's ring.
    pub fn meta_of(&self, r: &Record) -> Option<&[u8]> {
        self.rings
            .iter()
            .find(|a| a.pid == r.pid)
            .and_then(|a| a.file.meta(r.meta))
    }

    /// Discovers new rings and drains every ring once; records go to the trace and `sink`.
    pub fn poll(&mut self, sink: &mut dyn FnMut(&Record, &Recorder)) -> anyhow::Result<PollStats> {
        let mut stats = PollStats {
            attached: self.discover(),
            ..PollStats::default()
        };
        let before = self.total;
        let samples = self.nvml.as_ref().map(NvmlFeed::take).unwrap_or_default();
        let now = monotonic_ns();
        let mut rings = std::mem::take(&mut self.rings);
        let rings_meta: Vec<(u32, u64)> =
            rings.iter().map(|a| (a.pid, a.file.start_ns())).collect();
        for a in rings.iter_mut().filter(|a| !a.finished) {
            if !a.file.intact() {
                Self::damaged(a);
                stats.finished += 1;
                continue;
            }
            a.file.heartbeat(now);
            self.drain_one(a, now)?;
            if !a.file.intact() {
                // Cut while we read it: what this pass read past the cut was zeros (no
                // records); what came before is kept.
                self.flush_batch(sink)?;
                Self::damaged(a);
                stats.finished += 1;
                continue;
            }
            if !samples.is_empty() {
                self.emit_nvml(a, &samples);
            }
            // The batch holds this ring's records of this poll (and the resync records
            // of rings adopted in it: not this process's).
            a.flushed_ts = self
                .batch
                .iter()
                .filter(|r| r.pid == a.pid)
                .fold(a.flushed_ts, |t, r| t.max(r.ts_ns));
            self.flush_batch(sink)?;
            if !a.finished && ended(a, &rings_meta) {
                // The process is gone: one last drain, then close its story.
                self.drain_one(a, now)?;
                if !a.saw_exit {
                    let rec = Record {
                        ts_ns: now,
                        pid: a.pid,
                        kind: EventKind::ProcessExit as u16,
                        api: Api::Consumer as u16,
                        device: DEVICE_UNKNOWN,
                        seq: a.file.tail(),
                        ..Record::default()
                    };
                    self.emit(a, rec)?;
                }
                self.flush_batch(sink)?;
                a.finished = true;
                a.file.release_consumer();
                stats.finished += 1;
            }
        }
        if self.opts.remove_finished {
            for a in rings.iter().filter(|a| a.finished) {
                let _ = std::fs::remove_file(a.file.path());
            }
            rings.retain(|a| !a.finished);
        }
        self.rings = rings;
        self.write_trace(|w| w.flush());
        stats.records = self.total - before;
        Ok(stats)
    }

    /// Stops reading a ring whose file was truncated under us (by whom, we cannot know).
    fn damaged(a: &mut Attached) {
        eprintln!(
            "fragprobe: the ring {} of pid {} was truncated by another process while it was \
             being read: it is damaged, and recording of that process stops here (the \
             trace keeps what was read before)",
            a.file.path().display(),
            a.pid
        );
        a.finished = true;
    }

    fn drain_one(&mut self, a: &mut Attached, now: u64) -> anyhow::Result<()> {
        loop {
            let mut got = Vec::new();
            let skip_below = a.skip_below;
            // Stops before any record that may depend on a drop not yet accounted for, so
            // the loss marker and resync come first (see Ring::drain_until_drop).
            let st = a
                .file
                .drain_until_drop(65536, a.seen_dropped, &mut |r: &Record| {
                    if r.seq >= skip_below && r.kind != 0 {
                        got.push(*r);
                    }
                });
            self.emit_vec(a, got)?;
            let (dropped, skipped) = (a.file.dropped(), a.file.skipped());
            if dropped > a.seen_dropped || skipped > a.seen_skipped {
                let lost = (dropped - a.seen_dropped) + (skipped - a.seen_skipped);
                a.seen_dropped = dropped;
                a.seen_skipped = skipped;
                self.lost += lost;
                let mut out = vec![Record {
                    ts_ns: now,
                    pid: a.pid,
                    kind: EventKind::Loss as u16,
                    api: Api::Consumer as u16,
                    device: DEVICE_UNKNOWN,
                    addr: a.file.head(),
                    size: lost,
                    seq: a.file.head(),
                    ..Record::default()
                }];
                Self::resync(a, &mut out);
                self.emit_vec(a, out)?;
            }
            match st.end {
                DrainEnd::Max => continue,
                DrainEnd::Empty => {
                    a.pending_since = None;
                    return Ok(());
                }
                DrainEnd::Pending { seq } => {
                    let since = match a.pending_since {
                        Some((s, t)) if s == seq => t,
                        _ => {
                            a.pending_since = Some((seq, now));
                            now
                        }
                    };
                    let waited = now.saturating_sub(since);
                    let alive = process_alive(a.pid);
                    let give_up =
                        (!alive && waited >= PENDING_DEAD_NS) || waited >= PENDING_ALIVE_NS;
                    if give_up && a.file.skip_pending(seq) {
                        a.pending_since = None;
                        continue;
                    }
                    return Ok(());
                }
            }
        }
    }

    /// Drains until every ring's process has ended or `deadline_ns` passes.
    pub fn finish(
        &mut self,
        deadline_ns: u64,
        sink: &mut dyn FnMut(&Record, &Recorder),
    ) -> anyhow::Result<()> {
        self.drain_until(deadline_ns, sink)?;
        self.close()
    }

    /// Drains until every ring is done or `deadline_ns` passes, then lets the rings go;
    /// the trace stays open (for run information) until [`Recorder::close`].
    pub fn drain_until(
        &mut self,
        deadline_ns: u64,
        sink: &mut dyn FnMut(&Record, &Recorder),
    ) -> anyhow::Result<()> {
        loop {
            self.poll(sink)?;
            if !self.active() || monotonic_ns() >= deadline_ns {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        for a in &self.rings {
            a.file.release_consumer();
        }
        Ok(())
    }

    /// Closes the trace file (writes its end marker). A failure is kept for
    /// [`Recorder::trace_error`] like any other write failure.
    pub fn close(&mut self) -> anyhow::Result<()> {
        if let Some(w) = self.writer.take() {
            let events = w.events_written();
            if let Err(e) = w.finish() {
                self.trace_failed(e, events);
            }
        }
        Ok(())
    }

    /// Runs `f` on the trace writer, if the trace is still being written (to add
    /// checkpoints or run information too). A write that fails stops the trace there: the
    /// file keeps what reached it and still opens, recording into the sink goes on, and
    /// the error is said once on stderr and kept for [`Recorder::trace_error`]. The host
    /// command is never stopped for it.
    pub fn write_trace(&mut self, f: impl FnOnce(&mut TraceOut) -> std::io::Result<()>) {
        if let Some(w) = self.writer.as_mut() {
            if let Err(e) = f(w) {
                let events = w.events_written();
                // Dropping the writer flushes what it can and ignores errors: what reached
                // the file stays readable as a truncated trace.
                self.writer = None;
                self.trace_failed(e, events);
            }
        }
    }

    fn trace_failed(&mut self, e: std::io::Error, events: u64) {
        eprintln!(
            "fragprobe: writing the trace failed after about {events} events: {e}. The trace stops there (it still opens); recording goes on without it"
        );
        self.trace_error.get_or_insert(e);
    }

    /// Why the trace stopped before the end, if it did.
    pub fn trace_error(&self) -> Option<&std::io::Error> {
        self.trace_error.as_ref()
    }
}

/// Whether the process image behind a ring has ended: it marked the ring exited, the
/// process is gone, or it `exec`ed (a newer ring with the same pid exists).
fn ended(a: &Attached, all: &[(u32, u64)]) -> bool {
    let start = a.file.start_ns();
    a.file.flags() & fragprobe_shared::ring::EXITED != 0
        || !process_alive(a.pid)
        || all.iter().any(|&(pid, s)| pid == a.pid && s > start)
}

fn process_alive(pid: u32) -> bool {
    let Ok(p) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(p, 0) };
    if r != 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EPERM) {
        return false;
    }
    // A zombie (exited, not yet reaped by its parent) counts as ended.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rsplit_once(')')
            .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
            .unwrap_or(true),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvml::{DeviceSample, Memory, Na, ProcessSample, Snapshot};
    use fragprobe_shared::format::{MetaKind, MetaWriter};
    use fragprobe_shared::ring::RingConfig;

    #[test]
    fn a_sample_sits_among_the_records_at_the_time_nvml_was_read() {
        let dir = std::env::temp_dir().join(format!("fragprobe-rec-nvml-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // A ring of this (live) process that described GPU-a as its device 0.
        let pid = std::process::id();
        let cfg = RingConfig {
            capacity: 64,
            meta_bytes: 4096,
            live_capacity: 64,
        };
        let rf = RingFile::create(dir.join(format!("{pid}.ring")), &cfg, pid).unwrap();
        let mut buf = [0u8; 128];
        let mut m = MetaWriter::new(&mut buf, MetaKind::DeviceInfo);
        m.field(b"ordinal", b"0").field(b"uuid", b"GPU-a");
        let (len, _) = m.finish();
        let meta = rf.write_meta(&buf[..len]).unwrap();
        let rec = |seq: u64, ts_ns: u64, kind: EventKind, meta: u64| Record {
            seq,
            ts_ns,
            pid,
            kind: kind as u16,
            api: Api::CuMemAllocV2 as u16,
            size: 1 << 20,
            addr: 0x1000 * (seq + 1),
            meta,
            ..Record::default()
        };
        assert!(rf.ring().push(rec(0, 100, EventKind::Device, meta)));
        assert!(rf.ring().push(rec(1, 200, EventKind::Alloc, 0)));
        assert!(rf.ring().push(rec(2, 400, EventKind::Alloc, 0)));

        let mut r = Recorder::new(&dir, None, RecorderOptions::default());
        assert_eq!(r.discover(), 1);
        let mut rings = std::mem::take(&mut r.rings);
        let a = &mut rings[0];
        r.drain_one(a, monotonic_ns()).unwrap();
        // NVML read at 300: after the first allocation, before the second.
        let gpu = DeviceSample {
            uuid: Ok("GPU-a".into()),
            memory: Ok(Memory {
                total: 8 << 30,
                free: 7 << 30,
                reserved: 0,
                used_reported: 0,
            }),
            processes: Ok(vec![ProcessSample {
                pid,
                kind: crate::nvml::sample::ProcessKind::Compute,
                used: Some(301 << 20),
                gpu_instance: None,
                compute_instance: None,
                info: None,
                probe: None,
            }]),
            ..DeviceSample::missing(0, Na::NotSupported)
        };
        let sample = Timed {
            mono_ns: 300,
            snapshot: Snapshot {
                unix_ns: 0,
                driver: Err(Na::NotSupported),
                devices: vec![gpu],
            },
        };
        r.emit_nvml(a, &[sample]);
        let order: Vec<(u64, Option<EventKind>)> =
            r.batch.iter().map(|x| (x.ts_ns, x.kind())).collect();
        drop(rf);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            order,
            vec![
                (100, Some(EventKind::Device)),
                (200, Some(EventKind::Alloc)),
                (300, Some(EventKind::NvmlSample)),
                (400, Some(EventKind::Alloc)),
            ]
        );
        assert_eq!(r.total, 4);
    }
}
