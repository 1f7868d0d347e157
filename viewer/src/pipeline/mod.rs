//! Sources of records (trace files, live rings, imported snapshots, feeds from the
//! recorder) feeding one model per run, on named background threads: "fragprobe-ingest"
//! applies records, "fragprobe-rewind" builds the model at the time cursor,
//! "fragprobe-nvml" samples NVML. The viewer only reads what they publish.

pub mod allocator;
pub mod blocks;
pub mod crosscheck;
pub mod feed;
pub mod log;
pub mod nvml;
pub mod panels;
pub mod progress;
pub mod rewind;
pub mod run;
pub mod snapshot;
pub mod source;
pub mod space;
pub mod view;

pub use feed::{feed, FeedReceiver, FeedSender};
pub use run::{Head, Run};
pub use source::{LiveTarget, Source};
