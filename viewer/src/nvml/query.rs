//! The narrow interface the sampler needs from NVML, and the adapter that turns its
//! answers into a [`Snapshot`].
//!
//! [`Driver`] and [`Gpu`] are implemented by the real library binding
//! ([`crate::nvml::real`]) and by fakes in tests, so the adapter — the code that decides
//! what becomes "n/a", what is never subtracted from, which devices are selected — is
//! tested without a GPU.

use super::sample::{DeviceSample, Field, Memory, Na, ProcessKind, ProcessSample, Snapshot};

/// `NVML_VALUE_NOT_AVAILABLE` as an unsigned 64-bit value.
pub const VALUE_NOT_AVAILABLE: u64 = u64::MAX;

/// Which clock to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockKind {
    /// Streaming multiprocessor clock.
    Sm,
    /// Memory clock.
    Memory,
}

/// A process as the driver lists it, before `/proc` and the probe are consulted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawProcess {
    /// Host pid.
    pub pid: u32,
    /// Used bytes; `None` or `Some(VALUE_NOT_AVAILABLE)` when the driver has no figure.
    pub used: Option<u64>,
    /// MIG GPU instance id.
    pub gpu_instance: Option<u32>,
    /// MIG compute instance id.
    pub compute_instance: Option<u32>,
}

/// One device handle.
pub trait Gpu {
    /// Product name.
    fn name(&self) -> Field<String>;
    /// UUID.
    fn uuid(&self) -> Field<String>;
    /// Memory (v2 struct, with `reserved`).
    fn memory(&self) -> Field<Memory>;
    /// (GPU, memory) utilisation, percent.
    fn utilization(&self) -> Field<(u32, u32)>;
    /// Temperature, °C.
    fn temperature(&self) -> Field<u32>;
    /// Power draw, mW.
    fn power_usage(&self) -> Field<u32>;
    /// Enforced power limit, mW.
    fn power_limit(&self) -> Field<u32>;
    /// Performance state number.
    fn pstate(&self) -> Field<u32>;
    /// A clock, MHz.
    fn clock(&self, which: ClockKind) -> Field<u32>;
    /// Volatile ECC error count.
    fn ecc(&self, uncorrected: bool) -> Field<u64>;
    /// Processes with a compute context.
    fn compute_processes(&self) -> Field<Vec<RawProcess>>;
    /// Processes with a graphics context.
    fn graphics_processes(&self) -> Field<Vec<RawProcess>>;
    /// MIG instances: `Ok(vec![])` when MIG is off.
    fn mig_devices(&self) -> Field<Vec<Box<dyn Gpu + '_>>>;
}

/// The library as a whole.
pub trait Driver {
    /// Driver version string.
    fn driver_version(&self) -> Field<String>;
    /// Number of devices.
    fn device_count(&self) -> Field<u32>;
    /// A handle to device `index`.
    fn device(&self, index: u32) -> Field<Box<dyn Gpu + '_>>;
}

/// Samples every device whose index is in `select` (all when `select` is empty).
/// Indices in `select` that do not exist are reported by [`check_selection`], not here.
pub fn collect(driver: &dyn Driver, select: &[u32], unix_ns: u64) -> Snapshot {
    let count = driver.device_count();
    let mut devices = Vec::new();
    if let Ok(n) = count {
        for index in 0..n {
            if !select.is_empty() && !select.contains(&index) {
                continue;
            }
            devices.push(match driver.device(index) {
                Ok(gpu) => collect_device(index, gpu.as_ref(), true),
                Err(why) => DeviceSample::missing(index, why),
            });
        }
    }
    Snapshot {
        unix_ns,
        driver: driver.driver_version(),
        devices,
    }
}

/// Checks `-i` against the devices present; the error names what exists.
pub fn check_selection(driver: &dyn Driver, select: &[u32]) -> Result<(), String> {
    let n = driver
        .device_count()
        .map_err(|e| format!("cannot count GPUs: {e}"))?;
    for &i in select {
        if i >= n {
            return Err(format!(
                "GPU {i} does not exist: NVML sees {n} GPU{} (indices 0..{})",
                if n == 1 { "" } else { "s" },
                n.saturating_sub(1)
            ));
        }
    }
    Ok(())
}

/// Samples one device (and, when `with_mig`, its MIG instances).
pub fn collect_device(index: u32, gpu: &dyn Gpu, with_mig: bool) -> DeviceSample {
    let util = gpu.utilization();
    let processes = merge_processes(gpu.compute_processes(), gpu.graphics_processes());
    let mig = if with_mig {
        match gpu.mig_devices() {
            Ok(list) => list
                .iter()
                .enumerate()
                .map(|(i, m)| collect_device(i as u32, m.as_ref(), false))
                .collect(),
            Err(_) => Vec::new(),
        }
    } else {
        Vec::new()
    };
    DeviceSample {
        index,
        uuid: gpu.uuid(),
        name: gpu.name(),
        memory: gpu.memory().map(sane_memory),
        util_gpu: util.clone().map(|u| u.0),
        util_mem: util.map(|u| u.1),
        temperature: gpu.temperature(),
        power_mw: gpu.power_usage(),
        power_limit_mw: gpu.power_limit(),
        pstate: gpu.pstate(),
        clock_sm: gpu.clock(ClockKind::Sm),
        clock_mem: gpu.clock(ClockKind::Memory),
        ecc_corrected: gpu.ecc(false).and_then(not_available_u64),
        ecc_uncorrected: gpu.ecc(true).and_then(not_available_u64),
        processes,
        mig,
    }
}

fn not_available_u64(v: u64) -> Field<u64> {
    if v == VALUE_NOT_AVAILABLE {
        Err(Na::NotAvailable)
    } else {
        Ok(v)
    }
}

/// Clamps a memory report whose parts exceed the total (seen on some drivers during
/// resets) so that derived figures never underflow.
fn sane_memory(m: Memory) -> Memory {
    let free = m.free.min(m.total);
    let reserved = m.reserved.min(m.total - free);
    Memory {
        total: m.total,
        free,
        reserved,
        used_reported: m.used_reported,
    }
}

/// Joins the compute and graphics lists into one table keyed by pid, as nvidia-smi does.
/// The compute list decides whether the table exists; a failing graphics list is ignored.
fn merge_processes(
    compute: Field<Vec<RawProcess>>,
    graphics: Field<Vec<RawProcess>>,
) -> Field<Vec<ProcessSample>> {
    let mut out: Vec<ProcessSample> = Vec::new();
    let add = |out: &mut Vec<ProcessSample>, p: RawProcess, kind: ProcessKind| {
        let used = p.used.filter(|&u| u != VALUE_NOT_AVAILABLE);
        if let Some(existing) = out.iter_mut().find(|e| {
            e.pid == p.pid
                && e.gpu_instance == p.gpu_instance
                && e.compute_instance == p.compute_instance
        }) {
            if existing.kind != kind {
                existing.kind = ProcessKind::Both;
            }
            // The same context listed twice reports the same footprint; keep the larger.
            existing.used = match (existing.used, used) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
            return;
        }
        out.push(ProcessSample {
            pid: p.pid,
            kind,
            used,
            gpu_instance: p.gpu_instance,
            compute_instance: p.compute_instance,
            info: None,
            probe: None,
        });
    };
    let compute = compute?;
    for p in compute {
        add(&mut out, p, ProcessKind::Compute);
    }
    for p in graphics.unwrap_or_default() {
        add(&mut out, p, ProcessKind::Graphics);
    }
    out.sort_by_key(|p| p.pid);
    Ok(out)
}
