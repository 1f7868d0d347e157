//! The shared-memory ring: many producer threads (the probe, inside the profiled process)
//! and one consumer (the `fragprobe` CLI or viewer, in another process).
//!
//! Everything on the producer path is allocation-free, lock-free, panic-free and does no
//! file I/O, so it can run inside an `LD_PRELOAD` hook. The ring lives in a file that the
//! probe creates (`<dir>/<pid>.ring`, see [`default_ring_dir`]) and maps `MAP_SHARED`; the
//! consumer maps the same file (see `RingFile` with the `consumer` feature).
//!
//! # Layout
//!
//! All integers little-endian. Offsets in bytes from the start of the file.
//!
//! ```text
//! header, 320 bytes (HEADER_LEN)
//!   0  magic        [u8; 8]  b"FRAGRING"  (written last by init, so an attacher that sees
//!                                          it sees a complete header)
//!   8  version      u32      FORMAT_VERSION
//!  12  header_len   u32      320: offset of the slot-state array
//!  16  capacity     u32      records, a power of two, 8 ..= 2^24
//!  20  record_size  u32      80 (RECORD_SIZE)
//!  24  meta_bytes   u32      size of the meta area, a multiple of 64
//!  28  live_cap     u32      live-table slots, a power of two, 8 ..= 2^24
//!  32  pid          u32      the producing process
//!  36  reserved     u32      0
//!  40  start_ns     u64      CLOCK_MONOTONIC ns when the ring was created
//!  48  flags        AtomicU32  EXITED=1 LIVE_OVERFLOW=2 CONSUMER_ATTACHED=4 RESYNC_REQUESTED=8
//!  52  reserved     u32
//!  56  heartbeat    AtomicU64  consumer's CLOCK_MONOTONIC ns, written while it is attached
//!  64  tail         AtomicU64  producers' claim position             (own cache line)
//! 128  head         AtomicU64  consumer's position                   (own cache line)
//! 192  dropped      AtomicU64  events refused because the ring was full (own cache line)
//! 200  skipped      AtomicU64  claimed slots the consumer gave up on (skip_pending)
//! 256  meta cursor  AtomicU64  bytes used in the meta area           (own cache line)
//! 320  state        [AtomicU64; capacity]   slot states, see below
//!  +   records      [Record; capacity]       80 bytes each, stored as 10 AtomicU64
//!  +   meta area    [u8; meta_bytes]         metadata entries, 8-byte aligned
//!  +   live table   64-byte header + [48-byte entry; live_cap]  (see crate::live)
//! ```
//!
//! Every area starts on a 64-byte boundary.
//!
//! # Algorithm
//!
//! A bounded queue after Dmitry Vyukov's MPMC design, specialised to one consumer. Each slot
//! has a state word; `state[i]` starts as `i`. For the slot at position `pos`
//! (`index = pos & (capacity - 1)`):
//!
//! * `state == pos`: free for position `pos` (or claimed and not yet committed, when
//!   `tail > pos`);
//! * `state == pos + 1`: record for `pos` committed, waiting for the consumer;
//! * `state == pos + capacity`: consumed, free for position `pos + capacity`;
//! * `state < pos` seen by a producer: the slot still holds last lap's record: the ring is
//!   full; the event is dropped and counted, the producer never waits.
//!
//! A record's `seq` is its position, so the consumer sees contiguous sequence numbers; a gap
//! means the consumer skipped a slot whose producer died between claim and commit
//! ([`Ring::skip_pending`]). Events refused because the ring was full get no position: they
//! are counted in [`Ring::dropped`] ([`Ring::claim`] at once; [`Ring::try_claim`] when the
//! producer drops the refusal, after its live-table update).
//!
//! The consumer must treat record contents defensively: after a skip, a producer that was
//! merely stalled (not dead) may still write into the slot and tear the next lap's record.
//! Check `kind` and the fields you rely on. Records of kind 0 are *void*: a claim dropped
//! without commit (see [`Claim`]); they carry no event.
//!
//! # Consumer protocol
//!
//! One consumer per ring ([`Ring::acquire_consumer`], heartbeat while attached). Loop:
//! [`Ring::drain_until_drop`] with the drop count already accounted for; when
//! [`Ring::dropped`] grew, write a `Loss` record and a resync
//! ([`resync_records`](crate::live::resync_records)), then skip records whose seq is below
//! the resync's watermark (`ResyncBegin.aux`). On [`DrainEnd::Pending`] wait; give up with
//! [`Ring::skip_pending`] only when the producer is dead or stuck for long (a loss too:
//! write `Loss` and resync). A consumer that attaches late resyncs first, the same way.
//!
//! # Metadata
//!
//! [`Ring::write_meta`] appends an already-encoded entry (from [`MetaWriter`]) to the meta
//! area and returns `offset + 1`, which goes into [`Record::meta`]. The entry's length word is
//! written last with release ordering, so a reader that finds a non-zero length sees the whole
//! entry. Write the metadata before pushing the record that refers to it.
//!
//! [`MetaWriter`]: crate::format::MetaWriter

use core::fmt;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::format::{check_version, Record, VersionError, FORMAT_VERSION, RECORD_SIZE};
use crate::live::LiveTable;

#[cfg(feature = "consumer")]
mod fault;
#[cfg(feature = "consumer")]
mod file;
#[cfg(feature = "consumer")]
pub use file::{
    fs_space, list_rings, monotonic_ns, process_exists, ring_dirs, user_ring_dirs, RingFile,
    RingFileError, RingInfo,
};

/// The ring file's magic.
pub const MAGIC: [u8; 8] = *b"FRAGRING";
/// Length of the ring header; the slot-state array starts here.
pub const HEADER_LEN: usize = 320;

/// Ring flag: the producing process has exited (its probe wrote the exit record).
pub const EXITED: u32 = 1;
/// Ring flag: the live table was full at least once; resyncs are not exact.
pub const LIVE_OVERFLOW: u32 = 2;
/// Ring flag: a consumer is attached and heartbeating.
pub const CONSUMER_ATTACHED: u32 = 4;
/// Ring flag: the consumer asks for a resync (set by the consumer, cleared when done).
pub const RESYNC_REQUESTED: u32 = 8;

/// Smallest ring capacity, in records.
pub const MIN_CAPACITY: u32 = 8;
/// Largest ring capacity, in records (2^24 records = 1.4 GiB).
pub const MAX_CAPACITY: u32 = 1 << 24;
/// Smallest live table.
pub const MIN_LIVE_CAPACITY: u32 = 8;
/// Largest live table (2^24 entries = 768 MiB).
pub const MAX_LIVE_CAPACITY: u32 = 1 << 24;

const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = 8;
const OFF_HEADER_LEN: usize = 12;
const OFF_CAPACITY: usize = 16;
const OFF_RECORD_SIZE: usize = 20;
const OFF_META_BYTES: usize = 24;
const OFF_LIVE_CAPACITY: usize = 28;
const OFF_PID: usize = 32;
const OFF_START_NS: usize = 40;
const OFF_FLAGS: usize = 48;
const OFF_HEARTBEAT: usize = 56;
const OFF_TAIL: usize = 64;
const OFF_HEAD: usize = 128;
const OFF_DROPPED: usize = 192;
const OFF_SKIPPED: usize = 200;
const OFF_META_CURSOR: usize = 256;

const WORDS: usize = RECORD_SIZE / 8;

/// The sizes of a ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingConfig {
    /// Records; a power of two in [`MIN_CAPACITY`]`..=`[`MAX_CAPACITY`].
    pub capacity: u32,
    /// Bytes of metadata space; a multiple of 64.
    pub meta_bytes: u32,
    /// Live-table slots; a power of two in [`MIN_LIVE_CAPACITY`]`..=`[`MAX_LIVE_CAPACITY`].
    pub live_capacity: u32,
}

impl RingConfig {
    /// 1 048 576 records, 64 KiB of metadata, 262 144 live-table slots (about 101 MiB).
    ///
    /// The records hold a whole burst: 16 threads × 33 000 alloc/free pairs on 2 cores
    /// (1.06 M events in 0.3 s) outrun any consumer that shares those cores, and one drop
    /// costs the ring's unread records (the resync starts at the tail). At 65 536 that
    /// load lost 87–93 % of its events, at 524 288 it lost half the ring in 1 run of 5, at
    /// 1 048 576 none.
    pub const DEFAULT: RingConfig = RingConfig {
        capacity: 1 << 20,
        meta_bytes: 64 * 1024,
        live_capacity: 262144,
    };

    /// Bytes of file (or memory) a ring of this configuration needs.
    pub fn file_len(&self) -> usize {
        let cap = self.capacity as usize;
        let live_off = align64(HEADER_LEN + cap * 8 + cap * RECORD_SIZE + self.meta_bytes as usize);
        live_off + LiveTable::bytes_for(self.live_capacity as usize)
    }

    /// Builds a configuration from the `FRAGPROBE_RING_CAPACITY` / `FRAGPROBE_LIVE_CAPACITY`
    /// values (already parsed): `None` keeps the default; values are rounded up to a power of
    /// two and clamped to the allowed range, so any input gives a valid configuration.
    pub fn from_env_values(capacity: Option<u64>, live: Option<u64>) -> RingConfig {
        let fit = |v: Option<u64>, default: u32, min: u32, max: u32| -> u32 {
            match v {
                None => default,
                Some(v) => {
                    let v = v.clamp(min as u64, max as u64);
                    // v <= 2^24 here, so next_power_of_two cannot overflow.
                    v.next_power_of_two().min(max as u64) as u32
                }
            }
        };
        RingConfig {
            capacity: fit(capacity, Self::DEFAULT.capacity, MIN_CAPACITY, MAX_CAPACITY),
            meta_bytes: Self::DEFAULT.meta_bytes,
            live_capacity: fit(
                live,
                Self::DEFAULT.live_capacity,
                MIN_LIVE_CAPACITY,
                MAX_LIVE_CAPACITY,
            ),
        }
    }

    fn check(&self) -> Result<(), RingError> {
        let pow2 = |v: u32, min: u32, max: u32| v.is_power_of_two() && v >= min && v <= max;
        if !pow2(self.capacity, MIN_CAPACITY, MAX_CAPACITY) {
            return Err(RingError::BadGeometry(
                "capacity must be a power of two in 8..=2^24",
            ));
        }
        if !pow2(self.live_capacity, MIN_LIVE_CAPACITY, MAX_LIVE_CAPACITY) {
            return Err(RingError::BadGeometry(
                "live table capacity must be a power of two in 8..=2^24",
            ));
        }
        if !self.meta_bytes.is_multiple_of(64) {
            return Err(RingError::BadGeometry(
                "meta area size must be a multiple of 64",
            ));
        }
        Ok(())
    }
}

const fn align64(v: usize) -> usize {
    (v + 63) & !63
}

/// Why a ring could not be created or attached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RingError {
    /// The region is smaller than the ring it should hold.
    TooSmall {
        /// Bytes the ring needs.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// The region does not start with the ring magic: not a fragprobe ring (or not yet
    /// initialised).
    BadMagic,
    /// The ring was written by another format version.
    Version(VersionError),
    /// The header describes an impossible ring (corrupt or hand-made).
    BadGeometry(&'static str),
}

impl fmt::Display for RingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RingError::TooSmall { need, have } => write!(
                f,
                "ring region is {have} bytes but the ring needs {need}: the file was cut short or is still being created"
            ),
            RingError::BadMagic => write!(
                f,
                "not a fragprobe ring (no FRAGRING magic): the file is not a ring, or its producer has not finished creating it"
            ),
            RingError::Version(e) => fmt::Display::fmt(e, f),
            RingError::BadGeometry(why) => write!(f, "corrupt ring header: {why}"),
        }
    }
}

impl std::error::Error for RingError {}

impl From<VersionError> for RingError {
    fn from(e: VersionError) -> RingError {
        RingError::Version(e)
    }
}

/// What [`Ring::pop`] found at the consumer's position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pop {
    /// The next record (consumed).
    Record(Record),
    /// Nothing claimed yet.
    Empty,
    /// A producer claimed position `seq` but has not committed it yet. Wait; if its process
    /// is dead (or the wait is unreasonably long), give up with [`Ring::skip_pending`].
    Pending {
        /// The position that is waiting.
        seq: u64,
    },
}

/// Why [`Ring::drain`] stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DrainEnd {
    /// Everything committed was consumed.
    Empty,
    /// Position `seq` is claimed but not committed (see [`Pop::Pending`]).
    Pending {
        /// The position that is waiting.
        seq: u64,
    },
    /// `max` records were delivered; more may be waiting.
    Max,
}

/// What [`Ring::drain`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainStatus {
    /// Records delivered.
    pub count: usize,
    /// Why it stopped.
    pub end: DrainEnd,
}

/// A ring mapped in this process. It does not own the memory: see [`Ring::init`] and
/// [`Ring::attach`] for what the caller guarantees.
pub struct Ring {
    base: *mut u8,
    len: usize,
    cap: u64,
    mask: u64,
    states: *const AtomicU64,
    records: *const AtomicU64,
    meta: *mut u8,
    meta_bytes: usize,
    live: LiveTable,
}

// SAFETY: Ring is a view of shared memory accessed only through atomics (and, for the meta
// area, through byte copies guarded by an atomic length word); all its methods take &self
// and are designed for concurrent use from many threads and processes.
unsafe impl Send for Ring {}
// SAFETY: see Send above.
unsafe impl Sync for Ring {}

impl fmt::Debug for Ring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ring")
            .field("pid", &self.pid())
            .field("capacity", &self.cap)
            .field("tail", &self.tail())
            .field("head", &self.head())
            .field("dropped", &self.dropped())
            .field("flags", &self.flags())
            .finish()
    }
}

impl Ring {
    /// Initialises a ring in a zeroed region (a freshly `ftruncate`d file mapped
    /// `MAP_SHARED`, or zeroed memory).
    ///
    /// # Safety
    ///
    /// `base` must be valid for reads and writes of `len` bytes, 8-byte aligned, zero-filled,
    /// not accessed by anyone else during `init`, and must stay mapped for as long as the
    /// returned `Ring` (or any `Ring` attached to it) is used. Other processes may map the
    /// same memory and access it only through `Ring`.
    pub unsafe fn init(
        base: *mut u8,
        len: usize,
        cfg: &RingConfig,
        pid: u32,
        start_ns: u64,
    ) -> Result<Ring, RingError> {
        cfg.check()?;
        let need = cfg.file_len();
        if len < need {
            return Err(RingError::TooSmall { need, have: len });
        }
        if base.is_null() || !(base as usize).is_multiple_of(8) {
            return Err(RingError::BadGeometry("ring memory must be 8-byte aligned"));
        }
        // SAFETY: the caller guarantees base..base+len is valid, exclusively ours and aligned;
        // every offset written below is inside the header (HEADER_LEN <= need <= len).
        unsafe {
            put_u32(base, OFF_VERSION, FORMAT_VERSION);
            put_u32(base, OFF_HEADER_LEN, HEADER_LEN as u32);
            put_u32(base, OFF_CAPACITY, cfg.capacity);
            put_u32(base, OFF_RECORD_SIZE, RECORD_SIZE as u32);
            put_u32(base, OFF_META_BYTES, cfg.meta_bytes);
            put_u32(base, OFF_LIVE_CAPACITY, cfg.live_capacity);
            put_u32(base, OFF_PID, pid);
            put_u64(base, OFF_START_NS, start_ns);
        }
        // SAFETY: geometry was checked against len above; the caller's guarantees carry over.
        let ring = unsafe { Ring::view(base, len, cfg)? };
        for i in 0..ring.cap {
            ring.state(i).store(i, Ordering::Relaxed);
        }
        // The magic goes last, with release ordering: an attacher that reads it (acquire)
        // sees the whole header and the initial slot states.
        // SAFETY: OFF_MAGIC..OFF_MAGIC+8 is inside the header; the word is 8-aligned.
        let magic = unsafe { &*(base.add(OFF_MAGIC) as *const AtomicU64) };
        magic.store(u64::from_le_bytes(MAGIC), Ordering::Release);
        Ok(ring)
    }

    /// Attaches to a ring that a producer initialised (possibly in another process):
    /// validates magic, version and geometry against `len`.
    ///
    /// # Safety
    ///
    /// `base` must be valid for reads and writes of `len` bytes, 8-byte aligned, and stay
    /// mapped for as long as the returned `Ring` is used. Everyone else touching the memory
    /// must do so through `Ring`.
    pub unsafe fn attach(base: *mut u8, len: usize) -> Result<Ring, RingError> {
        if base.is_null() || !(base as usize).is_multiple_of(8) {
            return Err(RingError::BadGeometry("ring memory must be 8-byte aligned"));
        }
        if len < HEADER_LEN {
            return Err(RingError::TooSmall {
                need: HEADER_LEN,
                have: len,
            });
        }
        // SAFETY: len >= HEADER_LEN and base is 8-aligned, so the magic word is readable.
        let magic = unsafe { &*(base.add(OFF_MAGIC) as *const AtomicU64) };
        if magic.load(Ordering::Acquire).to_le_bytes() != MAGIC {
            return Err(RingError::BadMagic);
        }
        // SAFETY: all offsets read below are inside the header, which is readable.
        let (version, header_len, record_size, cfg) = unsafe {
            (
                get_u32(base, OFF_VERSION),
                get_u32(base, OFF_HEADER_LEN),
                get_u32(base, OFF_RECORD_SIZE),
                RingConfig {
                    capacity: get_u32(base, OFF_CAPACITY),
                    meta_bytes: get_u32(base, OFF_META_BYTES),
                    live_capacity: get_u32(base, OFF_LIVE_CAPACITY),
                },
            )
        };
        check_version("ring", version)?;
        if header_len as usize != HEADER_LEN {
            return Err(RingError::BadGeometry("header length is not 320"));
        }
        if record_size as usize != RECORD_SIZE {
            return Err(RingError::BadGeometry("record size is not 80"));
        }
        cfg.check()?;
        let need = cfg.file_len();
        if len < need {
            return Err(RingError::TooSmall { need, have: len });
        }
        // SAFETY: geometry checked against len; the caller's guarantees carry over.
        unsafe { Ring::view(base, len, &cfg) }
    }

    /// Builds the view; geometry must already be checked against `len`.
    ///
    /// # Safety
    ///
    /// As for [`Ring::attach`], and `cfg.file_len() <= len`.
    unsafe fn view(base: *mut u8, len: usize, cfg: &RingConfig) -> Result<Ring, RingError> {
        let cap = cfg.capacity as usize;
        let states_off = HEADER_LEN;
        let records_off = states_off + cap * 8;
        let meta_off = records_off + cap * RECORD_SIZE;
        let live_off = align64(meta_off + cfg.meta_bytes as usize);
        let live_len = len - live_off;
        // SAFETY: every offset is inside base..base+len because cfg.file_len() <= len.
        let live =
            unsafe { LiveTable::at(base.add(live_off), live_len, cfg.live_capacity as usize) }
                .ok_or(RingError::BadGeometry("live table does not fit"))?;
        Ok(Ring {
            base,
            len,
            cap: cap as u64,
            mask: cap as u64 - 1,
            // SAFETY: offsets are in bounds (see above).
            states: unsafe { base.add(states_off) } as *const AtomicU64,
            // SAFETY: offsets are in bounds (see above).
            records: unsafe { base.add(records_off) } as *const AtomicU64,
            // SAFETY: offsets are in bounds (see above).
            meta: unsafe { base.add(meta_off) },
            meta_bytes: cfg.meta_bytes as usize,
            live,
        })
    }

    fn word(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off + 8 <= HEADER_LEN && off.is_multiple_of(8));
        // SAFETY: callers pass constant offsets inside the header, which is inside the
        // mapping; base is 8-aligned.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }

    fn flags_word(&self) -> &AtomicU32 {
        // SAFETY: OFF_FLAGS is a 4-aligned offset inside the header.
        unsafe { &*(self.base.add(OFF_FLAGS) as *const AtomicU32) }
    }

    fn state(&self, pos: u64) -> &AtomicU64 {
        // SAFETY: (pos & mask) < capacity, and the state array holds capacity words.
        unsafe { &*self.states.add((pos & self.mask) as usize) }
    }

    fn slot(&self, pos: u64) -> *const AtomicU64 {
        // SAFETY: (pos & mask) < capacity, and the record area holds capacity records.
        unsafe { self.records.add((pos & self.mask) as usize * WORDS) }
    }

    fn write_slot(&self, pos: u64, rec: &Record) {
        // SAFETY: Record is repr(C), 80 bytes, 8-aligned, without padding, all integer
        // fields: it has the same size and validity as [u64; 10].
        let words: [u64; WORDS] = unsafe { core::mem::transmute(*rec) };
        let slot = self.slot(pos);
        for (i, w) in words.iter().enumerate() {
            // Relaxed: publication is the release CAS on the slot state in `commit_at`.
            // SAFETY: i < WORDS, inside this slot.
            unsafe { &*slot.add(i) }.store(*w, Ordering::Relaxed);
        }
    }

    fn read_slot(&self, pos: u64) -> Record {
        let slot = self.slot(pos);
        let mut words = [0u64; WORDS];
        for (i, w) in words.iter_mut().enumerate() {
            // Relaxed: the caller loaded the slot state with acquire ordering.
            // SAFETY: i < WORDS, inside this slot.
            *w = unsafe { &*slot.add(i) }.load(Ordering::Relaxed);
        }
        // SAFETY: see write_slot: every [u64; 10] is a valid Record.
        unsafe { core::mem::transmute::<[u64; WORDS], Record>(words) }
    }

    // ---------------------------------------------------------------- producer side

    /// Claims the next slot. `None` when the ring is full: the event is counted in
    /// [`Ring::dropped`]. Never blocks (lock-free: it retries only when another producer
    /// made progress).
    #[inline]
    pub fn claim(&self) -> Option<Claim<'_>> {
        // A refusal dropped at once is counted at once.
        self.try_claim().ok()
    }

    /// [`Ring::claim`] for an event that also updates the live table: when the ring is
    /// full, the drop is counted only when the returned [`Full`] is dropped. A producer
    /// keeps it until its live-table update is done, so a consumer that sees the drop
    /// and resyncs finds that update in the table (see [`crate::live`], Resync).
    #[inline]
    pub fn try_claim(&self) -> Result<Claim<'_>, Full<'_>> {
        let tail = self.word(OFF_TAIL);
        let mut pos = tail.load(Ordering::Relaxed);
        loop {
            // Acquire pairs with the consumer's release store of `pos` into this state
            // (when it consumed last lap's record): its reads of the slot happen before our
            // writes.
            let s = self.state(pos).load(Ordering::Acquire);
            if s == pos {
                // Relaxed is enough: the CAS only decides which producer owns `pos`; the
                // ordering that matters is the acquire above and the release in commit.
                match tail.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        return Ok(Claim {
                            ring: self,
                            pos,
                            done: false,
                        })
                    }
                    Err(now) => pos = now,
                }
            } else if (s.wrapping_sub(pos) as i64) < 0 {
                // The slot still holds (or is still being written for) the previous lap:
                // the ring is full. Give up, never wait; `Full` counts the drop.
                return Err(Full { ring: self });
            } else {
                // Another producer took `pos` already; catch up. Its claim of the tail came
                // before its commit, which the acquire above saw, so the tail has moved. A
                // tail that has not means the ring's memory was overwritten from outside:
                // drop the event rather than spin in the host forever.
                let now = tail.load(Ordering::Relaxed);
                if now == pos {
                    return Err(Full { ring: self });
                }
                pos = now;
            }
        }
    }

    /// Claims a slot and commits `rec` into it (its `seq` is set to the position).
    /// `false` when the ring was full (counted in [`Ring::dropped`]).
    #[inline]
    pub fn push(&self, rec: Record) -> bool {
        match self.claim() {
            Some(c) => {
                c.commit(rec);
                true
            }
            None => false,
        }
    }

    fn commit_at(&self, pos: u64, mut rec: Record) {
        rec.seq = pos;
        self.write_slot(pos, &rec);
        // Release publishes the record words written above to the consumer's acquire load.
        // The CAS fails only if the consumer gave up on this slot (skip_pending): the event
        // was already counted as skipped, so nothing else to do.
        let _ = self.state(pos).compare_exchange(
            pos,
            pos.wrapping_add(1),
            Ordering::Release,
            Ordering::Relaxed,
        );
    }

    /// Appends an encoded metadata entry (the output of
    /// [`MetaWriter`](crate::format::MetaWriter)); returns its reference (`offset + 1`, for
    /// [`Record::meta`]), or `None` when the entry is malformed or does not fit.
    pub fn write_meta(&self, entry: &[u8]) -> Option<u64> {
        if entry.len() < crate::format::META_HEADER {
            return None;
        }
        let declared = u32::from_le_bytes([entry[0], entry[1], entry[2], entry[3]]) as usize;
        if declared < crate::format::META_HEADER || declared > entry.len() {
            return None;
        }
        let padded = (entry.len() + 7) & !7;
        let cursor = self.word(OFF_META_CURSOR);
        let mut off = cursor.load(Ordering::Relaxed);
        loop {
            let end = off.checked_add(padded as u64)?;
            if end > self.meta_bytes as u64 {
                return None;
            }
            // Relaxed: the cursor only hands out disjoint ranges; the entry is published by
            // the release store of its length word below.
            match cursor.compare_exchange_weak(off, end, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => break,
                Err(now) => off = now,
            }
        }
        let off = off as usize;
        // SAFETY: off..off+padded is inside the meta area (checked above) and was handed out
        // to us alone by the cursor CAS; entry.len() <= padded.
        unsafe {
            core::ptr::copy_nonoverlapping(
                entry.as_ptr().add(4),
                self.meta.add(off + 4),
                entry.len() - 4,
            );
        }
        // SAFETY: off is a multiple of 8 inside the meta area, which starts 64-aligned.
        let len_word = unsafe { &*(self.meta.add(off) as *const AtomicU32) };
        len_word.store(declared as u32, Ordering::Release);
        Some(off as u64 + 1)
    }

    /// The probe's live table in this ring.
    pub fn live(&self) -> &LiveTable {
        &self.live
    }

    /// Sets flag bits ([`EXITED`], [`RESYNC_REQUESTED`], ...).
    pub fn set_flag(&self, f: u32) {
        self.flags_word().fetch_or(f, Ordering::AcqRel);
    }

    /// Clears flag bits.
    pub fn clear_flag(&self, f: u32) {
        self.flags_word().fetch_and(!f, Ordering::AcqRel);
    }

    /// The flag bits; [`LIVE_OVERFLOW`] is included when the live table overflowed.
    pub fn flags(&self) -> u32 {
        let f = self.flags_word().load(Ordering::Acquire);
        if self.live.overflowed() {
            f | LIVE_OVERFLOW
        } else {
            f
        }
    }

    /// The producing process.
    pub fn pid(&self) -> u32 {
        // SAFETY: OFF_PID is inside the header; the field is written only by init.
        unsafe { get_u32(self.base, OFF_PID) }
    }

    /// CLOCK_MONOTONIC ns at which the ring was created.
    pub fn start_ns(&self) -> u64 {
        // SAFETY: OFF_START_NS is inside the header; the field is written only by init.
        unsafe { get_u64(self.base, OFF_START_NS) }
    }

    /// The configuration the ring was created with.
    pub fn config(&self) -> RingConfig {
        RingConfig {
            capacity: self.cap as u32,
            meta_bytes: self.meta_bytes as u32,
            live_capacity: self.live.capacity() as u32,
        }
    }

    /// Bytes of the region the ring occupies.
    pub fn region_len(&self) -> usize {
        self.len
    }

    // ---------------------------------------------------------------- consumer side

    /// Takes the next record, if committed. Only one consumer may pop (see
    /// [`Ring::acquire_consumer`]).
    pub fn pop(&self) -> Pop {
        let head = self.word(OFF_HEAD);
        let pos = head.load(Ordering::Relaxed);
        let st = self.state(pos);
        // Acquire pairs with the producer's release CAS in commit: the record words are
        // visible once we see `pos + 1`.
        let s = st.load(Ordering::Acquire);
        if s == pos.wrapping_add(1) {
            let rec = self.read_slot(pos);
            // Release: our reads of the slot happen before the next lap's producer writes.
            st.store(pos.wrapping_add(self.cap), Ordering::Release);
            head.store(pos.wrapping_add(1), Ordering::Release);
            Pop::Record(rec)
        } else if s == pos && self.word(OFF_TAIL).load(Ordering::Acquire) <= pos {
            Pop::Empty
        } else {
            // Claimed and not committed (or an inconsistent state word, e.g. a second
            // consumer popped concurrently): skip_pending can clear it.
            Pop::Pending { seq: pos }
        }
    }

    /// Gives up on position `seq`, claimed by a producer that will never commit it (its
    /// process died). Returns `true` when the slot was skipped: the event is lost (counted
    /// in [`Ring::skipped`]) and the consumer moves on. Returns `false` when `seq` is not the
    /// consumer's position, when it was committed meanwhile (pop it), or when nobody
    /// claimed it.
    pub fn skip_pending(&self, seq: u64) -> bool {
        let head = self.word(OFF_HEAD);
        if head.load(Ordering::Relaxed) != seq {
            return false;
        }
        // Only a claimed slot may be skipped: skipping an unclaimed one would leave a state
        // that no producer accepts for position `seq`.
        if self.word(OFF_TAIL).load(Ordering::Acquire) <= seq {
            return false;
        }
        let st = self.state(seq);
        let s = st.load(Ordering::Acquire);
        if s == seq.wrapping_add(1) {
            return false;
        }
        // AcqRel: a failed race with the producer's commit must be seen as such; on success
        // the release makes the slot reusable for the next lap like a normal pop.
        match st.compare_exchange(
            s,
            seq.wrapping_add(self.cap),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => {
                head.store(seq.wrapping_add(1), Ordering::Release);
                self.word(OFF_SKIPPED).fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(_) => false,
        }
    }

    /// Delivers up to `max` committed records in order to `out`; stops at an empty or
    /// pending slot.
    pub fn drain(&self, max: usize, out: &mut impl FnMut(&Record)) -> DrainStatus {
        let head = self.word(OFF_HEAD);
        let mut pos = head.load(Ordering::Relaxed);
        let mut count = 0;
        while count < max {
            let st = self.state(pos);
            // Acquire/release as in `pop`.
            let s = st.load(Ordering::Acquire);
            if s != pos.wrapping_add(1) {
                let end = if s == pos && self.word(OFF_TAIL).load(Ordering::Acquire) <= pos {
                    DrainEnd::Empty
                } else {
                    DrainEnd::Pending { seq: pos }
                };
                return DrainStatus { count, end };
            }
            let rec = self.read_slot(pos);
            st.store(pos.wrapping_add(self.cap), Ordering::Release);
            pos = pos.wrapping_add(1);
            // Store head before calling out: if `out` panics the ring stays consistent.
            head.store(pos, Ordering::Release);
            out(&rec);
            count += 1;
        }
        DrainStatus {
            count,
            end: DrainEnd::Max,
        }
    }

    /// Like [`Ring::drain`], but stops (with [`DrainEnd::Max`]) before the first record that
    /// may depend on a drop the consumer has not accounted for, i.e. as soon as
    /// [`Ring::dropped`] exceeds `seen_dropped`. The caller then records the loss and resyncs
    /// ([`resync_records`](crate::live::resync_records)) before delivering more, so that, say,
    /// the free of an allocation whose event was dropped comes after the loss marker.
    ///
    /// Why this is enough: a producer increments the drop counter before it commits any
    /// later event, and the consumer reads the counter after acquiring each record, so a
    /// record that happens after a drop (same thread, or synchronised by the program) is
    /// never delivered before the drop is visible.
    pub fn drain_until_drop(
        &self,
        max: usize,
        seen_dropped: u64,
        out: &mut impl FnMut(&Record),
    ) -> DrainStatus {
        let head = self.word(OFF_HEAD);
        let dropped = self.word(OFF_DROPPED);
        let mut pos = head.load(Ordering::Relaxed);
        let mut count = 0;
        while count < max {
            let st = self.state(pos);
            let s = st.load(Ordering::Acquire);
            if s != pos.wrapping_add(1) {
                let end = if s == pos && self.word(OFF_TAIL).load(Ordering::Acquire) <= pos {
                    DrainEnd::Empty
                } else {
                    DrainEnd::Pending { seq: pos }
                };
                return DrainStatus { count, end };
            }
            // After the acquire above: sees every drop that happened before this commit.
            if dropped.load(Ordering::Relaxed) > seen_dropped {
                break;
            }
            let rec = self.read_slot(pos);
            st.store(pos.wrapping_add(self.cap), Ordering::Release);
            pos = pos.wrapping_add(1);
            head.store(pos, Ordering::Release);
            out(&rec);
            count += 1;
        }
        DrainStatus {
            count,
            end: DrainEnd::Max,
        }
    }

    /// Events refused because the ring was full (they have no sequence number).
    pub fn dropped(&self) -> u64 {
        // Acquire pairs with the release in `Full`'s drop: the dropping producer's
        // live-table update is visible to a consumer that sees its drop.
        self.word(OFF_DROPPED).load(Ordering::Acquire)
    }

    /// Whether every position from the consumer's head up to `end` is committed: the
    /// producers of those events are done with them, live-table updates included. A
    /// resync waits for this below its watermark (see [`crate::live`], Resync).
    pub fn committed_below(&self, end: u64) -> bool {
        let mut pos = self.word(OFF_HEAD).load(Ordering::Relaxed);
        while (end.wrapping_sub(pos) as i64) > 0 {
            // Acquire pairs with the producer's release in commit.
            if self.state(pos).load(Ordering::Acquire) != pos.wrapping_add(1) {
                return false;
            }
            pos = pos.wrapping_add(1);
        }
        true
    }

    /// Claimed slots the consumer gave up on with [`Ring::skip_pending`] (sequence gaps).
    pub fn skipped(&self) -> u64 {
        self.word(OFF_SKIPPED).load(Ordering::Relaxed)
    }

    /// Producers' claim position: the next sequence number to be handed out.
    pub fn tail(&self) -> u64 {
        self.word(OFF_TAIL).load(Ordering::Acquire)
    }

    /// The consumer's position: the next sequence number it will deliver.
    pub fn head(&self) -> u64 {
        self.word(OFF_HEAD).load(Ordering::Acquire)
    }

    /// Capacity in records.
    pub fn capacity(&self) -> u64 {
        self.cap
    }

    /// The metadata entry that [`Record::meta`] value `meta_ref` points at (padded to 8
    /// bytes); `None` when the reference is 0, out of range or not yet written. Copy out
    /// what you keep: the producer never rewrites an entry, but the mapping may go away.
    pub fn meta(&self, meta_ref: u64) -> Option<&[u8]> {
        let off = meta_ref.checked_sub(1)? as usize;
        let cursor = self.word(OFF_META_CURSOR).load(Ordering::Acquire) as usize;
        if !off.is_multiple_of(8) || off + crate::format::META_HEADER > cursor.min(self.meta_bytes)
        {
            return None;
        }
        // SAFETY: off is 8-aligned and inside the meta area.
        let len_word = unsafe { &*(self.meta.add(off) as *const AtomicU32) };
        // Acquire pairs with the release store in write_meta: the entry bytes are visible.
        let len = len_word.load(Ordering::Acquire) as usize;
        if len < crate::format::META_HEADER || off + len > self.meta_bytes {
            return None;
        }
        let padded = ((len + 7) & !7).min(self.meta_bytes - off);
        // SAFETY: off..off+padded is inside the meta area and fully written (len word seen).
        Some(unsafe { core::slice::from_raw_parts(self.meta.add(off), padded) })
    }

    /// The meta area up to the cursor. The last entry may still be being written (its
    /// length word is then 0): parse entries in order and stop at a zero length.
    pub fn meta_area(&self) -> &[u8] {
        let cursor = self.word(OFF_META_CURSOR).load(Ordering::Acquire) as usize;
        // SAFETY: the cursor never exceeds meta_bytes (write_meta checks), clamped anyway.
        unsafe { core::slice::from_raw_parts(self.meta, cursor.min(self.meta_bytes)) }
    }

    /// Records the consumer's liveness (CLOCK_MONOTONIC ns).
    pub fn heartbeat(&self, now_ns: u64) {
        self.word(OFF_HEARTBEAT).store(now_ns, Ordering::Release);
    }

    /// The consumer's last heartbeat (0 = never).
    pub fn heartbeat_ns(&self) -> u64 {
        self.word(OFF_HEARTBEAT).load(Ordering::Acquire)
    }

    /// Becomes the ring's one consumer: sets [`CONSUMER_ATTACHED`] and the heartbeat. Fails
    /// while another consumer is attached and heartbeated within `stale_after_ns`; a consumer
    /// whose heartbeat is older is presumed dead and replaced.
    pub fn acquire_consumer(&self, now_ns: u64, stale_after_ns: u64) -> bool {
        let flags = self.flags_word();
        let prev = flags.fetch_or(CONSUMER_ATTACHED, Ordering::AcqRel);
        if prev & CONSUMER_ATTACHED == 0 {
            self.heartbeat(now_ns);
            return true;
        }
        let hb = self.word(OFF_HEARTBEAT);
        let last = hb.load(Ordering::Acquire);
        if now_ns.saturating_sub(last) > stale_after_ns {
            // Take over; the CAS makes sure only one of two racing takers wins.
            return hb
                .compare_exchange(last, now_ns, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
        }
        false
    }

    /// Stops being the consumer (clears [`CONSUMER_ATTACHED`]).
    pub fn release_consumer(&self) {
        self.clear_flag(CONSUMER_ATTACHED);
    }
}

/// A claimed slot. [`Claim::commit`] publishes a record into it; dropping it uncommitted
/// publishes a void record (kind 0) so the consumer never waits on it.
#[must_use = "a claim that is dropped publishes a void record"]
pub struct Claim<'a> {
    ring: &'a Ring,
    pos: u64,
    done: bool,
}

impl Claim<'_> {
    /// The sequence number (ring position) the record will get.
    pub fn seq(&self) -> u64 {
        self.pos
    }

    /// Writes `rec` (with `seq` set to [`Claim::seq`]) and publishes it.
    #[inline]
    pub fn commit(mut self, rec: Record) {
        self.done = true;
        self.ring.commit_at(self.pos, rec);
    }
}

/// A claim refused because the ring was full (see [`Ring::try_claim`]). Dropping it counts
/// the event in [`Ring::dropped`].
#[must_use = "dropping it counts the drop: keep it until the live table is updated"]
pub struct Full<'a> {
    ring: &'a Ring,
}

impl Drop for Full<'_> {
    fn drop(&mut self) {
        // Release: whatever the producer did before (its live-table update) is visible to
        // a consumer that acquires the count.
        self.ring.word(OFF_DROPPED).fetch_add(1, Ordering::Release);
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if !self.done {
            let void = Record {
                pid: self.ring.pid(),
                ..Record::default()
            };
            self.ring.commit_at(self.pos, void);
        }
    }
}

// ---------------------------------------------------------------- ring directory

/// Environment variable that overrides the ring directory.
pub const RING_DIR_ENV: &str = "FRAGPROBE_RING_DIR";

/// The `index`-th candidate ring directory, in order of preference: `$FRAGPROBE_RING_DIR`
/// (when set and non-empty), `$XDG_RUNTIME_DIR/fragprobe` (when set and non-empty),
/// `/dev/shm/fragprobe-<uid>`, `/tmp/fragprobe-<uid>`. Written into `buf` without
/// allocating; `None` past the last candidate or when `buf` is too small.
///
/// The probe creates the directory with mode 0700 and the ring file `<pid>.ring` (see
/// [`ring_file_name`]) with mode 0600, trying the next candidate when one fails.
pub fn ring_dir_candidate<'a>(
    index: usize,
    uid: u32,
    env_override: Option<&[u8]>,
    xdg_runtime: Option<&[u8]>,
    buf: &'a mut [u8],
) -> Option<&'a [u8]> {
    let env = env_override.filter(|v| !v.is_empty());
    let xdg = xdg_runtime.filter(|v| !v.is_empty());
    let mut n = index;
    let mut w = BufWriter { buf, len: 0 };
    if let Some(e) = env {
        if n == 0 {
            w.put(e)?;
            return Some(w.done());
        }
        n -= 1;
    }
    if let Some(x) = xdg {
        if n == 0 {
            w.put(x)?;
            if !x.ends_with(b"/") {
                w.put(b"/")?;
            }
            w.put(b"fragprobe")?;
            return Some(w.done());
        }
        n -= 1;
    }
    let prefix: &[u8] = match n {
        0 => b"/dev/shm/fragprobe-",
        1 => b"/tmp/fragprobe-",
        _ => return None,
    };
    let mut tmp = [0u8; 20];
    w.put(prefix)?;
    w.put(crate::format::fmt_u64(uid as u64, &mut tmp))?;
    Some(w.done())
}

/// The preferred ring directory: [`ring_dir_candidate`] 0.
pub fn default_ring_dir<'a>(
    uid: u32,
    env_override: Option<&[u8]>,
    xdg_runtime: Option<&[u8]>,
    buf: &'a mut [u8],
) -> Option<&'a [u8]> {
    ring_dir_candidate(0, uid, env_override, xdg_runtime, buf)
}

/// The ring file name for `pid`: `<pid>.ring`.
pub fn ring_file_name(pid: u32, buf: &mut [u8]) -> Option<&[u8]> {
    let mut tmp = [0u8; 20];
    let mut w = BufWriter { buf, len: 0 };
    w.put(crate::format::fmt_u64(pid as u64, &mut tmp))?;
    w.put(b".ring")?;
    Some(w.done())
}

/// Whether a file system of `total` bytes, `free` of them still free, should take a ring
/// of `len` bytes (reserved in full): the ring may take at most an eighth of the file
/// system, and must leave a quarter of it or 1 GiB free, whichever is less. `/dev/shm` is
/// shared with the program itself (PyTorch's DataLoader workers and NCCL put their buffers
/// there): in Docker's default 64 MiB, three 18 MiB rings would leave the program nothing.
pub fn room_for_ring(len: u64, total: u64, free: u64) -> bool {
    len <= total / 8 && free >= len && free - len >= (total / 4).min(RING_HEADROOM)
}

/// The most free space [`room_for_ring`] asks a ring to leave.
pub const RING_HEADROOM: u64 = 1 << 30;

/// The suffix of a ring file still being made (`<pid>-<start_ns>.ring.new`): consumers
/// skip it; the probe renames it to `.ring` once it is reserved, mapped and locked.
pub const RING_NEW_SUFFIX: &[u8] = b".new";

/// Parses a ring file name (`<pid>.ring`) back into the pid.
pub fn parse_ring_file_name(name: &[u8]) -> Option<u32> {
    let stem = name.strip_suffix(b".ring")?;
    // `<pid>.ring`, or `<pid>-<start_ns>.ring` as the probe writes it (a process that
    // `exec`s keeps its pid; the start time keeps the two images' rings apart).
    let digits = match stem.iter().position(|&c| c == b'-') {
        Some(i) => {
            let start = &stem[i + 1..];
            if start.is_empty() || !start.iter().all(u8::is_ascii_digit) {
                return None;
            }
            &stem[..i]
        }
        None => stem,
    };
    if digits.is_empty() || digits.len() > 10 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut v: u64 = 0;
    for d in digits {
        v = v * 10 + (d - b'0') as u64;
    }
    u32::try_from(v).ok()
}

struct BufWriter<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl<'a> BufWriter<'a> {
    fn put(&mut self, b: &[u8]) -> Option<()> {
        let end = self.len.checked_add(b.len())?;
        self.buf.get_mut(self.len..end)?.copy_from_slice(b);
        self.len = end;
        Some(())
    }
    fn done(self) -> &'a [u8] {
        let len = self.len;
        &self.buf[..len]
    }
}

// ---------------------------------------------------------------- header access

/// # Safety
/// `base + off .. + 4` must be readable and 4-aligned.
unsafe fn get_u32(base: *const u8, off: usize) -> u32 {
    // SAFETY: guaranteed by the caller; read as an atomic since other processes map it.
    unsafe { &*(base.add(off) as *const AtomicU32) }.load(Ordering::Relaxed)
}

/// # Safety
/// `base + off .. + 8` must be readable and 8-aligned.
unsafe fn get_u64(base: *const u8, off: usize) -> u64 {
    // SAFETY: guaranteed by the caller.
    unsafe { &*(base.add(off) as *const AtomicU64) }.load(Ordering::Relaxed)
}

/// # Safety
/// `base + off .. + 4` must be writable and 4-aligned.
unsafe fn put_u32(base: *mut u8, off: usize, v: u32) {
    // SAFETY: guaranteed by the caller.
    unsafe { &*(base.add(off) as *const AtomicU32) }.store(v, Ordering::Relaxed)
}

/// # Safety
/// `base + off .. + 8` must be writable and 8-aligned.
unsafe fn put_u64(base: *mut u8, off: usize, v: u64) {
    // SAFETY: guaranteed by the caller.
    unsafe { &*(base.add(off) as *const AtomicU64) }.store(v, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_ring_takes_at_most_an_eighth_and_leaves_a_quarter_or_a_gib_free() {
        const MIB: u64 = 1 << 20;
        // Docker's default /dev/shm: no room for the default 18 MiB ring.
        assert!(!room_for_ring(18 * MIB, 64 * MIB, 64 * MIB));
        // A 2 GiB /dev/shm takes it, until a quarter of it would be left.
        assert!(room_for_ring(18 * MIB, 2 << 30, 2 << 30));
        assert!(room_for_ring(18 * MIB, 2 << 30, 512 * MIB + 18 * MIB));
        assert!(!room_for_ring(18 * MIB, 2 << 30, 512 * MIB + 18 * MIB - 1));
        // A big, mostly full disk: 1 GiB left is enough.
        assert!(room_for_ring(18 * MIB, 250 << 30, (1 << 30) + 18 * MIB));
        assert!(!room_for_ring(
            18 * MIB,
            250 << 30,
            (1 << 30) + 18 * MIB - 1
        ));
        // Exactly an eighth is allowed; never more than is free.
        assert!(room_for_ring(8 * MIB, 64 * MIB, 64 * MIB));
        assert!(!room_for_ring(8 * MIB + 1, 64 * MIB, 64 * MIB));
        assert!(!room_for_ring(MIB, 1 << 40, MIB - 1));
        // Nothing needed: any file system with a quarter free.
        assert!(room_for_ring(0, 64 * MIB, 16 * MIB));
    }
    use super::*;

    fn zeroed(cfg: &RingConfig) -> Vec<u64> {
        vec![0u64; cfg.file_len().div_ceil(8)]
    }

    #[test]
    fn layout_is_aligned_and_sized() {
        let cfg = RingConfig::DEFAULT;
        let len = cfg.file_len();
        assert_eq!(len % 64, 0);
        assert!(len > (1 << 20) * 88 + 64 * 1024 + 262144 * 48);
        assert!(len < 102 << 20, "default ring is about 101 MiB, got {len}");
    }

    #[test]
    fn env_values_round_and_clamp() {
        assert_eq!(RingConfig::from_env_values(None, None), RingConfig::DEFAULT);
        let c = RingConfig::from_env_values(Some(1000), Some(3));
        assert_eq!((c.capacity, c.live_capacity), (1024, 8));
        let c = RingConfig::from_env_values(Some(u64::MAX), Some(0));
        assert_eq!(
            (c.capacity, c.live_capacity),
            (MAX_CAPACITY, MIN_LIVE_CAPACITY)
        );
        assert!(c.check().is_ok());
    }

    /// A ring of 8 slots, 128 bytes of metadata and an 8-entry live table, for pid 7
    /// started at 9 ns, in zeroed memory that `f` may not outlive.
    fn with_small_ring(f: impl FnOnce(&Ring)) {
        let cfg = RingConfig {
            capacity: 8,
            meta_bytes: 128,
            live_capacity: 8,
        };
        let mut mem = zeroed(&cfg);
        // SAFETY: mem is zeroed, 8-aligned, large enough and outlives the ring.
        let ring =
            unsafe { Ring::init(mem.as_mut_ptr() as *mut u8, cfg.file_len(), &cfg, 7, 9) }.unwrap();
        f(&ring);
    }

    #[test]
    fn a_ring_overwritten_from_outside_drops_instead_of_spinning() {
        with_small_ring(a_ring_overwritten_from_outside_drops_instead_of_spinning_in);
    }

    fn a_ring_overwritten_from_outside_drops_instead_of_spinning_in(ring: &Ring) {
        assert!(ring.push(Record::default()));
        // Garbage in the next slot's state word, as if the host wrote text into the file:
        // it claims a later lap's commit while the tail has not moved.
        ring.state(1)
            .store(u64::from_le_bytes(*b"FPSCN pi"), Ordering::Relaxed);
        let dropped = ring.dropped();
        assert!(!ring.push(Record::default()), "refused, not spun on");
        assert_eq!(ring.dropped(), dropped + 1, "and counted");
    }

    #[test]
    fn push_pop_and_meta() {
        with_small_ring(push_pop_and_meta_in);
    }

    fn push_pop_and_meta_in(ring: &Ring) {
        assert_eq!((ring.pid(), ring.start_ns()), (7, 9));
        assert_eq!(ring.pop(), Pop::Empty);
        let mut buf = [0u8; 64];
        let mut w = crate::format::MetaWriter::new(&mut buf, crate::format::MetaKind::RunInfo);
        w.field(b"k", b"value");
        let (n, _) = w.finish();
        let r = ring.write_meta(&buf[..n]).unwrap();
        assert_eq!(r, 1);
        let e = crate::format::MetaEntry::parse(ring.meta(r).unwrap()).unwrap();
        assert_eq!(e.get("k"), Some(&b"value"[..]));
        assert!(ring.meta(2).is_none() && ring.meta(0).is_none());
        // 128 bytes of meta: the 24-byte entry fits 5 times in total.
        let refs: Vec<_> = (0..10).map(|_| ring.write_meta(&buf[..n])).collect();
        assert_eq!(refs.iter().filter(|r| r.is_some()).count(), 4);
        assert!(ring.push(Record {
            kind: 1,
            addr: 5,
            meta: r,
            ..Record::default()
        }));
        let c = ring.claim().unwrap();
        assert_eq!(c.seq(), 1);
        assert_eq!(
            ring.pop().clone(),
            Pop::Record(Record {
                kind: 1,
                addr: 5,
                meta: r,
                ..Record::default()
            })
        );
        assert_eq!(ring.pop(), Pop::Pending { seq: 1 });
        drop(c);
        match ring.pop() {
            Pop::Record(v) => assert_eq!((v.seq, v.kind, v.pid), (1, 0, 7)),
            other => panic!("expected the void record, got {other:?}"),
        }
    }

    #[test]
    fn ring_dirs_in_order() {
        let mut buf = [0u8; 256];
        let c = |i, e: Option<&[u8]>, x: Option<&[u8]>, buf: &mut [u8; 256]| {
            ring_dir_candidate(i, 1000, e, x, buf).map(|s| String::from_utf8(s.to_vec()).unwrap())
        };
        assert_eq!(
            c(0, Some(b"/r"), Some(b"/run/user/1000"), &mut buf).unwrap(),
            "/r"
        );
        assert_eq!(
            c(1, Some(b"/r"), Some(b"/run/user/1000/"), &mut buf).unwrap(),
            "/run/user/1000/fragprobe"
        );
        assert_eq!(
            c(2, Some(b"/r"), Some(b"/x"), &mut buf).unwrap(),
            "/dev/shm/fragprobe-1000"
        );
        assert_eq!(
            c(3, Some(b"/r"), Some(b"/x"), &mut buf).unwrap(),
            "/tmp/fragprobe-1000"
        );
        assert_eq!(c(4, Some(b"/r"), Some(b"/x"), &mut buf), None);
        assert_eq!(
            c(0, Some(b""), None, &mut buf).unwrap(),
            "/dev/shm/fragprobe-1000"
        );
        assert_eq!(
            default_ring_dir(0, None, None, &mut [0u8; 8]),
            None,
            "too small a buffer"
        );
        assert_eq!(ring_file_name(4242, &mut buf).unwrap(), b"4242.ring");
        assert_eq!(parse_ring_file_name(b"4242.ring"), Some(4242));
        assert_eq!(parse_ring_file_name(b"99999999999.ring"), None);
        assert_eq!(parse_ring_file_name(b"x.ring"), None);
        assert_eq!(parse_ring_file_name(b"4242-123456789.ring"), Some(4242));
        assert_eq!(parse_ring_file_name(b"4242-.ring"), None);
        assert_eq!(parse_ring_file_name(b"4242-12x.ring"), None);
    }
}
