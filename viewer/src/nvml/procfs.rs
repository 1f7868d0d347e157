//! Who a pid belongs to and what it runs, from `/proc` — what users do by hand with
//! `ps -o user,cmd -p PID` before killing a stale GPU process.
//!
//! NVML reports host pids. Inside a container without the host pid namespace those pids
//! are not visible here; the lookups then return `None` and the table says so.

use std::path::{Path, PathBuf};

use super::sample::ProcInfo;

/// A process's environment as `/proc/<pid>/environ` holds it (NUL-separated `K=V`).
#[derive(Clone, Debug, Default)]
pub struct Environ(Vec<u8>);

impl Environ {
    /// The value of the first of `names` that is set and not empty.
    pub fn first(&self, names: &[&str]) -> Option<String> {
        let vars: Vec<(&[u8], &[u8])> = self
            .0
            .split(|&b| b == 0)
            .filter_map(|kv| {
                let i = kv.iter().position(|&b| b == b'=')?;
                Some((&kv[..i], &kv[i + 1..]))
            })
            .collect();
        names.iter().find_map(|n| {
            vars.iter()
                .find(|(k, v)| *k == n.as_bytes() && !v.is_empty())
                .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        })
    }
}

/// Reads `/proc` (or another mount of it, for tests).
#[derive(Clone, Debug)]
pub struct ProcFs {
    root: PathBuf,
}

impl Default for ProcFs {
    fn default() -> Self {
        ProcFs {
            root: PathBuf::from("/proc"),
        }
    }
}

impl ProcFs {
    /// A reader rooted at `root` instead of `/proc`.
    pub fn at(root: impl Into<PathBuf>) -> ProcFs {
        ProcFs { root: root.into() }
    }

    /// Whether `pid` exists.
    pub fn alive(&self, pid: u32) -> bool {
        pid != 0 && self.root.join(pid.to_string()).exists()
    }

    /// What `/proc/<pid>` says, or `None` when the pid is not visible.
    pub fn info(&self, pid: u32) -> Option<ProcInfo> {
        let dir = self.root.join(pid.to_string());
        let status = std::fs::read_to_string(dir.join("status")).ok()?;
        let uid = status_field(&status, "Uid:")?;
        let ppid = status_field(&status, "PPid:").unwrap_or(0);
        let cmdline = read_cmdline(&dir).unwrap_or_else(|| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("Name:"))
                .map(|n| format!("[{}]", n.trim()))
                .unwrap_or_default()
        });
        let orphaned = ppid == 1 || (ppid != 0 && !self.alive(ppid));
        Some(ProcInfo {
            user: user_name(uid),
            uid,
            ppid,
            cmdline,
            orphaned,
            age_secs: self.age_secs(&dir),
        })
    }

    /// The process's environment (`/proc/<pid>/environ`, read once). Only one's own
    /// processes' environments are readable (or all, for root); empty otherwise.
    pub fn environ(&self, pid: u32) -> Environ {
        Environ(std::fs::read(self.root.join(pid.to_string()).join("environ")).unwrap_or_default())
    }

    fn age_secs(&self, dir: &Path) -> Option<u64> {
        let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
        // The command name (field 2) may contain spaces and parentheses: fields after
        // the last ')' are fixed. starttime is field 22 overall, the 20th after ')'.
        let rest = &stat[stat.rfind(')')? + 1..];
        let start_ticks: u64 = rest.split_whitespace().nth(19)?.parse().ok()?;
        let uptime = std::fs::read_to_string(self.root.join("uptime")).ok()?;
        let up: f64 = uptime.split_whitespace().next()?.parse().ok()?;
        let hz = clock_ticks();
        Some((up - start_ticks as f64 / hz).max(0.0) as u64)
    }
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf only reads a system constant.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

fn status_field(status: &str, key: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

fn read_cmdline(dir: &Path) -> Option<String> {
    let raw = std::fs::read(dir.join("cmdline")).ok()?;
    if raw.is_empty() {
        return None;
    }
    let parts: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    Some(parts.join(" "))
}

/// The user name for `uid`, or the number when the account database has none.
pub fn user_name(uid: u32) -> String {
    let mut buf = vec![0u8; 4096];
    // SAFETY: passwd is plain old data; an all-zero value is valid and is only read after
    // getpwuid_r fills it.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer refers to live storage of the stated size; getpwuid_r writes
    // strings only into `buf` and points `result` at `pwd` or sets it to null.
    let rc = unsafe {
        libc::getpwuid_r(
            uid,
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut result,
        )
    };
    if rc == 0 && !result.is_null() && !pwd.pw_name.is_null() {
        // SAFETY: on success pw_name points at a NUL-terminated string inside `buf`,
        // which outlives this borrow.
        let name = unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) };
        return name.to_string_lossy().into_owned();
    }
    uid.to_string()
}

/// The uid of the current process.
pub fn current_uid() -> u32 {
    // SAFETY: getuid cannot fail and has no preconditions.
    unsafe { libc::getuid() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let me = std::process::id();
        let info = ProcFs::default().info(me).expect("own /proc entry");
        assert_eq!(info.uid, current_uid());
        assert!(info.cmdline.contains("fragprobe_viewer") || !info.cmdline.is_empty());
        assert!(!info.orphaned, "the test harness is our live parent");
        assert!(info.age_secs.is_some());
    }

    #[test]
    fn missing_pid_is_none() {
        let fs = ProcFs::at("/nonexistent-proc");
        assert!(fs.info(1).is_none());
        assert!(!fs.alive(1));
    }

    #[test]
    fn fake_proc_tree_parsing() {
        let dir = std::env::temp_dir().join(format!("fp-procfs-{}", std::process::id()));
        let p = dir.join("4242");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(
            p.join("status"),
            "Name:\tpython\nPPid:\t1\nUid:\t0\t0\t0\t0\n",
        )
        .unwrap();
        std::fs::write(p.join("cmdline"), b"python\0train.py\0--bs\0 64\0").unwrap();
        let info = ProcFs::at(&dir).info(4242).unwrap();
        assert_eq!(info.cmdline, "python train.py --bs  64");
        assert_eq!(info.ppid, 1);
        assert!(info.orphaned);
        assert_eq!(info.user, user_name(0));
        std::fs::write(
            p.join("status"),
            "Name:\tkworker\nPPid:\t7777\nUid:\t5\t5\t5\t5\n",
        )
        .unwrap();
        std::fs::write(p.join("cmdline"), b"").unwrap();
        let info = ProcFs::at(&dir).info(4242).unwrap();
        assert_eq!(info.cmdline, "[kworker]");
        assert!(info.orphaned, "parent 7777 does not exist in the fake tree");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
