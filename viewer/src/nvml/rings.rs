//! Which GPU processes are probed: the probe keeps a ring file `<pid>.ring` in a per-user
//! directory, the first usable of `$FRAGPROBE_RING_DIR`, `$XDG_RUNTIME_DIR/fragprobe`,
//! `/dev/shm/fragprobe-<uid>`, `/tmp/fragprobe-<uid>`.

use std::path::PathBuf;

use fragprobe_shared::ring::{list_rings, RingInfo};

/// Where ring files may live, for processes of user `uid`.
#[derive(Clone, Debug, Default)]
pub struct RingDirs {
    /// `FRAGPROBE_RING_DIR`, when set.
    pub explicit: Option<PathBuf>,
    /// `XDG_RUNTIME_DIR`, when set (only meaningful for the current user).
    pub xdg_runtime: Option<PathBuf>,
    /// The current user's uid.
    pub my_uid: u32,
}

impl RingDirs {
    /// From the environment.
    pub fn from_env() -> RingDirs {
        let nonempty = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        RingDirs {
            explicit: nonempty("FRAGPROBE_RING_DIR"),
            xdg_runtime: nonempty("XDG_RUNTIME_DIR"),
            my_uid: super::procfs::current_uid(),
        }
    }

    /// The candidate directories for processes owned by `uid`, in the probe's order.
    pub fn candidates(&self, uid: u32) -> Vec<PathBuf> {
        let mut v = Vec::new();
        if let Some(d) = &self.explicit {
            v.push(d.clone());
        }
        if uid == self.my_uid {
            if let Some(x) = &self.xdg_runtime {
                v.push(x.join("fragprobe"));
            }
        } else {
            v.push(PathBuf::from(format!("/run/user/{uid}/fragprobe")));
        }
        v.push(PathBuf::from(format!("/dev/shm/fragprobe-{uid}")));
        v.push(PathBuf::from(format!("/tmp/fragprobe-{uid}")));
        v
    }

    /// The ring file of `pid` (owned by `uid`), when one exists: `<pid>.ring` or the
    /// probe's `<pid>-<start_ns>.ring`. A process that `exec`ed has one ring per image; the
    /// live one (not marked exited) with the latest start wins.
    pub fn ring_of(&self, pid: u32, uid: u32) -> Option<PathBuf> {
        self.candidates(uid)
            .into_iter()
            .flat_map(with_sessions)
            .find_map(|d| {
                let mut mine: Vec<RingInfo> = list_rings(&d)
                    .into_iter()
                    .filter(|r| r.pid == pid)
                    .collect();
                mine.sort_by_key(|r| (r.alive, start_of(&r.path)));
                mine.pop().map(|r| r.path)
            })
    }
}

/// `dir` and the `session-*` directories in it: `fragprobe run` gives the rings of the
/// command it runs a session directory of their own inside the per-user one, so another
/// terminal's `watch` finds them there.
fn with_sessions(dir: PathBuf) -> Vec<PathBuf> {
    let mut v = vec![dir.clone()];
    if let Ok(rd) = std::fs::read_dir(&dir) {
        v.extend(
            rd.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_str()
                        .is_some_and(|n| n.starts_with("session-"))
                })
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path()),
        );
    }
    v
}

/// The start time in a `<pid>-<start_ns>.ring` name (0 for `<pid>.ring`).
fn start_of(p: &std::path::Path) -> u64 {
    p.file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.split_once('-'))
        .and_then(|(_, t)| t.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_and_lookup() {
        let dir = std::env::temp_dir().join(format!("fp-rings-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let dirs = RingDirs {
            explicit: Some(dir.clone()),
            xdg_runtime: Some("/run/user/1000".into()),
            my_uid: 1000,
        };
        let c = dirs.candidates(1000);
        assert_eq!(c[0], dir);
        assert_eq!(c[1], PathBuf::from("/run/user/1000/fragprobe"));
        assert_eq!(c[2], PathBuf::from("/dev/shm/fragprobe-1000"));
        assert_eq!(c[3], PathBuf::from("/tmp/fragprobe-1000"));
        assert_eq!(
            dirs.candidates(7)[1],
            PathBuf::from("/run/user/7/fragprobe")
        );
        assert_eq!(dirs.ring_of(4_000_000_001, 1000), None);
        // Only files that start with the ring magic count.
        std::fs::write(dir.join("4000000001.ring"), b"x").unwrap();
        assert_eq!(dirs.ring_of(4_000_000_001, 1000), None);
        let cfg = fragprobe_shared::ring::RingConfig::from_env_values(Some(64), Some(64));
        let old = dir.join("4000000001-100.ring");
        let new = dir.join("4000000001-200.ring");
        let _a = fragprobe_shared::ring::RingFile::create(&old, &cfg, 4_000_000_001).unwrap();
        let _b = fragprobe_shared::ring::RingFile::create(&new, &cfg, 4_000_000_001).unwrap();
        // No such process is alive: both are "dead"; the later image wins.
        assert_eq!(dirs.ring_of(4_000_000_001, 1000), Some(new));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn rings_of_a_run_session_are_found_from_another_terminal() {
        let dir = std::env::temp_dir().join(format!("fp-rings-sess-{}", std::process::id()));
        let session = dir.join("session-123-456");
        std::fs::create_dir_all(&session).unwrap();
        let dirs = RingDirs {
            explicit: Some(dir.clone()),
            xdg_runtime: None,
            my_uid: 1000,
        };
        let cfg = fragprobe_shared::ring::RingConfig::from_env_values(Some(64), Some(64));
        let ring = session.join("4000000002-100.ring");
        let _r = fragprobe_shared::ring::RingFile::create(&ring, &cfg, 4_000_000_002).unwrap();
        assert_eq!(dirs.ring_of(4_000_000_002, 1000), Some(ring));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
