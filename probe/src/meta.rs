//! The process description written once when recording starts, and the exit record.
//!
//! Built in a static buffer (only the thread that starts the probe touches it) with
//! `MetaWriter`; the command line is read from `/proc/self/cmdline` with plain syscalls.

use core::cell::UnsafeCell;

use fragprobe_wire::format::{EventKind, MetaKind, MetaWriter, DEVICE_UNKNOWN};
use fragprobe_wire::ring::Ring;

use crate::record::{synthetic, Seen};

struct Scratch(UnsafeCell<[u8; 16384]>, UnsafeCell<[u8; 8192]>);
// SAFETY: used only by `write_process_start`, which runs on the single thread that won
// the start-up exchange (state.rs), never concurrently.
unsafe impl Sync for Scratch {}
static SCRATCH: Scratch = Scratch(UnsafeCell::new([0; 16384]), UnsafeCell::new([0; 8192]));

/// Environment variables copied into the process description when set.
pub const ENV_KEYS: [&core::ffi::CStr; 8] = [
    c"CUDA_VISIBLE_DEVICES",
    c"PYTORCH_CUDA_ALLOC_CONF",
    c"RANK",
    c"LOCAL_RANK",
    c"WORLD_SIZE",
    c"LOCAL_WORLD_SIZE",
    c"FRAGPROBE_LABEL",
    c"FRAGPROBE_SESSION",
];

pub(crate) fn read_file(path: &core::ffi::CStr, buf: &mut [u8]) -> usize {
    // SAFETY: path is NUL-terminated.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return 0;
    }
    let mut n = 0;
    while n < buf.len() {
        // SAFETY: writing into the unused tail of buf.
        let r = unsafe {
            libc::read(
                fd,
                buf[n..].as_mut_ptr() as *mut libc::c_void,
                buf.len() - n,
            )
        };
        if r <= 0 {
            break;
        }
        n += r as usize;
    }
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    n
}

fn cstr_field(w: &mut MetaWriter<'_>, key: &[u8], p: *const libc::c_char) {
    if !p.is_null() {
        // SAFETY: p is a NUL-terminated string owned by libc.
        w.field(key, unsafe { core::ffi::CStr::from_ptr(p) }.to_bytes());
    }
}

/// Writes the ProcessStart record with its description.
pub fn write_process_start(ring: &Ring) {
    // SAFETY: see Scratch: only the starting thread gets here.
    let (buf, cmd) = unsafe { (&mut *SCRATCH.0.get(), &mut *SCRATCH.1.get()) };
    let cmd_len = read_file(c"/proc/self/cmdline", cmd);
    let cmd = &cmd[..cmd_len.saturating_sub(1)];
    let mut host = [0u8; 256];
    // SAFETY: host is writable for its length.
    let host_len =
        if unsafe { libc::gethostname(host.as_mut_ptr() as *mut libc::c_char, host.len()) } == 0 {
            host.iter().position(|&c| c == 0).unwrap_or(0)
        } else {
            0
        };
    let mut exe = [0u8; 1024];
    // SAFETY: exe is writable for its length; readlink does not NUL-terminate.
    let exe_len = unsafe {
        libc::readlink(
            c"/proc/self/exe".as_ptr(),
            exe.as_mut_ptr() as *mut libc::c_char,
            exe.len(),
        )
    }
    .max(0) as usize;
    // SAFETY: getppid has no preconditions.
    let ppid = unsafe { libc::getppid() } as u64;

    let mut w = MetaWriter::new(buf, MetaKind::ProcessInfo);
    w.field_u64(b"pid", crate::state::pid() as u64)
        .field_u64(b"ppid", ppid)
        .field_u64(b"start_ns", ring.start_ns())
        .field(b"hostname", &host[..host_len])
        .field(b"exe", &exe[..exe_len]);
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: now is a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut now) };
    w.field_u64(
        b"start_unix_ns",
        (now.tv_sec as u64)
            .wrapping_mul(1_000_000_000)
            .wrapping_add(now.tv_nsec as u64),
    );
    for k in ENV_KEYS {
        // SAFETY: k is NUL-terminated.
        cstr_field(&mut w, k.to_bytes(), unsafe { libc::getenv(k.as_ptr()) });
    }
    // Where the records' durations come from (see crate::clock).
    w.field(b"dur_clock", crate::clock::source_name());
    w.field(b"cmdline", cmd);
    let (len, _) = w.finish();
    let meta = ring.write_meta(&buf[..len]).unwrap_or(0);
    synthetic(
        ring,
        EventKind::ProcessStart,
        &Seen {
            aux: ppid,
            ..Seen::default()
        },
        DEVICE_UNKNOWN,
        meta,
    );
}

/// Writes the ProcessExit record: what the live table still holds.
pub fn write_process_exit(ring: &Ring) {
    let (count, bytes) = ring.live().totals();
    synthetic(
        ring,
        EventKind::ProcessExit,
        &Seen {
            size: bytes,
            aux: count,
            ..Seen::default()
        },
        DEVICE_UNKNOWN,
        0,
    );
    ring.set_flag(fragprobe_wire::ring::EXITED);
}
