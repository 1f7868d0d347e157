//! The shapes a hook can have: guard, call the real function, record.
//!
//! Allocations are recorded *after* the real call returns (with the driver's result, so
//! failures are events too); frees, unmaps and releases claim their place in the global
//! order *before* the real call, so an address can never be seen reused before it was
//! seen freed. Every recording step runs inside [`protect`]: a bug turns the probe off
//! instead of unwinding into the host program.

use core::ffi::c_int;

use fragprobe_wire::format::{Api, EventKind, Flags, Record, DEVICE_UNKNOWN};
use fragprobe_wire::live::{LiveClass, LiveEntry};
use fragprobe_wire::ring::Ring;

use crate::clock;
use crate::thread::Guard;
use crate::{device, state};

/// What a hook saw, before the common fields are filled in.
#[derive(Clone, Copy, Default)]
pub struct Seen {
    /// Device pointer, VA or handle.
    pub addr: u64,
    /// Bytes.
    pub size: u64,
    /// Kind-dependent (see the format's EventKind table).
    pub aux: u64,
    /// Kind-dependent.
    pub aux2: u64,
    /// Device ordinal, or `None` to ask the current context.
    pub device: Option<i16>,
    /// Extra flag bits.
    pub flags: u16,
}

/// Runs recording code; a panic turns the probe off rather than unwinding into the host.
#[inline]
pub fn protect(f: impl FnOnce()) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
        state::disable(
            b"fragprobe: internal error while recording; probe turned off, calls pass through\n",
        );
    }
}

/// When and on which thread: the record's timestamp, the call's duration, the thread id.
#[derive(Clone, Copy)]
struct When {
    ts: u64,
    dur: u64,
    tid: u32,
}

impl When {
    #[inline]
    fn after(start: clock::Start, g: &Guard) -> When {
        let (ts, dur) = clock::stop(start);
        When {
            ts,
            dur,
            tid: g.tid(),
        }
    }
}

#[inline]
fn build(kind: EventKind, api: Api, s: &Seen, device: i16, result: c_int, w: When) -> Record {
    let dur = w.dur;
    let mut flags = s.flags;
    if dur > u32::MAX as u64 {
        flags |= Flags::DUR_SATURATED;
    }
    Record {
        seq: 0,
        ts_ns: w.ts,
        addr: s.addr,
        size: s.size,
        aux: s.aux,
        aux2: s.aux2,
        pid: state::pid(),
        tid: w.tid,
        result: result as u32,
        dur_ns: dur.min(u32::MAX as u64) as u32,
        kind: kind as u16,
        api: api as u16,
        device,
        flags,
        meta: 0,
    }
}

/// Pushes `rec`; on success inserts `live` into the live table under the record's seq.
fn push_with_live(ring: &Ring, rec: Record, live: Option<(u64, LiveClass)>) {
    match ring.try_claim() {
        Ok(c) => {
            if let Some((key, class)) = live {
                ring.live()
                    .insert(key, class, rec.device, rec.size, rec.aux, rec.aux2, c.seq());
            }
            c.commit(rec);
        }
        Err(_full) => {
            // Dropped (ring full): the live table still learns of it, so a resync is exact;
            // `_full` counts the drop when it goes out of scope, after the update.
            if let Some((key, class)) = live {
                ring.live().insert(
                    key,
                    class,
                    rec.device,
                    rec.size,
                    rec.aux,
                    rec.aux2,
                    fragprobe_wire::live::SEQ_DROPPED,
                );
            }
        }
    }
}

/// An allocation-like call. `seen(result)` reads what the call produced.
#[inline]
pub fn alloc(
    api: Api,
    kind: EventKind,
    class: Option<LiveClass>,
    call: impl FnOnce() -> c_int,
    seen: impl FnOnce(c_int) -> Seen,
) -> c_int {
    let Some(g) = Guard::enter() else {
        return call();
    };
    let t0 = clock::start();
    let r = call();
    let w = When::after(t0, &g);
    if let Some(ring) = state::ring() {
        protect(|| {
            let s = seen(r);
            let dev = s.device.unwrap_or_else(|| device::current_cached(&g));
            device::describe(ring, dev);
            if r != 0 {
                // The verdict of a failed allocation needs the driver's free bytes now.
                device::sample(ring, w.ts, true);
            }
            let rec = build(kind, api, &s, dev, r, w);
            let live = class.filter(|_| r == 0 && s.addr != 0).map(|c| (s.addr, c));
            push_with_live(ring, rec, live);
            device::maybe_sample(ring, w.ts);
        });
    }
    r
}

/// A free-like call on `key`: the event takes its place in the order before the real call.
/// `classes` are the live-table classes `key` may be in, tried in order.
#[inline]
pub fn free(
    api: Api,
    kind: EventKind,
    classes: &[LiveClass],
    key: u64,
    aux: u64,
    call: impl FnOnce() -> c_int,
) -> c_int {
    let Some(g) = Guard::enter() else {
        return call();
    };
    let Some(ring) = state::ring() else {
        return call();
    };
    let claim = ring.try_claim();
    let mut entry: Option<LiveEntry> = None;
    protect(|| entry = classes.iter().find_map(|c| ring.live().remove(key, *c)));
    // A drop is counted once the table no longer holds the entry.
    let claim = claim.ok();
    let t0 = clock::start();
    let r = call();
    let w = When::after(t0, &g);
    protect(|| {
        if r != 0 {
            if let Some(e) = entry {
                ring.live()
                    .insert(e.key, e.class, e.device, e.size, e.aux, e.aux2, e.seq);
            }
        }
        let s = Seen {
            addr: key,
            size: entry.map_or(0, |e| e.size),
            aux,
            device: entry.map(|e| e.device),
            ..Seen::default()
        };
        let dev = s.device.unwrap_or(DEVICE_UNKNOWN);
        let rec = build(kind, api, &s, dev, r, w);
        if let Some(c) = claim {
            c.commit(rec);
        }
    });
    r
}

/// `cuMemUnmap`: removes every mapping that starts inside `[va, va + size)`.
#[inline]
pub fn unmap(api: Api, va: u64, size: u64, call: impl FnOnce() -> c_int) -> c_int {
    let Some(g) = Guard::enter() else {
        return call();
    };
    let Some(ring) = state::ring() else {
        return call();
    };
    let claim = ring.try_claim();
    let mut removed = [None::<LiveEntry>; 8];
    let mut n = 0;
    let mut device = DEVICE_UNKNOWN;
    protect(|| {
        let mut at = va;
        while at < va.saturating_add(size) && n < removed.len() {
            match ring.live().remove(at, LiveClass::Mapping) {
                Some(e) if e.size > 0 => {
                    device = e.device;
                    removed[n] = Some(e);
                    n += 1;
                    at = at.saturating_add(e.size);
                }
                _ => break,
            }
        }
    });
    // A drop is counted once the table no longer holds the mappings.
    let claim = claim.ok();
    let t0 = clock::start();
    let r = call();
    let w = When::after(t0, &g);
    protect(|| {
        if r != 0 {
            for e in removed.iter().flatten() {
                ring.live()
                    .insert(e.key, e.class, e.device, e.size, e.aux, e.aux2, e.seq);
            }
        }
        let s = Seen {
            addr: va,
            size,
            ..Seen::default()
        };
        let rec = build(EventKind::MemUnmap, api, &s, device, r, w);
        if let Some(c) = claim {
            c.commit(rec);
        }
    });
    r
}

/// `cuMemMap`: the device is the handle's (from the live table).
#[inline]
pub fn map(
    api: Api,
    va: u64,
    size: u64,
    offset: u64,
    handle: u64,
    call: impl FnOnce() -> c_int,
) -> c_int {
    alloc(
        api,
        EventKind::MemMap,
        Some(LiveClass::Mapping),
        call,
        |_| {
            let device = state::ring()
                .and_then(|r| r.live().get(handle, LiveClass::Handle))
                .map_or(DEVICE_UNKNOWN, |e| e.device);
            Seen {
                addr: va,
                size,
                aux: handle,
                aux2: offset,
                device: Some(device),
                flags: 0,
            }
        },
    )
}

/// A call recorded after it returns that changes no live state (mem info, trims, imports).
#[inline]
pub fn note(
    api: Api,
    kind: EventKind,
    call: impl FnOnce() -> c_int,
    seen: impl FnOnce(c_int) -> Option<Seen>,
) -> c_int {
    let Some(g) = Guard::enter() else {
        return call();
    };
    let t0 = clock::start();
    let r = call();
    let w = When::after(t0, &g);
    if let Some(ring) = state::ring() {
        protect(|| {
            if let Some(s) = seen(r) {
                let dev = s.device.unwrap_or_else(|| device::current_cached(&g));
                let rec = build(kind, api, &s, dev, r, w);
                push_with_live(ring, rec, None);
            }
        });
    }
    r
}

/// Builds and pushes a record that no program call produced (samples, exit, devices).
pub fn synthetic(ring: &Ring, kind: EventKind, s: &Seen, device: i16, meta: u64) {
    let w = When {
        ts: clock::now_ns(),
        dur: 0,
        tid: crate::thread::tid(),
    };
    let mut rec = build(kind, Api::Probe, s, device, 0, w);
    rec.meta = meta;
    push_with_live(ring, rec, None);
}
