//! Where fragprobe's own files are. A cargo build puts the probe library and the simulated
//! GPU's libraries beside the `fragprobe` executable (`target/<profile>/`); the wheel
//! installs the executable as `<prefix>/bin/fragprobe` and the libraries in
//! `<prefix>/lib/fragprobe/` (see `viewer/wheel/`). This module is the one place that knows
//! both layouts.

use std::path::{Path, PathBuf};

/// Overrides the directory the libraries are looked up in.
pub const ENV_ARTIFACT_DIR: &str = "FRAGPROBE_ARTIFACT_DIR";
/// The probe library's file name.
pub const PROBE_LIB: &str = "libfragprobe.so";
/// Where the wheel puts the libraries, relative to the executable's directory.
pub const WHEEL_LIB_DIR: &str = "../lib/fragprobe";

/// The directory holding `libfragprobe.so` and the simulated GPU's libraries:
/// `$FRAGPROBE_ARTIFACT_DIR`, else [`artifact_dir_of`] the running executable's directory.
pub fn artifact_dir() -> PathBuf {
    if let Some(d) = std::env::var_os(ENV_ARTIFACT_DIR) {
        return PathBuf::from(d);
    }
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."));
    artifact_dir_of(&exe_dir)
}

/// The libraries' directory for an executable in `exe_dir`: `exe_dir` itself when the
/// probe is there (a cargo build; a test binary in `deps/` looks one level up), else the
/// wheel's `exe_dir/../lib/fragprobe` when the probe is there, else the build directory, so
/// that an error names where a build would have put them.
pub fn artifact_dir_of(exe_dir: &Path) -> PathBuf {
    let build = if exe_dir.file_name().is_some_and(|n| n == "deps") {
        exe_dir
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| exe_dir.to_path_buf())
    } else {
        exe_dir.to_path_buf()
    };
    if build.join(PROBE_LIB).is_file() {
        return build;
    }
    let wheel = exe_dir.join(WHEEL_LIB_DIR);
    if wheel.join(PROBE_LIB).is_file() {
        return wheel.canonicalize().unwrap_or(wheel);
    }
    build
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_libraries_of_a_build_and_of_a_wheel() {
        let base = std::env::temp_dir().join(format!("fragprobe-install-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        // a cargo build: everything in one directory, test binaries one below
        let build = base.join("target/debug");
        std::fs::create_dir_all(build.join("deps")).unwrap();
        assert_eq!(
            artifact_dir_of(&build),
            build,
            "nothing built yet: the build dir"
        );
        std::fs::write(build.join(PROBE_LIB), b"x").unwrap();
        assert_eq!(artifact_dir_of(&build), build);
        assert_eq!(artifact_dir_of(&build.join("deps")), build);
        // a wheel: bin/fragprobe and lib/fragprobe/*.so
        let prefix = base.join("venv");
        std::fs::create_dir_all(prefix.join("bin")).unwrap();
        std::fs::create_dir_all(prefix.join("lib/fragprobe")).unwrap();
        assert_eq!(artifact_dir_of(&prefix.join("bin")), prefix.join("bin"));
        std::fs::write(prefix.join("lib/fragprobe").join(PROBE_LIB), b"x").unwrap();
        assert_eq!(
            artifact_dir_of(&prefix.join("bin")),
            prefix.join("lib/fragprobe").canonicalize().unwrap()
        );
        std::fs::remove_dir_all(&base).unwrap();
    }
}
