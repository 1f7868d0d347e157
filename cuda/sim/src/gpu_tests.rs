//! Behaviour of the simulated driver core, without the C layer.

use crate::codes::*;
use crate::config::Config;
use crate::gpu::Gpu;
use crate::layout::*;
use crate::mem::PtrAttr;
use crate::pool::{
    PoolAttr, ATTR_RESERVED_MEM_CURRENT, ATTR_RESERVED_MEM_HIGH, ATTR_USED_MEM_CURRENT,
    ATTR_USED_MEM_HIGH,
};
use crate::size::{GIB, MIB};
use crate::spec::DeviceSpec;
use std::sync::atomic::{AtomicU32, Ordering};

static N: AtomicU32 = AtomicU32::new(0);

/// A driver over a private state file with the given spec and context overhead.
fn gpu_with(spec: &str, overhead: u64, tweak: impl FnOnce(&mut Config)) -> Gpu {
    let path = std::env::temp_dir().join(format!(
        "fragprobe-simgpu-core-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_file(&path);
    let mut cfg = Config::from_lookup(|_| None).unwrap();
    cfg.spec = Some(DeviceSpec::parse(spec).unwrap());
    cfg.state_path = path;
    cfg.context_overhead = overhead;
    tweak(&mut cfg);
    Gpu::new(cfg).unwrap()
}

fn gpu(spec: &str) -> (Gpu, u64) {
    let mut g = gpu_with(spec, 0, |_| {});
    let ctx = g.primary_retain(0).unwrap();
    (g, ctx)
}

impl Drop for Gpu {
    fn drop(&mut self) {
        self.release_process();
        let _ = std::fs::remove_file(&self.cfg.state_path);
    }
}

#[test]
fn worked_placement_example() {
    let (mut g, c) = gpu("1x1GiB");
    let base = device_arena_base(0);
    let a = g.mem_alloc(Some(c), 100).unwrap();
    let b = g.mem_alloc(Some(c), 1000).unwrap();
    let cc = g.mem_alloc(Some(c), 512).unwrap();
    assert_eq!((a, b, cc), (base, base + 0x200, base + 0x600));
    g.mem_free(Some(c), b).unwrap();
    assert_eq!(g.mem_alloc(Some(c), 300).unwrap(), base + 0x200);
    assert_eq!(g.mem_alloc(Some(c), 600).unwrap(), base + 0x800);
}

#[test]
fn placement_is_deterministic() {
    let run = || {
        let (mut g, c) = gpu("1x1GiB");
        let mut out = Vec::new();
        let mut live = Vec::new();
        let mut x: u64 = 99;
        for i in 0..2000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            if i % 3 == 2 && !live.is_empty() {
                let p = live.swap_remove((x >> 33) as usize % live.len());
                g.mem_free(Some(c), p).unwrap();
            } else {
                let p = g.mem_alloc(Some(c), 1 + (x >> 40) % MIB).unwrap();
                out.push(p);
                live.push(p);
            }
        }
        out
    };
    assert_eq!(run(), run());
}

#[test]
fn fragmentation_oom_while_total_free_suffices() {
    let (mut g, c) = gpu("1x64MiB");
    let blocks: Vec<u64> = (0..8)
        .map(|_| g.mem_alloc(Some(c), 8 * MIB).unwrap())
        .collect();
    for b in blocks.iter().step_by(2) {
        g.mem_free(Some(c), *b).unwrap();
    }
    let (free, total) = g.mem_get_info(Some(c)).unwrap();
    assert_eq!((free, total), (32 * MIB, 64 * MIB));
    assert_eq!(g.mem_alloc(Some(c), 16 * MIB), Err(CuError::OUT_OF_MEMORY));
    assert!(g.mem_alloc(Some(c), 8 * MIB).is_ok());
}

#[test]
fn context_overhead_counts_as_physical_memory() {
    let mut g = gpu_with("1x1GiB", 300 * MIB, |_| {});
    let c = g.primary_retain(0).unwrap();
    assert_eq!(g.mem_get_info(Some(c)).unwrap().0, GIB - 300 * MIB);
    // the arena itself still has room, but physical memory runs out
    assert!(g.mem_alloc(Some(c), 400 * MIB).is_ok());
    assert_eq!(g.mem_alloc(Some(c), 400 * MIB), Err(CuError::OUT_OF_MEMORY));
    let c2 = g.ctx_create(0, 0).unwrap();
    assert_ne!(c2, c);
    // a third context does not fit in the remaining 24 MiB
    assert_eq!(g.ctx_create(0, 0), Err(CuError::OUT_OF_MEMORY));
    g.ctx_destroy(c2).unwrap();
    assert_eq!(g.shared().slot_used(g.slot(), 0), 700 * MIB);
    // releasing the primary context frees its allocations and overhead
    g.primary_release(0).unwrap();
    assert_eq!(g.shared().device_used(0), 0);
    assert_eq!(g.mem_alloc(Some(c), 1), Err(CuError::CONTEXT_IS_DESTROYED));
    assert_eq!(g.mem_alloc(None, 1), Err(CuError::INVALID_CONTEXT));
}

#[test]
fn invalid_arguments() {
    let (mut g, c) = gpu("1x1GiB");
    assert_eq!(g.mem_alloc(Some(c), 0), Err(CuError::INVALID_VALUE));
    assert_eq!(g.mem_free(Some(c), 12345), Err(CuError::INVALID_VALUE));
    let p = g.mem_alloc(Some(c), 4096).unwrap();
    assert_eq!(g.mem_free(Some(c), p + 512), Err(CuError::INVALID_VALUE));
    g.mem_free(Some(c), p).unwrap();
    assert_eq!(g.mem_free(Some(c), p), Err(CuError::INVALID_VALUE));
    assert_eq!(g.check_device(1), Err(CuError::INVALID_DEVICE));
    assert_eq!(
        g.mem_alloc_pitch(Some(c), 100, 10, 3),
        Err(CuError::INVALID_VALUE)
    );
    let (_, pitch) = g.mem_alloc_pitch(Some(c), 100, 10, 4).unwrap();
    assert_eq!(pitch, 512);
}

#[test]
fn fault_injection() {
    let mut g = gpu_with("1x1GiB", 0, |c| {
        c.fail_nth = Some(2);
        c.fail_above = Some(MIB);
    });
    let c = g.primary_retain(0).unwrap();
    assert!(g.mem_alloc(Some(c), 10).is_ok());
    assert_eq!(g.mem_alloc(Some(c), 10), Err(CuError::OUT_OF_MEMORY));
    assert!(g.mem_alloc(Some(c), 10).is_ok());
    assert_eq!(g.mem_alloc(Some(c), MIB + 1), Err(CuError::OUT_OF_MEMORY));
    assert!(g.mem_alloc(Some(c), MIB).is_ok());
}

#[test]
fn pointer_attributes() {
    let (mut g, c) = gpu("2x1GiB");
    let c1 = g.primary_retain(1).unwrap();
    let p = g.mem_alloc(Some(c1), 5000).unwrap();
    assert_eq!(p, device_arena_base(1));
    assert_eq!(g.pointer_attribute(9, p + 100), Ok(PtrAttr::U32(1)));
    assert_eq!(g.pointer_attribute(11, p + 100), Ok(PtrAttr::U64(p)));
    assert_eq!(g.pointer_attribute(12, p + 100), Ok(PtrAttr::U64(5000)));
    assert_eq!(g.pointer_attribute(1, p), Ok(PtrAttr::U64(c1)));
    assert_eq!(g.pointer_attribute(2, p), Ok(PtrAttr::U32(2)));
    assert_eq!(g.pointer_attribute(9, 0x1234), Err(CuError::INVALID_VALUE));
    let m = g.mem_alloc_managed(Some(c), 100, 1).unwrap();
    assert_eq!(m, MANAGED_BASE);
    assert_eq!(g.pointer_attribute(8, m), Ok(PtrAttr::U32(1)));
    // managed memory takes no device memory
    assert_eq!(g.shared().device_used(0), 0);
    let l = g.mem_alloc_legacy(Some(c), 100).unwrap();
    assert_eq!(l as u64, LEGACY_BASE);
    assert_eq!(g.shared().device_used(0), 512);
}

#[test]
fn pools_cache_until_trim_or_sync() {
    let (mut g, c) = gpu("1x1GiB");
    let pool = g.default_pool(0);
    let a = g.alloc_async(Some(c), 3 * MIB, 0).unwrap();
    let b = g.alloc_async(Some(c), 1000, 0).unwrap();
    let attr = |g: &Gpu, at| match g.pool_get_attribute(pool, at).unwrap() {
        PoolAttr::U64(v) => v,
        PoolAttr::Int(v) => v as u64,
    };
    assert_eq!(
        attr(&g, ATTR_RESERVED_MEM_CURRENT),
        4 * MIB,
        "one 4 MiB chunk holds both"
    );
    assert_eq!(attr(&g, ATTR_USED_MEM_CURRENT), 3 * MIB + 1024);
    assert_eq!(g.shared().device_used(0), 4 * MIB);
    g.free_async(Some(c), a, 0).unwrap();
    g.free_async(Some(c), b, 0).unwrap();
    assert_eq!(attr(&g, ATTR_USED_MEM_CURRENT), 0);
    assert_eq!(attr(&g, ATTR_USED_MEM_HIGH), 3 * MIB + 1024);
    // freed blocks stay reserved until a synchronize (release threshold 0)
    assert_eq!(attr(&g, ATTR_RESERVED_MEM_CURRENT), 4 * MIB);
    let again = g.alloc_async(Some(c), 3 * MIB, 0).unwrap();
    assert_eq!(again, a, "cached block is reused");
    g.free_async(Some(c), again, 0).unwrap();
    g.stream_synchronize(Some(c), 0).unwrap();
    assert_eq!(attr(&g, ATTR_RESERVED_MEM_CURRENT), 0);
    assert_eq!(attr(&g, ATTR_RESERVED_MEM_HIGH), 4 * MIB);
    assert_eq!(g.shared().device_used(0), 0);
    g.pool_set_attribute(pool, ATTR_RESERVED_MEM_HIGH, PoolAttr::U64(0))
        .unwrap();
    assert_eq!(attr(&g, ATTR_RESERVED_MEM_HIGH), 0);
    assert_eq!(
        g.pool_set_attribute(pool, ATTR_RESERVED_MEM_HIGH, PoolAttr::U64(5)),
        Err(CuError::INVALID_VALUE)
    );
    // a created pool with a release threshold keeps memory over a synchronize; trim drops it
    let mine = g.pool_create(1, 1, 0, 0).unwrap();
    g.pool_set_attribute(mine, 4, PoolAttr::U64(u64::MAX))
        .unwrap();
    let x = g.alloc_from_pool_async(Some(c), 5 * MIB, mine, 0).unwrap();
    g.free_async(Some(c), x, 0).unwrap();
    g.stream_synchronize(Some(c), 0).unwrap();
    assert_eq!(
        g.pool_get_attribute(mine, ATTR_RESERVED_MEM_CURRENT),
        Ok(PoolAttr::U64(6 * MIB))
    );
    g.pool_trim_to(mine, 0).unwrap();
    assert_eq!(
        g.pool_get_attribute(mine, ATTR_RESERVED_MEM_CURRENT),
        Ok(PoolAttr::U64(0))
    );
    assert_eq!(g.pool_destroy(pool), Err(CuError::INVALID_VALUE));
    g.pool_destroy(mine).unwrap();
    assert_eq!(g.pool_trim_to(mine, 0), Err(CuError::INVALID_VALUE));
}

#[test]
fn vmm_pages_count_until_released_and_unmapped() {
    let (mut g, c) = gpu("1x1GiB");
    let page = VMM_GRANULARITY;
    let va = g.address_reserve(Some(c), 64 * page, 0, 0, 0).unwrap();
    assert_eq!(va, vmm_va_base(0));
    assert_eq!(g.shared().device_used(0), 0, "reservations take no memory");
    assert_eq!(
        g.address_reserve(Some(c), page + 1, 0, 0, 0),
        Err(CuError::INVALID_VALUE)
    );
    let mut handles = Vec::new();
    for i in 0..10 {
        let h = g.mem_create(page, 1, 1, 0, 0).unwrap();
        g.mem_map(va + i * page, page, 0, h, 0).unwrap();
        handles.push(h);
    }
    g.mem_set_access(va, 10 * page, &[(1, 0, 3)]).unwrap();
    assert_eq!(
        g.mem_set_access(va, 11 * page, &[(1, 0, 3)]),
        Err(CuError::INVALID_VALUE)
    );
    assert_eq!(g.shared().device_used(0), 10 * page);
    assert_eq!(
        g.mem_map(va, page, 0, handles[0], 0),
        Err(CuError::INVALID_VALUE)
    );
    // release right after mapping: memory stays until unmapped
    for &h in &handles {
        g.mem_release(h).unwrap();
    }
    assert_eq!(g.shared().device_used(0), 10 * page);
    assert_eq!(g.pointer_attribute(9, va + page + 5), Ok(PtrAttr::U32(0)));
    assert_eq!(g.mem_unmap(va, page / 2), Err(CuError::INVALID_VALUE));
    g.mem_unmap(va, 5 * page).unwrap();
    assert_eq!(g.shared().device_used(0), 5 * page);
    assert_eq!(
        g.address_free(va, 64 * page),
        Err(CuError::INVALID_VALUE),
        "still mapped"
    );
    g.mem_unmap(va + 5 * page, 5 * page).unwrap();
    assert_eq!(g.shared().device_used(0), 0);
    g.address_free(va, 64 * page).unwrap();
    assert_eq!(g.mem_release(handles[0]), Err(CuError::INVALID_VALUE));
    // retained handles need one more release
    let h = g.mem_create(page, 1, 1, 0, 0).unwrap();
    let va2 = g.address_reserve(None, page, 0, 0, 0).unwrap();
    g.mem_map(va2, page, 0, h, 0).unwrap();
    assert_eq!(g.retain_allocation_handle(va2 + 10), Ok(h));
    g.mem_release(h).unwrap();
    g.mem_unmap(va2, page).unwrap();
    assert_eq!(g.shared().device_used(0), page);
    g.mem_release(h).unwrap();
    assert_eq!(g.shared().device_used(0), 0);
    assert_eq!(g.mem_create(page, 1, 1, 3, 0), Err(CuError::INVALID_DEVICE));
    assert_eq!(
        g.mem_create(2 * GIB, 1, 1, 0, 0),
        Err(CuError::OUT_OF_MEMORY)
    );
}

#[test]
fn streams_and_events() {
    let (mut g, c) = gpu("1x1GiB");
    let s = g.stream_create(Some(c), 1, -9).unwrap();
    assert_eq!(g.stream_info(Some(c), s), Ok((1, -5)));
    let e1 = g.event_create(Some(c), 0).unwrap();
    let e2 = g.event_create(Some(c), 0).unwrap();
    assert_eq!(g.event_elapsed(e1, e2), Err(CuError::INVALID_HANDLE));
    g.event_record(Some(c), e1, s).unwrap();
    g.event_record(Some(c), e2, 0).unwrap();
    assert!(g.event_elapsed(e1, e2).unwrap() >= 0.0);
    g.stream_wait_event(Some(c), s, e1).unwrap();
    g.event_destroy(e1).unwrap();
    assert_eq!(g.event_destroy(e1), Err(CuError::INVALID_HANDLE));
    g.stream_destroy(s).unwrap();
    assert_eq!(
        g.stream_synchronize(Some(c), s),
        Err(CuError::INVALID_HANDLE)
    );
    assert_eq!(g.stream_synchronize(None, 0), Err(CuError::INVALID_CONTEXT));
}

#[test]
fn same_identity_claim_replaces_pre_exec_slot() {
    let mut a = gpu_with("1x1GiB", 0, |_| {});
    let path = a.config().state_path.clone();
    let mut cfg = a.config().clone();
    cfg.state_path = path;
    let ca = a.primary_retain(0).unwrap();
    a.mem_alloc(Some(ca), 700 * MIB).unwrap();
    let b = Gpu::new(cfg);
    // same pid: the second claim takes the first slot's place (an exec'd image), so the
    // first one's memory is returned
    let mut b = b.unwrap();
    assert_eq!(b.shared().device_used(0), 0);
    let cb = b.primary_retain(0).unwrap();
    assert!(b.mem_alloc(Some(cb), 900 * MIB).is_ok());
    std::mem::forget(a);
}

#[test]
fn cuda_visible_devices_parsing_follows_the_driver() {
    use crate::gpu::visible_devices;
    use crate::ident::uuid_string;
    assert_eq!(visible_devices(4, None), [0, 1, 2, 3]);
    assert_eq!(visible_devices(4, Some("2,0")), [2, 0]);
    assert_eq!(visible_devices(4, Some(" 3 , 1 ")), [3, 1]);
    // the first entry naming no device ends the list
    assert_eq!(visible_devices(4, Some("1,7,0")), [1]);
    assert_eq!(visible_devices(4, Some("1,1,0")), [1]);
    assert!(visible_devices(4, Some("")).is_empty());
    assert!(visible_devices(4, Some("-1")).is_empty());
    // uuids, also by unique prefix
    let u2 = uuid_string(2);
    assert_eq!(visible_devices(4, Some(&format!("{u2},0"))), [2, 0]);
    assert_eq!(visible_devices(4, Some(&u2[..12])), [2]);
    assert!(visible_devices(4, Some("GPU-")).is_empty());
    assert!(visible_devices(4, Some("MIG-1234")).is_empty());
}

#[test]
fn a_remapped_ordinal_uses_the_physical_device() {
    let mut g = gpu_with("2x1GiB", 0, |c| c.visible_devices = Some("1".into()));
    assert_eq!(g.device_count(), 1);
    assert_eq!(g.physical(0), 1);
    assert_eq!(g.check_device(1), Err(CuError::INVALID_DEVICE));
    let ctx = g.primary_retain(0).unwrap();
    let _p = g.mem_alloc(Some(ctx), 64 * MIB).unwrap();
    // The shared accounts (what NVML and other processes see) are the physical device's.
    assert_eq!(g.shared().device_used(0), 0);
    assert!(g.shared().device_used(1) >= 64 * MIB);
    let (free, total) = g.mem_get_info(Some(ctx)).unwrap();
    assert_eq!(total, GIB);
    assert!(free <= GIB - 64 * MIB);
}
