//! PyTorch allocator forensics: a safe reader for `torch.cuda.memory._dump_snapshot()`
//! pickles, the snapshot model, allocator-level fragmentation figures, and a simulator of
//! PyTorch's native CUDA caching allocator that replays recorded traces.

pub mod pickle;
pub mod replay;
pub mod sim;
pub mod snapshot;
pub mod stacks;
pub mod verify;

pub use snapshot::{
    load_snapshot, read_snapshot, Action, AllocatorSettings, Block, BlockState, ImportError,
    PoolId, PoolKind, Segment, Snapshot, TraceEvent,
};
