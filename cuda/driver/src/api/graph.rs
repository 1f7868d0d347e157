//! Stream capture and CUDA graphs, as far as PyTorch's `torch.cuda.graph` uses them: a
//! stream begins capturing (`cuStreamBeginCapture_v2`), the queries on it say so (status
//! `CU_STREAM_CAPTURE_STATUS_ACTIVE`, its capture id and graph), kernels launched into it
//! become the graph's nodes, the capture ends into a graph, which is instantiated,
//! uploaded, launched (its kernels do nothing, like every kernel here) and destroyed.
//!
//! What is checked as a real driver checks it: capture on the legacy default stream is
//! refused (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`), a second begin or an end without a
//! begin is `CUDA_ERROR_ILLEGAL_STATE`, unknown graph and executable-graph handles are
//! `CUDA_ERROR_INVALID_VALUE`. Allocations made while capturing are ordinary allocations
//! (PyTorch gives a graph its own private pool of `cudaMalloc`'d segments, which the
//! probe records like any other); graph memory nodes (`cuGraphAddMemAllocNode`) are not
//! simulated.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::{code, put};
use fragprobe_simgpu::codes::*;

/// `CU_STREAM_LEGACY`, and NULL: the legacy default stream, which cannot capture.
const LEGACY: u64 = 0x1;
/// `CU_STREAM_PER_THREAD`: what NULL means to a `_ptsz` entry point.
pub(super) const PER_THREAD: u64 = 0x2;

#[derive(Default)]
struct Graphs {
    /// Capturing stream → (capture id, graph).
    captures: HashMap<u64, (u64, u64)>,
    /// Graph → number of nodes.
    graphs: HashMap<u64, usize>,
    /// Executable graph → its instantiation flags.
    execs: HashMap<u64, u64>,
}

static STATE: Mutex<Option<Graphs>> = Mutex::new(None);
static NEXT: AtomicU64 = AtomicU64::new(1);

fn with<T>(f: impl FnOnce(&mut Graphs) -> T) -> T {
    let mut g = STATE.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(Graphs::default))
}

fn fresh(tag: u64) -> u64 {
    tag << 44 | NEXT.fetch_add(1, Ordering::Relaxed)
}

const GRAPH: u64 = 0xB1;
const EXEC: u64 = 0xB2;
const NODE: u64 = 0xB3;

fn key(stream: *mut c_void) -> u64 {
    stream as usize as u64
}

/// Called by every launch: a kernel launched into a capturing stream is a node of its
/// graph instead of work. True when it was captured.
pub(super) fn captured(stream: *mut c_void) -> bool {
    with(|g| match g.captures.get(&key(stream)) {
        Some(&(_, graph)) => {
            *g.graphs.entry(graph).or_default() += 1;
            true
        }
        None => false,
    })
}

fn begin(stream: u64, mode: c_int) -> u32 {
    if stream == 0 || stream == LEGACY {
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if !(0..=2).contains(&mode) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if let Err(e) = crate::with_gpu(|_| Ok(())) {
        return code(Err(e));
    }
    with(|g| {
        if g.captures.contains_key(&stream) {
            return CUDA_ERROR_ILLEGAL_STATE;
        }
        let graph = fresh(GRAPH);
        g.graphs.insert(graph, 0);
        g.captures.insert(stream, (fresh(0), graph));
        CUDA_SUCCESS
    })
}

/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuStreamBeginCapture(stream: *mut c_void) -> u32 {
    begin(key(stream), 0)
}

/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuStreamBeginCapture_ptsz(stream: *mut c_void) -> u32 {
    begin(per_thread(stream), 0)
}

/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuStreamBeginCapture_v2(stream: *mut c_void, mode: c_int) -> u32 {
    begin(key(stream), mode)
}

/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuStreamBeginCapture_v2_ptsz(stream: *mut c_void, mode: c_int) -> u32 {
    begin(per_thread(stream), mode)
}

/// NULL to a `_ptsz` entry point is the calling thread's default stream.
pub(super) fn per_thread(stream: *mut c_void) -> u64 {
    match key(stream) {
        0 => PER_THREAD,
        s => s,
    }
}

fn end(stream: u64, graph: *mut u64) -> u32 {
    if graph.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    match with(|g| g.captures.remove(&stream)) {
        // SAFETY: non-null out-parameter of the caller's.
        Some((_, gr)) => code(unsafe { put(graph, gr) }),
        None => CUDA_ERROR_ILLEGAL_STATE,
    }
}

/// # Safety
/// `graph` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuStreamEndCapture(stream: *mut c_void, graph: *mut u64) -> u32 {
    end(key(stream), graph)
}

/// # Safety
/// As [`cuStreamEndCapture`].
#[no_mangle]
pub unsafe extern "C" fn cuStreamEndCapture_ptsz(stream: *mut c_void, graph: *mut u64) -> u32 {
    end(per_thread(stream), graph)
}

/// (status, id, graph) of a stream: `CU_STREAM_CAPTURE_STATUS_ACTIVE` (1) while capturing,
/// else `_NONE` (0) with id and graph 0.
fn info(stream: u64) -> (c_int, u64, u64) {
    with(|g| match g.captures.get(&stream) {
        Some(&(id, graph)) => (1, id, graph),
        None => (0, 0, 0),
    })
}

/// # Safety
/// Each out-parameter must be NULL or valid for a write.
unsafe fn write_info(
    stream: u64,
    status: *mut c_int,
    id: *mut u64,
    graph: *mut u64,
    deps: *mut *const c_void,
    edges: *mut *const c_void,
    num_deps: *mut usize,
) -> u32 {
    if status.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let (s, i, gr) = info(stream);
    // SAFETY: each non-null out-parameter is valid per the caller's contract.
    unsafe {
        status.write(s);
        if !id.is_null() {
            id.write(i);
        }
        if !graph.is_null() {
            graph.write(gr);
        }
        if !deps.is_null() {
            deps.write(std::ptr::null());
        }
        if !edges.is_null() {
            edges.write(std::ptr::null());
        }
        if !num_deps.is_null() {
            num_deps.write(0);
        }
    }
    CUDA_SUCCESS
}

macro_rules! null {
    () => {
        std::ptr::null_mut()
    };
}

/// # Safety
/// `status` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuStreamIsCapturing(stream: *mut c_void, status: *mut c_int) -> u32 {
    // SAFETY: forwarded caller contract.
    unsafe {
        write_info(
            key(stream),
            status,
            null!(),
            null!(),
            null!(),
            null!(),
            null!(),
        )
    }
}

/// # Safety
/// As [`cuStreamIsCapturing`].
#[no_mangle]
pub unsafe extern "C" fn cuStreamIsCapturing_ptsz(stream: *mut c_void, status: *mut c_int) -> u32 {
    // SAFETY: forwarded caller contract.
    unsafe {
        write_info(
            per_thread(stream),
            status,
            null!(),
            null!(),
            null!(),
            null!(),
            null!(),
        )
    }
}

/// # Safety
/// `status` must be NULL or valid for a write; `id` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCaptureInfo(
    stream: *mut c_void,
    status: *mut c_int,
    id: *mut u64,
) -> u32 {
    // SAFETY: forwarded caller contract.
    unsafe { write_info(key(stream), status, id, null!(), null!(), null!(), null!()) }
}

/// # Safety
/// As [`cuStreamGetCaptureInfo`].
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCaptureInfo_ptsz(
    stream: *mut c_void,
    status: *mut c_int,
    id: *mut u64,
) -> u32 {
    // SAFETY: forwarded caller contract.
    unsafe {
        write_info(
            per_thread(stream),
            status,
            id,
            null!(),
            null!(),
            null!(),
            null!(),
        )
    }
}

/// # Safety
/// Each out-parameter must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCaptureInfo_v2(
    stream: *mut c_void,
    status: *mut c_int,
    id: *mut u64,
    graph: *mut u64,
    deps: *mut *const c_void,
    num_deps: *mut usize,
) -> u32 {
    // SAFETY: forwarded caller contract.
    unsafe { write_info(key(stream), status, id, graph, deps, null!(), num_deps) }
}

/// # Safety
/// As [`cuStreamGetCaptureInfo_v2`].
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCaptureInfo_v2_ptsz(
    stream: *mut c_void,
    status: *mut c_int,
    id: *mut u64,
    graph: *mut u64,
    deps: *mut *const c_void,
    num_deps: *mut usize,
) -> u32 {
    // SAFETY: forwarded caller contract.
    unsafe {
        write_info(
            per_thread(stream),
            status,
            id,
            graph,
            deps,
            null!(),
            num_deps,
        )
    }
}

/// # Safety
/// Each out-parameter must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCaptureInfo_v3(
    stream: *mut c_void,
    status: *mut c_int,
    id: *mut u64,
    graph: *mut u64,
    deps: *mut *const c_void,
    edges: *mut *const c_void,
    num_deps: *mut usize,
) -> u32 {
    // SAFETY: forwarded caller contract.
    unsafe { write_info(key(stream), status, id, graph, deps, edges, num_deps) }
}

/// # Safety
/// As [`cuStreamGetCaptureInfo_v3`].
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCaptureInfo_v3_ptsz(
    stream: *mut c_void,
    status: *mut c_int,
    id: *mut u64,
    graph: *mut u64,
    deps: *mut *const c_void,
    edges: *mut *const c_void,
    num_deps: *mut usize,
) -> u32 {
    // SAFETY: forwarded caller contract.
    unsafe { write_info(per_thread(stream), status, id, graph, deps, edges, num_deps) }
}

thread_local! {
    static CAPTURE_MODE: std::cell::Cell<c_int> = const { std::cell::Cell::new(0) };
}

/// Swaps the thread's capture mode (`CU_STREAM_CAPTURE_MODE_GLOBAL` to begin with).
///
/// # Safety
/// `mode` must be NULL or valid for a read and a write.
#[no_mangle]
pub unsafe extern "C" fn cuThreadExchangeStreamCaptureMode(mode: *mut c_int) -> u32 {
    if mode.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: non-null, valid per the caller's contract.
    let new = unsafe { mode.read() };
    if !(0..=2).contains(&new) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let old = CAPTURE_MODE.with(|m| m.replace(new));
    // SAFETY: as above.
    unsafe { mode.write(old) };
    CUDA_SUCCESS
}

// ---- graphs ----------------------------------------------------------------------------

/// # Safety
/// `graph` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuGraphCreate(graph: *mut u64, flags: c_uint) -> u32 {
    if flags != 0 || graph.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let h = fresh(GRAPH);
    with(|g| g.graphs.insert(h, 0));
    // SAFETY: non-null out-parameter.
    code(unsafe { put(graph, h) })
}

/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuGraphDestroy(graph: u64) -> u32 {
    let capturing = with(|g| g.captures.values().any(|&(_, gr)| gr == graph));
    if capturing {
        return CUDA_ERROR_ILLEGAL_STATE;
    }
    match with(|g| g.graphs.remove(&graph)) {
        Some(_) => CUDA_SUCCESS,
        None => CUDA_ERROR_INVALID_VALUE,
    }
}

/// The graph's nodes: with `nodes` NULL their number, else up to `*count` handles (the
/// rest of the array NULL) and the number written.
///
/// # Safety
/// `count` must be NULL or valid for reads and writes; `nodes` NULL or valid for `*count`
/// writes.
#[no_mangle]
pub unsafe extern "C" fn cuGraphGetNodes(graph: u64, nodes: *mut u64, count: *mut usize) -> u32 {
    if count.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let Some(n) = with(|g| g.graphs.get(&graph).copied()) else {
        return CUDA_ERROR_INVALID_VALUE;
    };
    if nodes.is_null() {
        // SAFETY: non-null out-parameter.
        unsafe { count.write(n) };
        return CUDA_SUCCESS;
    }
    // SAFETY: non-null; the caller's capacity.
    let cap = unsafe { count.read() };
    for i in 0..cap {
        let h = if i < n { fresh(NODE) } else { 0 };
        // SAFETY: `nodes` holds `cap` entries per the caller's contract.
        unsafe { nodes.add(i).write(h) };
    }
    // SAFETY: as above.
    unsafe { count.write(n.min(cap)) };
    CUDA_SUCCESS
}

fn instantiate(exec: *mut u64, graph: u64, flags: u64) -> u32 {
    if exec.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if let Err(e) = crate::with_gpu(|_| Ok(())) {
        return code(Err(e));
    }
    if !with(|g| g.graphs.contains_key(&graph)) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let h = fresh(EXEC);
    with(|g| g.execs.insert(h, flags));
    // SAFETY: non-null out-parameter.
    code(unsafe { put(exec, h) })
}

/// The CUDA 10 form (error node and log buffer, left empty: instantiation cannot fail on
/// a valid graph here).
///
/// # Safety
/// `exec` must be NULL or valid for a write; `err_node` NULL or valid for a write; `log`
/// NULL or valid for `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiate(
    exec: *mut u64,
    graph: u64,
    err_node: *mut u64,
    log: *mut c_char,
    size: usize,
) -> u32 {
    // SAFETY: non-null out-parameters per the caller's contract.
    unsafe {
        if !err_node.is_null() {
            err_node.write(0);
        }
        if !log.is_null() && size > 0 {
            log.write(0);
        }
    }
    instantiate(exec, graph, 0)
}

/// # Safety
/// As [`cuGraphInstantiate`].
#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiate_v2(
    exec: *mut u64,
    graph: u64,
    err_node: *mut u64,
    log: *mut c_char,
    size: usize,
) -> u32 {
    // SAFETY: same contract.
    unsafe { cuGraphInstantiate(exec, graph, err_node, log, size) }
}

/// # Safety
/// `exec` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiateWithFlags(
    exec: *mut u64,
    graph: u64,
    flags: u64,
) -> u32 {
    // AUTO_FREE_ON_LAUNCH 1, UPLOAD 2, DEVICE_LAUNCH 4, USE_NODE_PRIORITY 8.
    if flags & !0xF != 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    instantiate(exec, graph, flags)
}

/// `CUDA_GRAPH_INSTANTIATE_PARAMS`.
#[repr(C)]
pub struct InstantiateParams {
    flags: u64,
    upload_stream: *mut c_void,
    err_node: u64,
    result: c_uint,
}

/// # Safety
/// `exec` must be NULL or valid for a write; `params` NULL or valid for reads and writes.
#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiateWithParams(
    exec: *mut u64,
    graph: u64,
    params: *mut InstantiateParams,
) -> u32 {
    if params.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: non-null, valid per the caller's contract.
    let p = unsafe { &mut *params };
    // SAFETY: forwarded caller contract for `exec`.
    let rc = unsafe { cuGraphInstantiateWithFlags(exec, graph, p.flags) };
    p.err_node = 0;
    // CUDA_GRAPH_INSTANTIATE_SUCCESS 0, _ERROR 1.
    p.result = (rc != CUDA_SUCCESS) as c_uint;
    rc
}

/// # Safety
/// As [`cuGraphInstantiateWithParams`].
#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiateWithParams_ptsz(
    exec: *mut u64,
    graph: u64,
    params: *mut InstantiateParams,
) -> u32 {
    // SAFETY: same contract.
    unsafe { cuGraphInstantiateWithParams(exec, graph, params) }
}

fn exec_known(exec: u64) -> u32 {
    if with(|g| g.execs.contains_key(&exec)) {
        code(crate::with_gpu(|_| Ok(())))
    } else {
        CUDA_ERROR_INVALID_VALUE
    }
}

/// A launch of an executable graph: its kernels do nothing.
///
/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuGraphLaunch(exec: u64, _stream: *mut c_void) -> u32 {
    exec_known(exec)
}

/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuGraphLaunch_ptsz(exec: u64, _stream: *mut c_void) -> u32 {
    exec_known(exec)
}

/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuGraphUpload(exec: u64, _stream: *mut c_void) -> u32 {
    exec_known(exec)
}

/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuGraphUpload_ptsz(exec: u64, _stream: *mut c_void) -> u32 {
    exec_known(exec)
}

/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuGraphExecDestroy(exec: u64) -> u32 {
    match with(|g| g.execs.remove(&exec)) {
        Some(_) => CUDA_SUCCESS,
        None => CUDA_ERROR_INVALID_VALUE,
    }
}

/// # Safety
/// `flags` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuGraphExecGetFlags(exec: u64, flags: *mut u64) -> u32 {
    match with(|g| g.execs.get(&exec).copied()) {
        // SAFETY: forwarded caller contract.
        Some(f) => code(unsafe { put(flags, f) }),
        None => CUDA_ERROR_INVALID_VALUE,
    }
}

/// A DOT file of the graph: one node per captured kernel, in order.
///
/// # Safety
/// `path` must be NULL or a C string.
#[no_mangle]
pub unsafe extern "C" fn cuGraphDebugDotPrint(
    graph: u64,
    path: *const c_char,
    _flags: c_uint,
) -> u32 {
    if path.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let Some(n) = with(|g| g.graphs.get(&graph).copied()) else {
        return CUDA_ERROR_INVALID_VALUE;
    };
    // SAFETY: non-null C string per the caller's contract.
    let path = unsafe { std::ffi::CStr::from_ptr(path) };
    let Ok(path) = path.to_str() else {
        return CUDA_ERROR_INVALID_VALUE;
    };
    let mut dot = String::from("digraph dot {\n");
    for i in 0..n {
        dot.push_str(&format!(
            "  node{i} [label=\"kernel {i} (simulated: does nothing)\"];\n"
        ));
        if i > 0 {
            dot.push_str(&format!("  node{} -> node{i};\n", i - 1));
        }
    }
    dot.push_str("}\n");
    match std::fs::write(path, dot) {
        Ok(()) => CUDA_SUCCESS,
        Err(_) => CUDA_ERROR_OPERATING_SYSTEM,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_mode_is_exchanged_per_thread() {
        let exchange = |m: c_int| {
            let mut m = m;
            // SAFETY: a valid pointer to an int.
            let rc = unsafe { cuThreadExchangeStreamCaptureMode(&mut m) };
            (rc, m)
        };
        assert_eq!(exchange(1), (CUDA_SUCCESS, 0));
        assert_eq!(exchange(0), (CUDA_SUCCESS, 1));
        assert_eq!(exchange(7), (CUDA_ERROR_INVALID_VALUE, 7));
    }

    #[test]
    fn the_legacy_stream_cannot_capture() {
        // SAFETY: no pointer is dereferenced.
        unsafe {
            assert_eq!(
                cuStreamBeginCapture_v2(null!(), 0),
                CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
            );
            assert_eq!(
                cuStreamBeginCapture_v2(LEGACY as usize as *mut c_void, 0),
                CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
            );
        }
    }

    #[test]
    fn graphs_without_a_capture_follow_their_handles() {
        let mut g = 0;
        // SAFETY: valid out-parameters.
        unsafe {
            assert_eq!(cuGraphCreate(&mut g, 1), CUDA_ERROR_INVALID_VALUE);
            assert_eq!(cuGraphCreate(&mut g, 0), CUDA_SUCCESS);
            let mut n = 9;
            assert_eq!(cuGraphGetNodes(g, null!(), &mut n), CUDA_SUCCESS);
            assert_eq!(n, 0);
            assert_eq!(cuGraphDestroy(g), CUDA_SUCCESS);
            assert_eq!(cuGraphDestroy(g), CUDA_ERROR_INVALID_VALUE);
            assert_eq!(cuGraphExecDestroy(12345), CUDA_ERROR_INVALID_VALUE);
        }
    }
}
