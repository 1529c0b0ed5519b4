#!/usr/bin/env bash
# Deploy a checked-in omni-cpu profile to Kubernetes: Deployment + Service, Guaranteed QoS.
#
#   examples/deploy_k8s.sh profiles/zen5-kvm-2core.yaml Qwen/Qwen3-TTS-12Hz-0.6B-Base
#   DRY_RUN=1 examples/deploy_k8s.sh profiles/zen5-kvm-2core.yaml   # print the manifest only
#
# The profile becomes a manifest with `omni-cpu export k8s` (pods sized from its cores
# and memory; check it first with `omni-cpu validate PROFILE --sysroot DUMP --model MODEL`
# against a dump of a node) and is applied with kubectl. IMAGE names the container
# image that holds omni-cpu and its runtime; REPLICAS the pod count.
set -euo pipefail
profile=${1:?usage: deploy_k8s.sh PROFILE [MODEL]}
model=${2:-Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice}
omni_cpu=${OMNI_CPU:-omni-cpu}
manifest=$(mktemp --suffix .yaml)
trap 'rm -f "$manifest"' EXIT

"$omni_cpu" export k8s --profile "$profile" --model "$model" \
  --replicas "${REPLICAS:-1}" --image "${IMAGE:-omni-cpu:latest}" >"$manifest"
if [ -n "${DRY_RUN:-}" ]; then
  cat "$manifest"
  exit 0
fi
kubectl apply -f "$manifest"
kubectl rollout status deployment -l app.kubernetes.io/part-of=omni-cpu --timeout=15m
