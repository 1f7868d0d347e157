//! NVML sampling on a named thread ("fragprobe-nvml"): device and per-process memory for the
//! processes panel, the timelines and the cross-check of live runs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::panels::processes::Row;
use crate::nvml::{Monitor, NvmlArgs, Snapshot};

/// Samples kept per device for the timeline (one per second: two hours).
pub const HISTORY: usize = 7200;

/// One device's memory at one moment (CLOCK_MONOTONIC, like live records).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Point {
    /// CLOCK_MONOTONIC ns.
    pub mono_ns: u64,
    /// Used bytes (`total − free − reserved`).
    pub used: u64,
    /// Total bytes.
    pub total: u64,
}

/// What the sampler published.
#[derive(Default)]
pub struct State {
    /// Why NVML could not be opened (shown as a banner).
    pub unavailable: Option<String>,
    /// The latest sample.
    pub last: Option<Snapshot>,
    /// Memory history per GPU index.
    pub history: HashMap<u32, Vec<Point>>,
}

/// The sampler.
pub struct Sampler {
    state: Mutex<State>,
    serial: AtomicU64,
    stop: AtomicBool,
}

/// CLOCK_MONOTONIC in ns (the probe's clock).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid, exclusively borrowed `ts`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Sampler {
    /// Starts sampling every `period` (NVML is opened on the sampler's thread).
    pub fn start(args: NvmlArgs, period: Duration) -> std::io::Result<Arc<Sampler>> {
        let s = Arc::new(Sampler {
            state: Mutex::new(State::default()),
            serial: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let me = s.clone();
        std::thread::Builder::new()
            .name("fragprobe-nvml".into())
            .spawn(move || {
                let monitor = match Monitor::open(&args) {
                    Ok(m) => m,
                    Err(e) => {
                        if let Ok(mut st) = me.state.lock() {
                            st.unavailable = Some(e);
                        }
                        me.serial.fetch_add(1, Ordering::Release);
                        return;
                    }
                };
                while !me.stop.load(Ordering::Acquire) {
                    let snap = monitor.sample(&[]);
                    me.publish(snap, monotonic_ns());
                    std::thread::sleep(period);
                }
            })?;
        Ok(s)
    }

    /// A sampler that never samples, showing `why` (NVML unavailable; tests).
    pub fn unavailable(why: &str) -> Arc<Sampler> {
        let st = State {
            unavailable: Some(why.to_string()),
            ..State::default()
        };
        Arc::new(Sampler {
            state: Mutex::new(st),
            serial: AtomicU64::new(1),
            stop: AtomicBool::new(true),
        })
    }

    /// A sampler fed by hand (tests, and callers that sample themselves).
    pub fn manual() -> Arc<Sampler> {
        Arc::new(Sampler {
            state: Mutex::new(State::default()),
            serial: AtomicU64::new(0),
            stop: AtomicBool::new(true),
        })
    }

    /// Publishes one sample taken at `mono_ns`.
    pub fn publish(&self, snap: Snapshot, mono_ns: u64) {
        if let Ok(mut st) = self.state.lock() {
            for d in &snap.devices {
                if let Ok(m) = &d.memory {
                    let h = st.history.entry(d.index).or_default();
                    if h.len() == HISTORY {
                        h.remove(0);
                    }
                    h.push(Point {
                        mono_ns,
                        used: m.used(),
                        total: m.total,
                    });
                }
            }
            st.last = Some(snap);
        }
        self.serial.fetch_add(1, Ordering::Release);
    }

    /// Changes with every sample.
    pub fn serial(&self) -> u64 {
        self.serial.load(Ordering::Acquire)
    }

    /// Reads the state.
    pub fn with<R>(&self, f: impl FnOnce(&State) -> R) -> R {
        match self.state.lock() {
            Ok(st) => f(&st),
            Err(p) => f(&p.into_inner()),
        }
    }

    /// Stops the thread.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// The processes panel's rows from a sample; `tracked` gives the probe's live bytes for
/// pids the viewer follows.
pub fn rows(snap: &Snapshot, tracked: &dyn Fn(u32) -> Option<u64>) -> Vec<Row> {
    let mut out = Vec::new();
    for d in &snap.devices {
        for p in d.process_list() {
            let info = p.info.as_ref();
            out.push(Row {
                gpu: d.index,
                pid: p.pid,
                used: p.used,
                user: info.map(|i| i.user.clone()).unwrap_or_else(|| "?".into()),
                command: info.map(|i| i.cmdline.clone()).unwrap_or_default(),
                probed: p.probe.is_some() || tracked(p.pid).is_some(),
                tracked: tracked(p.pid).or_else(|| p.probe.as_ref().and_then(|pi| pi.live_bytes)),
                kind: p.kind.code().to_string(),
            });
        }
    }
    out
}
