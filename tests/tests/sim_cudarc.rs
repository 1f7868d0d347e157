//! cudarc (driver API, dynamic loading, CUDA 12.8 bindings) runs unchanged on the simulated
//! driver: it creates a context on device 0, allocates and frees device memory.

use fragprobe_tests::sim::{is_child, rerun_test};

const TEST: &str = "cudarc_allocates_and_frees_on_the_simulated_driver";

#[test]
fn cudarc_allocates_and_frees_on_the_simulated_driver() {
    if is_child(TEST) {
        child();
        return;
    }
    let out = rerun_test(TEST, Some("1x8GiB"), |_| {});
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    // the harness prints "test NAME ... " before the child's first line
    let line = stdout
        .lines()
        .find_map(|l| l.find("CUDARC-ALLOC ").map(|i| &l[i..]))
        .unwrap_or_else(|| panic!("no allocation line:\n{stdout}\n{stderr}"));
    println!("{line}");
    // the first allocation on a fresh device is the start of device 0's arena
    assert!(line.contains("ptr=0x700000000000"), "{line}");
    assert!(stdout.contains("CUDARC-OK"), "{stdout}");
}

fn child() {
    use cudarc::driver::{CudaContext, DevicePtr};
    let ctx = CudaContext::new(0).expect("CudaContext::new(0)");
    let (free0, total) = ctx.mem_get_info().expect("mem_get_info");
    assert_eq!(total, 8 << 30);
    let stream = ctx.default_stream();
    // SAFETY: the memory is never read before being written (it is not used at all).
    let buf = unsafe { stream.alloc::<u8>(1 << 20) }.expect("alloc");
    {
        let (ptr, _sync) = buf.device_ptr(&stream);
        println!("CUDARC-ALLOC ptr=0x{ptr:x} bytes={}", 1 << 20);
    }
    let (free1, _) = ctx.mem_get_info().expect("mem_get_info");
    assert!(free1 < free0, "allocation not visible: {free0} -> {free1}");
    drop(buf);
    stream.synchronize().expect("synchronize");
    let (free2, _) = ctx.mem_get_info().expect("mem_get_info");
    assert_eq!(free2, free0, "memory not returned");
    println!("CUDARC-OK free={free2} total={total}");
}
