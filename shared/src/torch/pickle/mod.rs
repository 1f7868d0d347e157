//! A safe, streaming pickle reader (protocols 0–5) that builds plain values only.
//!
//! PyTorch's `torch.cuda.memory._dump_snapshot()` pickles a dict of builtins. Loading such a
//! file with Python's `pickle.load` would run any code a hostile file names, so this reader
//! is a pickle *VM without objects*: it knows `None`, `bool`, `int` (any size), `float`,
//! `str`, `bytes`, `list`, `tuple`, `dict`, `set` and `frozenset`, and it refuses every
//! opcode that imports or calls something (`GLOBAL`, `STACK_GLOBAL`, `REDUCE`, `BUILD`,
//! `INST`, `OBJ`, `NEWOBJ`, `NEWOBJ_EX`, `EXT1/2/4`, `PERSID`, `BINPERSID`, out-of-band
//! buffers) with an error that names the global when there is one.
//!
//! Values live in a [`Pickle`] arena and are addressed by 4-byte [`Handle`]s, so a decoded
//! file costs roughly as much memory as its bytes: small ints, `None` and booleans are
//! stored in the handle itself, strings are interned (snapshots repeat file names in every
//! stack frame), and the memo stores handles, so objects the pickle shares stay shared
//! (and mutable containers referenced through the memo see later appends, as in Python).

use std::collections::HashMap;
use std::fmt;
use std::io::{BufRead, ErrorKind, Read};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};

use crate::model::hash::FxMap;

mod fast;
use fast::list_hash;

/// A reference to one value of a [`Pickle`]. Copy it freely; read it with [`Pickle::view`].
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Handle(u32);

const TAG_SHIFT: u32 = 28;
const PAYLOAD: u32 = (1 << TAG_SHIFT) - 1;
const T_NONE: u32 = 0;
const T_FALSE: u32 = 1;
const T_TRUE: u32 = 2;
const T_SMALL: u32 = 3;
const T_INT: u32 = 4;
const T_BIG: u32 = 5;
const T_FLOAT: u32 = 6;
const T_STR: u32 = 7;
const T_BYTES: u32 = 8;
const T_LIST: u32 = 9;
const T_TUPLE: u32 = 10;
const T_DICT: u32 = 11;
const T_SET: u32 = 12;
const T_FROZENSET: u32 = 13;
const T_WIDE: u32 = 14;
const SMALL_MIN: i128 = -(1 << (TAG_SHIFT - 1));
const SMALL_MAX: i128 = (1 << (TAG_SHIFT - 1)) - 1;

/// A handle no value has (tag 15 is unused): marks empty memo slots.
const UNSET: Handle = Handle(u32::MAX);

impl Handle {
    const NONE: Handle = Handle(T_NONE << TAG_SHIFT);
    fn new(tag: u32, payload: u32) -> Handle {
        Handle((tag << TAG_SHIFT) | payload)
    }
    fn tag(self) -> u32 {
        self.0 >> TAG_SHIFT
    }
    fn index(self) -> usize {
        (self.0 & PAYLOAD) as usize
    }
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Handle({}:{})", self.tag(), self.index())
    }
}

/// An integer wider than 128 bits, as pickle stores it: little-endian two's complement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BigInt {
    /// The little-endian two's-complement bytes (at least 17 of them).
    pub le_bytes: Box<[u8]>,
}

impl BigInt {
    /// Whether the number is negative.
    pub fn is_negative(&self) -> bool {
        self.le_bytes.last().is_some_and(|b| b & 0x80 != 0)
    }
}

/// A borrowed view of one value.
#[derive(Clone, Copy, Debug)]
pub enum Val<'a> {
    /// `None`.
    None,
    /// `True` / `False`.
    Bool(bool),
    /// Any int that fits in 128 bits.
    Int(i128),
    /// An int wider than 128 bits.
    BigInt(&'a BigInt),
    /// A float.
    Float(f64),
    /// A `str`.
    Str(&'a str),
    /// `bytes` or `bytearray`.
    Bytes(&'a [u8]),
    /// A list.
    List(&'a [Handle]),
    /// A tuple.
    Tuple(&'a [Handle]),
    /// A dict as a flat `[k0, v0, k1, v1, …]` sequence, in insertion order.
    Dict(&'a [Handle]),
    /// A set.
    Set(&'a [Handle]),
    /// A frozenset.
    FrozenSet(&'a [Handle]),
}

impl Val<'_> {
    /// A short Python type name for messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Val::None => "None",
            Val::Bool(_) => "bool",
            Val::Int(_) | Val::BigInt(_) => "int",
            Val::Float(_) => "float",
            Val::Str(_) => "str",
            Val::Bytes(_) => "bytes",
            Val::List(_) => "list",
            Val::Tuple(_) => "tuple",
            Val::Dict(_) => "dict",
            Val::Set(_) => "set",
            Val::FrozenSet(_) => "frozenset",
        }
    }
}

/// The value of a small int handle (sign-extended from the handle's payload).
#[inline]
fn small_int(h: Handle) -> i128 {
    (((h.0 << (32 - TAG_SHIFT)) as i32) >> (32 - TAG_SHIFT)) as i128
}

/// A container's items: `chunks[chunk][start..start + len]`, owning `start..start + cap`.
#[derive(Clone, Copy, Debug, Default)]
struct Span {
    chunk: u32,
    start: u32,
    len: u32,
    cap: u32,
}

const ARENA_CHUNK: usize = 1 << 14;

/// A decoded pickle: an arena of values and the root value.
#[derive(Clone, Debug, Default)]
pub struct Pickle {
    root: Option<Handle>,
    /// Ints that fit in 64 bits (addresses, sizes, times) and, apart, the few up to 128.
    ints: Vec<i64>,
    wides: Vec<i128>,
    bigs: Vec<BigInt>,
    floats: Vec<f64>,
    strs: Vec<Arc<str>>,
    bytes: Vec<Box<[u8]>>,
    /// Where each container's items lie in `items`.
    containers: Vec<Span>,
    /// Every container's items, in chunks of [`ARENA_CHUNK`] handles (no allocation per
    /// list or dict, and no reallocation of one huge arena); a container too big for a
    /// chunk gets one of its own.
    chunks: Vec<Vec<Handle>>,
    /// Where fresh chunks come from while the VM runs, if another thread makes them.
    supply: Option<Supply>,
    /// The protocol named by the `PROTO` opcode (0 when absent).
    pub protocol: u8,
}

/// Fresh item chunks made by a [`ChunkMaker`] on another thread, their pages already
/// mapped: a big parse then does not stop for a page fault every 4 KiB of items.
#[derive(Clone, Debug)]
struct Supply(Arc<Mutex<Receiver<Vec<Handle>>>>);

/// The receiving end of a [`ChunkMaker`], for [`read_pickle_bytes_supplied`].
#[derive(Debug)]
pub struct ChunkSupply(Receiver<Vec<Handle>>);

/// Makes empty item chunks with every page written once, a few ahead of the parser.
#[derive(Debug)]
pub struct ChunkMaker(SyncSender<Vec<Handle>>);

/// Chunks a [`ChunkMaker`] keeps ready (64 KiB each).
const CHUNKS_AHEAD: usize = 32;

/// A connected maker and supply.
pub fn chunk_supply() -> (ChunkMaker, ChunkSupply) {
    let (tx, rx) = sync_channel(CHUNKS_AHEAD);
    (ChunkMaker(tx), ChunkSupply(rx))
}

impl ChunkMaker {
    /// Makes chunks until the parse that took the supply has ended (run it on a thread of
    /// its own; it returns then).
    pub fn run(self) {
        const PER_PAGE: usize = 4096 / std::mem::size_of::<Handle>();
        loop {
            let mut v: Vec<Handle> = Vec::with_capacity(ARENA_CHUNK);
            for slot in v.spare_capacity_mut().iter_mut().step_by(PER_PAGE) {
                slot.write(Handle::NONE);
            }
            if self.0.send(v).is_err() {
                return;
            }
        }
    }
}

impl Pickle {
    /// The value the pickle's `STOP` returned.
    pub fn root(&self) -> Handle {
        self.root.unwrap_or(Handle::NONE)
    }

    /// A view of `h`.
    pub fn view(&self, h: Handle) -> Val<'_> {
        let i = h.index();
        match h.tag() {
            T_FALSE => Val::Bool(false),
            T_TRUE => Val::Bool(true),
            T_SMALL => Val::Int(small_int(h)),
            T_INT => Val::Int(self.ints[i] as i128),
            T_WIDE => Val::Int(self.wides[i]),
            T_BIG => Val::BigInt(&self.bigs[i]),
            T_FLOAT => Val::Float(self.floats[i]),
            T_STR => Val::Str(&self.strs[i]),
            T_BYTES => Val::Bytes(&self.bytes[i]),
            T_LIST => Val::List(self.items_of(i)),
            T_TUPLE => Val::Tuple(self.items_of(i)),
            T_DICT => Val::Dict(self.items_of(i)),
            T_SET => Val::Set(self.items_of(i)),
            T_FROZENSET => Val::FrozenSet(self.items_of(i)),
            _ => Val::None,
        }
    }

    /// The value of `key` in dict `h` (the last one when the pickle set it twice).
    pub fn get(&self, h: Handle, key: &str) -> Option<Handle> {
        match self.view(h) {
            Val::Dict(items) => items
                .chunks_exact(2)
                .rev()
                .find(|kv| matches!(self.view(kv[0]), Val::Str(k) if k == key))
                .map(|kv| kv[1]),
            _ => None,
        }
    }

    /// Whether `h` is a dict.
    pub fn is_dict(&self, h: Handle) -> bool {
        h.tag() == T_DICT
    }

    /// The `(key, value)` pairs of dict `h` (empty for other values).
    pub fn items(&self, h: Handle) -> impl Iterator<Item = (Handle, Handle)> + '_ {
        let items: &[Handle] = match self.view(h) {
            Val::Dict(items) => items,
            _ => &[],
        };
        items.chunks_exact(2).map(|kv| (kv[0], kv[1]))
    }

    /// The elements of a list or tuple.
    pub fn seq(&self, h: Handle) -> Option<&[Handle]> {
        match self.view(h) {
            Val::List(v) | Val::Tuple(v) => Some(v),
            _ => None,
        }
    }

    /// `h` as text.
    pub fn str(&self, h: Handle) -> Option<&str> {
        match self.view(h) {
            Val::Str(s) => Some(s),
            _ => None,
        }
    }

    /// `h` as the shared string (cheap to keep).
    pub fn arc_str(&self, h: Handle) -> Option<Arc<str>> {
        (h.tag() == T_STR).then(|| self.strs[h.index()].clone())
    }

    /// `h` as an integer (`bool` counts, as in Python).
    #[inline]
    pub fn int(&self, h: Handle) -> Option<i128> {
        // Fast path: a small int is stored in the handle itself.
        if h.tag() == T_SMALL {
            return Some(small_int(h));
        }
        match self.view(h) {
            Val::Int(v) => Some(v),
            Val::Bool(b) => Some(b as i128),
            _ => None,
        }
    }

    /// `h` as a float (ints convert).
    pub fn float(&self, h: Handle) -> Option<f64> {
        match self.view(h) {
            Val::Float(v) => Some(v),
            Val::Int(v) => Some(v as f64),
            Val::Bool(b) => Some(b as u8 as f64),
            _ => None,
        }
    }

    /// `h` as a bool (only `True`/`False`).
    pub fn bool(&self, h: Handle) -> Option<bool> {
        match self.view(h) {
            Val::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// The intern id of string `h` (ids are dense, `0..string_count()`): equal strings have
    /// equal ids, so decoders can classify dict keys once per distinct string.
    #[inline]
    pub fn str_id(&self, h: Handle) -> Option<u32> {
        (h.tag() == T_STR).then_some(h.0 & PAYLOAD)
    }

    /// The id of container `h` (list, tuple, dict, set), dense in `0..container_count()`:
    /// the same id means the very same (shared) object.
    #[inline]
    pub fn container_id(&self, h: Handle) -> Option<u32> {
        matches!(h.tag(), T_LIST | T_TUPLE | T_DICT | T_SET | T_FROZENSET).then_some(h.0 & PAYLOAD)
    }

    /// Number of containers.
    pub fn container_count(&self) -> usize {
        self.containers.len()
    }

    /// The items of dict `h` as a flat `[k0, v0, k1, v1, …]` slice (`None` for non-dicts).
    #[inline]
    pub fn dict_items(&self, h: Handle) -> Option<&[Handle]> {
        (h.tag() == T_DICT).then(|| self.items_of(h.index()))
    }

    #[inline]
    fn items_of(&self, i: usize) -> &[Handle] {
        self.span_items(self.containers[i])
    }

    #[inline]
    fn span_items(&self, s: Span) -> &[Handle] {
        &self.chunks[s.chunk as usize][s.start as usize..s.start as usize + s.len as usize]
    }

    /// Where the items of list or tuple `h` are stored: lists with equal items often share
    /// one storage (see `Vm::extend_from_stack`), so a decoder can cache what it makes
    /// from a list's items under this key. Equal keys mean equal items.
    #[inline]
    pub fn items_key(&self, h: Handle) -> Option<(u32, u32, u32)> {
        matches!(h.tag(), T_LIST | T_TUPLE).then(|| {
            let s = self.containers[h.index()];
            (s.chunk, s.start, s.len)
        })
    }

    /// Room for `cap` items: `(chunk, start)`, at the end of the last chunk when it fits.
    fn place(&mut self, cap: usize) -> Result<(u32, u32), ()> {
        let fits = self
            .chunks
            .last()
            .is_some_and(|c| c.capacity() - c.len() >= cap);
        if !fits {
            let size = if cap >= ARENA_CHUNK / 4 {
                cap
            } else {
                ARENA_CHUNK
            };
            let ready = match &self.supply {
                Some(Supply(rx)) if size == ARENA_CHUNK => {
                    rx.try_lock().ok().and_then(|rx| rx.try_recv().ok())
                }
                _ => None,
            };
            self.chunks
                .push(ready.unwrap_or_else(|| Vec::with_capacity(size)));
        }
        let chunk = self.chunks.len() - 1;
        let c = &mut self.chunks[chunk];
        let start = c.len();
        c.resize(start + cap, Handle::NONE);
        Ok((
            u32::try_from(chunk).map_err(|_| ())?,
            u32::try_from(start).map_err(|_| ())?,
        ))
    }

    /// A new container holding `src`.
    fn new_container(&mut self, src: &[Handle]) -> Result<Span, ()> {
        if src.is_empty() {
            // `EMPTY_DICT`/`EMPTY_LIST`: no room yet, at the end of the last chunk so the
            // first fill can grow in place.
            if let Some(c) = self.chunks.last() {
                if c.len() < c.capacity() {
                    return Ok(Span {
                        chunk: u32::try_from(self.chunks.len() - 1).map_err(|_| ())?,
                        start: u32::try_from(c.len()).map_err(|_| ())?,
                        len: 0,
                        cap: 0,
                    });
                }
            }
        }
        let n = u32::try_from(src.len()).map_err(|_| ())?;
        let (chunk, start) = self.place(src.len())?;
        self.chunks[chunk as usize][start as usize..].copy_from_slice(src);
        Ok(Span {
            chunk,
            start,
            len: n,
            cap: n,
        })
    }

    /// Appends `src` to container `i`: in place when it has room or ends its chunk,
    /// otherwise moved to fresh room (a first fill gets exactly its size; later growth
    /// doubles, so repeated APPENDS cost amortised O(1) per item).
    fn extend(&mut self, i: usize, src: &[Handle]) -> Result<(), ()> {
        if src.is_empty() {
            return Ok(());
        }
        let mut s = self.containers[i];
        let n = src.len();
        let len = s.len as usize;
        let start = s.start as usize;
        let new_len = u32::try_from(len + n).map_err(|_| ())?;
        let c = &mut self.chunks[s.chunk as usize];
        if start + s.cap as usize == c.len()
            && len == s.cap as usize
            && (start == 0 || c.len() + n <= c.capacity())
        {
            // Full and at the end of its chunk: grow the chunk.
            c.extend_from_slice(src);
            s.cap = new_len;
        } else if len + n <= s.cap as usize {
            c[start + len..start + len + n].copy_from_slice(src);
        } else {
            let cap = if len == 0 { n } else { 2 * (len + n) };
            let old: Vec<Handle> = c[start..start + len].to_vec();
            let (chunk, new_start) = self.place(cap)?;
            let c = &mut self.chunks[chunk as usize];
            let ns = new_start as usize;
            c[ns..ns + len].copy_from_slice(&old);
            c[ns + len..ns + len + n].copy_from_slice(src);
            s.chunk = chunk;
            s.start = new_start;
            s.cap = u32::try_from(cap).map_err(|_| ())?;
        }
        s.len = new_len;
        self.containers[i] = s;
        Ok(())
    }

    /// Number of distinct interned strings.
    pub fn string_count(&self) -> usize {
        self.strs.len()
    }
}

/// Why a pickle was refused.
#[derive(Debug, Clone, PartialEq)]
pub enum PickleError {
    /// The pickle wants to import or call something.
    Code {
        /// The opcode's name.
        opcode: &'static str,
        /// `module.name` when the pickle named one.
        global: Option<String>,
        /// Byte offset of the opcode.
        offset: u64,
    },
    /// The input ended early.
    Truncated {
        /// Byte offset where more input was needed.
        offset: u64,
        /// What was being read.
        what: &'static str,
    },
    /// A byte that is not a pickle opcode.
    BadOpcode {
        /// The byte.
        byte: u8,
        /// Its offset.
        offset: u64,
    },
    /// A well-formed opcode used in a way pickle does not allow.
    Malformed {
        /// What is wrong.
        msg: String,
        /// Byte offset of the opcode.
        offset: u64,
    },
    /// Reading the input failed.
    Io(String),
}

impl fmt::Display for PickleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PickleError::Code { opcode, global: Some(g), offset } => write!(
                f,
                "pickle names a global '{g}' ({opcode} at byte {offset}); fragprobe never executes pickles — this is not a memory snapshot"
            ),
            PickleError::Code { opcode, global: None, offset } => write!(
                f,
                "pickle uses {opcode} at byte {offset}, which builds or calls objects; fragprobe never executes pickles — this is not a memory snapshot"
            ),
            PickleError::Truncated { offset, what } => write!(
                f,
                "pickle is truncated at byte {offset} (while reading {what}); the file is incomplete — copy it again"
            ),
            PickleError::BadOpcode { byte, offset } => write!(
                f,
                "byte {offset} holds {byte:#04x}, which is not a pickle opcode; this is not a pickle (or it is corrupt)"
            ),
            PickleError::Malformed { msg, offset } => {
                write!(f, "malformed pickle at byte {offset}: {msg}")
            }
            PickleError::Io(e) => write!(f, "cannot read the pickle: {e}"),
        }
    }
}

impl std::error::Error for PickleError {}

/// Most decimal digits a protocol 0/1 integer may have: CPython's own default limit for
/// converting text to int (`sys.int_info.default_max_str_digits`), which also keeps the
/// quadratic conversion below cheap.
const MAX_DECIMAL_DIGITS: usize = 4300;

/// A decimal integer (`INT`/`LONG` text, optional sign) as little-endian two's-complement
/// bytes, whatever its width, so protocols 0 and 1 read the same integers `LONG1`/`LONG4`
/// carry in protocol 2 and later.
fn decimal_le_bytes(t: &str) -> Result<Vec<u8>, String> {
    let (neg, digits) = match t.as_bytes() {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        d => (false, d),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err("not a number".into());
    }
    if digits.len() > MAX_DECIMAL_DIGITS {
        return Err(format!(
            "{} digits exceed the limit of {MAX_DECIMAL_DIGITS} (as in Python)",
            digits.len()
        ));
    }
    // Magnitude, little-endian base 256.
    let mut mag: Vec<u8> = vec![0];
    for &d in digits {
        let mut carry = u32::from(d - b'0');
        for byte in mag.iter_mut() {
            let v = u32::from(*byte) * 10 + carry;
            *byte = v as u8;
            carry = v >> 8;
        }
        if carry > 0 {
            mag.push(carry as u8);
        }
    }
    // Room for the sign bit.
    mag.push(0);
    if neg {
        let mut carry = 1u16;
        for byte in mag.iter_mut() {
            let v = u16::from(!*byte) + carry;
            *byte = v as u8;
            carry = v >> 8;
        }
    }
    Ok(mag)
}

/// At most 40 characters of `t`, for messages.
fn clip(t: &str) -> String {
    if t.len() <= 40 {
        format!("{t:?}")
    } else {
        let head: String = t.chars().take(40).collect();
        format!("{head:?}… ({} characters)", t.len())
    }
}

/// Limits that keep a hostile pickle from exhausting memory.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Longest single string/bytes value accepted.
    pub max_string: u64,
    /// Longest text line (protocol 0 opcodes).
    pub max_line: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_string: 1 << 32,
            max_line: 1 << 20,
        }
    }
}

/// Reads one pickle from `r` (stops after `STOP`; the reader is read in 64 KiB chunks, so
/// bytes after `STOP` may have been consumed).
pub fn read_pickle<R: BufRead>(r: R) -> Result<Pickle, PickleError> {
    read_pickle_with(r, Limits::default())
}

/// Reads one pickle from a byte slice (a mapped file, say), in place: no copy of the
/// input is made.
pub fn read_pickle_bytes(b: &[u8]) -> Result<Pickle, PickleError> {
    run_vm(Input::whole(b), Limits::default(), None)
}

/// [`read_pickle_bytes`] taking fresh chunks from `supply` (a [`ChunkMaker`] on another
/// thread) while they are ready; the maker stops when this returns.
pub fn read_pickle_bytes_supplied(b: &[u8], supply: ChunkSupply) -> Result<Pickle, PickleError> {
    run_vm(Input::whole(b), Limits::default(), Some(supply))
}

/// [`read_pickle`] with explicit [`Limits`].
pub fn read_pickle_with<R: BufRead>(r: R, limits: Limits) -> Result<Pickle, PickleError> {
    run_vm(Input::new(Chunks::new(r)), limits, None)
}

fn run_vm<S: Source>(
    input: Input<S>,
    limits: Limits,
    supply: Option<ChunkSupply>,
) -> Result<Pickle, PickleError> {
    let mut vm = Vm {
        input,
        out: Pickle {
            supply: supply.map(|s| Supply(Arc::new(Mutex::new(s.0)))),
            ..Pickle::default()
        },
        stack: Vec::new(),
        marks: Vec::new(),
        memo: Vec::new(),
        memo_sparse: HashMap::new(),
        memo_count: 0,
        interned: HashMap::new(),
        lists: FxMap::default(),
        get_lists: FxMap::default(),
        scratch: Vec::new(),
        limits,
        op_at: 0,
    };
    let ran = vm.run();
    // Dropping the supply stops its maker.
    vm.out.supply = None;
    ran?;
    Ok(vm.out)
}

/// Where the VM's bytes come from: a buffer it refills, or the whole input at once.
trait Source {
    /// The bytes held now.
    fn bytes(&self) -> &[u8];
    /// Replaces the bytes held with the next ones; how many (0 at the end).
    fn refill(&mut self) -> std::io::Result<usize>;
}

/// A reader, in 64 KiB chunks read into a buffer of our own.
struct Chunks<R> {
    r: R,
    buf: Box<[u8]>,
}

const CHUNK: usize = 1 << 16;

impl<R: Read> Chunks<R> {
    fn new(r: R) -> Self {
        Chunks {
            r,
            buf: vec![0u8; CHUNK].into_boxed_slice(),
        }
    }
}

impl<R: Read> Source for Chunks<R> {
    #[inline(always)]
    fn bytes(&self) -> &[u8] {
        &self.buf
    }
    fn refill(&mut self) -> std::io::Result<usize> {
        self.r.read(&mut self.buf)
    }
}

/// The whole input as one slice.
struct Whole<'a>(&'a [u8]);

impl Source for Whole<'_> {
    #[inline(always)]
    fn bytes(&self) -> &[u8] {
        self.0
    }
    fn refill(&mut self) -> std::io::Result<usize> {
        self.0 = &[];
        Ok(0)
    }
}

/// The input: the hot opcode paths (`byte`, `array`) are a bounds check and a load, not a
/// call into the reader.
struct Input<S> {
    src: S,
    lo: usize,
    hi: usize,
    /// Input offset of `bytes()[0]`.
    base: u64,
}

impl<'a> Input<Whole<'a>> {
    fn whole(b: &'a [u8]) -> Self {
        Input {
            src: Whole(b),
            lo: 0,
            hi: b.len(),
            base: 0,
        }
    }
}

impl<S: Source> Input<S> {
    fn new(src: S) -> Self {
        Input {
            src,
            lo: 0,
            hi: 0,
            base: 0,
        }
    }

    /// The bytes held (valid up to `hi`).
    #[inline(always)]
    fn bytes(&self) -> &[u8] {
        self.src.bytes()
    }

    /// Offset of the next unread byte.
    #[inline]
    fn pos(&self) -> u64 {
        self.base + self.lo as u64
    }

    /// Refills the (fully consumed) buffer; `false` at the end of the input.
    #[cold]
    fn refill(&mut self) -> Result<bool, PickleError> {
        debug_assert!(self.lo >= self.hi);
        self.base += self.hi as u64;
        self.lo = 0;
        self.hi = 0;
        loop {
            match self.src.refill() {
                Ok(n) => {
                    self.hi = n;
                    return Ok(n > 0);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(PickleError::Io(e.to_string())),
            }
        }
    }

    #[cold]
    fn byte_slow(&mut self, what: &'static str) -> Result<u8, PickleError> {
        if !self.refill()? {
            return Err(PickleError::Truncated {
                offset: self.pos(),
                what,
            });
        }
        let b = self.bytes()[0];
        self.lo = 1;
        Ok(b)
    }

    #[inline(always)]
    fn byte(&mut self, what: &'static str) -> Result<u8, PickleError> {
        if self.lo < self.hi {
            let b = self.bytes()[self.lo];
            self.lo += 1;
            Ok(b)
        } else {
            self.byte_slow(what)
        }
    }

    /// Reads exactly `n` bytes into `out` (cleared first), growing it as data arrives so a
    /// lying length cannot make us allocate memory the input does not back.
    fn exact(&mut self, n: u64, out: &mut Vec<u8>, what: &'static str) -> Result<(), PickleError> {
        out.clear();
        let mut left = n;
        while left > 0 {
            if self.lo >= self.hi && !self.refill()? {
                return Err(PickleError::Truncated {
                    offset: self.pos(),
                    what,
                });
            }
            let avail = self.hi - self.lo;
            let take = avail.min(usize::try_from(left).unwrap_or(usize::MAX));
            out.extend_from_slice(&self.bytes()[self.lo..self.lo + take]);
            self.lo += take;
            left -= take as u64;
        }
        Ok(())
    }

    /// The next `n` bytes as a slice of the buffer when they are all there already.
    #[inline(always)]
    fn peek_slice(&self, n: usize) -> Option<&[u8]> {
        self.bytes()
            .get(self.lo..self.lo + n)
            .filter(|_| self.hi - self.lo >= n)
    }

    #[inline(always)]
    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], PickleError> {
        if self.hi - self.lo >= N {
            let mut a = [0u8; N];
            a.copy_from_slice(&self.bytes()[self.lo..self.lo + N]);
            self.lo += N;
            return Ok(a);
        }
        self.array_slow(what)
    }

    #[cold]
    fn array_slow<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], PickleError> {
        let mut a = [0u8; N];
        for b in a.iter_mut() {
            *b = self.byte(what)?;
        }
        Ok(a)
    }

    fn line(
        &mut self,
        max: usize,
        out: &mut Vec<u8>,
        what: &'static str,
    ) -> Result<(), PickleError> {
        out.clear();
        loop {
            let b = self.byte(what)?;
            if b == b'\n' {
                if out.last() == Some(&b'\r') {
                    out.pop();
                }
                return Ok(());
            }
            if out.len() >= max {
                return Err(PickleError::Malformed {
                    msg: format!("{what} line longer than {max} bytes"),
                    offset: self.pos(),
                });
            }
            out.push(b);
        }
    }
}

struct Vm<S> {
    input: Input<S>,
    out: Pickle,
    stack: Vec<Handle>,
    marks: Vec<usize>,
    /// Dense memo; [`UNSET`] where nothing was stored.
    memo: Vec<Handle>,
    memo_sparse: HashMap<u64, Handle>,
    memo_count: u64,
    interned: HashMap<Arc<str>, u32>,
    /// The storage of each distinct list content seen, by [`list_hash`].
    lists: FxMap<u64, Span>,
    /// Lists written as `EMPTY_LIST MEMOIZE MARK (BINGET|LONG_BINGET)… APPENDS`, by a hash
    /// of their get opcodes' bytes: the bytes, and the storage their items got. Emptied
    /// when a memo slot is stored over (a crafted pickle may rebind one; Python's pickler
    /// never does): the same get bytes then no longer mean the same items.
    get_lists: FxMap<u64, (Box<[u8]>, Span)>,
    scratch: Vec<u8>,
    limits: Limits,
    op_at: u64,
}

fn code(opcode: &'static str, global: Option<String>, offset: u64) -> PickleError {
    PickleError::Code {
        opcode,
        global,
        offset,
    }
}

impl<S: Source> Vm<S> {
    fn malformed(&self, msg: impl Into<String>) -> PickleError {
        PickleError::Malformed {
            msg: msg.into(),
            offset: self.op_at,
        }
    }

    fn index(&self, len: usize) -> Result<u32, PickleError> {
        u32::try_from(len)
            .ok()
            .filter(|&i| i <= PAYLOAD)
            .ok_or_else(|| self.malformed("more values than this reader supports (2^28 per type)"))
    }

    fn push(&mut self, h: Handle) {
        self.stack.push(h);
    }

    /// Values above the innermost MARK (Python starts a fresh stack at each MARK).
    fn above_mark(&self) -> usize {
        self.stack.len()
            - self
                .marks
                .last()
                .copied()
                .unwrap_or(0)
                .min(self.stack.len())
    }

    fn pop(&mut self, what: &str) -> Result<Handle, PickleError> {
        if self.above_mark() == 0 {
            return Err(self.malformed(format!("{what} on an empty stack")));
        }
        self.stack
            .pop()
            .ok_or_else(|| self.malformed(format!("{what} on an empty stack")))
    }

    fn top(&self, what: &str) -> Result<Handle, PickleError> {
        if self.above_mark() == 0 {
            return Err(self.malformed(format!("{what} on an empty stack")));
        }
        self.stack
            .last()
            .copied()
            .ok_or_else(|| self.malformed(format!("{what} on an empty stack")))
    }

    fn pop_mark(&mut self, what: &str) -> Result<usize, PickleError> {
        let m = self
            .marks
            .pop()
            .ok_or_else(|| self.malformed(format!("{what} without MARK")))?;
        if m > self.stack.len() {
            return Err(self.malformed(format!("{what}: MARK above the stack")));
        }
        Ok(m)
    }

    fn int(&mut self, v: i128) -> Result<Handle, PickleError> {
        if (SMALL_MIN..=SMALL_MAX).contains(&v) {
            return Ok(Handle::new(T_SMALL, (v as i32 as u32) & PAYLOAD));
        }
        if let Ok(v) = i64::try_from(v) {
            let i = self.index(self.out.ints.len())?;
            self.out.ints.push(v);
            return Ok(Handle::new(T_INT, i));
        }
        let i = self.index(self.out.wides.len())?;
        self.out.wides.push(v);
        Ok(Handle::new(T_WIDE, i))
    }

    /// Little-endian two's-complement bytes (LONG1/LONG4).
    fn long_bytes(&mut self, b: &[u8]) -> Result<Handle, PickleError> {
        if b.is_empty() {
            return self.int(0);
        }
        let neg = b[b.len() - 1] & 0x80 != 0;
        // Trim redundant sign bytes so 17-byte encodings of 128-bit values still fit.
        let n = twos_complement_len(b);
        if n <= 16 {
            let mut a = [if neg { 0xffu8 } else { 0 }; 16];
            a[..n].copy_from_slice(&b[..n]);
            return self.int(i128::from_le_bytes(a));
        }
        let i = self.index(self.out.bigs.len())?;
        // Stored without redundant sign bytes, so equal ints compare equal whichever
        // opcode (LONG1, LONG4, or protocol 0's decimal text) carried them.
        self.out.bigs.push(BigInt {
            le_bytes: b[..n].into(),
        });
        Ok(Handle::new(T_BIG, i))
    }

    fn float(&mut self, v: f64) -> Result<Handle, PickleError> {
        let i = self.index(self.out.floats.len())?;
        self.out.floats.push(v);
        Ok(Handle::new(T_FLOAT, i))
    }

    fn str_from_scratch(&mut self) -> Result<Handle, PickleError> {
        let scratch = std::mem::take(&mut self.scratch);
        let r = match std::str::from_utf8(&scratch) {
            Ok(s) => self.intern(s),
            Err(e) => Err(self.malformed(format!("string is not UTF-8: {e}"))),
        };
        self.scratch = scratch;
        r
    }

    fn intern(&mut self, s: &str) -> Result<Handle, PickleError> {
        if let Some(&i) = self.interned.get(s) {
            return Ok(Handle::new(T_STR, i));
        }
        let i = self.index(self.out.strs.len())?;
        let a: Arc<str> = Arc::from(s);
        self.out.strs.push(a.clone());
        self.interned.insert(a, i);
        Ok(Handle::new(T_STR, i))
    }

    /// A `str` of `n` bytes: interned straight from the input buffer when it is all there
    /// (the common case), through `scratch` otherwise.
    fn read_str(&mut self, n: u64, what: &'static str) -> Result<Handle, PickleError> {
        if let Some(b) = usize::try_from(n)
            .ok()
            .and_then(|n| self.input.peek_slice(n))
        {
            if let Ok(s) = std::str::from_utf8(b) {
                if let Some(&i) = self.interned.get(s) {
                    self.input.lo += n as usize;
                    return Ok(Handle::new(T_STR, i));
                }
            }
        }
        self.read_string(n, what)?;
        self.str_from_scratch()
    }

    fn bytes_from_scratch(&mut self) -> Result<Handle, PickleError> {
        let i = self.index(self.out.bytes.len())?;
        self.out.bytes.push(self.scratch.as_slice().into());
        Ok(Handle::new(T_BYTES, i))
    }

    /// Python 3 decodes protocol-0/1 byte strings (STRING, BINSTRING…) as ASCII `str` by
    /// default; keep them as `str` when they are UTF-8, `bytes` otherwise.
    fn legacy_string_from_scratch(&mut self) -> Result<Handle, PickleError> {
        if std::str::from_utf8(&self.scratch).is_ok() {
            self.str_from_scratch()
        } else {
            self.bytes_from_scratch()
        }
    }

    /// A new container holding `stack[from..]` (which is then popped).
    fn container(&mut self, tag: u32, from: usize) -> Result<Handle, PickleError> {
        let i = self.index(self.out.containers.len())?;
        let span = self.out.new_container(&self.stack[from..]);
        self.stack.truncate(from);
        let span =
            span.map_err(|_| self.malformed("more container items than this reader supports"))?;
        self.out.containers.push(span);
        Ok(Handle::new(tag, i))
    }

    /// Appends `stack[from..]` to container `target` (then pops them).
    ///
    /// The first fill of a list whose items equal an earlier list's shares that list's
    /// storage: snapshots repeat the same frame lists in every trace entry of a training
    /// loop, and sharing keeps them from costing memory once per entry. Sharing is safe
    /// because items once stored never change ([`Pickle::extend`] only writes past a
    /// container's length or moves it), so a later append to either list leaves the
    /// other as it was.
    fn extend_from_stack(&mut self, target: Handle, from: usize) -> Result<(), PickleError> {
        let i = target.index();
        let items = &self.stack[from..];
        if target.tag() == T_LIST && items.len() >= 2 && self.out.containers[i].len == 0 {
            let key = list_hash(items);
            if let Some(&s) = self.lists.get(&key) {
                if self.out.span_items(s) == items {
                    self.out.containers[i] = s;
                    self.stack.truncate(from);
                    return Ok(());
                }
            } else {
                let r = self.out.extend(i, items);
                self.stack.truncate(from);
                r.map_err(|_| self.malformed("more container items than this reader supports"))?;
                let s = self.out.containers[i];
                self.lists.insert(key, Span { cap: s.len, ..s });
                return Ok(());
            }
        }
        let r = self.out.extend(i, items);
        self.stack.truncate(from);
        r.map_err(|_| self.malformed("more container items than this reader supports"))
    }

    fn read_string(&mut self, n: u64, what: &'static str) -> Result<(), PickleError> {
        if n > self.limits.max_string {
            return Err(self.malformed(format!(
                "{what} of {n} bytes exceeds the {} byte limit",
                self.limits.max_string
            )));
        }
        let mut s = std::mem::take(&mut self.scratch);
        let r = self.input.exact(n, &mut s, what);
        self.scratch = s;
        r
    }

    fn read_line(&mut self, what: &'static str) -> Result<(), PickleError> {
        let mut s = std::mem::take(&mut self.scratch);
        let r = self.input.line(self.limits.max_line, &mut s, what);
        self.scratch = s;
        r
    }

    /// `MEMOIZE`: Python numbers entries by the memo's current size, which is the dense
    /// memo's length unless the pickle also used `PUT`.
    #[inline]
    fn memoize(&mut self) -> Result<(), PickleError> {
        let i = self.memo_count;
        match self.stack.last() {
            Some(&h)
                if i == self.memo.len() as u64
                    && self.marks.last().is_none_or(|&m| m < self.stack.len()) =>
            {
                self.memo.push(h);
                self.memo_count += 1;
                Ok(())
            }
            _ => self.memo_put(i),
        }
    }

    fn memo_put(&mut self, idx: u64) -> Result<(), PickleError> {
        let h = self.top("PUT")?;
        let i = idx as usize;
        if idx < (1u64 << 26) && i <= self.memo.len() + 65_536 {
            if i >= self.memo.len() {
                self.memo.resize(i + 1, UNSET);
            }
            if std::mem::replace(&mut self.memo[i], h) == UNSET {
                self.memo_count += 1;
            } else {
                self.rebound();
            }
        } else if self.memo_sparse.insert(idx, h).is_none() {
            self.memo_count += 1;
        } else {
            self.rebound();
        }
        Ok(())
    }

    #[inline(always)]
    fn memo_get(&mut self, idx: u64) -> Result<(), PickleError> {
        match self.memo.get(idx as usize) {
            Some(&h) if h != UNSET => {
                self.stack.push(h);
                Ok(())
            }
            _ => self.memo_get_sparse(idx),
        }
    }

    #[cold]
    fn memo_get_sparse(&mut self, idx: u64) -> Result<(), PickleError> {
        let h = self
            .memo_sparse
            .get(&idx)
            .copied()
            .ok_or_else(|| self.malformed(format!("memo key {idx} was never stored")))?;
        self.push(h);
        Ok(())
    }

    /// A memo slot was stored over: forget the lists known by their get bytes.
    #[cold]
    fn rebound(&mut self) {
        self.get_lists.clear();
    }

    fn append_to(
        &mut self,
        target: Handle,
        items: Vec<Handle>,
        op: &str,
    ) -> Result<(), PickleError> {
        match target.tag() {
            T_LIST | T_SET => {
                let from = self.stack.len();
                self.stack.extend(items);
                self.extend_from_stack(target, from)
            }
            _ => Err(self.malformed(format!(
                "{op} onto a {} (only lists and sets can grow)",
                self.out.view(target).type_name()
            ))),
        }
    }

    fn run(&mut self) -> Result<(), PickleError> {
        loop {
            self.op_at = self.input.pos();
            let op = self.input.byte("an opcode")?;
            match op {
                b'.' => {
                    let root = self.pop("STOP")?;
                    self.out.root = Some(root);
                    return Ok(());
                }
                0x80 => {
                    let v = self.input.byte("PROTO")?;
                    if v > 5 {
                        return Err(self.malformed(format!(
                            "pickle protocol {v} is newer than this reader (0–5)"
                        )));
                    }
                    self.out.protocol = v;
                }
                0x95 => {
                    // FRAME: an 8-byte length hint; the frame's opcodes follow inline.
                    self.input.array::<8>("FRAME")?;
                }
                b'(' => self.marks.push(self.stack.len()),
                b'0' => {
                    if self.marks.last() == Some(&self.stack.len()) {
                        self.marks.pop();
                    } else {
                        self.pop("POP")?;
                    }
                }
                b'1' => {
                    let m = self.pop_mark("POP_MARK")?;
                    self.stack.truncate(m);
                }
                b'2' => {
                    let h = self.top("DUP")?;
                    self.push(h);
                }
                b'N' => self.push(Handle::NONE),
                0x88 => self.push(Handle::new(T_TRUE, 0)),
                0x89 => self.push(Handle::new(T_FALSE, 0)),
                b'J' => {
                    let v = i32::from_le_bytes(self.input.array("BININT")?);
                    let h = self.int(v as i128)?;
                    self.push(h);
                }
                b'K' => {
                    // 0..=255 and 0..=65535 always fit in a handle.
                    let v = self.input.byte("BININT1")?;
                    self.push(Handle::new(T_SMALL, v as u32));
                }
                b'M' => {
                    let v = u16::from_le_bytes(self.input.array("BININT2")?);
                    self.push(Handle::new(T_SMALL, v as u32));
                }
                0x8a => {
                    let n = self.input.byte("LONG1")? as usize;
                    if (1..=8).contains(&n) && self.input.peek_slice(n).is_some() {
                        // Addresses and times: sign-extended straight from the buffer.
                        let h = self.long1_short(n)?;
                        self.push(h);
                        continue;
                    }
                    if n <= 16 {
                        // The common case (addresses, sizes, times): straight from the buffer.
                        if let Some(b) = self.input.peek_slice(n) {
                            let mut a = [0u8; 16];
                            a[..n].copy_from_slice(b);
                            self.input.lo += n;
                            let h = self.long_bytes(&a[..n])?;
                            self.push(h);
                            continue;
                        }
                    }
                    self.read_string(n as u64, "LONG1")?;
                    let b = std::mem::take(&mut self.scratch);
                    let h = self.long_bytes(&b);
                    self.scratch = b;
                    self.push(h?);
                }
                0x8b => {
                    let n = i32::from_le_bytes(self.input.array("LONG4")?);
                    if n < 0 {
                        return Err(self.malformed("LONG4 with a negative length"));
                    }
                    self.read_string(n as u64, "LONG4")?;
                    let b = std::mem::take(&mut self.scratch);
                    let h = self.long_bytes(&b);
                    self.scratch = b;
                    self.push(h?);
                }
                b'I' => {
                    self.read_line("INT")?;
                    let text = String::from_utf8_lossy(&self.scratch).trim().to_string();
                    let h = match text.as_str() {
                        "01" => Handle::new(T_TRUE, 0),
                        "00" => Handle::new(T_FALSE, 0),
                        t => {
                            let b = decimal_le_bytes(t)
                                .map_err(|why| self.malformed(format!("INT {}: {why}", clip(t))))?;
                            self.long_bytes(&b)?
                        }
                    };
                    self.push(h);
                }
                b'L' => {
                    self.read_line("LONG")?;
                    let text = String::from_utf8_lossy(&self.scratch).trim().to_string();
                    let t = text.strip_suffix('L').unwrap_or(&text);
                    let b = decimal_le_bytes(t)
                        .map_err(|why| self.malformed(format!("LONG {}: {why}", clip(t))))?;
                    let h = self.long_bytes(&b)?;
                    self.push(h);
                }
                b'G' => {
                    let v = f64::from_be_bytes(self.input.array("BINFLOAT")?);
                    let h = self.float(v)?;
                    self.push(h);
                }
                b'F' => {
                    self.read_line("FLOAT")?;
                    let text = String::from_utf8_lossy(&self.scratch).trim().to_string();
                    let v: f64 = text
                        .parse()
                        .map_err(|_| self.malformed(format!("FLOAT {text:?} is not a number")))?;
                    let h = self.float(v)?;
                    self.push(h);
                }
                b'X' => {
                    let n = u32::from_le_bytes(self.input.array("BINUNICODE")?) as u64;
                    let h = self.read_str(n, "BINUNICODE")?;
                    self.push(h);
                }
                0x8c => {
                    let n = self.input.byte("SHORT_BINUNICODE")? as u64;
                    let h = self.read_str(n, "SHORT_BINUNICODE")?;
                    self.push(h);
                }
                0x8d => {
                    let n = u64::from_le_bytes(self.input.array("BINUNICODE8")?);
                    let h = self.read_str(n, "BINUNICODE8")?;
                    self.push(h);
                }
                b'V' => {
                    self.read_line("UNICODE")?;
                    let s = decode_raw_unicode_escape(&self.scratch)
                        .ok_or_else(|| self.malformed("UNICODE with a bad escape"))?;
                    let h = self.intern(&s)?;
                    self.push(h);
                }
                b'S' => {
                    self.read_line("STRING")?;
                    let s = decode_quoted(&self.scratch)
                        .ok_or_else(|| self.malformed("STRING is not a quoted literal"))?;
                    self.scratch = s;
                    let h = self.legacy_string_from_scratch()?;
                    self.push(h);
                }
                b'T' => {
                    let n = i32::from_le_bytes(self.input.array("BINSTRING")?);
                    if n < 0 {
                        return Err(self.malformed("BINSTRING with a negative length"));
                    }
                    self.read_string(n as u64, "BINSTRING")?;
                    let h = self.legacy_string_from_scratch()?;
                    self.push(h);
                }
                b'U' => {
                    let n = self.input.byte("SHORT_BINSTRING")? as u64;
                    self.read_string(n, "SHORT_BINSTRING")?;
                    let h = self.legacy_string_from_scratch()?;
                    self.push(h);
                }
                b'B' => {
                    let n = u32::from_le_bytes(self.input.array("BINBYTES")?) as u64;
                    self.read_string(n, "BINBYTES")?;
                    let h = self.bytes_from_scratch()?;
                    self.push(h);
                }
                b'C' => {
                    let n = self.input.byte("SHORT_BINBYTES")? as u64;
                    self.read_string(n, "SHORT_BINBYTES")?;
                    let h = self.bytes_from_scratch()?;
                    self.push(h);
                }
                0x8e | 0x96 => {
                    let what = if op == 0x8e {
                        "BINBYTES8"
                    } else {
                        "BYTEARRAY8"
                    };
                    let n = u64::from_le_bytes(self.input.array(what)?);
                    self.read_string(n, what)?;
                    let h = self.bytes_from_scratch()?;
                    self.push(h);
                }
                b']' => {
                    if self.list_of_gets()? {
                        continue;
                    }
                    let h = self.container(T_LIST, self.stack.len())?;
                    self.push(h);
                }
                b'}' => {
                    let h = self.container(T_DICT, self.stack.len())?;
                    self.push(h);
                }
                b')' => {
                    let h = self.container(T_TUPLE, self.stack.len())?;
                    self.push(h);
                }
                0x8f => {
                    let h = self.container(T_SET, self.stack.len())?;
                    self.push(h);
                }
                b'l' | b't' | b'd' | 0x91 => {
                    let (name, tag) = match op {
                        b'l' => ("LIST", T_LIST),
                        b't' => ("TUPLE", T_TUPLE),
                        b'd' => ("DICT", T_DICT),
                        _ => ("FROZENSET", T_FROZENSET),
                    };
                    let m = self.pop_mark(name)?;
                    if tag == T_DICT && !(self.stack.len() - m).is_multiple_of(2) {
                        return Err(self.malformed("DICT with an odd number of items"));
                    }
                    let h = self.container(tag, m)?;
                    self.push(h);
                }
                0x85..=0x87 => {
                    let n = (op - 0x84) as usize;
                    if self.stack.len() < n
                        || self.marks.last().is_some_and(|&m| m > self.stack.len() - n)
                    {
                        return Err(self.malformed(format!("TUPLE{n} needs {n} values")));
                    }
                    let h = self.container(T_TUPLE, self.stack.len() - n)?;
                    self.push(h);
                }
                b'a' => {
                    let v = self.pop("APPEND")?;
                    let target = self.top("APPEND")?;
                    self.append_to(target, vec![v], "APPEND")?;
                }
                b'e' | 0x90 => {
                    let name = if op == b'e' { "APPENDS" } else { "ADDITEMS" };
                    let m = self.pop_mark(name)?;
                    if m == 0 {
                        return Err(self.malformed(format!("{name} without a target")));
                    }
                    let target = self.stack[m - 1];
                    if op == 0x90 && target.tag() != T_SET {
                        return Err(self.malformed("ADDITEMS onto something that is not a set"));
                    }
                    self.append_from_stack(target, m, name)?;
                }
                b's' => {
                    let v = self.pop("SETITEM")?;
                    let k = self.pop("SETITEM")?;
                    let target = self.top("SETITEM")?;
                    self.set_items(target, vec![k, v])?;
                }
                b'u' => {
                    let m = self.pop_mark("SETITEMS")?;
                    if m == 0 {
                        return Err(self.malformed("SETITEMS without a target"));
                    }
                    if !(self.stack.len() - m).is_multiple_of(2) {
                        return Err(self.malformed("SETITEMS with an odd number of items"));
                    }
                    let target = self.stack[m - 1];
                    self.set_items_from_stack(target, m)?;
                }
                b'p' => {
                    self.read_line("PUT")?;
                    let idx = self.line_index("PUT")?;
                    self.memo_put(idx)?;
                }
                b'q' => {
                    let i = self.input.byte("BINPUT")? as u64;
                    self.memo_put(i)?;
                }
                b'r' => {
                    let i = u32::from_le_bytes(self.input.array("LONG_BINPUT")?) as u64;
                    self.memo_put(i)?;
                }
                0x94 => self.memoize()?,
                b'g' => {
                    self.read_line("GET")?;
                    let idx = self.line_index("GET")?;
                    self.memo_get(idx)?;
                }
                b'h' => {
                    let i = self.input.byte("BINGET")? as u64;
                    self.memo_get(i)?;
                    self.memo_get_run()?;
                }
                b'j' => {
                    let i = u32::from_le_bytes(self.input.array("LONG_BINGET")?) as u64;
                    self.memo_get(i)?;
                    self.memo_get_run()?;
                }
                // --- everything below would import or call code: refused ---
                b'c' => {
                    self.read_line("GLOBAL")?;
                    let module = String::from_utf8_lossy(&self.scratch).into_owned();
                    self.read_line("GLOBAL")?;
                    let name = String::from_utf8_lossy(&self.scratch).into_owned();
                    return Err(code("GLOBAL", Some(format!("{module}.{name}")), self.op_at));
                }
                b'i' => {
                    self.read_line("INST")?;
                    let module = String::from_utf8_lossy(&self.scratch).into_owned();
                    self.read_line("INST")?;
                    let name = String::from_utf8_lossy(&self.scratch).into_owned();
                    return Err(code("INST", Some(format!("{module}.{name}")), self.op_at));
                }
                0x93 => {
                    let n = self.stack.len();
                    let global = if n >= 2 {
                        match (
                            self.out.str(self.stack[n - 2]),
                            self.out.str(self.stack[n - 1]),
                        ) {
                            (Some(m), Some(q)) => Some(format!("{m}.{q}")),
                            _ => None,
                        }
                    } else {
                        None
                    };
                    return Err(code("STACK_GLOBAL", global, self.op_at));
                }
                b'R' => return Err(code("REDUCE", None, self.op_at)),
                b'b' => return Err(code("BUILD", None, self.op_at)),
                b'o' => return Err(code("OBJ", None, self.op_at)),
                0x81 => return Err(code("NEWOBJ", None, self.op_at)),
                0x92 => return Err(code("NEWOBJ_EX", None, self.op_at)),
                0x82..=0x84 => {
                    let (name, n) = match op {
                        0x82 => ("EXT1", 1),
                        0x83 => ("EXT2", 2),
                        _ => ("EXT4", 4),
                    };
                    let mut code_no = 0u64;
                    for i in 0..n {
                        code_no |= (self.input.byte(name)? as u64) << (8 * i);
                    }
                    return Err(code(
                        name,
                        Some(format!("copyreg extension #{code_no}")),
                        self.op_at,
                    ));
                }
                b'P' => return Err(code("PERSID", None, self.op_at)),
                b'Q' => return Err(code("BINPERSID", None, self.op_at)),
                0x97 => return Err(code("NEXT_BUFFER", None, self.op_at)),
                0x98 => return Err(code("READONLY_BUFFER", None, self.op_at)),
                byte => {
                    return Err(PickleError::BadOpcode {
                        byte,
                        offset: self.op_at,
                    })
                }
            }
        }
    }

    fn line_index(&self, what: &str) -> Result<u64, PickleError> {
        let t = String::from_utf8_lossy(&self.scratch);
        t.trim()
            .parse()
            .map_err(|_| self.malformed(format!("{what} index {t:?} is not a number")))
    }

    fn set_items(&mut self, target: Handle, items: Vec<Handle>) -> Result<(), PickleError> {
        if target.tag() != T_DICT {
            return Err(self.malformed(format!(
                "SETITEM(S) onto a {} (only dicts take items)",
                self.out.view(target).type_name()
            )));
        }
        let from = self.stack.len();
        self.stack.extend(items);
        self.extend_from_stack(target, from)
    }

    /// SETITEMS: moves `stack[m..]` onto dict `target` without an intermediate vector.
    fn set_items_from_stack(&mut self, target: Handle, m: usize) -> Result<(), PickleError> {
        if target.tag() != T_DICT {
            return Err(self.malformed(format!(
                "SETITEM(S) onto a {} (only dicts take items)",
                self.out.view(target).type_name()
            )));
        }
        self.extend_from_stack(target, m)
    }

    /// APPENDS/ADDITEMS: moves `stack[m..]` onto list/set `target`.
    fn append_from_stack(&mut self, target: Handle, m: usize, op: &str) -> Result<(), PickleError> {
        match target.tag() {
            T_LIST | T_SET => self.extend_from_stack(target, m),
            _ => Err(self.malformed(format!(
                "{op} onto a {} (only lists and sets can grow)",
                self.out.view(target).type_name()
            ))),
        }
    }
}

/// How many of the little-endian two's-complement bytes `b` are needed for its value:
/// leading (most significant) bytes that only repeat the sign are dropped, down to one.
pub(crate) fn twos_complement_len(b: &[u8]) -> usize {
    let mut n = b.len();
    while n > 1 {
        let (top, sign) = (b[n - 1], b[n - 2] & 0x80 != 0);
        if (top == 0 && !sign) || (top == 0xff && sign) {
            n -= 1;
        } else {
            break;
        }
    }
    n
}

/// Decodes a protocol-0 `STRING` literal: `'...'` or `"..."` with Python escapes.
fn decode_quoted(line: &[u8]) -> Option<Vec<u8>> {
    let q = *line.first()?;
    if (q != b'\'' && q != b'"') || line.len() < 2 || *line.last()? != q {
        return None;
    }
    let body = &line[1..line.len() - 1];
    let mut out = Vec::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        let c = body[i];
        i += 1;
        if c != b'\\' {
            out.push(c);
            continue;
        }
        let e = *body.get(i)?;
        i += 1;
        match e {
            b'n' => out.push(b'\n'),
            b't' => out.push(b'\t'),
            b'r' => out.push(b'\r'),
            b'0'..=b'7' => {
                let mut v = (e - b'0') as u32;
                for _ in 0..2 {
                    match body.get(i) {
                        Some(d @ b'0'..=b'7') => {
                            v = v * 8 + (d - b'0') as u32;
                            i += 1;
                        }
                        _ => break,
                    }
                }
                out.push(v as u8);
            }
            b'x' => {
                let h = std::str::from_utf8(body.get(i..i + 2)?).ok()?;
                out.push(u8::from_str_radix(h, 16).ok()?);
                i += 2;
            }
            b'\\' | b'\'' | b'"' => out.push(e),
            other => {
                out.push(b'\\');
                out.push(other);
            }
        }
    }
    Some(out)
}

/// Decodes Python's `raw-unicode-escape` (`\uXXXX`, `\UXXXXXXXX`; other bytes are Latin-1).
fn decode_raw_unicode_escape(line: &[u8]) -> Option<String> {
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < line.len() {
        let c = line[i];
        if c == b'\\' && i + 1 < line.len() && (line[i + 1] == b'u' || line[i + 1] == b'U') {
            let n = if line[i + 1] == b'u' { 4 } else { 8 };
            let hex = std::str::from_utf8(line.get(i + 2..i + 2 + n)?).ok()?;
            out.push(char::from_u32(u32::from_str_radix(hex, 16).ok()?)?);
            i += 2 + n;
        } else {
            out.push(c as char);
            i += 1;
        }
    }
    Some(out)
}
