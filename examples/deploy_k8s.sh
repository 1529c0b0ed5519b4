#!/usr/bin/env bash
# Deploy a checked-in omni-cpu profile to Kubernetes: the profile in a ConfigMap, a
# Deployment whose pods serve it as written, a Service, Guaranteed QoS.
#
#   examples/deploy_k8s.sh profiles/zen5-kvm-2core.yaml
#   DRY_RUN=1 examples/deploy_k8s.sh profiles/zen5-kvm-2core.yaml   # print the manifest only
#   IMAGE=registry.example/omni-cpu:0.1.0 THREADS_PER_CORE=2 MODEL_CLAIM=tts-models \
#       REPLICAS=4 examples/deploy_k8s.sh deploy.yaml
#
# The pods serve the profile's own model. Check the profile first against a dump of a
# node: `omni-cpu validate PROFILE --sysroot DUMP`. IMAGE defaults to the tag `make image`
# builds (scripts/image.sh tag), which `omni-cpu export k8s` names by default; push it to
# a registry the nodes reach and set IMAGE to its name there. THREADS_PER_CORE is the
# nodes' SMT width (the CPU request counts every sibling of the cores the profile binds);
# MODEL_CLAIM a PersistentVolumeClaim that keeps the model and its packed weights.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${1:?usage: deploy_k8s.sh PROFILE}
omni_cpu=${OMNI_CPU:-omni-cpu}
image=${IMAGE:-$(bash scripts/image.sh tag)}
manifest=$(mktemp --suffix .yaml)
trap 'rm -f "$manifest"' EXIT

args=(--profile "$profile" --replicas "${REPLICAS:-1}" --image "$image")
[ -z "${THREADS_PER_CORE:-}" ] || args+=(--threads-per-core "$THREADS_PER_CORE")
[ -z "${MODEL_CLAIM:-}" ] || args+=(--model-claim "$MODEL_CLAIM")
# Node drains evict one pod at a time where there are several.
[ "${REPLICAS:-1}" -lt 2 ] || args+=(--max-unavailable 1)
"$omni_cpu" export k8s "${args[@]}" >"$manifest"
if [ -n "${DRY_RUN:-}" ]; then
  cat "$manifest"
  exit 0
fi
kubectl apply -f "$manifest"
kubectl rollout status deployment -l app.kubernetes.io/part-of=omni-cpu --timeout=20m
