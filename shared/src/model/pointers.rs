//! Pointer allocations (plain, pitch, async, managed, imported), frees and failed calls.

use crate::format::{EventKind, Flags, Record};

use super::arena::Insert;
use super::region::{clamp_size, Region, RegionKind};
use super::space::insert_other;
use super::verdict::{verdict, FailedAlloc};
use super::{AnomalyKind, Model, FAILED_KEPT};

impl Model {
    /// A successful `Alloc`, `ManagedAlloc` or `AsyncAlloc`.
    pub(super) fn on_ptr_alloc(&mut self, rec: &Record, kind: RegionKind) {
        if rec.addr == 0 || rec.size == 0 {
            self.counts.ok_allocs += 1;
            // cudaMalloc(0) legally returns NULL; anything else is a bad record.
            if rec.addr != 0 || rec.size != 0 {
                self.anomaly(AnomalyKind::BadAllocRecord, rec.addr);
            }
            return;
        }
        if self.place_ptr(rec, kind) {
            self.counts.ok_allocs += 1;
        }
    }

    /// Adds a pointer region from `rec` (also used by resyncs). `false`: a duplicate.
    pub(super) fn place_ptr(&mut self, rec: &Record, kind: RegionKind) -> bool {
        let a = rec.addr;
        let size = clamp_size(a, rec.size);
        let s = self.space_of(rec.pid, rec.device);
        let r = Region {
            size,
            seq: rec.seq,
            ts_ns: rec.ts_ns,
            aux: rec.aux,
            aux2: rec.aux2,
            api: rec.api,
            kind,
        };
        let sp = &mut self.spaces[s as usize];
        let out = if kind.in_arena() {
            sp.arena.insert(a, r)
        } else {
            insert_other(&mut sp.other, a, r)
        };
        match out {
            Insert::Inserted => {}
            Insert::Duplicate => {
                self.counts.duplicates += 1;
                return false;
            }
            Insert::Replaced { removed, double } => {
                for (_, x) in &removed {
                    self.account(s, x.kind, x.size, false);
                }
                let k = if double {
                    AnomalyKind::DoubleAlloc
                } else {
                    AnomalyKind::AllocOverlap
                };
                self.anomaly(k, a);
            }
        }
        self.account(s, kind, size, true);
        true
    }

    /// Removes the pointer region starting at `a` from space `s`; returns its kind and size.
    fn take_ptr(&mut self, s: u32, a: u64) -> Option<(RegionKind, u64)> {
        let sp = self.spaces.get_mut(s as usize)?;
        sp.arena
            .remove_with(a, |r| (r.kind, r.size))
            .or_else(|| sp.other.remove(&a).map(|r| (r.kind, r.size)))
    }

    /// A successful `Free` or `AsyncFree`: the region's kind decides what is freed.
    pub(super) fn on_free(&mut self, rec: &Record) {
        self.counts.frees += 1;
        let a = rec.addr;
        if a == 0 {
            // cudaFree(NULL) is a legal no-op.
            return;
        }
        let first = self.find_space(rec.pid, rec.device);
        let mut found = first.and_then(|s| self.take_ptr(s, a).map(|r| (s, r)));
        if found.is_none() {
            let others: Vec<u32> = match self.proc_index.get(&rec.pid) {
                Some(&p) => self.processes[p as usize]
                    .spaces
                    .iter()
                    .map(|(_, s)| *s)
                    .filter(|s| Some(*s) != first)
                    .collect(),
                None => Vec::new(),
            };
            for s in others {
                if let Some(r) = self.take_ptr(s, a) {
                    found = Some((s, r));
                    break;
                }
            }
        }
        match found {
            Some((s, (kind, size))) => {
                self.account(s, kind, size, false);
                if rec.flags & Flags::AT_EXIT != 0 && kind != RegionKind::Imported {
                    self.leak(kind, size);
                }
            }
            None => self.unknown_free(AnomalyKind::FreeUnknown, a),
        }
    }

    /// Records an object that was live at its process's exit.
    pub(super) fn leak(&mut self, kind: RegionKind, size: u64) {
        *self.exit_leaks.entry((kind as u8, size)).or_insert(0) += 1;
    }

    /// A successful `Import`: a pointer (kept so a later free is known) or, with `aux2 = 1`,
    /// a physical handle (kept so a later map/release is known). Not new memory.
    pub(super) fn on_import(&mut self, rec: &Record) {
        if rec.aux2 == 1 {
            self.import_handle(rec);
            return;
        }
        if rec.addr == 0 {
            self.anomaly(AnomalyKind::BadAllocRecord, 0);
            return;
        }
        self.place_ptr(rec, RegionKind::Imported);
    }

    /// A failed call: counted; failed allocations are kept with the state and a verdict.
    pub(super) fn on_failed(&mut self, kind: EventKind, rec: &Record) {
        self.counts.failed_calls += 1;
        use EventKind as K;
        if !matches!(
            kind,
            K::Alloc | K::ManagedAlloc | K::AsyncAlloc | K::MemCreate
        ) {
            return;
        }
        self.counts.failed_allocs += 1;
        if self.failed.len() >= FAILED_KEPT {
            self.failed_dropped += 1;
            return;
        }
        let fig = self
            .find_space(rec.pid, rec.device)
            .and_then(|s| self.spaces.get(s as usize))
            .and_then(|s| s.arena.figures());
        let samples = self
            .find_device(rec.pid, rec.device)
            .and_then(|d| self.devices.get(d as usize))
            .map(|d| d.samples)
            .unwrap_or_default();
        let arena = match kind {
            K::Alloc | K::AsyncAlloc => fig.map(|f| (f.total_free, f.largest_free)),
            _ => None,
        };
        self.failed.push(FailedAlloc {
            pid: rec.pid,
            ordinal: rec.device,
            seq: rec.seq,
            ts_ns: rec.ts_ns,
            kind,
            api: rec.api,
            size: rec.size,
            result: rec.result,
            total_free: fig.map(|f| f.total_free),
            largest_free: fig.map(|f| f.largest_free),
            driver_free: samples.driver_free,
            nvml_used: samples.nvml_used,
            verdict: verdict(rec.size, arena, samples.driver_free),
        });
    }
}
