//! Where a `fragprobe run` session keeps its rings: the first per-user candidate
//! (`$XDG_RUNTIME_DIR/fragprobe`, `/dev/shm/fragprobe-<uid>`, `/tmp/fragprobe-<uid>`) that
//! is private and has room ([`room_for_ring`]) for a whole ring of the size the command's
//! probe will make.
//!
//! The probe reserves every byte of its ring before using it, and when a session names the
//! directory that is the only one the probe tries. Docker's default `/dev/shm` is 64 MiB,
//! shared with the program itself: a session passes it over for the next candidate and
//! says so.
//!
//! A session directory is removed when its session ends. Candidates are examined in order
//! and only until one will do; before it is measured, a candidate is cleared of what
//! processes that are gone left there: session directories of killed `fragprobe`
//! processes and rings of probed processes. Each is held by its owner's lock; a lock that
//! is free and a pid that is gone mean the owner is gone, even across pid namespaces that
//! share the directory.

use std::ffi::OsString;
use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use fragprobe_shared::ring::{
    fs_space, parse_ring_file_name, process_exists, room_for_ring, user_ring_dirs, RingConfig,
};

/// A candidate directory and its file system's size and free bytes, or why it cannot be
/// used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The per-user base directory.
    pub path: PathBuf,
    /// `(total, free)` bytes for an unprivileged user, or why the directory is not usable.
    pub space: Result<(u64, u64), String>,
}

/// Bytes of the ring the probe will create under the command's environment: `env` (the
/// session's additions) first, then this process's environment. Values are read as the
/// probe reads them (digits only; anything else keeps the default).
pub fn ring_bytes(env: &[(OsString, OsString)]) -> u64 {
    let get = |name: &str| -> Option<u64> {
        let v = env
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var_os(name))?;
        let v = v.to_str()?;
        if v.is_empty() || !v.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        v.parse().ok()
    };
    RingConfig::from_env_values(
        get("FRAGPROBE_RING_CAPACITY"),
        get("FRAGPROBE_LIVE_CAPACITY"),
    )
    .file_len() as u64
}

/// The first usable candidate with room for a ring of `need` bytes (`None`: no ring, any
/// usable one), and a note for every one passed over. An error naming each candidate and
/// why, when none will do.
pub fn choose(cands: &[Candidate], need: Option<u64>) -> Result<(usize, Vec<String>), String> {
    let mut notes = Vec::new();
    for (i, c) in cands.iter().enumerate() {
        match passed_over(c, need) {
            None => return Ok((i, notes)),
            Some(note) => notes.push(note),
        }
    }
    Err(none_will_do(&notes))
}

/// Why `c` will not do for a ring of `need` bytes; `None` when it will.
fn passed_over(c: &Candidate, need: Option<u64>) -> Option<String> {
    match (&c.space, need) {
        (Err(why), _) => Some(format!("{}: {why}", c.path.display())),
        (Ok(_), None) => None,
        (Ok((total, free)), Some(need)) => (!room_for_ring(need, *total, *free)).then(|| {
            format!(
                "{}: {} free of {}, too little for a {} ring, which may take at most an eighth and must leave a quarter (at most 1 GiB) free",
                c.path.display(),
                mib(*free),
                mib(*total),
                mib(need)
            )
        }),
    }
}

fn none_will_do(notes: &[String]) -> String {
    format!(
        "no directory will do ({}). Free some space, or lower FRAGPROBE_RING_CAPACITY / FRAGPROBE_LIVE_CAPACITY",
        notes.join("; ")
    )
}

fn mib(bytes: u64) -> String {
    format!("{} MiB", bytes.div_ceil(1 << 20))
}

/// One candidate made (mode 0700) if missing, checked to be private, cleared of what gone
/// processes left, and measured.
pub fn examine(path: PathBuf) -> Candidate {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let space = private_dir(&path, uid).and_then(|()| {
        sweep_sessions(&path);
        sweep_rings(&path);
        space(&path).ok_or_else(|| "cannot be measured".to_string())
    });
    Candidate { path, space }
}

/// The first per-user ring directory (in the probe's order) that will do for a ring of
/// `need` bytes ([`choose`]), examining (and so making) only as many as it takes; the
/// notes for those passed over.
pub fn pick(need: Option<u64>) -> Result<(PathBuf, Vec<String>), String> {
    let mut notes = Vec::new();
    for path in user_ring_dirs() {
        let c = examine(path);
        match passed_over(&c, need) {
            None => return Ok((c.path, notes)),
            Some(note) => notes.push(note),
        }
    }
    Err(none_will_do(&notes))
}

/// Makes `dir` (one level, 0700) if missing and checks it is a directory of `uid` that
/// nobody else may write: the probe refuses any other as a per-user ring directory.
fn private_dir(dir: &Path, uid: u32) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    if let Err(e) = std::fs::DirBuilder::new().mode(0o700).create(dir) {
        if e.kind() != std::io::ErrorKind::AlreadyExists {
            return Err(format!("cannot be made ({e})"));
        }
    }
    let m = std::fs::symlink_metadata(dir).map_err(|e| format!("cannot be read ({e})"))?;
    if !m.is_dir() {
        return Err("not a directory".into());
    }
    if m.uid() != uid || m.mode() & 0o022 != 0 {
        return Err("not a private directory of this user (owner or mode)".into());
    }
    Ok(())
}

/// Makes a fresh session directory under `base`, locked for as long as the returned file
/// lives. It is made under a name sweeps ignore and renamed once locked, so no sweep ever
/// sees it unlocked.
pub fn new_session_dir(base: &Path, stem: &str) -> std::io::Result<(PathBuf, File)> {
    use std::os::unix::fs::DirBuilderExt;
    let tmp = base.join(format!(".new-{stem}"));
    std::fs::DirBuilder::new().mode(0o700).create(&tmp)?;
    let locked =
        File::open(&tmp).and_then(|f| f.try_lock().map(|()| f).map_err(std::io::Error::from));
    let lock = match locked {
        Ok(f) => f,
        Err(e) => {
            let _ = std::fs::remove_dir(&tmp);
            return Err(e);
        }
    };
    let dir = base.join(stem);
    if let Err(e) = std::fs::rename(&tmp, &dir) {
        let _ = std::fs::remove_dir(&tmp);
        return Err(e);
    }
    Ok((dir, lock))
}

/// Removes the `session-<pid>-<ns>` directories under `base` whose `fragprobe` process is
/// gone (killed before it could clean up): nobody holds the directory's lock and no
/// process has the pid. A session of a `fragprobe` in another pid namespace sharing the
/// directory still holds its lock. Returns how many were removed.
pub fn sweep_sessions(base: &Path) -> usize {
    sweep(base, true, |name| {
        name.strip_prefix("session-")
            .and_then(|n| n.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
    })
}

/// Removes the ring files under `dir` whose probed process is gone (the lock the probe
/// holds on its ring for life is free, and no process has the pid). Returns how many.
pub fn sweep_rings(dir: &Path) -> usize {
    sweep(dir, false, |name| parse_ring_file_name(name.as_bytes()))
}

fn sweep(base: &Path, dirs: bool, pid_of: impl Fn(&str) -> Option<u32>) -> usize {
    let Ok(entries) = std::fs::read_dir(base) else {
        return 0;
    };
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(&pid_of) else {
            continue;
        };
        let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
        if is_dir != dirs || process_exists(pid) {
            continue;
        }
        // Only regular files and directories are ours; O_NONBLOCK so a FIFO cannot hang us.
        if !e.file_type().is_ok_and(|t| t.is_dir() || t.is_file()) {
            continue;
        }
        let Ok(f) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(e.path())
        else {
            continue;
        };
        if f.try_lock().is_err() {
            continue;
        }
        let gone = if dirs {
            std::fs::remove_dir_all(e.path())
        } else {
            std::fs::remove_file(e.path())
        };
        removed += usize::from(gone.is_ok());
    }
    removed
}

/// `(total, free)` bytes of the file system holding `dir`, free as an unprivileged user
/// may still write.
pub fn space(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    fs_space(&std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    /// A pid above any kernel's pid_max: no process has it.
    const DEAD: u32 = 2_000_000_000;

    fn cand(p: &str, space: Result<(u64, u64), &str>) -> Candidate {
        Candidate {
            path: PathBuf::from(p),
            space: space.map_err(str::to_string),
        }
    }

    #[test]
    fn the_first_candidate_with_room_wins_and_the_others_are_named() {
        let c = [
            cand(
                "/run/user/1/fragprobe",
                Err("not a private directory of this user (owner or mode)"),
            ),
            // Docker's default /dev/shm, untouched.
            cand("/dev/shm/fragprobe-1", Ok((64 * MIB, 64 * MIB))),
            cand("/tmp/fragprobe-1", Ok((100 << 30, 10 << 30))),
        ];
        let (i, notes) = choose(&c, Some(18 * MIB)).unwrap();
        assert_eq!(i, 2);
        assert_eq!(
            notes,
            [
                "/run/user/1/fragprobe: not a private directory of this user (owner or mode)",
                "/dev/shm/fragprobe-1: 64 MiB free of 64 MiB, too little for a 18 MiB ring, which may take at most an eighth and must leave a quarter (at most 1 GiB) free"
            ]
        );
        let (i, notes) = choose(&c, Some(8 * MIB)).unwrap();
        assert_eq!((i, notes.len()), (1, 1), "an eighth is room");
        let (i, _) = choose(&c, None).unwrap();
        assert_eq!(i, 1, "no probe: any usable directory");
    }

    #[test]
    fn no_room_anywhere_is_an_error_that_names_every_candidate() {
        let c = [
            cand("/dev/shm/fragprobe-1", Ok((64 * MIB, MIB))),
            cand("/tmp/fragprobe-1", Ok((1 << 30, 3 * MIB))),
        ];
        let e = choose(&c, Some(19 * MIB)).unwrap_err();
        assert!(
            e.contains("/dev/shm/fragprobe-1: 1 MiB free of 64 MiB"),
            "{e}"
        );
        assert!(
            e.contains("/tmp/fragprobe-1: 3 MiB free of 1024 MiB"),
            "{e}"
        );
        assert!(e.contains("FRAGPROBE_RING_CAPACITY"), "{e}");
    }

    #[test]
    fn ring_bytes_follow_the_commands_environment_first_and_read_as_the_probe_does() {
        let default = RingConfig::DEFAULT.file_len() as u64;
        let big = RingConfig::from_env_values(Some(1 << 22), None).file_len() as u64;
        let env = [(OsString::from("FRAGPROBE_RING_CAPACITY"), "4194304".into())];
        assert_eq!(ring_bytes(&env), big);
        assert!(big > 300 * MIB, "{big}");
        // The probe ignores a value it cannot parse, and so does the estimate (the live
        // table's size comes from this process's environment here).
        if std::env::var_os("FRAGPROBE_LIVE_CAPACITY").is_none() {
            for junk in ["lots", "+4194304", " 4194304", ""] {
                let e = [(OsString::from("FRAGPROBE_RING_CAPACITY"), junk.into())];
                assert_eq!(ring_bytes(&e), default, "{junk:?}");
            }
        }
    }

    fn scratch(name: &str) -> PathBuf {
        let base = std::env::temp_dir().join(format!("fp-ringdir-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        base
    }

    #[test]
    fn sessions_of_fragprobe_processes_that_are_gone_are_removed() {
        let base = scratch("sessions");
        let mk = |name: String| {
            let d = base.join(name);
            std::fs::create_dir(&d).unwrap();
            std::fs::write(d.join("1-2.ring"), b"x").unwrap();
            d
        };
        let gone = mk(format!("session-{DEAD}-1"));
        let locked = mk(format!("session-{}-2", DEAD + 1));
        let live = mk(format!("session-{}-3", std::process::id()));
        let other = mk(format!("not-a-session-{DEAD}"));
        let held = File::open(&locked).unwrap();
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
    fn rings_of_processes_that_are_gone_are_removed() {
        let base = scratch("rings");
        let mk = |name: String| {
            let p = base.join(name);
            std::fs::write(&p, b"a ring").unwrap();
            p
        };
        let gone = mk(format!("{DEAD}-1.ring"));
        let locked = mk(format!("{}-2.ring", DEAD + 1));
        let live = mk(format!("{}-3.ring", std::process::id()));
        let making = mk(format!("{}-4.ring.new", DEAD + 2));
        let held = File::open(&locked).unwrap();
        held.lock().unwrap();
        assert_eq!(sweep_rings(&base), 1);
        assert!(!gone.exists());
        assert!(locked.exists() && live.exists() && making.exists());
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn a_new_session_directory_is_private_locked_and_named_only_once_locked() {
        let base = scratch("new");
        let (dir, lock) = new_session_dir(&base, "session-1-2").unwrap();
        assert_eq!(dir, base.join("session-1-2"));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        assert!(File::open(&dir).unwrap().try_lock().is_err(), "held");
        drop(lock);
        assert!(File::open(&dir).unwrap().try_lock().is_ok());
        assert_eq!(
            std::fs::read_dir(&base).unwrap().count(),
            1,
            "no .new- left"
        );
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn a_directory_others_may_write_is_not_private() {
        let base = scratch("private");
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        let d = base.join("made");
        private_dir(&d, uid).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&d).unwrap().permissions().mode() & 0o777,
            0o700
        );
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o775)).unwrap();
        assert!(private_dir(&d, uid)
            .unwrap_err()
            .contains("not a private directory"));
        assert!(private_dir(&d, uid + 1).is_err(), "someone else's");
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn space_of_a_real_directory() {
        let (total, free) = space(&std::env::temp_dir()).expect("statvfs of the temp dir");
        assert!(total >= free && free > 0);
        assert_eq!(space(Path::new("/no/such/dir/at/all")), None);
    }
}
