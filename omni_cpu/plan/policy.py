"""The planner: facts + model footprint + options -> deploy profile. Pure: no I/O.

Each rule below names the constant it uses (omni_cpu.plan.costs) and why, so a
reviewer can check a plan against the machine by hand.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from omni_cpu import __version__
from omni_cpu.cpulist import format_cpu_list, parse_cpu_list
from omni_cpu.hardware.facts import Facts
from omni_cpu.plan import costs
from omni_cpu.plan.footprint import ModelFootprint
from omni_cpu.plan.placement import (
    PlanError,
    memory_budget,
    node_memory_bytes,
    per_seq_kv_bytes,
    place_replicas,
    replica_fixed_memory_bytes,
    safety_margin,
)
from omni_cpu.plan.topology import NodeCores, PhysicalCore
from omni_cpu.platform import WEIGHT_CHOICES, WEIGHTS_ENV
from omni_cpu.profile.deploy import default_stage_settings
from omni_cpu.profile.model import MachineStamp, Profile, Replica, StagePlan, Streaming

BF16_ISA = {"x86_64": ("avx512_bf16", "amx_bf16"), "aarch64": ("bf16",)}


@dataclass(frozen=True)
class PlanOptions:
    """What a user may override on the command line (None = let the planner decide)."""

    stages: int = 2  # 2: talker and code2wav on their own cores; 1: both share all cores
    reserve: int | None = None  # front-end cores per replica
    max_seqs: int | None = None
    dtype: str | None = None
    # Size for the memory free right now (`--deploy-profile auto` starting engines on a
    # busy machine) rather than for the machine's capacity (a checked-in profile).
    fit_available_memory: bool = False
    # The talker's weight format (omni_cpu.platform.int8): "model" or "int8".
    weights: str = "model"


def choose_dtype(facts: Facts) -> str:
    """bfloat16 where the ISA has native bf16 dot products, else float32."""
    wanted = BF16_ISA.get(facts.architecture, ())
    return "bfloat16" if any(flag in facts.isa for flag in wanted) else "float32"


def frontend_reserve(core_count: int) -> int:
    """Cores kept for the API server/engine core: none on small replicas (see costs)."""
    if core_count >= costs.FRONTEND_RESERVE_MIN_CORES:
        return costs.FRONTEND_RESERVED_CORES
    return 0


def _stage_ms_per_frame(core_ms: float, cores: int) -> float:
    """Single-stream time per frame on `cores` cores with sub-linear scaling."""
    speedup = 1 + (cores - 1) * costs.PARALLEL_EFFICIENCY
    return core_ms / speedup


def code2wav_core_ms(chunk_frames: int) -> float:
    """Code2wav work per new frame: each chunk also re-runs the vocoder over earlier frames."""
    overhead = (chunk_frames + costs.CODEC_RECOMPUTED_FRAMES) / chunk_frames
    return costs.CODE2WAV_CORE_MS_PER_FRAME * overhead


def split_cores(core_count: int, chunk_frames: int) -> tuple[int, int]:
    """Talker and code2wav core counts that minimise the slower stage's time per frame.

    The stages run as a pipeline, so a stream's speed is set by the slower one.
    With one core there is nothing to split: both stages share it.
    """
    if core_count < 2:
        return core_count, core_count
    c2w_ms = code2wav_core_ms(chunk_frames)
    best = (1, core_count - 1)
    best_ms = float("inf")
    for talker in range(1, core_count):
        slowest = max(
            _stage_ms_per_frame(costs.TALKER_CORE_MS_PER_FRAME, talker),
            _stage_ms_per_frame(c2w_ms, core_count - talker),
        )
        if slowest < best_ms:
            best, best_ms = (talker, core_count - talker), slowest
    return best


def choose_chunk_frames(talker_cores: int, code2wav_cores: int) -> int:
    """The smallest chunk for which code2wav keeps up with the talker.

    Small chunks give smoother playback but re-decode the 72-frame left context
    each time; on few cores that overhead would make code2wav the bottleneck.
    """
    talker_ms = _stage_ms_per_frame(costs.TALKER_CORE_MS_PER_FRAME, talker_cores)
    for chunk in costs.CODEC_CHUNK_FRAMES_CHOICES:
        if _stage_ms_per_frame(code2wav_core_ms(chunk), code2wav_cores) <= talker_ms:
            return chunk
    return costs.CODEC_CHUNK_FRAMES_CHOICES[-1]


def _cpu_nodes(facts: Facts) -> dict[int, int]:
    return {cpu: node.id for node in facts.numa_nodes for cpu in parse_cpu_list(node.cpus)}


def _fingerprint(facts: Facts) -> str:
    basis = {
        "architecture": facts.architecture,
        "model_names": facts.model_names,
        "usable_cpus": format_cpu_list(facts.usable_cpus()),
        "numa": [(n.id, n.cpus, n.memory_bytes) for n in facts.numa_nodes],
        "isa": sorted(facts.isa),
        "memory_limit": facts.limits.memory_max_bytes,
    }
    return hashlib.sha256(json.dumps(basis, sort_keys=True).encode()).hexdigest()[:12]


def machine_stamp(facts: Facts) -> MachineStamp:
    return MachineStamp(
        fingerprint=_fingerprint(facts),
        architecture=facts.architecture,
        model_name=" / ".join(facts.model_names) or "unknown",
        usable_cpus=format_cpu_list(facts.usable_cpus()),
        numa_nodes=tuple(
            {"id": n.id, "cpus": n.cpus, "memory_bytes": n.memory_bytes} for n in facts.numa_nodes
        ),
        isa=tuple(sorted(facts.isa)),
        memory_limit_bytes=facts.limits.memory_max_bytes,
    )


def _talker_batch(
    footprint: ModelFootprint,
    dtype: str,
    weights: str,
    talker_cores: int,
    max_seqs: int | None,
    budget: int | None,
    talker_node_room: int | None,
    notes: list[str],
) -> tuple[int, int]:
    """max_num_seqs and KV bytes for the talker: never more KV than the batch can use.

    `talker_node_room` is what the talker's own node has for its KV where a replica
    spans nodes: vLLM binds each worker's memory to one node.
    """
    per_seq = per_seq_kv_bytes(footprint, dtype)
    seqs = max_seqs or min(
        costs.MAX_NUM_SEQS_CAP, max(1, costs.STREAMS_PER_TALKER_CORE * talker_cores)
    )
    if budget is None:
        notes.append("node memory unknown: KV cache sized to the batch, not to memory")
        return seqs, seqs * per_seq
    fixed = replica_fixed_memory_bytes(footprint, dtype, weights)
    kv_room = budget - fixed - costs.CODE2WAV_KV_CACHE_BYTES
    if talker_node_room is not None:
        kv_room = min(kv_room, talker_node_room)
    if kv_room < per_seq:
        need = (fixed + costs.CODE2WAV_KV_CACHE_BYTES + per_seq) / costs.GIB
        raise PlanError(
            f"a replica needs about {need:.1f} GiB but its talker's node has room for no stream",
            "use a smaller model, --weights int8, or fewer replicas",
        )
    if seqs * per_seq > kv_room:
        fitted = max(1, kv_room // per_seq)
        if max_seqs is not None:
            notes.append(f"--max-seqs {max_seqs} does not fit in memory; lowered to {fitted}")
        seqs = int(fitted)
    return seqs, seqs * per_seq


def _replica(
    index: int,
    node: NodeCores,
    facts: Facts,
    footprint: ModelFootprint,
    options: PlanOptions,
    dtype: str,
    replica_count: int,
    notes: list[str],
) -> tuple[Replica, int]:
    # Fastest cores first, so the talker (the heavier stage) gets the big ones.
    cores: list[PhysicalCore] = sorted(node.cores, key=lambda c: (-c.capacity, c.cpu))
    reserve = frontend_reserve(len(cores)) if options.reserve is None else options.reserve
    reserve = min(reserve, max(0, len(cores) - options.stages))
    # The front end takes the last (slowest) cores.
    frontend, compute = cores[len(cores) - reserve :], cores[: len(cores) - reserve]
    if options.stages == 1:
        talker_cores = code2wav_cores = compute
        chunk = costs.CODEC_CHUNK_FRAMES_CHOICES[0]
    elif len(compute) < 2:
        chunk = costs.CODEC_CHUNK_FRAMES_CHOICES[0]
        notes.append("one core: both stages share it (they will contend)")
        talker_cores = code2wav_cores = compute
    else:
        talker_n, code2wav_n = split_cores(len(compute), costs.CODEC_CHUNK_FRAMES_CHOICES[0])
        chunk = choose_chunk_frames(talker_n, code2wav_n)
        talker_n, code2wav_n = split_cores(len(compute), chunk)
        talker_cores, code2wav_cores = compute[:talker_n], compute[talker_n:]
    budget = memory_budget(facts, node, replica_count, options.fit_available_memory, notes)
    memory_nodes = node.memory_node_ids()
    cpu_node = _cpu_nodes(facts)

    def stage_node(group: list[PhysicalCore]) -> int:
        return cpu_node.get(group[0].cpu, node.node) if group else node.node

    def memory_node_of(group: list[PhysicalCore]) -> int:
        # vLLM binds a worker's memory to its first CPU's node where visible, else
        # to the first visible node.
        first = stage_node(group)
        return first if first in memory_nodes else memory_nodes[0]

    talker_room = None
    if len(memory_nodes) > 1:
        own = node_memory_bytes(facts, node.node_memory.get(memory_node_of(talker_cores)), notes)
        if own:
            talker_room = (
                own
                - safety_margin(own)
                - footprint.talker_weight_bytes(dtype, options.weights)
                - costs.TALKER_WORKER_OVERHEAD_BYTES
            )
    seqs, talker_kv = _talker_batch(
        footprint,
        dtype,
        options.weights,
        len(talker_cores),
        options.max_seqs,
        budget,
        talker_room,
        notes,
    )
    memory_list = format_cpu_list(memory_nodes)

    def cpu_list(group: list[PhysicalCore]) -> str:
        return format_cpu_list(core.cpu for core in group)

    stages = (
        StagePlan(
            stage_id=0,
            cpus=cpu_list(talker_cores),
            numa_node=stage_node(talker_cores),
            memory_nodes=memory_list,
            kv_cache_memory_bytes=talker_kv,
            max_num_seqs=seqs,
            max_num_batched_tokens=costs.TALKER_MAX_NUM_BATCHED_TOKENS,
            max_model_len=costs.TALKER_MAX_MODEL_LEN,
            dtype=dtype,
            settings=talker_settings(),
        ),
        StagePlan(
            stage_id=1,
            cpus=cpu_list(code2wav_cores),
            numa_node=stage_node(code2wav_cores),
            memory_nodes=memory_list,
            kv_cache_memory_bytes=costs.CODE2WAV_KV_CACHE_BYTES,
            max_num_seqs=seqs,
            max_num_batched_tokens=costs.CODE2WAV_MAX_NUM_BATCHED_TOKENS,
            max_model_len=costs.CODE2WAV_MAX_MODEL_LEN,
            dtype=dtype,
            settings=default_stage_settings(1),
        ),
    )
    replica = Replica(
        index=index, numa_node=node.node, frontend_cpus=cpu_list(frontend), stages=stages
    )
    return replica, chunk


def talker_settings() -> dict:
    """vLLM-Omni's talker settings, with max_tokens inside the planned max_model_len."""
    settings = default_stage_settings(0)
    settings["default_sampling_params"]["max_tokens"] = costs.TALKER_MAX_FRAMES
    return settings


def preload_env(libraries: tuple[str, ...]) -> dict[str, str]:
    """LD_PRELOAD: Intel OpenMP and tcmalloc where found (+26 % at 16 streams, measured).

    Intel OpenMP is only preloaded alone with tcmalloc: with libgomp also preloaded
    vLLM trips an assert, and vLLM preloads torch's libgomp itself when nothing is set.
    """
    return {"LD_PRELOAD": ":".join(libraries)} if libraries else {}


def plan_profile(
    facts: Facts, footprint: ModelFootprint, options: PlanOptions | None = None
) -> Profile:
    """Plan one pipeline replica per memory home (NUMA node, or group of nearest nodes)."""
    options = options or PlanOptions()
    if options.stages not in (1, 2):
        raise PlanError(f"--stages must be 1 or 2, not {options.stages}")
    if options.dtype is not None and options.dtype not in ("bfloat16", "float32"):
        raise PlanError(f"--dtype must be bfloat16 or float32, not {options.dtype}")
    if options.weights not in WEIGHT_CHOICES:
        raise PlanError(
            f"--weights must be one of {', '.join(WEIGHT_CHOICES)}, not {options.weights}"
        )
    if not facts.usable_cpus():
        raise PlanError(
            "no usable CPU: the online CPUs, the cgroup cpuset and the affinity mask do not meet",
            "check the container's cpuset",
        )
    notes: list[str] = []
    dtype = options.dtype or choose_dtype(facts)
    if options.dtype is None and facts.isa_source is None and facts.architecture in BF16_ISA:
        notes.append(
            "the CPU's ISA could not be read: float32 planned; pass --dtype bfloat16 "
            "if this CPU has avx512_bf16 / AMX / the bf16 hwcap"
        )
    nodes = place_replicas(
        facts, footprint, dtype, options.weights, options.fit_available_memory, notes
    )
    if options.dtype == "bfloat16" and choose_dtype(facts) != "bfloat16":
        notes.append("bfloat16 forced on a CPU without native bf16: expect it to be slow")
    replicas: list[Replica] = []
    chunks: list[int] = []
    for index, node in enumerate(nodes):
        replica, chunk = _replica(index, node, facts, footprint, options, dtype, len(nodes), notes)
        replicas.append(replica)
        chunks.append(chunk)
    env = {
        # The code predictor's torch.compile costs 45-90 s of start-up for ~12 %.
        "VLLM_OMNI_CPU_INDUCTOR": "0",
        **preload_env(tuple(facts.preload_libraries)),
    }
    if options.weights != "model":
        env[WEIGHTS_ENV] = options.weights
    return Profile(
        generated_by=f"omni-cpu {__version__}",
        machine=machine_stamp(facts),
        model=footprint.name,
        dtype=dtype,
        streaming=Streaming(
            initial_codec_chunk_frames=costs.INITIAL_CODEC_CHUNK_FRAMES,
            codec_chunk_frames=max(chunks),
            codec_left_context_frames=costs.CODEC_LEFT_CONTEXT_FRAMES,
        ),
        replicas=tuple(replicas),
        env=env,
        notes=tuple(dict.fromkeys(notes)),
    )
