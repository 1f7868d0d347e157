#!/usr/bin/env bash
# Makes what build.py needs to compile against an old glibc, once per machine, outside the
# checkout: cargo-zigbuild (crates.io) and zig (PyPI's ziglang, in its own venv, ~440 MB,
# with auditwheel, PyPA's manylinux checker, to confirm the tag build.py measured).
# Prints the directory to put first on PATH:  PATH="$(bash viewer/wheel/zig-toolchain.sh):$PATH"
set -euo pipefail
venv=${FRAGPROBE_ZIG_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/fragprobe/zig-0.17.1}
if ! "$venv/bin/python" -m ziglang version >/dev/null 2>&1 || [ ! -x "$venv/bin/auditwheel" ]; then
  python3 -m venv "$venv" >&2
  "$venv/bin/python" -m pip install -q ziglang==0.17.1 auditwheel==6.8.2 >&2
fi
command -v cargo-zigbuild >/dev/null 2>&1 || cargo install -q cargo-zigbuild --version 0.24.1 --locked >&2
echo "$venv/bin"
