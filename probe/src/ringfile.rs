//! Creates this process's ring file with plain libc calls (no allocation).
//!
//! Directory, first that applies and has room for the whole ring: `$FRAGPROBE_RING_DIR`
//! (set by `fragprobe run`; the only one tried when set), `$XDG_RUNTIME_DIR/fragprobe`,
//! `/dev/shm/fragprobe-<uid>`, `/tmp/fragprobe-<uid>`.
//! Directories the probe creates are 0700; a per-user default directory that is not
//! owned by the user or is writable by others is refused. The file is
//! `<pid>-<start_ns>.ring`, created exclusively with mode 0600 (a process that `exec`s
//! keeps its pid, so the start time keeps the two images apart).

use fragprobe_shared::ring::{ring_dir_candidate, Ring, RingConfig};

/// A NUL-terminated path or message under construction in a fixed buffer (the probe does
/// not allocate). A push that does not fit is refused whole.
pub struct Text {
    buf: [u8; 1024],
    len: usize,
}

impl Default for Text {
    fn default() -> Text {
        Text::new()
    }
}

impl Text {
    /// An empty text.
    pub fn new() -> Text {
        Text {
            buf: [0; 1024],
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
    /// `len` bytes as whole MiB, rounded up ("19 MiB").
    fn push_mib(&mut self, len: usize) -> bool {
        self.push_u64((len as u64).div_ceil(1 << 20)) && self.push(b" MiB")
    }
    /// The text as a NUL-terminated C string.
    pub fn c(&self) -> *const libc::c_char {
        self.buf.as_ptr() as *const libc::c_char
    }
    /// The text, without its NUL.
    pub fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
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

/// The error a directory that is someone else's, or writable by others, gets.
const NOT_PRIVATE: i32 = -1;

/// Makes `dir` (one level) and checks it is a directory, and (`strict`) a private one of
/// ours. The error number says why not.
fn private_dir(dir: &Text, uid: u32, strict: bool) -> Result<(), i32> {
    // SAFETY: dir is NUL-terminated.
    unsafe { libc::mkdir(dir.c(), 0o700) };
    // SAFETY: st is plain old data; the path is NUL-terminated.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::lstat(dir.c(), &mut st) } != 0 {
        return Err(last_errno());
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return Err(libc::ENOTDIR);
    }
    if strict && (st.st_uid != uid || st.st_mode & 0o022 != 0) {
        return Err(NOT_PRIVATE);
    }
    Ok(())
}

/// Creates, sizes and maps this process's ring in the first candidate directory
/// ([`ring_dir_candidate`]: the order every consumer searches) that is private and has room
/// for it. A directory named by `FRAGPROBE_RING_DIR` is the only one tried: whoever set it
/// (`fragprobe run`) reads rings only there.
///
/// The file's blocks are reserved (`posix_fallocate`) before it is mapped. A sparse file
/// would be cheaper, but a store into a page that a full tmpfs cannot back is a SIGBUS in
/// the host, and Docker's default `/dev/shm` is 64 MiB.
///
/// `None` when there is no ring; `why` then holds the one line to say on stderr.
pub fn create(pid: u32, start_ns: u64, why: &mut Text) -> Option<Ring> {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let cfg = RingConfig::from_env_values(
        env_u64(c"FRAGPROBE_RING_CAPACITY"),
        env_u64(c"FRAGPROBE_LIVE_CAPACITY"),
    );
    let len = cfg.file_len();
    if over_file_size_limit(len) {
        // Growing a file past RLIMIT_FSIZE raises SIGXFSZ, which kills the host.
        why.push(b"fragprobe: a ring of ");
        why.push_mib(len);
        why.push(b" is over this process's file-size limit (ulimit -f); probe off\n");
        return None;
    }
    let over = env(c"FRAGPROBE_RING_DIR");
    let xdg = env(c"XDG_RUNTIME_DIR");
    let mut buf = [0u8; 512];
    // The last failure, to say where and why when no candidate worked.
    let mut last: Option<(Text, i32)> = None;
    for i in 0.. {
        let Some(cand) = ring_dir_candidate(i, uid, over, xdg, &mut buf) else {
            break;
        };
        let mut dir = Text::new();
        // The directory named by FRAGPROBE_RING_DIR is the caller's choice; the per-user
        // defaults must be private.
        let strict = !(i == 0 && over.is_some());
        let usable = if dir.push(cand) {
            private_dir(&dir, uid, strict)
        } else {
            Err(libc::ENAMETOOLONG)
        };
        match usable.and_then(|()| map_ring_file(&dir, pid, start_ns, len)) {
            Ok(base) => {
                if strict {
                    // A per-user directory collects the rings of every probed process of
                    // this user: clear out those whose process is gone.
                    crate::sweep::dead_rings(&dir);
                }
                // SAFETY: base..base+len is a fresh, zero-filled, writable shared mapping
                // we own, every page of it backed.
                let ring = unsafe { Ring::init(base, len, &cfg, pid, start_ns) };
                if ring.is_err() {
                    why.push(b"fragprobe: ring set-up failed; probe off\n");
                }
                return ring.ok();
            }
            Err(errno) => last = Some((dir, errno)),
        }
        if over.is_some() {
            break;
        }
    }
    match last {
        None => {
            why.push(b"fragprobe: no ring directory (set FRAGPROBE_RING_DIR); probe off\n");
        }
        Some((dir, errno)) => {
            why.push(b"fragprobe: cannot make a ring of ");
            why.push_mib(len);
            why.push(b" in ");
            why.push(dir.bytes());
            why.push(b" (");
            why.push(errno_name(errno));
            if matches!(
                errno,
                libc::ENOSPC | libc::EDQUOT | libc::EFBIG | libc::ENOMEM
            ) {
                why.push(b"); probe off. Free space there, point FRAGPROBE_RING_DIR at a roomier directory, or lower FRAGPROBE_RING_CAPACITY / FRAGPROBE_LIVE_CAPACITY\n");
            } else {
                why.push(b"); probe off. Point FRAGPROBE_RING_DIR at a directory of yours\n");
            }
        }
    }
    None
}

/// Creates `<dir>/<pid>-<start_ns>.ring`, reserves `len` bytes for it and maps it shared.
/// On failure the file is gone and the error number says why.
fn map_ring_file(dir: &Text, pid: u32, start_ns: u64, len: usize) -> Result<*mut u8, i32> {
    let mut path = Text::new();
    if !(path.push(dir.bytes())
        && path.push(b"/")
        && path.push_u64(pid as u64)
        && path.push(b"-")
        && path.push_u64(start_ns)
        && path.push(b".ring"))
    {
        return Err(libc::ENAMETOOLONG);
    }
    let flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC | libc::O_NOFOLLOW;
    // SAFETY: path is NUL-terminated.
    let fd = unsafe { libc::open(path.c(), flags, 0o600) };
    if fd < 0 {
        return Err(last_errno());
    }
    // SAFETY: fd is a file we just created; posix_fallocate returns the error number.
    let reserved = unsafe { libc::posix_fallocate(fd, 0, len as libc::off_t) };
    let mapped = if reserved == 0 {
        // SAFETY: mapping a file of exactly `len` bytes, all of them allocated, shared,
        // read-write.
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
    if mapped == libc::MAP_FAILED {
        let err = if reserved != 0 {
            reserved
        } else {
            last_errno()
        };
        // SAFETY: fd is ours; path is NUL-terminated.
        unsafe {
            libc::close(fd);
            libc::unlink(path.c());
        }
        return Err(err);
    }
    // The descriptor stays open for the life of the process, holding a lock that says the
    // ring's owner lives (see [`crate::sweep`]): the kernel lets go of it however the
    // process ends. A failed lock only means a sweeper will rely on the pid alone.
    // SAFETY: fd is ours.
    unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) };
    Ok(mapped as *mut u8)
}

/// Whether a file of `len` bytes is over this process's RLIMIT_FSIZE.
fn over_file_size_limit(len: usize) -> bool {
    // SAFETY: lim is plain old data that getrlimit fills.
    let mut lim: libc::rlimit = unsafe { core::mem::zeroed() };
    // SAFETY: a valid resource and a valid pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut lim) } != 0 {
        return false;
    }
    lim.rlim_cur != libc::RLIM_INFINITY && (len as u64) > lim.rlim_cur
}

/// This thread's `errno`.
pub fn last_errno() -> i32 {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() }
}

/// A short name for the errors creating a ring can meet (strerror may allocate).
fn errno_name(e: i32) -> &'static [u8] {
    match e {
        libc::ENOSPC => b"no space left on device",
        libc::EDQUOT => b"disk quota exceeded",
        libc::EFBIG => b"file too large",
        libc::ENOMEM => b"out of memory",
        libc::EACCES | libc::EPERM => b"permission denied",
        libc::EROFS => b"read-only file system",
        libc::EEXIST => b"file exists",
        libc::ENAMETOOLONG => b"path too long",
        libc::EOPNOTSUPP => b"not supported by this file system",
        libc::ENOTDIR => b"not a directory",
        libc::ENOENT => b"no such directory",
        NOT_PRIVATE => {
            b"not a private directory of this user: owned by another or writable by others"
        }
        _ => b"unexpected error",
    }
}
