//! A naive reference of the address-space model for property tests: plain vectors and
//! linear scans, figures recomputed from scratch. It implements the same documented
//! semantics (arena definition, anomaly policies, VMM reference counting) the simplest way.
#![allow(dead_code)]

use fragprobe_shared::format::{EventKind, Record};
use fragprobe_shared::model::{frag_ratio, AnomalyKind, ANOMALY_KINDS};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum K {
    Dev,
    Pitch,
    Async,
    Managed,
    Imported,
}

impl K {
    fn arena(self) -> bool {
        matches!(self, K::Dev | K::Pitch | K::Async)
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Reg {
    pub a: u64,
    pub size: u64,
    pub seq: u64,
    pub kind: K,
}

#[derive(Clone, Debug)]
pub struct RSpace {
    pub pid: u32,
    pub ord: i16,
    pub arena: Vec<Reg>,
    pub other: Vec<Reg>,
    pub seen: bool,
    pub base: u64,
    pub high: u64,
    pub peak: u64,
}

#[derive(Clone, Copy, Debug)]
pub struct RRes {
    pub a: u64,
    pub size: u64,
    pub space: usize,
    pub seq: u64,
}

#[derive(Clone, Copy, Debug)]
pub struct RMap {
    pub a: u64,
    pub size: u64,
    pub handle: u64,
    pub space: usize,
    pub holds: bool,
    pub seq: u64,
}

#[derive(Clone, Copy, Debug)]
pub struct RHandle {
    pub h: u64,
    pub size: u64,
    pub space: usize,
    pub released: bool,
    pub maps: u64,
    pub imported: bool,
    pub seq: u64,
}

#[derive(Clone, Debug, Default)]
pub struct RProc {
    pub pid: u32,
    pub res: Vec<RRes>,
    pub maps: Vec<RMap>,
    pub handles: Vec<RHandle>,
}

/// What the tests compare per space.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fig {
    pub live: u64,
    pub live_count: u64,
    pub managed: u64,
    pub mapped: u64,
    pub mapping_count: u64,
    pub reserved: u64,
    pub imported: u64,
    /// (free blocks, largest, total free, ratio) when the arena exists.
    pub arena: Option<(u64, u64, u64, f64)>,
}

#[derive(Clone, Debug, Default)]
pub struct RefModel {
    pub spaces: Vec<RSpace>,
    pub procs: Vec<RProc>,
    /// (ordinal, total bytes)
    pub totals: Vec<(i16, u64)>,
    pub anomalies: [u64; ANOMALY_KINDS],
    pub duplicates: u64,
}

fn clamp(a: u64, size: u64) -> u64 {
    size.min(u64::MAX - a)
}

fn overlaps(a: u64, size: u64, b: u64, e: u64) -> bool {
    size > 0 && e > b && a < e && a + size > b
}

impl RefModel {
    fn an(&mut self, k: AnomalyKind) {
        self.anomalies[k as usize] += 1;
    }

    pub fn space_idx(&self, pid: u32, ord: i16) -> Option<usize> {
        self.spaces
            .iter()
            .position(|s| s.pid == pid && s.ord == ord)
    }

    fn space(&mut self, pid: u32, ord: i16) -> usize {
        self.proc_(pid);
        match self.space_idx(pid, ord) {
            Some(i) => i,
            None => {
                self.spaces.push(RSpace {
                    pid,
                    ord,
                    arena: vec![],
                    other: vec![],
                    seen: false,
                    base: 0,
                    high: 0,
                    peak: 0,
                });
                self.spaces.len() - 1
            }
        }
    }

    fn proc_(&mut self, pid: u32) -> usize {
        match self.procs.iter().position(|p| p.pid == pid) {
            Some(i) => i,
            None => {
                self.procs.push(RProc {
                    pid,
                    ..Default::default()
                });
                self.procs.len() - 1
            }
        }
    }

    pub fn capacity(&self, ord: i16) -> u64 {
        self.totals
            .iter()
            .find(|(o, _)| *o == ord)
            .map_or(0, |t| t.1)
    }

    pub fn fig(&self, s: usize) -> Fig {
        let sp = &self.spaces[s];
        let mut f = Fig {
            live: 0,
            live_count: 0,
            managed: 0,
            mapped: 0,
            mapping_count: 0,
            reserved: 0,
            imported: 0,
            arena: None,
        };
        for r in &sp.arena {
            f.live = f.live.wrapping_add(r.size);
            f.live_count += 1;
        }
        for r in &sp.other {
            match r.kind {
                K::Managed => f.managed = f.managed.wrapping_add(r.size),
                K::Imported => f.imported = f.imported.wrapping_add(r.size),
                _ => unreachable!(),
            }
        }
        if let Some(p) = self.procs.iter().find(|p| p.pid == sp.pid) {
            for h in p.handles.iter().filter(|h| h.space == s) {
                if h.imported {
                    f.imported = f.imported.wrapping_add(h.size);
                } else {
                    f.live = f.live.wrapping_add(h.size);
                    f.live_count += 1;
                }
            }
            for m in p.maps.iter().filter(|m| m.space == s) {
                f.mapped = f.mapped.wrapping_add(m.size);
                f.mapping_count += 1;
            }
            for r in p.res.iter().filter(|r| r.space == s) {
                f.reserved = f.reserved.wrapping_add(r.size);
            }
        }
        if sp.seen {
            let end = sp.base.saturating_add(self.capacity(sp.ord)).max(sp.high);
            let mut regs: Vec<(u64, u64)> = sp.arena.iter().map(|r| (r.a, r.size)).collect();
            regs.sort();
            let mut gaps = vec![];
            let mut cur = sp.base;
            for (a, size) in regs {
                assert!(a >= cur, "reference arena overlaps");
                gaps.push(a - cur);
                cur = a + size;
            }
            gaps.push(end - cur);
            let gaps: Vec<u64> = gaps.into_iter().filter(|g| *g > 0).collect();
            let largest = gaps.iter().copied().max().unwrap_or(0);
            let total: u64 = gaps.iter().sum();
            f.arena = Some((
                gaps.len() as u64,
                largest,
                total,
                frag_ratio(largest, total),
            ));
        }
        f
    }

    fn is_call(kind: EventKind) -> bool {
        (kind as u16) <= EventKind::PoolTrim as u16
    }

    pub fn apply(&mut self, r: &Record) {
        let (Some(kind), Some(_)) = (r.kind(), r.api()) else {
            return;
        };
        if Self::is_call(kind) && r.result != 0 {
            return;
        }
        use EventKind as E;
        match kind {
            E::Alloc => {
                let k = if r.aux != 0 || r.flags & 16 != 0 {
                    K::Pitch
                } else {
                    K::Dev
                };
                self.alloc(r, k)
            }
            E::AsyncAlloc => self.alloc(r, K::Async),
            E::ManagedAlloc => self.alloc(r, K::Managed),
            E::Free | E::AsyncFree => self.free(r),
            E::Import => {
                if r.aux2 == 1 {
                    if r.addr == 0 {
                        self.an(AnomalyKind::BadAllocRecord);
                    } else {
                        self.place_handle(r, true);
                    }
                } else if r.addr == 0 {
                    self.an(AnomalyKind::BadAllocRecord);
                } else {
                    self.place(r, K::Imported);
                }
            }
            E::AddressReserve => self.reserve(r),
            E::AddressFree => self.address_free(r),
            E::MemCreate => {
                if r.size == 0 {
                    self.an(AnomalyKind::BadAllocRecord);
                } else {
                    self.place_handle(r, false);
                }
            }
            E::MemRelease => self.release(r),
            E::MemMap => self.map(r),
            E::MemUnmap => {
                let size = clamp(r.addr, r.size);
                let p = self.proc_(r.pid);
                let covered = self.unmap_range(p, r.addr, r.addr + size);
                if covered < size {
                    self.an(AnomalyKind::UnmapUnmapped);
                }
            }
            E::Device => {
                if r.size > 0 {
                    match self.totals.iter_mut().find(|(o, _)| *o == r.device) {
                        Some(t) => t.1 = r.size,
                        None => self.totals.push((r.device, r.size)),
                    }
                }
                self.proc_(r.pid);
            }
            E::ProcessStart => {
                let p = self.proc_(r.pid);
                let pid = r.pid;
                let has = !self.procs[p].res.is_empty()
                    || !self.procs[p].maps.is_empty()
                    || !self.procs[p].handles.is_empty()
                    || self
                        .spaces
                        .iter()
                        .any(|s| s.pid == pid && (!s.arena.is_empty() || !s.other.is_empty()));
                if has {
                    self.an(AnomalyKind::RestartedLiveProcess);
                    self.clear(p);
                }
            }
            E::ProcessExit => {
                let p = self.proc_(r.pid);
                self.clear(p);
            }
            E::Loss => {
                self.proc_(r.pid);
            }
            _ => {}
        }
        for s in 0..self.spaces.len() {
            let live = self.fig(s).live;
            let sp = &mut self.spaces[s];
            sp.peak = sp.peak.max(live);
        }
    }

    fn clear(&mut self, p: usize) {
        let pid = self.procs[p].pid;
        for s in self.spaces.iter_mut().filter(|s| s.pid == pid) {
            s.arena.clear();
            s.other.clear();
        }
        let pr = &mut self.procs[p];
        pr.res.clear();
        pr.maps.clear();
        pr.handles.clear();
    }

    fn alloc(&mut self, r: &Record, k: K) {
        if r.addr == 0 || r.size == 0 {
            if r.addr != 0 || r.size != 0 {
                self.an(AnomalyKind::BadAllocRecord);
            }
            return;
        }
        self.place(r, k);
    }

    fn place(&mut self, r: &Record, k: K) {
        let a = r.addr;
        let size = clamp(a, r.size);
        let e = a + size;
        let s = self.space(r.pid, r.device);
        let sp = &mut self.spaces[s];
        let list = if k.arena() {
            &mut sp.arena
        } else {
            &mut sp.other
        };
        if list.iter().any(|x| x.a == a && x.seq == r.seq) {
            self.duplicates += 1;
            return;
        }
        if k.arena() {
            if !sp.seen {
                sp.seen = true;
                sp.base = a;
                sp.high = e;
            } else {
                sp.base = sp.base.min(a);
                sp.high = sp.high.max(e);
            }
        }
        let list = if k.arena() {
            &mut sp.arena
        } else {
            &mut sp.other
        };
        let hit = |x: &Reg| x.a == a || (x.a < a && x.a + x.size > a) || (x.a > a && x.a < e);
        let removed: Vec<Reg> = list.iter().copied().filter(hit).collect();
        list.retain(|x| !hit(x));
        list.push(Reg {
            a,
            size,
            seq: r.seq,
            kind: k,
        });
        if !removed.is_empty() {
            let double = removed.iter().any(|x| x.a == a);
            self.an(if double {
                AnomalyKind::DoubleAlloc
            } else {
                AnomalyKind::AllocOverlap
            });
        }
    }

    fn free(&mut self, r: &Record) {
        let a = r.addr;
        if a == 0 {
            return;
        }
        let first = self.space_idx(r.pid, r.device);
        let mut order: Vec<usize> = first.into_iter().collect();
        order.extend(
            (0..self.spaces.len()).filter(|&s| self.spaces[s].pid == r.pid && Some(s) != first),
        );
        for s in order {
            let sp = &mut self.spaces[s];
            if let Some(i) = sp.arena.iter().position(|x| x.a == a) {
                sp.arena.remove(i);
                return;
            }
            if let Some(i) = sp.other.iter().position(|x| x.a == a) {
                sp.other.remove(i);
                return;
            }
        }
        self.an(AnomalyKind::FreeUnknown);
    }

    fn unref(&mut self, p: usize, h: u64) {
        let pr = &mut self.procs[p];
        if let Some(i) = pr.handles.iter().position(|x| x.h == h) {
            let x = &mut pr.handles[i];
            x.maps = x.maps.saturating_sub(1);
            if x.maps == 0 && x.released {
                pr.handles.remove(i);
            }
        }
    }

    fn drop_res(&mut self, p: usize, a: u64) {
        let pr = &mut self.procs[p];
        let Some(i) = pr.res.iter().position(|x| x.a == a) else {
            return;
        };
        let res = pr.res.remove(i);
        let mut inside: Vec<RMap> = pr
            .maps
            .iter()
            .copied()
            .filter(|m| m.a >= res.a && m.a < res.a + res.size)
            .collect();
        inside.sort_by_key(|m| m.a);
        for m in inside {
            let pr = &mut self.procs[p];
            pr.maps.retain(|x| x.a != m.a);
            if m.holds {
                self.unref(p, m.handle);
            }
        }
    }

    fn reserve(&mut self, r: &Record) {
        let va = r.addr;
        let size = clamp(va, r.size);
        if va == 0 || size == 0 {
            self.an(AnomalyKind::BadAllocRecord);
            return;
        }
        let s = self.space(r.pid, r.device);
        let p = self.proc_(r.pid);
        if self.procs[p]
            .res
            .iter()
            .any(|x| x.a == va && x.seq == r.seq)
        {
            self.duplicates += 1;
            return;
        }
        let mut over: Vec<u64> = self.procs[p]
            .res
            .iter()
            .filter(|x| overlaps(x.a, x.size, va, va + size))
            .map(|x| x.a)
            .collect();
        over.sort();
        if !over.is_empty() {
            self.an(AnomalyKind::ReserveOverlap);
            for a in over {
                self.drop_res(p, a);
            }
        }
        self.procs[p].res.push(RRes {
            a: va,
            size,
            space: s,
            seq: r.seq,
        });
    }

    fn address_free(&mut self, r: &Record) {
        let p = self.proc_(r.pid);
        let va = r.addr;
        let Some(res) = self.procs[p].res.iter().find(|x| x.a == va).copied() else {
            self.an(AnomalyKind::AddressFreeUnknown);
            return;
        };
        if self.procs[p]
            .maps
            .iter()
            .any(|m| m.a >= va && m.a < va + res.size)
        {
            self.an(AnomalyKind::AddressFreeMapped);
        }
        self.drop_res(p, va);
    }

    fn place_handle(&mut self, r: &Record, imported: bool) {
        let s = self.space(r.pid, r.device);
        let p = self.proc_(r.pid);
        let pr = &mut self.procs[p];
        if pr.handles.iter().any(|x| x.h == r.addr && x.seq == r.seq) {
            self.duplicates += 1;
            return;
        }
        let mut maps = 0;
        if let Some(i) = pr.handles.iter().position(|x| x.h == r.addr) {
            maps = pr.handles.remove(i).maps;
            self.an(AnomalyKind::HandleReused);
        }
        self.procs[p].handles.push(RHandle {
            h: r.addr,
            size: r.size,
            space: s,
            released: false,
            maps,
            imported,
            seq: r.seq,
        });
    }

    fn release(&mut self, r: &Record) {
        let p = self.proc_(r.pid);
        let pr = &mut self.procs[p];
        match pr.handles.iter().position(|x| x.h == r.addr) {
            None => self.an(AnomalyKind::ReleaseUnknown),
            Some(i) if pr.handles[i].released => self.an(AnomalyKind::DoubleRelease),
            Some(i) => {
                pr.handles[i].released = true;
                if pr.handles[i].maps == 0 {
                    pr.handles.remove(i);
                }
            }
        }
    }

    fn unmap_range(&mut self, p: usize, u: u64, w: u64) -> u64 {
        let mut hit: Vec<RMap> = self.procs[p]
            .maps
            .iter()
            .copied()
            .filter(|m| overlaps(m.a, m.size, u, w))
            .collect();
        hit.sort_by_key(|m| m.a);
        let mut covered = 0;
        for m in hit {
            let pr = &mut self.procs[p];
            pr.maps.retain(|x| x.a != m.a);
            let me = m.a + m.size;
            covered += me.min(w) - m.a.max(u);
            let mut pieces = vec![];
            if m.a < u {
                pieces.push(RMap { size: u - m.a, ..m });
            }
            if me > w {
                pieces.push(RMap {
                    a: w,
                    size: me - w,
                    ..m
                });
            }
            for pc in pieces {
                pr.maps.push(pc);
                if m.holds {
                    if let Some(h) = pr.handles.iter_mut().find(|h| h.h == m.handle) {
                        h.maps += 1;
                    }
                }
            }
            if m.holds {
                self.unref(p, m.handle);
            }
        }
        covered
    }

    fn map(&mut self, r: &Record) {
        let va = r.addr;
        let size = clamp(va, r.size);
        if va == 0 || size == 0 {
            self.an(AnomalyKind::BadAllocRecord);
            return;
        }
        let e = va + size;
        let p = self.proc_(r.pid);
        if self.procs[p]
            .maps
            .iter()
            .any(|m| m.a == va && m.seq == r.seq)
        {
            self.duplicates += 1;
            return;
        }
        if self.procs[p]
            .maps
            .iter()
            .any(|m| overlaps(m.a, m.size, va, e))
        {
            self.an(AnomalyKind::MapOverMapped);
            self.unmap_range(p, va, e);
        }
        let res = self.procs[p]
            .res
            .iter()
            .find(|x| x.a <= va && va < x.a + x.size)
            .copied();
        let space = match res {
            Some(x) => x.space,
            None => self.space(r.pid, r.device),
        };
        if res.is_none_or(|x| e > x.a + x.size) {
            self.an(AnomalyKind::MapOutsideReservation);
        }
        let found = self.procs[p]
            .handles
            .iter_mut()
            .find(|h| h.h == r.aux)
            .map(|h| {
                h.maps += 1;
                h.released
            });
        let holds = match found {
            Some(released) => {
                if released {
                    self.an(AnomalyKind::MapReleasedHandle);
                }
                true
            }
            None => {
                self.an(AnomalyKind::MapUnknownHandle);
                false
            }
        };
        self.procs[p].maps.push(RMap {
            a: va,
            size,
            handle: r.aux,
            space,
            holds,
            seq: r.seq,
        });
    }
}
