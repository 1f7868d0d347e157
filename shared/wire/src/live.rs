//! The probe's table of what is live right now, kept in the ring's shared memory so that a
//! consumer that attached late or lost events can rebuild an exact map (a *resync*).
//!
//! Lock-free open addressing with linear probing over a fixed, power-of-two number of
//! 48-byte entries. Like the ring, every operation is allocation-free and panic-free and
//! never blocks on another thread for longer than a couple of atomic operations.
//!
//! # Layout
//!
//! ```text
//! header, 64 bytes
//!   0  len        AtomicU64   live entries (approximate while writers are active)
//!   8  overflow   AtomicU32   1 once an insert found the table full (or gave up)
//!  16  lock tags  AtomicU64   counter that makes every LOCKED marker unique
//! entry i at 64 + 48 * i, six AtomicU64:
//!   0  key        EMPTY(0) | LOCKED(tag) | TOMBSTONE | BUSY | the stored key
//!                 (markers other than EMPTY are >= 0xFFFF_FFFF_0000_0000)
//!   8  state      bits 0-7 class, 8-15 flags (1 = key remapped), 16-31 device (i16),
//!                 32-63 version (odd while the fields are being written)
//!  16  size       bytes
//!  24  aux        see LiveClass
//!  32  aux2       see LiveClass
//!  40  seq        ring position of the event that created the entry
//! ```
//!
//! Key 0 and keys at or above `0xFFFF_FFFF_0000_0000` collide with the markers (device
//! addresses never do; opaque handles might): they are stored remapped (0 as 1, the others
//! as `key - 0xFFFF_FFFF_0000_0000 + 2`) with the remapped flag set, and matching compares
//! the flag too.
//! A match requires both key and class: the same number may be live as a device pointer and
//! as a VMM handle at once.
//!
//! # Protocol
//!
//! An entry lives at most 255 slots after its home slot (the *window*, or the whole table
//! when it is smaller), so every lookup is bounded. Invariant: between an entry's home and
//! the entry, no slot is EMPTY.
//!
//! * **insert** scans the window from the key's home to the first EMPTY slot, remembering the
//!   first free (EMPTY or TOMBSTONE) slot. An entry with the same key and class is
//!   overwritten in place (an address that was never seen freed). Otherwise the free slot is
//!   claimed by CAS to BUSY; the slots between home and it are then re-checked from right to
//!   left for EMPTY or LOCKED (a concurrent remove may be emptying them), the fields are
//!   written under the entry's version counter (seqlock) and the real key is published.
//!   No free slot in the window: the insert fails and sets the overflow flag.
//! * **remove** claims the matching entry by CAS key → BUSY and copies it. Then it marks the
//!   slot LOCKED and looks right, up to the next EMPTY slot (within the window), for an entry
//!   whose probe sequence runs through the slot. None: the slot becomes EMPTY, and the
//!   tombstones to its left get the same treatment (cheap: their right neighbour is now
//!   EMPTY). Otherwise (or when a neighbour is held by another thread) it becomes a
//!   TOMBSTONE; the final step is a CAS from the remover's own LOCKED(tag) value. An
//!   inserter that claimed a slot after such a check looked at it meets the LOCKED or EMPTY
//!   slot in its re-check: it starts over on EMPTY, and resolves LOCKED to TOMBSTONE itself
//!   (so the remover's final CAS fails) instead of waiting for the remover, which may be
//!   descheduled. An inserter that claimed its slot before is seen by the check (BUSY or
//!   published). Key words use SeqCst, so these store-then-load arguments hold.
//! * **get / for_each** read an entry as a seqlock reader: key, version, fields, version and
//!   key again; an entry that changed meanwhile is retried a few times, then skipped.
//!   Lookups stop at EMPTY and walk past TOMBSTONE, BUSY and LOCKED.
//!
//! Tombstones therefore remain only where a live entry's probe sequence runs through them
//! (or briefly, after a check lost a race); they are reused by inserts. The table keeps
//! working at any load, with longer probes as it fills: probing wraps around the table, and
//! an insert reports full (`false`, [`LiveTable::overflowed`], the ring's `LIVE_OVERFLOW`
//! flag) only when its window has no free slot. Keep the load under about 50 %
//! (`FRAGPROBE_LIVE_CAPACITY` at 2-4 × the expected live objects; the default 262 144 slots
//! suit up to ~100 000 live objects).
//!
//! # Resync
//!
//! [`resync_records`] turns a snapshot into records ([`resync_records_of`] builds them):
//! `ResyncBegin { seq = aux = W, size = entries }`, one `ResyncEntry` per entry
//! (`addr = key, size, aux, aux2, device, result = class, seq = entry seq`), and
//! `ResyncEnd { seq = aux = E, size = entries }`, where `W` (the watermark) is the ring's
//! tail read just before the scan and `E` the tail after it.
//!
//! * Before the scan it waits (at most [`RESYNC_WAIT`]) until every event claimed below `W`
//!   is committed. A producer updates the live table between claim and commit, so each
//!   such update is then in the table.
//! * Entries with `seq > W` are left out: they were claimed after the scan began and their
//!   records arrive through the ring. An entry whose event was dropped (ring full) carries
//!   [`SEQ_DROPPED`] (always included) or the tail at the time of the drop (never above
//!   `W`, the tail only grows). A producer counts such a drop only after its live-table
//!   update ([`Ring::try_claim`](crate::ring::Ring::try_claim)), so a consumer that saw the
//!   drop finds the update in its scan, and one that did not sees the drop later and
//!   resyncs again.
//! * The consumer puts the resync records into its stream and from then on **skips records
//!   with `seq < W`**: the snapshot already reflects them. (Delivering them instead would
//!   resurrect an object allocated in `[head, W)` whose free was dropped before the scan.)
//! * The model replaces the process's state with the snapshot; an allocation record whose
//!   seq equals the snapshot entry's seq for that object is a duplicate (an entry with
//!   `seq == W`) and is skipped; a free of an object it does not know, with a seq in
//!   `[W, E)`, is benign (the probe removed the entry before the scan reached it). After
//!   `E` it is a real anomaly.
//!
//! Exactness: every object alive at the end is in the snapshot or has its allocation at
//! `seq >= W`, and every free at `seq >= W` is delivered. The one race left is a producer
//! that stalls longer than [`RESYNC_WAIT`] between claim and commit (a free's commit comes
//! after the real call) or dies there: the model may then keep a freed object, or miss a
//! new one, until the next resync.

use core::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

/// Bytes of the live table's header.
pub const LIVE_HEADER: usize = 64;
/// Bytes of one live-table entry.
pub const LIVE_ENTRY_SIZE: usize = 48;
/// The `seq` for an entry whose event was dropped (ring full): always part of a resync.
/// (The ring's tail at the time of the drop works too.)
pub const SEQ_DROPPED: u64 = u64::MAX;

const WORDS: usize = LIVE_ENTRY_SIZE / 8;
const EMPTY: u64 = 0;
const BUSY: u64 = u64::MAX;
const TOMB: u64 = u64::MAX - 1;
/// Key words at or above this are markers: LOCKED(tag) for tags below `TOMB`, then TOMB and
/// BUSY. Keys in this range (and 0) are stored remapped.
const MARKER_BASE: u64 = 0xFFFF_FFFF_0000_0000;
/// Distinct LOCKED values: a lock is identified by its tag, so a stale unlock cannot
/// succeed on a slot that was unlocked and locked again meanwhile.
const LOCK_TAGS: u64 = TOMB - MARKER_BASE;
const FLAG_REMAPPED: u64 = 1;
/// Longest probe sequence: an entry lives at most `MAX_PROBE - 1` slots after its home.
const MAX_PROBE: usize = 256;
/// Attempts before an insert that keeps losing races gives up (and reports overflow).
const RETRIES: usize = 1024;
/// Attempts at a consistent read of one entry before it is skipped as mid-write.
const READ_RETRIES: usize = 8;

/// What kind of object a live entry is (stored in [`LiveEntry::class`] and in resync records'
/// `result` field).
///
/// | class | key | size | aux | aux2 |
/// |---|---|---|---|---|
/// | `Device` | pointer | bytes | pitch or 0 | 0 |
/// | `Managed` | pointer | bytes | attach flags | 0 |
/// | `Async` | pointer | bytes | stream | pool |
/// | `Reservation` | start VA | bytes | alignment | requested address |
/// | `Handle` | physical handle | bytes | location type | allocation flags |
/// | `Mapping` | VA | bytes | handle | offset in handle |
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LiveClass {
    /// `cuMemAlloc` / `cudaMalloc` (plain or pitch).
    Device = 1,
    /// Managed memory.
    Managed = 2,
    /// Stream-ordered allocation.
    Async = 3,
    /// VMM address reservation.
    Reservation = 4,
    /// VMM physical handle.
    Handle = 5,
    /// VMM mapping of a handle into a reservation.
    Mapping = 6,
}

impl LiveClass {
    /// Every class.
    pub const ALL: &'static [LiveClass] = &[
        LiveClass::Device,
        LiveClass::Managed,
        LiveClass::Async,
        LiveClass::Reservation,
        LiveClass::Handle,
        LiveClass::Mapping,
    ];

    /// Decodes a stored class.
    pub fn from_u8(v: u8) -> Option<LiveClass> {
        LiveClass::ALL.iter().copied().find(|c| *c as u8 == v)
    }

    /// Whether the class holds physical memory counted in [`LiveTable::totals`]
    /// (reservations and mappings do not: they only describe address space).
    pub fn holds_memory(self) -> bool {
        matches!(
            self,
            LiveClass::Device | LiveClass::Managed | LiveClass::Async | LiveClass::Handle
        )
    }
}

/// One live object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveEntry {
    /// Address or handle.
    pub key: u64,
    /// What it is.
    pub class: LiveClass,
    /// Device ordinal, -1 when unknown.
    pub device: i16,
    /// Bytes.
    pub size: u64,
    /// See [`LiveClass`].
    pub aux: u64,
    /// See [`LiveClass`].
    pub aux2: u64,
    /// Ring position of the event that created it ([`SEQ_DROPPED`] if it had none).
    pub seq: u64,
}

/// The live table: a view of shared memory (inside a ring, or any zeroed region).
pub struct LiveTable {
    header: *const u8,
    slots: *const AtomicU64,
    cap: usize,
    mask: usize,
}

// SAFETY: all access goes through atomics; the table is designed for concurrent use from
// threads and processes.
unsafe impl Send for LiveTable {}
// SAFETY: see Send.
unsafe impl Sync for LiveTable {}

fn stored_key(key: u64) -> (u64, bool) {
    match key {
        0 => (1, true),
        k if k >= MARKER_BASE => (k - MARKER_BASE + 2, true),
        k => (k, false),
    }
}

fn original_key(stored: u64, remapped: bool) -> Option<u64> {
    match (remapped, stored) {
        (false, k) => Some(k),
        (true, 1) => Some(0),
        (true, k) if (2..=(u64::MAX - MARKER_BASE) + 2).contains(&k) => Some(k - 2 + MARKER_BASE),
        _ => None,
    }
}

fn is_marker(k: u64) -> bool {
    k == EMPTY || k >= MARKER_BASE
}

fn is_locked(k: u64) -> bool {
    (MARKER_BASE..TOMB).contains(&k)
}

fn hash(key: u64, class: LiveClass) -> u64 {
    // splitmix64 finaliser over key and class.
    let mut z = key ^ (class as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn state_word(class: LiveClass, remapped: bool, device: i16, version: u32) -> u64 {
    class as u64
        | (if remapped { FLAG_REMAPPED } else { 0 }) << 8
        | (device as u16 as u64) << 16
        | (version as u64) << 32
}

struct Fields {
    state: u64,
    size: u64,
    aux: u64,
    aux2: u64,
    seq: u64,
}

impl LiveTable {
    /// Bytes a table of `capacity` entries needs (header included).
    pub const fn bytes_for(capacity: usize) -> usize {
        LIVE_HEADER.saturating_add(capacity.saturating_mul(LIVE_ENTRY_SIZE))
    }

    /// A view of the table at `base`. `None` when `capacity` is not a power of two, or
    /// `len` is too small, or `base` is not 8-aligned.
    ///
    /// # Safety
    ///
    /// `base` must be valid for reads and writes of `len` bytes for as long as the table is
    /// used, zero-filled when first used, and accessed by others only through `LiveTable`.
    pub unsafe fn at(base: *mut u8, len: usize, capacity: usize) -> Option<LiveTable> {
        if !capacity.is_power_of_two()
            || len < Self::bytes_for(capacity)
            || base.is_null()
            || !(base as usize).is_multiple_of(8)
        {
            return None;
        }
        Some(LiveTable {
            header: base,
            // SAFETY: LIVE_HEADER < bytes_for(capacity) <= len.
            slots: unsafe { base.add(LIVE_HEADER) } as *const AtomicU64,
            cap: capacity,
            mask: capacity - 1,
        })
    }

    /// Number of entry slots.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    fn len_word(&self) -> &AtomicU64 {
        // SAFETY: offset 0 of the header, 8-aligned, inside the region.
        unsafe { &*(self.header as *const AtomicU64) }
    }

    fn overflow_word(&self) -> &AtomicU32 {
        // SAFETY: offset 8 of the header, 4-aligned, inside the region.
        unsafe { &*(self.header.add(8) as *const AtomicU32) }
    }

    fn tag_word(&self) -> &AtomicU64 {
        // SAFETY: offset 16 of the header, 8-aligned, inside the region.
        unsafe { &*(self.header.add(16) as *const AtomicU64) }
    }

    fn new_lock(&self) -> u64 {
        MARKER_BASE + self.tag_word().fetch_add(1, Ordering::Relaxed) % LOCK_TAGS
    }

    /// Resolves another thread's LOCKED slot to TOMBSTONE (always safe) instead of waiting
    /// for it. Returns the slot's key word afterwards.
    fn force_tomb(&self, i: usize, locked: u64) -> u64 {
        match self.cas(i, locked, TOMB) {
            Ok(_) => TOMB,
            Err(now) => now,
        }
    }

    fn word(&self, slot: usize, w: usize) -> &AtomicU64 {
        // SAFETY: slot is always masked (< cap) and w < WORDS, so the word is inside the
        // region validated by `at`.
        unsafe { &*self.slots.add((slot & self.mask) * WORDS + w) }
    }

    fn key(&self, slot: usize) -> &AtomicU64 {
        self.word(slot, 0)
    }

    fn set_overflow(&self) {
        self.overflow_word().store(1, Ordering::Relaxed);
    }

    /// Adds (or, for an existing key and class, replaces) an entry. `false` when the table is
    /// full around the key's home slot: the overflow flag is set and the entry is not
    /// recorded. Never blocks.
    #[allow(clippy::too_many_arguments)]
    pub fn insert(
        &self,
        key: u64,
        class: LiveClass,
        device: i16,
        size: u64,
        aux: u64,
        aux2: u64,
        seq: u64,
    ) -> bool {
        let (sk, remapped) = stored_key(key);
        let home = hash(key, class) as usize & self.mask;
        'retry: for _ in 0..RETRIES {
            let mut free: Option<(usize, u64)> = None;
            let mut locked: Option<(usize, u64)> = None;
            for step in 0..self.window() {
                let i = (home + step) & self.mask;
                // SeqCst on key words throughout: the reclamation argument (module doc)
                // orders operations on different slots, which needs a single total order.
                let k = self.key(i).load(Ordering::SeqCst);
                if k == EMPTY {
                    free.get_or_insert((i, EMPTY));
                    break;
                } else if k == TOMB {
                    free.get_or_insert((i, TOMB));
                } else if is_locked(k) {
                    locked.get_or_insert((i, k));
                } else if k == sk && self.matches(i, class, remapped) {
                    // Same key and class already live: overwrite in place.
                    if self.cas(i, sk, BUSY).is_err() {
                        continue 'retry;
                    }
                    if !self.matches(i, class, remapped) {
                        self.key(i).store(sk, Ordering::SeqCst);
                        continue 'retry;
                    }
                    self.write_fields(i, class, remapped, device, size, aux, aux2, seq);
                    self.key(i).store(sk, Ordering::SeqCst);
                    return true;
                }
            }
            let Some((i, seen)) = free else {
                if let Some((x, k)) = locked {
                    // A remove is deciding about a slot in our window: rather than wait for
                    // it, make the slot a tombstone, which we can then claim.
                    self.force_tomb(x, k);
                    continue 'retry;
                }
                self.set_overflow();
                return false;
            };
            if self.cas(i, seen, BUSY).is_err() {
                continue 'retry;
            }
            // Re-check the probe sequence right to left: no slot between home and i may be
            // EMPTY, or lookups would stop before reaching i. A LOCKED one might be about to
            // become EMPTY: resolve it to a tombstone ourselves.
            let dist = i.wrapping_sub(home) & self.mask;
            for back in (0..dist).rev() {
                let x = home + back;
                let mut k = self.key(x).load(Ordering::SeqCst);
                if is_locked(k) {
                    k = self.force_tomb(x & self.mask, k);
                }
                if k == EMPTY || is_locked(k) {
                    // Give the slot back as a tombstone (always safe) and start over.
                    self.key(i).store(TOMB, Ordering::SeqCst);
                    continue 'retry;
                }
            }
            self.write_fields(i, class, remapped, device, size, aux, aux2, seq);
            self.len_word().fetch_add(1, Ordering::Relaxed);
            // Publish: readers that see the key (SeqCst load) see the fields.
            self.key(i).store(sk, Ordering::SeqCst);
            return true;
        }
        self.set_overflow();
        false
    }

    /// Slots a probe sequence may span: entries live at most `window() - 1` slots after
    /// their home, which bounds every lookup.
    fn window(&self) -> usize {
        self.cap.min(MAX_PROBE)
    }

    fn cas(&self, i: usize, from: u64, to: u64) -> Result<u64, u64> {
        self.key(i)
            .compare_exchange(from, to, Ordering::SeqCst, Ordering::SeqCst)
    }

    #[allow(clippy::too_many_arguments)]
    fn write_fields(
        &self,
        i: usize,
        class: LiveClass,
        remapped: bool,
        device: i16,
        size: u64,
        aux: u64,
        aux2: u64,
        seq: u64,
    ) {
        // Seqlock writer (we hold the slot BUSY, so we are the only writer): odd version,
        // release fence, fields, even version with release.
        let st = self.word(i, 1);
        let version = (st.load(Ordering::Relaxed) >> 32) as u32;
        let odd = version.wrapping_add(1) | 1;
        st.store(state_word(class, remapped, device, odd), Ordering::Relaxed);
        fence(Ordering::Release);
        self.word(i, 2).store(size, Ordering::Relaxed);
        self.word(i, 3).store(aux, Ordering::Relaxed);
        self.word(i, 4).store(aux2, Ordering::Relaxed);
        self.word(i, 5).store(seq, Ordering::Relaxed);
        st.store(
            state_word(class, remapped, device, odd.wrapping_add(1)),
            Ordering::Release,
        );
    }

    /// Reads the fields of slot `i` consistently, provided its key stays `k`.
    fn read_fields(&self, i: usize, k: u64) -> Option<Fields> {
        for _ in 0..READ_RETRIES {
            let s1 = self.word(i, 1).load(Ordering::Acquire);
            if (s1 >> 32) & 1 == 1 {
                core::hint::spin_loop();
                continue;
            }
            let f = Fields {
                state: s1,
                size: self.word(i, 2).load(Ordering::Relaxed),
                aux: self.word(i, 3).load(Ordering::Relaxed),
                aux2: self.word(i, 4).load(Ordering::Relaxed),
                seq: self.word(i, 5).load(Ordering::Relaxed),
            };
            fence(Ordering::Acquire);
            let s2 = self.word(i, 1).load(Ordering::Relaxed);
            let k2 = self.key(i).load(Ordering::SeqCst);
            if k2 != k {
                return None;
            }
            if s1 == s2 {
                return Some(f);
            }
        }
        None
    }

    fn matches(&self, i: usize, class: LiveClass, remapped: bool) -> bool {
        let s = self.word(i, 1).load(Ordering::Acquire);
        (s & 0xff) as u8 == class as u8 && ((s >> 8) & FLAG_REMAPPED == 1) == remapped
    }

    fn entry(&self, k: u64, f: &Fields) -> Option<LiveEntry> {
        let class = LiveClass::from_u8((f.state & 0xff) as u8)?;
        let remapped = (f.state >> 8) & FLAG_REMAPPED == 1;
        let key = original_key(k, remapped)?;
        Some(LiveEntry {
            key,
            class,
            device: ((f.state >> 16) & 0xffff) as u16 as i16,
            size: f.size,
            aux: f.aux,
            aux2: f.aux2,
            seq: f.seq,
        })
    }

    /// Removes the entry for `key` and `class`, returning it; `None` when there is none.
    pub fn remove(&self, key: u64, class: LiveClass) -> Option<LiveEntry> {
        let (sk, remapped) = stored_key(key);
        let home = hash(key, class) as usize & self.mask;
        'retry: for _ in 0..RETRIES {
            for step in 0..self.window() {
                let i = (home + step) & self.mask;
                let k = self.key(i).load(Ordering::SeqCst);
                if k == EMPTY {
                    return None;
                }
                if k != sk || !self.matches(i, class, remapped) {
                    continue;
                }
                if self.cas(i, sk, BUSY).is_err() {
                    continue 'retry;
                }
                // We own the slot: no writer can change the fields now.
                if !self.matches(i, class, remapped) {
                    self.key(i).store(sk, Ordering::SeqCst);
                    continue 'retry;
                }
                let f = Fields {
                    state: self.word(i, 1).load(Ordering::Acquire),
                    size: self.word(i, 2).load(Ordering::Relaxed),
                    aux: self.word(i, 3).load(Ordering::Relaxed),
                    aux2: self.word(i, 4).load(Ordering::Relaxed),
                    seq: self.word(i, 5).load(Ordering::Relaxed),
                };
                let e = self.entry(sk, &f);
                self.len_word().fetch_sub(1, Ordering::Relaxed);
                self.free_slot(i);
                return e;
            }
            return None;
        }
        None
    }

    /// Frees slot `i`, which the caller holds BUSY: EMPTY when no probe sequence runs
    /// through it (then the tombstones to its left are tried the same way), else TOMBSTONE.
    ///
    /// An inserter may resolve our LOCKED slot to TOMBSTONE meanwhile (see `force_tomb`);
    /// our final CAS then fails and we stop.
    fn free_slot(&self, i: usize) {
        let lock = self.new_lock();
        self.key(i).store(lock, Ordering::SeqCst);
        let mut x = i;
        let mut lock = lock;
        for _ in 0..self.cap {
            let to = if self.has_dependents(x) { TOMB } else { EMPTY };
            if self.cas(x, lock, to).is_err() || to == TOMB {
                return;
            }
            // x is EMPTY now: the tombstone to its left may have lost its last dependent.
            x = x.wrapping_sub(1) & self.mask;
            lock = self.new_lock();
            if self.cas(x, TOMB, lock).is_err() {
                return;
            }
        }
    }

    /// Whether some entry's probe sequence may run through slot `x` (held LOCKED by the
    /// caller): a live entry after `x`, before the next EMPTY slot and within the window,
    /// whose home is at or before `x`. Slots held by others (BUSY, LOCKED) count as maybe.
    fn has_dependents(&self, x: usize) -> bool {
        for d in 1..self.window() {
            let y = (x + d) & self.mask;
            let k = self.key(y).load(Ordering::SeqCst);
            if k == EMPTY {
                return false;
            }
            if k == BUSY || is_locked(k) {
                return true;
            }
            if k == TOMB {
                continue;
            }
            let st = self.word(y, 1).load(Ordering::Acquire);
            if self.key(y).load(Ordering::SeqCst) != k || (st >> 32) & 1 == 1 {
                return true;
            }
            let Some(class) = LiveClass::from_u8((st & 0xff) as u8) else {
                return true;
            };
            let Some(key) = original_key(k, (st >> 8) & FLAG_REMAPPED == 1) else {
                return true;
            };
            let home = hash(key, class) as usize & self.mask;
            if (y.wrapping_sub(home) & self.mask) >= d {
                return true;
            }
        }
        false
    }

    /// The entry for `key` and `class`, if live.
    pub fn get(&self, key: u64, class: LiveClass) -> Option<LiveEntry> {
        let (sk, remapped) = stored_key(key);
        let home = hash(key, class) as usize & self.mask;
        for step in 0..self.window() {
            let i = (home + step) & self.mask;
            let k = self.key(i).load(Ordering::SeqCst);
            if k == EMPTY {
                return None;
            }
            if k != sk {
                continue;
            }
            if let Some(f) = self.read_fields(i, k) {
                let e = self.entry(k, &f);
                if e.is_some_and(|e| e.class == class)
                    && ((f.state >> 8) & FLAG_REMAPPED == 1) == remapped
                {
                    return e;
                }
            }
        }
        None
    }

    /// Calls `f` with every live entry (a snapshot for consumers). Entries being written
    /// during the scan may be skipped.
    pub fn for_each(&self, mut f: impl FnMut(LiveEntry)) {
        for i in 0..self.cap {
            let k = self.key(i).load(Ordering::SeqCst);
            if is_marker(k) {
                continue;
            }
            if let Some(e) = self.read_fields(i, k).and_then(|fl| self.entry(k, &fl)) {
                f(e);
            }
        }
    }

    /// Live entries (approximate while writers are active).
    pub fn len(&self) -> usize {
        self.len_word().load(Ordering::Relaxed) as usize
    }

    /// Whether no entry is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether an insert ever failed because the table was full: resyncs are not exact.
    pub fn overflowed(&self) -> bool {
        self.overflow_word().load(Ordering::Relaxed) != 0
    }

    /// Slots in use by live entries and by tombstones (a scan; for diagnostics: many
    /// tombstones mean long probe sequences).
    pub fn slot_counts(&self) -> (usize, usize) {
        let (mut live, mut tomb) = (0, 0);
        for i in 0..self.cap {
            match self.key(i).load(Ordering::Relaxed) {
                TOMB => tomb += 1,
                k if is_marker(k) => {}
                _ => live += 1,
            }
        }
        (live, tomb)
    }

    /// Count and bytes of entries that hold memory (Device, Managed, Async, Handle), by
    /// scanning the table.
    pub fn totals(&self) -> (u64, u64) {
        let (mut n, mut bytes) = (0u64, 0u64);
        self.for_each(|e| {
            if e.class.holds_memory() {
                n += 1;
                bytes = bytes.saturating_add(e.size);
            }
        });
        (n, bytes)
    }
}

/// The resync records for the ring's live table (see the module documentation), with
/// `ts_ns` set to the consumer's last heartbeat. The consumer puts them into its stream and
/// then skips records whose seq is below the watermark (`ResyncBegin.aux`, the first record).
pub fn resync_records(ring: &crate::ring::Ring) -> Vec<crate::format::Record> {
    resync_records_at(ring, ring.heartbeat_ns())
}

/// Longest a resync waits for the events claimed below its watermark to be committed.
pub const RESYNC_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// Waits until every event claimed below `watermark` is committed, so its live-table update
/// is in the table before the scan; at most [`RESYNC_WAIT`] (a producer that stalls longer,
/// or died, between claim and commit leaves the race described in the module documentation).
fn wait_committed(ring: &crate::ring::Ring, watermark: u64) {
    let start = std::time::Instant::now();
    while !ring.committed_below(watermark) && start.elapsed() < RESYNC_WAIT {
        std::thread::yield_now();
    }
}

/// [`resync_records`] with an explicit timestamp for the records.
pub fn resync_records_at(ring: &crate::ring::Ring, ts_ns: u64) -> Vec<crate::format::Record> {
    let watermark = ring.tail();
    wait_committed(ring, watermark);
    let mut entries = Vec::new();
    ring.live().for_each(|e| {
        if e.seq == SEQ_DROPPED || e.seq <= watermark {
            entries.push(e);
        }
    });
    let end = ring.tail();
    resync_records_of(ring.pid(), ts_ns, watermark, end, &entries)
}

/// The resync records of process `pid` for `entries` (a live table's contents): a
/// `ResyncBegin` (seq and aux `watermark`, size the entry count), one `ResyncEntry` per
/// entry, a `ResyncEnd` (seq and aux `end`), all stamped `ts_ns`. The one place these
/// records are built: the recorder's resync and `watch`'s per-process figures both use it.
pub fn resync_records_of(
    pid: u32,
    ts_ns: u64,
    watermark: u64,
    end: u64,
    entries: &[LiveEntry],
) -> Vec<crate::format::Record> {
    use crate::format::{Api, EventKind, Record, DEVICE_UNKNOWN};
    let n = entries.len() as u64;
    let marker = |kind: EventKind, seq: u64| Record {
        seq,
        ts_ns,
        size: n,
        aux: seq,
        pid,
        kind: kind as u16,
        api: Api::Consumer as u16,
        device: DEVICE_UNKNOWN,
        ..Record::default()
    };
    let mut out = Vec::with_capacity(entries.len() + 2);
    out.push(marker(EventKind::ResyncBegin, watermark));
    out.extend(entries.iter().map(|e| Record {
        seq: e.seq,
        ts_ns,
        addr: e.key,
        size: e.size,
        aux: e.aux,
        aux2: e.aux2,
        pid,
        result: e.class as u32,
        kind: EventKind::ResyncEntry as u16,
        api: Api::Consumer as u16,
        device: e.device,
        ..Record::default()
    }));
    out.push(marker(EventKind::ResyncEnd, end));
    out
}
