//! Following a trace that is still being written.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::TRACE_HEADER_LEN;
use super::{check_header, ChunkHeader, ChunkKind, TraceError, CHUNK_HEADER_LEN, CHUNK_MAGIC};
use crate::format::{MetaEntry, Record, RECORD_SIZE};

/// Reads a trace while another process writes it: each [`TraceTail::poll`] returns the
/// records of the chunks completed since the last poll. Metadata, run info and checkpoints
/// are collected as they arrive.
///
/// The writer must flush ([`TraceWriter::flush`](super::TraceWriter::flush)) for records to
/// become visible; a chunk is read only once all its bytes are in the file.
pub struct TraceTail {
    path: PathBuf,
    file: File,
    off: u64,
    header: bool,
    ended: bool,
    events: u64,
    metas: HashMap<(u32, u64), Vec<u8>>,
    run_infos: Vec<Vec<u8>>,
    checkpoints: Vec<(u64, Vec<u8>)>,
    skipped_kinds: u64,
    buf: Vec<u8>,
}

impl TraceTail {
    /// Opens `path` for following. The file may still be empty.
    pub fn open(path: impl AsRef<Path>) -> Result<TraceTail, TraceError> {
        let path = path.as_ref().to_path_buf();
        let file = File::open(&path).map_err(|source| TraceError::Io {
            path: path.clone(),
            source,
        })?;
        Ok(TraceTail {
            path,
            file,
            off: 0,
            header: false,
            ended: false,
            events: 0,
            metas: HashMap::new(),
            run_infos: Vec::new(),
            checkpoints: Vec::new(),
            skipped_kinds: 0,
            buf: Vec::new(),
        })
    }

    fn io(&self, source: std::io::Error) -> TraceError {
        TraceError::Io {
            path: self.path.clone(),
            source,
        }
    }

    fn read_at(&mut self, off: u64, len: usize) -> Result<(), TraceError> {
        self.buf.resize(len, 0);
        let r = self.file.read_exact_at(&mut self.buf, off);
        r.map_err(|e| self.io(e))
    }

    /// Returns the records of newly completed chunks (possibly none). Errors when the file
    /// is not a trace, has another version, or a complete chunk is damaged.
    pub fn poll(&mut self) -> Result<Vec<Record>, TraceError> {
        let mut out = Vec::new();
        let len = self.file.metadata().map_err(|e| self.io(e))?.len();
        if !self.header {
            if len < TRACE_HEADER_LEN as u64 {
                // Still being created; but refuse early if what is there is not a trace.
                self.read_at(0, len as usize)?;
                return match check_header(&self.path, &self.buf) {
                    Err(TraceError::Empty { .. }) | Ok(_) => Ok(out),
                    Err(e) => Err(e),
                };
            }
            self.read_at(0, TRACE_HEADER_LEN)?;
            check_header(&self.path, &self.buf)?;
            self.header = true;
            self.off = TRACE_HEADER_LEN as u64;
        }
        while len - self.off >= CHUNK_HEADER_LEN as u64 {
            let off = self.off;
            self.read_at(off, CHUNK_HEADER_LEN)?;
            let h = ChunkHeader::parse(&self.buf);
            if h.magic != CHUNK_MAGIC {
                return Err(TraceError::Corrupt {
                    path: self.path.clone(),
                    offset: off,
                    what: "no chunk header where one should start".to_string(),
                });
            }
            let payload = off + CHUNK_HEADER_LEN as u64;
            let end = payload + h.padded_len();
            if end > len {
                break; // not completely written yet
            }
            self.read_at(payload, h.payload_len as usize)?;
            if crc32fast::hash(&self.buf) != h.crc {
                return Err(TraceError::Corrupt {
                    path: self.path.clone(),
                    offset: off,
                    what: format!("the {} chunk fails its checksum", h.kind_name()),
                });
            }
            let b = &self.buf;
            match ChunkKind::from_u16(h.kind) {
                Some(ChunkKind::Events) => {
                    out.extend(
                        b.chunks_exact(RECORD_SIZE)
                            .map(|c| Record::from_bytes(c.try_into().unwrap_or(&[0; RECORD_SIZE]))),
                    );
                }
                Some(ChunkKind::Meta) if b.len() >= 16 => {
                    let pid = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                    let meta_ref = u64::from_le_bytes(b[8..16].try_into().unwrap_or([0; 8]));
                    self.metas.insert((pid, meta_ref), b[16..].to_vec());
                }
                Some(ChunkKind::Checkpoint) if b.len() >= 8 => {
                    let idx = u64::from_le_bytes(b[0..8].try_into().unwrap_or([0; 8]));
                    self.checkpoints.push((idx, b[8..].to_vec()));
                }
                Some(ChunkKind::RunInfo) => self.run_infos.push(b.clone()),
                Some(ChunkKind::End) => self.ended = true,
                _ => self.skipped_kinds += 1,
            }
            self.off = end;
        }
        self.events += out.len() as u64;
        Ok(out)
    }

    /// Records returned so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Whether the End chunk was read: the recording is complete.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Bytes consumed so far (the offset of the next chunk).
    pub fn offset(&self) -> u64 {
        self.off
    }

    /// The metadata entry for (pid, meta_ref), if it has arrived.
    pub fn meta(&self, pid: u32, meta_ref: u64) -> Option<MetaEntry<'_>> {
        MetaEntry::parse(self.metas.get(&(pid, meta_ref))?)
    }

    /// Run-info entries that arrived so far.
    pub fn run_infos(&self) -> impl Iterator<Item = MetaEntry<'_>> + '_ {
        self.run_infos.iter().filter_map(|b| MetaEntry::parse(b))
    }

    /// Checkpoints that arrived so far.
    pub fn checkpoints(&self) -> &[(u64, Vec<u8>)] {
        &self.checkpoints
    }

    /// Chunks of kinds this build does not know that were skipped.
    pub fn skipped_chunks(&self) -> u64 {
        self.skipped_kinds
    }
}
