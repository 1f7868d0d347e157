//! Creates this process's ring file with plain libc calls (no allocation).
//!
//! Directory, first that applies: `$FRAGPROBE_RING_DIR` (set by `fragprobe run`),
//! `$XDG_RUNTIME_DIR/fragprobe`, `/dev/shm/fragprobe-<uid>`, `/tmp/fragprobe-<uid>`.
//! Directories the probe creates are 0700; a per-user default directory that is not
//! owned by the user or is writable by others is refused. The file is
//! `<pid>-<start_ns>.ring`, created exclusively with mode 0600 (a process that `exec`s
//! keeps its pid, so the start time keeps the two images apart).

use fragprobe_shared::ring::{ring_dir_candidate, Ring, RingConfig};

/// A NUL-terminated path under construction in a fixed buffer.
struct PathBuf {
    buf: [u8; 512],
    len: usize,
}

impl PathBuf {
    fn new() -> PathBuf {
        PathBuf {
            buf: [0; 512],
            len: 0,
        }
    }
    fn push(&mut self, s: &[u8]) -> bool {
        if self.len + s.len() + 1 > self.buf.len() {
            return false;
        }
        self.buf[self.len..self.len + s.len()].copy_from_slice(s);
        self.len += s.len();
        self.buf[self.len] = 0;
        true
    }
    fn push_u64(&mut self, v: u64) -> bool {
        let mut tmp = [0u8; 20];
        self.push(fragprobe_shared::format::fmt_u64(v, &mut tmp))
    }
    fn c(&self) -> *const libc::c_char {
        self.buf.as_ptr() as *const libc::c_char
    }
}

fn env(name: &core::ffi::CStr) -> Option<&'static [u8]> {
    // SAFETY: name is NUL-terminated; getenv returns NULL or a NUL-terminated string that
    // stays valid while the environment is not modified (we copy it out at once).
    let p = unsafe { libc::getenv(name.as_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: p is a NUL-terminated C string.
    let s = unsafe { core::ffi::CStr::from_ptr(p) }.to_bytes();
    (!s.is_empty()).then_some(s)
}

fn env_u64(name: &core::ffi::CStr) -> Option<u64> {
    let s = env(name)?;
    let mut v: u64 = 0;
    for c in s {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add((c - b'0') as u64)?;
    }
    Some(v)
}

/// Makes `dir` (one level) and checks it is a private directory of ours.
fn private_dir(dir: &PathBuf, uid: u32, strict: bool) -> bool {
    // SAFETY: dir is NUL-terminated.
    unsafe { libc::mkdir(dir.c(), 0o700) };
    // SAFETY: st is plain old data; the path is NUL-terminated.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::lstat(dir.c(), &mut st) } != 0 {
        return false;
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return false;
    }
    !strict || (st.st_uid == uid && st.st_mode & 0o022 == 0)
}

/// The first usable directory of the shared candidate list
/// ([`ring_dir_candidate`]: the same order every consumer searches).
fn ring_dir(uid: u32) -> Option<PathBuf> {
    let over = env(c"FRAGPROBE_RING_DIR");
    let xdg = env(c"XDG_RUNTIME_DIR");
    let mut buf = [0u8; 512];
    for i in 0.. {
        let cand = ring_dir_candidate(i, uid, over, xdg, &mut buf)?;
        let mut p = PathBuf::new();
        // The directory named by FRAGPROBE_RING_DIR is the caller's choice; the per-user
        // defaults must be private.
        let strict = !(i == 0 && over.is_some());
        if p.push(cand) && private_dir(&p, uid, strict) {
            return Some(p);
        }
    }
    None
}

/// Creates, sizes and maps this process's ring.
pub fn create(pid: u32, start_ns: u64) -> Result<Ring, &'static [u8]> {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let mut path = ring_dir(uid).ok_or(
        &b"fragprobe: no private ring directory (set FRAGPROBE_RING_DIR); probe off\n"[..],
    )?;
    if !(path.push(b"/")
        && path.push_u64(pid as u64)
        && path.push(b"-")
        && path.push_u64(start_ns)
        && path.push(b".ring"))
    {
        return Err(b"fragprobe: ring path too long; probe off\n");
    }
    let cfg = RingConfig::from_env_values(
        env_u64(c"FRAGPROBE_RING_CAPACITY"),
        env_u64(c"FRAGPROBE_LIVE_CAPACITY"),
    );
    let len = cfg.file_len();
    let flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC | libc::O_NOFOLLOW;
    // SAFETY: path is NUL-terminated.
    let fd = unsafe { libc::open(path.c(), flags, 0o600) };
    if fd < 0 {
        return Err(b"fragprobe: cannot create the ring file; probe off\n");
    }
    // SAFETY: fd is a file we just created.
    let sized = unsafe { libc::ftruncate(fd, len as libc::off_t) } == 0;
    let base = if sized {
        // SAFETY: mapping a file of exactly `len` bytes, shared, read-write.
        unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        }
    } else {
        libc::MAP_FAILED
    };
    // SAFETY: fd is ours; the mapping (if any) stays valid after close.
    unsafe { libc::close(fd) };
    if base == libc::MAP_FAILED {
        // SAFETY: path is NUL-terminated.
        unsafe { libc::unlink(path.c()) };
        return Err(b"fragprobe: cannot map the ring file; probe off\n");
    }
    // SAFETY: base..base+len is a fresh, zero-filled, writable shared mapping we own.
    unsafe { Ring::init(base as *mut u8, len, &cfg, pid, start_ns) }
        .map_err(|_| &b"fragprobe: ring set-up failed; probe off\n"[..])
}
