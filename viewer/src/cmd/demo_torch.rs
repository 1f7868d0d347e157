//! `fragprobe demo --torch`: the demo on real PyTorch. A short PyTorch program
//! (`demo_torch.py`, written next to the traces) runs twice on a simulated GPU under the
//! probe with `--torch-snapshot`: under the default caching allocator it runs out of memory
//! from fragmentation, with `expandable_segments:True` it fits. Both runs are recorded,
//! reported and compared, and the ending says which setting avoided the OOM — measured by
//! the second run, not predicted.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use anyhow::Context;

use super::sweep::{render_sweep, sweep, Plan, DEFAULT_CONF};
use crate::exit;
use crate::load::CodedError;

/// The program, as shipped inside the binary.
pub const PROGRAM: &str = include_str!("demo_torch.py");
/// The simulated device: small, so the two runs take seconds.
pub const GPU: &str = "1x2GiB";
/// The configurations compared.
pub const CONFS: [&str; 2] = [DEFAULT_CONF, "expandable_segments:True"];

/// The Python to run: `--python`, else a `python3` beside the `fragprobe` executable (the
/// venv `pip install` put it in), else `python3` on `PATH`.
pub fn python(given: Option<&Path>) -> PathBuf {
    if let Some(p) = given {
        return p.to_path_buf();
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("python3")));
    match beside {
        Some(p) if p.is_file() => p,
        _ => PathBuf::from("python3"),
    }
}

/// Checks that `python` imports torch, with an answer that says what to do when it does not.
fn check_torch(python: &Path) -> Result<String, CodedError> {
    let out = Command::new(python)
        .args(["-c", "import torch; print(torch.__version__)"])
        .stdin(Stdio::null())
        .output();
    let hint = "install PyTorch into that Python (pip install torch), or name one that has it with --python PATH; the plain `fragprobe demo` needs nothing";
    match out {
        Err(e) => Err(CodedError::new(
            exit::NO_INPUT,
            format!(
                "demo --torch: cannot run {}: {e} ({hint})",
                python.display()
            ),
        )),
        Ok(o) if !o.status.success() => {
            let err = String::from_utf8_lossy(&o.stderr);
            let last = err.lines().last().unwrap_or("").trim().to_string();
            Err(CodedError::new(
                exit::NO_INPUT,
                format!(
                    "demo --torch: {} cannot import torch ({last}): {hint}",
                    python.display()
                ),
            ))
        }
        Ok(o) => Ok(String::from_utf8_lossy(&o.stdout).trim().to_string()),
    }
}

/// `fragprobe demo --torch`: traces, snapshots and the program go in `dir`.
pub fn run(dir: &Path, python_arg: Option<&Path>) -> anyhow::Result<ExitCode> {
    let python = python(python_arg);
    let version = check_torch(&python)?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let program = dir.join("demo_torch.py");
    std::fs::write(&program, PROGRAM).with_context(|| format!("writing {}", program.display()))?;
    eprintln!(
        "fragprobe demo --torch: PyTorch {version} ({}) on a simulated {GPU} GPU, once per setting",
        python.display()
    );
    let plan = Plan {
        confs: CONFS.iter().map(|c| c.to_string()).collect(),
        dir: dir.to_path_buf(),
        simulated_gpu: Some(GPU.to_string()),
        torch_snapshot: Some(100_000),
        command: vec![python.into_os_string(), OsString::from(&program)],
        env: Vec::new(),
    };
    let swept = match sweep(&plan)? {
        Ok(s) => s,
        Err(code) => return Ok(code),
    };
    let mut text = render_sweep(&swept.sweep);
    text.push('\n');
    text += &ending(&swept.reports);
    text += &format!(
        "\nNext: fragprobe view {0}/01-default.fpt {0}/02-expandable_segments_True.fpt   ·   fragprobe report {0}/01-default.fpt\n",
        swept.dir.display()
    );
    crate::stdout::print(&text)?;
    if swept.incomplete {
        return Ok(ExitCode::from(exit::TRACE_INCOMPLETE));
    }
    Ok(ExitCode::SUCCESS)
}

/// What happened under each setting, in words, from the reports.
pub fn ending(reports: &[crate::report::Report]) -> String {
    let mut out = String::new();
    for r in reports {
        let oom = r.torch_snapshots.iter().find_map(|t| t.oom.as_ref());
        match oom {
            Some(m) => {
                out += &format!("{}: {}\n", r.label, crate::report::oom_line(m));
            }
            None if r.failed_allocations.is_empty() => {
                out += &format!(
                    "{}: it fit, with no failed allocation (peak {} of device memory in use).\n",
                    r.label,
                    crate::report::bytes(r.bytes.peak_live)
                );
            }
            None => {
                out += &format!(
                    "{}: {} failed allocation(s), no PyTorch OOM snapshot.\n",
                    r.label,
                    r.failed_allocations.len()
                );
            }
        }
    }
    let frag = |r: &crate::report::Report| {
        r.torch_snapshots
            .iter()
            .any(|t| t.oom.as_ref().is_some_and(|m| m.verdict == "fragmentation"))
    };
    if let [native, expandable] = reports {
        if frag(native) && expandable.failed_allocations.is_empty() && !frag(expandable) {
            out += "So the OOM was fragmentation, and expandable_segments:True avoided it: measured by running the program both ways, not predicted.\n";
        }
    }
    out
}
