//! Moving whole allocator states between the simulator and the snapshot model: start a
//! simulation from a snapshot's segments, and list the simulator's segments as a snapshot
//! would.

use std::collections::BTreeMap;

use super::allocator::{Allocator, ExpSeg, SegMeta, SimError};
use super::config::Config;
use super::pools::{Block, IntMap, NIL};
use super::rounding::SMALL_BUFFER;
use crate::torch::snapshot::{self, BlockState, PoolKind, Segment};

impl Allocator {
    /// An allocator holding exactly `segments` (one device's), as if it had produced them.
    pub fn from_segments(cfg: Config, segments: &[Segment]) -> Result<Allocator, SimError> {
        let mut a = Allocator::new(cfg);
        let mut groups: BTreeMap<(usize, u64), Vec<&Segment>> = BTreeMap::new();
        for s in segments {
            let pool = a.pool_slot(s.pool_id) + (s.pool == PoolKind::Small) as usize;
            if s.is_expandable {
                groups.entry((pool, s.stream)).or_default().push(s);
            } else {
                a.load_plain(pool, s)?;
            }
        }
        for ((pool, stream), mut ranges) in groups {
            ranges.sort_by_key(|s| s.address);
            a.load_expandable(pool, stream, &ranges)?;
        }
        // Peaks start from the loaded state.
        let s = &mut a.stats;
        s.reserved_peak = s.reserved;
        s.allocated_at_reserved_peak = s.allocated;
        s.allocated_peak = s.allocated;
        s.active_peak = s.active;
        s.requested_peak = s.requested;
        s.inactive_split_peak = s.inactive_split;
        Ok(a)
    }

    fn push_blocks(
        &mut self,
        pool: usize,
        stream: u64,
        exp: u32,
        s: &Segment,
        prev: u32,
    ) -> (u32, u32) {
        let mut first = NIL;
        let mut last = prev;
        let split = s.blocks.len() > 1;
        for b in &s.blocks {
            let id = self.arena.add(Block {
                addr: b.address,
                size: b.size,
                requested: if b.state.is_active() {
                    b.requested_size
                } else {
                    0
                },
                stream,
                prev: last,
                next: NIL,
                pool: pool as u16,
                allocated: b.state == BlockState::ActiveAllocated,
                pending: b.state == BlockState::ActivePendingFree,
                mapped: true,
                exp,
                gc_base: 0,
            });
            if last != NIL {
                self.arena.get_mut(last).next = id;
            }
            if first == NIL {
                first = id;
            }
            last = id;
            let st = &mut self.stats;
            match b.state {
                BlockState::ActiveAllocated => {
                    st.allocated += b.size;
                    st.active += b.size;
                    st.requested += b.requested_size;
                    self.live.insert(b.address, id);
                }
                BlockState::ActivePendingFree => {
                    st.active += b.size;
                    st.requested += b.requested_size;
                    self.live.insert(b.address, id);
                }
                BlockState::Inactive => {
                    if split && exp == NIL {
                        st.inactive_split += b.size;
                    }
                    self.insert_free(id);
                }
            }
        }
        let s = &mut self.stats;
        s.allocated_peak = s.allocated_peak.max(s.allocated);
        s.active_peak = s.active_peak.max(s.active);
        s.requested_peak = s.requested_peak.max(s.requested);
        s.inactive_split_peak = s.inactive_split_peak.max(s.inactive_split);
        (first, last)
    }

    fn check_tiling(s: &Segment) -> Result<(), SimError> {
        let mut at = s.address;
        for b in &s.blocks {
            if b.address != at || b.size == 0 {
                return Err(SimError(format!(
                    "segment {:#x}: blocks do not tile it (block at {:#x}, expected {at:#x})",
                    s.address, b.address
                )));
            }
            at += b.size;
        }
        if at != s.end() {
            return Err(SimError(format!(
                "segment {:#x}: blocks cover {} of {} bytes",
                s.address,
                at - s.address,
                s.total_size
            )));
        }
        Ok(())
    }

    fn load_plain(&mut self, pool: usize, s: &Segment) -> Result<(), SimError> {
        Self::check_tiling(s)?;
        if self.segs.contains_key(&s.address) {
            return Err(SimError(format!("segment {:#x} appears twice", s.address)));
        }
        self.segs.insert(
            s.address,
            SegMeta {
                size: s.total_size,
                pool: pool as u16,
                stream: s.stream,
            },
        );
        self.add_reserved(s.total_size);
        self.stats.segments += 1;
        self.push_blocks(pool, s.stream, NIL, s, NIL);
        Ok(())
    }

    fn load_expandable(
        &mut self,
        pool: usize,
        stream: u64,
        ranges: &[&Segment],
    ) -> Result<(), SimError> {
        let small = self.pools[pool].small;
        let page = if small {
            SMALL_BUFFER
        } else {
            self.cfg.large_segment_size
        };
        let base = ranges.first().map_or(0, |s| s.address);
        let end = ranges.iter().map(|s| s.end()).max().unwrap_or(base);
        let va = self
            .reservation_size(page)
            .max((end - base).div_ceil(page) * page);
        let exp = self.exps.len() as u32;
        let mut mapped = vec![false; (va / page) as usize];
        let mut cursor = base;
        let mut last = NIL;
        let unmapped = |a: &mut Allocator, addr: u64, size: u64, prev: u32| -> u32 {
            let id = a.arena.add(Block {
                addr,
                size,
                requested: 0,
                stream,
                prev,
                next: NIL,
                pool: pool as u16,
                allocated: false,
                pending: false,
                mapped: false,
                exp,
                gc_base: 0,
            });
            if prev != NIL {
                a.arena.get_mut(prev).next = id;
            }
            a.pools[pool].insert_unmapped(stream, addr, id);
            id
        };
        for s in ranges {
            Self::check_tiling(s)?;
            if !(s.address - base).is_multiple_of(page) || !s.total_size.is_multiple_of(page) {
                return Err(SimError(format!(
                    "expandable range {:#x}+{} is not aligned to {page}-byte pages",
                    s.address, s.total_size
                )));
            }
            if s.address < cursor {
                return Err(SimError(format!(
                    "expandable ranges overlap at {:#x}",
                    s.address
                )));
            }
            if s.address > cursor {
                last = unmapped(self, cursor, s.address - cursor, last);
            }
            for p in (s.address - base) / page..(s.end() - base) / page {
                mapped[p as usize] = true;
            }
            self.add_reserved(s.total_size);
            let (_, l) = self.push_blocks(pool, stream, exp, s, last);
            last = l;
            cursor = s.end();
        }
        if cursor < base + va {
            unmapped(self, cursor, base + va - cursor, last);
        }
        self.exps.push(Some(ExpSeg {
            base,
            size: va,
            page,
            stream,
            pool: pool as u16,
            mapped,
        }));
        Ok(())
    }

    /// The allocator's state as snapshot segments of `device`, sorted by address.
    pub fn segments(&self, device: i32) -> Vec<Segment> {
        let by_addr: IntMap<u64, u32> = self.arena.iter().map(|(id, b)| (b.addr, id)).collect();
        let mut out = Vec::new();
        let block_of = |b: &Block| snapshot::Block {
            address: b.addr,
            size: b.size,
            requested_size: b.requested,
            state: if b.allocated {
                BlockState::ActiveAllocated
            } else if b.pending {
                BlockState::ActivePendingFree
            } else {
                BlockState::Inactive
            },
            stack: 0,
        };
        let seg_of = |pool: u16, stream: u64, expandable: bool, addr: u64| {
            let p = &self.pools[pool as usize];
            Segment {
                device,
                address: addr,
                total_size: 0,
                stream,
                pool: if p.small {
                    PoolKind::Small
                } else {
                    PoolKind::Large
                },
                pool_id: p.id,
                is_expandable: expandable,
                stack: 0,
                blocks: Vec::new(),
            }
        };
        let mut segs: Vec<(u64, SegMeta)> = self.segs.iter().map(|(&a, &m)| (a, m)).collect();
        segs.sort_unstable_by_key(|&(a, _)| a);
        for (addr, meta) in segs {
            let mut seg = seg_of(meta.pool, meta.stream, false, addr);
            let mut id = by_addr.get(&addr).copied().unwrap_or(NIL);
            while id != NIL {
                let b = self.arena.get(id);
                seg.blocks.push(block_of(b));
                seg.total_size += b.size;
                id = b.next;
            }
            out.push(seg);
        }
        for e in self.exps.iter().flatten() {
            let mut id = by_addr.get(&e.base).copied().unwrap_or(NIL);
            let mut cur: Option<Segment> = None;
            while id != NIL {
                let b = self.arena.get(id);
                if b.mapped {
                    let seg = cur.get_or_insert_with(|| seg_of(e.pool, e.stream, true, b.addr));
                    seg.blocks.push(block_of(b));
                    seg.total_size += b.size;
                } else if let Some(seg) = cur.take() {
                    out.push(seg);
                }
                id = b.next;
            }
            if let Some(seg) = cur.take() {
                out.push(seg);
            }
        }
        out.sort_by_key(|s| s.address);
        out
    }
}
