//! The ordered map of an arena: address → region, plus the free gap after each region, in a
//! B+tree whose inner nodes also keep the largest gap of each child's subtree.
//!
//! One descent finds a region or the position of a new one together with the path from the
//! root, so its neighbour (the region whose gap it splits or grows) is one step away, and
//! the largest gap of the whole arena is read at the root. Nodes live in two `Vec`s and
//! refer to each other by `u32` index; leaves hold up to [`LB`] entries in sorted arrays and
//! are linked left to right for iteration. Every operation is O(log n): a leaf or inner
//! node falling below a quarter full is merged with, or refilled from, a sibling.

use super::prefetch;
use super::region::Region;

/// Entries per leaf.
const LB: usize = 32;
/// Children per inner node.
const IB: usize = 16;
/// A non-root leaf with fewer entries is merged or refilled.
const LMIN: usize = LB / 4;
/// A non-root inner node with fewer children is merged or refilled.
const IMIN: usize = IB / 4;
/// Deepest path: with at least [`IMIN`] children per inner node below the root this holds
/// far more than `u32::MAX` leaves.
const MAXD: usize = 16;
/// No node.
const NIL: u32 = u32::MAX;

const BLANK: Region = Region {
    size: 0,
    seq: 0,
    ts_ns: 0,
    aux: 0,
    aux2: 0,
    api: 0,
    kind: super::region::RegionKind::Device,
};

/// Slot masks of a leaf hold one bit per entry.
const _: () = assert!(LB <= 64);

/// Keys past a node's length hold this, so a node's whole key array is sorted and a
/// search needs no bound.
const PAST: u64 = u64::MAX;

/// A leaf. A lookup reads only `keys`, which starts the leaf on a cache line of its own.
#[derive(Clone, Debug)]
#[repr(C, align(64))]
struct Leaf {
    /// Sorted; [`PAST`] past `n`.
    keys: [u64; LB],
    /// `gaps[s]`: the gap after the region in `vals[s]`; 0 in unused slots. Like the
    /// regions, gaps stay in their slot while entries shift.
    gaps: [u64; LB],
    n: usize,
    /// Bit `s`: `vals[s]` holds an entry.
    used: u64,
    /// The next leaf to the right ([`NIL`] for the last).
    next: u32,
    /// `slot[j]`: where in `vals` the region of entry `j` is. Regions stay in their slot
    /// while entries shift, so an insertion or removal moves bytes, not 48-byte regions.
    slot: [u8; LB],
    vals: [Region; LB],
}

/// The largest of `v`, in four independent chains (a single chain of `max` is as long as
/// `v`, and this runs after most updates).
#[inline]
fn max_of<const N: usize>(v: &[u64; N]) -> u64 {
    let mut m = [0u64; 4];
    for c in v.chunks_exact(4) {
        for k in 0..4 {
            m[k] = m[k].max(c[k]);
        }
    }
    m[0].max(m[1]).max(m[2].max(m[3]))
}

impl Leaf {
    fn new() -> Leaf {
        Leaf {
            keys: [PAST; LB],
            gaps: [0; LB],
            n: 0,
            used: 0,
            next: NIL,
            slot: [0; LB],
            vals: [BLANK; LB],
        }
    }
    /// The region of entry `j`.
    #[inline]
    fn val(&self, j: usize) -> &Region {
        &self.vals[self.slot[j] as usize]
    }
    /// The gap after entry `j`.
    #[inline]
    fn gap(&self, j: usize) -> u64 {
        self.gaps[self.slot[j] as usize]
    }
    /// The largest gap. Unused slots hold 0 (every operation that vacates one zeroes
    /// it), so this is a fixed-size scan without branches.
    #[inline]
    fn max(&self) -> u64 {
        max_of(&self.gaps)
    }
    /// The index of the first key ≥ `a` (`n` if none), without branches: the array is
    /// sorted throughout (keys past `n` are [`PAST`]), so the keys below `a` are a prefix,
    /// counted in two rounds of independent compares: three that pick the quarter, then
    /// the eight keys of that quarter.
    #[inline]
    fn lower_bound(&self, a: u64) -> usize {
        const _: () = assert!(LB == 32);
        let k = &self.keys;
        let q = usize::from(k[7] < a) + usize::from(k[15] < a) + usize::from(k[23] < a);
        let base = 8 * q;
        let mut i = base;
        for &x in &k[base..base + 8] {
            i += usize::from(x < a);
        }
        i
    }
    #[inline]
    fn insert(&mut self, i: usize, k: u64, r: Region, g: u64) {
        let n = self.n;
        // A free slot: the leaf is not full, so one exists below LB.
        let s = (!self.used).trailing_zeros() as usize;
        self.used |= 1 << s;
        self.keys.copy_within(i..n, i + 1);
        self.slot.copy_within(i..n, i + 1);
        self.keys[i] = k;
        self.gaps[s] = g;
        self.slot[i] = s as u8;
        self.vals[s] = r;
        self.n += 1;
    }
    #[inline]
    fn remove(&mut self, i: usize) {
        let n = self.n;
        let s = self.slot[i] as usize;
        self.used &= !(1 << s);
        self.gaps[s] = 0;
        self.keys.copy_within(i + 1..n, i);
        self.slot.copy_within(i + 1..n, i);
        self.keys[n - 1] = PAST;
        self.n -= 1;
    }
    /// Appends entry `j`'s key, region and gap to `to` and frees its slot here (the
    /// caller then drops the entry from `keys` and `slot`).
    #[inline]
    fn give(&mut self, j: usize, to: &mut Leaf) {
        let s = self.slot[j] as usize;
        to.insert(to.n, self.keys[j], self.vals[s], self.gaps[s]);
        self.used &= !(1 << s);
        self.gaps[s] = 0;
    }
    /// Moves entries `[from, n)` to the end of `to`.
    fn move_tail(&mut self, from: usize, to: &mut Leaf) {
        for j in from..self.n {
            self.give(j, to);
        }
        self.keys[from..].fill(PAST);
        self.n = from;
    }
    /// Moves the first `k` entries of `self` to the end of `to`.
    fn move_head(&mut self, k: usize, to: &mut Leaf) {
        let n = self.n;
        for j in 0..k {
            self.give(j, to);
        }
        self.keys.copy_within(k..n, 0);
        self.slot.copy_within(k..n, 0);
        self.keys[n - k..n].fill(PAST);
        self.n -= k;
    }
}

#[derive(Clone, Debug)]
#[repr(C, align(64))]
struct Inner {
    /// `keys[i]` (i ≥ 1) is ≤ every key under child `i` and > every key under child `i − 1`;
    /// [`PAST`] past `n`.
    keys: [u64; IB],
    kids: [u32; IB],
    /// The largest gap under each child.
    maxg: [u64; IB],
    n: usize,
}

impl Inner {
    fn new() -> Inner {
        Inner {
            keys: [PAST; IB],
            kids: [NIL; IB],
            maxg: [0; IB],
            n: 0,
        }
    }
    #[inline]
    fn max(&self) -> u64 {
        // Slots past `n` hold 0, as in a leaf.
        max_of(&self.maxg)
    }
    /// The child whose range holds `a`: the last `i` with `i = 0` or `keys[i] ≤ a`. As in
    /// [`Leaf::lower_bound`], two rounds of compares over the whole array (sorted: keys
    /// past `n` are [`PAST`]), limited to the last child for `a` = [`PAST`].
    #[inline]
    fn child(&self, a: u64) -> usize {
        const _: () = assert!(IB == 16);
        let k = &self.keys;
        let q = usize::from(k[4] <= a) + usize::from(k[8] <= a) + usize::from(k[12] <= a);
        let base = 4 * q;
        let mut i = base;
        for &x in &k[base + 1..base + 4] {
            i += usize::from(x <= a);
        }
        // Keys past `n` are [`PAST`]: only `a` = [`PAST`] counts them. Testing that first
        // keeps `n`, on a line of its own, off the path to the child.
        if a == PAST {
            return i.min(self.n.saturating_sub(1));
        }
        i
    }
    #[inline]
    fn insert(&mut self, i: usize, k: u64, kid: u32, g: u64) {
        let n = self.n;
        self.keys.copy_within(i..n, i + 1);
        self.kids.copy_within(i..n, i + 1);
        self.maxg.copy_within(i..n, i + 1);
        self.keys[i] = k;
        self.kids[i] = kid;
        self.maxg[i] = g;
        self.n += 1;
    }
    #[inline]
    fn remove(&mut self, i: usize) {
        let n = self.n;
        self.keys.copy_within(i + 1..n, i);
        self.kids.copy_within(i + 1..n, i);
        self.maxg.copy_within(i + 1..n, i);
        self.keys[n - 1] = PAST;
        self.maxg[n - 1] = 0;
        self.n -= 1;
    }
}

/// A position in the tree: the path of `(inner node, child index)` from the root, the leaf
/// and an index in it (which may be the leaf's length: past its last entry).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cursor {
    path: [(u32, u32); MAXD],
    depth: usize,
    leaf: u32,
    pos: usize,
}

/// Where a prefetch walk ([`RegionTree::walk`]) has got to: a node whose memory is being
/// loaded.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Walk {
    node: u32,
    /// `node` is a leaf (else the lowest inner node above one).
    leaf: bool,
}

impl Walk {
    /// A walk with nothing left to fetch.
    pub(crate) const DONE: Walk = Walk {
        node: NIL,
        leaf: true,
    };
}

/// The ordered map. See the module documentation.
#[derive(Clone, Debug)]
pub(crate) struct RegionTree {
    leaves: Vec<Leaf>,
    inners: Vec<Inner>,
    free_leaves: Vec<u32>,
    free_inners: Vec<u32>,
    /// [`NIL`] when empty.
    root: u32,
    /// Inner levels above the leaves.
    height: usize,
    len: usize,
    /// The largest gap of all entries.
    top: u64,
}

impl Default for RegionTree {
    fn default() -> RegionTree {
        RegionTree {
            leaves: Vec::new(),
            inners: Vec::new(),
            free_leaves: Vec::new(),
            free_inners: Vec::new(),
            root: NIL,
            height: 0,
            len: 0,
            top: 0,
        }
    }
}

impl PartialEq for RegionTree {
    fn eq(&self, o: &RegionTree) -> bool {
        self.len == o.len && self.iter().eq(o.iter())
    }
}

impl RegionTree {
    /// Number of entries.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Removes everything.
    pub(crate) fn clear(&mut self) {
        *self = RegionTree::default();
    }

    /// The largest gap of any entry (0 when empty).
    #[inline]
    pub(crate) fn max_gap(&self) -> u64 {
        self.top
    }

    /// Recomputes [`RegionTree::top`] from the root.
    fn retop(&mut self) {
        self.top = if self.root == NIL {
            0
        } else if self.height == 0 {
            self.leaves[self.root as usize].max()
        } else {
            self.inners[self.root as usize].max()
        };
    }

    fn new_leaf(&mut self) -> u32 {
        match self.free_leaves.pop() {
            Some(i) => {
                self.leaves[i as usize] = Leaf::new();
                i
            }
            None => {
                self.leaves.push(Leaf::new());
                (self.leaves.len() - 1) as u32
            }
        }
    }

    fn new_inner(&mut self) -> u32 {
        match self.free_inners.pop() {
            Some(i) => {
                self.inners[i as usize] = Inner::new();
                i
            }
            None => {
                self.inners.push(Inner::new());
                (self.inners.len() - 1) as u32
            }
        }
    }

    /// The position of `a`: its entry if present, else where it would be inserted (the
    /// leaf index of the first key ≥ `a`).
    #[inline(always)]
    pub(crate) fn seek(&self, a: u64) -> Cursor {
        let mut c = Cursor {
            path: [(0, 0); MAXD],
            depth: self.height,
            leaf: self.root,
            pos: 0,
        };
        if self.root == NIL {
            return c;
        }
        let mut node = self.root;
        for lvl in 0..self.height.min(MAXD) {
            let inn = &self.inners[node as usize];
            let i = inn.child(a);
            c.path[lvl] = (node, i as u32);
            node = inn.kids[i];
        }
        c.leaf = node;
        c.pos = self.leaves[node as usize].lower_bound(a);
        c
    }

    /// Starts a prefetch walk towards `a`: descends the inner nodes above the lowest one
    /// (which stay in the caches) and starts loading that one, or the root leaf's keys. A
    /// later [`RegionTree::walk_on`] takes the next step, each reading only what the step
    /// before fetched. A hint only: nothing changes.
    #[inline]
    pub(crate) fn walk(&self, a: u64) -> Walk {
        if self.root == NIL {
            return Walk::DONE;
        }
        let mut node = self.root;
        for _ in 0..self.height.saturating_sub(1).min(MAXD) {
            let Some(inn) = self.inners.get(node as usize) else {
                return Walk::DONE;
            };
            node = inn.kids[inn.child(a)];
        }
        let w = Walk {
            node,
            leaf: self.height == 0,
        };
        self.fetch(w);
        w
    }

    /// Starts loading the node `w` is at: all of an inner node, a leaf's keys and header.
    #[inline]
    fn fetch(&self, w: Walk) {
        if w.leaf {
            if let Some(l) = self.leaves.get(w.node as usize) {
                prefetch::span(&l.keys, std::mem::size_of_val(&l.keys));
                prefetch::line(&l.n);
            }
        } else if let Some(inn) = self.inners.get(w.node as usize) {
            prefetch::span(inn, std::mem::size_of::<Inner>());
        }
    }

    /// The next step of a prefetch walk towards `a` (see [`RegionTree::walk`]): from the
    /// lowest inner node to the leaf, whose keys it starts loading; from the leaf to the
    /// gaps and regions around `a`'s position (the region freed, the neighbour whose gap
    /// changes, the slot a new region takes). The tree may have changed since the walk
    /// started: a node that moved only makes the hint useless.
    #[inline]
    pub(crate) fn walk_on(&self, w: Walk, a: u64) -> Walk {
        if !w.leaf {
            let Some(inn) = self.inners.get(w.node as usize) else {
                return Walk::DONE;
            };
            let next = Walk {
                node: inn.kids[inn.child(a)],
                leaf: true,
            };
            self.fetch(next);
            return next;
        }
        let Some(l) = self.leaves.get(w.node as usize) else {
            return Walk::DONE;
        };
        let pos = l.lower_bound(a).min(LB - 1);
        for j in [pos.saturating_sub(1), pos] {
            let s = l.slot[j] as usize % LB;
            prefetch::line(&l.gaps[s]);
            prefetch::span(&l.vals[s], std::mem::size_of::<Region>());
        }
        let free = ((!l.used).trailing_zeros() as usize).min(LB - 1);
        prefetch::span(&l.vals[free], std::mem::size_of::<Region>());
        Walk::DONE
    }

    /// The entry at `c` (`None` past the end of its leaf or in an empty tree).
    #[inline]
    pub(crate) fn at(&self, c: &Cursor) -> Option<(u64, &Region, u64)> {
        self.at_pos(c, c.pos)
    }

    /// The entry at index `pos` of `c`'s leaf.
    #[inline]
    pub(crate) fn at_pos(&self, c: &Cursor, pos: usize) -> Option<(u64, &Region, u64)> {
        let l = self.leaves.get(c.leaf as usize)?;
        (pos < l.n).then(|| (l.keys[pos], l.val(pos), l.gap(pos)))
    }

    /// The entry before `c`, as a cursor and an index in its leaf: `c` itself when that
    /// entry is in `c`'s leaf (no cursor copy), else the previous leaf's, kept in `far`.
    #[inline]
    pub(crate) fn prev<'c>(
        &self,
        c: &'c Cursor,
        far: &'c mut Option<Cursor>,
    ) -> Option<(&'c Cursor, usize)> {
        if c.pos > 0 {
            return Some((c, c.pos - 1));
        }
        let p: &'c Cursor = far.insert(self.before(c)?);
        Some((p, p.pos))
    }

    /// The entry before `c`.
    #[inline]
    pub(crate) fn before(&self, c: &Cursor) -> Option<Cursor> {
        if c.leaf == NIL {
            return None;
        }
        if c.pos > 0 {
            let mut p = *c;
            p.pos -= 1;
            return Some(p);
        }
        let mut lvl = c.depth;
        while lvl > 0 {
            let (node, i) = c.path[lvl - 1];
            if i > 0 {
                let mut p = *c;
                p.path[lvl - 1] = (node, i - 1);
                let mut n = self.inners[node as usize].kids[i as usize - 1];
                for l in lvl..c.depth {
                    let inn = &self.inners[n as usize];
                    p.path[l] = (n, inn.n as u32 - 1);
                    n = inn.kids[inn.n - 1];
                }
                p.leaf = n;
                p.pos = self.leaves[n as usize].n - 1;
                return Some(p);
            }
            lvl -= 1;
        }
        None
    }

    /// The last entry.
    pub(crate) fn last(&self) -> Option<Cursor> {
        let c = self.seek(u64::MAX);
        match self.at(&c) {
            Some(_) => Some(c),
            None => self.before(&c),
        }
    }

    /// The region at `a`.
    #[inline]
    pub(crate) fn get(&self, a: u64) -> Option<&Region> {
        let c = self.seek(a);
        self.at(&c).filter(|e| e.0 == a).map(|e| e.1)
    }

    /// The last entry with a key below `a`.
    pub(crate) fn below(&self, a: u64) -> Option<(u64, &Region, u64)> {
        self.before(&self.seek(a)).and_then(|c| self.at(&c))
    }

    /// The last entry with a key at or below `a`.
    pub(crate) fn at_or_below(&self, a: u64) -> Option<(u64, &Region, u64)> {
        let c = self.seek(a);
        match self.at(&c) {
            Some(e) if e.0 == a => Some(e),
            _ => self.before(&c).and_then(|p| self.at(&p)),
        }
    }

    /// Entries with keys ≥ `a`, in order.
    pub(crate) fn from(&self, a: u64) -> Iter<'_> {
        let c = self.seek(a);
        Iter {
            t: self,
            leaf: c.leaf,
            pos: c.pos,
        }
    }

    /// Every entry, in order.
    pub(crate) fn iter(&self) -> Iter<'_> {
        self.from(0)
    }

    /// The regions, in order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &Region> + '_ {
        self.iter().map(|e| e.1)
    }

    /// Recomputes the largest gaps on `path` upward, starting with `m` for the child the
    /// last step of `path` points at; stops where nothing changes.
    #[inline]
    fn fix_up(&mut self, path: &[(u32, u32)], mut m: u64) {
        for &(node, i) in path.iter().rev() {
            let inn = &mut self.inners[node as usize];
            if inn.maxg[i as usize] == m {
                return;
            }
            inn.maxg[i as usize] = m;
            m = inn.max();
        }
        self.top = m;
    }

    /// A gap of `g` appeared under the end of `path`: raises the largest gaps up to where
    /// they are already at least `g`.
    #[inline]
    fn raise(&mut self, path: &[(u32, u32)], g: u64) {
        for &(node, i) in path.iter().rev() {
            let e = &mut self.inners[node as usize].maxg[i as usize];
            if *e >= g {
                return;
            }
            *e = g;
        }
        self.top = self.top.max(g);
    }

    /// The largest gap recorded for the leaf at the end of `path`.
    #[inline]
    fn recorded(&self, path: &[(u32, u32)]) -> u64 {
        match path.last() {
            Some(&(n, i)) => self.inners[n as usize].maxg[i as usize],
            None => self.top,
        }
    }

    /// Sets the gap of the entry at `c`.
    #[inline]
    pub(crate) fn set_gap(&mut self, c: &Cursor, g: u64) {
        self.set_gap_pos(c, c.pos, g);
    }

    /// Sets the gap of the entry at index `pos` of `c`'s leaf.
    #[inline]
    pub(crate) fn set_gap_pos(&mut self, c: &Cursor, pos: usize, g: u64) {
        let l = &mut self.leaves[c.leaf as usize];
        let s = l.slot[pos] as usize;
        let old = l.gaps[s];
        l.gaps[s] = g;
        let path = &c.path[..c.depth];
        if g >= old {
            self.raise(path, g);
        } else if old >= self.recorded(path) {
            // It was the leaf's largest: rescan.
            let m = self.leaves[c.leaf as usize].max();
            self.fix_up(path, m);
        }
    }

    /// Splits the gap of entry `prev` of `c`'s leaf (the entry just before `c`) around a new
    /// entry: `prev`'s gap becomes `left`, and `a` goes in at `c` with region `r` and gap
    /// `right`, both parts of the old gap. One update of the largest gaps for the two
    /// changes, with no rescan unless the old gap was the leaf's largest. `false`, with
    /// nothing changed, when the leaf is full: the caller splits it through
    /// [`RegionTree::insert_at`].
    #[inline]
    pub(crate) fn split_gap(
        &mut self,
        c: &Cursor,
        prev: usize,
        left: u64,
        a: u64,
        r: Region,
        right: u64,
    ) -> bool {
        let Some(l) = self.leaves.get_mut(c.leaf as usize) else {
            return false;
        };
        // `prev` in another leaf: `c` is at its leaf's start, and `prev` is not below it.
        if l.n >= LB || prev >= c.pos {
            return false;
        }
        let s = l.slot[prev] as usize;
        let old = l.gaps[s];
        debug_assert!(left <= old && right <= old);
        l.gaps[s] = left;
        l.insert(c.pos, a, r, right);
        self.len += 1;
        let path = &c.path[..c.depth];
        // `left` and `right` are parts of `old`: the largest gap changes only if `old` was it.
        if old >= self.recorded(path) {
            let m = self.leaves[c.leaf as usize].max();
            self.fix_up(path, m);
        }
        true
    }

    /// Removes the entry at `c` and gives its gap to entry `prev` of the same leaf (the
    /// entry just before `c`), whose gap becomes `g`: at least its old gap and the removed
    /// one (a free joins the freed region and its gap to its neighbour's gap). One raise of
    /// the largest gaps, no rescan. `false`, with nothing changed, when `prev` is in another
    /// leaf or the leaf would fall below a quarter full: the caller then takes the two
    /// steps apart ([`RegionTree::set_gap_pos`], [`RegionTree::remove_at`]).
    #[inline]
    pub(crate) fn merge_gap(&mut self, c: &Cursor, prev: usize, g: u64) -> bool {
        let Some(l) = self.leaves.get_mut(c.leaf as usize) else {
            return false;
        };
        if prev >= c.pos || c.pos >= l.n || (c.depth > 0 && l.n <= LMIN) {
            return false;
        }
        debug_assert!(g >= l.gap(prev) && g >= l.gap(c.pos));
        let s = l.slot[prev] as usize;
        l.gaps[s] = g;
        l.remove(c.pos);
        self.len -= 1;
        self.raise(&c.path[..c.depth], g);
        true
    }

    /// Inserts `a` (which must not be present) at the position [`RegionTree::seek`] gave
    /// for it, with region `r` and gap `g`. Cursors taken before are invalid afterwards.
    pub(crate) fn insert_at(&mut self, c: &Cursor, a: u64, r: Region, g: u64) {
        self.len += 1;
        if self.root == NIL {
            let l = self.new_leaf();
            self.leaves[l as usize].insert(0, a, r, g);
            self.root = l;
            self.height = 0;
            self.top = g;
            return;
        }
        let leaf = c.leaf as usize;
        if self.leaves[leaf].n < LB {
            self.leaves[leaf].insert(c.pos, a, r, g);
            self.raise(&c.path[..c.depth], g);
            return;
        }
        // Split the full leaf, then insert on the proper side. In halves, except for an
        // insertion past the leaf's end (ascending addresses, the allocator's common
        // pattern): the new leaf then starts as small as allowed, so ascending fills leave
        // leaves mostly full instead of half full.
        let h = if c.pos == LB { LB + 1 - LMIN } else { LB / 2 };
        let right = self.new_leaf();
        let (lo, hi) = two(&mut self.leaves, leaf, right as usize);
        lo.move_tail(h, hi);
        hi.next = lo.next;
        lo.next = right;
        if c.pos <= h {
            lo.insert(c.pos, a, r, g);
        } else {
            hi.insert(c.pos - h, a, r, g);
        }
        let (lm, rm, sep) = (lo.max(), hi.max(), hi.keys[0]);
        self.push_up(&c.path[..c.depth], lm, right, sep, rm);
        self.retop();
    }

    /// After the child at the end of `path` split: it keeps largest gap `lm`, and `right`
    /// (keys from `sep`, largest gap `rm`) goes in right after it.
    fn push_up(&mut self, path: &[(u32, u32)], lm: u64, right: u32, sep: u64, rm: u64) {
        let Some((&(node, i), up)) = path.split_last() else {
            // The root split.
            let old = self.root;
            let r = self.new_inner();
            let inn = &mut self.inners[r as usize];
            inn.insert(0, 0, old, lm);
            inn.insert(1, sep, right, rm);
            self.root = r;
            self.height += 1;
            return;
        };
        let i = i as usize;
        let inn = &mut self.inners[node as usize];
        inn.maxg[i] = lm;
        if inn.n < IB {
            inn.insert(i + 1, sep, right, rm);
            let m = inn.max();
            self.fix_up(up, m);
            return;
        }
        let nr = self.new_inner();
        let (lo, hi) = two(&mut self.inners, node as usize, nr as usize);
        // Move the upper half to the new node, then insert on the proper side; a child
        // added past the end leaves the new node as small as allowed (as for leaves).
        let h = if i + 1 == IB { IB + 1 - IMIN } else { IB / 2 };
        hi.keys[..IB - h].copy_from_slice(&lo.keys[h..]);
        hi.kids[..IB - h].copy_from_slice(&lo.kids[h..]);
        hi.maxg[..IB - h].copy_from_slice(&lo.maxg[h..]);
        hi.n = IB - h;
        lo.keys[h..].fill(PAST);
        lo.maxg[h..].fill(0);
        lo.n = h;
        if i < h {
            lo.insert(i + 1, sep, right, rm);
        } else {
            hi.insert(i + 1 - h, sep, right, rm);
        }
        let (lm2, rm2, sep2) = (lo.max(), hi.max(), hi.keys[0]);
        self.push_up(up, lm2, nr, sep2, rm2);
    }

    /// Removes the entry at `c`; returns its region and gap. Cursors taken before are
    /// invalid afterwards.
    pub(crate) fn remove_at(&mut self, c: &Cursor) -> (Region, u64) {
        let leaf = c.leaf as usize;
        let l = &mut self.leaves[leaf];
        let out = (*l.val(c.pos), l.gap(c.pos));
        l.remove(c.pos);
        self.len -= 1;
        if self.len == 0 {
            self.clear();
            return out;
        }
        if c.depth == 0 {
            self.retop();
            return out;
        }
        if l.n >= LMIN {
            let path = &c.path[..c.depth];
            if out.1 >= self.recorded(path) {
                let m = self.leaves[leaf].max();
                self.fix_up(path, m);
            }
            return out;
        }
        self.rebalance(&c.path[..c.depth], true);
        self.retop();
        out
    }

    /// The child at the end of `path` (a leaf when `leaf`) is under-full: merge it with a
    /// sibling or move entries over, and continue upward while parents become under-full.
    fn rebalance(&mut self, path: &[(u32, u32)], leaf: bool) {
        let Some((&(p, i), up)) = path.split_last() else {
            return;
        };
        let pi = p as usize;
        let li = (i as usize).saturating_sub(1);
        let (left, right) = {
            let inn = &self.inners[pi];
            (inn.kids[li] as usize, inn.kids[li + 1] as usize)
        };
        let merged;
        if leaf {
            let (lo, hi) = two(&mut self.leaves, left, right);
            if lo.n + hi.n <= LB {
                hi.move_tail(0, lo);
                lo.next = hi.next;
                merged = Some(lo.max());
            } else {
                if lo.n < hi.n {
                    let k = (hi.n - lo.n) / 2;
                    hi.move_head(k, lo);
                } else {
                    let k = (lo.n - hi.n) / 2;
                    let mut t = Leaf::new();
                    lo.move_tail(lo.n - k, &mut t);
                    hi.move_tail(0, &mut t);
                    std::mem::swap(hi, &mut t);
                    hi.next = t.next;
                }
                let (lm, rm, sep) = (lo.max(), hi.max(), hi.keys[0]);
                let inn = &mut self.inners[pi];
                inn.maxg[li] = lm;
                inn.maxg[li + 1] = rm;
                inn.keys[li + 1] = sep;
                merged = None;
            }
            if merged.is_some() {
                self.free_leaves.push(right as u32);
            }
        } else {
            let sep = self.inners[pi].keys[li + 1];
            let (lo, hi) = two(&mut self.inners, left, right);
            // Concatenate with the parent's separator as the lower bound of `hi`'s first child.
            let total = lo.n + hi.n;
            let mut keys = [0u64; 2 * IB];
            let mut kids = [0u32; 2 * IB];
            let mut maxg = [0u64; 2 * IB];
            keys[..lo.n].copy_from_slice(&lo.keys[..lo.n]);
            kids[..lo.n].copy_from_slice(&lo.kids[..lo.n]);
            maxg[..lo.n].copy_from_slice(&lo.maxg[..lo.n]);
            keys[lo.n..total].copy_from_slice(&hi.keys[..hi.n]);
            keys[lo.n] = sep;
            kids[lo.n..total].copy_from_slice(&hi.kids[..hi.n]);
            maxg[lo.n..total].copy_from_slice(&hi.maxg[..hi.n]);
            if total <= IB {
                lo.keys[..total].copy_from_slice(&keys[..total]);
                lo.kids[..total].copy_from_slice(&kids[..total]);
                lo.maxg[..total].copy_from_slice(&maxg[..total]);
                lo.n = total;
                merged = Some(lo.max());
                self.free_inners.push(right as u32);
            } else {
                let h = total / 2;
                lo.keys[..h].copy_from_slice(&keys[..h]);
                lo.kids[..h].copy_from_slice(&kids[..h]);
                lo.maxg[..h].copy_from_slice(&maxg[..h]);
                lo.keys[h..].fill(PAST);
                lo.maxg[h..].fill(0);
                lo.n = h;
                hi.keys[..total - h].copy_from_slice(&keys[h..total]);
                hi.kids[..total - h].copy_from_slice(&kids[h..total]);
                hi.maxg[..total - h].copy_from_slice(&maxg[h..total]);
                hi.keys[total - h..].fill(PAST);
                hi.maxg[total - h..].fill(0);
                hi.n = total - h;
                let (lm, rm, sep) = (lo.max(), hi.max(), hi.keys[0]);
                let inn = &mut self.inners[pi];
                inn.maxg[li] = lm;
                inn.maxg[li + 1] = rm;
                inn.keys[li + 1] = sep;
                merged = None;
            }
        }
        let inn = &mut self.inners[pi];
        if let Some(m) = merged {
            inn.maxg[li] = m;
            inn.remove(li + 1);
        }
        let m = inn.max();
        if up.is_empty() {
            if inn.n == 1 {
                // The root has one child left: that child becomes the root.
                self.root = inn.kids[0];
                self.height -= 1;
                self.free_inners.push(p);
            }
            return;
        }
        if inn.n < IMIN {
            self.rebalance(up, false);
        } else {
            self.fix_up(up, m);
        }
    }

    /// Checks the structure (tests): key order, separators, fill, largest gaps, links.
    #[cfg(test)]
    pub(crate) fn check(&self) {
        if self.root == NIL {
            assert_eq!(self.len, 0);
            return;
        }
        let mut leaves = Vec::new();
        let (n, _) = self.check_node(self.root, self.height, 0, u64::MAX, true, &mut leaves);
        assert_eq!(n, self.len);
        let mut copy = self.clone();
        copy.retop();
        assert_eq!(copy.top, self.top, "stale top");
        for w in leaves.windows(2) {
            assert_eq!(self.leaves[w[0] as usize].next, w[1]);
        }
        assert_eq!(self.leaves[*leaves.last().unwrap() as usize].next, NIL);
    }

    #[cfg(test)]
    fn check_node(
        &self,
        node: u32,
        h: usize,
        lo: u64,
        hi: u64,
        root: bool,
        leaves: &mut Vec<u32>,
    ) -> (usize, u64) {
        if h == 0 {
            let l = &self.leaves[node as usize];
            assert!(root || l.n >= LMIN, "leaf under-full");
            assert!(l.n >= 1 && l.n <= LB);
            let free = (0..LB).filter(|s| l.used >> s & 1 == 0);
            assert!(
                free.clone().all(|s| l.gaps[s] == 0),
                "stale gap in a free slot"
            );
            assert!(l.keys[l.n..].iter().all(|&k| k == PAST), "stale key past n");
            let used = l.slot[..l.n].iter().fold(0u64, |m, &s| m | 1 << s);
            assert_eq!(used, l.used, "slot mask");
            assert_eq!(used.count_ones() as usize, l.n, "slots not distinct");
            for j in 0..l.n {
                assert!(l.keys[j] >= lo && l.keys[j] < hi || (hi == u64::MAX && l.keys[j] == hi));
                if j > 0 {
                    assert!(l.keys[j - 1] < l.keys[j]);
                }
            }
            leaves.push(node);
            return (l.n, l.max());
        }
        let inn = &self.inners[node as usize];
        assert!(if root { inn.n >= 2 } else { inn.n >= IMIN });
        assert!(
            inn.maxg[inn.n..].iter().all(|&g| g == 0),
            "stale gap past n"
        );
        assert!(
            inn.keys[inn.n..].iter().all(|&k| k == PAST),
            "stale key past n"
        );
        let mut total = 0;
        for i in 0..inn.n {
            let clo = if i == 0 { lo } else { inn.keys[i] };
            let chi = if i + 1 < inn.n { inn.keys[i + 1] } else { hi };
            assert!(clo >= lo && chi <= hi && clo < chi);
            let (n, m) = self.check_node(inn.kids[i], h - 1, clo, chi, false, leaves);
            assert_eq!(inn.maxg[i], m, "stale largest gap");
            total += n;
        }
        (total, inn.max())
    }
}

/// Two distinct elements of a slice, mutably.
fn two<T>(v: &mut [T], a: usize, b: usize) -> (&mut T, &mut T) {
    debug_assert_ne!(a, b);
    if a < b {
        let (x, y) = v.split_at_mut(b);
        (&mut x[a], &mut y[0])
    } else {
        let (x, y) = v.split_at_mut(a);
        (&mut y[0], &mut x[b])
    }
}

/// In-order iterator over `(address, region, gap after it)`.
pub(crate) struct Iter<'a> {
    t: &'a RegionTree,
    leaf: u32,
    pos: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (u64, &'a Region, u64);
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let l = self.t.leaves.get(self.leaf as usize)?;
            if self.pos < l.n {
                let i = self.pos;
                self.pos += 1;
                return Some((l.keys[i], l.val(i), l.gap(i)));
            }
            self.leaf = l.next;
            self.pos = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn reg(seq: u64) -> Region {
        Region { seq, ..BLANK }
    }

    /// Applies `(insert?, key, gap)` steps to the tree and to a `BTreeMap`, checking the
    /// structure, the largest gap, lookups and neighbours after every step.
    fn run(steps: &[(bool, u16, u16)]) {
        run_checking(steps, 1);
    }

    /// [`run`], with the structure checked every `every` steps (and at the end).
    fn run_checking(steps: &[(bool, u16, u16)], every: usize) {
        let mut t = RegionTree::default();
        let mut naive: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        for (i, &(ins, k, g)) in steps.iter().enumerate() {
            let (k, g, i) = (k as u64, g as u64, i as u64);
            let c = t.seek(k);
            let present = t.at(&c).is_some_and(|e| e.0 == k);
            assert_eq!(present, naive.contains_key(&k));
            let prev = t.before(&c).and_then(|p| t.at(&p)).map(|e| (e.0, e.2));
            if let Some((pk, pg)) = prev.filter(|_| ins && !present && i % 2 == 1) {
                // Split the gap before `k` (what an allocation does): the previous key
                // keeps part of it, `k` gets at most the rest.
                let (left, right) = (pg / 2, g.min(pg - pg / 2));
                if !t.split_gap(&c, c.pos.wrapping_sub(1), left, k, reg(i), right) {
                    // Another leaf, or a full one: the two steps apart.
                    t.insert_at(&c, k, reg(i), right);
                    let p = t.before(&t.seek(k)).unwrap();
                    t.set_gap(&p, left);
                }
                naive.insert(k, (i, right));
                naive.get_mut(&pk).unwrap().1 = left;
            } else if ins && !present {
                t.insert_at(&c, k, reg(i), g);
                naive.insert(k, (i, g));
            } else if ins {
                t.set_gap(&c, g);
                naive.get_mut(&k).unwrap().1 = g;
            } else if let Some((pk, pg)) = prev.filter(|_| present && i % 2 == 1) {
                // Join the entry and its gap to the gap before it (what a free does).
                let (seq, gap) = naive.remove(&k).unwrap();
                assert_eq!(t.at(&c).map(|e| (e.1.seq, e.2)), Some((seq, gap)));
                let joined = pg + gap + g;
                if !t.merge_gap(&c, c.pos.wrapping_sub(1), joined) {
                    // Another leaf, or one that would be under-full: two steps.
                    let p = t.before(&c).unwrap();
                    t.set_gap(&p, joined);
                    t.remove_at(&t.seek(k));
                }
                naive.get_mut(&pk).unwrap().1 = joined;
            } else if present {
                let (r, gap) = t.remove_at(&c);
                assert_eq!((r.seq, gap), naive.remove(&k).unwrap());
            } else if let Some(p) = t.before(&c) {
                // Grow the gap of the key before (what a free does to its neighbour).
                let (pk, _, pg) = t.at(&p).unwrap();
                t.set_gap(&p, pg + g);
                naive.get_mut(&pk).unwrap().1 += g;
            }
            assert_eq!(t.len(), naive.len());
            if !(i as usize).is_multiple_of(every) {
                continue;
            }
            t.check();
            let max = naive.values().map(|v| v.1).max().unwrap_or(0);
            assert_eq!(t.max_gap(), max);
            let probe = k ^ 0x55;
            assert_eq!(
                t.below(probe).map(|e| e.0),
                naive.range(..probe).next_back().map(|e| *e.0)
            );
            assert_eq!(
                t.at_or_below(probe).map(|e| e.0),
                naive.range(..=probe).next_back().map(|e| *e.0)
            );
            assert_eq!(t.get(probe).map(|r| r.seq), naive.get(&probe).map(|v| v.0));
            assert_eq!(
                t.last().and_then(|c| t.at(&c)).map(|e| e.0),
                naive.keys().next_back().copied()
            );
        }
        t.check();
        let all: Vec<(u64, u64, u64)> = t.iter().map(|(k, r, g)| (k, r.seq, g)).collect();
        let want: Vec<(u64, u64, u64)> = naive.iter().map(|(k, v)| (*k, v.0, v.1)).collect();
        assert_eq!(all, want);
        let from: Vec<u64> = t.from(300).map(|e| e.0).collect();
        let want: Vec<u64> = naive.range(300..).map(|e| *e.0).collect();
        assert_eq!(from, want);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Mostly inserts, then mostly removes, over a small key range so that leaves and
        /// inner nodes split, merge and borrow at every level.
        #[test]
        fn matches_a_btreemap(
            grow in prop::collection::vec((0u8..10, 0u16..2000, 0u16..5000), 0..1500),
            shrink in prop::collection::vec((0u8..10, 0u16..2000, 0u16..5000), 0..1500),
        ) {
            let steps: Vec<(bool, u16, u16)> = grow
                .iter()
                .map(|&(x, k, g)| (x < 8, k, g))
                .chain(shrink.iter().map(|&(x, k, g)| (x < 2, k, g)))
                .collect();
            run(&steps);
        }
    }

    /// Random churn over enough keys for three inner levels, so inner nodes split, merge
    /// and borrow below the root too.
    #[test]
    fn deep_tree_random_churn() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut steps = Vec::new();
        for phase in 0..4 {
            // Grow, shrink (by about a third), grow again, shrink again.
            let p_ins = [95, 3, 90, 0][phase];
            for _ in 0..20_000 {
                let r = next();
                steps.push((r % 100 < p_ins, (r >> 8) as u16 % 40_000, (r >> 32) as u16));
            }
        }
        run_checking(&steps, 997);
    }

    /// Ascending then descending keys (the allocator's common pattern) and a full drain.
    #[test]
    fn sequential_fill_and_drain() {
        let mut steps: Vec<(bool, u16, u16)> = (0..3000u16)
            .map(|k| (true, k, k.wrapping_mul(7919) % 1000))
            .collect();
        steps.extend((0..3000u16).rev().map(|k| (false, k, 0)));
        steps.extend((0..3000u16).step_by(3).map(|k| (true, k, k)));
        steps.extend((0..3000u16).step_by(3).map(|k| (false, k, 0)));
        run(&steps);
    }
}
