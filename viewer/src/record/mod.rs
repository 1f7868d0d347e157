//! The consumer side of the ring: discover probed processes, drain their rings, keep the
//! model exact across losses, and append everything to one trace file.
//!
//! [`Recorder`] is the one source of live records: `fragprobe run`, `record`, `attach` and
//! the live viewer all poll it; the same records go to the trace file and to the model.

pub mod nvml;
mod recorder;
pub mod ringdir;
mod session;
mod sink;

pub use recorder::{PollStats, Recorder, RecorderOptions, TraceOut};
pub use session::{
    default_trace_name, probe_library, session_dir, shell_code, utc_stamp, Session, SessionOptions,
    SpawnError,
};
pub use sink::{ModelSink, CHECKPOINT_EVERY};
