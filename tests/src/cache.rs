//! What the tests that run NVIDIA's and PyTorch's own code need from outside the checkout
//! (made once per machine by `cuda/fetch-nvidia-runtime.sh` and `cuda/torch-venv.sh`).

use std::path::PathBuf;

/// `$VAR` when set, else `${XDG_CACHE_HOME:-$HOME/.cache}/fragprobe/NAME`, as the scripts
/// choose it.
pub fn dir(var: &str, name: &str) -> Option<PathBuf> {
    if let Some(v) = std::env::var_os(var) {
        return Some(PathBuf::from(v));
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(cache.join("fragprobe").join(name))
}

/// Says that `what` is missing and how to make it: a failure under CI (which makes it
/// first), one line and a skip elsewhere (a user's clone without the download).
pub fn missing(what: &str) {
    assert!(std::env::var_os("CI").is_none(), "{what}");
    eprintln!("SKIPPED: {what}");
}
