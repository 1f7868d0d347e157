//! nvml-wrapper, pointed at the NVML stand-in, sees what a workload in another process holds
//! on the simulated device: per-process used memory = allocations + context overhead.

use fragprobe_tests::sim::{
    nvml_library, parse_lines, rerun_test, sim_command, spawn_held, state_of, ENV_STATE,
};

const CHECK: &str = "nvml_child_checks";
const MIB: u64 = 1 << 20;
const OVERHEAD: u64 = 300 * MIB;

/// Runs the NVML checks in a child sharing `state`, expecting `pid` to hold `used` bytes
/// (`pid` 0: no process at all).
fn check_from_child(state: &std::path::Path, pid: u32, used: u64) {
    let out = rerun_test(CHECK, Some("1x4GiB"), |c| {
        c.env(ENV_STATE, state)
            .env("FPT_PID", pid.to_string())
            .env("FPT_USED", used.to_string());
    });
    assert!(
        out.status.success(),
        "NVML checks failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn nvml_sees_another_process_allocations_and_their_release() {
    let cmd = sim_command("leak", Some("1x4GiB"));
    let state = state_of(&cmd).expect("state file");
    let (mut child, lines) = spawn_held(cmd);
    let calls = parse_lines(&lines);
    assert!(calls.iter().all(|c| c.res == 0), "{calls:?}");
    // cuMemAlloc_v2 64 MiB, cuMemAllocAsync 16 MiB (one 16 MiB pool chunk), cuMemCreate 2 MiB
    let allocated: u64 = calls
        .iter()
        .filter(|c| matches!(c.op.as_str(), "alloc" | "async_alloc" | "create"))
        .map(|c| c.size.div_ceil(2 * MIB) * 2 * MIB)
        .sum();
    assert_eq!(allocated, 82 * MIB);
    check_from_child(&state, child.id(), allocated + OVERHEAD);

    drop(child.stdin.take());
    let status = child.wait().expect("wait");
    assert!(status.success());
    check_from_child(&state, 0, 0);
}

#[test]
#[ignore = "runs as the child process of nvml_sees_another_process_allocations_and_their_release"]
fn nvml_child_checks() {
    assert!(
        fragprobe_tests::sim::is_child(CHECK),
        "run through the test that starts it"
    );
    use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
    use nvml_wrapper::enums::device::UsedGpuMemory;
    use nvml_wrapper::Nvml;

    let pid: u32 = std::env::var("FPT_PID").unwrap().parse().unwrap();
    let used: u64 = std::env::var("FPT_USED").unwrap().parse().unwrap();
    let lib = nvml_library();
    let nvml = Nvml::builder()
        .lib_path(lib.as_os_str())
        .init()
        .expect("Nvml init");
    assert_eq!(nvml.device_count().unwrap(), 1);
    assert!(nvml.sys_driver_version().unwrap().starts_with("570."));
    assert_eq!(nvml.sys_cuda_driver_version().unwrap(), 12080);
    let dev = nvml.device_by_index(0).expect("device 0");
    assert!(
        dev.name().unwrap().contains("4GiB"),
        "{}",
        dev.name().unwrap()
    );
    let uuid = dev.uuid().unwrap();
    assert!(uuid.starts_with("GPU-"), "{uuid}");
    assert_eq!(
        nvml.device_by_uuid(uuid.as_str()).unwrap().index().unwrap(),
        0
    );
    assert_eq!(dev.pci_info().unwrap().bus_id, "00000000:18:00.0");

    let total = 4u64 << 30;
    let reserved = 20 * MIB; // 0.5% of 4 GiB, rounded down to MiB
    let mem = dev.memory_info().expect("memory_info");
    assert_eq!((mem.total, mem.reserved, mem.used), (total, reserved, used));
    assert_eq!(mem.free, total - reserved - used);

    let procs = dev.running_compute_processes().expect("processes");
    if pid == 0 {
        assert!(procs.is_empty(), "{procs:?}");
    } else {
        assert_eq!(procs.len(), 1, "{procs:?}");
        assert_eq!(procs[0].pid, pid);
        assert_eq!(procs[0].used_gpu_memory, UsedGpuMemory::Used(used));
    }

    // telemetry follows memory use (see fragprobe_simgpu::ident)
    let f = used as f64 / total as f64;
    let util = dev.utilization_rates().unwrap();
    let active = pid != 0;
    assert_eq!(util.gpu, if active { (100.0 * f) as u32 } else { 0 });
    assert_eq!(
        dev.temperature(TemperatureSensor::Gpu).unwrap(),
        30 + (50.0 * f) as u32
    );
    assert_eq!(dev.power_usage().unwrap(), 70_000 + (630_000.0 * f) as u32);
    assert_eq!(dev.enforced_power_limit().unwrap(), 700_000);
    assert_eq!(dev.clock_info(Clock::Memory).unwrap(), 2619);
    assert!(dev
        .total_ecc_errors(
            nvml_wrapper::enum_wrappers::device::MemoryError::Corrected,
            nvml_wrapper::enum_wrappers::device::EccCounter::Aggregate
        )
        .is_err());
    assert!(dev.mig_mode().is_err());
}
