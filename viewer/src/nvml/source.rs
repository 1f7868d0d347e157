//! Opening NVML (real, another library, or the simulated GPU) and taking enriched
//! samples: NVML figures plus `/proc` owners plus probe state.

use std::path::PathBuf;

use super::procfs::ProcFs;
use super::query::{self, Driver};
use super::rings::RingDirs;
use super::sample::{DeviceSample, Snapshot};
use super::units::now_unix_ns;

/// Where NVML comes from; flattened into `watch`, `log` and `doctor`.
#[derive(clap::Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct NvmlArgs {
    /// NVML library to load instead of the driver's libnvidia-ml.so.1
    #[arg(long, env = "FRAGPROBE_NVML_LIB", value_name = "PATH")]
    pub nvml_lib: Option<PathBuf>,
    /// Read the simulated GPU's NVML (the one `fragprobe run --simulated-gpu` drives);
    /// SPEC like "2x80GiB" (defaults to $FRAGPROBE_SIM_GPU, else the simulator's default)
    #[arg(long, value_name = "SPEC", num_args = 0..=1, default_missing_value = "",
          value_parser = crate::nvml::simulated::spec_arg,
          conflicts_with = "nvml_lib")]
    pub simulated_gpu: Option<String>,
}

/// A sampler: NVML plus the `/proc` and ring-directory lookups that enrich its answers.
pub struct Monitor {
    driver: Box<dyn Driver>,
    lib: String,
    procfs: ProcFs,
    rings: RingDirs,
}

impl Monitor {
    /// Opens NVML as `args` say. The error is one line to print after "NVML unavailable: ".
    pub fn open(args: &NvmlArgs) -> Result<Monitor, String> {
        let lib = match &args.simulated_gpu {
            Some(spec) => Some(super::simulated::nvml_lib(spec)?),
            None => args.nvml_lib.clone(),
        };
        let d = super::real::open(lib.as_deref())?;
        let name = d.lib().to_string();
        Ok(Monitor::from_driver(Box::new(d), name))
    }

    /// A monitor over any driver (tests use fakes).
    pub fn from_driver(driver: Box<dyn Driver>, lib: String) -> Monitor {
        Monitor {
            driver,
            lib,
            procfs: ProcFs::default(),
            rings: RingDirs::from_env(),
        }
    }

    /// Replaces the `/proc` reader and ring directories (tests).
    pub fn with_lookups(mut self, procfs: ProcFs, rings: RingDirs) -> Monitor {
        self.procfs = procfs;
        self.rings = rings;
        self
    }

    /// The library that was loaded.
    pub fn lib(&self) -> &str {
        &self.lib
    }

    /// The driver, for direct queries.
    pub fn driver(&self) -> &dyn Driver {
        self.driver.as_ref()
    }

    /// Checks a `-i` selection against the devices present.
    pub fn check_selection(&self, select: &[u32]) -> Result<(), String> {
        query::check_selection(self.driver.as_ref(), select)
    }

    /// The NVML figures only (what `log` writes): no `/proc` or ring lookups.
    pub fn sample_devices(&self, select: &[u32]) -> Snapshot {
        query::collect(self.driver.as_ref(), select, now_unix_ns())
    }

    /// The NVML figures with every process's owner, command line and probe state.
    pub fn sample(&self, select: &[u32]) -> Snapshot {
        let mut s = self.sample_devices(select);
        self.enrich(&mut s);
        s
    }

    /// Adds `/proc` and probe details to every process of `s`.
    pub fn enrich(&self, s: &mut Snapshot) {
        for d in s.devices.iter_mut() {
            self.enrich_device(d);
        }
    }

    fn enrich_device(&self, dev: &mut DeviceSample) {
        let capacity = dev.memory.as_ref().ok().map(|m| m.total);
        let uuid = dev.uuid.as_ref().ok().cloned();
        if let Ok(list) = dev.processes.as_mut() {
            for p in list.iter_mut() {
                p.info = self.procfs.info(p.pid);
                let uid = p.info.as_ref().map(|i| i.uid).unwrap_or(self.rings.my_uid);
                p.probe = self
                    .rings
                    .ring_of(p.pid, uid)
                    .map(|ring| super::live::probe_info(ring, capacity, uuid.as_deref()));
            }
        }
        for m in dev.mig.iter_mut() {
            self.enrich_device(m);
        }
    }
}
