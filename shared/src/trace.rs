//! Reading, following and writing trace files. The layout (header, chunks, errors) is
//! [`fragprobe_wire::trace`], re-exported here, so `fragprobe_shared::trace` is the whole
//! trace API for consumers.

mod read;
mod tail;
mod write;

pub use fragprobe_wire::trace::*;
pub use read::{file_kind, MetaRef, Trace, Truncation};
pub use tail::TraceTail;
pub use write::TraceWriter;
