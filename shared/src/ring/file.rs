//! Ring files for consumers (and tests): map an existing ring, create one, list a directory.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::{parse_ring_file_name, ring_dir_candidate, Ring, RingConfig, RingError, EXITED, MAGIC};

/// A ring file mapped read-write in this process.
pub struct RingFile {
    ring: Ring,
    path: PathBuf,
    // Watches the mapping for truncation; dropped before the mapping goes.
    watch: super::fault::Watch,
    file: File,
    // Keeps the mapping alive; `ring` points into it. Declared after `ring` so it is
    // dropped last.
    map: memmap2::MmapMut,
}

impl fmt::Debug for RingFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RingFile")
            .field("path", &self.path)
            .field("ring", &self.ring)
            .finish()
    }
}

/// Why a ring file could not be opened or created. The message names the file.
#[derive(Debug)]
pub enum RingFileError {
    /// The file could not be opened, sized or mapped.
    Io {
        /// The ring file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The file is not a usable ring.
    Ring {
        /// The ring file.
        path: PathBuf,
        /// What is wrong with it.
        err: RingError,
    },
}

impl fmt::Display for RingFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RingFileError::Io { path, source } => {
                write!(f, "cannot use ring file {}: {source}", path.display())
            }
            RingFileError::Ring { path, err } => write!(f, "{}: {err}", path.display()),
        }
    }
}

/// The message already says what the cause said, so no `source` is given: a chain printer
/// (`{:#}`) would print the cause twice.
impl std::error::Error for RingFileError {}

impl RingFile {
    /// Maps an existing ring file read-write and validates it.
    pub fn open(path: impl AsRef<Path>) -> Result<RingFile, RingFileError> {
        let path = path.as_ref().to_path_buf();
        let io = |source| RingFileError::Io {
            path: path.clone(),
            source,
        };
        // O_NONBLOCK: a FIFO planted under a ring's name must not hang us in open().
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(io)?;
        if !file.metadata().map_err(io)?.is_file() {
            return Err(io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file, so not a ring",
            )));
        }
        // SAFETY: the mapping is shared with the producer, which only writes it through
        // `Ring`; we only access it through `Ring` as well. A ring truncated under us by
        // another process would fault on access: readers check [`RingFile::intact`]
        // before each pass over the mapping.
        let mut map = unsafe { memmap2::MmapMut::map_mut(&file) }.map_err(io)?;
        let len = map.len();
        // SAFETY: the mapping is page-aligned, `len` bytes long and lives in `self.map`
        // as long as `ring` does.
        let ring =
            unsafe { Ring::attach(map.as_mut_ptr(), len) }.map_err(|err| RingFileError::Ring {
                path: path.clone(),
                err,
            })?;
        Ok(RingFile {
            ring,
            path,
            watch: super::fault::watch(map.as_ptr(), len),
            file,
            map,
        })
    }

    /// Creates (or replaces) a ring file with mode 0600 and initialises it for `pid`, with
    /// the current CLOCK_MONOTONIC time as start.
    pub fn create(
        path: impl AsRef<Path>,
        cfg: &RingConfig,
        pid: u32,
    ) -> Result<RingFile, RingFileError> {
        let path = path.as_ref().to_path_buf();
        let io = |source| RingFileError::Io {
            path: path.clone(),
            source,
        };
        let file: File = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .map_err(io)?;
        file.set_len(cfg.file_len() as u64).map_err(io)?;
        // SAFETY: we just created and sized the file; the mapping is only accessed via Ring.
        let mut map = unsafe { memmap2::MmapMut::map_mut(&file) }.map_err(io)?;
        let len = map.len();
        // SAFETY: the mapping is zero-filled (fresh set_len), page-aligned, `len` bytes long,
        // and lives in `self.map` as long as `ring` does.
        let ring = unsafe { Ring::init(map.as_mut_ptr(), len, cfg, pid, monotonic_ns()) }.map_err(
            |err| RingFileError::Ring {
                path: path.clone(),
                err,
            },
        )?;
        Ok(RingFile {
            ring,
            path,
            watch: super::fault::watch(map.as_ptr(), len),
            file,
            map,
        })
    }

    /// The ring.
    pub fn ring(&self) -> &Ring {
        &self.ring
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the file still backs the whole mapping: false once another process has
    /// truncated it (or a read past its new end was absorbed, see `ring::fault`). A reader
    /// stops using a ring that is not intact and reports it as damaged.
    pub fn intact(&self) -> bool {
        !self.watch.damaged()
            && self
                .file
                .metadata()
                .is_ok_and(|m| m.len() >= self.map.len() as u64)
    }
}

impl std::ops::Deref for RingFile {
    type Target = Ring;
    fn deref(&self) -> &Ring {
        &self.ring
    }
}

/// A ring file found in a ring directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingInfo {
    /// The producing process.
    pub pid: u32,
    /// The ring file.
    pub path: PathBuf,
    /// Whether the process still runs and has not marked the ring exited.
    pub alive: bool,
}

/// The ring files in `dir` (files named `<pid>.ring` that start with the ring magic),
/// sorted by pid. A missing or unreadable directory gives an empty list.
pub fn list_rings(dir: impl AsRef<Path>) -> Vec<RingInfo> {
    let Ok(rd) = std::fs::read_dir(dir.as_ref()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in rd.flatten() {
        let name = entry.file_name();
        let Some(pid) = parse_ring_file_name(name.as_bytes()) else {
            continue;
        };
        // Only regular files can be rings; opening a FIFO would block.
        if !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        let path = entry.path();
        let mut head = [0u8; 64];
        let ok = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .and_then(|mut f| f.read_exact(&mut head))
            .is_ok();
        if !ok || head[0..8] != MAGIC {
            continue;
        }
        let flags = u32::from_le_bytes([head[48], head[49], head[50], head[51]]);
        let alive = flags & EXITED == 0 && process_exists(pid);
        out.push(RingInfo { pid, path, alive });
    }
    out.sort_by_key(|r| r.pid);
    out
}

/// Whether a process has this pid (one we may not signal counts).
pub fn process_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill with signal 0 only checks whether the process exists.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// The ring directories to search, in order of preference, for the current user and
/// environment (see [`ring_dir_candidate`]).
pub fn ring_dirs() -> Vec<PathBuf> {
    dirs(std::env::var_os(super::RING_DIR_ENV))
}

/// The per-user ring directories alone, in the probe's order: what `FRAGPROBE_RING_DIR`
/// would override.
pub fn user_ring_dirs() -> Vec<PathBuf> {
    dirs(None)
}

fn dirs(env: Option<std::ffi::OsString>) -> Vec<PathBuf> {
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let xdg = std::env::var_os("XDG_RUNTIME_DIR");
    let mut out = Vec::new();
    let mut buf = vec![0u8; 4096 + env.as_ref().map_or(0, |e| e.len())];
    for i in 0.. {
        let Some(p) = ring_dir_candidate(
            i,
            uid,
            env.as_ref().map(|e| e.as_bytes()),
            xdg.as_ref().map(|e| e.as_bytes()),
            &mut buf,
        ) else {
            break;
        };
        out.push(PathBuf::from(std::ffi::OsStr::from_bytes(p)));
    }
    out
}

/// `(total, free)` bytes of the file system holding `path`, free as an unprivileged user
/// may still write; `None` when it cannot be measured.
pub fn fs_space(path: &core::ffi::CStr) -> Option<(u64, u64)> {
    // SAFETY: st is plain old data that statvfs fills.
    let mut st: libc::statvfs = unsafe { core::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a valid out pointer.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let unit = st.f_frsize as u64;
    Some((
        (st.f_blocks as u64).saturating_mul(unit),
        (st.f_bavail as u64).saturating_mul(unit),
    ))
}

/// CLOCK_MONOTONIC now, in ns (the clock the probe stamps records with).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}
