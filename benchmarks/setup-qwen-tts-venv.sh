#!/usr/bin/env bash
# Build the venv the official Qwen3-TTS reference (PyPI qwen-tts) runs in, for
# benchmarks/compare_qwen_tts.py:  benchmarks/.venv-qwen-tts  (or the path in $1).
#
# Why a venv of its own: qwen-tts 0.1.1 pins transformers==4.57.3 (and accelerate
# 1.12.0); omni-cpu's runtime needs transformers 5.x. Nothing from omni-cpu is
# installed here, so the reference runs exactly as its users run it.
#
# Where torch 2.13.0+cpu comes from (PyPI has no +cpu build), first match wins:
#   OMNI_CPU_TORCH_INDEX=URL   a PyTorch CPU package index (or mirror) you name;
#   https://download.pytorch.org/whl/cpu   when it answers within a few seconds;
#   pip's own configuration   e.g. a local wheel folder given as find-links.
# Uses pip, not uv: uv does not read pip's find-links configuration.
# Safe to run again: with everything in place it only re-checks.
set -euo pipefail
cd "$(dirname "$0")"

venv=${1:-.venv-qwen-tts}
qwen_tts_version=0.1.1
torch_version=2.13.0+cpu
# shellcheck source=scripts/torch-index.sh
source ../scripts/torch-index.sh  # torch_index_args, pytorch_cpu_index
base_python=${PYTHON:-python3.11}

if [ ! -x "$venv/bin/python" ]; then
  echo "setup-qwen-tts-venv: creating $venv with $base_python"
  "$base_python" -m venv "$venv"
fi
python="$venv/bin/python"
pip=("$python" -m pip --disable-pip-version-check)
constraints=$(mktemp)
check_log=$(mktemp)
trap 'rm -f "$constraints" "$check_log"' EXIT

installed() {
  "$python" - "$qwen_tts_version" "$torch_version" <<'PY' 2>/dev/null
import sys
from importlib import metadata
want = {"qwen-tts": sys.argv[1], "torch": sys.argv[2], "transformers": "4.57.3"}
try:
    sys.exit(0 if all(metadata.version(d) == v for d, v in want.items()) else 1)
except metadata.PackageNotFoundError:
    sys.exit(1)
PY
}

start=$SECONDS
if installed; then
  echo "setup-qwen-tts-venv: qwen-tts $qwen_tts_version already in $venv; checking it imports"
else
  torch_index_args "$python"
  # One resolve with torch pinned to the +cpu build: qwen-tts depends on torchaudio,
  # whose PyPI wheel requires torch==2.13.0 and would otherwise pull the CUDA torch
  # (and ~3 GB of NVIDIA wheels) in.
  echo "torch==$torch_version" >"$constraints"
  echo "setup-qwen-tts-venv: installing qwen-tts==$qwen_tts_version with torch $torch_version" \
    "${index_args[*]:+(torch from ${index_args[1]})}"
  if ! "${pip[@]}" install "${index_args[@]}" -c "$constraints" \
      "torch==$torch_version" "qwen-tts==$qwen_tts_version"; then
    echo "error: pip could not install qwen-tts with torch $torch_version (PyPI has no +cpu" \
      "torch: set OMNI_CPU_TORCH_INDEX=$pytorch_cpu_index or a mirror of it)" >&2
    exit 1
  fi
fi

# torchaudio: PyPI's wheel is a CUDA build whose native library (libtorchaudio*.so)
# links libtorch_cuda.so and cannot load beside a +cpu torch. qwen-tts imports
# torchaudio at module level but calls into it only for the 25 Hz tokenizer (the
# v1 speech tokenizer); the 12 Hz CustomVoice models never touch it. torchaudio's
# Python package runs without its native library (that part is optional), so we
# rename the native files to *.so.cuda-disabled: kept on disk, never loaded.
"$python" - <<'PY'
from importlib import metadata
from pathlib import Path
try:
    files = metadata.distribution("torchaudio").files or ()
except metadata.PackageNotFoundError:
    files = ()
for entry in files:
    path = Path(str(entry.locate()))
    if (path.name.endswith(".so") or ".so." in path.name) and path.exists():
        path.rename(path.with_name(path.name + ".cuda-disabled"))
        print(f"setup-qwen-tts-venv: moved aside {path.name} (CUDA-linked torchaudio native library)")
PY

# The check's own chatter (qwen-tts prints a flash-attn notice on stdout, SoX a
# "not found" on stderr: neither matters on CPU) is shown only when the check fails.
if ! versions=$("$python" - 2>"$check_log" <<'PY'
import contextlib
import sys
from importlib import metadata

import torch

if not torch.__version__.endswith("+cpu") or torch.version.cuda is not None:
    sys.exit(f"error: torch is {torch.__version__} (CUDA {torch.version.cuda}), not the +cpu "
             "build (fix: rm -r benchmarks/.venv-qwen-tts and rerun this script)")
with contextlib.redirect_stdout(sys.stderr):
    import qwen_tts  # noqa: F401  (imports torchaudio and transformers: what can break)
print(f"torch {torch.__version__}, transformers {metadata.version('transformers')}, "
      f"qwen-tts {metadata.version('qwen-tts')}")
PY
); then
  cat "$check_log" >&2
  echo "error: the reference venv at $venv does not import (see above)" >&2
  exit 1
fi
echo "setup-qwen-tts-venv: ok in $((SECONDS - start)) s ($versions, $(du -sh "$venv" | cut -f1) in $venv)"
