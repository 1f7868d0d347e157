//! PyTorch allocator forensics: a safe reader for `torch.cuda.memory._dump_snapshot()`
//! pickles, the snapshot model, allocator-level fragmentation figures, and a simulator of
//! PyTorch's native CUDA caching allocator that replays recorded traces.

pub mod export;
pub mod figures;
pub mod json;
pub mod pickle;
pub mod predict;
pub mod records;
pub mod replay;
pub mod report;
pub mod sim;
pub mod snapshot;
pub mod stacks;
pub mod verify;

pub use export::write_snapshot_pickle;
pub use records::{from_records, to_records};
pub use snapshot::{
    load_snapshot, read_snapshot, Action, AllocatorSettings, Block, BlockState, ImportError,
    PoolId, PoolKind, Segment, Snapshot, TraceEvent,
};
