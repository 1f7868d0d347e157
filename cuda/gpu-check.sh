#!/usr/bin/env bash
# fragprobe on a real NVIDIA GPU: one script, no network, no Rust toolchain, under 8 minutes.
#
#   FRAGPROBE_BIN=/path/with/fragprobe-and-libfragprobe.so  bash cuda/gpu-check.sh
#
# Needs: an NVIDIA driver, python3 with torch (CUDA build); nvcc optional (static-cudart
# check); CuPy/JAX are not required. It runs a small training loop under the probe with the
# native allocator, expandable_segments:True and backend:cudaMallocAsync, and prints one
# verdict line per check:
#   1. live bytes seen by the probe == torch.cuda.memory_reserved() at every checkpoint
#      (memory_allocated() for cudaMallocAsync, whose pool is opaque)
#   2. device allocations seen == memory_stats()["num_device_alloc"] (native allocator)
#   3. NVML's figure for the process − tracked bytes == the context overhead alone
#   4. a statically linked nvcc program is fully seen (every call it printed is recorded)
#   5. overhead on the loop < 1 % (median of 3 runs with vs without the probe)
#   6. run --torch-snapshot: PyTorch's exit snapshot is written, and every segment in it
#      is an allocation the probe saw from the same process
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="${FRAGPROBE_BIN:-$here/../target/release}"
fp="$bin/fragprobe"
out="${OUT:-$(mktemp -d)}"
steps="${STEPS:-60}"
export NO_COLOR=1 NO_PROGRESS=1
fails=0
verdict() { printf '%-4s %s\n' "$1" "$2"; [ "$1" = FAIL ] && fails=$((fails + 1)); return 0; }

[ -x "$fp" ] && [ -f "$bin/libfragprobe.so" ] || { echo "FAIL fragprobe binaries not found in $bin (set FRAGPROBE_BIN)"; exit 1; }
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null || { echo "FAIL python3 with CUDA torch is required"; exit 1; }

compare_checkpoints() { # $1 = stdout of the run, $2 = trace, $3 = field to compare (reserved|allocated)
  "$fp" export --format csv "$2" -o "$2.csv" >/dev/null 2>&1 || return 1
  python3 - "$1" "$2.csv" "$3" <<'PY'
import bisect, csv, sys
lines = [l.split() for l in open(sys.argv[1]) if l.startswith("FPCHECK ")]
rows = list(csv.DictReader(open(sys.argv[2])))
ts = [int(r["time_ns"]) for r in rows]
bad = 0
for l in lines:
    t = int(l[1]); kv = dict(x.split("=", 1) for x in l[2:])
    i = bisect.bisect_right(ts, t) - 1
    live = int(rows[i]["live_bytes"]) if i >= 0 else 0
    want = int(kv[sys.argv[3]])
    ok = live == want
    bad += not ok
    print(f"     {kv['tag']:<18} probe live {live:>13}  torch {sys.argv[3]} {want:>13}  {'ok' if ok else 'MISMATCH'}")
sys.exit(1 if bad or not lines else 0)
PY
}

for conf in "" "expandable_segments:True" "backend:cudaMallocAsync"; do
  name="${conf:-native}"; name="${name//[:]/_}"
  trace="$out/$name.fpt"
  PYTORCH_CUDA_ALLOC_CONF="$conf" timeout 120 "$fp" record -q -o "$trace" -- python3 "$here/gpu-check/train.py" "$steps" >"$out/$name.out" 2>"$out/$name.err"
  rc=$?
  [ $rc -eq 0 ] || { verdict FAIL "[$name] the training loop under the probe exited $rc (see $out/$name.err)"; continue; }
  field=reserved; [ "$conf" = "backend:cudaMallocAsync" ] && field=allocated
  if compare_checkpoints "$out/$name.out" "$trace" "$field" >"$out/$name.cmp"; then
    verdict PASS "[$name] probe live bytes == torch.cuda.memory_$field() at every checkpoint"
  else
    verdict FAIL "[$name] probe live bytes != torch.cuda.memory_$field()"; cat "$out/$name.cmp"
  fi
  "$fp" report --json "$trace" >"$out/$name.json"
  if [ -z "$conf" ]; then
    python3 - "$out/$name.out" "$out/$name.json" <<'PY' && verdict PASS "[native] device allocations == num_device_alloc" || verdict FAIL "[native] device allocations != num_device_alloc"
import json, sys
want = [int(l.split("num_device_alloc=")[1].split()[0]) for l in open(sys.argv[1]) if l.startswith("FPCHECK ")][-1]
r = json.load(open(sys.argv[2]))
got = r["allocations"]["ok"]
print(f"     probe {got} allocations, torch num_device_alloc {want}")
sys.exit(0 if got == want else 1)
PY
  fi
done

# 3. NVML: the process's figure minus tracked bytes is the context overhead alone.
python3 - "$fp" "$out" <<'PY' && verdict PASS "NVML process memory − tracked bytes == context overhead (± 2 MiB)" || verdict FAIL "NVML process memory − tracked bytes is more than the context overhead"
import subprocess, sys, time, os
fp, out = sys.argv[1], sys.argv[2]
code = r'''
import torch, time, sys
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
print("BASE", flush=True); sys.stdin.readline()
x = torch.empty(512 << 20, dtype=torch.uint8, device="cuda"); torch.cuda.synchronize()
print("HELD", flush=True); sys.stdin.readline()
'''
p = subprocess.Popen([fp, "run", "-q", "--no-record", "--", sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
def nvml_used(pid):
    q = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout
    for l in q.splitlines():
        a, b = [s.strip() for s in l.split(",")]
        if a.isdigit() and int(a) in pid: return int(b) << 20
    return None
def kids(pid):
    try: return {pid} | {int(c) for c in open(f"/proc/{pid}/task/{pid}/children").read().split()} | set().union(*[kids(int(c)) for c in open(f"/proc/{pid}/task/{pid}/children").read().split()] or [set()])
    except OSError: return {pid}
p.stdout.readline(); time.sleep(1); base = nvml_used(kids(p.pid))
p.stdin.write("\n"); p.stdin.flush(); p.stdout.readline(); time.sleep(1); held = nvml_used(kids(p.pid))
p.stdin.write("\n"); p.stdin.flush(); p.wait()
if base is None or held is None: print("     NVML per-process memory not available here"); sys.exit(1)
print(f"     context baseline {base >> 20} MiB, with 512 MiB tracked {held >> 20} MiB")
sys.exit(0 if abs((held - base) - (512 << 20)) <= (2 << 20) else 1)
PY

# 4. A statically linked nvcc program (cudart static: every driver call via cuGetProcAddress).
if command -v nvcc >/dev/null; then
  nvcc -cudart static -x cu -I"$here/include" "$here/scenarios/door_runtime.c" -o "$out/door_runtime_static" -lcuda -ldl -lpthread 2>"$out/nvcc.err" \
    && "$fp" record -q -o "$out/static.fpt" -- "$out/door_runtime_static" >"$out/static.out" 2>&1 \
    && python3 - "$out/static.out" "$fp" "$out/static.fpt" <<'PY' && verdict PASS "static-cudart program: every allocation it printed was recorded" || verdict FAIL "static-cudart program not fully seen (see $out/static.out)"
import subprocess, sys, csv, io
calls = [l for l in open(sys.argv[1]) if l.startswith("FPSCN ") and " op=alloc " in l and l.strip().endswith("res=0")]
addrs = {l.split("addr=")[1].split()[0] for l in calls}
csvtxt = subprocess.run([sys.argv[2], "export", "--format", "chrome", sys.argv[3], "-o", "-"], capture_output=True, text=True).stdout
missing = [a for a in addrs if a not in csvtxt]
print(f"     {len(addrs)} allocations printed, {len(missing)} missing")
sys.exit(1 if missing or not addrs else 0)
PY
else
  verdict SKIP "static-cudart program: nvcc not found"
fi

# 6. run --torch-snapshot: the allocator's own snapshot joined with the probe's trace.
"$fp" run -q --torch-snapshot --record "$out/snap.fpt" -- python3 "$here/gpu-check/train.py" 10 >"$out/snap.out" 2>"$out/snap.err"
"$fp" report --json "$out/snap.fpt" >"$out/snap.json" 2>>"$out/snap.err"
python3 - "$out/snap.json" <<'PY' && verdict PASS "torch snapshot at exit: every segment seen by the probe" || verdict FAIL "torch snapshot missing or not joined (see $out/snap.err)"
import json, sys
r = json.load(open(sys.argv[1]))
s = [x for x in r.get("torch_snapshots", []) if x["reason"] == "exit"]
for x in s:
    print(f"     pid {x['pid']}: {x['segments_seen_by_probe']} of {x['segments']} segments seen, reserved {x['reserved']}, error {x['error']}")
sys.exit(0 if s and all(x["error"] is None and x["segments"] > 0 and x["segments_seen_by_probe"] == x["segments"] for x in s) else 1)
PY

# 5. Overhead on the loop (median of 3, same machine, alternating).
python3 - "$fp" "$here/gpu-check/train.py" "$steps" <<'PY' && verdict PASS "overhead on the training loop < 1 %" || verdict FAIL "overhead on the training loop >= 1 %"
import subprocess, sys, statistics
fp, script, steps = sys.argv[1:4]
def run(probe):
    args = [fp, "run", "-q", "--no-record"] + ([] if probe else ["--no-probe"]) + ["--", sys.executable, script, steps]
    out = subprocess.run(args, capture_output=True, text=True).stdout
    return float([l for l in out.splitlines() if l.startswith("FPTIME")][0].split()[1])
a, b = [], []
for _ in range(3):
    b.append(run(False)); a.append(run(True))
ma, mb = statistics.median(a), statistics.median(b)
print(f"     loop median {mb:.3f} s without, {ma:.3f} s with the probe: {100 * (ma / mb - 1):+.2f} %")
sys.exit(0 if ma <= mb * 1.01 else 1)
PY

echo "gpu-check: $fails check(s) failed; outputs in $out"
exit $((fails > 0))
