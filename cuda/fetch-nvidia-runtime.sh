#!/usr/bin/env bash
# Fetches NVIDIA's own CUDA runtime (libcudart, from PyPI's wheels — the same library every
# PyTorch wheel loads) for the tests that run it on the simulated GPU, once per machine,
# outside the checkout:
#   DIR/12.8/libcudart.so.12   (nvidia-cuda-runtime-cu12 12.8.90)
#   DIR/13.0/libcudart.so.13   (nvidia-cuda-runtime 13.0.96)
# DIR is $FRAGPROBE_NVIDIA_RUNTIME_DIR, else ${XDG_CACHE_HOME:-$HOME/.cache}/fragprobe/nvidia-runtime.
# A few MB; reused when present. Needs python3 with pip (only `pip download`: nothing is
# installed).
set -euo pipefail
dir="${FRAGPROBE_NVIDIA_RUNTIME_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/fragprobe/nvidia-runtime}"
fetch() { # version-dir package==version library
  local out="$dir/$1"
  if [ -f "$out/$3" ]; then return 0; fi
  local tmp
  tmp="$(mktemp -d)"
  python3 -m pip download -q --no-deps --only-binary=:all: \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d "$tmp" "$2"
  mkdir -p "$out"
  python3 - "$tmp" "$out" "$3" <<'PY'
import pathlib, sys, zipfile
tmp, out, lib = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
for whl in tmp.glob("*.whl"):
    with zipfile.ZipFile(whl) as z:
        for name in z.namelist():
            if name.endswith("/" + lib):
                (out / lib).write_bytes(z.read(name))
                sys.exit(0)
sys.exit(f"{lib} not found in {[w.name for w in tmp.glob('*.whl')]}")
PY
  rm -rf "$tmp"
}
fetch 12.8 nvidia-cuda-runtime-cu12==12.8.90 libcudart.so.12
fetch 13.0 nvidia-cuda-runtime==13.0.96 libcudart.so.13
echo "NVIDIA runtimes in $dir: $(cd "$dir" && ls */libcudart.so.* | tr '\n' ' ')"
