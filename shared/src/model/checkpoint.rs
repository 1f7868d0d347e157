//! Checkpoints: a compact, versioned, hand-written binary encoding of the model's state.
//!
//! ```text
//! "FPMC"  magic, 4 bytes
//! u32 LE  CHECKPOINT_VERSION
//! body    LEB128 varints (integers), f64 as 8 LE bytes, strings as varint length + UTF-8,
//!         options as a 0/1 byte then the value, lists as varint count then the items.
//!         Order: config, counts, anomalies, failed allocations, exit leaks, devices,
//!         processes (with VMM and resync state), spaces (arena bounds and regions).
//! ```
//!
//! Only primary state is stored; derived state (gap multisets, totals, device sums, the
//! devices' arena figures) is rebuilt on restore, and the encoding is canonical (maps in key
//! order), so equal models give equal bytes. Time series are not stored: a restored model
//! starts with empty series.

use std::fmt;

use crate::format::{EventKind, Record, RECORD_SIZE};

use super::anomalies::{AnomalyKind, Example, ANOMALY_KINDS};
use super::arena::Arena;
use super::device::{Device, DeviceInfo, DeviceKey, DeviceSamples};
use super::hash::FxMap;
use super::metrics::{Counts, Snapshot, Summary, Totals};
use super::process::{ExitInfo, Process, ProcessInfo, ResyncState};
use super::region::{Region, RegionKind, When};
use super::space::Space;
use super::verdict::{FailedAlloc, Verdict};
use super::vmm::{Handle, Mapping, Reservation, Vmm};
use super::{DeviceId, Model, ModelConfig, SpaceId};

const MAGIC: &[u8; 4] = b"FPMC";
/// Version of the checkpoint encoding.
pub const CHECKPOINT_VERSION: u32 = 2;

/// Why checkpoint bytes could not be restored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckpointError {
    /// The bytes do not start with the checkpoint magic.
    BadMagic,
    /// Another encoding version.
    Version {
        /// Found in the bytes.
        found: u32,
        /// What this build reads.
        supported: u32,
    },
    /// The bytes end early.
    Truncated,
    /// The bytes decode to an impossible state.
    Corrupt(&'static str),
}

impl fmt::Display for CheckpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckpointError::BadMagic => write!(
                f,
                "not a fragprobe model checkpoint (bad magic); the trace's checkpoint is damaged: replay from the start instead"
            ),
            CheckpointError::Version { found, supported } => write!(
                f,
                "model checkpoint version {found}, but this fragprobe reads version {supported}; replay the trace from the start (checkpoints are only a speed-up)"
            ),
            CheckpointError::Truncated => {
                write!(f, "model checkpoint is truncated; replay the trace from the start")
            }
            CheckpointError::Corrupt(what) => {
                write!(f, "model checkpoint is corrupt ({what}); replay the trace from the start")
            }
        }
    }
}

impl std::error::Error for CheckpointError {}

// ------------------------------------------------------------------ encoder

struct Enc {
    b: Vec<u8>,
}

impl Enc {
    fn u(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.b.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.b.push(v as u8);
    }
    fn i16(&mut self, v: i16) {
        self.u(v as u16 as u64);
    }
    fn bool(&mut self, v: bool) {
        self.b.push(v as u8);
    }
    fn f64(&mut self, v: f64) {
        self.b.extend_from_slice(&v.to_bits().to_le_bytes());
    }
    fn str(&mut self, s: &str) {
        self.u(s.len() as u64);
        self.b.extend_from_slice(s.as_bytes());
    }
    fn opt<T>(&mut self, v: Option<T>, f: impl FnOnce(&mut Enc, T)) {
        match v {
            None => self.b.push(0),
            Some(x) => {
                self.b.push(1);
                f(self, x);
            }
        }
    }
    fn ou(&mut self, v: Option<u64>) {
        self.opt(v, |e, x| e.u(x));
    }
    fn ostr(&mut self, v: &Option<String>) {
        self.opt(v.as_deref(), |e, x| e.str(x));
    }
    fn when(&mut self, w: When) {
        self.u(w.ts_ns);
        self.u(w.seq);
        self.u(w.pid as u64);
    }
    fn owhen(&mut self, w: Option<When>) {
        self.opt(w, |e, x| e.when(x));
    }
    fn summary(&mut self, s: &Summary) {
        self.u(s.peak_live);
        self.owhen(s.peak_at);
        self.f64(s.ratio_at_peak);
        self.ou(s.largest_free_at_peak);
        self.f64(s.max_ratio);
        self.owhen(s.max_ratio_at);
        self.ou(s.min_largest_free);
        self.owhen(s.min_largest_free_at);
        self.u(s.peak_managed);
        self.u(s.peak_mapped);
        self.u(s.peak_reserved);
    }
    fn totals(&mut self, t: &Totals) {
        for v in [
            t.live_bytes,
            t.live_count,
            t.managed_bytes,
            t.managed_count,
            t.mapped_bytes,
            t.mapping_count,
            t.reserved_bytes,
            t.reservation_count,
            t.imported_bytes,
            t.imported_count,
        ] {
            self.u(v);
        }
    }
    fn arena_fig(&mut self, a: &super::ArenaFigures) {
        for v in [
            a.base,
            a.end,
            a.live,
            a.regions,
            a.free_blocks,
            a.largest_free,
            a.total_free,
        ] {
            self.u(v);
        }
    }
    fn snapshot(&mut self, s: &Snapshot) {
        self.owhen(s.at);
        self.totals(&s.totals);
        self.opt(s.arena.as_ref(), |e, a| e.arena_fig(a));
    }
    fn region(&mut self, a: u64, r: &Region) {
        self.u(a);
        self.u(r.size);
        self.u(r.seq);
        self.u(r.ts_ns);
        self.u(r.aux);
        self.u(r.aux2);
        self.u(r.api as u64);
        self.u(r.kind as u64);
    }
    fn record(&mut self, r: &Record) {
        self.b.extend_from_slice(r.as_bytes());
    }
}

// ------------------------------------------------------------------ decoder

struct Dec<'a> {
    b: &'a [u8],
    at: usize,
}

type R<T> = Result<T, CheckpointError>;

impl Dec<'_> {
    fn byte(&mut self) -> R<u8> {
        let v = *self.b.get(self.at).ok_or(CheckpointError::Truncated)?;
        self.at += 1;
        Ok(v)
    }
    fn u(&mut self) -> R<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                if shift == 63 && b > 1 {
                    return Err(CheckpointError::Corrupt("varint overflows 64 bits"));
                }
                return Ok(v);
            }
        }
        Err(CheckpointError::Corrupt("varint too long"))
    }
    /// A counter: bounded far below `u64::MAX` so that counting on cannot overflow.
    fn count(&mut self) -> R<u64> {
        let v = self.u()?;
        if v > 1 << 62 {
            return Err(CheckpointError::Corrupt("counter out of range"));
        }
        Ok(v)
    }
    fn u32(&mut self) -> R<u32> {
        u32::try_from(self.u()?).map_err(|_| CheckpointError::Corrupt("value exceeds u32"))
    }
    fn u16(&mut self) -> R<u16> {
        u16::try_from(self.u()?).map_err(|_| CheckpointError::Corrupt("value exceeds u16"))
    }
    fn i16(&mut self) -> R<i16> {
        Ok(self.u16()? as i16)
    }
    fn bool(&mut self) -> R<bool> {
        match self.byte()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(CheckpointError::Corrupt("bad boolean")),
        }
    }
    fn f64(&mut self) -> R<f64> {
        let s = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(f64::from_bits(u64::from_le_bytes(a)))
    }
    fn take(&mut self, n: usize) -> R<&[u8]> {
        let end = self.at.checked_add(n).ok_or(CheckpointError::Truncated)?;
        let s = self.b.get(self.at..end).ok_or(CheckpointError::Truncated)?;
        self.at = end;
        Ok(s)
    }
    fn str(&mut self) -> R<String> {
        let n = usize::try_from(self.u()?).map_err(|_| CheckpointError::Truncated)?;
        let s = self.take(n)?;
        String::from_utf8(s.to_vec()).map_err(|_| CheckpointError::Corrupt("string is not UTF-8"))
    }
    /// A list length, bounded by the bytes left (each item takes at least `min` bytes).
    fn len(&mut self, min: usize) -> R<usize> {
        let n = usize::try_from(self.u()?).map_err(|_| CheckpointError::Truncated)?;
        if n.saturating_mul(min.max(1)) > self.b.len() - self.at {
            return Err(CheckpointError::Truncated);
        }
        Ok(n)
    }
    fn opt<T>(&mut self, f: impl FnOnce(&mut Self) -> R<T>) -> R<Option<T>> {
        if self.bool()? {
            f(self).map(Some)
        } else {
            Ok(None)
        }
    }
    fn ou(&mut self) -> R<Option<u64>> {
        self.opt(|d| d.u())
    }
    fn ostr(&mut self) -> R<Option<String>> {
        self.opt(|d| d.str())
    }
    fn when(&mut self) -> R<When> {
        Ok(When {
            ts_ns: self.u()?,
            seq: self.u()?,
            pid: self.u32()?,
        })
    }
    fn owhen(&mut self) -> R<Option<When>> {
        self.opt(|d| d.when())
    }
    fn summary(&mut self) -> R<Summary> {
        Ok(Summary {
            peak_live: self.u()?,
            peak_at: self.owhen()?,
            ratio_at_peak: self.f64()?,
            largest_free_at_peak: self.ou()?,
            max_ratio: self.f64()?,
            max_ratio_at: self.owhen()?,
            min_largest_free: self.ou()?,
            min_largest_free_at: self.owhen()?,
            peak_managed: self.u()?,
            peak_mapped: self.u()?,
            peak_reserved: self.u()?,
        })
    }
    fn totals(&mut self) -> R<Totals> {
        Ok(Totals {
            live_bytes: self.u()?,
            live_count: self.u()?,
            managed_bytes: self.u()?,
            managed_count: self.u()?,
            mapped_bytes: self.u()?,
            mapping_count: self.u()?,
            reserved_bytes: self.u()?,
            reservation_count: self.u()?,
            imported_bytes: self.u()?,
            imported_count: self.u()?,
        })
    }
    fn arena_fig(&mut self) -> R<super::ArenaFigures> {
        Ok(super::ArenaFigures {
            base: self.u()?,
            end: self.u()?,
            live: self.u()?,
            regions: self.u()?,
            free_blocks: self.u()?,
            largest_free: self.u()?,
            total_free: self.u()?,
        })
    }
    fn snapshot(&mut self) -> R<Snapshot> {
        Ok(Snapshot {
            at: self.owhen()?,
            totals: self.totals()?,
            arena: self.opt(|d| d.arena_fig())?,
        })
    }
    fn region(&mut self) -> R<(u64, Region)> {
        let a = self.u()?;
        let r = Region {
            size: self.u()?,
            seq: self.u()?,
            ts_ns: self.u()?,
            aux: self.u()?,
            aux2: self.u()?,
            api: self.u16()?,
            kind: u8::try_from(self.u()?)
                .ok()
                .and_then(RegionKind::from_u8)
                .ok_or(CheckpointError::Corrupt("bad region kind"))?,
        };
        Ok((a, r))
    }
    fn record(&mut self) -> R<Record> {
        let s = self.take(RECORD_SIZE)?;
        let mut a = [0u8; RECORD_SIZE];
        a.copy_from_slice(s);
        Ok(Record::from_bytes(&a))
    }
}

fn verdict_code(v: Verdict) -> u64 {
    match v {
        Verdict::Capacity => 0,
        Verdict::Fragmentation => 1,
        Verdict::Other => 2,
    }
}

fn verdict_of(c: u64) -> R<Verdict> {
    match c {
        0 => Ok(Verdict::Capacity),
        1 => Ok(Verdict::Fragmentation),
        2 => Ok(Verdict::Other),
        _ => Err(CheckpointError::Corrupt("bad verdict")),
    }
}

// ------------------------------------------------------------------ model

impl Model {
    /// Encodes the model's state (everything but the time series). Deterministic: equal
    /// models give equal bytes.
    pub fn checkpoint(&self) -> Vec<u8> {
        let mut e = Enc {
            b: Vec::with_capacity(1024),
        };
        e.b.extend_from_slice(MAGIC);
        e.b.extend_from_slice(&CHECKPOINT_VERSION.to_le_bytes());
        e.u(self.config.series_cap as u64);
        let c = &self.counts;
        e.u(c.events);
        e.u(c.unknown);
        for v in c.by_kind {
            e.u(v);
        }
        for v in [
            c.ok_allocs,
            c.failed_allocs,
            c.failed_calls,
            c.frees,
            c.releases,
            c.lost,
            c.duplicates,
            c.benign_frees,
            c.anomalies,
        ] {
            e.u(v);
        }
        for k in AnomalyKind::ALL {
            e.u(self.anomalies.count(k));
            let ex = self.anomalies.examples(k);
            e.u(ex.len() as u64);
            for x in ex {
                e.u(x.seq);
                e.u(x.addr);
                e.u(x.pid as u64);
                e.u(x.ts_ns);
            }
        }
        e.u(self.failed.len() as u64);
        for f in &self.failed {
            e.u(f.pid as u64);
            e.i16(f.ordinal);
            e.u(f.seq);
            e.u(f.ts_ns);
            e.u(f.kind as u64);
            e.u(f.api as u64);
            e.u(f.size);
            e.u(f.result as u64);
            e.ou(f.total_free);
            e.ou(f.largest_free);
            e.ou(f.driver_free);
            e.ou(f.nvml_used);
            e.u(verdict_code(f.verdict));
        }
        e.u(self.failed_dropped);
        e.u(self.exit_leaks.len() as u64);
        for (&(k, size), &n) in &self.exit_leaks {
            e.u(k as u64);
            e.u(size);
            e.u(n);
        }
        e.u(self.devices.len() as u64);
        for d in &self.devices {
            match &d.key {
                DeviceKey::Uuid(u) => {
                    e.b.push(0);
                    e.str(u);
                }
                DeviceKey::Ordinal(o) => {
                    e.b.push(1);
                    e.i16(*o);
                }
            }
            e.i16(d.ordinal);
            e.ostr(&d.info.uuid);
            e.ostr(&d.info.name);
            e.ostr(&d.info.pci_bus_id);
            e.ou(d.info.total_bytes);
            let s = &d.samples;
            e.ou(s.driver_free);
            e.ou(s.driver_total);
            e.owhen(s.driver_at);
            e.ou(s.nvml_used);
            e.ou(s.nvml_total);
            e.ou(s.nvml_process_used);
            e.owhen(s.nvml_at);
            e.summary(self.summary_in_force(d));
            e.opt(d.exit.as_ref(), |e, x| e.snapshot(x));
        }
        e.u(self.processes.len() as u64);
        for p in &self.processes {
            e.u(p.pid as u64);
            e.ou(p.info.ppid.map(u64::from));
            e.u(p.info.fields.len() as u64);
            for (k, v) in &p.info.fields {
                e.str(k);
                e.str(v);
            }
            e.owhen(p.start);
            e.opt(p.exit.as_ref(), |e, x| {
                e.when(x.at);
                e.u(x.status);
                e.u(x.reported_live_bytes);
                e.u(x.reported_live_count);
            });
            e.bool(p.incomplete);
            e.u(p.lost_events);
            e.u(p.resyncs);
            e.u(p.dev_uuids.len() as u64);
            for (o, u) in &p.dev_uuids {
                e.i16(*o);
                e.str(u);
            }
            e.u(p.meta_ref);
            e.u(p.pending_dev_meta.len() as u64);
            for (m, o) in &p.pending_dev_meta {
                e.u(*m);
                e.i16(*o);
            }
            e.opt(p.resync.pending.as_ref(), |e, v| {
                e.u(v.len() as u64);
                for r in v {
                    e.record(r);
                }
            });
            e.u(p.resync.begin);
            e.opt(p.resync.window, |e, (b, x)| {
                e.u(b);
                e.u(x);
            });
            let v = &p.vmm;
            e.u(v.reservations.len() as u64);
            for (&a, r) in &v.reservations {
                e.u(a);
                e.u(r.size);
                e.u(r.space as u64);
                e.u(r.seq);
                e.u(r.ts_ns);
                e.u(r.aux);
                e.u(r.aux2);
                e.u(r.api as u64);
            }
            e.u(v.mappings.len() as u64);
            for (&a, m) in &v.mappings {
                e.u(a);
                e.u(m.size);
                e.u(m.handle);
                e.u(m.offset);
                e.u(m.space as u64);
                e.bool(m.holds_ref);
                e.u(m.seq);
                e.u(m.ts_ns);
                e.u(m.api as u64);
            }
            let mut hs: Vec<(&u64, &Handle)> = v.handles.iter().collect();
            hs.sort_by_key(|(k, _)| **k);
            e.u(hs.len() as u64);
            for (&k, h) in hs {
                e.u(k);
                e.u(h.size);
                e.u(h.space as u64);
                e.bool(h.released);
                e.u(h.maps);
                e.bool(h.imported);
                e.u(h.seq);
                e.u(h.ts_ns);
                e.u(h.aux);
                e.u(h.aux2);
                e.u(h.api as u64);
            }
        }
        e.u(self.spaces.len() as u64);
        for s in &self.spaces {
            e.u(s.pid as u64);
            e.i16(s.ordinal);
            e.u(s.device.0 as u64);
            let (seen, base, high) = s.arena.bounds();
            e.bool(seen);
            e.u(base);
            e.u(high);
            e.u(s.arena.regions.len() as u64);
            for (a, r, _) in s.arena.regions.iter() {
                e.region(a, r);
            }
            e.u(s.other.len() as u64);
            for (&a, r) in &s.other {
                e.region(a, r);
            }
            e.summary(&s.summary);
            e.opt(s.exit.as_ref(), |e, x| e.snapshot(x));
        }
        e.when(self.now);
        e.b
    }

    /// Rebuilds a model from [`Model::checkpoint`] bytes. Never panics on bad bytes.
    pub fn restore(bytes: &[u8]) -> Result<Model, CheckpointError> {
        if bytes.len() < 8 || &bytes[..4] != MAGIC {
            return Err(if bytes.len() < 4 || &bytes[..4] == MAGIC {
                CheckpointError::Truncated
            } else {
                CheckpointError::BadMagic
            });
        }
        let mut ver = [0u8; 4];
        ver.copy_from_slice(&bytes[4..8]);
        let found = u32::from_le_bytes(ver);
        // Version 1 (fragprobe ≤ 0.1 wave 1) lacks `releases`; it is read as the count of
        // MemRelease records, and its `frees` counted every release.
        if found != CHECKPOINT_VERSION && found != 1 {
            return Err(CheckpointError::Version {
                found,
                supported: CHECKPOINT_VERSION,
            });
        }
        let mut d = Dec { b: bytes, at: 8 };
        let cap = usize::try_from(d.u()?)
            .map_err(|_| CheckpointError::Corrupt("series capacity"))?
            .min(1 << 30);
        let mut m = Model::with_config(ModelConfig { series_cap: cap });
        let mut c = Counts {
            events: d.count()?,
            unknown: d.count()?,
            ..Counts::default()
        };
        for v in c.by_kind.iter_mut() {
            *v = d.count()?;
        }
        c.ok_allocs = d.count()?;
        c.failed_allocs = d.count()?;
        c.failed_calls = d.count()?;
        c.frees = d.count()?;
        c.releases = if found >= 2 {
            d.count()?
        } else {
            c.by_kind[crate::format::EventKind::MemRelease as usize]
        };
        c.lost = d.u()?;
        c.duplicates = d.count()?;
        c.benign_frees = d.count()?;
        c.anomalies = d.count()?;
        m.counts = c;
        for k in AnomalyKind::ALL {
            let count = d.count()?;
            let n = d.len(4)?;
            let mut ex = Vec::with_capacity(n);
            for _ in 0..n {
                ex.push(Example {
                    seq: d.u()?,
                    addr: d.u()?,
                    pid: d.u32()?,
                    ts_ns: d.u()?,
                });
            }
            m.anomalies.set(k, count, ex);
        }
        debug_assert_eq!(AnomalyKind::ALL.len(), ANOMALY_KINDS);
        let n = d.len(13)?;
        for _ in 0..n {
            let pid = d.u32()?;
            let ordinal = d.i16()?;
            let seq = d.u()?;
            let ts_ns = d.u()?;
            let kind = d
                .u16()
                .ok()
                .and_then(EventKind::from_u16)
                .ok_or(CheckpointError::Corrupt("bad failed-allocation kind"))?;
            m.failed.push(FailedAlloc {
                pid,
                ordinal,
                seq,
                ts_ns,
                kind,
                api: d.u16()?,
                size: d.u()?,
                result: d.u32()?,
                total_free: d.ou()?,
                largest_free: d.ou()?,
                driver_free: d.ou()?,
                nvml_used: d.ou()?,
                verdict: verdict_of(d.u()?)?,
            });
        }
        m.failed_dropped = d.count()?;
        let n = d.len(3)?;
        for _ in 0..n {
            let k = u8::try_from(d.u()?).map_err(|_| CheckpointError::Corrupt("leak kind"))?;
            let size = d.u()?;
            m.exit_leaks.insert((k, size), d.count()?);
        }
        let n = d.len(4)?;
        for i in 0..n {
            let key = match d.byte()? {
                0 => DeviceKey::Uuid(d.str()?),
                1 => DeviceKey::Ordinal(d.i16()?),
                _ => return Err(CheckpointError::Corrupt("bad device key")),
            };
            let mut dev = Device::new(DeviceId(i as u32), key.clone(), d.i16()?, cap);
            dev.info = DeviceInfo {
                uuid: d.ostr()?,
                name: d.ostr()?,
                pci_bus_id: d.ostr()?,
                total_bytes: d.ou()?,
            };
            dev.samples = DeviceSamples {
                driver_free: d.ou()?,
                driver_total: d.ou()?,
                driver_at: d.owhen()?,
                nvml_used: d.ou()?,
                nvml_total: d.ou()?,
                nvml_process_used: d.ou()?,
                nvml_at: d.owhen()?,
            };
            dev.summary = d.summary()?;
            dev.exit = d.opt(|d| d.snapshot())?;
            if m.device_index.insert(key, i as u32).is_some() {
                return Err(CheckpointError::Corrupt("duplicate device"));
            }
            m.devices.push(dev);
        }
        let n = d.len(8)?;
        for i in 0..n {
            let mut p = Process::new(d.u32()?);
            let ppid = d.ou()?;
            let nf = d.len(2)?;
            let mut fields = Vec::with_capacity(nf);
            for _ in 0..nf {
                fields.push((d.str()?, d.str()?));
            }
            p.info = ProcessInfo::from_fields(fields);
            p.info.ppid = ppid.and_then(|v| u32::try_from(v).ok());
            p.start = d.owhen()?;
            p.exit = d.opt(|d| {
                Ok(ExitInfo {
                    at: d.when()?,
                    status: d.u()?,
                    reported_live_bytes: d.u()?,
                    reported_live_count: d.u()?,
                })
            })?;
            p.incomplete = d.bool()?;
            p.lost_events = d.u()?;
            p.resyncs = d.count()?;
            let nu = d.len(2)?;
            for _ in 0..nu {
                p.dev_uuids.push((d.i16()?, d.str()?));
            }
            p.meta_ref = d.u()?;
            let np = d.len(2)?;
            for _ in 0..np {
                p.pending_dev_meta.push((d.u()?, d.i16()?));
            }
            let pending = d.opt(|d| {
                let n = d.len(RECORD_SIZE)?;
                (0..n).map(|_| d.record()).collect::<R<Vec<_>>>()
            })?;
            let begin = d.u()?;
            let window = d.opt(|d| Ok((d.u()?, d.u()?)))?;
            p.resync = ResyncState {
                pending,
                begin,
                window,
            };
            p.vmm = decode_vmm(&mut d)?;
            if m.proc_index.insert(p.pid, i as u32).is_some() {
                return Err(CheckpointError::Corrupt("duplicate process"));
            }
            m.processes.push(p);
        }
        let n = d.len(8)?;
        for i in 0..n {
            let pid = d.u32()?;
            let ordinal = d.i16()?;
            let dev = d.u32()?;
            let (seen, base, high) = (d.bool()?, d.u()?, d.u()?);
            let na = d.len(8)?;
            let regions = (0..na).map(|_| d.region()).collect::<R<Vec<_>>>()?;
            let no = d.len(8)?;
            let other = (0..no).map(|_| d.region()).collect::<R<Vec<_>>>()?;
            let summary = d.summary()?;
            let exit = d.opt(|d| d.snapshot())?;
            let &p = m
                .proc_index
                .get(&pid)
                .ok_or(CheckpointError::Corrupt("space of no process"))?;
            let capacity = m
                .devices
                .get(dev as usize)
                .ok_or(CheckpointError::Corrupt("space of no device"))?
                .info
                .total_bytes
                .unwrap_or(0);
            if regions.windows(2).any(|w| w[0].0 >= w[1].0)
                || regions.iter().any(|(_, r)| !r.kind.in_arena())
            {
                return Err(CheckpointError::Corrupt("arena regions out of order"));
            }
            let mut sp = Space::new(SpaceId(i as u32), pid, ordinal, DeviceId(dev), p, cap);
            sp.arena = Arena::from_parts(seen, base, high, capacity, regions)
                .map_err(CheckpointError::Corrupt)?;
            let mut prev_end = 0u64;
            for (k, (a, r)) in other.into_iter().enumerate() {
                if r.kind.in_arena() || (k > 0 && a < prev_end) || r.size > u64::MAX - a {
                    return Err(CheckpointError::Corrupt("managed regions overlap"));
                }
                prev_end = a + r.size.max(1);
                sp.other.insert(a, r);
            }
            sp.summary = summary;
            sp.exit = exit;
            if m.space_index.insert((pid, ordinal), i as u32).is_some() {
                return Err(CheckpointError::Corrupt("duplicate space"));
            }
            m.processes[p as usize].spaces.push((ordinal, i as u32));
            m.devices[dev as usize].spaces.push(i as u32);
            m.spaces.push(sp);
        }
        m.now = d.when()?;
        if d.at != bytes.len() {
            return Err(CheckpointError::Corrupt("trailing bytes"));
        }
        m.rebuild_derived()?;
        Ok(m)
    }

    /// Recomputes totals, device sums and arena sets from the primary state.
    fn rebuild_derived(&mut self) -> Result<(), CheckpointError> {
        let ns = self.spaces.len() as u32;
        let mut totals = vec![Totals::default(); self.spaces.len()];
        for (i, sp) in self.spaces.iter().enumerate() {
            let t = &mut totals[i];
            for r in sp.arena.regions.values().chain(sp.other.values()) {
                t.account(r.kind, r.size, true);
            }
        }
        for (pi, p) in self.processes.iter().enumerate() {
            let own = |s: u32| -> R<usize> {
                match self.spaces.get(s as usize) {
                    Some(sp) if sp.process as usize == pi && s < ns => Ok(s as usize),
                    _ => Err(CheckpointError::Corrupt("VMM object of another process")),
                }
            };
            for r in p.vmm.reservations.values() {
                totals[own(r.space)?].account(RegionKind::Reservation, r.size, true);
            }
            for m in p.vmm.mappings.values() {
                totals[own(m.space)?].account(RegionKind::Mapping, m.size, true);
            }
            for h in p.vmm.handles.values() {
                totals[own(h.space)?].account(h.kind(), h.size, true);
            }
        }
        for (i, t) in totals.into_iter().enumerate() {
            let sp = &mut self.spaces[i];
            sp.totals = t;
            let fig = sp.arena.figures();
            sp.set_key = fig.map(|f| f.largest_free);
            let dev = &mut self.devices[sp.device.0 as usize];
            dev.totals.merge(&t, true);
            if let Some(k) = sp.set_key {
                dev.arena_set.insert((k, i as u32));
            }
        }
        for dev in &mut self.devices {
            let worst = dev.arena_set.first().map(|&(_, s)| s);
            dev.worst = worst.map(SpaceId);
            dev.arena = worst
                .and_then(|s| self.spaces.get(s as usize))
                .and_then(|s| s.arena.figures());
        }
        Ok(())
    }
}

fn decode_vmm(d: &mut Dec<'_>) -> R<Vmm> {
    let mut v = Vmm::default();
    let n = d.len(8)?;
    let mut prev_end = 0u64;
    for k in 0..n {
        let a = d.u()?;
        let r = Reservation {
            size: d.u()?,
            space: d.u32()?,
            seq: d.u()?,
            ts_ns: d.u()?,
            aux: d.u()?,
            aux2: d.u()?,
            api: d.u16()?,
        };
        if r.size == 0 || r.size > u64::MAX - a || (k > 0 && a < prev_end) {
            return Err(CheckpointError::Corrupt("reservations overlap"));
        }
        prev_end = a + r.size;
        v.reservations.insert(a, r);
    }
    let n = d.len(9)?;
    let mut prev_end = 0u64;
    for k in 0..n {
        let a = d.u()?;
        let m = Mapping {
            size: d.u()?,
            handle: d.u()?,
            offset: d.u()?,
            space: d.u32()?,
            holds_ref: d.bool()?,
            seq: d.u()?,
            ts_ns: d.u()?,
            api: d.u16()?,
        };
        if m.size == 0 || m.size > u64::MAX - a || (k > 0 && a < prev_end) {
            return Err(CheckpointError::Corrupt("mappings overlap"));
        }
        prev_end = a + m.size;
        v.mappings.insert(a, m);
    }
    let n = d.len(11)?;
    let mut hs: FxMap<u64, Handle> = FxMap::default();
    for _ in 0..n {
        let k = d.u()?;
        let h = Handle {
            size: d.u()?,
            space: d.u32()?,
            released: d.bool()?,
            maps: d.count()?,
            imported: d.bool()?,
            seq: d.u()?,
            ts_ns: d.u()?,
            aux: d.u()?,
            aux2: d.u()?,
            api: d.u16()?,
        };
        if hs.insert(k, h).is_some() {
            return Err(CheckpointError::Corrupt("duplicate handle"));
        }
    }
    v.handles = hs;
    Ok(v)
}
