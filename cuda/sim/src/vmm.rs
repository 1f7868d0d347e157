//! Virtual memory management: `cuMemAddressReserve`/`Free`, `cuMemCreate`/`Release`,
//! `cuMemMap`/`Unmap`, `cuMemSetAccess`, `cuMemRetainAllocationHandle`.
//!
//! Reservations take address space only (from the device's VMM range). Physical handles
//! take device memory in 2 MiB pages and no address space. A handle's memory returns to the
//! device only when every reference is released **and** every mapping of it is unmapped —
//! so releasing right after mapping (as llama.cpp does) keeps the memory until the unmap.

use crate::codes::{CuError, CuResult};
use crate::gpu::Gpu;
use crate::layout::*;

pub struct Reservation {
    pub len: u64,
    pub device: usize,
}

pub struct Phys {
    pub len: u64,
    pub device: usize,
    /// Creation plus `cuMemRetainAllocationHandle` references not yet released.
    pub refs: u32,
    pub mapped: u32,
}

pub struct Mapping {
    pub len: u64,
    pub handle: u64,
    pub device: usize,
    pub accessible: bool,
}

impl Gpu {
    /// `cuMemAddressReserve`. `align` 0 means the granularity; a nonzero `hint` is used when
    /// that range is free, otherwise the lowest free range is taken. The device is the current
    /// context's, or device 0 without one.
    pub fn address_reserve(
        &mut self,
        ctx: Option<u64>,
        size: u64,
        align: u64,
        hint: u64,
        flags: u64,
    ) -> CuResult<u64> {
        if size == 0 || !size.is_multiple_of(VMM_GRANULARITY) || flags != 0 {
            return Err(CuError::INVALID_VALUE);
        }
        if align != 0 && !align.is_power_of_two() {
            return Err(CuError::INVALID_VALUE);
        }
        let align = align.max(VMM_GRANULARITY);
        let d = ctx.and_then(|c| self.ctx_device(c).ok()).unwrap_or(0);
        let mut at = None;
        if hint != 0 && hint.is_multiple_of(align) {
            if let Some(dev) = self.devices.iter_mut().find(|dv| dv.va.contains(hint)) {
                if dev.va.alloc_at(hint, size) {
                    at = Some(hint);
                }
            }
        }
        let at = match at {
            Some(a) => a,
            None => self.devices[d]
                .va
                .alloc(size, align)
                .ok_or(CuError::OUT_OF_MEMORY)?,
        };
        let device = self
            .devices
            .iter()
            .position(|dv| dv.va.contains(at))
            .unwrap_or(d);
        self.reservations
            .insert(at, Reservation { len: size, device });
        Ok(at)
    }

    /// `cuMemAddressFree`: exactly a reservation, with nothing mapped in it.
    pub fn address_free(&mut self, p: u64, size: u64) -> CuResult<()> {
        match self.reservations.get(&p) {
            Some(r) if r.len == size => {}
            _ => return Err(CuError::INVALID_VALUE),
        }
        if self.mappings.range(p..p + size).next().is_some() {
            return Err(CuError::INVALID_VALUE);
        }
        let r = self.reservations.remove(&p).expect("checked");
        let _ = self.devices[r.device].va.free(p, r.len);
        Ok(())
    }

    /// `cuMemCreate` of pinned device memory on device `loc_id`.
    pub fn mem_create(
        &mut self,
        size: u64,
        alloc_type: u32,
        loc_type: u32,
        loc_id: i32,
        flags: u64,
    ) -> CuResult<u64> {
        if alloc_type != 1 || flags != 0 || size == 0 || !size.is_multiple_of(VMM_GRANULARITY) {
            return Err(CuError::INVALID_VALUE);
        }
        if loc_type != 1 {
            return Err(CuError::NOT_SUPPORTED);
        }
        let d = self.check_device(loc_id)?;
        self.fault(size)?;
        if size > self.devices[d].size {
            return Err(CuError::OUT_OF_MEMORY);
        }
        self.charge(d, size)?;
        let h = make_handle(TAG_MEM_HANDLE, self.fresh_id());
        self.phys.insert(
            h,
            Phys {
                len: size,
                device: d,
                refs: 1,
                mapped: 0,
            },
        );
        Ok(h)
    }

    fn drop_phys_if_unused(&mut self, h: u64) {
        if let Some(ph) = self.phys.get(&h) {
            if ph.refs == 0 && ph.mapped == 0 {
                let (d, len) = (ph.device, ph.len);
                self.phys.remove(&h);
                self.uncharge(d, len);
            }
        }
    }

    /// `cuMemRelease`.
    pub fn mem_release(&mut self, h: u64) -> CuResult<()> {
        match self.phys.get_mut(&h) {
            Some(ph) if ph.refs > 0 => ph.refs -= 1,
            _ => return Err(CuError::INVALID_VALUE),
        }
        self.drop_phys_if_unused(h);
        Ok(())
    }

    /// (bytes, device) of a physical handle.
    pub fn phys_info(&self, h: u64) -> CuResult<(u64, usize)> {
        self.phys
            .get(&h)
            .filter(|p| p.refs > 0 || p.mapped > 0)
            .map(|p| (p.len, p.device))
            .ok_or(CuError::INVALID_VALUE)
    }

    /// `cuMemMap`: `[va, va + size)` inside one reservation and unmapped, `offset` 0.
    pub fn mem_map(&mut self, va: u64, size: u64, offset: u64, h: u64, flags: u64) -> CuResult<()> {
        if size == 0
            || !size.is_multiple_of(VMM_GRANULARITY)
            || !va.is_multiple_of(VMM_GRANULARITY)
            || offset != 0
            || flags != 0
        {
            return Err(CuError::INVALID_VALUE);
        }
        let ph = match self.phys.get(&h) {
            Some(p) if p.refs > 0 => p,
            _ => return Err(CuError::INVALID_VALUE),
        };
        if size > ph.len {
            return Err(CuError::INVALID_VALUE);
        }
        let device = ph.device;
        let end = va.checked_add(size).ok_or(CuError::INVALID_VALUE)?;
        match self.reservations.range(..=va).next_back() {
            Some((&r, res)) if end <= r + res.len => {}
            _ => return Err(CuError::INVALID_VALUE),
        }
        let overlaps_before = self
            .mappings
            .range(..va)
            .next_back()
            .is_some_and(|(&m, map)| m + map.len > va);
        if overlaps_before || self.mappings.range(va..end).next().is_some() {
            return Err(CuError::INVALID_VALUE);
        }
        self.mappings.insert(
            va,
            Mapping {
                len: size,
                handle: h,
                device,
                accessible: false,
            },
        );
        self.phys.get_mut(&h).expect("checked").mapped += 1;
        Ok(())
    }

    /// `cuMemUnmap`: every mapping inside `[va, va + size)`; none may stick out.
    pub fn mem_unmap(&mut self, va: u64, size: u64) -> CuResult<Vec<u64>> {
        let end = va.checked_add(size).ok_or(CuError::INVALID_VALUE)?;
        if size == 0 {
            return Err(CuError::INVALID_VALUE);
        }
        let sticks_in = self
            .mappings
            .range(..va)
            .next_back()
            .is_some_and(|(&m, map)| m + map.len > va);
        let inside: Vec<(u64, u64)> = self
            .mappings
            .range(va..end)
            .map(|(&m, map)| (m, map.len))
            .collect();
        if sticks_in || inside.is_empty() || inside.iter().any(|&(m, l)| m + l > end) {
            return Err(CuError::INVALID_VALUE);
        }
        let mut handles = Vec::new();
        for (m, _) in inside {
            let map = self.mappings.remove(&m).expect("listed");
            if let Some(ph) = self.phys.get_mut(&map.handle) {
                ph.mapped -= 1;
            }
            self.drop_phys_if_unused(map.handle);
            handles.push(map.handle);
        }
        Ok(handles)
    }

    /// `cuMemSetAccess`: the whole range must be mapped; `devices` are the descriptors'
    /// location ids and `flags` their access flags.
    pub fn mem_set_access(
        &mut self,
        va: u64,
        size: u64,
        descs: &[(u32, i32, u32)],
    ) -> CuResult<()> {
        if size == 0 || descs.is_empty() {
            return Err(CuError::INVALID_VALUE);
        }
        for &(loc_type, id, flags) in descs {
            if loc_type != 1 || !matches!(flags, 0 | 1 | 3) {
                return Err(CuError::INVALID_VALUE);
            }
            self.check_device(id)?;
        }
        let end = va.checked_add(size).ok_or(CuError::INVALID_VALUE)?;
        let mut cursor = va;
        let mut covered = Vec::new();
        if let Some((&m, map)) = self.mappings.range(..=va).next_back() {
            if m + map.len > va {
                covered.push(m);
                cursor = m + map.len;
            }
        }
        while cursor < end {
            match self.mappings.get(&cursor) {
                Some(map) => {
                    covered.push(cursor);
                    cursor += map.len;
                }
                None => return Err(CuError::INVALID_VALUE),
            }
        }
        if covered.is_empty() {
            return Err(CuError::INVALID_VALUE);
        }
        for m in covered {
            if let Some(map) = self.mappings.get_mut(&m) {
                map.accessible = true;
            }
        }
        Ok(())
    }

    /// `cuMemRetainAllocationHandle`: the handle mapped at `va`, with one more reference.
    pub fn retain_allocation_handle(&mut self, va: u64) -> CuResult<u64> {
        let h = match self.mappings.range(..=va).next_back() {
            Some((&m, map)) if va < m + map.len => map.handle,
            _ => return Err(CuError::INVALID_VALUE),
        };
        self.phys.get_mut(&h).expect("mapped handle exists").refs += 1;
        Ok(h)
    }

    /// Bytes of physical memory this process holds through VMM handles.
    pub fn vmm_physical_bytes(&self) -> u64 {
        self.phys.values().map(|p| p.len).sum()
    }
}
