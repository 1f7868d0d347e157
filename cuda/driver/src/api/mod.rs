//! The simulated entry points, by area. Every exported function here is found by
//! `build.rs` and entered into the symbol table.
#![allow(non_snake_case)]

mod cluster;
mod context;
mod device;
mod export;
mod graph;
mod kernel;
mod memory;
mod pool;
mod procaddr;
mod stream;
mod vmm;

pub use context::*;
pub use device::*;
pub use export::*;
pub use graph::*;
pub use kernel::*;
pub use memory::*;
pub use pool::*;
pub use procaddr::*;
pub use stream::*;
pub use vmm::*;

use fragprobe_simgpu::codes::{CuError, CuResult};

/// Writes `v` through `p`; `CUDA_ERROR_INVALID_VALUE` for NULL.
///
/// # Safety
/// `p` must be NULL or valid for a write of `T`.
pub(crate) unsafe fn put<T>(p: *mut T, v: T) -> CuResult<()> {
    if p.is_null() {
        return Err(CuError::INVALID_VALUE);
    }
    // SAFETY: non-null, and valid for writes per the caller's contract.
    unsafe { p.write(v) };
    Ok(())
}

/// Collapses a result to its `CUresult`.
pub(crate) fn code(r: CuResult<()>) -> u32 {
    fragprobe_simgpu::codes::code_of(r)
}

/// The calling thread's current context.
pub(crate) fn cur() -> Option<u64> {
    fragprobe_simgpu::current::current()
}
