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
    assert!(nvml.sys_driver_version().unwrap().starts_with("580."));
    assert_eq!(nvml.sys_cuda_driver_version().unwrap(), 13000);
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

    // What nvitop, gpustat and nvidia-ml-py scripts ask besides memory: all answered, as
    // an H100-class part on Linux answers (tools/README: pointing them at the simulation).
    use nvml_wrapper::enum_wrappers::device::ComputeMode;
    use nvml_wrapper::enums::device::DeviceArchitecture;
    let mig = dev.mig_mode().expect("MIG supported");
    assert_eq!((mig.current, mig.pending), (0, 0), "and disabled");
    assert_eq!(dev.mig_device_count().unwrap(), 7);
    assert!(!dev.mig_is_mig_device_handle().unwrap());
    let temp = dev.temperature(TemperatureSensor::Gpu).unwrap();
    assert_eq!(dev.num_fans().unwrap(), 1);
    assert_eq!(
        dev.fan_speed(0).unwrap(),
        (30 + (temp - 30) * 70 / 50).min(100)
    );
    for u in [
        dev.encoder_utilization().unwrap(),
        dev.decoder_utilization().unwrap(),
    ] {
        assert_eq!((u.utilization, u.sampling_period), (0, 167_000));
    }
    assert!(!dev.is_display_active().unwrap());
    assert!(dev.is_in_persistent_mode().unwrap());
    assert_eq!(dev.compute_mode().unwrap(), ComputeMode::Default);
    let cc = dev.cuda_compute_capability().unwrap();
    assert_eq!((cc.major, cc.minor), (9, 0));
    assert_eq!(dev.architecture().unwrap(), DeviceArchitecture::Hopper);
    assert_eq!(dev.minor_number().unwrap(), 0);
    let serial = dev.serial().unwrap();
    assert!(
        serial.len() == 13 && serial.bytes().all(|b| b.is_ascii_digit()),
        "{serial}"
    );
    let bar1 = dev.bar1_memory_info().unwrap();
    assert_eq!(bar1.total, total, "4 GiB rounds up to itself");
    assert_eq!(bar1.used, if active { 2 * MIB } else { 0 });
    assert_eq!(bar1.free, bar1.total - bar1.used);
    let e1 = dev.total_energy_consumption().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert!(
        dev.total_energy_consumption().unwrap() > e1,
        "energy only grows"
    );
    let samples = dev.process_utilization_stats(None);
    if active {
        let samples = samples.unwrap();
        assert_eq!(samples.len(), 1);
        assert_eq!(samples[0].pid, pid);
        assert_eq!(samples[0].sm_util, util.gpu);
    } else {
        assert!(
            samples.is_err(),
            "no process, no samples (NVML_ERROR_NOT_FOUND)"
        );
    }
    // PyTorch's expandable segments look the device up by its bus id (the _v2 lookup).
    for bus in ["00000000:18:00.0", "0000:18:00.0"] {
        assert_eq!(nvml.device_by_pci_bus_id(bus).unwrap().index().unwrap(), 0);
    }
    assert!(nvml.device_by_pci_bus_id("0000:99:00.0").is_err());
}
