"""The planner: facts + model footprint + options -> deploy profile. Pure: no I/O.

Each rule below names the constant it uses (omni_cpu.plan.costs) and why, so a
reviewer can check a plan against the machine by hand.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass

from omni_cpu import __version__, envs, weight_formats
from omni_cpu.cpulist import format_cpu_list
from omni_cpu.errors import MachineTooSmallError, PlanError
from omni_cpu.hardware.facts import Facts
from omni_cpu.plan import costs
from omni_cpu.plan.bind import wanted_preload
from omni_cpu.plan.capacity import machine_capacity, replica_capacity, stage_cores
from omni_cpu.plan.footprint import ModelFootprint
from omni_cpu.plan.kernel_choice import describe as describe_kernels
from omni_cpu.plan.kernel_choice import kernel_choices
from omni_cpu.plan.listening import choose_schedule, describe_schedule
from omni_cpu.plan.placement import (
    memory_budget,
    node_memory_bytes,
    per_seq_kv_bytes,
    place_replicas,
    replica_fixed_memory_bytes,
    reserved_kv_bytes,
    safety_margin,
)
from omni_cpu.plan.remote import remote_notes, remote_speed, unbound_tiers_note
from omni_cpu.plan.speed import (
    SHARED,
    Calibration,
    SpeedInputs,
    best_split,
    choose_chunk_frames,
    frame_ms,
)
from omni_cpu.plan.support import facts_refusal
from omni_cpu.plan.topology import NodeCores, PhysicalCore
from omni_cpu.profile import choices
from omni_cpu.profile.deploy import default_stage_settings
from omni_cpu.profile.model import (
    CODE2WAV_STAGE,
    DTYPES,
    TALKER_STAGE,
    MachineStamp,
    Profile,
    Replica,
    StagePlan,
    Streaming,
)

BF16_ISA = {"x86_64": ("avx512_bf16", "amx_bf16"), "aarch64": ("bf16",)}


@dataclass(frozen=True)
class PlanOptions:
    """What a user (or `tune`) may override (None = let the planner decide)."""

    # 2: talker and code2wav on their own cores; 1: both share all cores; None: the
    # cost model decides (omni_cpu.plan.speed).
    stages: int | None = None
    reserve: int | None = None  # front-end cores per replica
    max_seqs: int | None = None
    dtype: str | None = None  # every stage's dtype
    code2wav_dtype: str | None = None  # code2wav's own, over `dtype`
    talker_cores: int | None = None  # a fixed split: the talker's cores per replica
    chunk_frames: int | None = None  # a fixed codec chunk size
    # What `probe --calibrate` measured here; None: the constants of plan.costs.
    calibration: Calibration | None = None
    # Size for the memory free right now (`--deploy-profile auto` starting engines on a
    # busy machine) rather than for the machine's capacity (a checked-in profile).
    fit_available_memory: bool = False
    # The talker's weight format (`--weights`, one of omni_cpu.weight_formats).
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


def split_cores(core_count: int, chunk_frames: int, inputs: SpeedInputs) -> tuple[int, int]:
    """Talker and code2wav core counts of the fastest split (both stages get >= 1)."""
    if core_count < 2:
        return core_count, core_count
    talker = min(
        range(1, core_count),
        key=lambda t: (frame_ms(t, core_count, chunk_frames, inputs), t),
    )
    return talker, core_count - talker


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


def facts_class(facts: Facts) -> str:
    """The cost model's class of the facts' CPU (omni_cpu.plan.costs.cpu_class)."""
    return costs.cpu_class(
        facts.architecture, facts.isa, facts.vendor, facts.cpu_family, facts.cpu_model
    )


def machine_stamp(facts: Facts, calibration: Calibration | None = None) -> MachineStamp:
    return MachineStamp(
        calibration=None if calibration is None else calibration.to_dict(),
        fingerprint=_fingerprint(facts),
        architecture=facts.architecture,
        model_name=" / ".join(facts.model_names) or "unknown",
        usable_cpus=format_cpu_list(facts.usable_cpus()),
        numa_nodes=tuple(
            {"id": n.id, "cpus": n.cpus, "memory_bytes": n.memory_bytes} for n in facts.numa_nodes
        ),
        isa=tuple(sorted(facts.isa)),
        memory_limit_bytes=facts.limits.memory_max_bytes,
        vendor=facts.vendor,
        cpu_family=facts.cpu_family,
        cpu_model=facts.cpu_model,
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
    reserved = reserved_kv_bytes(footprint, dtype)
    seqs = max_seqs or min(
        costs.MAX_NUM_SEQS_CAP, max(1, costs.STREAMS_PER_TALKER_CORE * talker_cores)
    )
    if budget is None:
        notes.append("node memory unknown: KV cache sized to the batch, not to memory")
        return seqs, seqs * per_seq + reserved
    fixed = replica_fixed_memory_bytes(footprint, dtype, weights)
    kv_room = budget - fixed - costs.CODE2WAV_KV_CACHE_BYTES - reserved
    if talker_node_room is not None:
        kv_room = min(kv_room, talker_node_room - reserved)
    if kv_room < per_seq:
        need = (fixed + costs.CODE2WAV_KV_CACHE_BYTES + reserved + per_seq) / costs.GIB
        raise MachineTooSmallError(
            f"a replica needs about {need:.1f} GiB but its talker's node has room for no stream",
            "use a smaller model, --weights int8, or fewer replicas",
        )
    if seqs * per_seq > kv_room:
        fitted = max(1, kv_room // per_seq)
        if max_seqs is not None:
            notes.append(f"--max-seqs {max_seqs} does not fit in memory; lowered to {fitted}")
        seqs = int(fitted)
    return seqs, seqs * per_seq + reserved


@dataclass(frozen=True)
class _CoreSplit:
    """A replica's cores: the front end's, and the talker's and code2wav's (the same
    cores where the stages share them), fastest first; and the codec chunk they led to."""

    frontend: list[PhysicalCore]
    compute: list[PhysicalCore]
    talker: list[PhysicalCore]
    code2wav: list[PhysicalCore]
    shared: bool
    chunk_frames: int


def _split_node(
    node: NodeCores, options: PlanOptions, speed: SpeedInputs, notes: list[str]
) -> _CoreSplit:
    """The front end takes the slowest cores; the rest go to the stages, the talker first."""
    # Fastest cores first, so the talker (the heavier stage) gets the big ones.
    cores: list[PhysicalCore] = sorted(node.cores, key=lambda c: (-c.capacity, c.cpu))
    reserve = frontend_reserve(len(cores)) if options.reserve is None else options.reserve
    reserve = min(reserve, max(0, len(cores) - (options.stages or 2)))
    # The front end takes the last (slowest) cores.
    frontend, compute = cores[len(cores) - reserve :], cores[: len(cores) - reserve]
    talker_n = _talker_cores(len(compute), options, speed, notes)
    chunk = options.chunk_frames or choose_chunk_frames(talker_n, len(compute), speed)
    if options.talker_cores is None and talker_n != SHARED:
        # The split again, now for the chunk size it led to.
        if options.stages == 2:
            talker_n = split_cores(len(compute), chunk, speed)[0]
        else:
            talker_n = best_split(len(compute), chunk, speed) or talker_n
    if talker_n == SHARED:
        return _CoreSplit(frontend, compute, compute, compute, True, chunk)
    return _CoreSplit(frontend, compute, compute[:talker_n], compute[talker_n:], False, chunk)


def _talker_node_room(
    facts: Facts,
    node: NodeCores,
    talker_node: int,
    footprint: ModelFootprint,
    options: PlanOptions,
    dtype: str,
    notes: list[str],
) -> int | None:
    """What the talker's own node holds for its KV where the replica's memory is on several
    nodes (vLLM binds a worker's memory to one); None where the home's budget holds it."""
    # A spanning replica's talker interleaves over all its nodes: the home's budget holds it.
    # A buggy firmware table's one node: no one of its listed nodes must hold the talker.
    if len(node.memory_node_ids()) < 2 or node.spanning or node.overlapping_nodes:
        return None
    own = node_memory_bytes(facts, node.node_memory.get(talker_node), notes)
    if not own:
        return None
    return (
        own
        - safety_margin(own)
        - footprint.talker_weight_bytes(dtype, options.weights)
        - costs.TALKER_STAGE_OVERHEAD_BYTES
    )


def _replica(
    index: int,
    node: NodeCores,
    facts: Facts,
    footprint: ModelFootprint,
    options: PlanOptions,
    speed: SpeedInputs,
    replica_count: int,
    notes: list[str],
) -> tuple[Replica, int]:
    """Replica `index` on `node`, and the codec chunk its split of cores led to."""
    dtype = speed.talker_dtype
    split = _split_node(node, options, speed, notes)
    budget = memory_budget(facts, node, replica_count, options.fit_available_memory, notes)
    memory_nodes = node.memory_node_ids()
    cpu_node = facts.node_of_cpu()

    def stage_node(group: list[PhysicalCore]) -> int:
        return cpu_node.get(group[0].cpu, node.node) if group else node.node

    # vLLM binds a worker's memory to its first CPU's node where visible, else to the
    # first visible node.
    talker_node = stage_node(split.talker)
    talker_node = talker_node if talker_node in memory_nodes else memory_nodes[0]
    talker_room = _talker_node_room(facts, node, talker_node, footprint, options, dtype, notes)
    seqs, talker_kv = _talker_batch(
        footprint,
        dtype,
        options.weights,
        # Sharing, the talker has about half the cores' time (4 streams on 2 shared
        # cores is what was measured).
        max(1, len(split.compute) // 2) if split.shared else len(split.talker),
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
            stage_id=TALKER_STAGE,
            cpus=cpu_list(split.talker),
            numa_node=stage_node(split.talker),
            memory_nodes=memory_list,
            kv_cache_memory_bytes=talker_kv,
            max_num_seqs=seqs,
            max_num_batched_tokens=costs.TALKER_MAX_NUM_BATCHED_TOKENS,
            max_model_len=costs.TALKER_MAX_MODEL_LEN,
            dtype=dtype,
            settings=talker_settings(),
        ),
        StagePlan(
            stage_id=CODE2WAV_STAGE,
            cpus=cpu_list(split.code2wav),
            numa_node=stage_node(split.code2wav),
            memory_nodes=memory_list,
            kv_cache_memory_bytes=costs.CODE2WAV_KV_CACHE_BYTES,
            max_num_seqs=seqs,
            max_num_batched_tokens=costs.CODE2WAV_MAX_NUM_BATCHED_TOKENS,
            max_model_len=costs.CODE2WAV_MAX_MODEL_LEN,
            dtype=speed.code2wav_dtype,
            settings=default_stage_settings(1),
        ),
    )
    replica = Replica(
        index=index,
        numa_node=node.node,
        frontend_cpus=cpu_list(split.frontend),
        stages=stages,
        spanning=node.spanning,
    )
    return replica, split.chunk_frames


def _talker_cores(compute: int, options: PlanOptions, speed: SpeedInputs, notes: list[str]) -> int:
    """The talker's share of the compute cores, or SHARED (both stages on all of them)."""
    if compute < 2:
        if options.stages != 1:
            notes.append("one core: both stages share it (they will contend)")
        return SHARED
    if options.talker_cores is not None:
        if options.talker_cores == SHARED:
            return SHARED
        if not 1 <= options.talker_cores < compute:
            raise PlanError(
                f"a split of {options.talker_cores} talker cores leaves code2wav none of {compute}"
            )
        return options.talker_cores
    if options.stages == 1:
        return SHARED
    chunk = options.chunk_frames or costs.CODEC_CHUNK_FRAMES_CHOICES[0]
    if options.stages == 2:
        return split_cores(compute, chunk, speed)[0]
    choice = best_split(compute, chunk, speed)
    if choice == SHARED:
        split = split_cores(compute, chunk, speed)[0]
        notes.append(
            f"both stages share {compute} cores: {frame_ms(SHARED, compute, chunk, speed):.0f} ms "
            f"per frame against {frame_ms(split, compute, chunk, speed):.0f} ms for the best "
            f"split (cost model{', calibrated' if speed.calibration else ''})"
        )
    return choice


def talker_settings() -> dict:
    """vLLM-Omni's talker settings, with max_tokens inside the planned max_model_len."""
    settings = default_stage_settings(0)
    settings["default_sampling_params"]["max_tokens"] = costs.TALKER_MAX_FRAMES
    return settings


def _checked_options(options: PlanOptions, facts: Facts) -> PlanOptions:
    """`options` with --weights read, or the PlanError a bad option or machine is."""
    if options.stages not in (None, 1, 2):
        raise PlanError(f"--stages must be 1 or 2, not {options.stages}")
    for flag, value in (("--dtype", options.dtype), ("--code2wav-dtype", options.code2wav_dtype)):
        if value is not None and value not in DTYPES:
            raise PlanError(f"{flag} must be {' or '.join(DTYPES)}, not {value}")
    if options.chunk_frames is not None and options.chunk_frames < 1:
        raise PlanError(f"a codec chunk must be at least 1 frame, not {options.chunk_frames}")
    options = dataclasses.replace(options, weights=envs.WEIGHTS.read(options.weights, "--weights"))
    _refuse_unrunnable(options.weights, facts)
    if not facts.usable_cpus():
        raise PlanError(
            "no usable CPU: the online CPUs, the cgroup cpuset and the affinity mask do not meet",
            "check the container's cpuset",
        )
    return options


def unrunnable(weights: str, facts: Facts) -> tuple[str, str] | None:
    """Why this CPU has none of the kernels of the weight format `weights`, and the smallest
    format that does run here; None where it has them."""
    chosen = weight_formats.get(weights)
    if chosen.runs_on(facts.architecture, facts.isa):
        return None
    here = sorted(
        map(weight_formats.get, weight_formats.runnable(facts.architecture, facts.isa)),
        key=lambda f: f.bytes_per_weight or float("inf"),
    )
    return (
        f"{weights} needs {chosen.needs(facts.architecture)} ({chosen.kernels}); "
        f"this {facts.architecture} CPU lacks them",
        here[0].name if here else "",
    )


def _refuse_unrunnable(weights: str, facts: Facts) -> None:
    """The PlanError a weight format is where this CPU has none of its kernels."""
    reason = unrunnable(weights, facts)
    if reason is not None:
        problem, instead = reason
        fix = f"use --weights {instead}" if instead else "use another machine"
        raise PlanError(f"--weights {problem}", fix)


def _profile_env(facts: Facts) -> dict[str, str]:
    """What every stage process gets besides its preloads: no torch.compile of the code
    predictor (slightly faster steps, a much longer start-up)."""
    return {envs.INDUCTOR.name: "0"}


def _with_choices(replicas: list[Replica], options: PlanOptions, notes: list[str]) -> list[Replica]:
    """Every stage's entry says all it runs with (omni_cpu.profile.choices): the weights
    format, and the kernels `probe --calibrate` measured here at each row count."""
    chosen = {"weights": options.weights}
    if options.calibration is not None:
        chosen.update(kernel_choices(options.calibration.kernels))
        notes.extend(describe_kernels(options.calibration.kernels))
    return [
        dataclasses.replace(
            replica,
            stages=tuple(
                dataclasses.replace(stage, choices=choices.for_stage(stage.stage_id, chosen))
                for stage in replica.stages
            ),
        )
        for replica in replicas
    ]


def plan_profile(
    facts: Facts, footprint: ModelFootprint, options: PlanOptions | None = None
) -> Profile:
    """Plan one pipeline replica per memory home (NUMA node, or group of nearest nodes)."""
    options = _checked_options(options or PlanOptions(), facts)
    # What the probe could not read travels with the plan it shaped.
    notes: list[str] = list(facts.notes)
    if refusal := facts_refusal(facts):
        notes.append(f"the runtime cannot serve this machine: {refusal}")
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
    speed = SpeedInputs(
        footprint=footprint,
        talker_dtype=dtype,
        # Code2wav's own dtype: bf16 convolutions pay off only with native bf16.
        code2wav_dtype=options.code2wav_dtype or options.dtype or choose_dtype(facts),
        weights=options.weights,
        calibration=options.calibration,
        cpu_class=facts_class(facts),
    )
    for index, node in enumerate(nodes):
        replica, chunk = _replica(index, node, facts, footprint, options, speed, len(nodes), notes)
        replicas.append(replica)
        chunks.append(chunk)
    # The chunks every replica streams in, fitted to the first one's speed, and what the
    # plan carries with them.
    cores = stage_cores(replicas[0])
    first_speed = remote_speed(facts, replicas[0], speed)
    schedule = choose_schedule(cores, first_speed, max(chunks))
    notes.append(describe_schedule(cores, first_speed, schedule))
    replicas = [
        dataclasses.replace(
            replica,
            capacity=replica_capacity(replica, schedule, remote_speed(facts, replica, speed)),
        )
        for replica in replicas
    ]
    notes.extend(note for replica in replicas for note in remote_notes(facts, replica, speed))
    notes.extend(filter(None, [unbound_tiers_note(facts, replicas)]))
    capacity = machine_capacity(replicas, speed, stage_cores(replicas[0]).talker_cores)
    env = _profile_env(facts)
    replicas = _with_choices(replicas, options, notes)
    return Profile(
        generated_by=f"omni-cpu {__version__}",
        machine=machine_stamp(facts, options.calibration),
        model=footprint.name,
        model_kind=footprint.kind,
        dtype=dtype,
        streaming=Streaming(
            initial_codec_chunk_frames=schedule.first,
            codec_chunk_frames=schedule.steady,
            codec_left_context_frames=costs.CODEC_LEFT_CONTEXT_FRAMES,
            codec_chunk_ramp=schedule.connector_ramp,
        ),
        replicas=tuple(replicas),
        env=env,
        notes=tuple(dict.fromkeys(notes)),
        capacity=capacity,
        # What a stage wants, by name, whatever this host has: each runtime finds its own
        # at start and starts without what it lacks (omni_cpu.plan.bind).
        preload=wanted_preload(facts.architecture),
    )
