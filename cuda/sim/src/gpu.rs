//! The simulated driver of one process: devices, contexts, streams and events. Memory
//! lives in `mem.rs`, stream-ordered pools in `pool.rs`, virtual memory in `vmm.rs`.
//!
//! `Gpu` is plain single-threaded state; the driver library keeps it behind one mutex. The
//! calling thread's current context is passed in by the caller (it is thread-local state of
//! the driver library, see [`crate::current`]).

use crate::arena::Arena;
use crate::codes::{CuError, CuResult};
use crate::config::Config;
use crate::handles::HandleMap;
use crate::layout::*;
use crate::pool::Pool;
use crate::spec::DeviceSpec;
use crate::state::SharedState;
use crate::vmm::{Mapping, Phys, Reservation};
use std::collections::BTreeMap;
use std::time::Instant;

/// `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD`.
pub const STREAM_LEGACY: u64 = 1;
pub const STREAM_PER_THREAD: u64 = 2;

/// One simulated device as this process sees it.
pub struct Device {
    pub size: u64,
    /// Address space of `cuMemAlloc`-family allocations and pool chunks.
    pub arena: Arena,
    /// Address space of `cuMemAddressReserve`.
    pub va: Arena,
    pub primary_refs: u32,
    pub primary_flags: u32,
    pub default_pool: u64,
    pub current_pool: u64,
}

struct Context {
    device: usize,
    flags: u32,
}

struct Stream {
    ctx: u64,
    flags: u32,
    priority: i32,
}

struct Event {
    ctx: u64,
    flags: u32,
    recorded: Option<Instant>,
}

/// What kind of call made an allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocKind {
    Device,
    Pitch,
    Managed,
    Legacy,
    Pool(u64),
}

/// A live allocation, keyed by address in [`Gpu::allocs`].
#[derive(Clone, Copy, Debug)]
pub struct Alloc {
    /// Bytes taken from the arena (rounded).
    pub len: u64,
    /// Bytes asked for.
    pub size: u64,
    pub device: usize,
    pub ctx: u64,
    pub kind: AllocKind,
    pub id: u64,
}

/// The simulated driver state of this process.
pub struct Gpu {
    pub(crate) cfg: Config,
    pub(crate) state: SharedState,
    pub(crate) slot: usize,
    spec: DeviceSpec,
    /// The physical device (index in the spec, NVML's index) of each CUDA ordinal.
    pub(crate) physical: Vec<usize>,
    pub(crate) devices: Vec<Device>,
    contexts: HandleMap<Context>,
    streams: HandleMap<Stream>,
    events: HandleMap<Event>,
    pub(crate) pools: HandleMap<Pool>,
    pub(crate) allocs: BTreeMap<u64, Alloc>,
    pub(crate) reservations: BTreeMap<u64, Reservation>,
    pub(crate) phys: HandleMap<Phys>,
    pub(crate) mappings: BTreeMap<u64, Mapping>,
    pub(crate) managed: Arena,
    pub(crate) legacy: Arena,
    next_id: u64,
    alloc_calls: u64,
}

pub fn primary_handle(d: usize) -> u64 {
    make_handle(TAG_CONTEXT, d as u64 + 1)
}

pub fn default_pool_handle(d: usize) -> u64 {
    make_handle(TAG_POOL, d as u64 + 1)
}

/// `CU_CTX_*` flags that exist (scheduling, map host, lmem resize, coredumps, sync memops).
const CTX_FLAGS_MASK: u32 = 0xFF;

fn check_ctx_flags(flags: u32) -> CuResult<()> {
    let sched = flags & 0x7;
    if flags & !CTX_FLAGS_MASK != 0 || !matches!(sched, 0 | 1 | 2 | 4) {
        return Err(CuError::INVALID_VALUE);
    }
    Ok(())
}

impl Gpu {
    /// Opens the shared state, claims this process's slot and settles which devices exist.
    pub fn new(cfg: Config) -> Result<Gpu, String> {
        let state = SharedState::open(&cfg.state_path).map_err(|e| e.to_string())?;
        let slot = state.claim_slot().map_err(|e| e.to_string())?;
        let spec = match state.settle_spec(cfg.spec.as_ref(), Some(slot)) {
            Ok(s) => s,
            Err(e) => {
                state.release_slot(slot);
                return Err(e.to_string());
            }
        };
        let mut pools = HandleMap::default();
        let sizes = spec.sizes();
        let physical = visible_devices(sizes.len(), cfg.visible_devices.as_deref());
        let devices = physical
            .iter()
            .enumerate()
            .map(|(d, &p)| {
                let size = sizes[p];
                let pool = default_pool_handle(d);
                pools.insert(pool, Pool::new(d, true, 0));
                Device {
                    size,
                    arena: Arena::new(device_arena_base(p), size),
                    va: Arena::new(vmm_va_base(p), VMM_VA_STRIDE),
                    primary_refs: 0,
                    primary_flags: 0,
                    default_pool: pool,
                    current_pool: pool,
                }
            })
            .collect();
        Ok(Gpu {
            cfg,
            state,
            slot,
            spec,
            physical,
            devices,
            contexts: HandleMap::default(),
            streams: HandleMap::default(),
            events: HandleMap::default(),
            pools,
            allocs: BTreeMap::new(),
            reservations: BTreeMap::new(),
            phys: HandleMap::default(),
            mappings: BTreeMap::new(),
            managed: Arena::new(MANAGED_BASE, MANAGED_SIZE),
            legacy: Arena::new(LEGACY_BASE, LEGACY_SIZE),
            next_id: 0x100,
            alloc_calls: 0,
        })
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    pub fn spec(&self) -> &DeviceSpec {
        &self.spec
    }

    pub fn shared(&self) -> &SharedState {
        &self.state
    }

    pub fn slot(&self) -> usize {
        self.slot
    }

    /// Gives this process's memory back to the shared state (process exit).
    pub fn release_process(&self) {
        self.state.release_slot(self.slot);
    }

    pub(crate) fn fresh_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    pub fn device_count(&self) -> usize {
        self.devices.len()
    }

    pub fn check_device(&self, d: i32) -> CuResult<usize> {
        if d >= 0 && (d as usize) < self.devices.len() {
            Ok(d as usize)
        } else {
            Err(CuError::INVALID_DEVICE)
        }
    }

    pub fn device_size(&self, d: usize) -> u64 {
        self.devices[d].size
    }

    /// The physical device behind CUDA ordinal `d` (its identity, NVML's index and the
    /// shared state's accounts follow the physical device).
    pub fn physical(&self, d: usize) -> usize {
        self.physical[d]
    }

    /// Counts an allocating call and applies FRAGPROBE_SIM_FAIL_NTH / _FAIL_ABOVE.
    pub(crate) fn fault(&mut self, size: u64) -> CuResult<()> {
        self.alloc_calls += 1;
        if self.cfg.fail_nth == Some(self.alloc_calls) {
            return Err(CuError::OUT_OF_MEMORY);
        }
        if matches!(self.cfg.fail_above, Some(limit) if size > limit) {
            return Err(CuError::OUT_OF_MEMORY);
        }
        Ok(())
    }

    /// Takes physical memory on `d` for this process.
    pub(crate) fn charge(&self, d: usize, bytes: u64) -> CuResult<()> {
        if self.state.try_charge(self.slot, self.physical[d], bytes) {
            Ok(())
        } else {
            Err(CuError::OUT_OF_MEMORY)
        }
    }

    pub(crate) fn uncharge(&self, d: usize, bytes: u64) {
        self.state.uncharge(self.slot, self.physical[d], bytes);
    }

    // ---- contexts -------------------------------------------------------------------

    /// Device of a live context; `CONTEXT_IS_DESTROYED` for a context that existed,
    /// `INVALID_CONTEXT` for anything else.
    pub fn ctx_device(&self, ctx: u64) -> CuResult<usize> {
        match self.contexts.get(&ctx) {
            Some(c) => Ok(c.device),
            None if handle_tag(ctx) == TAG_CONTEXT => Err(CuError::CONTEXT_IS_DESTROYED),
            None => Err(CuError::INVALID_CONTEXT),
        }
    }

    /// Device of the caller's current context.
    pub fn current_device(&self, ctx: Option<u64>) -> CuResult<usize> {
        self.ctx_device(ctx.ok_or(CuError::INVALID_CONTEXT)?)
    }

    pub fn ctx_flags(&self, ctx: u64) -> CuResult<u32> {
        self.contexts
            .get(&ctx)
            .map(|c| c.flags)
            .ok_or(CuError::INVALID_CONTEXT)
    }

    /// True when `ctx` names a context (live or destroyed) of this driver.
    pub fn is_context_handle(&self, ctx: u64) -> bool {
        handle_tag(ctx) == TAG_CONTEXT
    }

    fn activate(&mut self, ctx: u64, device: usize, flags: u32) -> CuResult<()> {
        self.charge(device, self.cfg.context_overhead)?;
        self.state.context_added(self.slot, self.physical[device]);
        self.contexts.insert(ctx, Context { device, flags });
        Ok(())
    }

    /// Destroys a context and everything it owns: its allocations, streams and events.
    fn deactivate(&mut self, ctx: u64) {
        let Some(c) = self.contexts.remove(&ctx) else {
            return;
        };
        let owned: Vec<(u64, Alloc)> = self
            .allocs
            .iter()
            .filter(|(_, a)| a.ctx == ctx && !matches!(a.kind, AllocKind::Pool(_)))
            .map(|(&p, &a)| (p, a))
            .collect();
        for (p, a) in owned {
            self.allocs.remove(&p);
            self.release_alloc_memory(p, &a);
        }
        self.streams.retain(|_, s| s.ctx != ctx);
        self.events.retain(|_, e| e.ctx != ctx);
        self.uncharge(c.device, self.cfg.context_overhead);
        self.state
            .context_removed(self.slot, self.physical[c.device]);
    }

    /// The device of `ctx` when it is live, activating it first when it is a primary
    /// context handed out inactive (NVIDIA's runtime gets primary contexts that way and
    /// makes them current): a primary context costs device memory only from its first use.
    pub fn ctx_device_activating(&mut self, ctx: u64) -> CuResult<usize> {
        if let Ok(d) = self.ctx_device(ctx) {
            return Ok(d);
        }
        match (0..self.device_count()).find(|&d| primary_handle(d) == ctx) {
            Some(d) if self.devices[d].primary_refs == 0 => {
                self.primary_retain(d)?;
                Ok(d)
            }
            _ => self.ctx_device(ctx),
        }
    }

    pub fn primary_retain(&mut self, d: usize) -> CuResult<u64> {
        let h = primary_handle(d);
        if self.devices[d].primary_refs == 0 {
            let flags = self.devices[d].primary_flags;
            self.activate(h, d, flags)?;
        }
        self.devices[d].primary_refs += 1;
        Ok(h)
    }

    pub fn primary_release(&mut self, d: usize) -> CuResult<()> {
        let dev = &mut self.devices[d];
        if dev.primary_refs == 0 {
            return Err(CuError::INVALID_CONTEXT);
        }
        dev.primary_refs -= 1;
        if dev.primary_refs == 0 {
            self.deactivate(primary_handle(d));
        }
        Ok(())
    }

    /// (flags, active) of device `d`'s primary context.
    pub fn primary_state(&self, d: usize) -> (u32, bool) {
        let dev = &self.devices[d];
        (dev.primary_flags, dev.primary_refs > 0)
    }

    /// `legacy` is the pre-11.0 entry point, which refuses while the context is active.
    pub fn primary_set_flags(&mut self, d: usize, flags: u32, legacy: bool) -> CuResult<()> {
        check_ctx_flags(flags)?;
        let active = self.devices[d].primary_refs > 0;
        if legacy && active {
            return Err(CuError(crate::codes::CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE));
        }
        self.devices[d].primary_flags = flags;
        if let Some(c) = self.contexts.get_mut(&primary_handle(d)) {
            c.flags = flags;
        }
        Ok(())
    }

    /// Destroys the primary context's resources and deactivates it; retaining it again
    /// creates it afresh.
    pub fn primary_reset(&mut self, d: usize) -> CuResult<()> {
        if self.devices[d].primary_refs > 0 {
            self.devices[d].primary_refs = 0;
            self.deactivate(primary_handle(d));
        }
        self.trim_pools(d, 0);
        Ok(())
    }

    pub fn ctx_create(&mut self, d: usize, flags: u32) -> CuResult<u64> {
        check_ctx_flags(flags)?;
        let h = make_handle(TAG_CONTEXT, self.fresh_id());
        self.activate(h, d, flags)?;
        Ok(h)
    }

    /// Destroys a context made by `ctx_create` (primary contexts cannot be destroyed).
    pub fn ctx_destroy(&mut self, ctx: u64) -> CuResult<()> {
        self.ctx_device(ctx)?;
        if (0..self.devices.len()).any(|d| primary_handle(d) == ctx) {
            return Err(CuError::INVALID_CONTEXT);
        }
        self.deactivate(ctx);
        Ok(())
    }

    /// A synchronisation point on device `d`: every pool releases what it holds above its
    /// release threshold.
    pub fn synchronize_device(&mut self, d: usize) {
        let handles: Vec<u64> = self
            .pools
            .iter()
            .filter(|(_, p)| p.device == d)
            .map(|(&h, _)| h)
            .collect();
        for h in handles {
            let keep = self.pools[&h].release_threshold;
            self.pool_release_to(h, keep);
        }
    }

    // ---- streams --------------------------------------------------------------------

    pub fn stream_create(&mut self, ctx: Option<u64>, flags: u32, priority: i32) -> CuResult<u64> {
        let ctx = ctx.ok_or(CuError::INVALID_CONTEXT)?;
        self.ctx_device(ctx)?;
        if flags > 1 {
            return Err(CuError::INVALID_VALUE);
        }
        let h = make_handle(TAG_STREAM, self.fresh_id());
        self.streams.insert(
            h,
            Stream {
                ctx,
                flags,
                priority: priority.clamp(-5, 0),
            },
        );
        Ok(h)
    }

    pub fn stream_destroy(&mut self, stream: u64) -> CuResult<()> {
        self.streams
            .remove(&stream)
            .map(|_| ())
            .ok_or(CuError::INVALID_HANDLE)
    }

    /// Device a stream's work runs on. The special streams (NULL, legacy, per-thread) use
    /// the caller's current context.
    pub fn stream_device(&self, ctx: Option<u64>, stream: u64) -> CuResult<usize> {
        if stream == 0 || stream == STREAM_LEGACY || stream == STREAM_PER_THREAD {
            return self.current_device(ctx);
        }
        let s = self.streams.get(&stream).ok_or(CuError::INVALID_HANDLE)?;
        self.ctx_device(s.ctx)
    }

    pub fn stream_synchronize(&mut self, ctx: Option<u64>, stream: u64) -> CuResult<()> {
        let d = self.stream_device(ctx, stream)?;
        self.synchronize_device(d);
        Ok(())
    }

    /// (flags, priority) of a created stream; the special streams report (0, 0).
    pub fn stream_info(&self, ctx: Option<u64>, stream: u64) -> CuResult<(u32, i32)> {
        self.stream_device(ctx, stream)?;
        Ok(self
            .streams
            .get(&stream)
            .map(|s| (s.flags, s.priority))
            .unwrap_or((0, 0)))
    }

    /// Context of a stream (the current one for the special streams).
    pub fn stream_ctx(&self, ctx: Option<u64>, stream: u64) -> CuResult<u64> {
        self.stream_device(ctx, stream)?;
        match self.streams.get(&stream) {
            Some(s) => Ok(s.ctx),
            None => ctx.ok_or(CuError::INVALID_CONTEXT),
        }
    }

    // ---- events ---------------------------------------------------------------------

    pub fn event_create(&mut self, ctx: Option<u64>, flags: u32) -> CuResult<u64> {
        let ctx = ctx.ok_or(CuError::INVALID_CONTEXT)?;
        self.ctx_device(ctx)?;
        if flags & !0x7 != 0 {
            return Err(CuError::INVALID_VALUE);
        }
        // CU_EVENT_INTERPROCESS requires CU_EVENT_DISABLE_TIMING
        if flags & 0x4 != 0 && flags & 0x2 == 0 {
            return Err(CuError::INVALID_VALUE);
        }
        let h = make_handle(TAG_EVENT, self.fresh_id());
        self.events.insert(
            h,
            Event {
                ctx,
                flags,
                recorded: None,
            },
        );
        Ok(h)
    }

    pub fn event_destroy(&mut self, event: u64) -> CuResult<()> {
        self.events
            .remove(&event)
            .map(|_| ())
            .ok_or(CuError::INVALID_HANDLE)
    }

    pub fn event_record(&mut self, ctx: Option<u64>, event: u64, stream: u64) -> CuResult<()> {
        if !self.events.contains_key(&event) {
            return Err(CuError::INVALID_HANDLE);
        }
        self.stream_device(ctx, stream)?;
        if let Some(e) = self.events.get_mut(&event) {
            e.recorded = Some(Instant::now());
        }
        Ok(())
    }

    /// Waiting on or querying an event: all simulated work is already complete.
    pub fn event_check(&mut self, event: u64, synchronize: bool) -> CuResult<()> {
        let e = self.events.get(&event).ok_or(CuError::INVALID_HANDLE)?;
        if synchronize && e.recorded.is_some() {
            if let Ok(d) = self.ctx_device(e.ctx) {
                self.synchronize_device(d);
            }
        }
        Ok(())
    }

    pub fn stream_wait_event(&self, ctx: Option<u64>, stream: u64, event: u64) -> CuResult<()> {
        self.stream_device(ctx, stream)?;
        if self.events.contains_key(&event) {
            Ok(())
        } else {
            Err(CuError::INVALID_HANDLE)
        }
    }

    /// Milliseconds between two recorded events with timing enabled.
    pub fn event_elapsed(&self, start: u64, end: u64) -> CuResult<f32> {
        let s = self.events.get(&start).ok_or(CuError::INVALID_HANDLE)?;
        let e = self.events.get(&end).ok_or(CuError::INVALID_HANDLE)?;
        if s.flags & 0x2 != 0 || e.flags & 0x2 != 0 {
            return Err(CuError::INVALID_HANDLE);
        }
        match (s.recorded, e.recorded) {
            (Some(a), Some(b)) => {
                let ms = if b >= a {
                    (b - a).as_secs_f64() * 1e3
                } else {
                    -((a - b).as_secs_f64() * 1e3)
                };
                Ok(ms as f32)
            }
            _ => Err(CuError::INVALID_HANDLE),
        }
    }
}

/// The physical devices a process sees, in CUDA ordinal order, from `CUDA_VISIBLE_DEVICES`
/// as the driver reads it: a comma-separated list of indices or `GPU-` uuid prefixes; the
/// first entry that names no device (or one already listed) ends the list, so `""` and
/// `"-1"` hide every device.
pub fn visible_devices(count: usize, var: Option<&str>) -> Vec<usize> {
    let Some(var) = var else {
        return (0..count).collect();
    };
    let mut out: Vec<usize> = Vec::new();
    for tok in var.split(',') {
        let tok = tok.trim();
        let found = if let Ok(i) = tok.parse::<i64>() {
            usize::try_from(i).ok().filter(|&i| i < count)
        } else if tok.len() > 4 && tok.starts_with("GPU-") {
            let hits: Vec<usize> = (0..count)
                .filter(|&p| crate::ident::uuid_string(p).starts_with(tok))
                .collect();
            (hits.len() == 1).then(|| hits[0])
        } else {
            None
        };
        match found {
            Some(p) if !out.contains(&p) => out.push(p),
            _ => break,
        }
    }
    out
}
