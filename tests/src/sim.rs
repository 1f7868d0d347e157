//! Running programs on the simulated GPU: builds the stand-in libraries and the C scenario
//! programs of `cuda/scenarios`, and prepares their environment.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

pub use fragprobe_simgpu::config::{
    ENV_CONTEXT_OVERHEAD, ENV_FAIL_ABOVE, ENV_FAIL_NTH, ENV_GPU, ENV_LATENCY_NS, ENV_STATE,
};

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// Cargo's output directory for the current profile (`target/<profile>`), derived from the
/// running test executable (`target/<profile>/deps/<test>`).
pub fn artifact_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("exe directory");
    if deps.file_name().is_some_and(|n| n == "deps") {
        deps.parent().expect("profile directory").to_path_buf()
    } else {
        deps.to_path_buf()
    }
}

/// Builds `packages` with the same cargo, target directory and profile as the running
/// tests.
pub fn cargo_build(packages: &[&str]) {
    let art = artifact_dir();
    let target_dir = art.parent().expect("target directory").to_path_buf();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.arg("build")
        .arg("--manifest-path")
        .arg(workspace_root().join("Cargo.toml"));
    for p in packages {
        cmd.args(["-p", p]);
    }
    cmd.arg("--target-dir").arg(&target_dir);
    match art.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => {}
        Some("release") => {
            cmd.arg("--release");
        }
        Some(other) => {
            cmd.args(["--profile", other]);
        }
    }
    let status = cmd.status().expect("run cargo build");
    assert!(status.success(), "building {packages:?} failed");
}

/// Builds the three stand-in libraries (once per test process) with the same cargo, target
/// directory and profile as the running tests.
pub fn ensure_sim_built() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        cargo_build(&[
            "fragprobe-simgpu-driver",
            "fragprobe-simgpu-runtime",
            "fragprobe-simgpu-nvml",
        ])
    });
}

/// The directory of `libcuda.so.1`, `libcudart.so.12` and `libnvidia-ml.so.1` links.
pub fn lib_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        ensure_sim_built();
        let art = artifact_dir();
        fragprobe_simgpu::prepare_lib_dir(&art, &art.join("simgpu-lib"))
            .expect("prepare the simulated GPU library directory")
    })
    .clone()
}

/// The built stand-in driver (`target/<profile>/libcuda.so`).
pub fn driver_library() -> PathBuf {
    ensure_sim_built();
    artifact_dir().join("libcuda.so")
}

/// The built stand-in NVML (`target/<profile>/libnvidia_ml.so`).
pub fn nvml_library() -> PathBuf {
    ensure_sim_built();
    artifact_dir().join("libnvidia_ml.so")
}

/// Compiles `cuda/scenarios/<name>.c` with `cc` (or `$CC`) against the stand-ins, once per
/// test process; returns the program's path.
pub fn build_scenario(name: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let map = BUILT.get_or_init(|| Mutex::new(HashMap::new()));
    let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = map.get(name) {
        return p.clone();
    }
    ensure_sim_built();
    let root = workspace_root();
    let src = root.join("cuda/scenarios").join(format!("{name}.c"));
    assert!(src.is_file(), "no scenario {}", src.display());
    let art = artifact_dir();
    let out_dir = art.join("simgpu-scenarios");
    std::fs::create_dir_all(&out_dir).expect("scenario directory");
    let out = out_dir.join(name);
    // compile to a private name, then rename: test processes may build the same scenario
    let tmp = out_dir.join(format!(".{name}.{}", std::process::id()));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let output = Command::new(&cc)
        .args(["-std=gnu11", "-O1", "-Wall", "-Wextra", "-Werror"])
        .arg("-I")
        .arg(root.join("cuda/include"))
        .arg(&src)
        .arg("-o")
        .arg(&tmp)
        .arg("-L")
        .arg(&art)
        .args(["-Wl,--as-needed", "-lcuda", "-lcudart", "-ldl", "-lpthread"])
        .output()
        .unwrap_or_else(|e| panic!("run {cc}: {e}"));
    assert!(
        output.status.success(),
        "compiling {} failed:\n{}",
        src.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::rename(&tmp, &out).expect("rename scenario");
    map.insert(name.to_string(), out.clone());
    out
}

/// A state file of its own for one simulation (under the target directory).
pub fn fresh_state_path() -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = artifact_dir().join("simgpu-state");
    std::fs::create_dir_all(&dir).expect("state directory");
    let p = dir.join(format!(
        "{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_file(&p);
    p
}

/// Applies the simulated-GPU environment to `cmd`: library path, `spec`, a fresh state file,
/// and no fault injection, latency or overhead setting inherited from the test's own
/// environment (the context overhead is the default 300 MiB).
pub fn sim_env_on(cmd: &mut Command, spec: Option<&str>) -> PathBuf {
    for (k, v) in fragprobe_simgpu::sim_env(spec, &lib_dir()) {
        cmd.env(k, v);
    }
    if spec.is_none() {
        cmd.env_remove(ENV_GPU);
    }
    for k in [
        ENV_FAIL_NTH,
        ENV_FAIL_ABOVE,
        ENV_LATENCY_NS,
        ENV_CONTEXT_OVERHEAD,
    ] {
        cmd.env_remove(k);
    }
    let state = fresh_state_path();
    cmd.env(ENV_STATE, &state);
    state
}

/// A command running scenario `name` on the simulated GPU with devices `spec` (None: the
/// default one 16 GiB device) and a private state file (`FRAGPROBE_SIM_STATE` in the
/// command's environment; share it with another process to let it see the same devices).
pub fn sim_command(scenario: &str, spec: Option<&str>) -> Command {
    let mut cmd = Command::new(build_scenario(scenario));
    sim_env_on(&mut cmd, spec);
    cmd
}

/// The state file a command from [`sim_command`] uses.
pub fn state_of(cmd: &Command) -> Option<PathBuf> {
    cmd.get_envs()
        .find(|(k, _)| *k == ENV_STATE)
        .and_then(|(_, v)| v.map(PathBuf::from))
}

/// Set in a test's child process started by [`rerun_test`].
pub const ENV_CHILD: &str = "FRAGPROBE_TEST_CHILD";

/// True inside the child process [`rerun_test`] started for test `name`.
pub fn is_child(name: &str) -> bool {
    std::env::var(ENV_CHILD).as_deref() == Ok(name)
}

/// Runs test `name` of the current test executable again, alone, in a child process with
/// the simulated-GPU environment (so that libraries loaded at run time, like cudarc's
/// `libcuda`, find the stand-ins). `adjust` may change the command (e.g. share a state
/// file). Returns the child's output; the test body checks [`is_child`] to know its role. A
/// test that only makes sense as a child can be `#[ignore]`d: the child runs ignored tests.
pub fn rerun_test(
    name: &str,
    spec: Option<&str>,
    adjust: impl FnOnce(&mut Command),
) -> std::process::Output {
    let mut cmd = Command::new(std::env::current_exe().expect("current_exe"));
    cmd.args([
        name,
        "--exact",
        "--nocapture",
        "--test-threads=1",
        "--include-ignored",
    ])
    .env(ENV_CHILD, name);
    sim_env_on(&mut cmd, spec);
    adjust(&mut cmd);
    let out = cmd.output().expect("run the test's child process");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("running 1 test"),
        "the child did not run test {name}:\n{stdout}"
    );
    out
}

/// One `FPSCN` line of a scenario's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioLine {
    pub pid: u32,
    pub tid: u64,
    pub op: String,
    pub api: String,
    pub dev: i32,
    pub addr: u64,
    pub size: u64,
    pub aux: u64,
    pub res: i32,
}

/// Starts a scenario with `--hold` (stdin and stdout piped) and waits until it prints
/// `FPSCN-HOLD`; returns the child, still holding its memory until its stdin closes, and
/// what it printed before.
pub fn spawn_held(mut cmd: Command) -> (Child, String) {
    let mut child = cmd
        .arg("--hold")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the scenario with --hold");
    let mut reader = BufReader::new(child.stdout.take().expect("stdout"));
    let mut text = String::new();
    loop {
        let mut l = String::new();
        assert!(
            reader.read_line(&mut l).expect("read") > 0,
            "the scenario ended before holding: {text}"
        );
        if l.starts_with("FPSCN-HOLD") {
            break;
        }
        text.push_str(&l);
    }
    (child, text)
}

/// Parses the `FPSCN ...` lines of scenario output (other lines are skipped).
pub fn parse_lines(output: &str) -> Vec<ScenarioLine> {
    output.lines().filter_map(parse_line).collect()
}

/// Parses one `FPSCN pid=… tid=… op=… api=… dev=… addr=0x… size=… aux=0x… res=…` line.
pub fn parse_line(line: &str) -> Option<ScenarioLine> {
    let rest = line.strip_prefix("FPSCN ")?;
    let mut kv = HashMap::new();
    for field in rest.split_whitespace() {
        let (k, v) = field.split_once('=')?;
        kv.insert(k, v);
    }
    let hex = |k: &str| u64::from_str_radix(kv.get(k)?.strip_prefix("0x")?, 16).ok();
    Some(ScenarioLine {
        pid: kv.get("pid")?.parse().ok()?,
        tid: kv.get("tid")?.parse().ok()?,
        op: kv.get("op")?.to_string(),
        api: kv.get("api")?.to_string(),
        dev: kv.get("dev")?.parse().ok()?,
        addr: hex("addr")?,
        size: kv.get("size")?.parse().ok()?,
        aux: hex("aux")?,
        res: kv.get("res")?.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_grammar() {
        let l = parse_line("FPSCN pid=12 tid=13 op=alloc api=cuMemAlloc_v2 dev=0 addr=0x7000 size=512 aux=0x0 res=0").unwrap();
        assert_eq!(l.pid, 12);
        assert_eq!(l.api, "cuMemAlloc_v2");
        assert_eq!(l.addr, 0x7000);
        assert_eq!(parse_line("FPSCN-SUMMARY allocs=1 frees=1"), None);
        assert_eq!(parse_line("FPSCN pid=x"), None);
    }
}
