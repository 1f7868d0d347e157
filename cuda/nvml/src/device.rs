//! Device handles and per-device queries.

use crate::{put, put_str, with_state};
use fragprobe_simgpu::codes::*;
use fragprobe_simgpu::ident;
use fragprobe_simgpu::size::MIB;
use fragprobe_simgpu::state::SharedState;
use std::ffi::{c_char, c_uint, c_void, CStr};

/// `nvmlDevice_t`: an opaque pointer; here the device index in a tagged value.
pub(crate) type Device = *mut c_void;

const HANDLE_TAG: usize = 0xD0 << 40;

pub(crate) fn handle(index: usize) -> Device {
    (HANDLE_TAG | (index + 1)) as Device
}

/// Index of a handle, if it names a device that exists.
fn index(st: &SharedState, dev: Device) -> Result<usize, u32> {
    let v = dev as usize;
    if v & !0xffff != HANDLE_TAG || v & 0xffff == 0 {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    let i = (v & 0xffff) - 1;
    if i < st.device_count() {
        Ok(i)
    } else {
        Err(NVML_ERROR_INVALID_ARGUMENT)
    }
}

/// Runs `f` with the device index of `dev`.
pub(crate) fn with_device(dev: Device, f: impl FnOnce(&SharedState, usize) -> u32) -> u32 {
    with_state(|st| match index(st, dev) {
        Ok(i) => f(st, i),
        Err(e) => e,
    })
}

/// Fixed driver reservation: 0.5% of the device, rounded down to MiB.
fn reserved(total: u64) -> u64 {
    total / 200 / MIB * MIB
}

/// (total, reserved, used, free) of device `i`, after returning dead processes' memory.
fn memory(st: &SharedState, i: usize) -> (u64, u64, u64, u64) {
    st.cleanup_stale();
    let total = st.device_size(i);
    let r = reserved(total);
    let used = st.device_used(i);
    (total, r, used, total.saturating_sub(r).saturating_sub(used))
}

pub(crate) fn telemetry(st: &SharedState, i: usize) -> ident::Telemetry {
    let (total, _, used, _) = memory(st, i);
    let active = st.processes(i).iter().any(|p| p.contexts > 0);
    ident::telemetry(used, total, active)
}

/// # Safety
/// `count` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> u32 {
    // SAFETY: forwarded caller contract.
    with_state(|st| unsafe { put(count, st.device_count() as c_uint) })
}

/// # Safety
/// `count` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount(count: *mut c_uint) -> u32 {
    // SAFETY: same contract.
    unsafe { nvmlDeviceGetCount_v2(count) }
}

/// # Safety
/// `device` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(i: c_uint, device: *mut Device) -> u32 {
    with_state(|st| {
        if i as usize >= st.device_count() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: forwarded caller contract.
        unsafe { put(device, handle(i as usize)) }
    })
}

/// # Safety
/// `device` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex(i: c_uint, device: *mut Device) -> u32 {
    // SAFETY: same contract.
    unsafe { nvmlDeviceGetHandleByIndex_v2(i, device) }
}

/// # Safety
/// `uuid` must be NULL or a C string; `device` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(
    uuid: *const c_char,
    device: *mut Device,
) -> u32 {
    with_state(|st| {
        if uuid.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: non-null C string per the caller's contract.
        let want = unsafe { CStr::from_ptr(uuid) }
            .to_string_lossy()
            .to_ascii_lowercase();
        match (0..st.device_count()).find(|&i| ident::uuid_string(i).to_ascii_lowercase() == want) {
            // SAFETY: forwarded caller contract.
            Some(i) => unsafe { put(device, handle(i)) },
            None => NVML_ERROR_NOT_FOUND,
        }
    })
}

/// # Safety
/// `name` must be valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(dev: Device, name: *mut c_char, len: c_uint) -> u32 {
    // SAFETY: forwarded caller contract.
    with_device(dev, |st, i| unsafe {
        put_str(name, len, &ident::name(st.device_size(i)))
    })
}

/// # Safety
/// `uuid` must be valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(dev: Device, uuid: *mut c_char, len: c_uint) -> u32 {
    // SAFETY: forwarded caller contract.
    with_device(dev, |_, i| unsafe {
        put_str(uuid, len, &ident::uuid_string(i))
    })
}

/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetIndex(dev: Device, out: *mut c_uint) -> u32 {
    // SAFETY: forwarded caller contract.
    with_device(dev, |_, i| unsafe { put(out, i as c_uint) })
}

/// `nvmlPciInfo_t`.
#[repr(C)]
pub struct PciInfo {
    bus_id_legacy: [c_char; 16],
    domain: c_uint,
    bus: c_uint,
    device: c_uint,
    pci_device_id: c_uint,
    pci_sub_system_id: c_uint,
    bus_id: [c_char; 32],
}

fn c_array<const N: usize>(s: &str) -> [c_char; N] {
    let mut out = [0 as c_char; N];
    for (o, b) in out.iter_mut().zip(s.bytes().take(N - 1)) {
        *o = b as c_char;
    }
    out
}

/// # Safety
/// `pci` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(dev: Device, pci: *mut PciInfo) -> u32 {
    with_device(dev, |_, i| {
        let info = PciInfo {
            bus_id_legacy: c_array(&ident::pci_bus_id(i)),
            domain: 0,
            bus: ident::pci_bus(i),
            device: 0,
            pci_device_id: (ident::PCI_DEVICE_ID << 16) | ident::PCI_VENDOR_ID,
            pci_sub_system_id: ident::PCI_SUBSYSTEM_ID,
            bus_id: c_array(&ident::nvml_bus_id(i)),
        };
        // SAFETY: forwarded caller contract.
        unsafe { put(pci, info) }
    })
}

/// # Safety
/// `pci` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v2(dev: Device, pci: *mut PciInfo) -> u32 {
    // SAFETY: same layout and contract.
    unsafe { nvmlDeviceGetPciInfo_v3(dev, pci) }
}

/// `nvmlMemory_t`.
#[repr(C)]
pub struct Memory {
    total: u64,
    free: u64,
    used: u64,
}

/// `nvmlMemory_v2_t`.
#[repr(C)]
pub struct MemoryV2 {
    version: c_uint,
    total: u64,
    reserved: u64,
    free: u64,
    used: u64,
}

/// `nvmlMemory_v2`: NVML_STRUCT_VERSION(Memory, 2).
const MEMORY_V2: c_uint = (std::mem::size_of::<MemoryV2>() as c_uint) | (2 << 24);

/// # Safety
/// `mem` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(dev: Device, mem: *mut Memory) -> u32 {
    with_device(dev, |st, i| {
        let (total, r, used, free) = memory(st, i);
        // SAFETY: forwarded caller contract.
        unsafe {
            put(
                mem,
                Memory {
                    total,
                    free,
                    used: (used + r).min(total),
                },
            )
        }
    })
}

/// # Safety
/// `mem` must be NULL or point to an `nvmlMemory_v2_t` whose `version` is set.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(dev: Device, mem: *mut MemoryV2) -> u32 {
    with_device(dev, |st, i| {
        if mem.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: non-null, valid per the caller's contract.
        if unsafe { (*mem).version } != MEMORY_V2 {
            return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        }
        let (total, reserved, used, free) = memory(st, i);
        // SAFETY: as above.
        unsafe {
            put(
                mem,
                MemoryV2 {
                    version: MEMORY_V2,
                    total,
                    reserved,
                    free,
                    used,
                },
            )
        }
    })
}

/// `nvmlProcessInfo_t` of the `_v2`/`_v3` calls.
#[repr(C)]
pub struct ProcessInfo {
    pid: c_uint,
    used_gpu_memory: u64,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

/// `nvmlProcessInfo_v1_t`.
#[repr(C)]
pub struct ProcessInfoV1 {
    pid: c_uint,
    used_gpu_memory: u64,
}

/// The count-then-fill protocol: with too small a buffer (or NULL), `*count` is set to the
/// number of processes and the result is `NVML_ERROR_INSUFFICIENT_SIZE` (success when there
/// are none).
///
/// # Safety
/// `count` must be NULL or valid; `infos` NULL or valid for `*count` entries.
unsafe fn processes<T>(
    dev: Device,
    count: *mut c_uint,
    infos: *mut T,
    make: impl Fn(u32, u64) -> T,
) -> u32 {
    with_device(dev, |st, i| {
        if count.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        st.cleanup_stale();
        let list = st.processes(i);
        let n = list.len() as c_uint;
        // SAFETY: non-null, valid per the caller's contract.
        let room = unsafe { *count };
        // SAFETY: as above.
        unsafe { count.write(n) };
        if infos.is_null() || room < n {
            return if n == 0 {
                NVML_SUCCESS
            } else {
                NVML_ERROR_INSUFFICIENT_SIZE
            };
        }
        for (k, p) in list.iter().enumerate() {
            // SAFETY: `infos` holds `room` >= n entries per the caller's contract.
            unsafe { infos.add(k).write(make(p.pid, p.used)) };
        }
        NVML_SUCCESS
    })
}

fn info(pid: u32, used: u64) -> ProcessInfo {
    ProcessInfo {
        pid,
        used_gpu_memory: used,
        gpu_instance_id: u32::MAX,
        compute_instance_id: u32::MAX,
    }
}

/// # Safety
/// `count` must be NULL or valid; `infos` NULL or valid for `*count` entries.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    dev: Device,
    count: *mut c_uint,
    infos: *mut ProcessInfo,
) -> u32 {
    // SAFETY: same contract.
    unsafe { processes(dev, count, infos, info) }
}

/// # Safety
/// `count` must be NULL or valid; `infos` NULL or valid for `*count` entries.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v2(
    dev: Device,
    count: *mut c_uint,
    infos: *mut ProcessInfo,
) -> u32 {
    // SAFETY: same contract.
    unsafe { processes(dev, count, infos, info) }
}

/// # Safety
/// `count` must be NULL or valid; `infos` NULL or valid for `*count` entries.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses(
    dev: Device,
    count: *mut c_uint,
    infos: *mut ProcessInfoV1,
) -> u32 {
    // SAFETY: same contract.
    unsafe {
        processes(dev, count, infos, |pid, used| ProcessInfoV1 {
            pid,
            used_gpu_memory: used,
        })
    }
}

/// No graphics or MPS clients exist in the simulation.
///
/// # Safety
/// `count` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses_v3(
    dev: Device,
    count: *mut c_uint,
    _infos: *mut ProcessInfo,
) -> u32 {
    // SAFETY: forwarded caller contract.
    with_device(dev, |_, _| unsafe { put(count, 0) })
}

/// # Safety
/// `count` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMPSComputeRunningProcesses_v3(
    dev: Device,
    count: *mut c_uint,
    _infos: *mut ProcessInfo,
) -> u32 {
    // SAFETY: forwarded caller contract.
    with_device(dev, |_, _| unsafe { put(count, 0) })
}

/// `nvmlUtilization_t`.
#[repr(C)]
pub struct Utilization {
    gpu: c_uint,
    memory: c_uint,
}

/// # Safety
/// `util` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(dev: Device, util: *mut Utilization) -> u32 {
    with_device(dev, |st, i| {
        let t = telemetry(st, i);
        // SAFETY: forwarded caller contract.
        unsafe {
            put(
                util,
                Utilization {
                    gpu: t.gpu_util,
                    memory: t.memory_util,
                },
            )
        }
    })
}

/// Only `NVML_TEMPERATURE_GPU` (0).
///
/// # Safety
/// `temp` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(
    dev: Device,
    sensor: c_uint,
    temp: *mut c_uint,
) -> u32 {
    with_device(dev, |st, i| {
        if sensor != 0 {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        // SAFETY: forwarded caller contract.
        unsafe { put(temp, telemetry(st, i).temperature_c) }
    })
}

/// # Safety
/// `mw` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(dev: Device, mw: *mut c_uint) -> u32 {
    // SAFETY: forwarded caller contract.
    with_device(dev, |st, i| unsafe { put(mw, telemetry(st, i).power_mw) })
}

/// # Safety
/// `mw` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetEnforcedPowerLimit(dev: Device, mw: *mut c_uint) -> u32 {
    // SAFETY: forwarded caller contract.
    with_device(dev, |_, _| unsafe { put(mw, ident::POWER_LIMIT_MW) })
}

/// # Safety
/// `mw` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerManagementLimit(dev: Device, mw: *mut c_uint) -> u32 {
    // SAFETY: forwarded caller contract.
    with_device(dev, |_, _| unsafe { put(mw, ident::POWER_LIMIT_MW) })
}

/// # Safety
/// `pstate` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPerformanceState(dev: Device, pstate: *mut c_uint) -> u32 {
    // SAFETY: forwarded caller contract.
    with_device(dev, |st, i| unsafe { put(pstate, telemetry(st, i).pstate) })
}

fn clock(t: &ident::Telemetry, kind: c_uint) -> Option<c_uint> {
    match kind {
        0 | 1 => Some(t.graphics_clock_mhz),
        2 => Some(t.memory_clock_mhz),
        3 => Some(1755),
        _ => None,
    }
}

/// Graphics (0), SM (1), memory (2) and video (3) clocks in MHz.
///
/// # Safety
/// `mhz` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetClockInfo(
    dev: Device,
    kind: c_uint,
    mhz: *mut c_uint,
) -> u32 {
    with_device(dev, |st, i| match clock(&telemetry(st, i), kind) {
        // SAFETY: forwarded caller contract.
        Some(v) => unsafe { put(mhz, v) },
        None => NVML_ERROR_INVALID_ARGUMENT,
    })
}

/// # Safety
/// `mhz` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxClockInfo(
    dev: Device,
    kind: c_uint,
    mhz: *mut c_uint,
) -> u32 {
    with_device(dev, |_, _| {
        match clock(&ident::telemetry(1, 1, true), kind) {
            // SAFETY: forwarded caller contract.
            Some(v) => unsafe { put(mhz, v) },
            None => NVML_ERROR_INVALID_ARGUMENT,
        }
    })
}

/// ECC counters are not simulated.
///
/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    dev: Device,
    _kind: c_uint,
    _counter: c_uint,
    _count: *mut u64,
) -> u32 {
    with_device(dev, |_, _| NVML_ERROR_NOT_SUPPORTED)
}
