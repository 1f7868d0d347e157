//! The NVML cross-check: what the probe tracked against what NVML says the process and the
//! device use, reduced to one plain-words verdict.
//!
//! `unexplained = nvml_process_used − (tracked_live + context_baseline)`, where the
//! context baseline is the process's NVML figure when tracked bytes were 0 (its first
//! context, before any allocation the probe saw). A process sampled only once it had
//! allocations (most are: NVML is sampled once a second) gets an estimate instead: its
//! first figure less what the probe tracked then; the remainder then says what appeared
//! since. It is flagged past 64 MiB or past 5 % of the process's NVML figure, whichever is
//! smaller.

use crate::pipeline::space::{human_bytes, human_bytes_signed};

/// Absolute tolerance before an unexplained remainder is flagged.
pub const TOLERANCE_BYTES: u64 = 64 << 20;
/// Relative tolerance (of the process's NVML figure) before it is flagged.
pub const TOLERANCE_FRACTION: f64 = 0.05;

/// The inputs, all in bytes, at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CrossCheck {
    /// Bytes the probe saw live in this process on this device.
    pub tracked_live: u64,
    /// NVML's figure for this process (`None`: NVML gives none here, e.g. WSL2).
    pub process_used: Option<u64>,
    /// The process's context: its NVML figure when it had no tracked bytes, or the estimate
    /// (`None`: no sample yet).
    pub baseline: Option<u64>,
    /// `Some(tracked)`: the baseline is an estimate, from a sample taken while the probe
    /// tracked this many bytes.
    pub baseline_estimated_with: Option<u64>,
    /// NVML's device-wide used bytes.
    pub device_used: u64,
    /// NVML's device total.
    pub device_total: u64,
}

/// What the numbers say, in plain words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// NVML's process figure is the tracked bytes plus the CUDA context.
    ContextOverheadOnly,
    /// The process holds memory the probe did not see.
    UntrackedAllocations,
    /// NVML shows less than the probe tracked (managed/imported memory is not counted per
    /// process, or the baseline was taken after allocations already existed).
    TrackedExceedsNvml,
    /// NVML has no per-process figure; only the device figure can be compared.
    NoProcessFigure,
}

impl CrossCheck {
    /// The unexplained remainder, when NVML gives a process figure.
    pub fn unexplained(&self) -> Option<i64> {
        let used = self.process_used? as i128;
        let explained = self.tracked_live as i128 + self.baseline.unwrap_or(0) as i128;
        Some((used - explained).clamp(i64::MIN as i128, i64::MAX as i128) as i64)
    }

    /// The tolerance for this process: the smaller of 64 MiB and 5 %.
    pub fn tolerance(&self) -> u64 {
        let rel = (self.process_used.unwrap_or(0) as f64 * TOLERANCE_FRACTION) as u64;
        TOLERANCE_BYTES.min(rel.max(1))
    }

    /// Whether the remainder is past the tolerance (either way).
    pub fn flagged(&self) -> bool {
        self.unexplained()
            .is_some_and(|u| u.unsigned_abs() > self.tolerance())
    }

    /// Device bytes held by other processes (and the driver), per NVML.
    pub fn others(&self) -> u64 {
        self.device_used
            .saturating_sub(self.process_used.unwrap_or(0))
    }

    /// The verdict about this process.
    pub fn verdict(&self) -> Verdict {
        match self.unexplained() {
            None => Verdict::NoProcessFigure,
            Some(_) if !self.flagged() => Verdict::ContextOverheadOnly,
            Some(u) if u > 0 => Verdict::UntrackedAllocations,
            Some(_) => Verdict::TrackedExceedsNvml,
        }
    }

    /// Whether other processes hold a notable share of the device (past the tolerance).
    pub fn others_notable(&self) -> bool {
        self.others()
            > TOLERANCE_BYTES
                .min((self.device_total as f64 * 0.05) as u64)
                .max(1)
    }

    /// One or two sentences a person can act on.
    pub fn explain(&self) -> String {
        let mut s = match self.verdict() {
            Verdict::NoProcessFigure => format!(
                "NVML gives no per-process figure here (common in containers and WSL2); the \
                 device uses {} of {}, the probe tracks {}.",
                human_bytes(self.device_used),
                human_bytes(self.device_total),
                human_bytes(self.tracked_live)
            ),
            Verdict::ContextOverheadOnly => format!(
                "Context overhead only: NVML's {} for this process is the {} tracked plus \
                 the {} CUDA context (within {}).",
                human_bytes(self.process_used.unwrap_or(0)),
                human_bytes(self.tracked_live),
                human_bytes(self.baseline.unwrap_or(0)),
                human_bytes(self.tolerance())
            ),
            Verdict::UntrackedAllocations => format!(
                "Untracked allocations: the process holds {} more than the probe saw plus \
                 its context: a library calling the driver directly, or memory allocated \
                 before the probe attached.",
                human_bytes_signed(self.unexplained().unwrap_or(0))
            ),
            Verdict::TrackedExceedsNvml => format!(
                "NVML shows {} less than tracked: managed and imported memory is not counted \
                 per process, or the context baseline was taken late.",
                human_bytes_signed(-self.unexplained().unwrap_or(0))
            ),
        };
        if let (Some(b), Some(t)) = (self.baseline, self.baseline_estimated_with) {
            s.push_str(&format!(
                " The context ({}) is estimated from the first NVML sample, taken when the \
                 probe already tracked {}: anything the process held beyond that then counts \
                 as context, so the remainder is what appeared since.",
                human_bytes(b),
                human_bytes(t)
            ));
        }
        if self.baseline.is_none() && self.process_used.is_some() {
            s.push_str(
                " No context baseline yet (NVML never saw this process with nothing tracked), \
                 so the remainder includes the context.",
            );
        }
        if self.others_notable() {
            s.push_str(&format!(
                " Other processes hold {} on this device.",
                human_bytes(self.others())
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn check(tracked: u64, used: Option<u64>, baseline: Option<u64>) -> CrossCheck {
        CrossCheck {
            tracked_live: tracked,
            process_used: used,
            baseline,
            baseline_estimated_with: None,
            device_used: used.unwrap_or(0),
            device_total: 80 << 30,
        }
    }

    #[test]
    fn an_estimated_context_is_said_to_be_one() {
        // First sample: 2 GiB tracked, NVML 2.5 GiB: 512 MiB estimated context. Later
        // 100 MiB more appears that the probe did not see.
        let mut c = check(3072 * MIB, Some(3072 * MIB + 612 * MIB), Some(512 * MIB));
        c.baseline_estimated_with = Some(2048 * MIB);
        assert_eq!(c.verdict(), Verdict::UntrackedAllocations);
        let text = c.explain();
        assert!(text.contains("100.00 MiB more"), "{text}");
        assert!(
            text.contains("estimated from the first NVML sample")
                && text.contains("2.00 GiB")
                && !text.contains("No context baseline yet"),
            "{text}"
        );
    }

    #[test]
    fn context_only_within_tolerance() {
        let c = check(
            4096 * MIB,
            Some(4096 * MIB + 300 * MIB + 10 * MIB),
            Some(300 * MIB),
        );
        assert_eq!(c.unexplained(), Some(10 * MIB as i64));
        assert!(!c.flagged());
        assert_eq!(c.verdict(), Verdict::ContextOverheadOnly);
        assert!(c.explain().starts_with("Context overhead only"));
    }

    #[test]
    fn untracked_past_64_mib() {
        let c = check(
            4096 * MIB,
            Some(4096 * MIB + 300 * MIB + 65 * MIB),
            Some(300 * MIB),
        );
        assert!(c.flagged());
        assert_eq!(c.verdict(), Verdict::UntrackedAllocations);
        assert!(c.explain().contains("65.00 MiB more"));
    }

    #[test]
    fn small_process_flags_past_five_percent() {
        // 5 % of 400 MiB = 20 MiB < 64 MiB: 30 MiB unexplained is flagged.
        let c = check(70 * MIB, Some(400 * MIB), Some(300 * MIB));
        assert_eq!(c.tolerance(), 20 * MIB);
        assert!(c.flagged());
        let ok = check(85 * MIB, Some(400 * MIB), Some(300 * MIB));
        assert!(!ok.flagged());
    }

    #[test]
    fn negative_remainder_and_missing_figures() {
        let c = check(1000 * MIB, Some(500 * MIB), Some(300 * MIB));
        assert_eq!(c.verdict(), Verdict::TrackedExceedsNvml);
        let na = check(1000 * MIB, None, None);
        assert_eq!(na.unexplained(), None);
        assert_eq!(na.verdict(), Verdict::NoProcessFigure);
        assert!(!na.flagged());
    }

    #[test]
    fn other_processes_are_named() {
        let mut c = check(100 * MIB, Some(400 * MIB), Some(300 * MIB));
        c.device_used = 10 << 30;
        assert!(c.others_notable());
        assert!(c.explain().contains("Other processes hold"));
    }
}
