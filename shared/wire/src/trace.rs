//! Trace files: the ring's records as they were, plus their metadata and model checkpoints.
//!
//! This module is the file's layout (header, chunk kinds, the errors a reader reports); the
//! reader, follower and writer (`Trace`, `TraceTail`, `TraceWriter`) are consumer-side code
//! in `fragprobe_shared::trace`, which re-exports everything here.
//!
//! A trace is a 64-byte header followed by chunks. Each chunk is checksummed, so a reader
//! can tell a file cut short (process killed, disk full) from a damaged one, and a file that
//! is still being written can be followed chunk by chunk (`TraceTail`).
//!
//! # Layout
//!
//! All integers little-endian.
//!
//! ```text
//! header, 64 bytes
//!   0  magic        [u8; 16]  b"FRAGPROBE-TRACE\0"
//!  16  version      u32       FORMAT_VERSION
//!  20  header_len   u32       64: offset of the first chunk
//!  24  created_ns   u64       wall-clock (Unix) ns when the file was created
//!  32  flags        u64       0 (reserved)
//!  40  reserved     [u8; 24]  0
//!
//! chunk, 16-byte header + payload padded with zeros to a multiple of 8
//!   0  magic        u32       b"FPCH"
//!   4  kind         u16       ChunkKind
//!   6  flags        u16       0 (reserved)
//!   8  payload_len  u32       bytes of payload, before padding
//!  12  crc32        u32       CRC-32 (IEEE) of the payload, before padding
//!  16  payload
//!
//! payloads
//!   Events      n × 80-byte Record, exactly as the ring held them (8-aligned in the file,
//!               so a mapped trace is read in place)
//!   Meta        u32 pid, u32 0, u64 meta_ref, then one metadata entry: what a record with
//!               that pid and `meta == meta_ref` refers to
//!   Checkpoint  u64 event_index (Event records before it), then opaque model bytes
//!   RunInfo     one metadata entry (MetaKind::RunInfo): recording host, version, label...
//!   End         u64 events, u64 chunks before it: written by TraceWriter::finish
//! ```
//!
//! Readers skip chunks of unknown kinds with a warning; a change that old readers cannot
//! skip bumps [`FORMAT_VERSION`](crate::format::FORMAT_VERSION).
//!
//! Damage handling in `Trace::open`: a file cut short keeps everything up to its last
//! whole record (the whole records of a partial Events chunk included) and says how many
//! bytes are missing; a chunk whose checksum fails stops reading there (offset reported);
//! a file without an End chunk opens with a warning (recording interrupted or still going).

use std::fmt;
use std::path::PathBuf;

use crate::format::VersionError;

/// The trace file magic.
pub const TRACE_MAGIC: [u8; 16] = *b"FRAGPROBE-TRACE\0";
/// Length of the file header.
pub const TRACE_HEADER_LEN: usize = 64;
/// The chunk magic, `b"FPCH"`.
pub const CHUNK_MAGIC: u32 = u32::from_le_bytes(*b"FPCH");
/// Length of a chunk header.
pub const CHUNK_HEADER_LEN: usize = 16;
/// Records per Events chunk that `TraceWriter` writes by default (320 KiB).
pub const DEFAULT_CHUNK_RECORDS: usize = 4096;

/// What a chunk holds.
#[repr(u16)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChunkKind {
    /// Records.
    Events = 1,
    /// A metadata entry for (pid, meta_ref).
    Meta = 2,
    /// A model checkpoint.
    Checkpoint = 3,
    /// A run-info metadata entry.
    RunInfo = 4,
    /// End of the recording.
    End = 5,
}

impl ChunkKind {
    /// Decodes a stored kind.
    pub fn from_u16(v: u16) -> Option<ChunkKind> {
        Some(match v {
            1 => ChunkKind::Events,
            2 => ChunkKind::Meta,
            3 => ChunkKind::Checkpoint,
            4 => ChunkKind::RunInfo,
            5 => ChunkKind::End,
            _ => return None,
        })
    }

    /// Lower-case name for messages.
    pub fn name(self) -> &'static str {
        match self {
            ChunkKind::Events => "events",
            ChunkKind::Meta => "meta",
            ChunkKind::Checkpoint => "checkpoint",
            ChunkKind::RunInfo => "run-info",
            ChunkKind::End => "end",
        }
    }
}

/// Why a trace could not be read. `Display` is one line that names the file and says what
/// to do.
#[derive(Debug)]
pub enum TraceError {
    /// The file could not be opened, read or mapped.
    Io {
        /// The trace file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The file does not start with the trace magic.
    NotATrace {
        /// The file.
        path: PathBuf,
        /// Its first bytes (up to 16).
        found_magic: Vec<u8>,
    },
    /// The trace was written with another format version.
    Version {
        /// The trace file.
        path: PathBuf,
        /// Both versions and what to upgrade.
        err: VersionError,
    },
    /// The file is empty, or ends inside its 64-byte header.
    Empty {
        /// The trace file.
        path: PathBuf,
    },
    /// A chunk that is complete on disk is damaged (only `TraceTail` reports this as an
    /// error; `Trace::open` keeps what came before and warns).
    Corrupt {
        /// The trace file.
        path: PathBuf,
        /// Byte offset of the damaged chunk.
        offset: u64,
        /// What is wrong.
        what: String,
    },
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceError::Io { path, source } => {
                write!(f, "cannot read trace {}: {source}", path.display())
            }
            // A pickle (protocol 2-5 opens with 0x80 and the protocol): most likely a
            // PyTorch memory snapshot, which the other commands read.
            TraceError::NotATrace { path, found_magic }
                if found_magic.first() == Some(&0x80)
                    && found_magic.get(1).is_some_and(|p| (2..=5).contains(p)) =>
            {
                write!(
                    f,
                    "{0} is not a fragprobe trace but a pickle, most likely a PyTorch memory snapshot: give it to `fragprobe import` (its summary, and a trace of it), `fragprobe view` or `fragprobe simulate`",
                    path.display()
                )
            }
            TraceError::NotATrace { path, found_magic } => write!(
                f,
                "{} is not a fragprobe trace: it starts with \"{}\" instead of \"FRAGPROBE-TRACE\"; pass a .fpt file written by fragprobe",
                path.display(),
                found_magic.escape_ascii()
            ),
            TraceError::Version { path, err } => write!(f, "{}: {err}", path.display()),
            TraceError::Empty { path } => write!(
                f,
                "{} holds no trace data (empty or shorter than the 64-byte header): the recording stopped before it wrote anything",
                path.display()
            ),
            TraceError::Corrupt { path, offset, what } => write!(
                f,
                "{} is damaged at byte {offset}: {what}; open it with a fresh reader to keep everything before that point",
                path.display()
            ),
        }
    }
}

impl std::error::Error for TraceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TraceError::Io { source, .. } => Some(source),
            TraceError::Version { err, .. } => Some(err),
            _ => None,
        }
    }
}

/// Checks a file header (the file's first bytes, up to 64) and returns its `created_ns`.
pub fn check_header(path: &std::path::Path, head: &[u8]) -> Result<u64, TraceError> {
    let n = head.len().min(TRACE_MAGIC.len());
    if head[..n] != TRACE_MAGIC[..n] {
        return Err(TraceError::NotATrace {
            path: path.to_path_buf(),
            found_magic: head[..n].to_vec(),
        });
    }
    if head.len() < TRACE_HEADER_LEN {
        return Err(TraceError::Empty {
            path: path.to_path_buf(),
        });
    }
    let version = u32::from_le_bytes([head[16], head[17], head[18], head[19]]);
    crate::format::check_version("trace file", version).map_err(|err| TraceError::Version {
        path: path.to_path_buf(),
        err,
    })?;
    let header_len = u32::from_le_bytes([head[20], head[21], head[22], head[23]]);
    if header_len as usize != TRACE_HEADER_LEN {
        return Err(TraceError::Corrupt {
            path: path.to_path_buf(),
            offset: 20,
            what: format!("header length is {header_len}, expected {TRACE_HEADER_LEN}"),
        });
    }
    Ok(u64::from_le_bytes(
        head[24..32].try_into().unwrap_or([0; 8]),
    ))
}

/// A parsed chunk header.
#[derive(Clone, Copy, Debug)]
pub struct ChunkHeader {
    /// [`CHUNK_MAGIC`] in an intact chunk.
    pub magic: u32,
    /// A [`ChunkKind`] as stored (unknown kinds are skipped by readers).
    pub kind: u16,
    /// Payload bytes, before padding.
    pub payload_len: u32,
    /// CRC-32 (IEEE) of the payload.
    pub crc: u32,
}

impl ChunkHeader {
    /// Parses the first [`CHUNK_HEADER_LEN`] bytes of `b` (which must hold them).
    pub fn parse(b: &[u8]) -> ChunkHeader {
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        ChunkHeader {
            magic: u32_at(0),
            kind: u16::from_le_bytes([b[4], b[5]]),
            payload_len: u32_at(8),
            crc: u32_at(12),
        }
    }

    /// The payload's length in the file, padded to a multiple of 8.
    pub fn padded_len(&self) -> u64 {
        (self.payload_len as u64 + 7) & !7
    }

    /// The kind's name for messages (`kind-N` for unknown kinds).
    pub fn kind_name(&self) -> String {
        ChunkKind::from_u16(self.kind)
            .map(|k| k.name().to_string())
            .unwrap_or_else(|| format!("kind-{}", self.kind))
    }
}
