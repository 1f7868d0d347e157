//! Where ring files live and what they are called, as allocation-free byte strings (the
//! probe builds the paths inside `ctor` with no allocator to lean on).

/// Environment variable that overrides the ring directory.
pub const RING_DIR_ENV: &str = "FRAGPROBE_RING_DIR";

/// The `index`-th candidate ring directory, in order of preference: `$FRAGPROBE_RING_DIR`
/// (when set and non-empty), `$XDG_RUNTIME_DIR/fragprobe` (when set and non-empty),
/// `/dev/shm/fragprobe-<uid>`, `/tmp/fragprobe-<uid>`. Written into `buf` without
/// allocating; `None` past the last candidate or when `buf` is too small.
///
/// The probe creates the directory with mode 0700 and the ring file
/// `<pid>-<start_ns>.ring` (see [`parse_ring_file_name`]) with mode 0600, trying the next
/// candidate when one fails.
pub fn ring_dir_candidate<'a>(
    index: usize,
    uid: u32,
    env_override: Option<&[u8]>,
    xdg_runtime: Option<&[u8]>,
    buf: &'a mut [u8],
) -> Option<&'a [u8]> {
    let env = env_override.filter(|v| !v.is_empty());
    let xdg = xdg_runtime.filter(|v| !v.is_empty());
    let mut n = index;
    let mut w = BufWriter { buf, len: 0 };
    if let Some(e) = env {
        if n == 0 {
            w.put(e)?;
            return Some(w.done());
        }
        n -= 1;
    }
    if let Some(x) = xdg {
        if n == 0 {
            w.put(x)?;
            if !x.ends_with(b"/") {
                w.put(b"/")?;
            }
            w.put(b"fragprobe")?;
            return Some(w.done());
        }
        n -= 1;
    }
    let prefix: &[u8] = match n {
        0 => b"/dev/shm/fragprobe-",
        1 => b"/tmp/fragprobe-",
        _ => return None,
    };
    let mut tmp = [0u8; 20];
    w.put(prefix)?;
    w.put(crate::format::fmt_u64(uid as u64, &mut tmp))?;
    Some(w.done())
}

/// Whether a file system of `total` bytes, `free` of them still free, should take a ring
/// of `len` bytes (reserved in full): the ring may take at most an eighth of the file
/// system, and must leave a quarter of it or 1 GiB free, whichever is less. `/dev/shm` is
/// shared with the program itself (PyTorch's DataLoader workers and NCCL put their buffers
/// there): in Docker's default 64 MiB, three 18 MiB rings would leave the program nothing.
pub fn room_for_ring(len: u64, total: u64, free: u64) -> bool {
    len <= total / 8 && free >= len && free - len >= (total / 4).min(RING_HEADROOM)
}

/// The most free space [`room_for_ring`] asks a ring to leave.
pub const RING_HEADROOM: u64 = 1 << 30;

/// The suffix of a ring file still being made (`<pid>-<start_ns>.ring.new`): consumers
/// skip it; the probe renames it to `.ring` once it is reserved, mapped and locked.
pub const RING_NEW_SUFFIX: &[u8] = b".new";

/// Parses a ring file name (`<pid>.ring`) back into the pid.
pub fn parse_ring_file_name(name: &[u8]) -> Option<u32> {
    let stem = name.strip_suffix(b".ring")?;
    // `<pid>.ring`, or `<pid>-<start_ns>.ring` as the probe writes it (a process that
    // `exec`s keeps its pid; the start time keeps the two images' rings apart).
    let digits = match stem.iter().position(|&c| c == b'-') {
        Some(i) => {
            let start = &stem[i + 1..];
            if start.is_empty() || !start.iter().all(u8::is_ascii_digit) {
                return None;
            }
            &stem[..i]
        }
        None => stem,
    };
    if digits.is_empty() || digits.len() > 10 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut v: u64 = 0;
    for d in digits {
        v = v * 10 + (d - b'0') as u64;
    }
    u32::try_from(v).ok()
}

struct BufWriter<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl<'a> BufWriter<'a> {
    fn put(&mut self, b: &[u8]) -> Option<()> {
        let end = self.len.checked_add(b.len())?;
        self.buf.get_mut(self.len..end)?.copy_from_slice(b);
        self.len = end;
        Some(())
    }
    fn done(self) -> &'a [u8] {
        let len = self.len;
        &self.buf[..len]
    }
}

// ---------------------------------------------------------------- header access
