//! The NVML functions monitoring tools call besides memory: what nvitop (`nvitop -1`),
//! gpustat and nvidia-ml-py scripts ask of a data-centre Hopper GPU. Each answers as a
//! real H100-class part on Linux does: a value consistent with the simulation (fan and
//! energy follow the simulated power and temperature, process utilisation follows the
//! processes holding memory), or `NVML_ERROR_NOT_SUPPORTED` where such a part has no such
//! thing (a Windows driver model, confidential-compute memory). Never a missing symbol: to
//! pynvml that is an exception, and to nvitop a traceback.

use std::ffi::{c_char, c_int, c_uint, CStr};

use crate::device::{handle, telemetry, with_device, Device};
use crate::{put, put_str, with_state};
use fragprobe_simgpu::codes::*;
use fragprobe_simgpu::ident;
use fragprobe_simgpu::size::MIB;

/// `NVML_DEVICE_ARCH_HOPPER`.
pub const ARCH_HOPPER: c_uint = 9;
/// MIG slices an H100-class part offers (1g.10gb × 7).
pub const MAX_MIG_DEVICES: c_uint = 7;
/// Encoder/decoder sampling period NVML reports, in µs.
const CODEC_PERIOD_US: c_uint = 167_000;

/// Fan speed in percent: a blower that follows the temperature (30 % idle, 100 % at 80 °C).
pub fn fan_percent(temperature_c: u32) -> c_uint {
    (30 + temperature_c.saturating_sub(30) * 70 / 50).min(100)
}

/// # Safety
/// `speed` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetFanSpeed(dev: Device, speed: *mut c_uint) -> u32 {
    // SAFETY: forwarded caller contract.
    with_device(dev, |st, i| unsafe {
        put(speed, fan_percent(telemetry(st, i).temperature_c))
    })
}

/// Fan 0 only.
///
/// # Safety
/// `speed` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetFanSpeed_v2(
    dev: Device,
    fan: c_uint,
    speed: *mut c_uint,
) -> u32 {
    if fan != 0 {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: forwarded caller contract.
    unsafe { nvmlDeviceGetFanSpeed(dev, speed) }
}

/// # Safety
/// `count` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNumFans(dev: Device, count: *mut c_uint) -> u32 {
    // SAFETY: forwarded caller contract.
    with_device(dev, |_, _| unsafe { put(count, 1) })
}

/// Nothing is encoded or decoded in the simulation: 0 % over NVML's sampling period.
///
/// # Safety
/// `util` and `period_us` must each be NULL or valid for a write.
unsafe fn codec(dev: Device, util: *mut c_uint, period_us: *mut c_uint) -> u32 {
    with_device(dev, |_, _| {
        if util.is_null() || period_us.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: both non-null and valid per the caller's contract.
        unsafe {
            util.write(0);
            period_us.write(CODEC_PERIOD_US);
        }
        NVML_SUCCESS
    })
}

/// # Safety
/// `util` and `period_us` must each be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetEncoderUtilization(
    dev: Device,
    util: *mut c_uint,
    period_us: *mut c_uint,
) -> u32 {
    // SAFETY: forwarded caller contract.
    unsafe { codec(dev, util, period_us) }
}

/// # Safety
/// `util` and `period_us` must each be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDecoderUtilization(
    dev: Device,
    util: *mut c_uint,
    period_us: *mut c_uint,
) -> u32 {
    // SAFETY: forwarded caller contract.
    unsafe { codec(dev, util, period_us) }
}

/// No display is attached to a data-centre part: `NVML_FEATURE_DISABLED`.
///
/// # Safety
/// `active` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDisplayActive(dev: Device, active: *mut c_uint) -> u32 {
    // SAFETY: forwarded caller contract.
    with_device(dev, |_, _| unsafe { put(active, 0) })
}

/// # Safety
/// `mode` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDisplayMode(dev: Device, mode: *mut c_uint) -> u32 {
    // SAFETY: forwarded caller contract.
    with_device(dev, |_, _| unsafe { put(mode, 0) })
}

/// The driver model is a Windows notion (WDDM/TCC): on Linux NVML says not supported.
///
/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDriverModel(
    dev: Device,
    _current: *mut c_uint,
    _pending: *mut c_uint,
) -> u32 {
    with_device(dev, |_, _| NVML_ERROR_NOT_SUPPORTED)
}

/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDriverModel_v2(
    dev: Device,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> u32 {
    // SAFETY: forwarded caller contract.
    unsafe { nvmlDeviceGetDriverModel(dev, current, pending) }
}

/// Persistence mode is on, as on every data-centre node (`NVML_FEATURE_ENABLED`).
///
/// # Safety
/// `mode` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPersistenceMode(dev: Device, mode: *mut c_uint) -> u32 {
    // SAFETY: forwarded caller contract.
    with_device(dev, |_, _| unsafe { put(mode, 1) })
}

/// `NVML_COMPUTEMODE_DEFAULT`: any number of processes may use the device.
///
/// # Safety
/// `mode` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeMode(dev: Device, mode: *mut c_uint) -> u32 {
    // SAFETY: forwarded caller contract.
    with_device(dev, |_, _| unsafe { put(mode, 0) })
}

/// `nvmlProcessUtilizationSample_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessUtilizationSample {
    pid: c_uint,
    time_stamp: u64,
    sm_util: c_uint,
    mem_util: c_uint,
    enc_util: c_uint,
    dec_util: c_uint,
}

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// One sample per process holding memory, its share of the device's utilisation by bytes.
/// With no process, `NVML_ERROR_NOT_FOUND` (no samples), as the real library answers.
///
/// # Safety
/// `count` must be NULL or valid; `samples` NULL or valid for `*count` entries.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    dev: Device,
    samples: *mut ProcessUtilizationSample,
    count: *mut c_uint,
    _last_seen_us: u64,
) -> u32 {
    with_device(dev, |st, i| {
        if count.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        st.cleanup_stale();
        let list: Vec<_> = st
            .processes(i)
            .into_iter()
            .filter(|p| p.contexts > 0)
            .collect();
        if list.is_empty() {
            // SAFETY: non-null, valid per the caller's contract.
            unsafe { count.write(0) };
            return NVML_ERROR_NOT_FOUND;
        }
        let n = list.len() as c_uint;
        // SAFETY: as above.
        let room = unsafe { *count };
        // SAFETY: as above.
        unsafe { count.write(n) };
        if samples.is_null() || room < n {
            return NVML_ERROR_INSUFFICIENT_SIZE;
        }
        let t = telemetry(st, i);
        let total: u64 = list.iter().map(|p| p.used).sum::<u64>().max(1);
        let stamp = now_us();
        for (k, p) in list.iter().enumerate() {
            let share = |u: u32| (u as u64 * p.used / total) as c_uint;
            let s = ProcessUtilizationSample {
                pid: p.pid,
                time_stamp: stamp,
                sm_util: share(t.gpu_util),
                mem_util: share(t.memory_util),
                enc_util: 0,
                dec_util: 0,
            };
            // SAFETY: `samples` holds `room` >= n entries per the caller's contract.
            unsafe { samples.add(k).write(s) };
        }
        NVML_SUCCESS
    })
}

/// # Safety
/// `major` and `minor` must each be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCudaComputeCapability(
    dev: Device,
    major: *mut c_int,
    minor: *mut c_int,
) -> u32 {
    with_device(dev, |_, _| {
        if major.is_null() || minor.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: both non-null and valid per the caller's contract.
        unsafe {
            major.write(ident::attribute(75, 0).unwrap_or(9));
            minor.write(ident::attribute(76, 0).unwrap_or(0));
        }
        NVML_SUCCESS
    })
}

/// `nvmlBAR1Memory_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Bar1Memory {
    total: u64,
    free: u64,
    used: u64,
}

/// BAR1 is the device's memory rounded up to a power of two (an 80 GiB H100 has 128 GiB),
/// of which the driver maps 2 MiB per context.
pub fn bar1(device_bytes: u64, contexts: u64) -> (u64, u64) {
    let total = device_bytes.max(1).next_power_of_two();
    (total, (contexts * 2 * MIB).min(total))
}

/// # Safety
/// `mem` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetBAR1MemoryInfo(dev: Device, mem: *mut Bar1Memory) -> u32 {
    with_device(dev, |st, i| {
        let contexts: u64 = st.processes(i).iter().map(|p| p.contexts as u64).sum();
        let (total, used) = bar1(st.device_size(i), contexts);
        // SAFETY: forwarded caller contract.
        unsafe {
            put(
                mem,
                Bar1Memory {
                    total,
                    free: total - used,
                    used,
                },
            )
        }
    })
}

/// Energy since the driver loaded, in mJ: the simulated power, integrated over the time
/// the machine has been up (so it only grows, and faster while memory is in use).
///
/// # Safety
/// `energy` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEnergyConsumption(dev: Device, energy: *mut u64) -> u32 {
    with_device(dev, |st, i| {
        let up_ms = boot_ms();
        let mw = telemetry(st, i).power_mw as u64;
        // mW × ms = µJ; NVML counts mJ.
        // SAFETY: forwarded caller contract.
        unsafe { put(energy, mw * up_ms / 1000) }
    })
}

fn boot_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) } != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// # Safety
/// `arch` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetArchitecture(dev: Device, arch: *mut c_uint) -> u32 {
    // SAFETY: forwarded caller contract.
    with_device(dev, |_, _| unsafe { put(arch, ARCH_HOPPER) })
}

/// `/dev/nvidia<minor>`: the device's index.
///
/// # Safety
/// `minor` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMinorNumber(dev: Device, minor: *mut c_uint) -> u32 {
    // SAFETY: forwarded caller contract.
    with_device(dev, |_, i| unsafe { put(minor, i as c_uint) })
}

/// The board serial: 13 digits, stable per ordinal.
pub fn serial(ordinal: usize) -> String {
    format!("{}", 1_654_321_000_000u64 + ordinal as u64 * 7_919)
}

/// # Safety
/// `out` must be NULL or valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetSerial(dev: Device, out: *mut c_char, len: c_uint) -> u32 {
    // SAFETY: forwarded caller contract.
    with_device(dev, |_, i| unsafe { put_str(out, len, &serial(i)) })
}

/// Whether `text` names the PCI address of `ordinal`: NVML accepts
/// `domain:bus:device.function` with a 4- or 8-digit domain, in either case, and
/// `bus:device.function` alone.
pub fn bus_id_matches(text: &str, ordinal: usize) -> bool {
    let t = text.trim().to_ascii_lowercase();
    let parse = |s: &str| -> Option<(u32, u32, u32, u32)> {
        let (rest, func) = s.rsplit_once('.')?;
        let mut parts: Vec<&str> = rest.split(':').collect();
        if parts.len() == 2 {
            parts.insert(0, "0");
        }
        let [dom, bus, dev] = parts[..] else {
            return None;
        };
        Some((
            u32::from_str_radix(dom, 16).ok()?,
            u32::from_str_radix(bus, 16).ok()?,
            u32::from_str_radix(dev, 16).ok()?,
            u32::from_str_radix(func, 16).ok()?,
        ))
    };
    parse(&t) == Some((0, ident::pci_bus(ordinal), 0, 0))
}

/// # Safety
/// `bus_id` must be NULL or a NUL-terminated string; `device` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId_v2(
    bus_id: *const c_char,
    device: *mut Device,
) -> u32 {
    if bus_id.is_null() {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: NUL-terminated per the caller's contract.
    let text = unsafe { CStr::from_ptr(bus_id) }
        .to_string_lossy()
        .into_owned();
    with_state(|st| {
        match (0..st.device_count()).find(|&i| bus_id_matches(&text, i)) {
            // SAFETY: forwarded caller contract.
            Some(i) => unsafe { put(device, handle(i)) },
            None => NVML_ERROR_NOT_FOUND,
        }
    })
}

/// # Safety
/// As [`nvmlDeviceGetHandleByPciBusId_v2`].
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId(
    bus_id: *const c_char,
    device: *mut Device,
) -> u32 {
    // SAFETY: same contract.
    unsafe { nvmlDeviceGetHandleByPciBusId_v2(bus_id, device) }
}

/// MIG is supported and disabled (`NVML_DEVICE_MIG_DISABLE`, current and pending), as on
/// an H100 nobody partitioned.
///
/// # Safety
/// `current` and `pending` must each be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    dev: Device,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> u32 {
    with_device(dev, |_, _| {
        if current.is_null() || pending.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: both non-null and valid per the caller's contract.
        unsafe {
            current.write(0);
            pending.write(0);
        }
        NVML_SUCCESS
    })
}

/// # Safety
/// `count` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(dev: Device, count: *mut c_uint) -> u32 {
    // SAFETY: forwarded caller contract.
    with_device(dev, |_, _| unsafe { put(count, MAX_MIG_DEVICES) })
}

/// Our handles are whole GPUs, never MIG instances.
///
/// # Safety
/// `is_mig` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(dev: Device, is_mig: *mut c_uint) -> u32 {
    // SAFETY: forwarded caller contract.
    with_device(dev, |_, _| unsafe { put(is_mig, 0) })
}

/// Confidential computing is off: not supported, as on a part without it enabled.
///
/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetConfComputeMemSizeInfo(
    dev: Device,
    _info: *mut std::ffi::c_void,
) -> u32 {
    with_device(dev, |_, _| NVML_ERROR_NOT_SUPPORTED)
}

/// The simulated GPUs have no NVLink (PCIe only): PyTorch's expandable segments ask, and
/// take "not supported" as no peer over NVLink.
///
/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkRemoteDeviceType(
    dev: Device,
    _link: c_uint,
    _kind: *mut c_uint,
) -> u32 {
    with_device(dev, |_, _| NVML_ERROR_NOT_SUPPORTED)
}

/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkRemotePciInfo_v2(
    dev: Device,
    _link: c_uint,
    _pci: *mut std::ffi::c_void,
) -> u32 {
    with_device(dev, |_, _| NVML_ERROR_NOT_SUPPORTED)
}

/// No NVSwitch fabric, as on a PCIe card: the query succeeds and says so
/// (`nvmlGpuFabricInfoV_t`: version, cluster UUID, status, clique, state
/// `NVML_GPU_FABRIC_STATE_NOT_SUPPORTED` = 0, health). PyTorch 2.15 warns "only supported
/// on sm90+" when the query itself fails.
///
/// # Safety
/// `info` must be NULL or valid for reads and writes of the size its version names.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuFabricInfoV(dev: Device, info: *mut u8) -> u32 {
    with_device(dev, |_, _| {
        if info.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: non-null; every version of the struct starts with its version word.
        let version = unsafe { info.cast::<c_uint>().read_unaligned() };
        let size = (version & 0x00FF_FFFF) as usize;
        if version >> 24 == 0 || !(36..=256).contains(&size) {
            return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        }
        // SAFETY: the caller's struct holds `size` bytes, per its version word.
        unsafe { std::ptr::write_bytes(info.add(4), 0, size - 4) };
        NVML_SUCCESS
    })
}

/// The unversioned form (cluster UUID, status, clique, state): no fabric.
///
/// # Safety
/// `info` must be NULL or valid for a write of 28 bytes.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuFabricInfo(dev: Device, info: *mut u8) -> u32 {
    with_device(dev, |_, _| {
        if info.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: non-null, 28 writable bytes (`nvmlGpuFabricInfo_t`) per the caller's contract.
        unsafe { std::ptr::write_bytes(info, 0, 28) };
        NVML_SUCCESS
    })
}

/// `nvmlTemperature_v1_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct TemperatureV1 {
    version: c_uint,
    sensor_type: c_uint,
    temperature: c_int,
}

/// `nvmlTemperature_v1` as NVML's `NVML_STRUCT_VERSION(Temperature, 1)` spells it.
pub const TEMPERATURE_V1: c_uint = (std::mem::size_of::<TemperatureV1>() as c_uint) | (1 << 24);

/// The versioned temperature query: sensor `NVML_TEMPERATURE_GPU` (0) only.
///
/// # Safety
/// `temp` must be NULL or valid for a read and a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTemperatureV(dev: Device, temp: *mut TemperatureV1) -> u32 {
    with_device(dev, |st, i| {
        if temp.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: non-null, valid per the caller's contract.
        let mut t = unsafe { temp.read() };
        if t.version != TEMPERATURE_V1 {
            return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        }
        if t.sensor_type != 0 {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        t.temperature = telemetry(st, i).temperature_c as c_int;
        // SAFETY: as above.
        unsafe { temp.write(t) };
        NVML_SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_bus_ids_match_in_every_spelling_nvml_takes() {
        let b = ident::pci_bus(1);
        for s in [
            format!("00000000:{b:02x}:00.0"),
            format!("0000:{b:02X}:00.0"),
            format!("{b:02x}:00.0"),
        ] {
            assert!(bus_id_matches(&s, 1), "{s}");
            assert!(!bus_id_matches(&s, 0), "{s}");
        }
        assert!(!bus_id_matches("garbage", 0));
    }

    #[test]
    fn derived_figures_stay_in_range() {
        assert_eq!(fan_percent(30), 30);
        assert_eq!(fan_percent(80), 100);
        assert_eq!(fan_percent(200), 100);
        assert_eq!(bar1(80 << 30, 0), (128 << 30, 0));
        assert_eq!(bar1(16 << 30, 3).1, 6 * MIB);
        assert_eq!(serial(0).len(), 13);
        assert_ne!(serial(0), serial(1));
        assert_eq!(TEMPERATURE_V1, 12 | (1 << 24));
    }
}
