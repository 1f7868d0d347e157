//! Prometheus text exposition of a sample, for node_exporter's textfile collector (`log
//! --prometheus FILE`): the fleet's own monitoring scrapes what `fragprobe log` sees.
//!
//! Conventions (see the README): gauges in base units (`_bytes`, `_ratio`, `_celsius`);
//! every series labelled with the GPU's `uuid`, its NVML index `gpu` (a MIG instance: its
//! parent's, and its own as `mig`) and the `hostname`. Process series name the job rather
//! than the pid (a pid is a new series every run) in `job_id` (Prometheus keeps `job` for
//! the scrape target): the first of `SLURM_JOB_ID`, `TORCHELASTIC_RUN_ID`, `POD_NAME`,
//! `FRAGPROBE_LABEL` in the process's environment, else its program name; `rank` from
//! `RANK`, `SLURM_PROCID`, `OMPI_COMM_WORLD_RANK` or `PMI_RANK`. Only where two processes
//! would get the same labels is `pid` added, so no series is ever duplicated. Probed
//! processes add the probe's tracked bytes, fragmentation ratio and largest free block.
//!
//! The file is written whole to a temporary name in its directory and renamed over the
//! old one, so a scrape never reads half a file.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use super::procfs::ProcFs;
use super::sample::{DeviceSample, ProcessSample, Snapshot};

/// Environment variables that give a process's global rank, in order of preference
/// (torchrun, Slurm's srun, Open MPI, MPICH/PMI).
pub const RANK_VARS: &[&str] = &["RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"];

/// Environment variables that name a process's job, in order of preference.
pub const JOB_VARS: &[&str] = &[
    "SLURM_JOB_ID",
    "TORCHELASTIC_RUN_ID",
    "POD_NAME",
    "FRAGPROBE_LABEL",
];

/// A metric family: its name and help.
type Family = (&'static str, &'static str);

const GPU_TOTAL: Family = (
    "fragprobe_gpu_memory_total_bytes",
    "Device memory installed (NVML).",
);
const GPU_USED: Family = (
    "fragprobe_gpu_memory_used_bytes",
    "Device memory in use: total - free - reserved (NVML).",
);
const GPU_FREE: Family = (
    "fragprobe_gpu_memory_free_bytes",
    "Device memory free (NVML).",
);
const GPU_RESERVED: Family = (
    "fragprobe_gpu_memory_reserved_bytes",
    "Device memory the driver sets aside (NVML).",
);
const GPU_UTIL: Family = (
    "fragprobe_gpu_utilization_ratio",
    "GPU utilisation, 0 to 1 (NVML).",
);
const GPU_TEMP: Family = (
    "fragprobe_gpu_temperature_celsius",
    "GPU temperature (NVML).",
);
const PROC_USED: Family = (
    "fragprobe_process_memory_used_bytes",
    "Device memory a process holds, context included (NVML).",
);
const PROC_TRACKED: Family = (
    "fragprobe_process_tracked_bytes",
    "Device memory a probed process holds in allocations the probe saw.",
);
const PROC_FRAG: Family = (
    "fragprobe_process_fragmentation_ratio",
    "1 - largest free block / total free in a probed process's address space.",
);
const PROC_LARGEST: Family = (
    "fragprobe_process_largest_free_block_bytes",
    "Largest free block in a probed process's address space.",
);
const SAMPLE_TIME: Family = (
    "fragprobe_sample_timestamp_seconds",
    "When fragprobe took this sample (Unix time): a stale file shows as an old value.",
);

/// Samples grouped by family, families in the order they first appear (the format wants
/// each family's samples together).
#[derive(Default)]
struct Exposition(Vec<(Family, Vec<(String, f64)>)>);

impl Exposition {
    fn add(&mut self, family: Family, labels: &str, value: f64) {
        let sample = (labels.to_string(), value);
        match self.0.iter_mut().find(|(f, _)| f.0 == family.0) {
            Some((_, v)) => v.push(sample),
            None => self.0.push((family, vec![sample])),
        }
    }

    fn text(&self) -> String {
        let mut out = String::new();
        for ((name, help), samples) in &self.0 {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} gauge");
            for (l, v) in samples {
                let _ = writeln!(out, "{name}{l} {v}");
            }
        }
        out
    }
}

/// A label value as the exposition format wants it: `\`, `"` and newlines escaped.
fn escape(v: &str) -> String {
    let mut o = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '"' => o.push_str("\\\""),
            '\n' => o.push_str("\\n"),
            c => o.push(c),
        }
    }
    o
}

fn labels(pairs: &[(&str, &str)]) -> String {
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// The job label of a process (see the module documentation) and its rank, if any.
fn job_of(p: &ProcessSample, procs: &ProcFs) -> (String, Option<String>) {
    let env = procs.environ(p.pid);
    let job = env
        .first(JOB_VARS)
        .or_else(|| {
            let cmd = p
                .info
                .as_ref()?
                .cmdline
                .split_whitespace()
                .next()?
                .to_string();
            Some(cmd.rsplit('/').next().unwrap_or(&cmd).to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let rank = env.first(RANK_VARS);
    (job, rank)
}

/// The exposition of `snap` (enriched with `/proc` and probe details, see
/// [`super::Monitor::sample`]) for host `hostname`; `procs` reads the processes'
/// environments for their job labels.
pub fn exposition(snap: &Snapshot, hostname: &str, procs: &ProcFs) -> String {
    let mut e = Exposition::default();
    for d in &snap.devices {
        let gpu = d.index.to_string();
        // A MIG-enabled GPU lists the processes of all its instances: they are counted
        // once, on their instance, labelled with the parent's `gpu` and its own `mig`.
        device(
            &mut e,
            d,
            &[("gpu", &gpu)],
            d.mig.is_empty(),
            hostname,
            procs,
        );
        for m in &d.mig {
            let mig = m.index.to_string();
            device(
                &mut e,
                m,
                &[("gpu", &gpu), ("mig", &mig)],
                true,
                hostname,
                procs,
            );
        }
    }
    e.add(
        SAMPLE_TIME,
        &labels(&[("hostname", hostname)]),
        snap.unix_ns as f64 / 1e9,
    );
    e.text()
}

/// The series of one GPU or MIG instance (`at`: its `gpu`/`mig` labels), and of its
/// processes when `with_processes`.
fn device(
    e: &mut Exposition,
    d: &DeviceSample,
    at: &[(&str, &str)],
    with_processes: bool,
    hostname: &str,
    procs: &ProcFs,
) {
    let uuid = d.uuid.as_deref().unwrap_or("");
    let mut base: Vec<(&str, &str)> = at.to_vec();
    base.extend([("uuid", uuid), ("hostname", hostname)]);
    let dl = labels(&base);
    if let Ok(m) = &d.memory {
        e.add(GPU_TOTAL, &dl, m.total as f64);
        e.add(GPU_USED, &dl, m.used() as f64);
        e.add(GPU_FREE, &dl, m.free as f64);
        e.add(GPU_RESERVED, &dl, m.reserved as f64);
    }
    if let Ok(u) = d.util_gpu {
        e.add(GPU_UTIL, &dl, f64::from(u) / 100.0);
    }
    if let Ok(t) = d.temperature {
        e.add(GPU_TEMP, &dl, f64::from(t));
    }
    if !with_processes {
        return;
    }
    // Only processes with a figure make series. Labels: the job (and rank); the MIG
    // instances where NVML gives them; the pid only where two would otherwise collide.
    let shown: Vec<(&ProcessSample, Vec<(&str, String)>)> = d
        .process_list()
        .iter()
        .filter(|p| p.used.is_some() || p.probe.as_ref().is_some_and(|pr| pr.live_bytes.is_some()))
        .map(|p| {
            let (job, rank) = job_of(p, procs);
            let mut l = vec![("job_id", job)];
            l.extend(rank.map(|r| ("rank", r)));
            l.extend(p.gpu_instance.map(|g| ("gpu_instance", g.to_string())));
            l.extend(
                p.compute_instance
                    .map(|c| ("compute_instance", c.to_string())),
            );
            (p, l)
        })
        .collect();
    let mut seen = HashSet::new();
    let mut twice = HashSet::new();
    for (_, l) in &shown {
        if !seen.insert(l) {
            twice.insert(l);
        }
    }
    for (p, l) in &shown {
        let pid = p.pid.to_string();
        let mut all = base.clone();
        all.extend(l.iter().map(|(k, v)| (*k, v.as_str())));
        if twice.contains(l) {
            all.push(("pid", &pid));
        }
        let pl = labels(&all);
        if let Some(u) = p.used {
            e.add(PROC_USED, &pl, u as f64);
        }
        let probe = p.probe.as_ref();
        if let Some(b) = probe.and_then(|pr| pr.live_bytes) {
            e.add(PROC_TRACKED, &pl, b as f64);
        }
        if let Some(f) = probe.and_then(|pr| pr.frag) {
            e.add(PROC_FRAG, &pl, f);
        }
        if let Some(b) = probe.and_then(|pr| pr.largest_free) {
            e.add(PROC_LARGEST, &pl, b as f64);
        }
    }
}

/// Writes `text` to `path` the way the textfile collector needs: whole, to a temporary
/// name in the same directory (not ending in `.prom`, so the collector never reads it),
/// then renamed over `path`, which readers see whole either way; `fsync` also makes it
/// survive a power loss.
pub fn write_textfile(path: &Path, text: &str, fsync: bool) -> std::io::Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "no file name"))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let r = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        if fsync {
            f.sync_all()?;
        }
        std::fs::rename(&tmp, path)
    })();
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

/// This machine's host name (`gethostname`), or "unknown".
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its whole length, which is what we pass.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    if r != 0 {
        return "unknown".into();
    }
    let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvml::sample::{Memory, Na, ProbeInfo, ProcInfo, ProcessKind};

    const MIB: u64 = 1 << 20;

    fn process(pid: u32, used: Option<u64>, cmd: &str, probed: bool) -> ProcessSample {
        ProcessSample {
            pid,
            kind: ProcessKind::Compute,
            used,
            gpu_instance: None,
            compute_instance: None,
            info: Some(ProcInfo {
                user: "u".into(),
                uid: 1000,
                ppid: 1,
                cmdline: cmd.into(),
                orphaned: false,
                age_secs: None,
            }),
            probe: probed.then(|| ProbeInfo {
                live_bytes: Some(64 * MIB),
                live_count: Some(3),
                frag: Some(0.25),
                largest_free: Some(512 * MIB),
                ..ProbeInfo::default()
            }),
        }
    }

    fn gpu(index: u32, uuid: &str, procs: Vec<ProcessSample>) -> DeviceSample {
        DeviceSample {
            uuid: Ok(uuid.into()),
            memory: Ok(Memory {
                total: 1024 * MIB,
                free: 600 * MIB,
                reserved: 24 * MIB,
                used_reported: 0,
            }),
            util_gpu: Ok(37),
            processes: Ok(procs),
            ..DeviceSample::missing(index, Na::NotSupported)
        }
    }

    /// A `/proc` with the given environments.
    fn fake_proc(name: &str, envs: &[(u32, &str)]) -> (ProcFs, std::path::PathBuf) {
        let root =
            std::env::temp_dir().join(format!("fragprobe-prom-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for (pid, env) in envs {
            let d = root.join(pid.to_string());
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("environ"), env.replace(' ', "\0")).unwrap();
        }
        (ProcFs::at(&root), root)
    }

    /// `name{labels} value` lines, as (name, labels, value).
    fn series(text: &str) -> Vec<(String, String, f64)> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| {
                let (head, value) = l.rsplit_once(' ').unwrap();
                let (name, rest) = head.split_once('{').unwrap();
                (
                    name.to_string(),
                    rest.trim_end_matches('}').to_string(),
                    value.parse().unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn gpus_and_processes_by_job_in_base_units() {
        let (procs, root) = fake_proc(
            "jobs",
            &[
                (10, "PATH=/bin SLURM_JOB_ID=4711 RANK=0"),
                (11, "SLURM_JOB_ID=4711 RANK=1"),
                (12, "HOME=/root"),
                (13, "HOME=/root"),
                (14, "HOME=/root"),
                (20, "SLURM_JOB_ID=77 SLURM_PROCID=5"),
            ],
        );
        let snap = Snapshot {
            unix_ns: 1_700_000_000_000_000_000,
            driver: Err(Na::NotSupported),
            devices: vec![
                gpu(
                    0,
                    "GPU-a",
                    vec![
                        process(10, Some(300 * MIB), "python train.py", true),
                        process(11, Some(200 * MIB), "python train.py", false),
                    ],
                ),
                gpu(
                    1,
                    "GPU-b",
                    vec![
                        process(12, Some(100 * MIB), "/usr/bin/jupyter lab", false),
                        process(13, Some(50 * MIB), "/opt/jupyter x", false),
                        process(14, None, "/opt/jupyter y", false),
                    ],
                ),
                {
                    // MIG: the parent lists its instances' processes too.
                    let mut parent =
                        gpu(2, "GPU-c", vec![process(20, Some(10 * MIB), "srun", false)]);
                    parent.mig = vec![gpu(
                        0,
                        "MIG-c0",
                        vec![process(20, Some(10 * MIB), "srun", false)],
                    )];
                    parent
                },
            ],
        };
        let text = exposition(&snap, "node\"7", &procs);
        let _ = std::fs::remove_dir_all(root);
        let s = series(&text);
        let get = |name: &str, has: &str| {
            s.iter()
                .find(|(n, l, _)| n == name && l.contains(has))
                .map(|(_, _, v)| *v)
                .unwrap_or_else(|| panic!("no {name} with {has} in\n{text}"))
        };
        // 1024 − 600 − 24 MiB.
        assert_eq!(
            get("fragprobe_gpu_memory_used_bytes", "uuid=\"GPU-b\""),
            (400 * MIB) as f64
        );
        assert_eq!(get("fragprobe_gpu_utilization_ratio", "gpu=\"0\""), 0.37);
        // The job and rank name a process, not its pid.
        assert_eq!(
            get(
                "fragprobe_process_memory_used_bytes",
                "job_id=\"4711\",rank=\"1\""
            ),
            (200 * MIB) as f64
        );
        assert_eq!(
            get("fragprobe_process_tracked_bytes", "rank=\"0\""),
            (64 * MIB) as f64
        );
        assert_eq!(
            get("fragprobe_process_fragmentation_ratio", "job_id=\"4711\""),
            0.25
        );
        assert!(
            !s.iter().any(|(_, l, _)| l.contains("pid=\"10\"")),
            "{text}"
        );
        // Two jupyters on GPU 1 would be one series: the pid tells them apart; a third has
        // no figure, gets no series, and does not make the other two need their pids.
        assert_eq!(
            get(
                "fragprobe_process_memory_used_bytes",
                "job_id=\"jupyter\",pid=\"12\""
            ),
            (100 * MIB) as f64
        );
        assert_eq!(
            get(
                "fragprobe_process_memory_used_bytes",
                "job_id=\"jupyter\",pid=\"13\""
            ),
            (50 * MIB) as f64
        );
        assert!(
            !s.iter().any(|(_, l, _)| l.contains("pid=\"14\"")),
            "{text}"
        );
        // The MIG instance: its parent's gpu and its own mig; its process counted once,
        // with Slurm's rank.
        assert_eq!(
            get("fragprobe_gpu_memory_total_bytes", "gpu=\"2\",mig=\"0\""),
            (1024 * MIB) as f64
        );
        let on_gpu2: Vec<_> = s
            .iter()
            .filter(|(n, l, _)| {
                n == "fragprobe_process_memory_used_bytes" && l.contains("gpu=\"2\"")
            })
            .collect();
        assert_eq!(on_gpu2.len(), 1, "{text}");
        assert!(
            on_gpu2[0].1.contains("mig=\"0\"") && on_gpu2[0].1.contains("job_id=\"77\",rank=\"5\""),
            "{text}"
        );
        // Label values are escaped; HELP and TYPE once per metric; no series twice.
        assert!(text.contains("hostname=\"node\\\"7\""), "{text}");
        assert_eq!(
            text.matches("# TYPE fragprobe_gpu_memory_total_bytes gauge")
                .count(),
            1
        );
        let mut keys: Vec<(&String, &String)> = s.iter().map(|(n, l, _)| (n, l)).collect();
        let n = keys.len();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), n, "{text}");
        assert_eq!(get("fragprobe_sample_timestamp_seconds", "hostname"), 1.7e9);
    }

    #[test]
    fn the_file_is_replaced_whole() {
        let dir = std::env::temp_dir().join(format!("fragprobe-prom-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("fragprobe.prom");
        write_textfile(&p, "a 1\n", false).unwrap();
        write_textfile(&p, "b 2\n", true).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "b 2\n");
        // Nothing left beside it (the collector reads every *.prom file of the directory).
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        let err = write_textfile(&dir.join("missing/x.prom"), "c 3\n", false).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
