//! The shared-memory ring, consumer side: [`fragprobe_wire::ring`] (layout, producer,
//! consumer drain; re-exported here) plus what only a consumer needs: ring files mapped
//! from disk, SIGBUS-safe reading of a file that shrinks, listing and sweeping ring
//! directories.

mod fault;
mod file;

pub use file::{
    fs_space, list_rings, monotonic_ns, process_exists, ring_dirs, user_ring_dirs, RingFile,
    RingFileError, RingInfo,
};
pub use fragprobe_wire::ring::*;
