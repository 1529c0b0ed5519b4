#!/usr/bin/env bash
# Make .venv at the repo root with omni-cpu (editable, with dev tools) and its pinned
# CPU inference runtime (scripts/install-runtime.sh). Safe to run again: it only adds
# what is missing. OMNI_CPU_PROBE_ONLY=1 skips the runtime (probe/plan/validate only).
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "error: omni-cpu needs Python >= 3.11 ($python is $("$python" -V 2>&1)); set PYTHON=python3.11" >&2
  exit 2
fi
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
if [ "${OMNI_CPU_PROBE_ONLY:-0}" != 1 ]; then
  bash scripts/install-runtime.sh .venv
fi
echo "ready: .venv/bin/omni-cpu"
