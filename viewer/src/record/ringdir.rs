//! Where a `fragprobe run` session keeps its rings: the first per-user candidate
//! (`$XDG_RUNTIME_DIR/fragprobe`, `/dev/shm/fragprobe-<uid>`, `/tmp/fragprobe-<uid>`) with
//! room for a whole ring of the size the command's probe will make.
//!
//! The probe reserves every byte of its ring before using it, and when a session names the
//! directory that is the only one the probe tries. Docker's default `/dev/shm` is 64 MiB:
//! a session that put a 365 MiB ring there would record nothing, so it goes on to the next
//! candidate and says so.
//!
//! A session directory is removed when its session ends; one left by a `fragprobe` that
//! was killed is removed by the next session that starts in the same place.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use fragprobe_shared::ring::RingConfig;

/// A candidate directory and the bytes an unprivileged user may still write there
/// (`None`: it could not be created or measured).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The per-user base directory.
    pub path: PathBuf,
    /// Free bytes for an unprivileged user.
    pub free: Option<u64>,
}

/// Bytes of the ring the probe will create under the command's environment: `env` (the
/// session's additions) first, then this process's environment.
pub fn ring_bytes(env: &[(OsString, OsString)]) -> u64 {
    let get = |name: &str| -> Option<u64> {
        let v = env
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var_os(name))?;
        v.to_str()?.parse().ok()
    };
    RingConfig::from_env_values(
        get("FRAGPROBE_RING_CAPACITY"),
        get("FRAGPROBE_LIVE_CAPACITY"),
    )
    .file_len() as u64
}

/// The first candidate with room for `need` bytes, and a note for every one passed over.
/// An error, naming each candidate and its free space, when none has room.
pub fn choose(cands: &[Candidate], need: u64) -> Result<(usize, Vec<String>), String> {
    let mut notes = Vec::new();
    for (i, c) in cands.iter().enumerate() {
        match c.free {
            Some(free) if free >= need => return Ok((i, notes)),
            Some(free) => notes.push(format!(
                "{} has {} free, less than one {} ring",
                c.path.display(),
                mib(free),
                mib(need)
            )),
            None => notes.push(format!("{} is not usable", c.path.display())),
        }
    }
    Err(format!(
        "no directory has room for a {} ring ({}). Free some space, or lower FRAGPROBE_RING_CAPACITY / FRAGPROBE_LIVE_CAPACITY",
        mib(need),
        notes.join("; ")
    ))
}

fn mib(bytes: u64) -> String {
    format!("{} MiB", bytes.div_ceil(1 << 20))
}

/// The per-user candidates, each created (mode 0700) and measured.
pub fn candidates() -> Vec<Candidate> {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let mut paths = Vec::new();
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR").filter(|x| !x.is_empty()) {
        paths.push(PathBuf::from(x).join("fragprobe"));
    }
    paths.push(PathBuf::from(format!("/dev/shm/fragprobe-{uid}")));
    paths.push(PathBuf::from(format!("/tmp/fragprobe-{uid}")));
    paths
        .into_iter()
        .map(|path| {
            let free = std::fs::create_dir_all(&path)
                .ok()
                .and_then(|()| free_bytes(&path));
            Candidate { path, free }
        })
        .collect()
}

/// Removes the `session-<pid>-<ns>` directories under `base` whose `fragprobe` process is
/// gone (killed before it could clean up): nobody holds the directory's lock and no
/// process has the pid. A session of a `fragprobe` in another pid namespace sharing the
/// directory still holds its lock. Returns how many were removed.
pub fn sweep_sessions(base: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(base) else {
        return 0;
    };
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("session-"))
            .and_then(|n| n.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<i32>().ok())
        else {
            continue;
        };
        if !e.file_type().is_ok_and(|t| t.is_dir()) || !pid_gone(pid) {
            continue;
        }
        let Ok(f) = std::fs::File::open(e.path()) else {
            continue;
        };
        if f.try_lock().is_ok() && std::fs::remove_dir_all(e.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Whether no process has this pid.
fn pid_gone(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(pid, 0) };
    r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// Bytes an unprivileged user may still write on the file system holding `dir`.
pub fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: st is plain old data that statvfs fills.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a valid out pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(p: &str, free: Option<u64>) -> Candidate {
        Candidate {
            path: PathBuf::from(p),
            free,
        }
    }

    #[test]
    fn the_first_candidate_with_room_wins_and_the_others_are_named() {
        let c = [
            cand("/run/user/1/fragprobe", None),
            cand("/dev/shm/fragprobe-1", Some(60 << 20)),
            cand("/tmp/fragprobe-1", Some(10 << 30)),
        ];
        let (i, notes) = choose(&c, 365 << 20).unwrap();
        assert_eq!(i, 2);
        assert_eq!(
            notes,
            [
                "/run/user/1/fragprobe is not usable",
                "/dev/shm/fragprobe-1 has 60 MiB free, less than one 365 MiB ring"
            ]
        );
        let (i, notes) = choose(&c, 60 << 20).unwrap();
        assert_eq!((i, notes.len()), (1, 1), "exactly enough room is room");
    }

    #[test]
    fn no_room_anywhere_is_an_error_that_names_every_candidate() {
        let c = [
            cand("/dev/shm/fragprobe-1", Some(1 << 20)),
            cand("/tmp/fragprobe-1", Some(3 << 20)),
        ];
        let e = choose(&c, 19 << 20).unwrap_err();
        assert!(e.contains("room for a 19 MiB ring"), "{e}");
        assert!(e.contains("/dev/shm/fragprobe-1 has 1 MiB free"), "{e}");
        assert!(e.contains("/tmp/fragprobe-1 has 3 MiB free"), "{e}");
        assert!(e.contains("FRAGPROBE_RING_CAPACITY"), "{e}");
    }

    #[test]
    fn ring_bytes_follow_the_commands_environment_first() {
        let default = RingConfig::DEFAULT.file_len() as u64;
        let big = RingConfig::from_env_values(Some(1 << 22), None).file_len() as u64;
        let env = [(OsString::from("FRAGPROBE_RING_CAPACITY"), "4194304".into())];
        assert_eq!(ring_bytes(&env), big);
        assert!(big > 300 << 20, "{big}");
        let junk = [(OsString::from("FRAGPROBE_RING_CAPACITY"), "lots".into())];
        // The probe ignores a value it cannot parse, and so does the estimate (the live
        // table's size comes from this process's environment here).
        if std::env::var_os("FRAGPROBE_LIVE_CAPACITY").is_none() {
            assert_eq!(ring_bytes(&junk), default);
        }
    }

    #[test]
    fn sessions_of_fragprobe_processes_that_are_gone_are_removed() {
        let base = std::env::temp_dir().join(format!("fp-ringdir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let mut t = std::process::Command::new("true").spawn().unwrap();
        let dead = t.id();
        t.wait().unwrap();
        let mk = |name: String| {
            let d = base.join(name);
            std::fs::create_dir(&d).unwrap();
            std::fs::write(d.join("1-2.ring"), b"x").unwrap();
            d
        };
        let gone = mk(format!("session-{dead}-1"));
        let locked = mk(format!("session-{dead}-2"));
        let live = mk(format!("session-{}-3", std::process::id()));
        let other = mk(format!("not-a-session-{dead}"));
        let held = std::fs::File::open(&locked).unwrap();
        held.lock().unwrap();
        assert_eq!(sweep_sessions(&base), 1);
        assert!(!gone.exists());
        assert!(locked.exists(), "held by a live fragprobe elsewhere");
        assert!(live.exists(), "its fragprobe lives");
        assert!(other.exists(), "not a session directory");
        drop(held);
        assert_eq!(sweep_sessions(&base), 1);
        assert!(!locked.exists());
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn free_bytes_of_a_real_directory() {
        let free = free_bytes(&std::env::temp_dir()).expect("statvfs of the temp dir");
        assert!(free > 0);
        assert_eq!(free_bytes(Path::new("/no/such/dir/at/all")), None);
    }
}
