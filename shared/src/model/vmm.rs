//! The VMM objects of a process: reservations, mappings inside them, physical handles.
//!
//! They are process-wide (a handle created for device 1 may be mapped at an address the
//! record attributes to another device), and each is attributed to one space for the
//! totals: a reservation to the space of its `AddressReserve`, a handle to the space of its
//! `MemCreate` (the device of `prop->location.id`), a mapping to the space of the
//! reservation holding its start (or of its own record when outside any).
//!
//! A handle's physical memory is live from `MemCreate` until it is both released and
//! unmapped everywhere: each mapping of a live handle holds a reference.

use std::collections::BTreeMap;

use crate::format::{Flags, Record};

use super::hash::FxMap;
use super::region::{clamp_size, RegionKind};
use super::{AnomalyKind, Model};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reservation {
    pub size: u64,
    pub space: u32,
    pub seq: u64,
    pub ts_ns: u64,
    pub aux: u64,
    pub aux2: u64,
    pub api: u16,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mapping {
    pub size: u64,
    pub handle: u64,
    pub offset: u64,
    pub space: u32,
    /// Whether this mapping holds a reference on a live handle.
    pub holds_ref: bool,
    pub seq: u64,
    pub ts_ns: u64,
    pub api: u16,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Handle {
    pub size: u64,
    pub space: u32,
    pub released: bool,
    /// Mappings holding a reference.
    pub maps: u64,
    /// An imported handle: not new memory.
    pub imported: bool,
    pub seq: u64,
    pub ts_ns: u64,
    pub aux: u64,
    pub aux2: u64,
    pub api: u16,
}

impl Handle {
    pub(crate) fn kind(&self) -> RegionKind {
        if self.imported {
            RegionKind::Imported
        } else {
            RegionKind::Handle
        }
    }
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Vmm {
    pub reservations: BTreeMap<u64, Reservation>,
    pub mappings: BTreeMap<u64, Mapping>,
    pub handles: FxMap<u64, Handle>,
}

impl Vmm {
    pub(crate) fn is_empty(&self) -> bool {
        self.reservations.is_empty() && self.mappings.is_empty() && self.handles.is_empty()
    }
}

/// Starts of the entries of `map` overlapping `[a, e)` (none when the range is empty).
pub(crate) fn overlapping<T>(
    map: &BTreeMap<u64, T>,
    a: u64,
    e: u64,
    size: impl Fn(&T) -> u64,
) -> Vec<u64> {
    let mut v = Vec::new();
    if e <= a {
        return v;
    }
    if let Some((&ps, x)) = map.range(..a).next_back() {
        if ps + size(x) > a {
            v.push(ps);
        }
    }
    v.extend(map.range(a..e).map(|(k, _)| *k));
    v
}

impl Model {
    /// Runs `f` with the process's VMM state taken out (so `f` can also update totals).
    fn with_vmm<R>(&mut self, p: u32, f: impl FnOnce(&mut Model, &mut Vmm) -> R) -> R {
        let mut v = std::mem::take(&mut self.processes[p as usize].vmm);
        let r = f(self, &mut v);
        self.processes[p as usize].vmm = v;
        r
    }

    /// A successful `AddressReserve` (also used by resyncs).
    pub(super) fn on_reserve(&mut self, rec: &Record) {
        let va = rec.addr;
        let size = clamp_size(va, rec.size);
        if va == 0 || size == 0 {
            self.anomaly(AnomalyKind::BadAllocRecord, va);
            return;
        }
        let s = self.space_of(rec.pid, rec.device);
        let p = self.spaces[s as usize].process;
        self.with_vmm(p, |m, v| {
            if v.reservations.get(&va).is_some_and(|r| r.seq == rec.seq) {
                m.counts.duplicates += 1;
                return;
            }
            let starts = overlapping(&v.reservations, va, va + size, |r| r.size);
            if !starts.is_empty() {
                m.anomaly(AnomalyKind::ReserveOverlap, va);
                for st in starts {
                    m.drop_reservation(v, st);
                }
            }
            v.reservations.insert(
                va,
                Reservation {
                    size,
                    space: s,
                    seq: rec.seq,
                    ts_ns: rec.ts_ns,
                    aux: rec.aux,
                    aux2: rec.aux2,
                    api: rec.api,
                },
            );
            m.account(s, RegionKind::Reservation, size, true);
        });
    }

    /// Removes a reservation and every mapping starting inside it.
    fn drop_reservation(&mut self, v: &mut Vmm, start: u64) {
        let Some(r) = v.reservations.remove(&start) else {
            return;
        };
        self.account(r.space, RegionKind::Reservation, r.size, false);
        let maps: Vec<u64> = v
            .mappings
            .range(start..start + r.size)
            .map(|(k, _)| *k)
            .collect();
        for ms in maps {
            self.remove_mapping(v, ms);
        }
    }

    fn remove_mapping(&mut self, v: &mut Vmm, start: u64) {
        if let Some(mp) = v.mappings.remove(&start) {
            self.account(mp.space, RegionKind::Mapping, mp.size, false);
            if mp.holds_ref {
                self.unref(v, mp.handle);
            }
        }
    }

    /// Drops one mapping reference of a handle; frees it if it is released and unmapped.
    fn unref(&mut self, v: &mut Vmm, h: u64) {
        let Some(hd) = v.handles.get_mut(&h) else {
            return;
        };
        hd.maps = hd.maps.saturating_sub(1);
        if hd.maps == 0 && hd.released {
            let hd = *hd;
            v.handles.remove(&h);
            self.account(hd.space, hd.kind(), hd.size, false);
            // Released earlier while mapped: the memory goes back now, at the last unmap.
            self.counts.frees += 1;
        }
    }

    /// A successful `AddressFree`.
    pub(super) fn on_address_free(&mut self, rec: &Record) {
        let va = rec.addr;
        let p = self.proc_of(rec.pid);
        self.with_vmm(p, |m, v| {
            let Some(r) = v.reservations.get(&va) else {
                m.unknown_free(AnomalyKind::AddressFreeUnknown, va);
                return;
            };
            if v.mappings.range(va..va + r.size).next().is_some() {
                m.anomaly(AnomalyKind::AddressFreeMapped, va);
            }
            m.drop_reservation(v, va);
        });
    }

    /// A successful `MemCreate`.
    pub(super) fn on_create(&mut self, rec: &Record) {
        if rec.size == 0 {
            self.counts.ok_allocs += 1;
            self.anomaly(AnomalyKind::BadAllocRecord, rec.addr);
            return;
        }
        if self.place_handle(rec, false) {
            self.counts.ok_allocs += 1;
        }
    }

    /// An imported physical handle (`Import` with `aux2 = 1`).
    pub(super) fn import_handle(&mut self, rec: &Record) {
        if rec.addr == 0 {
            self.anomaly(AnomalyKind::BadAllocRecord, 0);
            return;
        }
        self.place_handle(rec, true);
    }

    /// Adds a handle from `rec` (also used by resyncs). `false`: a duplicate.
    pub(super) fn place_handle(&mut self, rec: &Record, imported: bool) -> bool {
        let h = rec.addr;
        let s = self.space_of(rec.pid, rec.device);
        let p = self.spaces[s as usize].process;
        self.with_vmm(p, |m, v| {
            if v.handles.get(&h).is_some_and(|x| x.seq == rec.seq) {
                m.counts.duplicates += 1;
                return false;
            }
            let maps = match v.handles.remove(&h) {
                Some(old) => {
                    m.anomaly(AnomalyKind::HandleReused, h);
                    m.account(old.space, old.kind(), old.size, false);
                    old.maps
                }
                None => 0,
            };
            let hd = Handle {
                size: rec.size,
                space: s,
                released: false,
                maps,
                imported,
                seq: rec.seq,
                ts_ns: rec.ts_ns,
                aux: rec.aux,
                aux2: rec.aux2,
                api: rec.api,
            };
            v.handles.insert(h, hd);
            m.account(s, hd.kind(), hd.size, true);
            true
        })
    }

    /// A successful `MemRelease`.
    pub(super) fn on_release(&mut self, rec: &Record) {
        self.counts.releases += 1;
        self.release_handle(rec.pid, rec.addr, rec.flags & Flags::AT_EXIT != 0);
    }

    pub(super) fn release_handle(&mut self, pid: u32, h: u64, at_exit: bool) {
        let p = self.proc_of(pid);
        self.with_vmm(p, |m, v| match v.handles.get_mut(&h) {
            None => m.unknown_free(AnomalyKind::ReleaseUnknown, h),
            Some(hd) if hd.released => m.anomaly(AnomalyKind::DoubleRelease, h),
            Some(hd) => {
                hd.released = true;
                if hd.maps == 0 {
                    let hd = *hd;
                    v.handles.remove(&h);
                    m.account(hd.space, hd.kind(), hd.size, false);
                    m.counts.frees += 1;
                    if at_exit && !hd.imported {
                        m.leak(RegionKind::Handle, hd.size);
                    }
                }
            }
        });
    }

    /// A successful `MemMap` (also used by resyncs).
    pub(super) fn on_map(&mut self, rec: &Record) {
        let va = rec.addr;
        let size = clamp_size(va, rec.size);
        let h = rec.aux;
        if va == 0 || size == 0 {
            self.anomaly(AnomalyKind::BadAllocRecord, va);
            return;
        }
        let p = self.proc_of(rec.pid);
        self.with_vmm(p, |m, v| {
            if v.mappings.get(&va).is_some_and(|x| x.seq == rec.seq) {
                m.counts.duplicates += 1;
                return;
            }
            let e = va + size;
            if !overlapping(&v.mappings, va, e, |x| x.size).is_empty() {
                m.anomaly(AnomalyKind::MapOverMapped, va);
                m.unmap_range(v, va, e);
            }
            let res = v
                .reservations
                .range(..=va)
                .next_back()
                .filter(|(s, r)| **s + r.size > va)
                .map(|(s, r)| (*s + r.size, r.space));
            let space = match res {
                Some((_, sp)) => sp,
                None => m.space_of(rec.pid, rec.device),
            };
            if res.is_none_or(|(end, _)| e > end) {
                m.anomaly(AnomalyKind::MapOutsideReservation, va);
            }
            let holds_ref = match v.handles.get_mut(&h) {
                Some(hd) => {
                    if hd.released {
                        m.anomaly(AnomalyKind::MapReleasedHandle, h);
                    }
                    hd.maps += 1;
                    true
                }
                None => {
                    m.anomaly(AnomalyKind::MapUnknownHandle, h);
                    false
                }
            };
            v.mappings.insert(
                va,
                Mapping {
                    size,
                    handle: h,
                    offset: rec.aux2,
                    space,
                    holds_ref,
                    seq: rec.seq,
                    ts_ns: rec.ts_ns,
                    api: rec.api,
                },
            );
            m.account(space, RegionKind::Mapping, size, true);
        });
    }

    /// Unmaps `[u, w)`, cutting mappings that stick out; returns the bytes that were mapped.
    fn unmap_range(&mut self, v: &mut Vmm, u: u64, w: u64) -> u64 {
        let mut covered = 0;
        for st in overlapping(&v.mappings, u, w, |x| x.size) {
            let Some(mp) = v.mappings.remove(&st) else {
                continue;
            };
            let me = st + mp.size;
            self.account(mp.space, RegionKind::Mapping, mp.size, false);
            covered += me.min(w) - st.max(u);
            let mut pieces = [(0u64, 0u64, 0u64); 2];
            let mut n = 0;
            if st < u {
                pieces[n] = (st, u - st, mp.offset);
                n += 1;
            }
            if me > w {
                pieces[n] = (w, me - w, mp.offset.wrapping_add(w - st));
                n += 1;
            }
            for &(k, size, offset) in &pieces[..n] {
                v.mappings.insert(k, Mapping { size, offset, ..mp });
                self.account(mp.space, RegionKind::Mapping, size, true);
                if mp.holds_ref {
                    if let Some(hd) = v.handles.get_mut(&mp.handle) {
                        hd.maps += 1;
                    }
                }
            }
            if mp.holds_ref {
                self.unref(v, mp.handle);
            }
        }
        covered
    }

    /// A successful `MemUnmap`.
    pub(super) fn on_unmap(&mut self, rec: &Record) {
        let va = rec.addr;
        let size = clamp_size(va, rec.size);
        let p = self.proc_of(rec.pid);
        let covered = self.with_vmm(p, |m, v| m.unmap_range(v, va, va + size));
        if covered < size {
            self.unknown_free(AnomalyKind::UnmapUnmapped, va);
        }
    }
}
