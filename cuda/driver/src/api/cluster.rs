//! The driver's private table of thread-block-cluster queries
//! `{26dc3417-0d80-4547-8726-c0f1e7dd8bca}`, which cuBLASLt fetches before choosing a
//! GEMM for compute capability 9.0 — and calls without checking that the driver served it,
//! so a driver that refuses it crashes cuBLASLt (seen with cuBLAS 12.8 in torch 2.9.1's
//! first bf16 `nn.Linear`).
//!
//! What is answered, slot by slot (slot 0 is the table's size in bytes), for a simulated
//! H100-class part (132 SMs in 66 TPCs; portable clusters of up to 8 blocks, non-portable
//! up to 16):
//!
//! | slot | query | answer |
//! |---|---|---|
//! | 1–3 | set a function's default cluster dimensions, scheduling policy, non-portable sizes | accepted, not kept |
//! | 4 | the TPC → (virtual GPC, TPC within it) map | two 256-byte arrays from `malloc` (9 TPCs per GPC) |
//! | 5–7 | a function's cluster dimensions, policy, non-portable sizes | 0 (none set) |
//! | 8 | can the device launch clusters | 1 |
//! | 9 | largest cluster a function can launch | 8 |
//! | 10 | clusters active at once | 132 SMs / cluster size |
//! | 11 | override the per-device maximum cluster size | returns the old value, 8 |
//! | 12 | must the cluster dimension be set | 0 |
//! | 13 | free the arrays of slot 4 | `free` |
//! | 14 | nested-launch cluster attributes supported | 0 |
//! | 15 | first singleton virtual GPC | 8 (there are none: one past the last) |
//! | 16 | preferred cluster dimensions supported | 0 (a CUDA 12.8+ Blackwell feature) |

use std::ffi::{c_int, c_void};

use super::export::{size_of_table, Table};
use super::{code, put};
use fragprobe_simgpu::codes::*;

const SMS: c_int = 132;
const TPCS: usize = 66;
const TPCS_PER_GPC: usize = 9;
const GPCS: u8 = 8;
const MAX_PORTABLE: c_int = 8;

/// Writes `v` through `p` (`CUDA_ERROR_INVALID_VALUE` for NULL).
fn out<T>(p: *mut T, v: T) -> u32 {
    // SAFETY: a non-null out-parameter of the caller's is valid for a write of `T`;
    // `put` refuses NULL.
    code(unsafe { put(p, v) })
}

extern "C" fn set_accepted(_func: *mut c_void, _a: c_int, _b: c_int, _c: c_int) -> u32 {
    CUDA_SUCCESS
}

extern "C" fn tpc_map(vgpc: *mut *mut u8, mtpc: *mut *mut u8) -> u32 {
    if vgpc.is_null() || mtpc.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: plain C allocations, handed to the caller, who returns them through slot 13.
    let (g, t) = unsafe {
        (
            libc::calloc(256, 1).cast::<u8>(),
            libc::calloc(256, 1).cast::<u8>(),
        )
    };
    if g.is_null() || t.is_null() {
        // SAFETY: either may be NULL; free(NULL) is a no-op.
        unsafe {
            libc::free(g.cast());
            libc::free(t.cast());
        }
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    for i in 0..TPCS {
        // SAFETY: both arrays hold 256 bytes; i < 66.
        unsafe {
            g.add(i).write((i / TPCS_PER_GPC) as u8);
            t.add(i).write((i % TPCS_PER_GPC) as u8);
        }
    }
    // SAFETY: both checked non-null above.
    unsafe {
        vgpc.write(g);
        mtpc.write(t);
    }
    CUDA_SUCCESS
}

extern "C" fn cluster_dim(_f: *mut c_void, x: *mut c_int, y: *mut c_int, z: *mut c_int) -> u32 {
    match (out(x, 0), out(y, 0), out(z, 0)) {
        (CUDA_SUCCESS, CUDA_SUCCESS, CUDA_SUCCESS) => CUDA_SUCCESS,
        _ => CUDA_ERROR_INVALID_VALUE,
    }
}

extern "C" fn function_flag_zero(_func: *mut c_void, v: *mut c_int) -> u32 {
    out(v, 0)
}

extern "C" fn launch_supported(_dev: c_int, v: *mut c_int) -> u32 {
    out(v, 1)
}

extern "C" fn max_cluster(_f: *mut c_void, _block: c_int, _smem: usize, v: *mut c_int) -> u32 {
    out(v, MAX_PORTABLE)
}

extern "C" fn active_clusters(
    _f: *mut c_void,
    _block: c_int,
    _smem: usize,
    size: c_int,
    v: *mut c_int,
) -> u32 {
    out(v, SMS / size.max(1))
}

extern "C" fn override_max(_dev: c_int, _size: u32) -> u32 {
    MAX_PORTABLE as u32
}

extern "C" fn free_map(vgpc: *mut u8, mtpc: *mut u8) -> u32 {
    // SAFETY: the arrays of `tpc_map` (or NULL); free(NULL) is a no-op.
    unsafe {
        libc::free(vgpc.cast());
        libc::free(mtpc.cast());
    }
    CUDA_SUCCESS
}

extern "C" fn flag_zero(v: *mut c_int) -> u32 {
    out(v, 0)
}

extern "C" fn singleton_base(_dev: c_int, v: *mut u8) -> u32 {
    out(v, GPCS)
}

extern "C" fn device_flag_zero(_dev: c_int, v: *mut c_int) -> u32 {
    out(v, 0)
}

pub static CLUSTER: Table<17> = Table([
    size_of_table(17),
    set_accepted as *const c_void,
    set_accepted as *const c_void,
    set_accepted as *const c_void,
    tpc_map as *const c_void,
    cluster_dim as *const c_void,
    function_flag_zero as *const c_void,
    function_flag_zero as *const c_void,
    launch_supported as *const c_void,
    max_cluster as *const c_void,
    active_clusters as *const c_void,
    override_max as *const c_void,
    function_flag_zero as *const c_void,
    free_map as *const c_void,
    flag_zero as *const c_void,
    singleton_base as *const c_void,
    device_flag_zero as *const c_void,
]);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tpc_map_covers_every_tpc_and_is_freed_through_the_table() {
        let (mut g, mut t) = (std::ptr::null_mut(), std::ptr::null_mut());
        assert_eq!(tpc_map(&mut g, &mut t), CUDA_SUCCESS);
        // SAFETY: 256-byte arrays from tpc_map.
        let (gs, ts) = unsafe {
            (
                std::slice::from_raw_parts(g, 256),
                std::slice::from_raw_parts(t, 256),
            )
        };
        assert_eq!(gs[TPCS - 1], 7);
        assert_eq!(ts[TPCS - 1], 2);
        assert!(gs[..TPCS].iter().all(|&v| v < GPCS));
        assert_eq!(free_map(g, t), CUDA_SUCCESS);
        assert_eq!(
            tpc_map(std::ptr::null_mut(), &mut t),
            CUDA_ERROR_INVALID_VALUE
        );
    }

    #[test]
    fn the_table_is_sized_and_full() {
        assert_eq!(CLUSTER.0[0] as usize, 17 * 8);
        assert!(CLUSTER.0[1..].iter().all(|p| !p.is_null()));
        let mut n = 0;
        assert_eq!(
            active_clusters(std::ptr::null_mut(), 128, 0, 2, &mut n),
            CUDA_SUCCESS
        );
        assert_eq!(n, 66);
    }
}
