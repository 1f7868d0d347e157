//! The address-space model: a pure, deterministic replay of records into live regions and
//! fragmentation metrics. No I/O, no clock, no UI; the CLI, the viewer and the tests all feed
//! it the same way ([`Model::apply`]) and read it through the accessors.
//!
//! # Spaces and devices
//!
//! A *space* is one process on one device (`(pid, ordinal)` of the records). Each space has
//! its own live regions: device allocations (plain, pitch), pool allocations (async),
//! managed memory, imports, and the VMM objects of the process attributed to it
//! (reservations by the device of `AddressReserve`, physical handles by the device of
//! `MemCreate`, mappings by the reservation their start lies in). A *device* sums the
//! totals of its spaces. Devices are identified by GPU uuid once a `Device` record's
//! metadata gave it (so ranks that each see their GPU as ordinal 0 stay apart), otherwise by
//! ordinal.
//!
//! Live bytes ([`Totals::live_bytes`]) are device memory: plain, pitch and async
//! allocations plus the VMM physical handles that are live. A handle is live from `MemCreate` until it is both
//! released and unmapped everywhere (llama.cpp releases right after mapping). Managed memory
//! is counted apart in `managed_bytes` (it occupies the device only when touched); imports
//! are not new memory and count only in `imported_bytes`.
//!
//! # The arena
//!
//! The arena of a space is `[base, end)` with
//!
//! * `base` = the lowest address of any plain, pitch or async allocation ever seen in the
//!   space;
//! * `end` = `max(base + capacity, highest end of any such allocation ever seen)`, where
//!   `capacity` is the device's total bytes from its `Device` record (0 when there was
//!   none, so the arena then extends exactly to the highest end seen).
//!
//! Free blocks are the maximal gaps between live plain/pitch/async regions inside the
//! arena, including the gap from `base` to the first live region and the gap from the last
//! live region to `end`. `total_free = end − base − live bytes in the arena`, `largest_free`
//! is the largest free block, and the fragmentation ratio is
//! `1 − largest_free / total_free` (0 when nothing is free). Managed, imported and VMM
//! memory are not in the arena.
//!
//! Worked example: a device of 1000 bytes; the process allocates A = 100 bytes at 0x1000,
//! B = 200 bytes at 0x1064 and C = 100 bytes at 0x112c (each right after the previous),
//! then frees B. The arena is `[0x1000, 0x1000 + 1000)`. Live: A `[0, 100)` and C
//! `[300, 400)` (offsets from base). Free blocks: `[100, 300)` = 200 bytes and
//! `[400, 1000)` = 600 bytes. `total_free` = 800, `largest_free` = 600, ratio =
//! 1 − 600/800 = 0.25: a request of 700 bytes would fail for fragmentation, one of 900 for
//! capacity.
//!
//! ```
//! use fragprobe_shared::format::{Api, EventKind, Record};
//! use fragprobe_shared::model::Model;
//!
//! let rec = |seq, kind: EventKind, addr, size| Record {
//!     seq, ts_ns: seq, addr, size, pid: 7, device: 0,
//!     kind: kind as u16, api: Api::Synthetic as u16, ..Record::default()
//! };
//! let mut m = Model::new();
//! m.apply(&rec(0, EventKind::Device, 0, 1000));
//! m.apply(&rec(1, EventKind::Alloc, 0x1000, 100));
//! m.apply(&rec(2, EventKind::Alloc, 0x1064, 200));
//! m.apply(&rec(3, EventKind::Alloc, 0x112c, 100));
//! m.apply(&rec(4, EventKind::Free, 0x1064, 0));
//! let a = m.spaces()[0].arena().unwrap();
//! assert_eq!((a.base, a.end), (0x1000, 0x1000 + 1000));
//! assert_eq!((a.free_blocks, a.total_free, a.largest_free), (2, 800, 600));
//! assert_eq!(a.ratio(), 0.25);
//! ```
//!
//! On the simulated GPU (first fit from a fixed base, an arena of exactly the device's size)
//! the arena is the allocator's memory and these figures are exact. On a real GPU the
//! virtual layout is not physical memory: the arena describes the layout of the process's
//! device-allocation *addresses* (how scattered its live allocations are), which is what a
//! caching allocator's segments look like, but the driver maps physical pages wherever it
//! likes, so a real out-of-memory is physical. For real OOMs use the driver's free bytes
//! from `cuMemGetInfo` ([`DeviceSamples::driver_free`], part of every failed allocation's
//! verdict) and the PyTorch allocator-level figures; the arena may also span more than the
//! device's memory when the driver spreads addresses.
//!
//! A device's arena figures are those of its most constrained space (the one with the
//! smallest largest free block): with one process per device, simply that process's.
//!
//! # Cost
//!
//! Every event costs O(log n) in the live objects of its space: arena regions are kept in a
//! B+tree by address, each with the free gap after it, whose inner nodes keep the largest
//! gap below each child, so one descent finds a region's neighbour and the root gives the
//! largest free block. Totals, peaks and series points are updated in O(1) per touched
//! space and device.
//!
//! # Anomalies and resyncs
//!
//! Inconsistent events are counted ([`Anomalies`]), never panicked on; each type documents
//! what the model does. Failed calls (result ≠ 0) change nothing; failed allocations are
//! kept with a [`Verdict`]. Records with an unknown kind or api are counted and skipped.
//! `Loss` marks the process incomplete. `ResyncBegin` … `ResyncEnd` replaces the process's
//! state by the entries (`result` = [`LiveClass`](crate::live::LiveClass)); afterwards an
//! allocation whose seq equals the live object's seq is a duplicate and skipped, and a
//! free-like event (free, release, address free, unmap) of something unknown with a seq in
//! `[ResyncBegin.aux, ResyncEnd.aux)` is benign. A VMM mapping entry whose handle has no
//! entry (released but still mapped) gets a released handle of the mappings' total size.
//!
//! # Checkpoints
//!
//! [`Model::checkpoint`] encodes the whole state except the time series (a viewer that
//! seeks keeps the series of its first full pass); restoring and replaying the rest gives
//! the same model as replaying everything.

mod anomalies;
mod arena;
mod batch;
mod checkpoint;
mod device;
mod figures;
pub(crate) mod hash;
mod lifecycle;
mod metrics;
mod pointers;
mod prefetch;
mod process;
mod query;
mod region;
mod resync;
mod series;
mod space;
mod tree;
mod verdict;
mod vmm;

pub use anomalies::{Anomalies, AnomalyKind, Example, ANOMALY_KINDS, EXAMPLES_KEPT};
pub use checkpoint::{CheckpointError, CHECKPOINT_VERSION};
pub use device::{Device, DeviceInfo, DeviceKey, DeviceSamples};
pub use figures::{DeviceFigures, RunFigures};
pub use metrics::{frag_ratio, ArenaFigures, Counts, Snapshot, Summary, Totals};
pub use process::{ExitInfo, Process, ProcessInfo};
pub use query::{Gap, LeakGroup, LodCell, RegionView};
pub use region::{RegionKind, When};
pub use series::{Bucket, Metric, Series, SeriesSet, SeriesView, DEFAULT_SERIES_CAP};
pub use space::Space;
pub use verdict::{verdict, FailedAlloc, Verdict};

use std::collections::{BTreeMap, HashMap};

use crate::format::{EventKind, MetaEntry, Record};

use hash::FxMap;

/// Index of a space in [`Model::spaces`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SpaceId(pub u32);

/// Index of a device in [`Model::devices`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId(pub u32);

/// Failed allocations kept in [`Model::failed_allocs`]; later ones are only counted.
pub const FAILED_KEPT: usize = 100_000;

/// Tunables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelConfig {
    /// Points kept per time series (see [`Series`]).
    pub series_cap: usize,
}

impl Default for ModelConfig {
    fn default() -> ModelConfig {
        ModelConfig {
            series_cap: DEFAULT_SERIES_CAP,
        }
    }
}

/// The model. See the module documentation.
#[derive(Clone, Debug)]
pub struct Model {
    config: ModelConfig,
    counts: Counts,
    anomalies: Anomalies,
    failed: Vec<FailedAlloc>,
    failed_dropped: u64,
    processes: Vec<Process>,
    proc_index: FxMap<u32, u32>,
    spaces: Vec<Space>,
    space_index: FxMap<(u32, i16), u32>,
    devices: Vec<Device>,
    device_index: HashMap<DeviceKey, u32>,
    /// `(kind, size) → count` of objects live when their process exited.
    exit_leaks: BTreeMap<(u8, u64), u64>,
    now: When,
    touched: Vec<u32>,
    touched_dev: Vec<u32>,
    cache: Option<(u32, i16, u32)>,
}

impl Default for Model {
    fn default() -> Model {
        Model::new()
    }
}

/// Whether a kind is a call the program made (its result matters).
fn is_call(kind: EventKind) -> bool {
    (kind as u16) <= EventKind::PoolTrim as u16
}

impl Model {
    /// An empty model with the default configuration.
    pub fn new() -> Model {
        Model::with_config(ModelConfig::default())
    }

    /// An empty model.
    pub fn with_config(config: ModelConfig) -> Model {
        Model {
            config,
            counts: Counts::default(),
            anomalies: Anomalies::default(),
            failed: Vec::new(),
            failed_dropped: 0,
            processes: Vec::new(),
            proc_index: FxMap::default(),
            spaces: Vec::new(),
            space_index: FxMap::default(),
            devices: Vec::new(),
            device_index: HashMap::new(),
            exit_leaks: BTreeMap::new(),
            now: When::default(),
            touched: Vec::new(),
            touched_dev: Vec::new(),
            cache: None,
        }
    }

    /// The configuration.
    pub fn config(&self) -> ModelConfig {
        self.config
    }

    /// Applies one record. Metadata the record points at (`ProcessStart`, `Device`) can be
    /// given later with [`Model::apply_meta`], or at once with [`Model::apply_with_meta`].
    #[inline]
    pub fn apply(&mut self, rec: &Record) {
        self.apply_with_meta(rec, None);
    }

    /// Applies one record together with the metadata entry its `meta` field points at
    /// (`ProcessInfo` for `ProcessStart`, `DeviceInfo` for `Device` and, optionally,
    /// `NvmlSample` — whose device is then found by uuid).
    pub fn apply_with_meta(&mut self, rec: &Record, meta: Option<&MetaEntry<'_>>) {
        self.counts.events += 1;
        let (Some(kind), Some(_)) = (rec.kind(), rec.api()) else {
            self.counts.unknown += 1;
            return;
        };
        if let Some(c) = self.counts.by_kind.get_mut(kind as usize) {
            *c += 1;
        }
        self.now = When {
            ts_ns: rec.ts_ns,
            seq: rec.seq,
            pid: rec.pid,
        };
        if is_call(kind) && !rec.ok() {
            self.on_failed(kind, rec);
        } else {
            self.dispatch(kind, rec, meta);
        }
        self.finish();
    }

    fn dispatch(&mut self, kind: EventKind, rec: &Record, meta: Option<&MetaEntry<'_>>) {
        use EventKind as K;
        match kind {
            K::Alloc => {
                let pitch = rec.flags & crate::format::Flags::PITCH != 0 || rec.aux != 0;
                let k = if pitch {
                    RegionKind::Pitch
                } else {
                    RegionKind::Device
                };
                self.on_ptr_alloc(rec, k);
            }
            K::ManagedAlloc => self.on_ptr_alloc(rec, RegionKind::Managed),
            K::AsyncAlloc => self.on_ptr_alloc(rec, RegionKind::Async),
            K::Free | K::AsyncFree => self.on_free(rec),
            K::AddressReserve => self.on_reserve(rec),
            K::AddressFree => self.on_address_free(rec),
            K::MemCreate => self.on_create(rec),
            K::MemRelease => self.on_release(rec),
            K::MemMap => self.on_map(rec),
            K::MemUnmap => self.on_unmap(rec),
            K::MemGetInfo => self.on_meminfo(rec),
            K::Import => self.on_import(rec),
            K::PoolTrim => {}
            K::Device => self.on_device(rec, meta),
            K::ProcessStart => self.on_process_start(rec, meta),
            K::ProcessExit => self.on_process_exit(rec),
            K::Loss => self.on_loss(rec),
            K::ResyncBegin => self.on_resync_begin(rec),
            K::ResyncEntry => self.on_resync_entry(rec),
            K::ResyncEnd => self.on_resync_end(rec),
            K::NvmlSample => self.on_nvml(rec, meta),
        }
    }

    /// Gives the model a metadata entry that a `ProcessStart` or `Device` record of `pid`
    /// pointed at (`meta_ref` = that record's `meta` field) after the record was applied.
    /// Entries nobody waits for are ignored.
    pub fn apply_meta(&mut self, pid: u32, meta_ref: u64, entry: &MetaEntry<'_>) {
        self.on_meta(pid, meta_ref, entry);
        self.finish();
    }

    // ------------------------------------------------------------ bookkeeping helpers

    pub(crate) fn anomaly(&mut self, kind: AnomalyKind, addr: u64) {
        self.counts.anomalies += 1;
        let n = self.now;
        self.anomalies.add(
            kind,
            Example {
                seq: n.seq,
                addr,
                pid: n.pid,
                ts_ns: n.ts_ns,
            },
        );
    }

    #[inline]
    pub(crate) fn touch(&mut self, s: u32) {
        // Usually the first space an event touches, and the only one.
        match self.touched.last() {
            None => self.touched.push(s),
            Some(&l) if l == s => {}
            Some(_) => self.touch_another(s),
        }
    }

    #[cold]
    fn touch_another(&mut self, s: u32) {
        if !self.touched.contains(&s) {
            self.touched.push(s);
        }
    }

    pub(crate) fn touch_device(&mut self, d: u32) {
        if !self.touched_dev.contains(&d) {
            self.touched_dev.push(d);
        }
    }

    /// Adds (`add`) or removes `bytes` of `kind` to the totals of space `s` and its device.
    #[inline]
    pub(crate) fn account(&mut self, s: u32, kind: RegionKind, bytes: u64, add: bool) {
        let Some(sp) = self.spaces.get_mut(s as usize) else {
            return;
        };
        sp.totals.account(kind, bytes, add);
        if let Some(d) = self.devices.get_mut(sp.device.0 as usize) {
            d.totals.account(kind, bytes, add);
        }
        self.touch(s);
    }

    pub(crate) fn proc_of(&mut self, pid: u32) -> u32 {
        if let Some(&p) = self.proc_index.get(&pid) {
            return p;
        }
        let p = self.processes.len() as u32;
        self.processes.push(Process::new(pid));
        self.proc_index.insert(pid, p);
        p
    }

    /// The device key a process's ordinal resolves to.
    fn device_key(&self, p: u32, ordinal: i16) -> DeviceKey {
        match self
            .processes
            .get(p as usize)
            .and_then(|pr| pr.device_uuid(ordinal))
        {
            Some(u) => DeviceKey::Uuid(u.to_owned()),
            None => DeviceKey::Ordinal(ordinal),
        }
    }

    pub(crate) fn device_of_key(&mut self, key: DeviceKey, ordinal: i16) -> u32 {
        if let Some(&d) = self.device_index.get(&key) {
            return d;
        }
        let d = self.devices.len() as u32;
        self.devices.push(Device::new(
            DeviceId(d),
            key.clone(),
            ordinal,
            self.config.series_cap,
        ));
        self.device_index.insert(key, d);
        d
    }

    /// The device of `(pid, ordinal)` if it exists, without creating anything.
    pub(crate) fn find_device(&self, pid: u32, ordinal: i16) -> Option<u32> {
        if let Some(&s) = self.space_index.get(&(pid, ordinal)) {
            return self.spaces.get(s as usize).map(|sp| sp.device.0);
        }
        let key = match self.proc_index.get(&pid) {
            Some(&p) => self.device_key(p, ordinal),
            None => DeviceKey::Ordinal(ordinal),
        };
        self.device_index.get(&key).copied()
    }

    /// The space of `(pid, ordinal)`, created if needed.
    #[inline]
    pub(crate) fn space_of(&mut self, pid: u32, ordinal: i16) -> u32 {
        if let Some((p, o, s)) = self.cache {
            if p == pid && o == ordinal {
                return s;
            }
        }
        let s = match self.space_index.get(&(pid, ordinal)) {
            Some(&s) => s,
            None => self.create_space(pid, ordinal),
        };
        self.cache = Some((pid, ordinal, s));
        s
    }

    /// The space of `(pid, ordinal)` if it exists.
    #[inline]
    pub(crate) fn find_space(&mut self, pid: u32, ordinal: i16) -> Option<u32> {
        if let Some((p, o, s)) = self.cache {
            if p == pid && o == ordinal {
                return Some(s);
            }
        }
        let s = *self.space_index.get(&(pid, ordinal))?;
        self.cache = Some((pid, ordinal, s));
        Some(s)
    }

    fn create_space(&mut self, pid: u32, ordinal: i16) -> u32 {
        let p = self.proc_of(pid);
        let key = self.device_key(p, ordinal);
        let d = self.device_of_key(key, ordinal);
        let s = self.spaces.len() as u32;
        let mut sp = Space::new(
            SpaceId(s),
            pid,
            ordinal,
            DeviceId(d),
            p,
            self.config.series_cap,
        );
        sp.arena
            .set_capacity(self.devices[d as usize].info.total_bytes.unwrap_or(0));
        self.spaces.push(sp);
        self.space_index.insert((pid, ordinal), s);
        self.join_device(s, d);
        self.processes[p as usize].spaces.push((ordinal, s));
        s
    }

    /// Whether `seq` of `pid` falls in its last resync window (free-like events of unknown
    /// objects there are benign).
    pub(crate) fn in_resync_window(&self, pid: u32, seq: u64) -> bool {
        self.proc_index
            .get(&pid)
            .and_then(|&p| self.processes.get(p as usize))
            .and_then(|p| p.resync.window)
            .is_some_and(|(b, e)| seq >= b && seq < e)
    }

    /// An unknown object was freed: benign inside a resync window, else an anomaly.
    pub(crate) fn unknown_free(&mut self, kind: AnomalyKind, addr: u64) {
        if self.in_resync_window(self.now.pid, self.now.seq) {
            self.counts.benign_frees += 1;
        } else {
            self.anomaly(kind, addr);
        }
    }

    /// Updates summaries, the device arena sets and the series of what the event touched.
    /// Forced inline into its two callers: one call fewer per event.
    #[inline(always)]
    fn finish(&mut self) {
        if self.touched.is_empty() && self.touched_dev.is_empty() {
            return;
        }
        let now = self.now;
        // The ratio of the last space done: a device whose most constrained space it is
        // (the only one, usually) reuses it.
        let mut done: Option<(u32, f64)> = None;
        // Usually one space was touched and its device is the only device touched: no
        // lists to walk or search.
        if let [s] = self.touched[..] {
            if let Some((d, ratio)) = self.finish_space(s, now) {
                done = Some((s, ratio));
                if self.touched_dev.is_empty() || self.touched_dev[..] == [d] {
                    self.finish_device(d, done, now);
                    self.touched.clear();
                    self.touched_dev.clear();
                    return;
                }
                if !self.touched_dev.contains(&d) {
                    self.touched_dev.push(d);
                }
            }
        } else {
            for i in 0..self.touched.len() {
                let s = self.touched[i];
                let Some((d, ratio)) = self.finish_space(s, now) else {
                    continue;
                };
                done = Some((s, ratio));
                if !self.touched_dev.contains(&d) {
                    self.touched_dev.push(d);
                }
            }
        }
        self.touched.clear();
        for i in 0..self.touched_dev.len() {
            self.finish_device(self.touched_dev[i], done, now);
        }
        self.touched_dev.clear();
    }

    /// Updates space `s`'s place in its device's arena set, its summary and its series.
    /// Returns its device and fragmentation ratio (`None`: no such space).
    #[inline(always)]
    fn finish_space(&mut self, s: u32, now: When) -> Option<(u32, f64)> {
        let sp = self.spaces.get_mut(s as usize)?;
        let fig = sp.arena.figures();
        let ratio = fig.map_or(0.0, |a| a.ratio());
        let key = fig.map(|f| f.largest_free);
        let d = sp.device.0;
        if key != sp.set_key {
            if let Some(dev) = self.devices.get_mut(d as usize) {
                if let Some(k) = sp.set_key {
                    dev.arena_set.remove(&(k, s));
                }
                if let Some(k) = key {
                    dev.arena_set.insert((k, s));
                }
                dev.worst = dev.arena_set.first().map(|&(_, s)| SpaceId(s));
            }
            sp.set_key = key;
        }
        sp.summary.observe(&sp.totals, fig.as_ref(), ratio, now);
        sp.series.record(now.ts_ns, &sp.totals, fig.as_ref(), ratio);
        Some((d, ratio))
    }

    /// Updates device `d`'s arena figures (those of its most constrained space), summary
    /// and series; `done` is the space finished last and its ratio, reused when it is
    /// that space.
    #[inline(always)]
    fn finish_device(&mut self, d: u32, done: Option<(u32, f64)>, now: When) {
        let Some(dev) = self.devices.get_mut(d as usize) else {
            return;
        };
        // A device sharing its only space's figures has nothing of its own to update: its
        // arena figures, summary and series are that space's, kept by the space (and its
        // most constrained space changes only with its arena set, in `finish_space`).
        if dev.shared_with.is_some() {
            return;
        }
        let worst = dev.arena_set.first().map(|&(_, s)| s);
        dev.worst = worst.map(SpaceId);
        // Read from the space straight into the device: a copy of figures built on the
        // stack stalled on store forwarding here.
        dev.arena = worst
            .and_then(|s| self.spaces.get(s as usize))
            .and_then(|sp| sp.arena.figures());
        let ratio = match (worst, done) {
            (Some(w), Some((s, ratio))) if w == s => ratio,
            _ => dev.arena.map_or(0.0, |a| a.ratio()),
        };
        dev.summary
            .observe(&dev.totals, dev.arena.as_ref(), ratio, now);
        dev.series
            .record(now.ts_ns, &dev.totals, dev.arena.as_ref(), ratio);
    }

    // ------------------------------------------------------------ accessors

    /// Event counters.
    pub fn counts(&self) -> &Counts {
        &self.counts
    }

    /// Anomalies by type.
    pub fn anomalies(&self) -> &Anomalies {
        &self.anomalies
    }

    /// Failed allocations in order (the first [`FAILED_KEPT`]).
    pub fn failed_allocs(&self) -> &[FailedAlloc] {
        &self.failed
    }

    /// Failed allocations beyond [`FAILED_KEPT`], counted only.
    pub fn failed_allocs_dropped(&self) -> u64 {
        self.failed_dropped
    }

    /// Every space, in order of first appearance (index = [`SpaceId`]).
    pub fn spaces(&self) -> &[Space] {
        &self.spaces
    }

    /// One space.
    pub fn space(&self, id: SpaceId) -> Option<&Space> {
        self.spaces.get(id.0 as usize)
    }

    /// The space of a process on a device ordinal.
    pub fn space_id(&self, pid: u32, ordinal: i16) -> Option<SpaceId> {
        self.space_index.get(&(pid, ordinal)).map(|s| SpaceId(*s))
    }

    /// The device process `pid`'s CUDA ordinal `ordinal` is, if the model knows it (by its
    /// space, else by the uuid the process described, else by the ordinal).
    pub fn device_id_of(&self, pid: u32, ordinal: i16) -> Option<DeviceId> {
        self.find_device(pid, ordinal).map(DeviceId)
    }

    /// Every device, in order of first appearance (index = [`DeviceId`]).
    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// The devices to show people: every device but placeholders
    /// ([`Device::is_placeholder`]), unless placeholders are all there is.
    pub fn shown_devices(&self) -> impl Iterator<Item = &Device> + '_ {
        let any_real = self.devices.iter().any(|d| !d.is_placeholder());
        self.devices
            .iter()
            .filter(move |d| !any_real || !d.is_placeholder())
    }

    /// One device.
    pub fn device(&self, id: DeviceId) -> Option<&Device> {
        self.devices.get(id.0 as usize)
    }

    /// The time series of a device. While a device has had one space only, the figures
    /// recorded after each event are that space's series (the same values at the same
    /// times), kept once.
    pub fn device_series(&self, id: DeviceId) -> Option<SeriesView<'_>> {
        let d = self.device(id)?;
        Some(SeriesView {
            own: &d.series,
            recorded: self.shared_space(d).map_or(&d.series, |sp| &sp.series),
        })
    }

    /// Peaks and extremes of a device's figures (its only space's, while it shares them;
    /// see [`Model::device_series`]).
    pub fn device_summary(&self, id: DeviceId) -> Option<&Summary> {
        self.device(id).map(|d| self.summary_in_force(d))
    }

    /// The arena figures of a device: those of its most constrained space, the one whose
    /// largest free block is smallest (ties: the lowest space id; see
    /// [`Device::arena_space`]). `None` when no space has an arena.
    pub fn device_arena(&self, id: DeviceId) -> Option<ArenaFigures> {
        self.device(id).and_then(|d| self.arena_in_force(d))
    }

    /// The arena figures of `d` in force: its shared space's while it shares one.
    pub(crate) fn arena_in_force(&self, d: &Device) -> Option<ArenaFigures> {
        match self.shared_space(d) {
            Some(sp) => sp.arena.figures(),
            None => d.arena,
        }
    }

    /// The summary of `d` in force: its shared space's while it shares one.
    pub(crate) fn summary_in_force<'a>(&'a self, d: &'a Device) -> &'a Summary {
        self.shared_space(d).map_or(&d.summary, |sp| &sp.summary)
    }

    /// The space whose summary and recorded series `d` shares, if any.
    fn shared_space(&self, d: &Device) -> Option<&Space> {
        d.shared_with.and_then(|s| self.spaces.get(s as usize))
    }

    /// Every process, in order of first appearance.
    pub fn processes(&self) -> &[Process] {
        &self.processes
    }

    /// One process by pid.
    pub fn process(&self, pid: u32) -> Option<&Process> {
        self.proc_index
            .get(&pid)
            .and_then(|p| self.processes.get(*p as usize))
    }

    /// The last event applied.
    pub fn now(&self) -> When {
        self.now
    }

    /// The final state of a space: at its process's exit if the process exited (the state
    /// is cleared at exit), else now.
    pub fn space_final(&self, id: SpaceId) -> Snapshot {
        let Some(sp) = self.space(id) else {
            return Snapshot::default();
        };
        let exited = self
            .processes
            .get(sp.process as usize)
            .is_some_and(|p| p.exit.is_some());
        match (&sp.exit, exited) {
            (Some(x), true) => *x,
            _ => Snapshot {
                at: None,
                totals: sp.totals,
                arena: sp.arena.figures(),
            },
        }
    }

    /// The final state of a device: just before its last process exit if every process on
    /// it exited, else now.
    pub fn device_final(&self, id: DeviceId) -> Snapshot {
        let Some(d) = self.device(id) else {
            return Snapshot::default();
        };
        let all_exited = !d.spaces.is_empty()
            && d.spaces.iter().all(|s| {
                self.spaces
                    .get(*s as usize)
                    .and_then(|sp| self.processes.get(sp.process as usize))
                    .is_some_and(|p| p.exit.is_some())
            });
        match (&d.exit, all_exited) {
            (Some(x), true) => *x,
            _ => Snapshot {
                at: None,
                totals: d.totals,
                arena: self.arena_in_force(d),
            },
        }
    }
}
