#!/usr/bin/env bash
# Makes (once per machine, outside the checkout, reused) the virtual environment with
# PyPI's real PyTorch that the tests run on the simulated GPU: torch 2.9.1, whose Linux
# wheel is built for CUDA 12.8 and brings NVIDIA's runtime, cuBLAS and cuDNN (about
# 6.7 GB installed). The venv is $FRAGPROBE_TORCH_VENV, else
# ${XDG_CACHE_HOME:-$HOME/.cache}/fragprobe/torch-venv; its python is printed last.
set -euo pipefail
venv="${FRAGPROBE_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/fragprobe/torch-venv}"
torch="${FRAGPROBE_TORCH_VERSION:-2.9.1}"
if ! "$venv/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$torch')" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q "torch==$torch"
fi
echo "$venv/bin/python"
