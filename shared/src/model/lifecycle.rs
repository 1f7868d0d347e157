//! Processes, devices and samples: start, exit, loss, `Device`, `MemGetInfo`, NVML.

use crate::format::{MetaEntry, MetaKind, Record};

use super::metrics::Snapshot;
use super::process::ProcessInfo;
use super::region::RegionKind;
use super::series::Metric;
use super::{AnomalyKind, DeviceId, DeviceKey, Model};

/// The `DeviceInfo` fields the model uses.
struct DevMeta {
    uuid: Option<String>,
    name: Option<String>,
    pci: Option<String>,
}

fn dev_meta(e: &MetaEntry<'_>) -> Option<DevMeta> {
    if e.kind != Some(MetaKind::DeviceInfo) {
        return None;
    }
    let s = |k: &str| e.get_str(k).filter(|v| !v.is_empty()).map(str::to_owned);
    Some(DevMeta {
        uuid: s("uuid"),
        name: s("name"),
        pci: s("pci_bus_id"),
    })
}

impl Model {
    /// `Device`: the device's total and, with metadata, its uuid (which then identifies it).
    pub(super) fn on_device(&mut self, rec: &Record, meta: Option<&MetaEntry<'_>>) {
        let p = self.proc_of(rec.pid);
        let info = meta.and_then(dev_meta);
        if info.is_none() && rec.meta != 0 {
            self.processes[p as usize]
                .pending_dev_meta
                .push((rec.meta, rec.device));
        }
        self.bind_device(p, rec.device, info, rec.size);
    }

    fn bind_device(&mut self, p: u32, ordinal: i16, info: Option<DevMeta>, total: u64) {
        if let Some(u) = info.as_ref().and_then(|i| i.uuid.clone()) {
            let pr = &mut self.processes[p as usize];
            match pr.dev_uuids.iter_mut().find(|(o, _)| *o == ordinal) {
                Some(e) => e.1 = u,
                None => pr.dev_uuids.push((ordinal, u)),
            }
        }
        let key = self.device_key(p, ordinal);
        if matches!(key, DeviceKey::Uuid(_)) && !self.device_index.contains_key(&key) {
            self.name_ordinal_device(p, ordinal, &key);
        }
        let d = self.device_of_key(key, ordinal);
        let dev = &mut self.devices[d as usize];
        if let Some(i) = info {
            dev.info.uuid = i.uuid.or(dev.info.uuid.take());
            dev.info.name = i.name.or(dev.info.name.take());
            dev.info.pci_bus_id = i.pci.or(dev.info.pci_bus_id.take());
        }
        if total > 0 && dev.info.total_bytes != Some(total) {
            dev.info.total_bytes = Some(total);
            for s in dev.spaces.clone() {
                self.spaces[s as usize].arena.set_capacity(total);
                self.touch(s);
            }
        }
        let pid = self.processes[p as usize].pid;
        if let Some(&s) = self.space_index.get(&(pid, ordinal)) {
            if self.spaces[s as usize].device.0 != d {
                self.rebind(s, d);
            }
        }
        self.touch_device(d);
    }

    /// The first description of a GPU (its uuid) names the device that process `p`'s
    /// `ordinal` stood for until then, instead of making a second one: what came before
    /// it (a `cuMemGetInfo` at start-up, the first allocations) stays on the same device
    /// and no nameless device is left behind. Only when nothing of another process is on
    /// that device; else the space moves ([`Model::rebind`]) and the rest stays.
    fn name_ordinal_device(&mut self, p: u32, ordinal: i16, key: &DeviceKey) {
        let pid = self.processes[p as usize].pid;
        let old = DeviceKey::Ordinal(ordinal);
        let Some(&d) = self.device_index.get(&old) else {
            return;
        };
        let only_ours = self.devices[d as usize].spaces.iter().all(|&s| {
            let sp = &self.spaces[s as usize];
            sp.pid == pid && sp.ordinal == ordinal
        });
        let others = self.processes.iter().any(|pr| {
            pr.pid != pid
                && pr
                    .spaces
                    .iter()
                    .any(|&(_, s)| self.spaces[s as usize].device.0 == d)
        });
        if !only_ours || others {
            return;
        }
        self.device_index.remove(&old);
        self.devices[d as usize].key = key.clone();
        self.device_index.insert(key.clone(), d);
    }

    /// Moves a space to another device (its uuid became known).
    fn rebind(&mut self, s: u32, d: u32) {
        let sp = &mut self.spaces[s as usize];
        let old = sp.device.0;
        let totals = sp.totals;
        if let Some(k) = sp.set_key.take() {
            self.devices[old as usize].arena_set.remove(&(k, s));
        }
        sp.device = DeviceId(d);
        let cap = self.devices[d as usize].info.total_bytes.unwrap_or(0);
        sp.arena.set_capacity(cap);
        self.unshare(old);
        let od = &mut self.devices[old as usize];
        od.totals.merge(&totals, false);
        od.spaces.retain(|x| *x != s);
        self.devices[d as usize].totals.merge(&totals, true);
        self.join_device(s, d);
        self.touch(s);
        self.touch_device(old);
    }

    /// Metadata given after its record.
    pub(super) fn on_meta(&mut self, pid: u32, meta_ref: u64, e: &MetaEntry<'_>) {
        let Some(&p) = self.proc_index.get(&pid) else {
            return;
        };
        match e.kind {
            Some(MetaKind::ProcessInfo) if self.processes[p as usize].meta_ref == meta_ref => {
                let ppid = self.processes[p as usize].info.ppid;
                let mut info = ProcessInfo::from_meta(e);
                info.ppid = info.ppid.or(ppid);
                self.processes[p as usize].info = info;
            }
            Some(MetaKind::DeviceInfo) => {
                let pr = &mut self.processes[p as usize];
                if let Some(i) = pr.pending_dev_meta.iter().position(|(m, _)| *m == meta_ref) {
                    let (_, ordinal) = pr.pending_dev_meta.remove(i);
                    // The total came with the record, which went to the ordinal's device.
                    let total = e.get_u64("total_bytes").filter(|t| *t > 0).or_else(|| {
                        let d = self.find_device(pid, ordinal)?;
                        self.devices.get(d as usize)?.info.total_bytes
                    });
                    self.bind_device(p, ordinal, dev_meta(e), total.unwrap_or(0));
                }
            }
            _ => {}
        }
    }

    /// `MemGetInfo`: the driver's free and total bytes of the device.
    pub(super) fn on_meminfo(&mut self, rec: &Record) {
        let p = self.proc_of(rec.pid);
        let key = self.device_key(p, rec.device);
        let d = self.device_of_key(key, rec.device);
        let now = self.now;
        let dev = &mut self.devices[d as usize];
        let s = &mut dev.samples;
        s.driver_total = (rec.aux != 0).then_some(rec.aux);
        s.driver_free = (rec.aux != 0 || rec.size != 0).then_some(rec.size);
        s.driver_at = Some(now);
        if let (Some(f), Some(t)) = (s.driver_free, s.driver_total) {
            dev.series
                .push(Metric::DriverUsed, now.ts_ns, t.saturating_sub(f) as f64);
        }
    }

    /// `NvmlSample`: device used/total and this process's use. The device is found by the
    /// metadata's uuid if given, else by the pid's ordinal, else by ordinal.
    pub(super) fn on_nvml(&mut self, rec: &Record, meta: Option<&MetaEntry<'_>>) {
        let key = match meta.and_then(dev_meta).and_then(|m| m.uuid) {
            Some(u) => DeviceKey::Uuid(u),
            None => match self.proc_index.get(&rec.pid) {
                Some(&p) => self.device_key(p, rec.device),
                None => DeviceKey::Ordinal(rec.device),
            },
        };
        let d = self.device_of_key(key, rec.device);
        let now = self.now;
        let dev = &mut self.devices[d as usize];
        dev.samples.nvml_used = Some(rec.size);
        dev.samples.nvml_total = (rec.aux != 0).then_some(rec.aux);
        dev.samples.nvml_process_used = (rec.aux2 != u64::MAX).then_some(rec.aux2);
        dev.samples.nvml_at = Some(now);
        dev.series
            .push(Metric::NvmlUsed, now.ts_ns, rec.size as f64);
    }

    /// `Loss`: the process's model is incomplete until a resync.
    pub(super) fn on_loss(&mut self, rec: &Record) {
        let p = self.proc_of(rec.pid);
        let pr = &mut self.processes[p as usize];
        pr.incomplete = true;
        pr.lost_events = pr.lost_events.saturating_add(rec.size);
        self.counts.lost = self.counts.lost.saturating_add(rec.size);
    }

    /// Whether a process has anything live.
    fn has_state(&self, p: u32) -> bool {
        let pr = &self.processes[p as usize];
        !pr.vmm.is_empty()
            || pr
                .spaces
                .iter()
                .any(|(_, s)| self.spaces[*s as usize].has_pointers())
    }

    /// `ProcessStart`: a new process (or a new one reusing the pid).
    pub(super) fn on_process_start(&mut self, rec: &Record, meta: Option<&MetaEntry<'_>>) {
        let p = self.proc_of(rec.pid);
        if self.has_state(p) {
            self.anomaly(AnomalyKind::RestartedLiveProcess, 0);
            self.clear_process(p);
        }
        let now = self.now;
        let pr = &mut self.processes[p as usize];
        pr.info = match meta {
            Some(e) if e.kind == Some(MetaKind::ProcessInfo) => ProcessInfo::from_meta(e),
            _ => ProcessInfo::default(),
        };
        if rec.aux != 0 {
            pr.info.ppid = u32::try_from(rec.aux).ok();
        }
        pr.start = Some(now);
        pr.exit = None;
        pr.incomplete = false;
        pr.meta_ref = rec.meta;
        pr.resync = Default::default();
        pr.dev_uuids.clear();
        pr.pending_dev_meta.clear();
        for (_, s) in pr.spaces.clone() {
            self.spaces[s as usize].exit = None;
        }
    }

    /// `ProcessExit`: snapshots the process's spaces, records what was still live as leaks,
    /// and clears its state (the driver frees everything at exit).
    pub(super) fn on_process_exit(&mut self, rec: &Record) {
        let p = self.proc_of(rec.pid);
        let now = self.now;
        self.processes[p as usize].exit = Some(super::ExitInfo {
            at: now,
            status: rec.aux2,
            reported_live_bytes: rec.size,
            reported_live_count: rec.aux,
        });
        let spaces: Vec<u32> = self.processes[p as usize]
            .spaces
            .iter()
            .map(|(_, s)| *s)
            .collect();
        let mut leaks: Vec<(RegionKind, u64)> = Vec::new();
        for &s in &spaces {
            let sp = &self.spaces[s as usize];
            let snap = Snapshot {
                at: Some(now),
                totals: sp.totals,
                arena: sp.arena.figures(),
            };
            let d = sp.device.0 as usize;
            leaks.extend(sp.arena.regions.values().map(|r| (r.kind, r.size)));
            leaks.extend(
                sp.other
                    .values()
                    .filter(|r| r.kind != RegionKind::Imported)
                    .map(|r| (r.kind, r.size)),
            );
            self.spaces[s as usize].exit = Some(snap);
            let arena = self.arena_in_force(&self.devices[d]);
            let dev = &mut self.devices[d];
            dev.exit = Some(Snapshot {
                at: Some(now),
                totals: dev.totals,
                arena,
            });
        }
        let v = &self.processes[p as usize].vmm;
        leaks.extend(
            v.handles
                .values()
                .filter(|h| !h.imported)
                .map(|h| (RegionKind::Handle, h.size)),
        );
        leaks.extend(
            v.reservations
                .values()
                .map(|r| (RegionKind::Reservation, r.size)),
        );
        for (k, size) in leaks {
            self.leak(k, size);
        }
        self.clear_process(p);
    }

    /// Drops everything a process has live.
    pub(super) fn clear_process(&mut self, p: u32) {
        let spaces: Vec<u32> = self.processes[p as usize]
            .spaces
            .iter()
            .map(|(_, s)| *s)
            .collect();
        for s in spaces {
            let sp = &mut self.spaces[s as usize];
            let totals = std::mem::take(&mut sp.totals);
            sp.arena.clear();
            sp.other.clear();
            let d = sp.device.0 as usize;
            self.devices[d].totals.merge(&totals, false);
            self.touch(s);
        }
        self.processes[p as usize].vmm = Default::default();
    }
}
