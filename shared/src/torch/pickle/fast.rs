//! Fast paths of the pickle VM for the shapes a memory snapshot repeats a million times:
//! runs of memo gets, frame lists built from gets, and short `LONG1`s (addresses, times).
//! Each does exactly what the opcodes one by one would do, minus the dispatch; a shape
//! that does not fit is left to the general loop with nothing consumed.

use super::{Handle, PickleError, Source, Span, Vm, T_LIST, UNSET};

impl<S: Source> Vm<S> {
    /// After a `BINGET`/`LONG_BINGET`: the rest of a run of them (a frame list is dozens
    /// in a row), read straight from the buffer without going back to the dispatch. The
    /// cursor and the stack stay in registers; anything unusual (a key only the sparse
    /// memo has, or a missing one) goes back through [`Vm::memo_get`].
    #[inline(always)]
    pub(super) fn memo_get_run(&mut self) -> Result<(), PickleError> {
        // Most gets stand alone (a dict key before its value): check before any set-up.
        match self.input.bytes()[..self.input.hi].get(self.input.lo) {
            Some(b'h' | b'j') => self.memo_get_run_long(),
            _ => Ok(()),
        }
    }

    /// The run itself. A key the dense memo lacks is fetched through [`Vm::memo_get`]
    /// and the run goes on in the same loop: however many such keys a pickle repeats,
    /// the stack of this function never grows.
    #[inline(never)]
    fn memo_get_run_long(&mut self) -> Result<(), PickleError> {
        loop {
            let buf = &self.input.bytes()[..self.input.hi];
            let memo = &self.memo[..];
            let stack = &mut self.stack;
            let mut lo = self.input.lo;
            // Handles gather in a local batch, so the loop does not store and reload the
            // stack's length for every item.
            let mut batch = [UNSET; 32];
            let mut k = 0;
            let slow = loop {
                let (idx, n) = match &buf[lo..] {
                    [b'j', a, b, c, d, ..] => (u32::from_le_bytes([*a, *b, *c, *d]) as usize, 5),
                    [b'h', a, ..] => (*a as usize, 2),
                    _ => break None,
                };
                match memo.get(idx) {
                    Some(&h) if h != UNSET => batch[k] = h,
                    _ => break Some((idx as u64, n)),
                }
                k += 1;
                lo += n;
                if k == batch.len() {
                    stack.extend_from_slice(&batch);
                    k = 0;
                }
            };
            // A fixed-size copy is a few vector moves; a `k`-sized one is a call to memcpy,
            // which dominates the short runs (a key and its value, a six-frame list).
            let keep = stack.len() + k;
            stack.extend_from_slice(&batch);
            stack.truncate(keep);
            self.input.lo = lo;
            let Some((idx, n)) = slow else { return Ok(()) };
            self.op_at = self.input.pos();
            self.input.lo += n;
            self.memo_get(idx)?;
        }
    }

    /// `LONG1` of `1..=8` bytes, all in the buffer (checked by the caller).
    #[inline]
    pub(super) fn long1_short(&mut self, n: usize) -> Result<Handle, PickleError> {
        let mut a = [0u8; 8];
        a[..n].copy_from_slice(&self.input.bytes()[self.input.lo..self.input.lo + n]);
        self.input.lo += n;
        let shift = 64 - 8 * n as u32;
        self.int(((i64::from_le_bytes(a) << shift) >> shift) as i128)
    }

    /// At `EMPTY_LIST`: a list built as `MEMOIZE MARK (BINGET|LONG_BINGET)… APPENDS` (every
    /// frame list of a snapshot) whose opcodes are all in the buffer is made in one step.
    /// When the same get bytes were seen before, the memo entries they name are the same
    /// (nothing was rebound since), so the new list shares the earlier one's storage
    /// without reading its items again. Returns `false`, having consumed nothing, for any
    /// other shape; the opcodes then run one by one.
    pub(super) fn list_of_gets(&mut self) -> Result<bool, PickleError> {
        let Some(i) = gets_len(&self.input.bytes()[self.input.lo..self.input.hi]) else {
            return Ok(false);
        };
        let list = self.container(T_LIST, self.stack.len())?;
        self.push(list);
        // MEMOIZE comes before the gets and may itself rebind a slot they name (which
        // empties the cache below), so it is done before looking the bytes up.
        self.memo_put(self.memo_count)?;
        self.input.lo += 2; // MEMOIZE, MARK
        let gets = &self.input.bytes()[self.input.lo..self.input.lo + i];
        let key = bytes_hash(gets);
        match self.get_lists.get(&key) {
            Some((b, span)) if **b == *gets => {
                self.out.containers[list.index()] = *span;
                self.input.lo += i + 1; // the gets, APPENDS
                return Ok(true);
            }
            _ => {}
        }
        // Read the gets as the opcodes would, then remember the bytes with the storage.
        let saved: Box<[u8]> = gets.into();
        let from = self.stack.len();
        let end = self.input.lo + i;
        while self.input.lo < end {
            self.op_at = self.input.pos();
            let idx = match self.input.byte("a get")? {
                b'j' => u32::from_le_bytes(self.input.array("LONG_BINGET")?) as u64,
                _ => self.input.byte("BINGET")? as u64,
            };
            self.memo_get(idx)?;
        }
        self.input.lo += 1; // APPENDS
        self.extend_from_stack(list, from)?;
        let s = self.out.containers[list.index()];
        self.get_lists
            .entry(key)
            .or_insert((saved, Span { cap: s.len, ..s }));
        Ok(true)
    }
}

/// When `buf` (just after `EMPTY_LIST`) holds `MEMOIZE MARK`, two or more
/// `BINGET`/`LONG_BINGET`s and `APPENDS`, all of it: the length of the gets.
fn gets_len(buf: &[u8]) -> Option<usize> {
    let [0x94, b'(', rest @ ..] = buf else {
        return None;
    };
    let mut i = 0;
    let mut n = 0;
    loop {
        match rest.get(i) {
            Some(b'j') => i += 5,
            Some(b'h') => i += 2,
            Some(b'e') if i < rest.len() => break,
            _ => return None,
        }
        n += 1;
    }
    (n >= 2 && i < rest.len()).then_some(i)
}

/// A hash of a list's items: four FxHash-style lanes, so the multiplications of one item
/// do not wait for the previous item's.
pub(super) fn list_hash(items: &[Handle]) -> u64 {
    const K: u64 = 0x51_7c_c1_b7_27_22_0a_95;
    let mut lanes = [items.len() as u64, 1, 2, 3];
    let mut quads = items.chunks_exact(4);
    for q in &mut quads {
        for (l, x) in lanes.iter_mut().zip(q) {
            *l = (l.rotate_left(5) ^ x.0 as u64).wrapping_mul(K);
        }
    }
    for (l, x) in lanes.iter_mut().zip(quads.remainder()) {
        *l = (l.rotate_left(5) ^ x.0 as u64).wrapping_mul(K);
    }
    lanes
        .iter()
        .fold(0, |h, &l| (h.rotate_left(5) ^ l).wrapping_mul(K))
}

/// A hash of a byte string, eight bytes at a time in four independent lanes (a frame
/// list's gets are a few hundred bytes, hashed once per trace entry).
fn bytes_hash(b: &[u8]) -> u64 {
    const K: u64 = 0x51_7c_c1_b7_27_22_0a_95;
    let mix = |l: u64, x: u64| (l.rotate_left(5) ^ x).wrapping_mul(K);
    let word = |w: &[u8]| u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
    let mut lanes = [b.len() as u64, 1, 2, 3];
    let mut blocks = b.chunks_exact(32);
    for blk in &mut blocks {
        for (j, l) in lanes.iter_mut().enumerate() {
            *l = mix(*l, word(&blk[8 * j..8 * j + 8]));
        }
    }
    let mut tail = [0u8; 32];
    tail[..blocks.remainder().len()].copy_from_slice(blocks.remainder());
    for (j, l) in lanes.iter_mut().enumerate() {
        *l = mix(*l, word(&tail[8 * j..8 * j + 8]));
    }
    lanes.iter().fold(0, |h, &l| mix(h, l))
}
