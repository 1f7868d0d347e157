//! A simulator of PyTorch's native CUDA caching allocator.
//!
//! [`Allocator`] reproduces the rules of `c10/cuda/CUDACachingAllocator.cpp`: rounding,
//! small/large pools, best fit by (stream, size, address), `max_split_size_mb`,
//! splitting and in-segment merging, the free-cached-and-retry chain, OOM against a
//! capacity, garbage collection under a memory fraction, and expandable segments. Where a
//! rule changed between releases, [`Version`] selects it. New segments get their addresses
//! from an [`AddressSource`].

pub mod address;
pub mod allocator;
pub mod config;
pub mod expandable;
pub mod pools;
pub mod rounding;
pub mod sorted;
pub mod state;

pub use address::{AddressSource, FirstFit};
pub use allocator::{Allocator, Oom, SimError, Stats};
pub use config::{Backend, ConfError, Config, ExpandableSplit, Version};
