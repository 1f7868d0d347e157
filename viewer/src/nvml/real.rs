//! [`Driver`] and [`Gpu`] over the real NVML library, through `nvml-wrapper`.
//!
//! The library is loaded at run time (`dlopen`), so a machine without a driver still runs
//! every command that does not need NVML; [`open`] says why loading failed.

use std::ffi::OsStr;
use std::path::Path;

use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, PerformanceState, TemperatureSensor,
};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::ProcessInfo;
use nvml_wrapper::{Device, Nvml};

use super::query::{ClockKind, Driver, Gpu, RawProcess};
use super::sample::{Field, Memory, Na};

/// Library names tried when no path is given. The versioned name first: many hosts ship
/// only `libnvidia-ml.so.1` (the unversioned link comes with development packages).
pub const DEFAULT_LIBS: &[&str] = &["libnvidia-ml.so.1", "libnvidia-ml.so"];

/// `NVML_DEVICE_MIG_ENABLE`.
const MIG_ENABLED: u32 = 1;

/// The loaded library.
pub struct RealDriver {
    nvml: Nvml,
    lib: String,
}

impl RealDriver {
    /// The library path or name that was loaded.
    pub fn lib(&self) -> &str {
        &self.lib
    }
}

/// Loads NVML from `lib`, or from [`DEFAULT_LIBS`] when `None`, and initialises it.
/// The error is one line saying what failed, suitable after "NVML unavailable: ".
pub fn open(lib: Option<&Path>) -> Result<RealDriver, String> {
    let candidates: Vec<&OsStr> = match lib {
        Some(p) => vec![p.as_os_str()],
        None => DEFAULT_LIBS.iter().map(OsStr::new).collect(),
    };
    let mut last = String::new();
    for name in candidates {
        match Nvml::builder().lib_path(name).init() {
            Ok(nvml) => {
                return Ok(RealDriver {
                    nvml,
                    lib: name.to_string_lossy().into_owned(),
                })
            }
            Err(e) => last = describe_init_error(&name.to_string_lossy(), &e),
        }
    }
    Err(last)
}

fn describe_init_error(name: &str, e: &NvmlError) -> String {
    match e {
        NvmlError::LibloadingError(inner) => {
            format!("cannot load {name} ({inner}); is the NVIDIA driver installed? (--nvml-lib PATH or FRAGPROBE_NVML_LIB selects another library)")
        }
        NvmlError::DriverNotLoaded => {
            format!("{name} loaded but the NVIDIA kernel driver is not running")
        }
        NvmlError::NoPermission => format!("{name}: no permission to talk to the driver"),
        NvmlError::FailedToLoadSymbol(s) => {
            format!("{name} is not an NVML library (missing {s})")
        }
        other => format!("{name}: initialisation failed: {other}"),
    }
}

/// Maps a driver error to the reason shown for a missing field.
pub fn na(e: NvmlError) -> Na {
    match e {
        NvmlError::NotSupported
        | NvmlError::FunctionNotFound
        | NvmlError::FailedToLoadSymbol(_) => Na::NotSupported,
        NvmlError::NoPermission => Na::NoPermission,
        NvmlError::GpuLost => Na::GpuLost,
        other => Na::Error(other.to_string()),
    }
}

impl Driver for RealDriver {
    fn driver_version(&self) -> Field<String> {
        self.nvml.sys_driver_version().map_err(na)
    }
    fn device_count(&self) -> Field<u32> {
        self.nvml.device_count().map_err(na)
    }
    fn device(&self, index: u32) -> Field<Box<dyn Gpu + '_>> {
        let d = self.nvml.device_by_index(index).map_err(na)?;
        Ok(Box::new(RealGpu(d)))
    }
}

struct RealGpu<'n>(Device<'n>);

fn raw(p: ProcessInfo) -> RawProcess {
    RawProcess {
        pid: p.pid,
        used: match p.used_gpu_memory {
            UsedGpuMemory::Used(b) => Some(b),
            UsedGpuMemory::Unavailable => None,
        },
        gpu_instance: p.gpu_instance_id,
        compute_instance: p.compute_instance_id,
    }
}

fn pstate_number(p: PerformanceState) -> u32 {
    use PerformanceState::*;
    match p {
        Zero => 0,
        One => 1,
        Two => 2,
        Three => 3,
        Four => 4,
        Five => 5,
        Six => 6,
        Seven => 7,
        Eight => 8,
        Nine => 9,
        Ten => 10,
        Eleven => 11,
        Twelve => 12,
        Thirteen => 13,
        Fourteen => 14,
        Fifteen => 15,
        Unknown => 32,
    }
}

impl Gpu for RealGpu<'_> {
    fn name(&self) -> Field<String> {
        self.0.name().map_err(na)
    }
    fn uuid(&self) -> Field<String> {
        self.0.uuid().map_err(na)
    }
    fn memory(&self) -> Field<Memory> {
        let m = self.0.memory_info().map_err(na)?;
        Ok(Memory {
            total: m.total,
            free: m.free,
            reserved: m.reserved,
            used_reported: m.used,
        })
    }
    fn utilization(&self) -> Field<(u32, u32)> {
        let u = self.0.utilization_rates().map_err(na)?;
        Ok((u.gpu, u.memory))
    }
    fn temperature(&self) -> Field<u32> {
        self.0.temperature(TemperatureSensor::Gpu).map_err(na)
    }
    fn power_usage(&self) -> Field<u32> {
        self.0.power_usage().map_err(na)
    }
    fn power_limit(&self) -> Field<u32> {
        self.0.enforced_power_limit().map_err(na)
    }
    fn pstate(&self) -> Field<u32> {
        self.0.performance_state().map(pstate_number).map_err(na)
    }
    fn clock(&self, which: ClockKind) -> Field<u32> {
        let c = match which {
            ClockKind::Sm => Clock::SM,
            ClockKind::Memory => Clock::Memory,
        };
        self.0.clock_info(c).map_err(na)
    }
    fn ecc(&self, uncorrected: bool) -> Field<u64> {
        let t = if uncorrected {
            MemoryError::Uncorrected
        } else {
            MemoryError::Corrected
        };
        self.0.total_ecc_errors(t, EccCounter::Volatile).map_err(na)
    }
    fn compute_processes(&self) -> Field<Vec<RawProcess>> {
        Ok(self
            .0
            .running_compute_processes()
            .map_err(na)?
            .into_iter()
            .map(raw)
            .collect())
    }
    fn graphics_processes(&self) -> Field<Vec<RawProcess>> {
        Ok(self
            .0
            .running_graphics_processes()
            .map_err(na)?
            .into_iter()
            .map(raw)
            .collect())
    }
    fn mig_devices(&self) -> Field<Vec<Box<dyn Gpu + '_>>> {
        let mode = match self.0.mig_mode() {
            Ok(m) => m,
            Err(NvmlError::NotSupported | NvmlError::FailedToLoadSymbol(_)) => {
                return Ok(Vec::new())
            }
            Err(e) => return Err(na(e)),
        };
        if mode.current != MIG_ENABLED {
            return Ok(Vec::new());
        }
        let max = self.0.mig_device_count().map_err(na)?;
        let mut out: Vec<Box<dyn Gpu + '_>> = Vec::new();
        for i in 0..max {
            match self.0.mig_device_by_index(i) {
                Ok(d) => out.push(Box::new(RealGpu(d))),
                // Empty slots answer NOT_FOUND.
                Err(NvmlError::NotFound | NvmlError::InvalidArg) => {}
                Err(e) => return Err(na(e)),
            }
        }
        Ok(out)
    }
}
