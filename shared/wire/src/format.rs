//! The fragprobe record format: the one place where bytes are defined.
//!
//! Everything the probe sees becomes one fixed-size [`Record`] (80 bytes). Records travel
//! through the shared-memory ring unchanged and are appended to trace files unchanged.
//! Variable-size facts (command lines, device names) are [`meta`](crate::format::MetaKind)
//! entries kept apart from the records; a record points at one with its `meta` field.
//!
//! All integers are little-endian (fragprobe builds only for little-endian targets; a
//! compile-time assert below enforces it).
//!
//! ```text
//! Record, 80 bytes, #[repr(C)], 8-byte aligned
//! byte  0        8        16       24       32       40       48   52   56   60   64 66 68 70 72      80
//!       +--------+--------+--------+--------+--------+--------+----+----+----+----+--+--+--+--+--------+
//!       | seq    | ts_ns  | addr   | size   | aux    | aux2   |pid |tid |res |dur |ki|ap|dv|fl| meta   |
//!       +--------+--------+--------+--------+--------+--------+----+----+----+----+--+--+--+--+--------+
//!  seq     u64  per-process sequence number; the ring slot position, so gaps mean loss
//!  ts_ns   u64  CLOCK_MONOTONIC nanoseconds when the event was recorded
//!  addr    u64  device pointer, virtual address or physical handle (see EventKind)
//!  size    u64  bytes
//!  aux     u64  stream, handle, total... (see EventKind)
//!  aux2    u64  pool, offset... (see EventKind)
//!  pid     u32  process id (host namespace as seen by the process)
//!  tid     u32  kernel thread id
//!  res     u32  the driver's or runtime's result code exactly as returned (0 = success)
//!  dur     u32  how long the real call took, ns, saturating at u32::MAX
//!  ki      u16  EventKind
//!  ap      u16  Api: which function the program called
//!  dv      i16  device ordinal, -1 when unknown
//!  fl      u16  Flags
//!  meta    u64  offset of a metadata entry (+1; 0 = none) in the ring's or trace's meta area
//! ```
//!
//! Metadata entry (variable size, 8-byte aligned start):
//!
//! ```text
//! byte 0      4      6      8
//!      +------+------+------+---------------------------------------------+
//!      | len  | kind | rsvd | fields: (u16 key_len, key, u32 val_len, val)* |
//!      +------+------+------+---------------------------------------------+
//!  len   u32  total length including this 8-byte header, before padding to 8
//!  kind  u16  MetaKind
//! ```
//! Keys and values are UTF-8 (values may be arbitrary bytes; command lines are NUL-joined).
//!
//! Versioning: every container (ring header, trace header) starts with a magic and
//! [`FORMAT_VERSION`]. A reader that meets another version refuses with
//! [`VersionError`], which names both versions and says which side to upgrade.

use core::fmt;

/// The version of the record layout, the ring layout and the trace layout, together.
pub const FORMAT_VERSION: u32 = 1;

/// Size of one [`Record`] in bytes.
pub const RECORD_SIZE: usize = 80;

const _: () = assert!(core::mem::size_of::<Record>() == RECORD_SIZE);
const _: () = assert!(core::mem::align_of::<Record>() == 8);
#[cfg(not(target_endian = "little"))]
compile_error!("fragprobe's formats are little-endian; big-endian targets are not supported");

/// Device ordinal meaning "not known".
pub const DEVICE_UNKNOWN: i16 = -1;

/// One event, as written by the probe and stored in traces.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct Record {
    /// Per-process sequence number (the ring position).
    pub seq: u64,
    /// CLOCK_MONOTONIC nanoseconds.
    pub ts_ns: u64,
    /// Device pointer, virtual address or handle.
    pub addr: u64,
    /// Bytes.
    pub size: u64,
    /// Kind-dependent: stream, handle, total.
    pub aux: u64,
    /// Kind-dependent: pool, offset.
    pub aux2: u64,
    /// Process id.
    pub pid: u32,
    /// Kernel thread id.
    pub tid: u32,
    /// Raw result code (CUresult or cudaError_t), 0 = success.
    pub result: u32,
    /// Duration of the real call in ns (saturating).
    pub dur_ns: u32,
    /// [`EventKind`] as u16.
    pub kind: u16,
    /// [`Api`] as u16.
    pub api: u16,
    /// Device ordinal, [`DEVICE_UNKNOWN`] when unknown.
    pub device: i16,
    /// [`Flags`] bits.
    pub flags: u16,
    /// Offset + 1 of a metadata entry, 0 when none.
    pub meta: u64,
}

impl Record {
    /// The kind, or `None` for a value this build does not know.
    #[inline]
    pub fn kind(&self) -> Option<EventKind> {
        EventKind::from_u16(self.kind)
    }
    /// The API, or `None` for a value this build does not know.
    #[inline]
    pub fn api(&self) -> Option<Api> {
        Api::from_u16(self.api)
    }
    /// Whether the real call succeeded.
    #[inline]
    pub fn ok(&self) -> bool {
        self.result == 0
    }
    /// The record's bytes, as stored.
    pub fn as_bytes(&self) -> &[u8; RECORD_SIZE] {
        // SAFETY: Record is repr(C), 80 bytes, has no padding (checked by the layout test)
        // and every field is a plain integer, so viewing it as bytes is sound.
        unsafe { &*(self as *const Record as *const [u8; RECORD_SIZE]) }
    }
    /// Reads a record from exactly [`RECORD_SIZE`] bytes.
    pub fn from_bytes(b: &[u8; RECORD_SIZE]) -> Record {
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or([0; 4]));
        let u16_at = |o: usize| u16::from_le_bytes(b[o..o + 2].try_into().unwrap_or([0; 2]));
        Record {
            seq: u64_at(0),
            ts_ns: u64_at(8),
            addr: u64_at(16),
            size: u64_at(24),
            aux: u64_at(32),
            aux2: u64_at(40),
            pid: u32_at(48),
            tid: u32_at(52),
            result: u32_at(56),
            dur_ns: u32_at(60),
            kind: u16_at(64),
            api: u16_at(66),
            device: u16_at(68) as i16,
            flags: u16_at(70),
            meta: u64_at(72),
        }
    }
}

impl fmt::Debug for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = self.kind().map(|k| k.name()).unwrap_or("?");
        let api = self.api().map(|a| a.name()).unwrap_or("?");
        write!(
            f,
            "#{} t={} pid={} tid={} {kind} via {api} dev={} addr={:#x} size={} aux={:#x} aux2={:#x} res={} dur={}ns fl={:#x} meta={}",
            self.seq, self.ts_ns, self.pid, self.tid, self.device, self.addr, self.size,
            self.aux, self.aux2, self.result, self.dur_ns, self.flags, self.meta
        )
    }
}

macro_rules! u16_enum {
    ($(#[$m:meta])* pub enum $name:ident { $($(#[$vm:meta])* $var:ident = $val:expr => $s:expr,)* }) => {
        $(#[$m])*
        #[repr(u16)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($(#[$vm])* $var = $val,)* }
        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$var,)*];
            /// Decodes a stored value.
            #[inline]
            pub fn from_u16(v: u16) -> Option<$name> {
                match v { $($val => Some($name::$var),)* _ => None }
            }
            /// The stable, human-readable name used in reports and exports.
            pub fn name(self) -> &'static str {
                match self { $($name::$var => $s,)* }
            }
        }
    };
}

u16_enum! {
/// What happened. Field use per kind (fields not listed are 0):
///
/// | kind | addr | size | aux | aux2 |
/// |---|---|---|---|---|
/// | `Alloc` | device pointer | bytes (pitch × height for pitch) | pitch or 0 | 0 |
/// | `Free` | device pointer | 0 | 0 | 0 |
/// | `ManagedAlloc` | pointer | bytes | attach flags | 0 |
/// | `AsyncAlloc` | pointer | bytes | stream | pool (0 = device's current pool) |
/// | `AsyncFree` | pointer | 0 | stream | 0 |
/// | `AddressReserve` | start VA | bytes | alignment | requested address |
/// | `AddressFree` | start VA | bytes | 0 | 0 |
/// | `MemCreate` | handle | bytes | location type | allocation flags |
/// | `MemRelease` | handle | 0 | 0 | 0 |
/// | `MemMap` | VA | bytes | handle | offset in handle |
/// | `MemUnmap` | VA | bytes | 0 | 0 |
/// | `MemGetInfo` | 0 | free bytes | total bytes | 0 |
/// | `Import` | pointer | bytes if known | import kind (Api) | 0 |
/// | `PoolTrim` | 0 | min bytes to keep | pool | 0 |
/// | `Device` | 0 | total bytes | 0 | 0 (meta: DeviceInfo) |
/// | `ProcessStart` | 0 | 0 | parent pid | 0 (meta: ProcessInfo) |
/// | `ProcessExit` | 0 | live bytes | live count | exit status or 0 |
/// | `Loss` | first lost seq | events lost | 0 | 0 |
/// | `ResyncBegin` | 0 | entries | watermark seq | 0 |
/// | `ResyncEntry` | key | bytes | aux of the live entry | aux2 (result = kind) |
/// | `ResyncEnd` | 0 | entries | watermark seq at end | 0 |
/// | `NvmlSample` | 0 | device used bytes | device total | this process's used (u64::MAX = n/a) |
pub enum EventKind {
    /// Device memory allocation (plain or pitch).
    Alloc = 1 => "alloc",
    /// Free of a plain or managed allocation.
    Free = 2 => "free",
    /// Managed (unified) memory allocation.
    ManagedAlloc = 3 => "managed_alloc",
    /// Stream-ordered allocation.
    AsyncAlloc = 4 => "async_alloc",
    /// Stream-ordered free.
    AsyncFree = 5 => "async_free",
    /// VMM: virtual address range reserved.
    AddressReserve = 6 => "address_reserve",
    /// VMM: virtual address range given back.
    AddressFree = 7 => "address_free",
    /// VMM: physical memory handle created.
    MemCreate = 8 => "mem_create",
    /// VMM: physical memory handle released.
    MemRelease = 9 => "mem_release",
    /// VMM: handle mapped at a virtual address.
    MemMap = 10 => "mem_map",
    /// VMM: virtual range unmapped.
    MemUnmap = 11 => "mem_unmap",
    /// A `cuMemGetInfo` / `cudaMemGetInfo` answer.
    MemGetInfo = 12 => "mem_get_info",
    /// Imported memory (IPC, shareable handle, pool import): not new memory.
    Import = 13 => "import",
    /// `cuMemPoolTrimTo`.
    PoolTrim = 14 => "pool_trim",
    /// A device's description.
    Device = 20 => "device",
    /// The process started using CUDA.
    ProcessStart = 21 => "process_start",
    /// The process exited.
    ProcessExit = 22 => "process_exit",
    /// Events were lost (ring full); the model is incomplete until a resync.
    Loss = 23 => "loss",
    /// A resync from the probe's live table begins.
    ResyncBegin = 24 => "resync_begin",
    /// One live object from the probe's live table.
    ResyncEntry = 25 => "resync_entry",
    /// The resync is complete: the model is exact again.
    ResyncEnd = 26 => "resync_end",
    /// An NVML memory sample taken by the consumer.
    NvmlSample = 27 => "nvml_sample",
}
}

u16_enum! {
/// Which function the program called (the outermost hooked call).
pub enum Api {
    /// Recorded by the probe itself (process start/exit, device descriptions).
    Probe = 0 => "probe",
    /// Written by the consumer (loss markers, resync, NVML samples).
    Consumer = 1 => "consumer",
    /// Produced by a simulator or importer, not by a live process.
    Synthetic = 2 => "synthetic",
    /// `cuMemAlloc` (legacy, 32-bit-era name).
    CuMemAlloc = 10 => "cuMemAlloc",
    /// `cuMemAlloc_v2`.
    CuMemAllocV2 = 11 => "cuMemAlloc_v2",
    /// `cuMemAllocPitch`.
    CuMemAllocPitch = 12 => "cuMemAllocPitch",
    /// `cuMemAllocPitch_v2`.
    CuMemAllocPitchV2 = 13 => "cuMemAllocPitch_v2",
    /// `cuMemFree`.
    CuMemFree = 14 => "cuMemFree",
    /// `cuMemFree_v2`.
    CuMemFreeV2 = 15 => "cuMemFree_v2",
    /// `cuMemAllocManaged`.
    CuMemAllocManaged = 16 => "cuMemAllocManaged",
    /// `cuMemAllocAsync`.
    CuMemAllocAsync = 17 => "cuMemAllocAsync",
    /// `cuMemAllocAsync_ptsz`.
    CuMemAllocAsyncPtsz = 18 => "cuMemAllocAsync_ptsz",
    /// `cuMemAllocFromPoolAsync`.
    CuMemAllocFromPoolAsync = 19 => "cuMemAllocFromPoolAsync",
    /// `cuMemAllocFromPoolAsync_ptsz`.
    CuMemAllocFromPoolAsyncPtsz = 20 => "cuMemAllocFromPoolAsync_ptsz",
    /// `cuMemFreeAsync`.
    CuMemFreeAsync = 21 => "cuMemFreeAsync",
    /// `cuMemFreeAsync_ptsz`.
    CuMemFreeAsyncPtsz = 22 => "cuMemFreeAsync_ptsz",
    /// `cuMemAddressReserve`.
    CuMemAddressReserve = 23 => "cuMemAddressReserve",
    /// `cuMemAddressFree`.
    CuMemAddressFree = 24 => "cuMemAddressFree",
    /// `cuMemCreate`.
    CuMemCreate = 25 => "cuMemCreate",
    /// `cuMemRelease`.
    CuMemRelease = 26 => "cuMemRelease",
    /// `cuMemMap`.
    CuMemMap = 27 => "cuMemMap",
    /// `cuMemUnmap`.
    CuMemUnmap = 28 => "cuMemUnmap",
    /// `cuMemGetInfo` (legacy).
    CuMemGetInfo = 29 => "cuMemGetInfo",
    /// `cuMemGetInfo_v2`.
    CuMemGetInfoV2 = 30 => "cuMemGetInfo_v2",
    /// `cuIpcOpenMemHandle`.
    CuIpcOpenMemHandle = 31 => "cuIpcOpenMemHandle",
    /// `cuIpcOpenMemHandle_v2`.
    CuIpcOpenMemHandleV2 = 32 => "cuIpcOpenMemHandle_v2",
    /// `cuIpcCloseMemHandle`.
    CuIpcCloseMemHandle = 33 => "cuIpcCloseMemHandle",
    /// `cuMemImportFromShareableHandle`.
    CuMemImportFromShareableHandle = 34 => "cuMemImportFromShareableHandle",
    /// `cuMemPoolImportPointer`.
    CuMemPoolImportPointer = 35 => "cuMemPoolImportPointer",
    /// `cuMemPoolTrimTo`.
    CuMemPoolTrimTo = 36 => "cuMemPoolTrimTo",
    /// `cudaMalloc`.
    CudaMalloc = 60 => "cudaMalloc",
    /// `cudaFree`.
    CudaFree = 61 => "cudaFree",
    /// `cudaMallocAsync`.
    CudaMallocAsync = 62 => "cudaMallocAsync",
    /// `cudaFreeAsync`.
    CudaFreeAsync = 63 => "cudaFreeAsync",
    /// `cudaMallocFromPoolAsync`.
    CudaMallocFromPoolAsync = 64 => "cudaMallocFromPoolAsync",
    /// `cudaMallocManaged`.
    CudaMallocManaged = 65 => "cudaMallocManaged",
    /// `cudaMallocPitch`.
    CudaMallocPitch = 66 => "cudaMallocPitch",
    /// `cudaMemGetInfo`.
    CudaMemGetInfo = 67 => "cudaMemGetInfo",
    /// NVML (sampled by the consumer).
    Nvml = 90 => "nvml",
}
}

/// Bits of [`Record::flags`].
pub struct Flags;
impl Flags {
    /// The record was synthesised at process exit for an allocation never freed.
    pub const AT_EXIT: u16 = 1 << 0;
    /// The record came from the `dlsym` door.
    pub const DOOR_DLSYM: u16 = 1 << 1;
    /// The record came from the `cuGetProcAddress` door.
    pub const DOOR_GETPROC: u16 = 1 << 2;
    /// The record came from an exported symbol (`-lcuda` or the runtime).
    pub const DOOR_EXPORT: u16 = 1 << 3;
    /// The call was a pitch allocation (`aux` holds the pitch).
    pub const PITCH: u16 = 1 << 4;
    /// The `dur_ns` field saturated.
    pub const DUR_SATURATED: u16 = 1 << 5;
}

u16_enum! {
/// What a metadata entry describes.
pub enum MetaKind {
    /// Keys: pid, ppid, cmdline (NUL-joined argv), exe, hostname, cwd, start_unix_ns and
    /// the environment variables CUDA_VISIBLE_DEVICES, PYTORCH_CUDA_ALLOC_CONF, RANK,
    /// LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, FRAGPROBE_LABEL when set.
    ProcessInfo = 1 => "process_info",
    /// Keys: ordinal, uuid ("GPU-xxxxxxxx-…"), name, total_bytes, pci_bus_id.
    DeviceInfo = 2 => "device_info",
    /// Free-form key/values the consumer adds (recording host, fragprobe version, label).
    RunInfo = 3 => "run_info",
}
}

/// Header length of a metadata entry.
pub const META_HEADER: usize = 8;

/// Writes metadata entries into a caller-provided buffer without allocating.
///
/// Used by the probe (into the ring's meta area) and by consumers (into trace chunks).
pub struct MetaWriter<'a> {
    buf: &'a mut [u8],
    len: usize,
    overflow: bool,
}

impl<'a> MetaWriter<'a> {
    /// Starts an entry of `kind` at the start of `buf`.
    pub fn new(buf: &'a mut [u8], kind: MetaKind) -> MetaWriter<'a> {
        let overflow = buf.len() < META_HEADER;
        if !overflow {
            buf[..META_HEADER].fill(0);
            buf[4..6].copy_from_slice(&(kind as u16).to_le_bytes());
        }
        MetaWriter {
            buf,
            len: META_HEADER,
            overflow,
        }
    }
    /// Appends one field. Fields that do not fit are dropped and `finish` reports it.
    pub fn field(&mut self, key: &[u8], val: &[u8]) -> &mut Self {
        let need = 2 + key.len() + 4 + val.len();
        if self.overflow || key.len() > u16::MAX as usize || self.len + need > self.buf.len() {
            self.overflow = true;
            return self;
        }
        let mut at = self.len;
        self.buf[at..at + 2].copy_from_slice(&(key.len() as u16).to_le_bytes());
        at += 2;
        self.buf[at..at + key.len()].copy_from_slice(key);
        at += key.len();
        self.buf[at..at + 4].copy_from_slice(&(val.len() as u32).to_le_bytes());
        at += 4;
        self.buf[at..at + val.len()].copy_from_slice(val);
        self.len = at + val.len();
        self
    }
    /// Appends a field whose value is a decimal number (no allocation).
    pub fn field_u64(&mut self, key: &[u8], v: u64) -> &mut Self {
        let mut tmp = [0u8; 20];
        let s = fmt_u64(v, &mut tmp);
        self.field(key, s)
    }
    /// Closes the entry; returns its length padded to 8 bytes, and whether fields were dropped.
    pub fn finish(self) -> (usize, bool) {
        if self.buf.len() >= META_HEADER {
            self.buf[0..4].copy_from_slice(&(self.len as u32).to_le_bytes());
        }
        let padded = (self.len + 7) & !7;
        (padded.min(self.buf.len()), self.overflow)
    }
}

/// Formats `v` in decimal into `tmp`, returning the digits.
pub fn fmt_u64(mut v: u64, tmp: &mut [u8; 20]) -> &[u8] {
    let mut i = tmp.len();
    loop {
        i -= 1;
        tmp[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    &tmp[i..]
}

/// A decoded metadata entry: kind plus its fields, borrowed from the buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaEntry<'a> {
    /// What the entry describes.
    pub kind: Option<MetaKind>,
    /// The raw kind value.
    pub raw_kind: u16,
    /// The fields in order.
    pub fields: MetaFields<'a>,
    /// Length of the entry padded to 8 bytes (the distance to the next entry).
    pub padded_len: usize,
}

/// Iterator over the fields of a metadata entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaFields<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for MetaFields<'a> {
    type Item = (&'a [u8], &'a [u8]);
    fn next(&mut self) -> Option<Self::Item> {
        let r = self.rest;
        if r.len() < 2 {
            return None;
        }
        let kl = u16::from_le_bytes([r[0], r[1]]) as usize;
        if r.len() < 2 + kl + 4 {
            self.rest = &[];
            return None;
        }
        let key = &r[2..2 + kl];
        let vl = u32::from_le_bytes(r[2 + kl..6 + kl].try_into().ok()?) as usize;
        if r.len() < 6 + kl + vl {
            self.rest = &[];
            return None;
        }
        let val = &r[6 + kl..6 + kl + vl];
        self.rest = &r[6 + kl + vl..];
        Some((key, val))
    }
}

impl<'a> MetaEntry<'a> {
    /// Decodes the entry at the start of `buf`; `None` when it is not a whole entry.
    pub fn parse(buf: &'a [u8]) -> Option<MetaEntry<'a>> {
        if buf.len() < META_HEADER {
            return None;
        }
        let len = u32::from_le_bytes(buf[0..4].try_into().ok()?) as usize;
        if len < META_HEADER || len > buf.len() {
            return None;
        }
        let raw_kind = u16::from_le_bytes([buf[4], buf[5]]);
        Some(MetaEntry {
            kind: MetaKind::from_u16(raw_kind),
            raw_kind,
            fields: MetaFields {
                rest: &buf[META_HEADER..len],
            },
            padded_len: ((len + 7) & !7).min(buf.len()),
        })
    }
    /// The value of the first field named `key`.
    pub fn get(&self, key: &str) -> Option<&'a [u8]> {
        self.fields
            .clone()
            .find(|(k, _)| *k == key.as_bytes())
            .map(|(_, v)| v)
    }
    /// The value of `key` as UTF-8 text (lossy characters replaced by `None`).
    pub fn get_str(&self, key: &str) -> Option<&'a str> {
        self.get(key).and_then(|v| core::str::from_utf8(v).ok())
    }
    /// The value of `key` parsed as a decimal number.
    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.get_str(key).and_then(|s| s.parse().ok())
    }
}

/// A format version mismatch. Its message names both versions and what to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VersionError {
    /// What the container is ("trace file", "ring").
    pub what: &'static str,
    /// The version found in the data.
    pub found: u32,
    /// The version this build reads.
    pub supported: u32,
}

impl fmt::Display for VersionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let advice = if self.found > self.supported {
            "it was written by a newer fragprobe: upgrade this fragprobe to read it"
        } else {
            "it was written by an older fragprobe: re-record it, or open it with the fragprobe release that wrote it"
        };
        write!(
            f,
            "{} has format version {}, but this fragprobe ({}) reads version {}; {}",
            self.what,
            self.found,
            env!("CARGO_PKG_VERSION"),
            self.supported,
            advice
        )
    }
}

impl std::error::Error for VersionError {}

/// Checks a version found in a container header.
pub fn check_version(what: &'static str, found: u32) -> Result<(), VersionError> {
    if found == FORMAT_VERSION {
        Ok(())
    } else {
        Err(VersionError {
            what,
            found,
            supported: FORMAT_VERSION,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_has_no_padding_and_round_trips() {
        let r = Record {
            seq: 1,
            ts_ns: 2,
            addr: 3,
            size: 4,
            aux: 5,
            aux2: 6,
            pid: 7,
            tid: 8,
            result: 9,
            dur_ns: 10,
            kind: 11,
            api: 12,
            device: -1,
            flags: 14,
            meta: 15,
        };
        let b = *r.as_bytes();
        assert_eq!(&b[0..8], &1u64.to_le_bytes());
        assert_eq!(&b[48..52], &7u32.to_le_bytes());
        assert_eq!(&b[64..66], &11u16.to_le_bytes());
        assert_eq!(&b[68..70], &(-1i16).to_le_bytes());
        assert_eq!(&b[72..80], &15u64.to_le_bytes());
        assert_eq!(Record::from_bytes(&b), r);
    }

    #[test]
    fn enums_round_trip_and_reject_unknown() {
        for k in EventKind::ALL {
            assert_eq!(EventKind::from_u16(*k as u16), Some(*k));
        }
        for a in Api::ALL {
            assert_eq!(Api::from_u16(*a as u16), Some(*a));
        }
        assert_eq!(EventKind::from_u16(999), None);
        assert_eq!(Api::from_u16(999), None);
    }

    #[test]
    fn meta_round_trip_and_overflow() {
        let mut buf = [0u8; 128];
        let mut w = MetaWriter::new(&mut buf, MetaKind::ProcessInfo);
        w.field(b"cmdline", b"python\0train.py")
            .field_u64(b"pid", 4242);
        let (len, overflow) = w.finish();
        assert!(!overflow);
        assert_eq!(len % 8, 0);
        let e = MetaEntry::parse(&buf).unwrap();
        assert_eq!(e.kind, Some(MetaKind::ProcessInfo));
        assert_eq!(e.get("cmdline"), Some(&b"python\0train.py"[..]));
        assert_eq!(e.get_u64("pid"), Some(4242));
        assert_eq!(e.get("missing"), None);

        let mut small = [0u8; 24];
        let mut w = MetaWriter::new(&mut small, MetaKind::DeviceInfo);
        w.field(b"name", b"a very long device name that cannot fit");
        let (_, overflow) = w.finish();
        assert!(overflow);
        assert_eq!(MetaEntry::parse(&small).unwrap().fields.count(), 0);
    }

    #[test]
    fn version_error_names_both_versions() {
        let e = check_version("trace file", 7).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("version 7") && s.contains("version 1") && s.contains("newer"));
        assert!(check_version("ring", FORMAT_VERSION).is_ok());
    }
}
