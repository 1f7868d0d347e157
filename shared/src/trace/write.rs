//! Writing trace files.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use super::{ChunkKind, CHUNK_MAGIC, DEFAULT_CHUNK_RECORDS, TRACE_HEADER_LEN, TRACE_MAGIC};
use crate::format::{Record, FORMAT_VERSION, RECORD_SIZE};

/// Writes a trace: records are gathered into Events chunks of
/// [`DEFAULT_CHUNK_RECORDS`]; metadata, run info and checkpoints become their own chunks.
///
/// Call [`TraceWriter::finish`] at the end: it writes the End chunk that tells readers the
/// recording is complete. Dropping the writer without it still writes the buffered records
/// (best effort), and readers then warn that the recording was interrupted.
pub struct TraceWriter<W: Write> {
    w: Option<W>,
    pending: Vec<u8>,
    chunk_records: usize,
    events: u64,
    chunks: u64,
}

impl TraceWriter<BufWriter<File>> {
    /// Creates (or truncates) the file at `path` and writes the header.
    pub fn create(path: impl AsRef<Path>) -> io::Result<TraceWriter<BufWriter<File>>> {
        let path = path.as_ref();
        let f = File::create(path).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot create trace {}: {e}", path.display()),
            )
        })?;
        TraceWriter::new(BufWriter::with_capacity(1 << 20, f))
    }
}

impl<W: Write> TraceWriter<W> {
    /// Writes the header to `w`.
    pub fn new(w: W) -> io::Result<TraceWriter<W>> {
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        TraceWriter::with_created(w, created)
    }

    /// Like [`TraceWriter::new`] with an explicit creation time (Unix ns), for reproducible
    /// files.
    pub fn with_created(mut w: W, created_unix_ns: u64) -> io::Result<TraceWriter<W>> {
        let mut h = [0u8; TRACE_HEADER_LEN];
        h[0..16].copy_from_slice(&TRACE_MAGIC);
        h[16..20].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        h[20..24].copy_from_slice(&(TRACE_HEADER_LEN as u32).to_le_bytes());
        h[24..32].copy_from_slice(&created_unix_ns.to_le_bytes());
        w.write_all(&h)?;
        Ok(TraceWriter {
            w: Some(w),
            pending: Vec::with_capacity(DEFAULT_CHUNK_RECORDS * RECORD_SIZE),
            chunk_records: DEFAULT_CHUNK_RECORDS,
            events: 0,
            chunks: 0,
        })
    }

    /// Sets how many records go into one Events chunk (at least 1; at most 2^24).
    pub fn set_chunk_records(&mut self, n: usize) {
        self.chunk_records = n.clamp(1, 1 << 24);
    }

    fn out(&mut self) -> io::Result<&mut W> {
        self.w
            .as_mut()
            .ok_or_else(|| io::Error::other("trace writer already finished"))
    }

    fn chunk(&mut self, kind: ChunkKind, parts: &[&[u8]]) -> io::Result<()> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let len32 = u32::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "trace chunk over 4 GiB"))?;
        let mut crc = crc32fast::Hasher::new();
        for p in parts {
            crc.update(p);
        }
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&CHUNK_MAGIC.to_le_bytes());
        h[4..6].copy_from_slice(&(kind as u16).to_le_bytes());
        h[8..12].copy_from_slice(&len32.to_le_bytes());
        h[12..16].copy_from_slice(&crc.finalize().to_le_bytes());
        let w = self.out()?;
        w.write_all(&h)?;
        for p in parts {
            w.write_all(p)?;
        }
        let pad = (8 - len % 8) % 8;
        w.write_all(&[0u8; 8][..pad])?;
        self.chunks += 1;
        Ok(())
    }

    fn flush_events(&mut self) -> io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let buf = std::mem::take(&mut self.pending);
        let r = self.chunk(ChunkKind::Events, &[&buf]);
        self.pending = buf;
        self.pending.clear();
        r
    }

    /// Appends records (unchanged).
    pub fn write_records(&mut self, recs: &[Record]) -> io::Result<()> {
        let per = self.chunk_records;
        let mut rest = recs;
        while !rest.is_empty() {
            let have = self.pending.len() / RECORD_SIZE;
            if have == 0 && rest.len() >= per {
                // Whole chunks straight from the caller's slice, no copy.
                let (now, later) = rest.split_at(per);
                self.chunk(ChunkKind::Events, &[records_as_bytes(now)])?;
                self.events += per as u64;
                rest = later;
                continue;
            }
            let take = (per - have).min(rest.len());
            let (now, later) = rest.split_at(take);
            self.pending.extend_from_slice(records_as_bytes(now));
            self.events += take as u64;
            rest = later;
            if have + take == per {
                self.flush_events()?;
            }
        }
        Ok(())
    }

    /// Writes the metadata entry that records of `pid` with `meta == meta_ref` refer to.
    pub fn write_meta(&mut self, pid: u32, meta_ref: u64, entry: &[u8]) -> io::Result<()> {
        let mut head = [0u8; 16];
        head[0..4].copy_from_slice(&pid.to_le_bytes());
        head[8..16].copy_from_slice(&meta_ref.to_le_bytes());
        self.chunk(ChunkKind::Meta, &[&head, entry])
    }

    /// Writes a model checkpoint taken after `event_index` records. Buffered records are
    /// written first, so the file keeps the logical order.
    pub fn write_checkpoint(&mut self, event_index: u64, bytes: &[u8]) -> io::Result<()> {
        self.flush_events()?;
        self.chunk(ChunkKind::Checkpoint, &[&event_index.to_le_bytes(), bytes])
    }

    /// Writes a run-info metadata entry (an encoded [`MetaWriter`](crate::format::MetaWriter)
    /// entry of kind RunInfo).
    pub fn write_run_info(&mut self, entry: &[u8]) -> io::Result<()> {
        self.chunk(ChunkKind::RunInfo, &[entry])
    }

    /// Writes buffered records as a chunk and flushes the underlying writer, so that a
    /// [`TraceTail`](super::TraceTail) sees them.
    pub fn flush(&mut self) -> io::Result<()> {
        self.flush_events()?;
        self.out()?.flush()
    }

    /// Records accepted so far (including buffered ones).
    pub fn events_written(&self) -> u64 {
        self.events
    }

    /// Writes the buffered records and the End chunk, flushes, and returns the writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.flush_events()?;
        let mut end = [0u8; 16];
        end[0..8].copy_from_slice(&self.events.to_le_bytes());
        end[8..16].copy_from_slice(&self.chunks.to_le_bytes());
        self.chunk(ChunkKind::End, &[&end])?;
        let mut w = self
            .w
            .take()
            .ok_or_else(|| io::Error::other("trace writer already finished"))?;
        w.flush()?;
        Ok(w)
    }
}

impl<W: Write> Drop for TraceWriter<W> {
    fn drop(&mut self) {
        if self.w.is_some() {
            // Best effort: keep the buffered records; no End chunk, so readers will say the
            // recording was interrupted.
            let _ = self.flush();
        }
    }
}

/// The bytes of a slice of records, as stored.
pub(crate) fn records_as_bytes(recs: &[Record]) -> &[u8] {
    // SAFETY: Record is repr(C), 80 bytes, without padding and made of plain integers, so a
    // slice of records is a valid byte slice of 80 × len bytes.
    unsafe { std::slice::from_raw_parts(recs.as_ptr() as *const u8, std::mem::size_of_val(recs)) }
}
