"""How big one replica's pod is: the CPUs the kubelet must hand it, its memory and its
ephemeral storage. Pure.

The kubelet's static CPU manager gives a Guaranteed pod exclusive logical CPUs and takes
whole physical cores first (all of a core's SMT siblings), and under `full-pcpus-only` it
admits only requests that are whole cores. The profile binds one OpenMP thread per
physical core (its `cpus` list one CPU of each core), so a pod that asked for those CPUs
alone would get half as many cores on an SMT-2 node: the request counts every sibling of
every core the plan binds.

Ephemeral storage counts what the pod writes to the node's disk: the model volume where
it is an emptyDir (the download in the checkpoint's bfloat16, the talker's packed
weights in the profile's format, uploaded voices; the kernels are inside the image), the pod's home
(vLLM's and torch's caches) and /tmp; each volume's sizeLimit is its share, so the
kubelet evicts a pod that outgrows it rather than fill the node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from omni_cpu import envs
from omni_cpu.cpulist import parse_cpu_list
from omni_cpu.hardware import Facts
from omni_cpu.plan.footprint import DTYPE_BYTES, ModelFootprint, linear_weight_bytes
from omni_cpu.plan.policy import replica_fixed_memory_bytes
from omni_cpu.profile.model import Profile

MIB = 1 << 20
# vLLM-Omni's SharedMemoryConnector moves codec chunks through /dev/shm, which a
# container gets only 64 MiB of by default; this much is mounted and counted.
SHM_BYTES = 1024 * MIB
# Head-room over the planned peak so a burst does not OOM-kill the pod.
MEMORY_HEADROOM_FRACTION = 0.10
# Qwen3-TTS checkpoints are published in bfloat16: the download's bytes per parameter.
CHECKPOINT_DTYPE = "bfloat16"
# Voices uploaded through the API: a reference clip and its codes each, a few MiB.
VOICES_BYTES = 512 * MIB
# `serve`'s own folder (deploy config, drain flag), vLLM's locks and Python's temp files.
TMP_BYTES = 1024 * MIB
# ~/.cache and ~/.config of vLLM, torch and vLLM-Omni (compile caches, small configs).
HOME_BYTES = 1024 * MIB
# Head-room over the model volume's planned contents (a partial download beside a whole).
DATA_HEADROOM_FRACTION = 0.25


@dataclass(frozen=True)
class PodSize:
    cpus: int  # logical CPUs, as the kubelet counts them (requests = limits)
    memory_bytes: int
    cores: int  # physical cores the replica binds
    threads_per_core: int  # the node's SMT width the request was counted for
    # What the model volume holds (download, packed weights, voices); None where
    # the profile's model is unknown here.
    data_bytes: int | None = None

    def ephemeral_storage_bytes(self, data_on_node: bool) -> int:
        """The node disk the pod writes: home and /tmp, and the model volume where it is an
        emptyDir (`data_on_node`) of known size."""
        data = self.data_bytes if data_on_node and self.data_bytes is not None else 0
        return data + HOME_BYTES + TMP_BYTES


def node_threads_per_core(facts: Facts) -> int:
    """The widest SMT of a machine (or a dump of one): its largest thread-sibling set."""
    widths = [len(parse_cpu_list(cpu.thread_siblings)) for cpu in facts.cpus if cpu.thread_siblings]
    return max(widths, default=1)


def pod_cpu_request(bound_cpus: int, threads_per_core: int, binds_siblings: bool = False) -> int:
    """Logical CPUs to request so the kubelet hands over every core the plan binds.

    `bound_cpus` counts the CPUs the profile lists; where the plan lists one CPU per
    core (`binds_siblings` False) each is a whole core of `threads_per_core` CPUs.
    """
    if threads_per_core < 1:
        raise ValueError(f"threads per core must be at least 1, not {threads_per_core}")
    cores = math.ceil(bound_cpus / threads_per_core) if binds_siblings else bound_cpus
    return cores * threads_per_core


def data_volume_bytes(footprint: ModelFootprint, dtype: str, weights: str) -> int:
    """What the model volume holds for this model, dtype and weight format, with head-room."""
    download = (
        footprint.talker_params
        + footprint.code2wav_params
        + footprint.speaker_encoder_params
        + footprint.tokenizer_encoder_params
    ) * DTYPE_BYTES[CHECKPOINT_DTYPE]
    # The talker's linear layers as its kernels read them, stored once (in the checkpoint's
    # format too: its GEMV kernels repack those tiles).
    packed = int(footprint.talker_linear_params * linear_weight_bytes(dtype, weights))
    planned = download + packed + VOICES_BYTES
    return math.ceil(planned * (1 + DATA_HEADROOM_FRACTION) / MIB) * MIB


def pod_size(
    profile: Profile,
    footprint: ModelFootprint | None,
    replica: int = 0,
    threads_per_core: int = 1,
) -> PodSize:
    """CPUs (stage cores + front end, with their siblings) and memory for one replica's pod."""
    chosen = profile.replicas[replica]
    memory = sum(stage.kv_cache_memory_bytes for stage in chosen.stages) + SHM_BYTES
    if footprint is not None:
        memory += replica_fixed_memory_bytes(footprint, profile.dtype, profile.choice(envs.WEIGHTS))
    memory = math.ceil(memory * (1 + MEMORY_HEADROOM_FRACTION) / MIB) * MIB
    cores = len(chosen.cpu_ids())
    binds_siblings = any(stage.smt_siblings for stage in chosen.stages)
    return PodSize(
        cpus=pod_cpu_request(cores, threads_per_core, binds_siblings),
        memory_bytes=memory,
        cores=cores,
        threads_per_core=threads_per_core,
        data_bytes=None
        if footprint is None
        else data_volume_bytes(footprint, profile.dtype, profile.choice(envs.WEIGHTS)),
    )
