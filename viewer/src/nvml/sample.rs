//! What one NVML sample holds: devices, their processes, and why a field is missing.
//!
//! Every per-field query can fail on its own (a laptop GPU has no power reading, a
//! container may not see other users' processes); such a field holds an [`Na`] and is
//! shown as "n/a". Nothing in a sample is ever fatal.

use std::fmt;
use std::path::PathBuf;

/// Why a field has no value. Shown as "n/a"; the reason goes to JSON and `--verbose` views.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Na {
    /// The device or driver does not support the query (`NVML_ERROR_NOT_SUPPORTED`, or a
    /// function missing from this driver's library).
    NotSupported,
    /// The caller may not ask (`NVML_ERROR_NO_PERMISSION`).
    NoPermission,
    /// The driver answered `NVML_VALUE_NOT_AVAILABLE`.
    NotAvailable,
    /// The GPU fell off the bus.
    GpuLost,
    /// Anything else, with the driver's message.
    Error(String),
}

impl fmt::Display for Na {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Na::NotSupported => f.write_str("not supported"),
            Na::NoPermission => f.write_str("no permission"),
            Na::NotAvailable => f.write_str("not available"),
            Na::GpuLost => f.write_str("GPU lost"),
            Na::Error(m) => f.write_str(m),
        }
    }
}

/// One queried value, or why there is none.
pub type Field<T> = Result<T, Na>;

/// A device's frame-buffer memory as NVML's `nvmlMemory_v2_t` reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    /// Installed memory, bytes.
    pub total: u64,
    /// Unallocated memory, bytes.
    pub free: u64,
    /// Memory the driver and firmware set aside, bytes.
    pub reserved: u64,
    /// The driver's own "used" figure (its meaning changed with driver 510; not trusted).
    pub used_reported: u64,
}

impl Memory {
    /// Used bytes, computed as `total − free − reserved` (saturating) rather than trusting
    /// the driver's "used", whose meaning differs between driver versions.
    pub fn used(&self) -> u64 {
        self.total
            .saturating_sub(self.free)
            .saturating_sub(self.reserved)
    }
    /// Used as a fraction of the total, 0 when the total is 0.
    pub fn used_fraction(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.used() as f64 / self.total as f64
        }
    }
}

/// Whether a process uses the GPU for compute, graphics or both (nvidia-smi's "Type").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessKind {
    /// A compute context (CUDA).
    Compute,
    /// A graphics context.
    Graphics,
    /// Both.
    Both,
}

impl ProcessKind {
    /// nvidia-smi's letter code.
    pub fn code(self) -> &'static str {
        match self {
            ProcessKind::Compute => "C",
            ProcessKind::Graphics => "G",
            ProcessKind::Both => "C+G",
        }
    }
}

/// What `/proc` says about a process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcInfo {
    /// Owner's user name (or the numeric uid when it has no name).
    pub user: String,
    /// Owner's uid.
    pub uid: u32,
    /// Parent pid.
    pub ppid: u32,
    /// Command line, arguments joined by spaces.
    pub cmdline: String,
    /// The parent is gone: the process was re-parented to init (or a subreaper) or its
    /// parent no longer exists — typically a leftover from a killed job.
    pub orphaned: bool,
    /// Seconds since the process started, when `/proc` says.
    pub age_secs: Option<u64>,
}

/// What the probe's shared-memory ring says about a probed process.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProbeInfo {
    /// The ring file.
    pub ring: PathBuf,
    /// Live bytes according to the probe's live table, when readable.
    pub live_bytes: Option<u64>,
    /// Live allocations according to the probe's live table, when readable.
    pub live_count: Option<u64>,
    /// Fragmentation ratio (1 − largest free block / total free) of the probed address
    /// space, when it could be computed.
    pub frag: Option<f64>,
    /// Largest free block inside the probed address space, bytes.
    pub largest_free: Option<u64>,
}

/// One process on one device.
#[derive(Clone, Debug, PartialEq)]
pub struct ProcessSample {
    /// Host pid.
    pub pid: u32,
    /// Compute, graphics, or both.
    pub kind: ProcessKind,
    /// Device memory the process holds, context included; `None` when the driver says
    /// `NVML_VALUE_NOT_AVAILABLE` (WSL2, some containers). Never subtract from `None`.
    pub used: Option<u64>,
    /// MIG GPU instance, when MIG is on.
    pub gpu_instance: Option<u32>,
    /// MIG compute instance, when MIG is on.
    pub compute_instance: Option<u32>,
    /// `/proc` details; `None` when the pid is not visible here (another pid namespace).
    pub info: Option<ProcInfo>,
    /// Probe details; `None` when the process is not probed.
    pub probe: Option<ProbeInfo>,
}

/// One device (or one MIG instance) at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceSample {
    /// NVML index (MIG: the instance index on its parent).
    pub index: u32,
    /// "GPU-…" or "MIG-…".
    pub uuid: Field<String>,
    /// Product name.
    pub name: Field<String>,
    /// Frame-buffer memory.
    pub memory: Field<Memory>,
    /// GPU utilisation, percent.
    pub util_gpu: Field<u32>,
    /// Memory-controller utilisation, percent.
    pub util_mem: Field<u32>,
    /// Core temperature, °C.
    pub temperature: Field<u32>,
    /// Power draw, mW.
    pub power_mw: Field<u32>,
    /// Enforced power limit, mW.
    pub power_limit_mw: Field<u32>,
    /// Performance state, 0 (max) … 15 (min); 32 = unknown.
    pub pstate: Field<u32>,
    /// SM clock, MHz.
    pub clock_sm: Field<u32>,
    /// Memory clock, MHz.
    pub clock_mem: Field<u32>,
    /// Volatile corrected ECC errors.
    pub ecc_corrected: Field<u64>,
    /// Volatile uncorrected ECC errors.
    pub ecc_uncorrected: Field<u64>,
    /// Processes with a context on this device.
    pub processes: Field<Vec<ProcessSample>>,
    /// MIG instances, empty when MIG is off or unsupported.
    pub mig: Vec<DeviceSample>,
}

impl DeviceSample {
    /// A sample with every field missing for `why` (used when a device handle fails).
    pub fn missing(index: u32, why: Na) -> DeviceSample {
        DeviceSample {
            index,
            uuid: Err(why.clone()),
            name: Err(why.clone()),
            memory: Err(why.clone()),
            util_gpu: Err(why.clone()),
            util_mem: Err(why.clone()),
            temperature: Err(why.clone()),
            power_mw: Err(why.clone()),
            power_limit_mw: Err(why.clone()),
            pstate: Err(why.clone()),
            clock_sm: Err(why.clone()),
            clock_mem: Err(why.clone()),
            ecc_corrected: Err(why.clone()),
            ecc_uncorrected: Err(why.clone()),
            processes: Err(why),
            mig: Vec::new(),
        }
    }
    /// The processes, or an empty slice when they could not be listed.
    pub fn process_list(&self) -> &[ProcessSample] {
        self.processes.as_deref().unwrap_or(&[])
    }
}

/// Every selected device at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// Wall-clock time of the sample, ns since the Unix epoch.
    pub unix_ns: u64,
    /// Driver version string.
    pub driver: Field<String>,
    /// The devices, in index order.
    pub devices: Vec<DeviceSample>,
}

impl Snapshot {
    /// The NVML device a CUDA device is: by uuid when the probe recorded one (NVML numbers
    /// GPUs over the whole machine in PCI order, CUDA ordinals follow
    /// `CUDA_VISIBLE_DEVICES`), else by index — right only when nothing is remapped.
    pub fn device_for(&self, uuid: Option<&str>, ordinal: i16) -> Option<&DeviceSample> {
        if let Some(found) = uuid.and_then(|u| self.by_uuid(u)) {
            return Some(found);
        }
        self.devices
            .iter()
            .find(|d| i16::try_from(d.index).is_ok_and(|i| i == ordinal))
    }

    /// The device or MIG instance with this uuid. CUDA names a device `GPU-<hex>` (and the
    /// probe so records it) where NVML may say `MIG-<hex>` for the same MIG instance: the
    /// hex part decides.
    pub fn by_uuid(&self, uuid: &str) -> Option<&DeviceSample> {
        let hex = |u: &str| -> String {
            let u = u.trim();
            let u = u
                .strip_prefix("GPU-")
                .or_else(|| u.strip_prefix("MIG-"))
                .unwrap_or(u);
            u.to_ascii_lowercase()
        };
        let want = hex(uuid);
        let matches = |d: &DeviceSample| d.uuid.as_ref().is_ok_and(|u| hex(u) == want);
        self.devices.iter().find_map(|d| {
            if matches(d) {
                Some(d)
            } else {
                d.mig.iter().find(|m| matches(m))
            }
        })
    }
}

#[cfg(test)]
mod device_for_tests {
    use super::*;

    fn snap() -> Snapshot {
        let dev = |index: u32, uuid: &str| DeviceSample {
            uuid: Ok(uuid.into()),
            ..DeviceSample::missing(index, Na::NotSupported)
        };
        Snapshot {
            unix_ns: 0,
            driver: Err(Na::NotSupported),
            devices: vec![dev(0, "GPU-aaaa"), dev(1, "GPU-bbbb"), dev(2, "GPU-cccc")],
        }
    }

    #[test]
    fn a_remapped_ordinal_is_found_by_uuid() {
        let s = snap();
        // CUDA_VISIBLE_DEVICES=2,0: CUDA ordinal 0 is NVML index 2.
        assert_eq!(s.device_for(Some("GPU-cccc"), 0).map(|d| d.index), Some(2));
        assert_eq!(s.device_for(Some("GPU-aaaa"), 1).map(|d| d.index), Some(0));
    }

    #[test]
    fn without_a_known_uuid_the_index_is_used() {
        let s = snap();
        assert_eq!(s.device_for(None, 1).map(|d| d.index), Some(1));
        assert_eq!(s.device_for(Some("GPU-zzzz"), 2).map(|d| d.index), Some(2));
        assert_eq!(s.device_for(None, 7).map(|d| d.index), None);
        assert_eq!(s.device_for(None, -1).map(|d| d.index), None);
    }
}
