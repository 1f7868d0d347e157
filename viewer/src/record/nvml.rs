//! NVML samples for recorded traces: while `run`, `record`, `sweep` or `attach` drains the
//! rings, a thread ("fragprobe-nvml") reads NVML every interval, and the recorder writes
//! one `NvmlSample` record per probed process and GPU it described (device used, device
//! total, the process's own figure). A replay then has what a live session has: the NVML
//! curve on the timelines, the tracked-vs-NVML cross-check, and `doctor TRACE` can tell
//! memory other processes held at an out-of-memory error from the run's own.
//!
//! NVML is opened on the sampler's thread, so a slow driver never delays the command or
//! the draining. Where NVML cannot be opened (no driver: most CI machines) the trace simply
//! has no samples; nothing else changes.

use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::time::Duration;

use crate::nvml::{Monitor, NvmlArgs, Snapshot};
use fragprobe_shared::format::{Api, EventKind, Record};
use fragprobe_shared::ring::monotonic_ns;

/// The default interval: what `nvidia-smi -l 1` users look at, at a cost far below a
/// per-mille of a core (`log` at 1 Hz: 0.15 %).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);

/// The shortest interval accepted.
pub const MIN_INTERVAL: Duration = Duration::from_millis(10);

/// Samples kept waiting for the recorder; while it is that far behind, new ones are
/// dropped.
const QUEUE: usize = 64;

/// How long dropping a real driver's feed waits for its thread (see [`NvmlFeed::start`]).
const REAL_JOIN: Duration = Duration::from_millis(100);

/// One NVML sample, taken at `mono_ns` (CLOCK_MONOTONIC, the probe's clock).
pub struct Timed {
    /// When the sample was taken.
    pub mono_ns: u64,
    /// The devices' figures (no `/proc` or ring lookups).
    pub snapshot: Snapshot,
}

/// A running sampler; stops when dropped.
pub struct NvmlFeed {
    rx: Receiver<Timed>,
    /// Dropping it wakes the sampler at once and ends it.
    stop: Option<SyncSender<()>>,
    /// Disconnected when the thread has ended (NVML shut down).
    ended: Receiver<()>,
    /// How long dropping the feed waits for that (see [`NvmlFeed::start`]); `None`: until
    /// it has.
    join: Option<Duration>,
}

impl NvmlFeed {
    /// Starts sampling NVML as `args` say every `interval` (at least [`MIN_INTERVAL`]).
    /// `None` when the thread cannot start.
    ///
    /// `join`: dropping the feed waits for its thread, so that a session that follows (the
    /// next run of a sweep) may change the environment the simulated GPU's NVML reads.
    /// Leave it off for a real driver: `nvmlInit` can take seconds without the persistence
    /// daemon, and a short command's run should not wait for it at the end; its feed is
    /// waited for [`REAL_JOIN`] at most (so NVML is usually shut down before `fragprobe`
    /// exits).
    pub fn start(args: NvmlArgs, interval: Duration, join: bool) -> Option<NvmlFeed> {
        Self::start_with(move || Monitor::open(&args), interval, join)
    }

    /// [`NvmlFeed::start`] over any way of opening a monitor (tests pass fakes).
    pub fn start_with(
        open: impl FnOnce() -> Result<Monitor, String> + Send + 'static,
        interval: Duration,
        join: bool,
    ) -> Option<NvmlFeed> {
        let interval = interval.max(MIN_INTERVAL);
        let (tx, rx) = sync_channel(QUEUE);
        let (stop, stopped) = sync_channel::<()>(0);
        let (end, ended) = sync_channel::<()>(0);
        std::thread::Builder::new()
            .name("fragprobe-nvml".into())
            .spawn(move || {
                // Dropped last, after the monitor (NVML shut down): says the thread ended.
                let _end = end;
                // No driver, no samples: the trace says nothing about NVML, as before.
                let Ok(monitor) = open() else { return };
                loop {
                    let sample = Timed {
                        mono_ns: monotonic_ns(),
                        snapshot: monitor.sample_devices(&[]),
                    };
                    match tx.try_send(sample) {
                        Ok(()) | Err(TrySendError::Full(_)) => {}
                        Err(TrySendError::Disconnected(_)) => return,
                    }
                    match stopped.recv_timeout(interval) {
                        Err(RecvTimeoutError::Timeout) => {}
                        Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
            })
            .ok()?;
        Some(NvmlFeed {
            rx,
            stop: Some(stop),
            ended,
            join: (!join).then_some(REAL_JOIN),
        })
    }

    /// The samples taken since the last call, oldest first.
    pub fn take(&self) -> Vec<Timed> {
        self.rx.try_iter().collect()
    }
}

impl Drop for NvmlFeed {
    fn drop(&mut self) {
        drop(self.stop.take());
        // Both end when the thread drops its sender; nothing is ever sent.
        match self.join {
            None => drop(self.ended.recv()),
            Some(d) => drop(self.ended.recv_timeout(d)),
        }
    }
}

/// `args` with the simulated GPU resolved to its NVML library, on the calling thread:
/// [`crate::nvml::simulated::nvml_lib`] may set the device spec in this process's
/// environment, which must happen before the sampler's thread starts.
pub fn resolve(args: &NvmlArgs) -> Result<NvmlArgs, String> {
    match &args.simulated_gpu {
        Some(spec) => Ok(NvmlArgs {
            nvml_lib: Some(crate::nvml::simulated::nvml_lib(spec)?),
            simulated_gpu: None,
        }),
        None => Ok(args.clone()),
    }
}

/// The `NvmlSample` records of one sample for process `pid`, which described `devices`
/// ((CUDA ordinal, uuid) pairs, from its ring): one per described GPU that NVML knows.
/// `seq` is the process's ring position (like the recorder's other records of its own);
/// `not_before` keeps the process's records in time order in the trace (a sample taken
/// before records that an earlier poll already passed on is stamped with their time).
pub fn sample_records(
    pid: u32,
    seq: u64,
    devices: &[(i16, String)],
    sample: &Timed,
    not_before: u64,
) -> Vec<Record> {
    let mut out = Vec::new();
    for (ordinal, uuid) in devices {
        // By uuid only: an index is NVML's numbering, not CUDA's, and a GPU that cannot be
        // told apart gets no sample rather than another GPU's.
        let Some(dev) = sample.snapshot.by_uuid(uuid) else {
            continue;
        };
        let Ok(mem) = &dev.memory else { continue };
        // NVML's figure for this process, context included; n/a when NVML cannot list
        // processes or does not list this one (a pid from another pid namespace).
        let own = dev
            .process_list()
            .iter()
            .find(|p| p.pid == pid)
            .and_then(|p| p.used)
            .unwrap_or(u64::MAX);
        out.push(Record {
            seq,
            ts_ns: sample.mono_ns.max(not_before),
            pid,
            kind: EventKind::NvmlSample as u16,
            api: Api::Nvml as u16,
            device: *ordinal,
            size: mem.used(),
            aux: mem.total,
            aux2: own,
            ..Record::default()
        });
    }
    out
}

/// `--nvml-interval`, shared by `run`, `record` and `attach`.
#[derive(clap::Args, Debug, Clone)]
pub struct IntervalArg {
    /// Write NVML samples into the trace every SECS seconds (device used and total, each
    /// probed process's own figure), for the replay's NVML cross-check and `doctor`; 0: none
    #[arg(long = "nvml-interval", value_name = "SECS", default_value = "1",
          value_parser = parse_interval)]
    pub every: Duration,
}

/// Parses `--nvml-interval`: seconds (fractions allowed) as `watch -n` takes them, or `0`
/// for no sampling.
pub fn parse_interval(s: &str) -> Result<Duration, String> {
    if s.trim().parse::<f64>() == Ok(0.0) {
        return Ok(Duration::ZERO);
    }
    let secs = crate::nvml::units::parse_interval(s)
        .map_err(|e| format!("{e}; give 0 for no NVML samples"))?;
    Ok(Duration::from_secs_f64(secs).max(MIN_INTERVAL))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::nvml::sample::ProcessKind;
    use crate::nvml::{DeviceSample, Memory, Na, ProcessSample};

    fn gpu(
        index: u32,
        uuid: &str,
        used: u64,
        procs: Option<Vec<(u32, Option<u64>)>>,
    ) -> DeviceSample {
        DeviceSample {
            uuid: Ok(uuid.into()),
            memory: Ok(Memory {
                total: 80 << 30,
                free: (80 << 30) - used - (1 << 30),
                reserved: 1 << 30,
                used_reported: 0,
            }),
            processes: procs.map_or(Err(Na::NoPermission), |v| {
                Ok(v.into_iter()
                    .map(|(pid, used)| ProcessSample {
                        pid,
                        kind: ProcessKind::Compute,
                        used,
                        gpu_instance: None,
                        compute_instance: None,
                        info: None,
                        probe: None,
                    })
                    .collect())
            }),
            ..DeviceSample::missing(index, Na::NotSupported)
        }
    }

    fn timed(devices: Vec<DeviceSample>) -> Timed {
        Timed {
            mono_ns: 5_000,
            snapshot: Snapshot {
                unix_ns: 0,
                driver: Err(Na::NotSupported),
                devices,
            },
        }
    }

    #[test]
    fn one_record_per_described_gpu_found_by_uuid() {
        // CUDA_VISIBLE_DEVICES=2,0: CUDA's 0 is NVML's 2 and CUDA's 1 is NVML's 0.
        let s = timed(vec![
            gpu(
                0,
                "GPU-a",
                3 << 30,
                Some(vec![(7, Some(2 << 30)), (9, Some(1 << 30))]),
            ),
            gpu(1, "GPU-b", 0, Some(vec![])),
            gpu(2, "GPU-c", 5 << 30, Some(vec![(7, Some(5 << 30))])),
        ]);
        let devs = vec![(0, "GPU-c".to_string()), (1, "GPU-a".to_string())];
        let r = sample_records(7, 42, &devs, &s, 0);
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].device, r[0].size, r[0].aux2), (0, 5 << 30, 5 << 30));
        assert_eq!((r[1].device, r[1].size, r[1].aux2), (1, 3 << 30, 2 << 30));
        assert!(r.iter().all(|r| r.aux == 80 << 30
            && r.pid == 7
            && r.seq == 42
            && r.ts_ns == 5_000
            && r.kind() == Some(EventKind::NvmlSample)));
    }

    #[test]
    fn a_process_nvml_cannot_see_gets_no_figure_of_its_own() {
        let s = timed(vec![
            gpu(0, "GPU-a", 3 << 30, Some(vec![(9, Some(1 << 30))])),
            gpu(1, "GPU-b", 1 << 30, None),
            gpu(2, "GPU-c", 1 << 30, Some(vec![(7, None)])),
        ]);
        let devs: Vec<(i16, String)> = ["GPU-a", "GPU-b", "GPU-c"]
            .iter()
            .enumerate()
            .map(|(i, u)| (i as i16, u.to_string()))
            .collect();
        let r = sample_records(7, 1, &devs, &s, 9_000);
        assert_eq!(r.len(), 3);
        assert!(r.iter().all(|r| r.aux2 == u64::MAX && r.ts_ns == 9_000));
    }

    #[test]
    fn a_gpu_without_memory_figures_or_unknown_gives_nothing() {
        let mut g = gpu(0, "GPU-a", 0, Some(vec![]));
        g.memory = Err(Na::GpuLost);
        // NVML's index 1 is not CUDA's ordinal 1: an unknown uuid matches nothing.
        let s = timed(vec![g, gpu(1, "GPU-b", 0, Some(vec![]))]);
        let devs = vec![(0, "GPU-a".to_string()), (1, "GPU-z".to_string())];
        assert!(sample_records(7, 1, &devs, &s, 0).is_empty());
    }

    #[test]
    fn a_mig_instance_is_found_under_its_parent() {
        let mut parent = gpu(0, "GPU-aaaa", 9 << 30, Some(vec![]));
        parent.mig = vec![
            gpu(0, "MIG-1111", 1 << 30, Some(vec![(7, Some(1 << 30))])),
            gpu(1, "MIG-2222", 2 << 30, Some(vec![])),
        ];
        let s = timed(vec![parent]);
        let r = sample_records(7, 1, &[(0, "GPU-2222".to_string())], &s, 0);
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].size, r[0].aux2), (2 << 30, u64::MAX));
        let r = sample_records(7, 1, &[(0, "GPU-1111".to_string())], &s, 0);
        assert_eq!((r[0].size, r[0].aux2), (1 << 30, 1 << 30));
    }

    #[test]
    fn intervals_parse_with_clear_errors() {
        assert_eq!(parse_interval("1").unwrap(), Duration::from_secs(1));
        assert_eq!(parse_interval("0.25").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_interval("0").unwrap(), Duration::ZERO);
        assert!(parse_interval("0.001").unwrap_err().contains("shortest"));
        assert!(parse_interval("-1").unwrap_err().contains("give 0"));
        assert!(parse_interval("soon").unwrap_err().contains("not a number"));
        assert!(parse_interval("inf").unwrap_err().contains("give 0"));
    }

    #[test]
    fn a_monitor_that_cannot_open_gives_no_samples() {
        let feed = NvmlFeed::start_with(|| Err("no driver".into()), MIN_INTERVAL, true).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert!(feed.take().is_empty());
    }
}
