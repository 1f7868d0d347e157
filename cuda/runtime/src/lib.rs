//! Stand-in for `libcudart.so.12`: the CUDA runtime functions fragprobe's scenarios and
//! tests use, implemented over the driver the way NVIDIA's runtime does it (see
//! `driver.rs`). NVIDIA's own runtime cannot run on the simulated driver, because it needs
//! the driver's private export tables.
//!
//! Runtime semantics kept: a per-thread current device (default 0) whose primary context is
//! retained on first use and made current when the thread has no context (a context the
//! application made current is used as is); per-thread last error (`cudaGetLastError`
//! returns and clears it, `cudaPeekAtLastError` only returns it); `cudaMalloc(p, 0)` gives
//! NULL and `cudaFree(NULL)` succeeds; the `_ptsz` exports (per-thread default stream) use
//! the driver's `_ptsz` entry points.

#![allow(non_snake_case)]

mod api;
mod driver;

pub use api::*;
