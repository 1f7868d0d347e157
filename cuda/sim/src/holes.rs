//! The set of free ranges ("holes") of an arena, ordered by address, with the longest hole
//! of every subtree cached so that the lowest-addressed hole of at least N bytes is found in
//! O(log n).
//!
//! A treap (binary search tree by address, heap by a priority) whose priorities are a fixed
//! hash of the address, so the shape — and every answer — is deterministic. Nodes live in a
//! `Vec` and refer to each other by index.

const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Node {
    start: u64,
    len: u64,
    /// Longest `len` in this node's subtree.
    max: u64,
    prio: u64,
    left: u32,
    right: u32,
}

/// Free ranges `[start, start + len)`, disjoint, never empty.
#[derive(Clone, Debug, Default)]
pub struct Holes {
    nodes: Vec<Node>,
    free_nodes: Vec<u32>,
    root: u32,
    count: usize,
}

fn prio_of(start: u64) -> u64 {
    // splitmix64 finaliser
    let mut z = start.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Holes {
    pub fn new() -> Holes {
        Holes {
            nodes: Vec::new(),
            free_nodes: Vec::new(),
            root: NIL,
            count: 0,
        }
    }

    /// Number of holes.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Length of the longest hole (0 when there is none).
    pub fn longest(&self) -> u64 {
        self.max_of(self.root)
    }

    fn max_of(&self, t: u32) -> u64 {
        if t == NIL {
            0
        } else {
            self.nodes[t as usize].max
        }
    }

    fn pull(&mut self, t: u32) {
        let n = self.nodes[t as usize];
        let m = n.len.max(self.max_of(n.left)).max(self.max_of(n.right));
        self.nodes[t as usize].max = m;
    }

    fn new_node(&mut self, start: u64, len: u64) -> u32 {
        let node = Node {
            start,
            len,
            max: len,
            prio: prio_of(start),
            left: NIL,
            right: NIL,
        };
        if let Some(i) = self.free_nodes.pop() {
            self.nodes[i as usize] = node;
            i
        } else {
            self.nodes.push(node);
            (self.nodes.len() - 1) as u32
        }
    }

    /// Splits `t` into (starts < key, starts >= key).
    fn split(&mut self, t: u32, key: u64) -> (u32, u32) {
        if t == NIL {
            return (NIL, NIL);
        }
        if self.nodes[t as usize].start < key {
            let (l, r) = self.split(self.nodes[t as usize].right, key);
            self.nodes[t as usize].right = l;
            self.pull(t);
            (t, r)
        } else {
            let (l, r) = self.split(self.nodes[t as usize].left, key);
            self.nodes[t as usize].left = r;
            self.pull(t);
            (l, t)
        }
    }

    /// Joins two treaps where every start in `a` is below every start in `b`.
    fn merge(&mut self, a: u32, b: u32) -> u32 {
        if a == NIL {
            return b;
        }
        if b == NIL {
            return a;
        }
        if self.nodes[a as usize].prio > self.nodes[b as usize].prio {
            let r = self.merge(self.nodes[a as usize].right, b);
            self.nodes[a as usize].right = r;
            self.pull(a);
            a
        } else {
            let l = self.merge(a, self.nodes[b as usize].left);
            self.nodes[b as usize].left = l;
            self.pull(b);
            b
        }
    }

    /// Adds a hole. The caller guarantees it overlaps no other hole.
    pub fn insert(&mut self, start: u64, len: u64) {
        debug_assert!(len > 0);
        let n = self.new_node(start, len);
        let (l, r) = self.split(self.root, start);
        let l = self.merge(l, n);
        self.root = self.merge(l, r);
        self.count += 1;
    }

    /// Removes the hole starting exactly at `start`, returning its length.
    pub fn remove(&mut self, start: u64) -> Option<u64> {
        let (l, r) = self.split(self.root, start);
        let (m, r) = self.split(r, start.saturating_add(1));
        self.root = self.merge(l, r);
        if m == NIL {
            return None;
        }
        debug_assert_eq!(self.nodes[m as usize].left, NIL);
        debug_assert_eq!(self.nodes[m as usize].right, NIL);
        self.free_nodes.push(m);
        self.count -= 1;
        Some(self.nodes[m as usize].len)
    }

    /// Changes the hole at `start` in place to `[new_start, new_start + new_len)`. The caller
    /// guarantees that the order of holes is unchanged and nothing overlaps. Returns false
    /// when there is no hole at `start`.
    pub fn reshape(&mut self, start: u64, new_start: u64, new_len: u64) -> bool {
        debug_assert!(new_len > 0);
        let root = self.root;
        self.reshape_in(root, start, new_start, new_len)
    }

    fn reshape_in(&mut self, t: u32, start: u64, new_start: u64, new_len: u64) -> bool {
        if t == NIL {
            return false;
        }
        let key = self.nodes[t as usize].start;
        let found = if start == key {
            let n = &mut self.nodes[t as usize];
            n.start = new_start;
            n.len = new_len;
            true
        } else if start < key {
            self.reshape_in(self.nodes[t as usize].left, start, new_start, new_len)
        } else {
            self.reshape_in(self.nodes[t as usize].right, start, new_start, new_len)
        };
        if found {
            self.pull(t);
        }
        found
    }

    /// The hole with the greatest start `<= addr`.
    pub fn at_or_before(&self, addr: u64) -> Option<(u64, u64)> {
        let mut t = self.root;
        let mut best = None;
        while t != NIL {
            let n = &self.nodes[t as usize];
            if n.start <= addr {
                best = Some((n.start, n.len));
                t = n.right;
            } else {
                t = n.left;
            }
        }
        best
    }

    /// The hole with the smallest start `>= addr`.
    pub fn at_or_after(&self, addr: u64) -> Option<(u64, u64)> {
        let mut t = self.root;
        let mut best = None;
        while t != NIL {
            let n = &self.nodes[t as usize];
            if n.start >= addr {
                best = Some((n.start, n.len));
                t = n.left;
            } else {
                t = n.right;
            }
        }
        best
    }

    /// The lowest-addressed hole with `start >= from` and `len >= need`.
    pub fn first_fit_from(&self, from: u64, need: u64) -> Option<(u64, u64)> {
        self.fit_in(self.root, from, need)
    }

    fn fit_in(&self, t: u32, from: u64, need: u64) -> Option<(u64, u64)> {
        if t == NIL || self.nodes[t as usize].max < need {
            return None;
        }
        let n = &self.nodes[t as usize];
        if n.start < from {
            return self.fit_in(n.right, from, need);
        }
        if let Some(hit) = self.fit_in(n.left, from, need) {
            return Some(hit);
        }
        if n.len >= need {
            return Some((n.start, n.len));
        }
        self.fit_in(n.right, from, need)
    }

    /// All holes in address order (for tests and reports; O(n)).
    pub fn to_vec(&self) -> Vec<(u64, u64)> {
        let mut out = Vec::with_capacity(self.count);
        let mut stack = Vec::new();
        let mut t = self.root;
        loop {
            while t != NIL {
                stack.push(t);
                t = self.nodes[t as usize].left;
            }
            match stack.pop() {
                None => break,
                Some(n) => {
                    let node = &self.nodes[n as usize];
                    out.push((node.start, node.len));
                    t = node.right;
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_prefers_lowest_address() {
        let mut h = Holes::new();
        h.insert(1000, 10);
        h.insert(100, 5);
        h.insert(500, 50);
        h.insert(2000, 100);
        assert_eq!(h.first_fit_from(0, 1), Some((100, 5)));
        assert_eq!(h.first_fit_from(0, 6), Some((500, 50)));
        assert_eq!(h.first_fit_from(0, 51), Some((2000, 100)));
        assert_eq!(h.first_fit_from(0, 101), None);
        assert_eq!(h.first_fit_from(501, 6), Some((1000, 10)));
        assert_eq!(h.longest(), 100);
        assert_eq!(h.at_or_before(999), Some((500, 50)));
        assert_eq!(h.at_or_after(501), Some((1000, 10)));
        assert_eq!(h.remove(500), Some(50));
        assert_eq!(h.remove(500), None);
        assert_eq!(h.to_vec(), vec![(100, 5), (1000, 10), (2000, 100)]);
        assert!(h.reshape(2000, 2050, 50));
        assert_eq!(h.longest(), 50);
        assert_eq!(h.len(), 3);
    }

    /// Compares against a naive sorted list under a deterministic pseudo-random workload.
    #[test]
    fn matches_naive_model() {
        let mut h = Holes::new();
        let mut naive: Vec<(u64, u64)> = Vec::new();
        let mut x: u64 = 12345;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let op = rnd() % 3;
            let slot = (rnd() % 500) * 100;
            match op {
                0 => {
                    if !naive.iter().any(|&(s, _)| s == slot) {
                        let len = 1 + rnd() % 99;
                        h.insert(slot, len);
                        naive.push((slot, len));
                        naive.sort();
                    }
                }
                1 => {
                    let want = naive.iter().position(|&(s, _)| s == slot);
                    let got = h.remove(slot);
                    assert_eq!(got, want.map(|i| naive.remove(i).1));
                }
                _ => {
                    let need = 1 + rnd() % 100;
                    let from = rnd() % 50_000;
                    let want = naive
                        .iter()
                        .find(|&&(s, l)| s >= from && l >= need)
                        .copied();
                    assert_eq!(h.first_fit_from(from, need), want);
                }
            }
            assert_eq!(
                h.longest(),
                naive.iter().map(|&(_, l)| l).max().unwrap_or(0)
            );
        }
        assert_eq!(h.to_vec(), naive);
    }
}
