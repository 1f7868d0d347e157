//! An ordered map for the simulator's many small ordered sets (a pool lane's free blocks,
//! a segment's blocks while a trace is undone).
//!
//! Most of these hold a handful of entries, where a sorted `Vec` searched by bisection is
//! several times cheaper than a `BTreeMap` (no node allocation, no pointer chasing). A map
//! that grows past `SPILL` entries moves into a `BTreeMap`, so large sets keep logarithmic
//! updates, and moves back once it has shrunk well below that.

use std::collections::{btree_map, BTreeMap};
use std::ops::Bound;

/// The neighbours of a key in a [`SortedMap`] (see [`SortedMap::around`]).
pub struct Around<'a, K, V> {
    /// The entry with the largest key ≤ the key.
    pub at_or_below: Option<(K, &'a V)>,
    /// The entry with the smallest key > the key.
    pub above: Option<(K, &'a V)>,
}

/// Entries above which a map switches to a `BTreeMap` (default).
pub const DEFAULT_SPILL: usize = 64;

/// An ordered map: a sorted `Vec` while small, a `BTreeMap` once it has more than `SPILL`
/// entries.
#[derive(Clone, Debug)]
pub struct SortedMap<K, V, const SPILL: usize = DEFAULT_SPILL> {
    repr: Repr<K, V>,
}

#[derive(Clone, Debug)]
enum Repr<K, V> {
    Flat(Vec<(K, V)>),
    Tree(BTreeMap<K, V>),
}

impl<K, V, const SPILL: usize> Default for SortedMap<K, V, SPILL> {
    fn default() -> Self {
        SortedMap {
            repr: Repr::Flat(Vec::new()),
        }
    }
}

/// Entries of a [`SortedMap`] in key order (double-ended: `.rev()` walks downwards).
pub enum Iter<'a, K, V> {
    /// Over a sorted `Vec`.
    Flat(std::slice::Iter<'a, (K, V)>),
    /// Over a `BTreeMap` range.
    Tree(btree_map::Range<'a, K, V>),
}

impl<'a, K: Copy, V> Iterator for Iter<'a, K, V> {
    type Item = (K, &'a V);
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Iter::Flat(it) => it.next().map(|(k, v)| (*k, v)),
            Iter::Tree(it) => it.next().map(|(k, v)| (*k, v)),
        }
    }
}

impl<K: Copy, V> DoubleEndedIterator for Iter<'_, K, V> {
    #[inline]
    fn next_back(&mut self) -> Option<Self::Item> {
        match self {
            Iter::Flat(it) => it.next_back().map(|(k, v)| (*k, v)),
            Iter::Tree(it) => it.next_back().map(|(k, v)| (*k, v)),
        }
    }
}

impl<K: Ord + Copy, V, const SPILL: usize> SortedMap<K, V, SPILL> {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of entries.
    #[inline]
    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Flat(v) => v.len(),
            Repr::Tree(t) => t.len(),
        }
    }

    /// Whether the map is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes every entry (a flat map keeps its buffer).
    pub fn clear(&mut self) {
        match &mut self.repr {
            Repr::Flat(v) => v.clear(),
            Repr::Tree(_) => self.repr = Repr::Flat(Vec::new()),
        }
    }

    /// The value at `k`.
    #[inline]
    pub fn get(&self, k: &K) -> Option<&V> {
        match &self.repr {
            Repr::Flat(v) => v.binary_search_by(|e| e.0.cmp(k)).ok().map(|i| &v[i].1),
            Repr::Tree(t) => t.get(k),
        }
    }

    /// The value at `k`, mutably.
    #[inline]
    pub fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        match &mut self.repr {
            Repr::Flat(v) => match v.binary_search_by(|e| e.0.cmp(k)) {
                Ok(i) => Some(&mut v[i].1),
                Err(_) => None,
            },
            Repr::Tree(t) => t.get_mut(k),
        }
    }

    /// Whether `k` is present.
    #[inline]
    pub fn contains_key(&self, k: &K) -> bool {
        self.get(k).is_some()
    }

    /// Sets `k` to `val`; returns the value it replaced.
    #[inline]
    pub fn insert(&mut self, k: K, val: V) -> Option<V> {
        match &mut self.repr {
            Repr::Flat(v) => match v.binary_search_by(|e| e.0.cmp(&k)) {
                Ok(i) => Some(std::mem::replace(&mut v[i].1, val)),
                Err(i) => {
                    v.insert(i, (k, val));
                    if v.len() > SPILL {
                        let t = std::mem::take(v).into_iter().collect();
                        self.repr = Repr::Tree(t);
                    }
                    None
                }
            },
            Repr::Tree(t) => t.insert(k, val),
        }
    }

    /// Removes `k`; returns its value.
    #[inline]
    pub fn remove(&mut self, k: &K) -> Option<V> {
        match &mut self.repr {
            Repr::Flat(v) => match v.binary_search_by(|e| e.0.cmp(k)) {
                Ok(i) => Some(v.remove(i).1),
                Err(_) => None,
            },
            Repr::Tree(t) => {
                let out = t.remove(k);
                if t.len() < SPILL / 4 {
                    let v = std::mem::take(t).into_iter().collect();
                    self.repr = Repr::Flat(v);
                }
                out
            }
        }
    }

    /// Entries with keys in `range`, in key order.
    fn range(&self, lo: Bound<&K>, hi: Bound<&K>) -> Iter<'_, K, V> {
        match &self.repr {
            Repr::Flat(v) => {
                let start = match lo {
                    Bound::Included(k) => v.partition_point(|e| e.0 < *k),
                    Bound::Excluded(k) => v.partition_point(|e| e.0 <= *k),
                    Bound::Unbounded => 0,
                };
                let end = match hi {
                    Bound::Included(k) => v.partition_point(|e| e.0 <= *k),
                    Bound::Excluded(k) => v.partition_point(|e| e.0 < *k),
                    Bound::Unbounded => v.len(),
                };
                Iter::Flat(v[start..end.max(start)].iter())
            }
            Repr::Tree(t) => Iter::Tree(t.range((lo, hi))),
        }
    }

    /// Every entry, in key order.
    #[inline]
    pub fn iter(&self) -> Iter<'_, K, V> {
        self.range(Bound::Unbounded, Bound::Unbounded)
    }

    /// Entries with keys ≥ `k`, in key order.
    #[inline]
    pub fn range_from(&self, k: &K) -> Iter<'_, K, V> {
        self.range(Bound::Included(k), Bound::Unbounded)
    }

    /// Entries with keys < `k`, in key order.
    #[inline]
    pub fn range_below(&self, k: &K) -> Iter<'_, K, V> {
        self.range(Bound::Unbounded, Bound::Excluded(k))
    }

    /// Entries with keys ≤ `k`, in key order.
    #[inline]
    pub fn range_to(&self, k: &K) -> Iter<'_, K, V> {
        self.range(Bound::Unbounded, Bound::Included(k))
    }

    /// The entries with the largest key ≤ `k` and with the smallest key > `k`, found with
    /// one search.
    #[inline]
    pub fn around(&self, k: &K) -> Around<'_, K, V> {
        match &self.repr {
            Repr::Flat(v) => {
                let i = v.partition_point(|e| e.0 <= *k);
                let at = |j: usize| v.get(j).map(|e| (e.0, &e.1));
                Around {
                    at_or_below: i.checked_sub(1).and_then(at),
                    above: at(i),
                }
            }
            Repr::Tree(_) => Around {
                at_or_below: self.last_at_or_below(k),
                above: self.first_above(k),
            },
        }
    }

    /// The entry with the smallest key > `k`.
    #[inline]
    pub fn first_above(&self, k: &K) -> Option<(K, &V)> {
        self.range(Bound::Excluded(k), Bound::Unbounded).next()
    }

    /// The entry with the largest key ≤ `k`.
    #[inline]
    pub fn last_at_or_below(&self, k: &K) -> Option<(K, &V)> {
        self.range_to(k).next_back()
    }

    /// The entry with the largest key < `k`.
    #[inline]
    pub fn last_below(&self, k: &K) -> Option<(K, &V)> {
        self.range_below(k).next_back()
    }

    /// The entry with the largest key ≤ `k`, its value mutably.
    #[inline]
    pub fn last_at_or_below_mut(&mut self, k: &K) -> Option<(K, &mut V)> {
        match &mut self.repr {
            Repr::Flat(v) => {
                let i = v.partition_point(|e| e.0 <= *k);
                let e = v[..i].last_mut()?;
                Some((e.0, &mut e.1))
            }
            Repr::Tree(t) => t.range_mut(..=*k).next_back().map(|(k, v)| (*k, v)),
        }
    }

    /// Every value, in key order.
    #[inline]
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &V> + '_ {
        self.iter().map(|(_, v)| v)
    }
}

impl<K: Ord + Copy, V, const SPILL: usize> FromIterator<(K, V)> for SortedMap<K, V, SPILL> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut m = Self::new();
        m.extend(iter);
        m
    }
}

impl<K: Ord + Copy, V, const SPILL: usize> Extend<(K, V)> for SortedMap<K, V, SPILL> {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, iter: I) {
        for (k, v) in iter {
            self.insert(k, v);
        }
    }
}

impl<K: Ord + Copy, V, const SPILL: usize> IntoIterator for SortedMap<K, V, SPILL> {
    type Item = (K, V);
    type IntoIter = IntoIter<K, V>;
    fn into_iter(self) -> IntoIter<K, V> {
        match self.repr {
            Repr::Flat(v) => IntoIter::Flat(v.into_iter()),
            Repr::Tree(t) => IntoIter::Tree(t.into_iter()),
        }
    }
}

/// Owned entries of a [`SortedMap`] in key order.
pub enum IntoIter<K, V> {
    /// From a sorted `Vec`.
    Flat(std::vec::IntoIter<(K, V)>),
    /// From a `BTreeMap`.
    Tree(btree_map::IntoIter<K, V>),
}

impl<K, V> Iterator for IntoIter<K, V> {
    type Item = (K, V);
    #[inline]
    fn next(&mut self) -> Option<(K, V)> {
        match self {
            IntoIter::Flat(it) => it.next(),
            IntoIter::Tree(it) => it.next(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Drives a `SortedMap` (small spill threshold, so both forms are exercised) and a
    /// `BTreeMap` with the same pseudo-random operations and compares every answer.
    #[test]
    fn behaves_like_a_btreemap_in_both_forms() {
        let mut m: SortedMap<u64, u64, 8> = SortedMap::new();
        let mut t: BTreeMap<u64, u64> = BTreeMap::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for step in 0..20_000 {
            // Phases that grow the map past the threshold and shrink it back.
            let grow = (step / 500) % 2 == 0;
            let k = rnd() % 64;
            let r = rnd() % 10;
            if (grow && r < 7) || (!grow && r < 3) {
                assert_eq!(m.insert(k, step), t.insert(k, step));
            } else {
                assert_eq!(m.remove(&k), t.remove(&k));
            }
            assert_eq!(m.len(), t.len());
            assert_eq!(m.get(&k), t.get(&k));
            assert_eq!(m.contains_key(&k), t.contains_key(&k));
            let want = |it: &mut dyn Iterator<Item = (&u64, &u64)>| {
                it.map(|(a, b)| (*a, *b)).collect::<Vec<_>>()
            };
            let got = |it: Iter<'_, u64, u64>| it.map(|(a, b)| (a, *b)).collect::<Vec<_>>();
            assert_eq!(got(m.range_from(&k)), want(&mut t.range(k..)));
            assert_eq!(got(m.range_below(&k)), want(&mut t.range(..k)));
            assert_eq!(got(m.range_to(&k)), want(&mut t.range(..=k)));
            assert_eq!(
                m.range_below(&k).rev().map(|(a, _)| a).collect::<Vec<_>>(),
                t.range(..k).rev().map(|(a, _)| *a).collect::<Vec<_>>()
            );
            assert_eq!(
                m.last_at_or_below(&k).map(|(a, b)| (a, *b)),
                t.range(..=k).next_back().map(|(a, b)| (*a, *b))
            );
            assert_eq!(
                m.first_above(&k).map(|(a, b)| (a, *b)),
                t.range(k + 1..).next().map(|(a, b)| (*a, *b))
            );
            let near = m.around(&k);
            assert_eq!(near.at_or_below, m.last_at_or_below(&k));
            assert_eq!(near.above, m.first_above(&k));
            assert_eq!(
                m.last_below(&k).map(|(a, b)| (a, *b)),
                t.range(..k).next_back().map(|(a, b)| (*a, *b))
            );
            if let Some((a, v)) = m.last_at_or_below_mut(&k) {
                *v += 1;
                *t.get_mut(&a).expect("same keys") += 1;
            }
            if let Some(v) = m.get_mut(&k) {
                *v ^= 3;
                *t.get_mut(&k).expect("same keys") ^= 3;
            }
        }
        let all: Vec<(u64, u64)> = m.clone().into_iter().collect();
        assert_eq!(all, t.into_iter().collect::<Vec<_>>());
        assert_eq!(
            m.values().copied().collect::<Vec<_>>(),
            all.iter().map(|e| e.1).collect::<Vec<_>>()
        );
    }
}
