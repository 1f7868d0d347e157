//! What the tests that run NVIDIA's and PyTorch's own code need from outside the checkout
//! (made once per machine by `cuda/fetch-nvidia-runtime.sh` and `cuda/torch-venv.sh`).

use std::path::PathBuf;

/// `$VAR` when set, else `${XDG_CACHE_HOME:-$HOME/.cache}/fragprobe/NAME`, as the scripts
/// choose it.
pub fn dir(var: &str, name: &str) -> Option<PathBuf> {
    match std::env::var_os(var) {
        Some(v) => Some(PathBuf::from(v)),
        None => Some(root()?.join(name)),
    }
}

/// `${XDG_CACHE_HOME:-$HOME/.cache}/fragprobe`.
fn root() -> Option<PathBuf> {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(cache.join("fragprobe"))
}

/// Says that `what` is missing and how to make it: a failure under CI (which makes it
/// first), one line and a skip elsewhere (a user's clone without the download).
pub fn missing(what: &str) {
    assert!(std::env::var_os("CI").is_none(), "{what}");
    eprintln!("SKIPPED: {what}");
}

/// The python of the venv `cuda/torch-venv.sh` makes for PyPI's `torch==version`
/// (`$FRAGPROBE_TORCH_VENVS/torch-VERSION`, else in the cache directory), when it imports
/// torch; else [`missing`] says how to make it.
pub fn torch_python(version: &str) -> Option<PathBuf> {
    let name = format!("torch-{version}");
    let venv = match std::env::var_os("FRAGPROBE_TORCH_VENVS") {
        Some(r) => PathBuf::from(r).join(&name),
        None => root()?.join(&name),
    };
    let py = venv.join("bin/python");
    let ok = py.is_file()
        && std::process::Command::new(&py)
            .args(["-c", "import torch"])
            .output()
            .is_ok_and(|o| o.status.success());
    if ok {
        return Some(py);
    }
    missing(&format!(
        "no venv with PyPI's torch {version} at {} (run `bash cuda/torch-venv.sh {version}`; \
         it needs PyPI and about 7 GB)",
        venv.display()
    ));
    None
}
