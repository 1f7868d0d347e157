//! What a simulated device says about itself: name, UUID, PCI location, attributes (an
//! H100-like compute capability 9.0 part), and telemetry derived from memory use.
//!
//! Telemetry is a deterministic function of the device's state, so a monitor reading it is
//! testable: with `f = used / total`,
//! utilisation.gpu = ⌊100·f⌋ % while any process holds a context (else 0),
//! utilisation.memory = half of that, temperature = 30 + ⌊50·f⌋ °C,
//! power = 70 W + ⌊630 W·f⌋, performance state P0 while a context exists (else P8).

use crate::size::format_size;

/// `CUDA_VERSION` / `cuDriverGetVersion` of the simulated driver, unless
/// `FRAGPROBE_SIM_DRIVER_VERSION` says otherwise (see [`driver_version`]).
/// CUDA 13.0 (R580): both PyTorch's CUDA 12 wheels and its CUDA 13 wheels (whose runtime
/// refuses a 12.x driver) run on it, as on a real R580 driver.
pub const DRIVER_VERSION: i32 = 13000;
/// The variable that sets the simulated driver's CUDA version: `13000` or `13.0`.
pub const ENV_DRIVER_VERSION: &str = "FRAGPROBE_SIM_DRIVER_VERSION";

/// Parses a CUDA version as the driver reports it (`12080`) or as people write it (`13.0`).
pub fn parse_driver_version(s: &str) -> Option<i32> {
    let s = s.trim();
    let v = match s.split_once('.') {
        Some((maj, min)) => maj.parse::<i32>().ok()? * 1000 + min.parse::<i32>().ok()? * 10,
        None => s.parse().ok()?,
    };
    (9000..100_000).contains(&v).then_some(v)
}

/// The CUDA version the simulated driver reports (`cuDriverGetVersion`, NVML's
/// `nvmlSystemGetCudaDriverVersion`): `FRAGPROBE_SIM_DRIVER_VERSION` when set and valid,
/// else [`DRIVER_VERSION`]. A CUDA 13 runtime (PyTorch's cu13x wheels) refuses a 12.x
/// driver with `cudaErrorInsufficientDriver`, as it would a real one.
pub fn driver_version() -> i32 {
    static V: std::sync::OnceLock<i32> = std::sync::OnceLock::new();
    *V.get_or_init(|| {
        std::env::var(ENV_DRIVER_VERSION)
            .ok()
            .and_then(|s| parse_driver_version(&s))
            .unwrap_or(DRIVER_VERSION)
    })
}

/// The display driver that ships `version`'s CUDA (`nvmlSystemGetDriverVersion`): R580
/// for 13.x, R570 before.
pub fn display_driver_version_for(version: i32) -> &'static str {
    if version >= 13000 {
        "580.95.05"
    } else {
        "570.124.06"
    }
}

/// `nvmlSystemGetNVMLVersion`: the CUDA major version, then the display driver's.
pub fn nvml_version_for(version: i32) -> String {
    format!("{}.{}", version / 1000, display_driver_version_for(version))
}
/// H100 SXM5 PCI device id and NVIDIA's vendor id.
pub const PCI_DEVICE_ID: u32 = 0x2330;
pub const PCI_VENDOR_ID: u32 = 0x10de;
pub const PCI_SUBSYSTEM_ID: u32 = 0x16c1_10de;
/// Power limit in milliwatts.
pub const POWER_LIMIT_MW: u32 = 700_000;

/// Device name, e.g. `fragprobe simulated GPU (80GiB)`.
pub fn name(size: u64) -> String {
    format!("fragprobe simulated GPU ({})", format_size(size))
}

/// 16 deterministic UUID bytes for device `ordinal` (version-4 layout bits set).
pub fn uuid(ordinal: usize) -> [u8; 16] {
    let mut out = [0u8; 16];
    let mut x = 0x6672_6167_7072_6f62u64 ^ (ordinal as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for chunk in out.chunks_mut(8) {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let z = (x ^ (x >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        chunk.copy_from_slice(&(z ^ (z >> 32)).to_be_bytes());
    }
    out[6] = (out[6] & 0x0f) | 0x40;
    out[8] = (out[8] & 0x3f) | 0x80;
    out
}

/// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, as NVML and nvidia-smi print it.
pub fn uuid_string(ordinal: usize) -> String {
    let b = uuid(ordinal);
    let hex =
        |r: std::ops::Range<usize>| b[r].iter().map(|x| format!("{x:02x}")).collect::<String>();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        hex(0..4),
        hex(4..6),
        hex(6..8),
        hex(8..10),
        hex(10..16)
    )
}

/// PCI bus number of device `ordinal`.
pub fn pci_bus(ordinal: usize) -> u32 {
    0x18 + 0x10 * ordinal as u32
}

/// `cuDeviceGetPCIBusId` form: `0000:18:00.0`.
pub fn pci_bus_id(ordinal: usize) -> String {
    format!("0000:{:02x}:00.0", pci_bus(ordinal))
}

/// NVML form: `00000000:18:00.0`.
pub fn nvml_bus_id(ordinal: usize) -> String {
    format!("00000000:{:02x}:00.0", pci_bus(ordinal))
}

/// Last valid `CUdevice_attribute` of CUDA 12.8 plus one.
pub const ATTRIBUTE_MAX: i32 = 144;

/// Value of a `CUdevice_attribute`; `None` for values outside the enum.
pub fn attribute(attr: i32, ordinal: usize) -> Option<i32> {
    if !(1..ATTRIBUTE_MAX).contains(&attr) {
        return None;
    }
    Some(match attr {
        1 => 1024,           // MAX_THREADS_PER_BLOCK
        2 | 3 => 1024,       // MAX_BLOCK_DIM_X/Y
        4 => 64,             // MAX_BLOCK_DIM_Z
        5 => 2_147_483_647,  // MAX_GRID_DIM_X
        6 | 7 => 65_535,     // MAX_GRID_DIM_Y/Z
        8 => 49_152,         // MAX_SHARED_MEMORY_PER_BLOCK
        9 => 65_536,         // TOTAL_CONSTANT_MEMORY
        10 => 32,            // WARP_SIZE
        11 => 2_147_483_647, // MAX_PITCH
        12 => 65_536,        // MAX_REGISTERS_PER_BLOCK
        13 => 1_980_000,     // CLOCK_RATE kHz
        14 => 512,           // TEXTURE_ALIGNMENT
        15 => 1,             // GPU_OVERLAP
        16 => 132,           // MULTIPROCESSOR_COUNT
        17 | 18 => 0,        // KERNEL_EXEC_TIMEOUT, INTEGRATED
        19 => 1,             // CAN_MAP_HOST_MEMORY
        20 => 0,             // COMPUTE_MODE default
        21 => 131_072,       // MAXIMUM_TEXTURE1D_WIDTH
        22 => 131_072,
        23 => 65_536,
        24..=26 => 16_384,
        30 => 512, // SURFACE_ALIGNMENT
        31 => 1,   // CONCURRENT_KERNELS
        32 => 1,   // ECC_ENABLED
        33 => pci_bus(ordinal) as i32,
        34 => 0,              // PCI_DEVICE_ID (device number on the bus)
        35 => 0,              // TCC_DRIVER
        36 => 2_619_000,      // MEMORY_CLOCK_RATE kHz
        37 => 5_120,          // GLOBAL_MEMORY_BUS_WIDTH
        38 => 52_428_800,     // L2_CACHE_SIZE
        39 => 2_048,          // MAX_THREADS_PER_MULTIPROCESSOR
        40 => 3,              // ASYNC_ENGINE_COUNT
        41 => 1,              // UNIFIED_ADDRESSING
        50 => 0,              // PCI_DOMAIN_ID
        51 => 32,             // TEXTURE_PITCH_ALIGNMENT
        75 => 9,              // COMPUTE_CAPABILITY_MAJOR
        76 => 0,              // COMPUTE_CAPABILITY_MINOR
        78..=80 => 1,         // STREAM_PRIORITIES, GLOBAL_L1, LOCAL_L1
        81 => 233_472,        // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
        82 => 65_536,         // MAX_REGISTERS_PER_MULTIPROCESSOR
        83 => 1,              // MANAGED_MEMORY
        84 => 0,              // MULTI_GPU_BOARD
        85 => ordinal as i32, // MULTI_GPU_BOARD_GROUP_ID
        86 => 0,              // HOST_NATIVE_ATOMIC_SUPPORTED
        87 => 2,              // SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO
        88 => 0,              // PAGEABLE_MEMORY_ACCESS
        89..=91 => 1, // CONCURRENT_MANAGED_ACCESS, PREEMPTION, HOST_POINTER_FOR_REGISTERED_MEM
        92 => 0,
        95 | 96 => 1,       // COOPERATIVE_LAUNCH (+ multi device)
        97 => 232_448,      // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
        98 | 99 => 1,       // CAN_FLUSH_REMOTE_WRITES, HOST_REGISTER_SUPPORTED
        102 | 103 => 1,     // VIRTUAL_MEMORY_MANAGEMENT, POSIX_FD handles
        106 => 32,          // MAX_BLOCKS_PER_MULTIPROCESSOR
        107 => 1,           // GENERIC_COMPRESSION_SUPPORTED
        108 => 34_603_008,  // MAX_PERSISTING_L2_CACHE_SIZE
        109 => 134_213_632, // MAX_ACCESS_POLICY_WINDOW_SIZE
        110 => 1,           // GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED
        111 => 1_024,       // RESERVED_SHARED_MEMORY_PER_BLOCK
        112..=116 => 1,     // sparse arrays … MEMORY_POOLS_SUPPORTED (115), RDMA
        117 => 1,
        118 => 100,
        119 => 1,       // MEMPOOL_SUPPORTED_HANDLE_TYPES: POSIX fd
        120 | 121 => 1, // CLUSTER_LAUNCH, DEFERRED_MAPPING
        122 | 123 => 1,
        124 => 1, // DMA_BUF_SUPPORTED
        125 => 1,
        126 => 4, // MEM_SYNC_DOMAIN_COUNT
        127 => 1, // TENSOR_MAP_ACCESS_SUPPORTED
        129 => 1,
        130 => 0,
        131 => -1,
        132 => 1,
        134 => -1,
        139 => PCI_DEVICE_ID as i32,
        140 => PCI_SUBSYSTEM_ID as i32,
        _ => 0,
    })
}

/// Deterministic telemetry of a device with `used` of `total` bytes in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Telemetry {
    pub gpu_util: u32,
    pub memory_util: u32,
    pub temperature_c: u32,
    pub power_mw: u32,
    pub pstate: u32,
    pub graphics_clock_mhz: u32,
    pub memory_clock_mhz: u32,
}

pub fn telemetry(used: u64, total: u64, active: bool) -> Telemetry {
    let f = if total == 0 {
        0.0
    } else {
        (used.min(total) as f64) / (total as f64)
    };
    let gpu_util = if active { (100.0 * f) as u32 } else { 0 };
    Telemetry {
        gpu_util,
        memory_util: gpu_util / 2,
        temperature_c: 30 + (50.0 * f) as u32,
        power_mw: 70_000 + (630_000.0 * f) as u32,
        pstate: if active { 0 } else { 8 },
        graphics_clock_mhz: if active { 1980 } else { 345 },
        memory_clock_mhz: 2619,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_is_stable_and_distinct() {
        assert_eq!(uuid(0), uuid(0));
        assert_ne!(uuid(0), uuid(1));
        let s = uuid_string(1);
        assert!(s.starts_with("GPU-") && s.len() == 40, "{s}");
        assert_eq!(pci_bus_id(0), "0000:18:00.0");
        assert_eq!(parse_driver_version("13.0"), Some(13000));
        assert_eq!(parse_driver_version("12080"), Some(12080));
        assert_eq!(parse_driver_version("13.5"), Some(13050));
        assert_eq!(parse_driver_version("garbage"), None);
        assert_eq!(display_driver_version_for(13000), "580.95.05");
        assert_eq!(display_driver_version_for(12080), "570.124.06");
        assert_eq!(nvml_version_for(13000), "13.580.95.05");
        assert_eq!(nvml_version_for(12080), "12.570.124.06");
        assert_eq!(nvml_bus_id(1), "00000000:28:00.0");
        assert_eq!(attribute(115, 0), Some(1));
        assert_eq!(attribute(75, 0), Some(9));
        assert_eq!(attribute(0, 0), None);
        assert_eq!(attribute(ATTRIBUTE_MAX, 0), None);
    }

    #[test]
    fn telemetry_follows_memory() {
        let idle = telemetry(0, 100, false);
        assert_eq!((idle.gpu_util, idle.pstate, idle.temperature_c), (0, 8, 30));
        let half = telemetry(50, 100, true);
        assert_eq!((half.gpu_util, half.memory_util, half.pstate), (50, 25, 0));
        assert_eq!(half.power_mw, 70_000 + 315_000);
    }
}
