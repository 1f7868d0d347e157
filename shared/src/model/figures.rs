//! A run's headline figures, defined once: `fragprobe report`, `fragprobe compare`, the
//! exporters and the GUI's Compare tab all read them from here, so the CLI and the GUI
//! cannot disagree on a multi-process, multi-device run.
//!
//! The figures are per device (every process's memory on one GPU together, what
//! `nvidia-smi` and an out-of-memory error see), over the devices shown to people
//! ([`Model::shown_devices`]). A run's peak is its busiest device's: the one whose live
//! bytes peaked highest (ties: the first device); sums and extremes are over all devices.

use super::{DeviceId, Model, Summary, When};

/// One device's figures over the run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DeviceFigures {
    /// The device.
    pub id: DeviceId,
    /// Peaks and extremes over the run.
    pub summary: Summary,
    /// Live bytes at the end (just before the last process on it exited, if all did).
    pub final_live: u64,
    /// Fragmentation ratio at the end (0 without an arena).
    pub final_ratio: f64,
    /// Largest free block at the end (`None` without an arena).
    pub final_largest_free: Option<u64>,
}

/// A run's figures: its devices', and the run's over them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunFigures {
    /// Every shown device that has figures, in the model's order.
    pub devices: Vec<DeviceFigures>,
    /// The device whose live bytes peaked highest (`None` while nothing was live).
    pub peak_device: Option<DeviceId>,
    /// Highest live bytes on one device.
    pub peak_live: u64,
    /// When that peak was first reached.
    pub peak_at: Option<When>,
    /// The peak device's fragmentation ratio at its peak.
    pub ratio_at_peak: f64,
    /// The peak device's largest free block at its peak.
    pub largest_free_at_peak: Option<u64>,
    /// Highest fragmentation ratio on any device.
    pub max_ratio: f64,
    /// Smallest largest free block on any device (`None` where no device had an arena).
    pub min_largest_free: Option<u64>,
    /// Live bytes at the end, summed over devices.
    pub final_live: u64,
    /// Highest final fragmentation ratio of any device.
    pub final_ratio: f64,
    /// Smallest final largest free block of any device with an arena.
    pub final_largest_free: Option<u64>,
    /// Highest managed bytes on one device.
    pub peak_managed: u64,
    /// Highest mapped (VMM) bytes on one device.
    pub peak_mapped: u64,
    /// Highest reserved (VMM address) bytes on one device.
    pub peak_reserved: u64,
}

impl RunFigures {
    /// The figures of everything `model` has seen.
    pub fn of(model: &Model) -> RunFigures {
        let mut f = RunFigures::default();
        for d in model.shown_devices() {
            let Some(s) = model.device_summary(d.id()) else {
                continue;
            };
            let fin = model.device_final(d.id());
            let dev = DeviceFigures {
                id: d.id(),
                summary: *s,
                final_live: fin.totals.live_bytes,
                final_ratio: fin.arena.map_or(0.0, |a| a.ratio()),
                final_largest_free: fin.arena.map(|a| a.largest_free),
            };
            if s.peak_live > f.peak_live {
                f.peak_device = Some(d.id());
                f.peak_live = s.peak_live;
                f.peak_at = s.peak_at;
                f.ratio_at_peak = s.ratio_at_peak;
                f.largest_free_at_peak = s.largest_free_at_peak;
            }
            f.max_ratio = f.max_ratio.max(s.max_ratio);
            f.min_largest_free = min_some(f.min_largest_free, s.min_largest_free);
            f.final_live += dev.final_live;
            f.final_ratio = f.final_ratio.max(dev.final_ratio);
            f.final_largest_free = min_some(f.final_largest_free, dev.final_largest_free);
            f.peak_managed = f.peak_managed.max(s.peak_managed);
            f.peak_mapped = f.peak_mapped.max(s.peak_mapped);
            f.peak_reserved = f.peak_reserved.max(s.peak_reserved);
            f.devices.push(dev);
        }
        f
    }
}

/// The smaller of two optional values, ignoring a missing one.
fn min_some(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
