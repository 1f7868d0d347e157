//! Writing snapshot pickles that PyTorch's `memory_viz` (and `pickle.load`) open.
//!
//! The writer emits protocol 4 with plain builtins only, using the opcodes `MemoryViz.js`'s
//! own unpickler understands (no `FRAME`; strings, frames and stacks are memoized and
//! shared, as PyTorch's own dumps do).

use std::collections::HashMap;
use std::io::{self, Write};

use super::pickle::twos_complement_len;
use super::snapshot::{Action, AllocatorSettings, Segment, Snapshot, TraceEvent};
use super::stacks::{StackId, Stacks};

/// A minimal pickle encoder for plain values.
pub struct PickleWriter<W: Write> {
    w: W,
    memo: HashMap<String, u32>,
    next: u32,
}

impl<W: Write> PickleWriter<W> {
    /// Starts a protocol-4 pickle.
    pub fn new(mut w: W) -> io::Result<PickleWriter<W>> {
        w.write_all(&[0x80, 4])?;
        Ok(PickleWriter {
            w,
            memo: HashMap::new(),
            next: 0,
        })
    }
    fn op(&mut self, b: &[u8]) -> io::Result<()> {
        self.w.write_all(b)
    }
    /// Stores the top of the stack in the memo; returns its index.
    pub fn put(&mut self) -> io::Result<u32> {
        let i = self.next;
        self.next += 1;
        if i < 256 {
            self.op(&[b'q', i as u8])?;
        } else {
            self.op(b"r")?;
            self.op(&i.to_le_bytes())?;
        }
        Ok(i)
    }
    /// Pushes memo entry `i`.
    pub fn get(&mut self, i: u32) -> io::Result<()> {
        if i < 256 {
            self.op(&[b'h', i as u8])
        } else {
            self.op(b"j")?;
            self.op(&i.to_le_bytes())
        }
    }
    /// `None`.
    pub fn none(&mut self) -> io::Result<()> {
        self.op(b"N")
    }
    /// `True` / `False`.
    pub fn bool(&mut self, v: bool) -> io::Result<()> {
        self.op(&[if v { 0x88 } else { 0x89 }])
    }
    /// An int of any size up to 128 bits.
    pub fn int(&mut self, v: i128) -> io::Result<()> {
        if (0..256).contains(&v) {
            self.op(&[b'K', v as u8])
        } else if (0..65536).contains(&v) {
            self.op(b"M")?;
            self.op(&(v as u16).to_le_bytes())
        } else if (i32::MIN as i128..=i32::MAX as i128).contains(&v) {
            self.op(b"J")?;
            self.op(&(v as i32).to_le_bytes())
        } else {
            let bytes = v.to_le_bytes();
            let n = twos_complement_len(&bytes);
            self.op(&[0x8a, n as u8])?;
            self.op(&bytes[..n])
        }
    }
    /// A float (`BINFLOAT`).
    pub fn float(&mut self, v: f64) -> io::Result<()> {
        self.op(b"G")?;
        self.op(&v.to_be_bytes())
    }
    /// A string, memoized: repeated strings are written once.
    pub fn str(&mut self, s: &str) -> io::Result<()> {
        if let Some(&i) = self.memo.get(s) {
            return self.get(i);
        }
        if s.len() < 256 {
            self.op(&[0x8c, s.len() as u8])?;
        } else {
            self.op(b"X")?;
            self.op(&(s.len() as u32).to_le_bytes())?;
        }
        self.op(s.as_bytes())?;
        let i = self.put()?;
        self.memo.insert(s.to_string(), i);
        Ok(())
    }
    /// `EMPTY_DICT`.
    pub fn empty_dict(&mut self) -> io::Result<()> {
        self.op(b"}")
    }
    /// `EMPTY_LIST`.
    pub fn empty_list(&mut self) -> io::Result<()> {
        self.op(b"]")
    }
    /// `MARK`.
    pub fn mark(&mut self) -> io::Result<()> {
        self.op(b"(")
    }
    /// `SETITEMS`: key/value pairs since the mark go into the dict below it.
    pub fn setitems(&mut self) -> io::Result<()> {
        self.op(b"u")
    }
    /// `APPENDS`: values since the mark go into the list below it.
    pub fn appends(&mut self) -> io::Result<()> {
        self.op(b"e")
    }
    /// `TUPLE2`.
    pub fn tuple2(&mut self) -> io::Result<()> {
        self.op(&[0x86])
    }
    /// Ends the pickle and returns the writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.op(b".")?;
        self.w.flush()?;
        Ok(self.w)
    }
}

struct SnapWriter<'a, W: Write> {
    p: PickleWriter<W>,
    stacks: &'a Stacks,
    frame_memo: HashMap<u32, u32>,
    stack_memo: HashMap<StackId, u32>,
}

impl<W: Write> SnapWriter<'_, W> {
    fn frames(&mut self, id: StackId) -> io::Result<()> {
        if let Some(&m) = self.stack_memo.get(&id) {
            return self.p.get(m);
        }
        self.p.empty_list()?;
        let m = self.p.put()?;
        self.stack_memo.insert(id, m);
        let ids = self.stacks.get(id);
        if !ids.is_empty() {
            self.p.mark()?;
            for &f in ids {
                if let Some(&fm) = self.frame_memo.get(&f) {
                    self.p.get(fm)?;
                    continue;
                }
                let Some(fr) = self.stacks.frame_at(f) else {
                    continue;
                };
                self.p.empty_dict()?;
                let fm = self.p.put()?;
                self.frame_memo.insert(f, fm);
                self.p.mark()?;
                self.p.str("name")?;
                self.p.str(&fr.name)?;
                self.p.str("filename")?;
                self.p.str(&fr.filename)?;
                self.p.str("line")?;
                self.p.int(fr.line as i128)?;
                self.p.setitems()?;
            }
            self.p.appends()?;
        }
        Ok(())
    }

    fn key_int(&mut self, k: &str, v: i128) -> io::Result<()> {
        self.p.str(k)?;
        self.p.int(v)
    }

    fn segment(&mut self, s: &Segment) -> io::Result<()> {
        let mut allocated = 0u64;
        let mut active = 0u64;
        let mut requested = 0u64;
        for b in &s.blocks {
            if b.state == super::snapshot::BlockState::ActiveAllocated {
                allocated += b.size;
            }
            if b.state.is_active() {
                active += b.size;
                requested += b.requested_size;
            }
        }
        self.p.empty_dict()?;
        self.p.mark()?;
        self.key_int("device", s.device as i128)?;
        self.key_int("address", s.address as i128)?;
        self.key_int("total_size", s.total_size as i128)?;
        self.key_int("allocated_size", allocated as i128)?;
        self.key_int("active_size", active as i128)?;
        self.key_int("requested_size", requested as i128)?;
        self.key_int("stream", s.stream as i128)?;
        self.p.str("segment_type")?;
        self.p.str(s.pool.name())?;
        self.p.str("segment_pool_id")?;
        self.p.int(s.pool_id.0 as i128)?;
        self.p.int(s.pool_id.1 as i128)?;
        self.p.tuple2()?;
        self.p.str("is_expandable")?;
        self.p.bool(s.is_expandable)?;
        self.p.str("frames")?;
        self.frames(s.stack)?;
        self.p.str("blocks")?;
        self.p.empty_list()?;
        if !s.blocks.is_empty() {
            self.p.mark()?;
            for b in &s.blocks {
                self.p.empty_dict()?;
                self.p.mark()?;
                self.key_int("address", b.address as i128)?;
                self.key_int("size", b.size as i128)?;
                self.key_int("requested_size", b.requested_size as i128)?;
                self.p.str("state")?;
                self.p.str(b.state.name())?;
                self.p.str("frames")?;
                self.frames(b.stack)?;
                self.p.setitems()?;
            }
            self.p.appends()?;
        }
        self.p.setitems()
    }

    fn event(&mut self, e: &TraceEvent) -> io::Result<()> {
        self.p.empty_dict()?;
        self.p.mark()?;
        self.p.str("action")?;
        self.p.str(e.action.name())?;
        // PyTorch stores an OOM's free device bytes under `device_free` instead of `addr`.
        let addr_key = if e.action == Action::Oom {
            "device_free"
        } else {
            "addr"
        };
        self.key_int(addr_key, e.addr as i128)?;
        self.key_int("size", e.size as i128)?;
        self.key_int("stream", e.stream as i128)?;
        if let Some(t) = e.time_us {
            self.key_int("time_us", t as i128)?;
        }
        self.p.str("frames")?;
        self.frames(e.stack)?;
        self.p.setitems()
    }

    fn settings(&mut self, s: &AllocatorSettings) -> io::Result<()> {
        self.p.empty_dict()?;
        self.p.mark()?;
        self.p.str("PYTORCH_CUDA_ALLOC_CONF")?;
        self.p.str(&s.conf)?;
        self.key_int("max_split_size", s.max_split_size.map_or(-1, |m| m as i128))?;
        self.p.str("garbage_collection_threshold")?;
        self.p.float(s.garbage_collection_threshold)?;
        self.p.str("expandable_segments")?;
        self.p.bool(s.expandable_segments)?;
        for (k, v) in &s.other {
            self.p.str(k)?;
            self.p.str(v)?;
        }
        self.p.str("roundup_power2_divisions")?;
        self.p.empty_dict()?;
        self.p.mark()?;
        for (i, d) in s.roundup_power2_divisions.iter().enumerate() {
            self.p.str(&(1u64 << i).to_string())?;
            self.p.int(*d as i128)?;
        }
        self.p.setitems()?;
        self.p.setitems()
    }
}

/// Writes `snap` as a `_dump_snapshot()`-style pickle: a dict with `segments`,
/// `device_traces` and (when present) `allocator_settings`.
pub fn write_snapshot_pickle<W: Write>(w: W, snap: &Snapshot) -> io::Result<W> {
    write_parts(
        w,
        &snap.segments,
        &snap.traces,
        &snap.stacks,
        snap.settings.as_ref(),
    )
}

/// Writes a snapshot pickle from its parts (`stacks` resolves the events' and blocks'
/// stack ids; pass `Stacks::default()` when there are none).
pub fn write_parts<W: Write>(
    w: W,
    segments: &[Segment],
    traces: &[Vec<TraceEvent>],
    stacks: &Stacks,
    settings: Option<&AllocatorSettings>,
) -> io::Result<W> {
    let mut s = SnapWriter {
        p: PickleWriter::new(w)?,
        stacks,
        frame_memo: HashMap::new(),
        stack_memo: HashMap::new(),
    };
    s.p.empty_dict()?;
    s.p.mark()?;
    s.p.str("segments")?;
    s.p.empty_list()?;
    if !segments.is_empty() {
        s.p.mark()?;
        for seg in segments {
            s.segment(seg)?;
        }
        s.p.appends()?;
    }
    s.p.str("device_traces")?;
    s.p.empty_list()?;
    if !traces.is_empty() {
        s.p.mark()?;
        for t in traces {
            s.p.empty_list()?;
            if !t.is_empty() {
                s.p.mark()?;
                for e in t {
                    s.event(e)?;
                }
                s.p.appends()?;
            }
        }
        s.p.appends()?;
    }
    if let Some(st) = settings {
        s.p.str("allocator_settings")?;
        s.settings(st)?;
    }
    s.p.setitems()?;
    s.p.finish()
}
