#!/usr/bin/env bash
# Makes (once per machine, outside the checkout, reused) the virtual environments with
# PyPI's real PyTorch that the tests run on the simulated GPU, plus the NVML tools users
# run beside it (nvitop, gpustat, nvidia-ml-py):
#   torch 2.9.1  — Linux wheel built for CUDA 12.8 (about 6.7 GB installed)
#   torch 2.15.0 — Linux wheel built for CUDA 13.2 (about 5.3 GB installed)
# Each brings NVIDIA's runtime, cuBLAS and cuDNN. The venv for version V is
# ${FRAGPROBE_TORCH_VENVS:-${XDG_CACHE_HOME:-$HOME/.cache}/fragprobe}/torch-V; one python
# per line is printed last.
#
#   bash cuda/torch-venv.sh            # both versions
#   bash cuda/torch-venv.sh 2.9.1      # just one
set -euo pipefail
root="${FRAGPROBE_TORCH_VENVS:-${XDG_CACHE_HOME:-$HOME/.cache}/fragprobe}"
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(2.9.1 2.15.0)
tools=(nvitop==1.7.2 gpustat==1.1.1 nvidia-ml-py==13.615.71 "numpy<3")
made=()
for torch in "${versions[@]}"; do
  venv="$root/torch-$torch"
  if ! "$venv/bin/python" -c "
import sys, importlib.metadata as m
import numpy, torch
sys.exit(torch.__version__.split('+')[0] != '$torch' or m.version('nvitop') != '1.7.2')" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip
    "$venv/bin/python" -m pip install -q "torch==$torch" "${tools[@]}"
  fi
  made+=("$venv/bin/python")
done
printf '%s\n' "${made[@]}"
