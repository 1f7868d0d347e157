//! The shared-memory ring: many producer threads (the probe, inside the profiled process)
//! and one consumer (the `fragprobe` CLI or viewer, in another process).
//!
//! Everything on the producer path is allocation-free, lock-free, panic-free and does no
//! file I/O, so it can run inside an `LD_PRELOAD` hook. The ring lives in a file that the
//! probe creates (`<dir>/<pid>-<start_ns>.ring`, see [`ring_dir_candidate`]) and maps `MAP_SHARED`; the
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

mod consume;
mod dir;
mod produce;
#[cfg(test)]
mod tests;

mod config;
use config::align64;
pub use config::RingConfig;
pub use dir::{
    parse_ring_file_name, ring_dir_candidate, room_for_ring, RING_DIR_ENV, RING_HEADROOM,
    RING_NEW_SUFFIX,
};
pub use produce::{Claim, Full};

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

/// Why [`Ring::drain_until_drop`] stopped.
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

/// What [`Ring::drain_until_drop`] did.
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
}

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
