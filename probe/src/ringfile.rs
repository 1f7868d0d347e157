//! Creates this process's ring file with plain libc calls (no allocation).
//!
//! Directory: `$FRAGPROBE_RING_DIR` when set (by `fragprobe run`, say: the only one tried
//! then), else the first of `$XDG_RUNTIME_DIR/fragprobe`, `/dev/shm/fragprobe-<uid>`,
//! `/tmp/fragprobe-<uid>` that is private and has room ([`room_for_ring`]). Directories the
//! probe creates are 0700; a per-user default directory that is not owned by the user or
//! is writable by others is refused. The file is `<pid>-<start_ns>.ring` (a process that
//! `exec`s keeps its pid, so the start time keeps the two images apart), mode 0600; it is
//! made as `….ring.new`, locked, reserved, mapped, then renamed, so no sweeper or consumer
//! ever sees it unlocked or half made.

use core::sync::atomic::{AtomicI32, Ordering};

use fragprobe_wire::ring::{ring_dir_candidate, room_for_ring, Ring, RingConfig, RING_NEW_SUFFIX};

/// The ring file's descriptor, kept open for the life of the process with an `flock` on it
/// that tells sweepers its owner lives ([`crate::sweep`]); -1 when there is none.
pub static RING_FD: AtomicI32 = AtomicI32::new(-1);

/// A NUL-terminated path or message under construction in a fixed buffer (the probe does
/// not allocate). A push that does not fit is refused whole.
pub struct Text {
    buf: [u8; 768],
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
            buf: [0; 768],
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
        self.push(fragprobe_wire::format::fmt_u64(v, &mut tmp))
    }
    /// `len` bytes as whole MiB, rounded up ("19 MiB").
    fn push_mib(&mut self, len: usize) -> bool {
        self.push_u64((len as u64).div_ceil(1 << 20)) && self.push(b" MiB")
    }
    /// Keeps the first `n` bytes.
    fn truncate(&mut self, n: usize) {
        if n < self.len {
            self.len = n;
            self.buf[n] = 0;
        }
    }
    fn clear(&mut self) {
        self.truncate(0);
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
/// The error a file system too small to share with a ring gets ([`room_for_ring`]).
const TOO_SMALL: i32 = -2;

/// Makes `dir` (one level) and checks it is a directory, and (`strict`) a private one of
/// ours. The error number says why not.
fn private_dir(dir: &Text, uid: u32, strict: bool) -> Result<(), i32> {
    // SAFETY: dir is NUL-terminated.
    let made = unsafe { libc::mkdir(dir.c(), 0o700) };
    let mkdir_err = if made == 0 { 0 } else { last_errno() };
    // SAFETY: st is plain old data; the path is NUL-terminated.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::lstat(dir.c(), &mut st) } != 0 {
        // Why mkdir failed says more than "no such directory".
        return Err(if mkdir_err != 0 && mkdir_err != libc::EEXIST {
            mkdir_err
        } else {
            last_errno()
        });
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return Err(libc::ENOTDIR);
    }
    if strict && (st.st_uid != uid || st.st_mode & 0o022 != 0) {
        return Err(NOT_PRIVATE);
    }
    Ok(())
}

/// Whether the file system holding `dir` should take a ring of `len` bytes. (The probe
/// links only `fragprobe_wire`; the consumer's `ring::fs_space` is in `fragprobe_shared`.)
fn has_room(dir: &Text, len: usize) -> Result<(), i32> {
    // SAFETY: st is plain old data that statvfs fills.
    let mut st: libc::statvfs = unsafe { core::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a valid out pointer.
    if unsafe { libc::statvfs(dir.c(), &mut st) } != 0 {
        // Not measurable: let the reservation decide.
        return Ok(());
    }
    let unit = st.f_frsize as u64;
    let total = (st.f_blocks as u64).saturating_mul(unit);
    let free = (st.f_bavail as u64).saturating_mul(unit);
    if room_for_ring(len as u64, total, free) {
        Ok(())
    } else {
        Err(TOO_SMALL)
    }
}

/// Whether `e` says there was not enough space.
fn is_space(e: i32) -> bool {
    matches!(
        e,
        libc::ENOSPC | libc::EDQUOT | libc::EFBIG | libc::ENOMEM | TOO_SMALL
    )
}

/// Creates, sizes and maps this process's ring (see the module documentation). A
/// directory named by `FRAGPROBE_RING_DIR` is the only one tried: whoever set it (`fragprobe
/// run`) reads rings only there, and has already made sure it has room.
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
    let in_session = env(c"FRAGPROBE_SESSION").is_some();
    let mut buf = [0u8; 512];
    // The failure to report when no candidate works: the first for want of space (it says
    // most about what to do), else the last; by candidate index, to name it again after.
    let mut fail: Option<(usize, i32)> = None;
    let mut dir = Text::new();
    let mut path = Text::new();
    for i in 0.. {
        let Some(cand) = ring_dir_candidate(i, uid, over, xdg, &mut buf) else {
            break;
        };
        dir.clear();
        // The directory named by FRAGPROBE_RING_DIR is the caller's choice; the per-user
        // defaults must be private, and are shared with the program (rule of room).
        let strict = !(i == 0 && over.is_some());
        let made = if dir.push(cand) {
            private_dir(&dir, uid, strict)
        } else {
            Err(libc::ENAMETOOLONG)
        }
        .and_then(|()| {
            if strict {
                // A per-user directory collects the rings of every probed process of this
                // user: clear out those whose process is gone before measuring it.
                crate::sweep::dead_rings(&dir);
                has_room(&dir, len)?;
            }
            map_ring_file(&dir, pid, start_ns, len, &mut path)
        });
        match made {
            Ok((base, fd)) => {
                // SAFETY: base..base+len is a fresh, zero-filled, writable shared mapping
                // we own, every page of it backed.
                match unsafe { Ring::init(base, len, &cfg, pid, start_ns) } {
                    Ok(ring) => {
                        RING_FD.store(fd, Ordering::Release);
                        return Some(ring);
                    }
                    Err(_) => {
                        // SAFETY: the mapping, descriptor and file are ours and unused.
                        unsafe {
                            libc::munmap(base as *mut libc::c_void, len);
                            libc::close(fd);
                            libc::unlink(path.c());
                        }
                        why.push(b"fragprobe: ring set-up failed; probe off\n");
                        return None;
                    }
                }
            }
            Err(e) => {
                if !fail.is_some_and(|(_, f)| is_space(f)) {
                    fail = Some((i, e));
                }
            }
        }
        if over.is_some() {
            break;
        }
    }
    let named = fail.and_then(|(i, e)| Some((ring_dir_candidate(i, uid, over, xdg, &mut buf)?, e)));
    match named {
        None => {
            why.push(b"fragprobe: no ring directory (set FRAGPROBE_RING_DIR); probe off\n");
        }
        Some((dir, errno)) => {
            why.push(b"fragprobe: cannot make a ring of ");
            why.push_mib(len);
            why.push(b" in ");
            why.push(dir);
            why.push(b" (");
            why.push(errno_name(errno));
            why.push(b"); probe off");
            why.push(match (is_space(errno), in_session) {
                (true, true) => b". Free space there, or lower FRAGPROBE_RING_CAPACITY / FRAGPROBE_LIVE_CAPACITY\n".as_slice(),
                (true, false) => b". Free space there, point FRAGPROBE_RING_DIR at a roomier directory, or lower FRAGPROBE_RING_CAPACITY / FRAGPROBE_LIVE_CAPACITY\n",
                (false, true) => b"\n",
                (false, false) => b". Point FRAGPROBE_RING_DIR at a directory of yours\n",
            });
        }
    }
    None
}

/// Makes `<dir>/<pid>-<start_ns>.ring` (its path left in `path`): created as `….ring.new`,
/// locked at once, reserved in full, mapped shared, then renamed into place. Returns the
/// mapping and the open, locked descriptor (never 0, 1 or 2: a host that closed its
/// standard streams must not print into the ring). On failure nothing is left behind and
/// the error number says why.
fn map_ring_file(
    dir: &Text,
    pid: u32,
    start_ns: u64,
    len: usize,
    path: &mut Text,
) -> Result<(*mut u8, libc::c_int), i32> {
    path.clear();
    if !(path.push(dir.bytes())
        && path.push(b"/")
        && path.push_u64(pid as u64)
        && path.push(b"-")
        && path.push_u64(start_ns)
        && path.push(b".ring"))
    {
        return Err(libc::ENAMETOOLONG);
    }
    let final_len = path.bytes().len();
    if !path.push(RING_NEW_SUFFIX) {
        return Err(libc::ENAMETOOLONG);
    }
    let flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC | libc::O_NOFOLLOW;
    // SAFETY: path is NUL-terminated.
    let mut fd = unsafe { libc::open(path.c(), flags, 0o600) };
    if fd < 0 {
        return Err(last_errno());
    }
    if fd < 3 {
        // SAFETY: fd is ours; F_DUPFD_CLOEXEC returns a new descriptor >= 3 or -1.
        let high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
        // SAFETY: fd is ours.
        unsafe { libc::close(fd) };
        if high < 0 {
            let e = last_errno();
            // SAFETY: path is NUL-terminated.
            unsafe { libc::unlink(path.c()) };
            return Err(e);
        }
        fd = high;
    }
    // The lock says the owner lives (see crate::sweep). A failed lock only means a
    // sweeper will rely on the pid alone.
    // SAFETY: fd is ours.
    unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) };
    let mut reserved = libc::EINTR;
    for _ in 0..16 {
        // SAFETY: fd is a file we just created; posix_fallocate returns the error number.
        reserved = unsafe { libc::posix_fallocate(fd, 0, len as libc::off_t) };
        // Older kernels give up a tmpfs reservation on any pending signal (a profiler's
        // timer, say); it is safe to ask again.
        if reserved != libc::EINTR {
            break;
        }
    }
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
    let renamed = if mapped == libc::MAP_FAILED {
        Err(if reserved != 0 {
            reserved
        } else {
            last_errno()
        })
    } else {
        let mut to = Text::new();
        to.push(&path.bytes()[..final_len]);
        // SAFETY: both paths are NUL-terminated.
        if unsafe { libc::rename(path.c(), to.c()) } == 0 {
            path.truncate(final_len);
            Ok(())
        } else {
            let e = last_errno();
            // SAFETY: the mapping is ours and unused.
            unsafe { libc::munmap(mapped, len) };
            Err(e)
        }
    };
    match renamed {
        Ok(()) => Ok((mapped as *mut u8, fd)),
        Err(e) => {
            // SAFETY: fd is ours; path (the `.new` name) is NUL-terminated.
            unsafe {
                libc::close(fd);
                libc::unlink(path.c());
            }
            Err(e)
        }
    }
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
        libc::EINTR => b"interrupted again and again",
        libc::EACCES | libc::EPERM => b"permission denied",
        libc::EROFS => b"read-only file system",
        libc::EEXIST => b"file exists",
        libc::ENAMETOOLONG => b"path too long",
        libc::EOPNOTSUPP => b"not supported by this file system",
        libc::ENOTDIR => b"not a directory",
        libc::ENOENT => b"no such directory",
        libc::EMFILE | libc::ENFILE => b"too many open files",
        NOT_PRIVATE => {
            b"not a private directory of this user: owned by another or writable by others"
        }
        TOO_SMALL => b"a ring may take at most an eighth of its file system and must leave a quarter of it, or 1 GiB, free",
        _ => b"unexpected error",
    }
}
