//! Blocks and block pools of the simulated allocator.
//!
//! Blocks live in an arena and link to their neighbours in the same segment by index, like
//! PyTorch's `Block::prev/next`. Each pool keeps its free blocks ordered by
//! (stream, size, address) — `BlockComparatorSize` — and the unmapped blocks of expandable
//! segments ordered by (stream, address) — `BlockComparatorAddress`.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

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

/// A pool of cached blocks (PyTorch's `BlockPool`).
#[derive(Clone, Debug)]
pub struct Pool {
    /// Small (≤ 1 MiB requests) or large.
    pub small: bool,
    /// Memory pool id ((0, 0) = default).
    pub id: PoolId,
    /// Free mapped blocks by (stream, size, address).
    pub free: BTreeMap<(u64, u64, u64), u32>,
    /// Unmapped blocks of expandable segments by (stream, address).
    pub unmapped: BTreeMap<(u64, u64), u32>,
    /// `get_free_blocks_call_count` (counted only while garbage collection is active).
    pub get_free_calls: i64,
}

impl Pool {
    /// An empty pool.
    pub fn new(small: bool, id: PoolId) -> Pool {
        Pool {
            small,
            id,
            free: BTreeMap::new(),
            unmapped: BTreeMap::new(),
            get_free_calls: 0,
        }
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
