//! Blocks and block pools of the simulated allocator.
//!
//! Blocks live in an arena and link to their neighbours in the same segment by index, like
//! PyTorch's `Block::prev/next`. Each pool keeps its free blocks ordered by
//! (stream, size, address) — `BlockComparatorSize` — and the unmapped blocks of expandable
//! segments ordered by (stream, address) — `BlockComparatorAddress`.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::sorted::SortedMap;
use crate::torch::snapshot::PoolId;

/// "No block".
pub const NIL: u32 = u32::MAX;
const DEAD: u16 = u16::MAX;

/// One block of the simulated allocator.
#[derive(Clone, Debug)]
pub struct Block {
    /// Address.
    pub addr: u64,
    /// Bytes.
    pub size: u64,
    /// Bytes requested by the current owner (0 when free).
    pub requested: u64,
    /// Stream.
    pub stream: u64,
    /// Previous block of the same segment, or [`NIL`].
    pub prev: u32,
    /// Next block of the same segment, or [`NIL`].
    pub next: u32,
    /// Owning pool index (`u16::MAX` marks a recycled arena slot).
    pub pool: u16,
    /// Handed out to the program.
    pub allocated: bool,
    /// Freed by the program, waiting for other streams (`active_pending_free`).
    pub pending: bool,
    /// Backed by physical memory (always true outside expandable segments).
    pub mapped: bool,
    /// Expandable segment index, or [`NIL`].
    pub exp: u32,
    /// The pool's `get_free_blocks_call_count` when the block entered the pool.
    pub gc_base: i64,
}

impl Block {
    /// Part of a split segment.
    pub fn is_split(&self) -> bool {
        self.prev != NIL || self.next != NIL
    }
    /// Free and not waiting on another stream.
    pub fn is_free(&self) -> bool {
        !self.allocated && !self.pending
    }
}

/// The cached blocks of one stream in one pool.
#[derive(Clone, Debug)]
pub struct Lane {
    /// The stream.
    pub stream: u64,
    /// Free mapped blocks by (size, address), packed as `size << 64 | address`.
    free: SortedMap<u128, u32>,
    /// Unmapped blocks of expandable segments by address.
    unmapped: SortedMap<u64, u32>,
}

#[inline]
fn key(size: u64, addr: u64) -> u128 {
    ((size as u128) << 64) | addr as u128
}

#[inline]
fn unkey(k: u128) -> (u64, u64) {
    ((k >> 64) as u64, k as u64)
}

/// A pool of cached blocks (PyTorch's `BlockPool`).
///
/// PyTorch keeps one set ordered by (stream, size, address); here each stream has its own
/// lane ordered by (size, address), and lanes are kept in stream order, which is the same
/// order.
#[derive(Clone, Debug)]
pub struct Pool {
    /// Small (≤ 1 MiB requests) or large.
    pub small: bool,
    /// Memory pool id ((0, 0) = default).
    pub id: PoolId,
    lanes: Vec<Lane>,
    /// `get_free_blocks_call_count` (counted only while garbage collection is active).
    pub get_free_calls: i64,
}

impl Pool {
    /// An empty pool.
    pub fn new(small: bool, id: PoolId) -> Pool {
        Pool {
            small,
            id,
            lanes: Vec::new(),
            get_free_calls: 0,
        }
    }

    fn lane(&self, stream: u64) -> Option<&Lane> {
        match self.lanes.binary_search_by_key(&stream, |l| l.stream) {
            Ok(i) => Some(&self.lanes[i]),
            Err(_) => None,
        }
    }

    fn lane_mut(&mut self, stream: u64) -> &mut Lane {
        let i = match self.lanes.binary_search_by_key(&stream, |l| l.stream) {
            Ok(i) => i,
            Err(i) => {
                self.lanes.insert(
                    i,
                    Lane {
                        stream,
                        free: SortedMap::new(),
                        unmapped: SortedMap::new(),
                    },
                );
                i
            }
        };
        &mut self.lanes[i]
    }

    /// Adds a free block.
    #[inline]
    pub fn insert_free(&mut self, stream: u64, size: u64, addr: u64, id: u32) {
        self.lane_mut(stream).free.insert(key(size, addr), id);
    }

    /// Removes a free block; returns its id.
    #[inline]
    pub fn remove_free(&mut self, stream: u64, size: u64, addr: u64) -> Option<u32> {
        match self.lanes.binary_search_by_key(&stream, |l| l.stream) {
            Ok(i) => self.lanes[i].free.remove(&key(size, addr)),
            Err(_) => None,
        }
    }

    /// The free block with exactly this stream, size and address.
    pub fn get_free(&self, stream: u64, size: u64, addr: u64) -> Option<u32> {
        self.lane(stream)
            .and_then(|l| l.free.get(&key(size, addr)).copied())
    }

    /// Free blocks of `stream` with size ≥ `size`, smallest (then lowest address) first:
    /// `(size, address, id)`.
    pub fn free_from(&self, stream: u64, size: u64) -> impl Iterator<Item = (u64, u64, u32)> + '_ {
        self.lane(stream)
            .into_iter()
            .flat_map(move |l| l.free.range_from(&key(size, 0)))
            .map(|(k, &id)| {
                let (s, a) = unkey(k);
                (s, a, id)
            })
    }

    /// Free blocks of `stream` with size < `size`, largest first: `(size, address, id)`.
    pub fn free_below(&self, stream: u64, size: u64) -> impl Iterator<Item = (u64, u64, u32)> + '_ {
        self.lane(stream)
            .into_iter()
            .flat_map(move |l| l.free.range_below(&key(size, 0)).rev())
            .map(|(k, &id)| {
                let (s, a) = unkey(k);
                (s, a, id)
            })
    }

    /// Every free block, in PyTorch's (stream, size, address) order.
    pub fn all_free(&self) -> impl Iterator<Item = u32> + '_ {
        self.lanes.iter().flat_map(|l| l.free.values().copied())
    }

    /// Number of free blocks.
    pub fn free_count(&self) -> usize {
        self.lanes.iter().map(|l| l.free.len()).sum()
    }

    /// Adds an unmapped block.
    pub fn insert_unmapped(&mut self, stream: u64, addr: u64, id: u32) {
        self.lane_mut(stream).unmapped.insert(addr, id);
    }

    /// Removes an unmapped block.
    pub fn remove_unmapped(&mut self, stream: u64, addr: u64) -> Option<u32> {
        match self.lanes.binary_search_by_key(&stream, |l| l.stream) {
            Ok(i) => self.lanes[i].unmapped.remove(&addr),
            Err(_) => None,
        }
    }

    /// Unmapped blocks of `stream`, lowest address first.
    pub fn unmapped_of(&self, stream: u64) -> impl Iterator<Item = u32> + '_ {
        self.lane(stream)
            .into_iter()
            .flat_map(|l| l.unmapped.values().copied())
    }
}

/// The block arena.
#[derive(Clone, Debug, Default)]
pub struct Arena {
    blocks: Vec<Block>,
    spare: Vec<u32>,
}

impl Arena {
    /// Stores a block, reusing a recycled slot when there is one.
    pub fn add(&mut self, b: Block) -> u32 {
        if let Some(id) = self.spare.pop() {
            self.blocks[id as usize] = b;
            id
        } else {
            self.blocks.push(b);
            (self.blocks.len() - 1) as u32
        }
    }
    /// Recycles a slot.
    pub fn remove(&mut self, id: u32) {
        self.blocks[id as usize].pool = DEAD;
        self.spare.push(id);
    }
    /// Block `id`.
    #[inline]
    pub fn get(&self, id: u32) -> &Block {
        &self.blocks[id as usize]
    }
    /// Block `id`, mutably.
    #[inline]
    pub fn get_mut(&mut self, id: u32) -> &mut Block {
        &mut self.blocks[id as usize]
    }
    /// Every live block with its id.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &Block)> + '_ {
        self.blocks
            .iter()
            .enumerate()
            .filter(|(_, b)| b.pool != DEAD)
            .map(|(i, b)| (i as u32, b))
    }
}

/// A fast multiplicative hasher for integer keys (addresses).
#[derive(Default, Clone, Copy)]
pub struct IntHasher(u64);

impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        // The product's well-mixed high bits become the low bits the table indexes by
        // (addresses are 512-aligned, so their own low bits carry nothing).
        self.0.rotate_left(26)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ b as u64).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// A `HashMap` keyed by integers with [`IntHasher`].
pub type IntMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;
