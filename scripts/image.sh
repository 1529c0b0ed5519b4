#!/usr/bin/env bash
# The serving image (Containerfile): build it, make a base for it, or check it serves.
#
#   scripts/image.sh tag     the tag `make image` builds, which `omni-cpu export k8s` names
#   scripts/image.sh build   podman (or buildah) build of the Containerfile    (make image)
#   scripts/image.sh base    a base image from Debian's packages, for machines that reach
#                            no container registry: debootstrap bookworm + python3 and
#                            python3-venv, `podman import`ed                  (make image-base)
#   scripts/image.sh test    start the built image on 127.0.0.1 as a pod runs it (a profile
#                            mounted read-only, a read-only root) with a tiny checkpoint,
#                            send one speech request, stop it       (make image-test = image + this)
#
# Settings (environment or make variables), all optional:
#   BASE_IMAGE   the base (default: the Containerfile's, the public Python image)
#   WHEELS       a host folder of wheels pip also looks in (mounted at /wheels; e.g. the
#                folder with torch +cpu that this machine's pip configuration names)
#   PIP_INDEX    pip's index URL inside the build (default PyPI)
#   CA_BUNDLE    a host CA bundle pip verifies with inside the build (mounted)
#   OMNI_CPU_TORCH_INDEX  a PyTorch CPU index or mirror (scripts/install-runtime.sh)
#   BUILD_FLAGS  more `podman build` flags (e.g. --network host)
#   CONTAINERS_CONF  podman's own settings file (scripts/containers.conf: restricted hosts)
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' omni_cpu/__init__.py)
tag="omni-cpu:$version"
base_tag="localhost/omni-cpu-base:bookworm"

need() {  # need TOOL WHY: one line naming what is missing and how to get it
  command -v "$1" >/dev/null 2>&1 && return 0
  echo "error: $2 needs $1, which is not installed (Debian/Ubuntu: apt-get install $3)" >&2
  exit 2
}

builder() {  # podman, else buildah (both take the build flags used here)
  if command -v podman >/dev/null 2>&1; then
    builder=(podman build)
  elif command -v buildah >/dev/null 2>&1; then
    builder=(buildah bud)
  else
    need podman "make image" "podman runc (or buildah)"
  fi
}

build() {
  # docker format: OCI images drop the HEALTHCHECK.
  local args=(--tag "$tag" --file Containerfile --format docker)
  [ -z "${BASE_IMAGE:-}" ] || args+=(--build-arg "BASE=$BASE_IMAGE")
  [ -z "${PIP_INDEX:-}" ] || args+=(--build-arg "PIP_INDEX=$PIP_INDEX")
  [ -z "${OMNI_CPU_TORCH_INDEX:-}" ] || args+=(--build-arg "OMNI_CPU_TORCH_INDEX=$OMNI_CPU_TORCH_INDEX")
  if [ -n "${WHEELS:-}" ]; then
    [ -d "$WHEELS" ] || { echo "error: WHEELS=$WHEELS is not a folder (name the wheel folder)" >&2; exit 2; }
    args+=(--volume "$(realpath "$WHEELS"):/wheels:ro" --build-arg WHEELS=/wheels)
  fi
  if [ -n "${CA_BUNDLE:-}" ]; then
    [ -f "$CA_BUNDLE" ] || { echo "error: CA_BUNDLE=$CA_BUNDLE is not a file (name a PEM bundle)" >&2; exit 2; }
    args+=(--volume "$(realpath "$CA_BUNDLE"):/run/host-ca.crt:ro" --build-arg CA_BUNDLE=/run/host-ca.crt)
  fi
  # shellcheck disable=SC2206
  local extra=(${BUILD_FLAGS:-})
  builder
  local start=$SECONDS
  "${builder[@]}" "${args[@]}" "${extra[@]}" .
  echo "image: built $tag in $((SECONDS - start)) s"
}

base() {
  need debootstrap "make image-base" debootstrap
  need podman "make image-base" "podman runc"
  local root
  root=$(mktemp -d)
  trap 'rm -rf "$root"' RETURN
  local start=$SECONDS
  # python3 + venv for the image's venv; the libraries and compiler the Containerfile would
  # otherwise fetch with apt (g++ and python3-dev, Python.h, for its build stage's kernels:
  # an image on this base keeps them, the base's, in its runtime stage too); CA
  # certificates for pip.
  debootstrap --variant=minbase \
    --include=python3,python3-venv,python3-dev,ca-certificates,libnuma1,libtcmalloc-minimal4,g++ \
    bookworm "$root/rootfs" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
  tar -C "$root/rootfs" -c . | podman import - "$base_tag"
  echo "image-base: $base_tag in $((SECONDS - start)) s; build on it with BASE_IMAGE=$base_tag"
}

serve_test() {
  need podman "make image-test" "podman runc"
  if ! podman info >/dev/null 2>&1; then
    echo "error: podman does not run here ($(podman info 2>&1 | tail -1)); see scripts/containers.conf" >&2
    exit 2
  fi
  if ! podman image exists "$tag"; then
    echo "error: no image $tag here (build it first: make image)" >&2
    exit 2
  fi
  local work port=${PORT:-18000} name="omni-cpu-image-test-$$"
  work=$(mktemp -d)
  trap 'podman rm -f "$name" >/dev/null 2>&1 || true; rm -rf "$work"' RETURN
  chmod 0777 "$work"
  # A tiny checkpoint and a profile planned for it, both by the image's own omni-cpu.
  podman run --rm --network none --no-healthcheck -v "$work:/work" "$tag" \
    make-checkpoint --size tiny --out /work/tiny >/dev/null
  podman run --rm --network none --no-healthcheck -v "$work:/work" "$tag" \
    probe --model /work/tiny --output /work/profile.yaml >/dev/null
  # As a pod from `omni-cpu export k8s` runs it: serve on the profile mounted read-only, a
  # read-only root, the caches on the volume, writable home and /tmp; the kernels are the
  # image's, built ahead (no kernel cache, no compiler).
  local data=/var/lib/omni-cpu
  mkdir -m 0777 "$work/data"
  local start=$SECONDS
  podman run -d --name "$name" --network host --no-healthcheck --read-only --shm-size 1g \
    --tmpfs /home/omni:mode=1777 --tmpfs /tmp:mode=1777 -v "$work/data:$data" \
    -e HF_HOME=$data/huggingface -e OMNI_CPU_WEIGHT_CACHE=$data/packed \
    -v "$work/tiny:/models/tiny:ro" -v "$work/profile.yaml:/etc/omni-cpu/profile.yaml:ro" \
    "$tag" serve --model /models/tiny --deploy-profile /etc/omni-cpu/profile.yaml \
    --host 127.0.0.1 --port "$port" --max-frames 12 --voices $data/voices >/dev/null
  until curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1; do
    if [ "$(podman inspect -f '{{.State.Running}}' "$name")" != true ]; then
      podman logs "$name" 2>&1 | tail -20
      echo "error: serve exited inside the image before answering /health" >&2
      exit 1
    fi
    if ((SECONDS - start > ${START_TIMEOUT_S:-900})); then
      echo "error: serve did not answer /health within ${START_TIMEOUT_S:-900} s" >&2
      exit 1
    fi
    sleep 2
  done
  local ready=$((SECONDS - start))
  local spoken=$SECONDS
  curl -fsS "http://127.0.0.1:$port/v1/audio/speech" -H 'Content-Type: application/json' \
    -d '{"model": "/models/tiny", "input": "Hello from the image.", "voice": "ryan", "response_format": "wav"}' \
    -o "$work/hello.wav"
  spoken=$((SECONDS - spoken))
  [ "$(head -c 4 "$work/hello.wav")" = RIFF ] || { echo "error: the answer is not a WAV file" >&2; exit 1; }
  podman stop -t 60 "$name" >/dev/null
  echo "image-test: $tag answered /health $ready s after start and spoke" \
    "$(stat -c %s "$work/hello.wav") bytes of WAV in $spoken s;" \
    "image size $(podman image inspect -f '{{.Size}}' "$tag") bytes"
}

case "${1:-}" in
  tag) echo "$tag" ;;
  build) build ;;
  base) base ;;
  test) serve_test ;;
  *) echo "usage: scripts/image.sh tag|build|base|test" >&2; exit 2 ;;
esac
