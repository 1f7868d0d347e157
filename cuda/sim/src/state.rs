//! The cross-process state of the simulated devices: a small file mapped shared into every
//! process that uses the simulation (the driver stand-in of each workload, the NVML
//! stand-in of each monitor).
//!
//! Layout (all little-endian atomics, `repr(C)`):
//!
//! ```text
//! Header   magic u64 "FPSIMGPU" | version u32 | init u32 (0 empty, 1 busy, 2 ready)
//!          ndev u32 | pad u32 | generation u64
//!          dev_size[16] u64 | dev_used[16] u64
//! Slot x256  pid u32 (0 free) | pad u32 | start_time u64 (clock ticks since boot)
//!            used[16] u64 | contexts[16] u32
//! ```
//!
//! `dev_used[d]` is the physical memory in use on device `d` by all processes (the sum of
//! the slots' `used[d]`); a charge is one compare-and-swap on it plus one add on the slot,
//! so the allocation path makes no system call. A slot whose process has died (no
//! `/proc/<pid>`, a zombie, or a different start time because the pid was reused) is
//! stale: whoever finds it returns its memory and frees the slot.

use crate::spec::{DeviceSpec, MAX_DEVICES};
use std::fmt;
use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const MAGIC: u64 = u64::from_le_bytes(*b"FPSIMGPU");
const VERSION: u32 = 2;
/// Most processes that can use the simulation at once.
pub const MAX_PROCESSES: usize = 256;

const INIT_EMPTY: u32 = 0;
const INIT_BUSY: u32 = 1;
const INIT_READY: u32 = 2;

const PID_FREE: u32 = 0;
const PID_CLAIMING: u32 = u32::MAX;
const PID_CLEANING: u32 = u32::MAX - 1;

#[repr(C)]
struct Header {
    magic: AtomicU64,
    version: AtomicU32,
    init: AtomicU32,
    ndev: AtomicU32,
    _pad: AtomicU32,
    generation: AtomicU64,
    dev_size: [AtomicU64; MAX_DEVICES],
    dev_used: [AtomicU64; MAX_DEVICES],
}

#[repr(C)]
struct Slot {
    pid: AtomicU32,
    _pad: AtomicU32,
    start_time: AtomicU64,
    used: [AtomicU64; MAX_DEVICES],
    contexts: [AtomicU32; MAX_DEVICES],
}

#[repr(C)]
struct Layout {
    header: Header,
    slots: [Slot; MAX_PROCESSES],
}

const FILE_SIZE: usize = std::mem::size_of::<Layout>();

/// What went wrong with the state file.
#[derive(Debug)]
pub enum StateError {
    Io {
        path: PathBuf,
        err: std::io::Error,
    },
    Foreign {
        path: PathBuf,
    },
    Stuck {
        path: PathBuf,
    },
    SpecConflict {
        path: PathBuf,
        want: String,
        have: String,
        pid: u32,
    },
    Full {
        path: PathBuf,
    },
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateError::Io { path, err } => write!(
                f,
                "cannot use the simulated GPU state file {}: {err} (set FRAGPROBE_SIM_STATE to a writable path)",
                path.display()
            ),
            StateError::Foreign { path } => write!(
                f,
                "{} is not a fragprobe simulated GPU state file of this version; remove it or set FRAGPROBE_SIM_STATE to another path",
                path.display()
            ),
            StateError::Stuck { path } => write!(
                f,
                "the simulated GPU state file {} was left half-initialised by a crashed process; remove it",
                path.display()
            ),
            StateError::SpecConflict { path, want, have, pid } => write!(
                f,
                "the simulated GPU state file {} holds devices {have} in use by pid {pid}, but this process asks for {want}; use the same FRAGPROBE_SIM_GPU or set FRAGPROBE_SIM_STATE to another file",
                path.display()
            ),
            StateError::Full { path } => write!(
                f,
                "the simulated GPU state file {} has no free process slot ({MAX_PROCESSES} processes use it)",
                path.display()
            ),
        }
    }
}

impl std::error::Error for StateError {}

/// One process's share of a device, as NVML reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessUsage {
    pub pid: u32,
    pub used: u64,
    pub contexts: u32,
}

/// The mapped state file.
pub struct SharedState {
    map: *mut Layout,
    path: PathBuf,
}

// SAFETY: the mapping is only accessed through atomics and stays mapped for the lifetime of
// the value; the pointer itself is never changed.
unsafe impl Send for SharedState {}
// SAFETY: as above, all shared access goes through atomic operations.
unsafe impl Sync for SharedState {}

impl Drop for SharedState {
    fn drop(&mut self) {
        // SAFETY: `map` came from a successful mmap of FILE_SIZE bytes and is unmapped once.
        unsafe {
            libc::munmap(self.map.cast(), FILE_SIZE);
        }
    }
}

/// Process start time in clock ticks since boot (field 22 of `/proc/<pid>/stat`) and
/// whether the process is a zombie. `None` when the process does not exist.
fn proc_stat(pid: u32) -> Option<(u64, bool)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &text[text.rfind(')')? + 1..];
    let mut fields = after.split_whitespace();
    let state = fields.next()?;
    let start: u64 = fields.nth(18)?.parse().ok()?;
    Some((start, state == "Z" || state == "X"))
}

fn alive(pid: u32, start_time: u64) -> bool {
    match proc_stat(pid) {
        Some((start, zombie)) => !zombie && start == start_time,
        None => false,
    }
}

/// This process's pid and start time.
pub fn self_identity() -> (u32, u64) {
    let pid = std::process::id();
    let start = proc_stat(pid).map(|(s, _)| s).unwrap_or(0);
    (pid, start)
}

impl SharedState {
    /// Maps (creating if needed) the state file at `path`.
    pub fn open(path: &Path) -> Result<SharedState, StateError> {
        let io = |err| StateError::Io {
            path: path.to_path_buf(),
            err,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)
            .map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        if len < FILE_SIZE as u64 {
            file.set_len(FILE_SIZE as u64).map_err(io)?;
        }
        // SAFETY: mapping a regular file we opened read-write, FILE_SIZE bytes long, shared.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                FILE_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io(std::io::Error::last_os_error()));
        }
        let state = SharedState {
            map: p.cast(),
            path: path.to_path_buf(),
        };
        let h = state.header();
        let magic = h.magic.load(Ordering::Acquire);
        if magic != 0 && magic != MAGIC {
            return Err(StateError::Foreign {
                path: path.to_path_buf(),
            });
        }
        if magic == MAGIC && h.version.load(Ordering::Acquire) != VERSION {
            return Err(StateError::Foreign {
                path: path.to_path_buf(),
            });
        }
        Ok(state)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn layout(&self) -> &Layout {
        // SAFETY: `map` points to FILE_SIZE mapped bytes for as long as `self` lives; every
        // field is an atomic (or padding read through atomics), so shared references are fine
        // even while other processes write.
        unsafe { &*self.map }
    }

    fn header(&self) -> &Header {
        &self.layout().header
    }

    fn slot(&self, i: usize) -> &Slot {
        &self.layout().slots[i]
    }

    /// The devices recorded in the file (`None` before the first initialisation).
    pub fn stored_spec(&self) -> Option<DeviceSpec> {
        let h = self.header();
        if h.init.load(Ordering::Acquire) != INIT_READY {
            return None;
        }
        let n = (h.ndev.load(Ordering::Acquire) as usize).min(MAX_DEVICES);
        let sizes = (0..n)
            .map(|d| h.dev_size[d].load(Ordering::Acquire))
            .collect();
        DeviceSpec::from_sizes(sizes).ok()
    }

    /// Number of devices in the file (0 before initialisation).
    pub fn device_count(&self) -> usize {
        let h = self.header();
        if h.init.load(Ordering::Acquire) != INIT_READY {
            return 0;
        }
        (h.ndev.load(Ordering::Acquire) as usize).min(MAX_DEVICES)
    }

    fn write_spec(&self, spec: &DeviceSpec) {
        let h = self.header();
        for d in 0..MAX_DEVICES {
            h.dev_size[d].store(spec.size(d).unwrap_or(0), Ordering::Release);
            h.dev_used[d].store(0, Ordering::Release);
        }
        h.ndev.store(spec.count() as u32, Ordering::Release);
        h.version.store(VERSION, Ordering::Release);
        h.magic.store(MAGIC, Ordering::Release);
        h.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Initialises an empty file with `spec`, or waits for another process doing so.
    fn ensure_initialised(&self, spec: &DeviceSpec) -> Result<(), StateError> {
        let h = self.header();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match h.init.compare_exchange(
                INIT_EMPTY,
                INIT_BUSY,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    self.write_spec(spec);
                    h.init.store(INIT_READY, Ordering::Release);
                    return Ok(());
                }
                Err(INIT_READY) => return Ok(()),
                Err(_) => {
                    if Instant::now() > deadline {
                        return Err(StateError::Stuck {
                            path: self.path.clone(),
                        });
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }

    /// Makes the file describe `want`. With `None`, the devices stored in the file are adopted
    /// when another live process uses them, otherwise the default spec applies. A different
    /// spec replaces the stored one only when no other live process uses the file. Returns the
    /// devices in effect.
    pub fn settle_spec(
        &self,
        want: Option<&DeviceSpec>,
        own_slot: Option<usize>,
    ) -> Result<DeviceSpec, StateError> {
        let default = DeviceSpec::default();
        self.ensure_initialised(want.unwrap_or(&default))?;
        let have = self.stored_spec().ok_or_else(|| StateError::Foreign {
            path: self.path.clone(),
        })?;
        let adopted;
        let want = match want {
            Some(w) => w,
            None => {
                self.cleanup_stale();
                if self.other_live_pid(own_slot).is_some() {
                    return Ok(have);
                }
                adopted = default;
                &adopted
            }
        };
        if *want == have {
            return Ok(have);
        }
        self.cleanup_stale();
        let h = self.header();
        if h.init
            .compare_exchange(INIT_READY, INIT_BUSY, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // someone else is re-initialising; look again
            std::thread::sleep(Duration::from_millis(1));
            return self.settle_spec(Some(want), own_slot);
        }
        if let Some(pid) = self.other_live_pid(own_slot) {
            h.init.store(INIT_READY, Ordering::Release);
            return Err(StateError::SpecConflict {
                path: self.path.clone(),
                want: want.to_string(),
                have: have.to_string(),
                pid,
            });
        }
        self.write_spec(want);
        if let Some(i) = own_slot {
            let s = self.slot(i);
            for d in 0..MAX_DEVICES {
                s.used[d].store(0, Ordering::Release);
                s.contexts[d].store(0, Ordering::Release);
            }
        }
        h.init.store(INIT_READY, Ordering::Release);
        Ok(want.clone())
    }

    fn other_live_pid(&self, own_slot: Option<usize>) -> Option<u32> {
        (0..MAX_PROCESSES)
            .filter(|&i| Some(i) != own_slot)
            .map(|i| self.slot(i).pid.load(Ordering::Acquire))
            .find(|&pid| pid != PID_FREE && pid != PID_CLEANING)
    }

    /// Returns the memory of every slot whose process is gone. Returns how many were freed.
    pub fn cleanup_stale(&self) -> usize {
        let mut freed = 0;
        for i in 0..MAX_PROCESSES {
            let s = self.slot(i);
            let pid = s.pid.load(Ordering::Acquire);
            if pid == PID_FREE || pid == PID_CLAIMING || pid == PID_CLEANING {
                continue;
            }
            if alive(pid, s.start_time.load(Ordering::Acquire)) {
                continue;
            }
            if self.clean_slot(i, pid) {
                freed += 1;
            }
        }
        freed
    }

    /// Frees slot `i` if it still belongs to `pid`.
    fn clean_slot(&self, i: usize, pid: u32) -> bool {
        let s = self.slot(i);
        if s.pid
            .compare_exchange(pid, PID_CLEANING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        let h = self.header();
        for d in 0..MAX_DEVICES {
            let u = s.used[d].swap(0, Ordering::AcqRel);
            if u > 0 {
                h.dev_used[d].fetch_sub(u, Ordering::AcqRel);
            }
            s.contexts[d].store(0, Ordering::Release);
        }
        s.start_time.store(0, Ordering::Release);
        s.pid.store(PID_FREE, Ordering::Release);
        true
    }

    /// Claims a slot for this process. A slot already holding this pid and start time belongs
    /// to this process's image before an `exec` and is emptied first.
    pub fn claim_slot(&self) -> Result<usize, StateError> {
        let (pid, start) = self_identity();
        for i in 0..MAX_PROCESSES {
            let s = self.slot(i);
            if s.pid.load(Ordering::Acquire) == pid && s.start_time.load(Ordering::Acquire) == start
            {
                self.clean_slot(i, pid);
            }
        }
        for attempt in 0..2 {
            for i in 0..MAX_PROCESSES {
                let s = self.slot(i);
                if s.pid
                    .compare_exchange(PID_FREE, PID_CLAIMING, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    for d in 0..MAX_DEVICES {
                        s.used[d].store(0, Ordering::Release);
                        s.contexts[d].store(0, Ordering::Release);
                    }
                    s.start_time.store(start, Ordering::Release);
                    s.pid.store(pid, Ordering::Release);
                    return Ok(i);
                }
            }
            if attempt == 0 {
                self.cleanup_stale();
            }
        }
        Err(StateError::Full {
            path: self.path.clone(),
        })
    }

    /// Returns everything slot `i` holds and frees it, if it belongs to this process.
    pub fn release_slot(&self, i: usize) {
        let pid = std::process::id();
        self.clean_slot(i, pid);
    }

    /// Takes `bytes` of device `dev`'s physical memory for slot `i`. False when the device
    /// would exceed its size (after one sweep for dead processes).
    pub fn try_charge(&self, i: usize, dev: usize, bytes: u64) -> bool {
        let h = self.header();
        let size = h.dev_size[dev].load(Ordering::Relaxed);
        let take = |cur: u64| cur.checked_add(bytes).filter(|&n| n <= size);
        let ok = h.dev_used[dev]
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, take)
            .is_ok()
            || (self.cleanup_stale() > 0
                && h.dev_used[dev]
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, take)
                    .is_ok());
        if ok {
            self.slot(i).used[dev].fetch_add(bytes, Ordering::AcqRel);
        }
        ok
    }

    /// Returns `bytes` of device `dev`'s memory taken by slot `i`.
    pub fn uncharge(&self, i: usize, dev: usize, bytes: u64) {
        let h = self.header();
        self.slot(i).used[dev].fetch_sub(bytes, Ordering::AcqRel);
        h.dev_used[dev].fetch_sub(bytes, Ordering::AcqRel);
    }

    pub fn context_added(&self, i: usize, dev: usize) {
        self.slot(i).contexts[dev].fetch_add(1, Ordering::AcqRel);
    }

    pub fn context_removed(&self, i: usize, dev: usize) {
        self.slot(i).contexts[dev].fetch_sub(1, Ordering::AcqRel);
    }

    pub fn device_size(&self, dev: usize) -> u64 {
        self.header().dev_size[dev].load(Ordering::Acquire)
    }

    /// Physical memory in use on `dev` by all processes.
    pub fn device_used(&self, dev: usize) -> u64 {
        self.header().dev_used[dev].load(Ordering::Acquire)
    }

    /// Live processes with memory or a context on `dev`, in slot order.
    pub fn processes(&self, dev: usize) -> Vec<ProcessUsage> {
        let mut out = Vec::new();
        for i in 0..MAX_PROCESSES {
            let s = self.slot(i);
            let pid = s.pid.load(Ordering::Acquire);
            if pid == PID_FREE || pid == PID_CLAIMING || pid == PID_CLEANING {
                continue;
            }
            let used = s.used[dev].load(Ordering::Acquire);
            let contexts = s.contexts[dev].load(Ordering::Acquire);
            if used > 0 || contexts > 0 {
                out.push(ProcessUsage {
                    pid,
                    used,
                    contexts,
                });
            }
        }
        out
    }

    /// This slot's physical memory on `dev`.
    pub fn slot_used(&self, i: usize, dev: usize) -> u64 {
        self.slot(i).used[dev].load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::size::GIB;

    fn temp_path(name: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!(
            "fragprobe-simgpu-test-{}-{}",
            name,
            std::process::id()
        ));
        let _ = std::fs::remove_file(&p);
        p
    }

    #[test]
    fn charge_respects_device_size_and_cleanup() {
        let path = temp_path("charge");
        let st = SharedState::open(&path).unwrap();
        let spec = DeviceSpec::parse("1x1GiB").unwrap();
        assert_eq!(st.settle_spec(Some(&spec), None).unwrap(), spec);
        let slot = st.claim_slot().unwrap();
        assert!(st.try_charge(slot, 0, GIB / 2));
        assert!(st.try_charge(slot, 0, GIB / 2));
        assert!(!st.try_charge(slot, 0, 512));
        assert_eq!(st.device_used(0), GIB);
        assert_eq!(
            st.processes(0),
            vec![ProcessUsage {
                pid: std::process::id(),
                used: GIB,
                contexts: 0
            }]
        );
        st.uncharge(slot, 0, GIB / 2);
        assert_eq!(st.device_used(0), GIB / 2);
        st.release_slot(slot);
        assert_eq!(st.device_used(0), 0);
        assert!(st.processes(0).is_empty());
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn dead_process_slot_is_reclaimed() {
        let path = temp_path("stale");
        let st = SharedState::open(&path).unwrap();
        st.settle_spec(None, None).unwrap();
        // fake a slot for a pid that cannot exist
        let s = st.slot(5);
        s.pid.store(u32::MAX - 7, Ordering::Release);
        s.start_time.store(1, Ordering::Release);
        s.used[0].store(1000, Ordering::Release);
        st.header().dev_used[0].fetch_add(1000, Ordering::AcqRel);
        assert_eq!(st.cleanup_stale(), 1);
        assert_eq!(st.device_used(0), 0);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn spec_conflict_only_with_live_users() {
        let path = temp_path("spec");
        let st = SharedState::open(&path).unwrap();
        let a = DeviceSpec::parse("2x1GiB").unwrap();
        let b = DeviceSpec::parse("1x2GiB").unwrap();
        st.settle_spec(Some(&a), None).unwrap();
        // nobody uses it: a different spec replaces it
        assert_eq!(st.settle_spec(Some(&b), None).unwrap(), b);
        // unused: no spec means the default
        assert_eq!(st.settle_spec(None, None).unwrap(), DeviceSpec::default());
        assert_eq!(st.settle_spec(Some(&b), None).unwrap(), b);
        let slot = st.claim_slot().unwrap();
        let other = SharedState::open(&path).unwrap();
        // in use: no spec means adopt what is stored
        assert_eq!(other.settle_spec(None, None).unwrap(), b);
        let err = other.settle_spec(Some(&a), None).unwrap_err();
        assert!(err.to_string().contains("FRAGPROBE_SIM_GPU"), "{err}");
        // the owner itself may change it
        assert_eq!(st.settle_spec(Some(&a), Some(slot)).unwrap(), a);
        st.release_slot(slot);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn foreign_file_is_refused() {
        let path = temp_path("foreign");
        std::fs::write(&path, vec![0xABu8; FILE_SIZE]).unwrap();
        let err = SharedState::open(&path).err().unwrap();
        assert!(err.to_string().contains("not a fragprobe"), "{err}");
        let _ = std::fs::remove_file(&path);
    }
}
