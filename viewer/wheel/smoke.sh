#!/usr/bin/env bash
# Installs a fragprobe wheel into a fresh venv and uses it as a user would, from a directory
# that is not the checkout and with no fragprobe variables set:
#   bash viewer/wheel/smoke.sh target/wheels/fragprobe-*.whl
# Checks: the command and `python -m fragprobe` run, probe-path points inside the venv, the
# demo ends in its fragmentation OOM, `fragprobe run` and a hand-made LD_PRELOAD record a
# Python program's cudaMalloc calls on the simulated GPU. Exits non-zero on the first failure.
set -euo pipefail
[ $# -eq 1 ] && [ -f "$1" ] || { echo "usage: $0 WHEEL" >&2; exit 2; }
wheel=$(realpath "$1")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "smoke: FAILED: $*" >&2; exit 1; }

python3 -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q --no-index --no-deps "$wheel"
cd "$work"
unset FRAGPROBE_ARTIFACT_DIR FRAGPROBE_PROBE_LIB FRAGPROBE_SIM_STATE LD_PRELOAD
export PATH="$work/venv/bin:$PATH"
export FRAGPROBE_SIM_STATE="$work/simgpu.state" # a private simulated device for this check

[ "$(command -v fragprobe)" = "$work/venv/bin/fragprobe" ] || fail "fragprobe is not the venv's"
fragprobe --version
[ "$(python -m fragprobe --version)" = "$(fragprobe --version)" ] || fail "python -m fragprobe"
probe=$(fragprobe probe-path)
case "$probe" in "$(realpath "$work")"/venv/*) ;; *) fail "probe-path gave $probe" ;; esac
[ "$(python -c 'import fragprobe; print(fragprobe.probe_path())')" = "$probe" ] ||
  fail "fragprobe.probe_path() differs from fragprobe probe-path"
echo "probe: $probe"

fragprobe demo --no-view -o demo.fpt >demo.txt || fail "demo exited $?"
grep -q "failed with FRAGMENTATION" demo.txt || { cat demo.txt; fail "the demo did not end in its fragmentation OOM"; }
echo "demo: $(grep -c . demo.txt) lines, ends in the fragmentation OOM"

# A Python program that allocates through NVIDIA's runtime API (the simulated GPU's libcudart).
cat >alloc.py <<'EOF'
import ctypes, sys
rt = ctypes.CDLL("libcudart.so.12")
ptrs = []
for size in (1 << 20, 3 << 20, 5 << 20):
    p = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(size)) == 0
    ptrs.append(p)
for p in ptrs:
    assert rt.cudaFree(p) == 0
maps = open("/proc/self/maps").read()
print("probe loaded" if "libfragprobe.so" in maps else "probe NOT loaded")
EOF
fragprobe run --record run.fpt --simulated-gpu=1x8GiB -- python alloc.py >run.txt 2>&1 || { cat run.txt; fail "run"; }
grep -q "probe loaded" run.txt || { cat run.txt; fail "run did not preload the probe"; }
fragprobe report --json run.fpt >run.json
python - <<'EOF' || fail "the report of run.fpt"
import json
a = json.load(open("run.json"))["allocations"]
assert a["ok"] == 3 and a["frees"] == 3, a
print("run: 3 cudaMalloc and 3 cudaFree recorded")
EOF

libs=$(fragprobe probe-path --simulated-gpu-libs)
out=$(LD_LIBRARY_PATH="$libs" LD_PRELOAD="$probe" python alloc.py)
[ "$out" = "probe loaded" ] || fail "LD_PRELOAD=\$(fragprobe probe-path) python: $out"
echo "LD_PRELOAD=\$(fragprobe probe-path) python alloc.py: $out"
# Real PyTorch, when a Python that imports torch is named (CI names the torch venv):
# the wheel's command runs the real-PyTorch demo and records a real torch program.
if [ -n "${FRAGPROBE_SMOKE_TORCH_PYTHON:-}" ]; then
  tpy=$FRAGPROBE_SMOKE_TORCH_PYTHON
  fragprobe demo --torch --python "$tpy" -o demo-torch >demo-torch.txt 2>&1 ||
    { cat demo-torch.txt; fail "demo --torch"; }
  grep -q "expandable_segments:True avoided it" demo-torch.txt ||
    { cat demo-torch.txt; fail "demo --torch did not end as it should"; }
  echo "demo --torch: the default run ran out of memory from fragmentation, expandable_segments:True fit"
  fragprobe run --record torch.fpt --simulated-gpu=1x8GiB -- "$tpy" -c \
    "import torch; x = [torch.empty(64 << 20, dtype=torch.uint8, device='cuda') for _ in range(3)]; print('TORCH OK')" \
    >torch.txt 2>&1 || { cat torch.txt; fail "run -- python (torch)"; }
  grep -q "TORCH OK" torch.txt || { cat torch.txt; fail "the torch program did not run"; }
  fragprobe report --json torch.fpt >torch.json
  "$tpy" - <<'EOF2' || fail "the report of torch.fpt"
import json
a = json.load(open("torch.json"))["allocations"]
assert a["ok"] >= 3, a
print("run -- python (torch): %d device allocations recorded" % a["ok"])
EOF2
fi
echo "smoke: OK ($(du -h "$wheel" | cut -f1) wheel, installed $(du -sh "$work/venv/lib/fragprobe" | cut -f1) of libraries)"
