//! Devices: the aggregate of every space on one GPU.

use std::collections::BTreeSet;

use super::metrics::{ArenaFigures, Snapshot, Summary, Totals};
use super::region::When;
use super::series::SeriesSet;
use super::{DeviceId, SpaceId};

/// How a device is identified: by GPU uuid when a `Device` record's metadata gave one,
/// otherwise by the ordinal in the records.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DeviceKey {
    /// `GPU-…` uuid.
    Uuid(String),
    /// Device ordinal as seen by the processes (-1 = unknown).
    Ordinal(i16),
}

/// Descriptive facts about a device.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceInfo {
    /// `GPU-…` uuid.
    pub uuid: Option<String>,
    /// Marketing name.
    pub name: Option<String>,
    /// PCI bus id.
    pub pci_bus_id: Option<String>,
    /// Total bytes (`Device.size`).
    pub total_bytes: Option<u64>,
}

/// The latest driver and NVML samples of a device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceSamples {
    /// Free bytes from the last `cuMemGetInfo`.
    pub driver_free: Option<u64>,
    /// Total bytes from the last `cuMemGetInfo`.
    pub driver_total: Option<u64>,
    /// When that was.
    pub driver_at: Option<When>,
    /// Device used bytes from the last NVML sample.
    pub nvml_used: Option<u64>,
    /// Device total bytes from the last NVML sample.
    pub nvml_total: Option<u64>,
    /// The sampled process's used bytes (if NVML could tell).
    pub nvml_process_used: Option<u64>,
    /// When that was.
    pub nvml_at: Option<When>,
}

/// One device: the sum of its spaces' totals and the figures of its most constrained
/// arena.
#[derive(Clone, Debug)]
pub struct Device {
    pub(crate) id: DeviceId,
    pub(crate) key: DeviceKey,
    pub(crate) ordinal: i16,
    pub(crate) info: DeviceInfo,
    pub(crate) samples: DeviceSamples,
    pub(crate) totals: Totals,
    /// Stale while `shared_with` is set: the space's is then the device's.
    pub(crate) summary: Summary,
    /// The NVML and driver samples; the rest is stale while `shared_with` is set.
    pub(crate) series: SeriesSet,
    /// The space whose summary and recorded series are this device's: its only space,
    /// which it has had from before anything was live on the device. The device's totals
    /// and arena figures are then the space's at every event, so it observes and records
    /// none of its own.
    pub(crate) shared_with: Option<u32>,
    /// Stale while `shared_with` is set: the space's figures are then the device's.
    pub(crate) arena: Option<ArenaFigures>,
    pub(crate) worst: Option<SpaceId>,
    /// `(largest free block, space index)` of every space with an arena.
    pub(crate) arena_set: ArenaSet,
    pub(crate) spaces: Vec<u32>,
    pub(crate) exit: Option<Snapshot>,
}

impl Device {
    pub(crate) fn new(id: DeviceId, key: DeviceKey, ordinal: i16, cap: usize) -> Device {
        let uuid = match &key {
            DeviceKey::Uuid(u) => Some(u.clone()),
            DeviceKey::Ordinal(_) => None,
        };
        Device {
            id,
            key,
            ordinal,
            info: DeviceInfo {
                uuid,
                ..DeviceInfo::default()
            },
            samples: DeviceSamples::default(),
            totals: Totals::default(),
            summary: Summary::default(),
            series: SeriesSet::new(cap),
            shared_with: None,
            arena: None,
            worst: None,
            arena_set: ArenaSet::default(),
            spaces: Vec::new(),
            exit: None,
        }
    }

    /// This device's id.
    pub fn id(&self) -> DeviceId {
        self.id
    }
    /// How it is identified.
    pub fn key(&self) -> &DeviceKey {
        &self.key
    }
    /// The ordinal of the first record that named it.
    pub fn ordinal(&self) -> i16 {
        self.ordinal
    }
    /// Descriptive facts.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }
    /// The latest driver and NVML samples.
    pub fn samples(&self) -> &DeviceSamples {
        &self.samples
    }
    /// Sum of the totals of its spaces.
    pub fn totals(&self) -> &Totals {
        &self.totals
    }
    /// The space whose arena figures are the device's (see
    /// [`Model::device_arena`](super::Model::device_arena)): the most constrained one.
    pub fn arena_space(&self) -> Option<SpaceId> {
        self.worst
    }
    /// The series the device keeps itself: the NVML and driver samples always; the figures
    /// the model records after each event (live, mapped, reserved, arena) only once it has
    /// had a second space. Until then they are its only space's, hence the name: read a
    /// device's series through [`Model::device_series`](super::Model::device_series) and
    /// its summary through [`Model::device_summary`](super::Model::device_summary).
    pub fn own_series(&self) -> &SeriesSet {
        &self.series
    }
    /// The spaces on this device.
    pub fn spaces(&self) -> impl Iterator<Item = SpaceId> + '_ {
        self.spaces.iter().map(|s| SpaceId(*s))
    }
    /// Whether this is only a placeholder: a device known by ordinal alone that no
    /// process's space is on — it stood for a process's GPU until the process named it
    /// (by uuid) as a device that already had its own record, and everything moved there,
    /// or it only ever got driver/NVML samples. Lists of devices for people leave these
    /// out.
    pub fn is_placeholder(&self) -> bool {
        matches!(self.key, DeviceKey::Ordinal(_)) && self.spaces.is_empty()
    }
    /// The device's state just before the most recent exit of one of its processes.
    pub fn exit_snapshot(&self) -> Option<&Snapshot> {
        self.exit.as_ref()
    }
}

#[cfg(test)]
thread_local! {
    /// Tests turn sharing off to compare a device's own figures with the shared ones.
    static SHARING: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

/// Whether devices share their only space's figures (always, outside tests).
#[inline(always)]
fn sharing() -> bool {
    #[cfg(test)]
    return SHARING.with(|x| x.get());
    #[cfg(not(test))]
    true
}

impl super::Model {
    /// Adds space `s` to device `d`. A device's first space, joining before anything was
    /// live on the device, shares its summary and recorded series with the device (the
    /// device's totals and arena figures are then the space's at every event); the space
    /// takes over what the device recorded before, zeros only. A second space ends the
    /// sharing.
    pub(crate) fn join_device(&mut self, s: u32, d: u32) {
        let blank = Summary::default();
        let fresh = self
            .spaces
            .get(s as usize)
            .is_some_and(|sp| !sp.series.has_recorded() && sp.summary == blank);
        let Some(dev) = self.devices.get_mut(d as usize) else {
            return;
        };
        let idle = dev.spaces.is_empty()
            && dev.shared_with.is_none()
            && dev.summary == blank
            && dev.totals == Totals::default();
        if idle && fresh && sharing() {
            dev.shared_with = Some(s);
            if let Some(sp) = self.spaces.get_mut(s as usize) {
                sp.series.adopt_recorded(&dev.series);
            }
        } else {
            self.unshare(d);
        }
        if let Some(dev) = self.devices.get_mut(d as usize) {
            dev.spaces.push(s);
        }
    }

    /// Ends device `d`'s sharing with its space: it gets its own copy of the summary and
    /// recorded series, and keeps them up to date from now on.
    pub(crate) fn unshare(&mut self, d: u32) {
        let Some(dev) = self.devices.get_mut(d as usize) else {
            return;
        };
        let Some(s) = dev.shared_with.take() else {
            return;
        };
        if let Some(sp) = self.spaces.get(s as usize) {
            dev.series.adopt_recorded(&sp.series);
            dev.summary = sp.summary;
            dev.arena = sp.arena.figures();
        }
    }
}

/// An ordered set of `(largest free block, space index)`. A device usually has one space,
/// whose key changes on most events: that case is a plain slot, with no tree node freed
/// and allocated per change.
#[derive(Clone, Debug, Default)]
pub(crate) struct ArenaSet {
    /// The only member, while `many` is empty.
    one: Option<(u64, u32)>,
    /// Every member, when there are two or more.
    many: BTreeSet<(u64, u32)>,
}

impl ArenaSet {
    #[inline]
    pub(crate) fn insert(&mut self, x: (u64, u32)) {
        if !self.many.is_empty() {
            self.many.insert(x);
            return;
        }
        match self.one {
            None => self.one = Some(x),
            Some(y) if y == x => {}
            Some(y) => {
                self.one = None;
                self.many.insert(y);
                self.many.insert(x);
            }
        }
    }

    #[inline]
    pub(crate) fn remove(&mut self, x: &(u64, u32)) {
        if self.one.as_ref() == Some(x) {
            self.one = None;
        } else if self.many.remove(x) && self.many.len() == 1 {
            self.one = self.many.pop_first();
        }
    }

    /// The smallest member.
    #[inline]
    pub(crate) fn first(&self) -> Option<&(u64, u32)> {
        self.one.as_ref().or_else(|| self.many.first())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Metric, Model, Series};
    use super::*;
    use crate::format::{Api, EventKind, Record};

    #[test]
    fn a_device_shares_its_only_spaces_arena_series_until_a_second_joins() {
        let rec = |seq: u64, kind: EventKind, pid: u32, addr: u64, size: u64| Record {
            seq,
            ts_ns: seq * 10,
            addr,
            size,
            pid,
            kind: kind as u16,
            api: Api::CudaMalloc as u16,
            ..Record::default()
        };
        let mut m = Model::new();
        m.apply(&rec(0, EventKind::Device, 1, 0, 1 << 20));
        for i in 1..50 {
            m.apply(&rec(i, EventKind::Alloc, 1, 0x10000 + i * 0x1000, 0x800));
        }
        let d = m.devices()[0].id();
        let pts = |s: &Series| s.points().collect::<Vec<_>>();
        let sp = m.spaces()[0].series();
        let dv = m.device_series(d).unwrap();
        for mt in [Metric::LargestFree, Metric::TotalFree, Metric::FragRatio] {
            assert!(!sp.get(mt).is_empty());
            assert_eq!(pts(dv.get(mt)), pts(sp.get(mt)));
        }
        // A second process on the device: the device now records its own copy, which
        // continued from the shared one.
        let before = pts(m.device_series(d).unwrap().get(Metric::TotalFree));
        m.apply(&rec(50, EventKind::Alloc, 2, 0x900000, 0x100));
        m.apply(&rec(51, EventKind::Free, 1, 0x11000, 0));
        assert_eq!(m.devices()[0].shared_with, None);
        let after = pts(m.device_series(d).unwrap().get(Metric::TotalFree));
        assert_eq!(after[..before.len() - 1], before[..before.len() - 1]);
        let a = m.device_arena(m.devices()[0].id()).unwrap();
        let last = m
            .device_series(d)
            .unwrap()
            .get(Metric::TotalFree)
            .last_value();
        assert_eq!(last, Some(a.total_free as f64));
    }

    /// Random traffic of two processes on two devices, with exits and NVML samples: a
    /// device's summary and series read the same whether it shared them with its only
    /// space (from the start, then unsharing when a second process arrives) or kept its
    /// own throughout.
    #[test]
    fn sharing_a_spaces_figures_changes_nothing_a_device_reports() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..40 {
            let mut recs = Vec::new();
            let mut live: Vec<(u32, i16, u64)> = Vec::new();
            let late = round % 3; // when the second process starts: 0 never
            for seq in 0..600u64 {
                let r = next();
                let pid = if late != 0 && seq > 100 * late && r & 1 == 1 {
                    2
                } else {
                    1
                };
                let dev = (r >> 1 & 1) as i16 * i16::from(round % 2 == 1);
                let mut rec = Record {
                    seq,
                    ts_ns: seq * 7,
                    pid,
                    device: dev,
                    api: Api::CudaMalloc as u16,
                    ..Record::default()
                };
                match r >> 4 & 15 {
                    0 if seq % 50 == 0 => {
                        rec.kind = EventKind::Device as u16;
                        rec.size = 1 << 30;
                    }
                    1 => {
                        rec.kind = EventKind::NvmlSample as u16;
                        rec.size = r >> 20 & 0xffff_ffff;
                        rec.aux2 = u64::MAX;
                    }
                    2 if seq > 300 && pid == 2 => {
                        rec.kind = EventKind::ProcessExit as u16;
                        live.retain(|l| l.0 != pid);
                    }
                    3 => {
                        rec.kind = EventKind::ManagedAlloc as u16;
                        rec.addr = 0x9_0000_0000 + seq * 0x1000;
                        rec.size = 0x800;
                    }
                    4..=9 if !live.is_empty() => {
                        let (p, d, a) = live.swap_remove((r >> 8) as usize % live.len());
                        rec.kind = EventKind::Free as u16;
                        rec.pid = p;
                        rec.device = d;
                        rec.addr = a;
                    }
                    _ => {
                        rec.kind = EventKind::Alloc as u16;
                        rec.addr = 0x1_0000_0000 * u64::from(pid) + seq * 0x4000;
                        rec.size = 0x200 * (1 + (r >> 24) % 32);
                        live.push((pid, dev, rec.addr));
                    }
                }
                recs.push(rec);
            }
            let mut shared = Model::new();
            let mut own = Model::new();
            for (i, r) in recs.iter().enumerate() {
                shared.apply(r);
                SHARING.with(|s| s.set(false));
                own.apply(r);
                SHARING.with(|s| s.set(true));
                if i % 37 != 0 && i + 1 != recs.len() {
                    continue;
                }
                assert!(own.devices().iter().all(|d| d.shared_with.is_none()));
                for d in shared.devices() {
                    let id = d.id();
                    assert_eq!(
                        shared.device_summary(id),
                        own.device_summary(id),
                        "round {round} record {i}"
                    );
                    assert_eq!(
                        shared.device_arena(id),
                        own.device_arena(id),
                        "round {round} record {i}"
                    );
                    assert_eq!(shared.device_final(id), own.device_final(id));
                    assert_eq!(d.arena_space(), own.device(id).unwrap().arena_space());
                    assert_eq!(d.exit_snapshot(), own.device(id).unwrap().exit_snapshot());
                    let (a, b) = (
                        shared.device_series(id).unwrap(),
                        own.device_series(id).unwrap(),
                    );
                    for &m in Metric::ALL {
                        let (p, q) = (a.get(m), b.get(m));
                        assert!(p.points().eq(q.points()), "round {round} record {i} {m:?}");
                    }
                }
                assert_eq!(shared.checkpoint(), own.checkpoint());
            }
            if round == 0 {
                assert!(shared.devices().iter().any(|d| d.shared_with.is_some()));
            }
        }
    }

    #[test]
    fn arena_set_orders_like_a_btreeset() {
        let mut a = ArenaSet::default();
        let mut b = BTreeSet::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..5_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = (x % 7, (x >> 8) as u32 % 3);
            if x >> 20 & 1 == 0 {
                a.insert(v);
                b.insert(v);
            } else {
                a.remove(&v);
                b.remove(&v);
            }
            assert_eq!(a.first(), b.first());
        }
    }
}
