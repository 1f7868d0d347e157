//! Queries for drawing and reports: regions and gaps in an address range, hover lookup,
//! level-of-detail cells, leaks.

use super::region::{Region, RegionKind};
use super::{Model, SpaceId};

/// A live object as seen by a view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionView {
    /// What it is.
    pub kind: RegionKind,
    /// Start address (for handles: the handle value).
    pub addr: u64,
    /// Bytes.
    pub size: u64,
    /// Seq of the event that created it.
    pub seq: u64,
    /// Its timestamp.
    pub ts_ns: u64,
    /// Kind-dependent: pitch, stream, attach flags, alignment; for mappings the handle.
    pub aux: u64,
    /// Kind-dependent: pool, requested address; for mappings the offset in the handle.
    pub aux2: u64,
    /// The API that created it (raw value).
    pub api: u16,
    /// The space it is attributed to.
    pub space: SpaceId,
    /// Reservations: bytes mapped inside. Handles: mappings holding it. Otherwise 0.
    pub detail: u64,
}

/// A free block of an arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gap {
    /// Start address.
    pub addr: u64,
    /// Bytes.
    pub size: u64,
}

/// One cell of a level-of-detail view: what lies in `[lo, hi)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LodCell {
    /// Start of the cell.
    pub lo: u64,
    /// End of the cell.
    pub hi: u64,
    /// Bytes covered per [`RegionKind`] (index = kind value − 1), clipped to the cell.
    pub bytes: [u64; 8],
    /// Regions overlapping the cell.
    pub regions: u32,
}

/// Objects of one kind and size live at process exit (or still live at the end).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeakGroup {
    /// What they are.
    pub kind: RegionKind,
    /// Bytes each.
    pub size: u64,
    /// How many.
    pub count: u64,
    /// `true`: live when their process exited; `false`: still live at the end of the trace
    /// in a process that did not exit (yet).
    pub at_exit: bool,
}

impl LeakGroup {
    /// `size × count` (saturating).
    pub fn bytes(&self) -> u64 {
        self.size.saturating_mul(self.count)
    }
}

fn view(kind: RegionKind, addr: u64, r: &Region, space: SpaceId) -> RegionView {
    RegionView {
        kind,
        addr,
        size: r.size,
        seq: r.seq,
        ts_ns: r.ts_ns,
        aux: r.aux,
        aux2: r.aux2,
        api: r.api,
        space,
        detail: 0,
    }
}

impl Model {
    /// Live regions of a space overlapping `[lo, hi)`, sorted by address (reservations
    /// before the mappings inside them). Includes arena, managed and imported regions,
    /// and the space's reservations and mappings. Cost O(log n + regions in range).
    pub fn regions_in(&self, space: SpaceId, lo: u64, hi: u64) -> Vec<RegionView> {
        let mut out = Vec::new();
        let Some(sp) = self.space(space) else {
            return out;
        };
        if hi <= lo {
            return out;
        }
        let tree = &sp.arena.regions;
        if let Some((a, r, _)) = tree.below(lo) {
            if a + r.size > lo {
                out.push(view(r.kind, a, r, space));
            }
        }
        out.extend(
            tree.from(lo)
                .take_while(|e| e.0 < hi)
                .map(|(a, r, _)| view(r.kind, a, r, space)),
        );
        if let Some((&a, r)) = sp.other.range(..lo).next_back() {
            if a + r.size > lo {
                out.push(view(r.kind, a, r, space));
            }
        }
        out.extend(
            sp.other
                .range(lo..hi)
                .map(|(&a, r)| view(r.kind, a, r, space)),
        );
        if let Some(pr) = self.processes.get(sp.process as usize) {
            let v = &pr.vmm;
            let first = v
                .reservations
                .range(..lo)
                .next_back()
                .filter(|(a, r)| **a + r.size > lo);
            for (&a, r) in first.into_iter().chain(v.reservations.range(lo..hi)) {
                if r.space != space.0 {
                    continue;
                }
                let mapped = v
                    .mappings
                    .range(a..a + r.size)
                    .map(|(_, m)| m.size)
                    .sum::<u64>();
                out.push(RegionView {
                    kind: RegionKind::Reservation,
                    addr: a,
                    size: r.size,
                    seq: r.seq,
                    ts_ns: r.ts_ns,
                    aux: r.aux,
                    aux2: r.aux2,
                    api: r.api,
                    space,
                    detail: mapped,
                });
            }
            let first = v
                .mappings
                .range(..lo)
                .next_back()
                .filter(|(a, m)| **a + m.size > lo);
            for (&a, m) in first.into_iter().chain(v.mappings.range(lo..hi)) {
                if m.space != space.0 {
                    continue;
                }
                out.push(RegionView {
                    kind: RegionKind::Mapping,
                    addr: a,
                    size: m.size,
                    seq: m.seq,
                    ts_ns: m.ts_ns,
                    aux: m.handle,
                    aux2: m.offset,
                    api: m.api,
                    space,
                    detail: 0,
                });
            }
        }
        out.sort_by_key(|r| (r.addr, r.kind != RegionKind::Reservation, r.kind));
        out
    }

    /// Live physical handles attributed to a space (they have no address), by handle.
    pub fn handles(&self, space: SpaceId) -> Vec<RegionView> {
        let Some(sp) = self.space(space) else {
            return Vec::new();
        };
        let Some(pr) = self.processes.get(sp.process as usize) else {
            return Vec::new();
        };
        let mut v: Vec<RegionView> = pr
            .vmm
            .handles
            .iter()
            .filter(|(_, h)| h.space == space.0)
            .map(|(&k, h)| RegionView {
                kind: h.kind(),
                addr: k,
                size: h.size,
                seq: h.seq,
                ts_ns: h.ts_ns,
                aux: h.aux,
                aux2: h.aux2,
                api: h.api,
                space,
                detail: h.maps,
            })
            .collect();
        v.sort_by_key(|r| r.addr);
        v
    }

    /// Free blocks of a space's arena overlapping `[lo, hi)` (not clipped), by address.
    pub fn gaps_in(&self, space: SpaceId, lo: u64, hi: u64) -> Vec<Gap> {
        let mut out = Vec::new();
        let Some(sp) = self.space(space) else {
            return out;
        };
        let Some(f) = sp.arena.figures() else {
            return out;
        };
        if hi <= lo {
            return out;
        }
        let overlaps = |g: &Gap| g.size > 0 && g.addr < hi && g.addr + g.size > lo;
        let head = Gap {
            addr: f.base,
            size: sp.arena.head(),
        };
        if overlaps(&head) {
            out.push(head);
        }
        let regions = &sp.arena.regions;
        let before = regions.below(lo);
        for (a, r, gap) in before
            .into_iter()
            .chain(regions.from(lo).take_while(|e| e.0 < hi))
        {
            let g = Gap {
                addr: a + r.size,
                size: gap,
            };
            if overlaps(&g) {
                out.push(g);
            }
        }
        out
    }

    /// The live object of a space containing `addr` (for hovering): a pointer region, else
    /// a mapping, else a reservation.
    pub fn region_at(&self, space: SpaceId, addr: u64) -> Option<RegionView> {
        let sp = self.space(space)?;
        if let Some((a, r, _)) = sp.arena.regions.at_or_below(addr) {
            if addr < a + r.size {
                return Some(view(r.kind, a, r, space));
            }
        }
        if let Some((&a, r)) = sp.other.range(..=addr).next_back() {
            if addr < a + r.size {
                return Some(view(r.kind, a, r, space));
            }
        }
        let hit = self.regions_in(space, addr, addr.saturating_add(1));
        hit.iter()
            .find(|r| r.kind == RegionKind::Mapping)
            .or_else(|| hit.iter().find(|r| r.kind == RegionKind::Reservation))
            .copied()
    }

    /// Splits `[lo, hi)` into `cells` equal cells and sums what lies in each, for drawing
    /// a zoomed-out view. Cost O(regions in range + cells).
    pub fn regions_lod(&self, space: SpaceId, lo: u64, hi: u64, cells: usize) -> Vec<LodCell> {
        if hi <= lo || cells == 0 {
            return Vec::new();
        }
        let width = (hi - lo).div_ceil(cells as u64).max(1);
        let n = (hi - lo).div_ceil(width) as usize;
        let mut out: Vec<LodCell> = (0..n)
            .map(|i| {
                let c = lo + i as u64 * width;
                LodCell {
                    lo: c,
                    hi: c.saturating_add(width).min(hi),
                    ..LodCell::default()
                }
            })
            .collect();
        for r in self.regions_in(space, lo, hi) {
            let a = r.addr.max(lo);
            let e = r.addr.saturating_add(r.size).min(hi);
            if e <= a {
                continue;
            }
            let first = ((a - lo) / width) as usize;
            let last = ((e - 1 - lo) / width) as usize;
            for c in out.iter_mut().take(last + 1).skip(first) {
                let b = e.min(c.hi) - a.max(c.lo);
                let k = (r.kind as usize).saturating_sub(1).min(7);
                c.bytes[k] = c.bytes[k].saturating_add(b);
                c.regions = c.regions.saturating_add(1);
            }
        }
        out
    }

    /// Objects live at process exit (`at_exit`), and objects still live at the end in
    /// processes that have not exited, grouped by kind and size, largest total first.
    /// Imports are not counted.
    pub fn leaks(&self) -> Vec<LeakGroup> {
        use std::collections::BTreeMap;
        let mut live: BTreeMap<(u8, u64), u64> = BTreeMap::new();
        for pr in self.processes.iter().filter(|p| p.exit.is_none()) {
            for (_, s) in &pr.spaces {
                let sp = &self.spaces[*s as usize];
                for r in sp.arena.regions.values().chain(sp.other.values()) {
                    if r.kind != RegionKind::Imported {
                        *live.entry((r.kind as u8, r.size)).or_insert(0) += 1;
                    }
                }
            }
            for h in pr.vmm.handles.values().filter(|h| !h.imported) {
                *live.entry((RegionKind::Handle as u8, h.size)).or_insert(0) += 1;
            }
            for r in pr.vmm.reservations.values() {
                *live
                    .entry((RegionKind::Reservation as u8, r.size))
                    .or_insert(0) += 1;
            }
        }
        let mut out: Vec<LeakGroup> = self
            .exit_leaks
            .iter()
            .map(|(k, c)| (k, c, true))
            .chain(live.iter().map(|(k, c)| (k, c, false)))
            .filter_map(|(&(k, size), &count, at_exit)| {
                Some(LeakGroup {
                    kind: RegionKind::from_u8(k)?,
                    size,
                    count,
                    at_exit,
                })
            })
            .collect();
        out.sort_by(|a, b| {
            b.bytes()
                .cmp(&a.bytes())
                .then(a.kind.cmp(&b.kind))
                .then(a.size.cmp(&b.size))
        });
        out
    }
}
