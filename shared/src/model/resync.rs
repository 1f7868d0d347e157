//! Resyncs: replacing a process's state with the probe's live table.

use std::collections::{BTreeMap, HashSet};

use crate::format::{EventKind, Flags, Record};
use crate::live::LiveClass;

use super::region::RegionKind;
use super::{AnomalyKind, Model};

impl Model {
    /// `ResyncBegin`: start collecting entries (`aux` = watermark seq).
    pub(super) fn on_resync_begin(&mut self, rec: &Record) {
        let p = self.proc_of(rec.pid);
        let r = &mut self.processes[p as usize].resync;
        r.pending = Some(Vec::new());
        r.begin = rec.aux;
    }

    /// `ResyncEntry`: one live object (`result` = its [`LiveClass`]).
    pub(super) fn on_resync_entry(&mut self, rec: &Record) {
        let p = self.proc_of(rec.pid);
        match &mut self.processes[p as usize].resync.pending {
            Some(v) => v.push(*rec),
            None => self.anomaly(AnomalyKind::ResyncWithoutBegin, rec.addr),
        }
    }

    /// `ResyncEnd`: replace the process's state with the entries, in dependency order
    /// (reservations, handles, mappings, then pointers), and mark it complete.
    pub(super) fn on_resync_end(&mut self, rec: &Record) {
        let p = self.proc_of(rec.pid);
        let Some(entries) = self.processes[p as usize].resync.pending.take() else {
            self.anomaly(AnomalyKind::ResyncWithoutBegin, 0);
            return;
        };
        self.clear_process(p);
        let class = |e: &Record| u8::try_from(e.result).ok().and_then(LiveClass::from_u8);
        let as_kind = |e: &Record, k: EventKind| Record {
            kind: k as u16,
            ..*e
        };
        for e in &entries {
            if class(e).is_none() {
                self.anomaly(AnomalyKind::BadResyncEntry, e.addr);
            }
        }
        for e in entries
            .iter()
            .filter(|e| class(e) == Some(LiveClass::Reservation))
        {
            self.on_reserve(&as_kind(e, EventKind::AddressReserve));
        }
        for e in entries
            .iter()
            .filter(|e| class(e) == Some(LiveClass::Handle))
        {
            self.place_handle(&as_kind(e, EventKind::MemCreate), false);
        }
        // Mappings of handles without an entry: the handle was released and lives on
        // through its mappings. Give it their total size, then release it after mapping.
        let handles: HashSet<u64> = entries
            .iter()
            .filter(|h| class(h) == Some(LiveClass::Handle))
            .map(|h| h.addr)
            .collect();
        let mut orphans: BTreeMap<u64, (u64, &Record)> = BTreeMap::new();
        for e in entries
            .iter()
            .filter(|e| class(e) == Some(LiveClass::Mapping))
        {
            if !handles.contains(&e.aux) {
                let o = orphans.entry(e.aux).or_insert((0, e));
                o.0 = o.0.saturating_add(e.size);
            }
        }
        for (h, (size, e)) in &orphans {
            let hr = Record {
                addr: *h,
                size: *size,
                aux: 0,
                aux2: 0,
                kind: EventKind::MemCreate as u16,
                ..**e
            };
            self.place_handle(&hr, false);
        }
        for e in entries
            .iter()
            .filter(|e| class(e) == Some(LiveClass::Mapping))
        {
            self.on_map(&as_kind(e, EventKind::MemMap));
        }
        for h in orphans.keys() {
            self.release_handle(rec.pid, *h, false);
        }
        for e in &entries {
            let kind = match class(e) {
                Some(LiveClass::Device) if e.aux != 0 || e.flags & Flags::PITCH != 0 => {
                    RegionKind::Pitch
                }
                Some(LiveClass::Device) => RegionKind::Device,
                Some(LiveClass::Managed) => RegionKind::Managed,
                Some(LiveClass::Async) => RegionKind::Async,
                _ => continue,
            };
            if e.addr == 0 || e.size == 0 {
                self.anomaly(AnomalyKind::BadAllocRecord, e.addr);
                continue;
            }
            self.place_ptr(e, kind);
        }
        let pr = &mut self.processes[p as usize];
        let begin = pr.resync.begin;
        pr.resync.window = Some((begin, rec.aux));
        pr.incomplete = false;
        pr.resyncs += 1;
    }
}
