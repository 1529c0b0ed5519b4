#!/usr/bin/env bash
# Make .venv at the repo root with omni-cpu (editable, with dev tools) and its pinned
# CPU inference runtime (scripts/install-runtime.sh). Safe to run again: it only adds
# what is missing, and nothing at all when .venv is current (below). OMNI_CPU_PROBE_ONLY=1 skips the runtime (probe/plan/validate only).
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "error: omni-cpu needs Python >= 3.11 ($python is $("$python" -V 2>&1)); set PYTHON=python3.11" >&2
  exit 2
fi
# A .venv set up from these very files is current: re-runs (make demo, make test) skip the
# install, so they work offline. The stamp is a hash of those files and the probe-only choice;
# a change to any of them installs again (or remove the stamp to force it).
inputs=(pyproject.toml requirements/*.txt scripts/setup.sh scripts/install-runtime.sh)
stamp=.venv/.omni-cpu-setup-stamp
want="$(cat "${inputs[@]}" | "$python" -c 'import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())') probe-only=${OMNI_CPU_PROBE_ONLY:-0}"
if [ -x .venv/bin/omni-cpu ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "ready: .venv/bin/omni-cpu (current with pyproject.toml and requirements/: install skipped; rm $stamp to force it)"
  exit 0
fi
[ -x .venv/bin/python ] || "$python" -m venv .venv
rm -f "$stamp"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
if [ "${OMNI_CPU_PROBE_ONLY:-0}" != 1 ]; then
  bash scripts/install-runtime.sh .venv
  # The Arm kernels' tests (make test-arm, part of make test) cross-compile them and run them
  # under qemu-aarch64: Debian's tools, installed where missing when apt-get runs as root (CI).
  arm_tools="g++-aarch64-linux-gnu qemu-user"
  if ! command -v aarch64-linux-gnu-g++ >/dev/null || ! command -v qemu-aarch64 >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "setup: installing $arm_tools for the Arm kernel tests"
      # shellcheck disable=SC2086  # two package names
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $arm_tools >/dev/null \
        || { DEBIAN_FRONTEND=noninteractive apt-get update -qq \
          && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $arm_tools >/dev/null; } \
        || echo "setup: could not install $arm_tools: the Arm kernel tests will fail (OMNI_CPU_SKIP_ARM=1 skips them)" >&2
    else
      echo "setup: the Arm kernel tests need $arm_tools: apt-get install them as root, or set OMNI_CPU_SKIP_ARM=1" >&2
    fi
  fi
fi
echo "$want" >"$stamp"
echo "ready: .venv/bin/omni-cpu"
