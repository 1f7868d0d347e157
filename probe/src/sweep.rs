//! Removes the rings of processes that are gone from a per-user ring directory, without
//! allocating (raw `getdents64` into a stack buffer).
//!
//! Every probed process of a user leaves its ring (101 MiB by default, reserved in full) in
//! the per-user directory, and nobody else removes it when the process runs without
//! `fragprobe run` (whose session directory goes away with the session). So each new ring
//! clears out the dead ones. A ring is dead when both hold:
//! - its owner's lock is free: the probe keeps its ring file open and `flock`ed for its
//!   whole life, and the kernel drops the lock however the process ends. A process in
//!   another pid namespace sharing `/dev/shm` still holds its lock;
//! - no process has its pid (`kill(pid, 0)` fails with `ESRCH`): a host program that closed
//!   every descriptor, and so dropped the lock, still has its pid.
//!
//! A consumer that has the ring mapped keeps reading it after the unlink.
//!
//! A ring still being made (`….ring.new`) is unlocked for the moment between its creation
//! and its maker's `flock`, and a maker in another pid namespace has a pid this process
//! cannot see. So a `.ring.new` file is removed only when, besides the two rules above, it
//! is over [`STALE_NEW_SECS`] old: a maker that crashed in that moment left it behind.

use fragprobe_wire::ring::{parse_ring_file_name, RING_NEW_SUFFIX};

use crate::ringfile::{last_errno, Text};

/// Directory entries looked at per sweep, at most: a start-up never stalls on a huge
/// directory.
const MAX_ENTRIES: usize = 4096;
/// Rings removed per sweep, at most. Freeing a default (101 MiB) tmpfs ring takes a few ms and
/// the sweep runs inside the process's first recorded call; each process adds one ring,
/// so a backlog (left by an older probe, say) still drains, 8 rings per new process.
const MAX_REMOVALS: usize = 8;
/// A `.ring.new` file older than this is not being made any more (making one takes
/// milliseconds).
const STALE_NEW_SECS: i64 = 60;

/// Removes the dead rings in `dir` (see the module documentation).
pub fn dead_rings(dir: &Text) {
    // SAFETY: dir is NUL-terminated.
    let dfd = unsafe {
        libc::open(
            dir.c(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC | libc::O_NOFOLLOW,
        )
    };
    if dfd < 0 {
        return;
    }
    // 8-aligned, as the kernel writes `linux_dirent64` records; 2 KiB of stack.
    let mut buf = [0u64; 256];
    let mut seen = 0;
    let mut removed = 0;
    'read: loop {
        // SAFETY: buf is writable for its whole length; dfd is an open directory.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                dfd,
                buf.as_mut_ptr(),
                core::mem::size_of_val(&buf),
            )
        };
        if n <= 0 {
            break;
        }
        // SAFETY: the kernel filled the first n bytes of buf.
        let bytes = unsafe { core::slice::from_raw_parts(buf.as_ptr() as *const u8, n as usize) };
        let mut off = 0;
        while off + 19 < bytes.len() {
            let reclen = u16::from_ne_bytes([bytes[off + 16], bytes[off + 17]]) as usize;
            let d_type = bytes[off + 18];
            let end = (off + reclen).min(bytes.len());
            // A record is at least its 19-byte header and a NUL; anything else is not what
            // the kernel writes, and the probe does not guess.
            if reclen < 20 {
                break 'read;
            }
            let name = &bytes[off + 19..end];
            let name = &name[..name.iter().position(|&c| c == 0).unwrap_or(name.len())];
            if matches!(d_type, libc::DT_REG | libc::DT_UNKNOWN) {
                let (ring, making) = match name.strip_suffix(RING_NEW_SUFFIX) {
                    Some(ring) => (ring, true),
                    None => (name, false),
                };
                if let Some(pid) = parse_ring_file_name(ring) {
                    // SAFETY: off + 19 < bytes.len() (the loop's condition), so the
                    // pointer stays inside buf.
                    let name_at = unsafe { bytes.as_ptr().add(off + 19) };
                    // SAFETY: name_at is d_name, which the kernel NUL-terminates inside
                    // the record; dfd is open.
                    if gone(pid) && unsafe { remove_if_unlocked(dfd, name_at, making) } {
                        removed += 1;
                        if removed >= MAX_REMOVALS {
                            break 'read;
                        }
                    }
                }
            }
            off += reclen;
            seen += 1;
            if seen >= MAX_ENTRIES {
                break 'read;
            }
        }
    }
    // SAFETY: dfd is ours.
    unsafe { libc::close(dfd) };
}

/// Whether no process has this pid.
fn gone(pid: u32) -> bool {
    let Ok(p) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if p <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(p, 0) != 0 && last_errno() == libc::ESRCH }
}

/// Unlinks `dir/name` when nobody holds its owner's lock (and, for a ring being made, when
/// it is over [`STALE_NEW_SECS`] old); whether it did.
///
/// # Safety
/// `name` must point at a NUL-terminated file name; `dfd` must be an open directory.
unsafe fn remove_if_unlocked(dfd: libc::c_int, name: *const u8, making: bool) -> bool {
    let name = name as *const libc::c_char;
    // SAFETY: per the contract; O_NONBLOCK so a FIFO planted under a ring's name cannot
    // block us.
    let fd = unsafe {
        libc::openat(
            dfd,
            name,
            libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK,
        )
    };
    if fd < 0 {
        return false;
    }
    // SAFETY: fd is ours; an exclusive lock that is granted means no owner holds one.
    unsafe {
        let done = (!making || stale(fd))
            && libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) == 0
            && libc::unlinkat(dfd, name, 0) == 0;
        libc::close(fd);
        done
    }
}

/// Whether the open file `fd` was last changed over [`STALE_NEW_SECS`] ago.
fn stale(fd: libc::c_int) -> bool {
    // SAFETY: both are plain C structs that the calls below fill; zeroes are valid values.
    let (mut st, mut now) = unsafe {
        (
            core::mem::zeroed::<libc::stat>(),
            core::mem::zeroed::<libc::timespec>(),
        )
    };
    // SAFETY: fd is open; st and now are writable and exclusively borrowed.
    let ok = unsafe {
        libc::fstat(fd, &mut st) == 0 && libc::clock_gettime(libc::CLOCK_REALTIME, &mut now) == 0
    };
    ok && now.tv_sec.saturating_sub(st.st_mtime) > STALE_NEW_SECS
}
