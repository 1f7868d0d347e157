//! Reading trace files: mapped, one pass over the chunk headers, records read in place.

use std::collections::HashMap;
use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};

use super::TRACE_HEADER_LEN;
use super::{check_header, ChunkHeader, ChunkKind, TraceError, CHUNK_HEADER_LEN, CHUNK_MAGIC};
use crate::format::{MetaEntry, Record, RECORD_SIZE};

/// Where a metadata entry is in the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaRef {
    /// Process whose records refer to it.
    pub pid: u32,
    /// The value of [`Record::meta`] that refers to it.
    pub meta_ref: u64,
    /// The entry's bytes in the file (see [`Trace::bytes`]).
    pub bytes: Range<usize>,
}

/// How a trace ends short of complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Truncation {
    /// Bytes missing from the last chunk (0 when unknown, e.g. the file simply stops between
    /// chunks without an End chunk).
    pub missing_bytes_estimate: u64,
    /// The file's content is usable up to this byte offset.
    pub valid_up_to: u64,
}

#[derive(Clone, Copy, Debug)]
struct EventChunk {
    /// Offset of the first record in the file.
    offset: usize,
    /// Records in the chunk (whole ones, for a cut chunk).
    count: usize,
    /// Index of the first record in the whole trace.
    first: u64,
}

/// An opened trace file (memory-mapped; records are read in place).
///
/// The file must not be truncated by someone else while it is open (a mapped file that
/// shrinks faults on access); appending is fine but is not seen (use [`TraceTail`] for
/// files still being written).
///
/// [`TraceTail`]: super::TraceTail
pub struct Trace {
    path: PathBuf,
    map: memmap2::Mmap,
    created_unix_ns: u64,
    chunks: Vec<EventChunk>,
    len: u64,
    metas: Vec<MetaRef>,
    meta_index: HashMap<(u32, u64), usize>,
    run_infos: Vec<Range<usize>>,
    checkpoints: Vec<(u64, Range<usize>)>,
    warnings: Vec<String>,
    truncated: Option<Truncation>,
    corrupt_at: Option<u64>,
    complete: bool,
}

impl std::fmt::Debug for Trace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trace")
            .field("path", &self.path)
            .field("len", &self.len)
            .field("metas", &self.metas.len())
            .field("checkpoints", &self.checkpoints.len())
            .field("warnings", &self.warnings)
            .finish()
    }
}

impl Trace {
    /// Opens and indexes a trace, verifying every chunk's checksum.
    pub fn open(path: impl AsRef<Path>) -> Result<Trace, TraceError> {
        Trace::open_with(path.as_ref(), true)
    }

    /// Opens and indexes a trace without verifying checksums: only the chunk headers are
    /// read (the fastest way to open a large file that is known to be good).
    pub fn open_unverified(path: impl AsRef<Path>) -> Result<Trace, TraceError> {
        Trace::open_with(path.as_ref(), false)
    }

    fn open_with(path: &Path, verify: bool) -> Result<Trace, TraceError> {
        let io = |source| TraceError::Io {
            path: path.to_path_buf(),
            source,
        };
        // A trace is mapped, so it must be a regular file; opening a FIFO would also block
        // until something writes to it. Say so before opening.
        if let Ok(m) = std::fs::metadata(path) {
            if !m.is_file() {
                return Err(io(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!(
                        "it is {}, not a regular file: traces are read from files \
                         (save a piped trace to a file first)",
                        file_kind(&m)
                    ),
                )));
            }
        }
        let file = File::open(path).map_err(io)?;
        let file_len = file.metadata().map_err(io)?.len();
        if file_len == 0 {
            return Err(TraceError::Empty {
                path: path.to_path_buf(),
            });
        }
        // SAFETY: the mapping is read-only and private to this Trace; the documented
        // contract is that nobody truncates the file while it is open.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        let created_unix_ns = check_header(path, &map[..map.len().min(TRACE_HEADER_LEN)])?;
        let mut t = Trace {
            path: path.to_path_buf(),
            map,
            created_unix_ns,
            chunks: Vec::new(),
            len: 0,
            metas: Vec::new(),
            meta_index: HashMap::new(),
            run_infos: Vec::new(),
            checkpoints: Vec::new(),
            warnings: Vec::new(),
            truncated: None,
            corrupt_at: None,
            complete: false,
        };
        t.index(verify);
        Ok(t)
    }

    fn warn(&mut self, msg: String) {
        self.warnings
            .push(format!("{}: {msg}", self.path.display()));
    }

    fn index(&mut self, verify: bool) {
        let total = self.map.len();
        let mut off = TRACE_HEADER_LEN;
        let mut chunks_seen: u64 = 0;
        let mut end_claim: Option<(u64, u64)> = None;
        while off < total {
            let have = total - off;
            if have < CHUNK_HEADER_LEN {
                self.cut(off, (CHUNK_HEADER_LEN - have) as u64, format!(
                    "file cut short: {have} bytes of a chunk header at offset {off}; at least {} bytes missing",
                    CHUNK_HEADER_LEN - have
                ));
                break;
            }
            let h = ChunkHeader::parse(&self.map[off..off + CHUNK_HEADER_LEN]);
            if h.magic != CHUNK_MAGIC {
                if self.map[off..].iter().all(|&b| b == 0) {
                    self.cut(off, 0, format!(
                        "file cut short: the {have} bytes from offset {off} are zeros (space reserved but never written)"
                    ));
                } else {
                    self.corrupt(
                        off,
                        format!("no chunk header at offset {off}: damaged; reading stopped there"),
                    );
                }
                break;
            }
            let payload = off + CHUNK_HEADER_LEN;
            let plen = h.payload_len as usize;
            let end = payload as u64 + h.padded_len();
            if payload + plen > total {
                let avail = total - payload;
                let missing = end - total as u64;
                if h.kind == ChunkKind::Events as u16 {
                    let whole = avail / RECORD_SIZE;
                    self.add_events(payload, whole);
                    self.cut(payload + whole * RECORD_SIZE, missing, format!(
                        "file cut short: the events chunk at offset {off} lacks {missing} bytes; kept its {whole} whole records of {} (unverified)",
                        plen / RECORD_SIZE
                    ));
                } else {
                    self.cut(off, missing, format!(
                        "file cut short: the {} chunk at offset {off} lacks {missing} bytes and was dropped",
                        h.kind_name()
                    ));
                }
                break;
            }
            let body = payload..payload + plen;
            if verify && crc32fast::hash(&self.map[body.clone()]) != h.crc {
                self.corrupt(off, format!(
                    "the {} chunk at offset {off} fails its checksum: damaged; reading stopped there ({} records before it kept)",
                    h.kind_name(), self.len
                ));
                break;
            }
            if self.complete {
                self.warn(format!("data after the end marker, at offset {off}"));
                self.complete = false;
            }
            match ChunkKind::from_u16(h.kind) {
                Some(ChunkKind::Events) => {
                    if !plen.is_multiple_of(RECORD_SIZE) {
                        self.warn(format!(
                            "events chunk at offset {off} has {plen} bytes, not a multiple of {RECORD_SIZE}; the tail is ignored"
                        ));
                    }
                    self.add_events(payload, plen / RECORD_SIZE);
                }
                Some(ChunkKind::Meta) => {
                    let b = &self.map[body.clone()];
                    if plen < 16 || MetaEntry::parse(&b[16..]).is_none() {
                        self.warn(format!("malformed meta chunk at offset {off} ignored"));
                    } else {
                        let pid = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                        let meta_ref = u64::from_le_bytes(b[8..16].try_into().unwrap_or([0; 8]));
                        self.meta_index.insert((pid, meta_ref), self.metas.len());
                        self.metas.push(MetaRef {
                            pid,
                            meta_ref,
                            bytes: payload + 16..body.end,
                        });
                    }
                }
                Some(ChunkKind::Checkpoint) => {
                    if plen < 8 {
                        self.warn(format!(
                            "malformed checkpoint chunk at offset {off} ignored"
                        ));
                    } else {
                        let b = &self.map[body.clone()];
                        let idx = u64::from_le_bytes(b[0..8].try_into().unwrap_or([0; 8]));
                        self.checkpoints.push((idx, payload + 8..body.end));
                    }
                }
                Some(ChunkKind::RunInfo) => {
                    if MetaEntry::parse(&self.map[body.clone()]).is_none() {
                        self.warn(format!("malformed run-info chunk at offset {off} ignored"));
                    } else {
                        self.run_infos.push(body.clone());
                    }
                }
                Some(ChunkKind::End) => {
                    let b = &self.map[body.clone()];
                    if plen >= 16 {
                        let ev = u64::from_le_bytes(b[0..8].try_into().unwrap_or([0; 8]));
                        let ch = u64::from_le_bytes(b[8..16].try_into().unwrap_or([0; 8]));
                        end_claim = Some((ev, ch));
                    }
                    self.complete = true;
                }
                None => {
                    self.warn(format!(
                        "unknown chunk kind {} at offset {off} skipped (written by a newer fragprobe?)",
                        h.kind
                    ));
                }
            }
            if h.kind != ChunkKind::End as u16 {
                chunks_seen += 1;
            }
            off = end.min(total as u64) as usize;
        }
        if let Some((ev, ch)) = end_claim {
            if self.complete && (ev != self.len || ch != chunks_seen) {
                self.warn(format!(
                    "the end marker counts {ev} records in {ch} chunks, but the file holds {} in {chunks_seen}",
                    self.len
                ));
            }
        }
        if !self.complete && self.truncated.is_none() && self.corrupt_at.is_none() {
            let len = total as u64;
            self.truncated = Some(Truncation {
                missing_bytes_estimate: 0,
                valid_up_to: len,
            });
            self.warn(
                "no end marker: the recording was interrupted (or is still being written); events after the last whole chunk are missing".to_string(),
            );
        }
    }

    fn add_events(&mut self, offset: usize, count: usize) {
        if count > 0 {
            self.chunks.push(EventChunk {
                offset,
                count,
                first: self.len,
            });
            self.len += count as u64;
        }
    }

    fn cut(&mut self, valid_up_to: usize, missing: u64, msg: String) {
        self.truncated = Some(Truncation {
            missing_bytes_estimate: missing,
            valid_up_to: valid_up_to as u64,
        });
        self.warn(msg);
    }

    fn corrupt(&mut self, off: usize, msg: String) {
        self.corrupt_at = Some(off as u64);
        self.warn(msg);
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// When the file was created (Unix ns).
    pub fn created_unix_ns(&self) -> u64 {
        self.created_unix_ns
    }

    /// Number of records.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the trace has no records.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn chunk_slice(&self, c: &EventChunk) -> &[Record] {
        let bytes = &self.map[c.offset..c.offset + c.count * RECORD_SIZE];
        debug_assert!((bytes.as_ptr() as usize).is_multiple_of(std::mem::align_of::<Record>()));
        // SAFETY: the mapping is page-aligned and chunk payloads start at multiples of 8
        // (64-byte header, 16-byte chunk headers, payloads padded to 8), so the bytes are
        // aligned for Record; they are in bounds (checked when indexing); every bit pattern
        // is a valid Record (plain integers, no padding).
        unsafe { std::slice::from_raw_parts(bytes.as_ptr() as *const Record, c.count) }
    }

    /// The records, chunk by chunk, in place.
    pub fn record_chunks(&self) -> impl Iterator<Item = &[Record]> + '_ {
        self.chunks.iter().map(|c| self.chunk_slice(c))
    }

    /// All records in file order.
    pub fn records(&self) -> impl Iterator<Item = Record> + '_ {
        self.record_chunks().flat_map(|s| s.iter().copied())
    }

    /// Record number `i` (0-based), if present.
    pub fn record(&self, i: u64) -> Option<Record> {
        let at = self
            .chunks
            .partition_point(|c| c.first <= i)
            .checked_sub(1)?;
        let c = self.chunks[at];
        let k = (i - c.first) as usize;
        self.chunk_slice(&c).get(k).copied()
    }

    /// Where the metadata entries are.
    pub fn metas(&self) -> &[MetaRef] {
        &self.metas
    }

    /// The metadata entry that records of `pid` with `meta == meta_ref` refer to.
    pub fn meta(&self, pid: u32, meta_ref: u64) -> Option<MetaEntry<'_>> {
        let i = *self.meta_index.get(&(pid, meta_ref))?;
        MetaEntry::parse(&self.map[self.metas[i].bytes.clone()])
    }

    /// The metadata entry a record refers to, if any.
    pub fn meta_of(&self, rec: &Record) -> Option<MetaEntry<'_>> {
        if rec.meta == 0 {
            return None;
        }
        self.meta(rec.pid, rec.meta)
    }

    /// The run-info entries, in file order.
    pub fn run_infos(&self) -> impl Iterator<Item = MetaEntry<'_>> + '_ {
        self.run_infos
            .iter()
            .filter_map(|r| MetaEntry::parse(&self.map[r.clone()]))
    }

    /// Checkpoints: (records before it, byte range of its model bytes).
    pub fn checkpoints(&self) -> &[(u64, Range<usize>)] {
        &self.checkpoints
    }

    /// The model bytes of checkpoint `i` (empty when out of range).
    pub fn checkpoint_bytes(&self, i: usize) -> &[u8] {
        self.checkpoints
            .get(i)
            .map(|(_, r)| &self.map[r.clone()])
            .unwrap_or(&[])
    }

    /// Bytes of the file (for [`MetaRef::bytes`]).
    pub fn bytes(&self, range: Range<usize>) -> &[u8] {
        self.map.get(range).unwrap_or(&[])
    }

    /// What was wrong with the file, one line each, naming the file.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// `Some` when the file ends short of complete (cut, or no end marker).
    pub fn truncated(&self) -> Option<Truncation> {
        self.truncated
    }

    /// Offset of a damaged chunk where reading stopped, if any.
    pub fn corrupt_at(&self) -> Option<u64> {
        self.corrupt_at
    }

    /// Whether the file ends with an End chunk and nothing was wrong.
    pub fn complete(&self) -> bool {
        self.complete && self.truncated.is_none() && self.corrupt_at.is_none()
    }
}

/// What a non-regular file is, for messages: "a FIFO", "a directory"…
pub fn file_kind(m: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = m.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else {
        "a special file"
    }
}
