"""The deploy profile: what the planner decides and every process reads.

A field exists because a process reads it; `omni_cpu.profile.writer` writes each
with a comment naming the engine argument or environment variable it becomes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from omni_cpu.envs import Knob
from omni_cpu.profile import choices

# 2: each replica's stages carry their own sizes, dtype and memory nodes in the
# omni_cpu block (version 1 kept one `stages:` block for every replica; it still loads).
# 3: each stage entry says its choices (`additional_config: {omni_cpu: ...}`,
# omni_cpu.profile.choices); versions 1 and 2 carried them in `env`, and still load.
# 4: one home per value, nothing of the planning machine's: a stage's CPUs are written
# once (the OpenMP/vLLM binding variables are derived at start, shown as comments), the
# libraries to preload are named (`preload: [intel-openmp]`, found at start in the runtime
# that runs) instead of an LD_PRELOAD path, and the planned CPU ids are a record of the
# shape that start binds onto the CPUs this process may use (omni_cpu.plan.bind).
# 5: one edit moves a stage: its node, its memory nodes and its replica's node follow from
# its `cpus` (written only where they say something else, else shown as comments); the
# first codec chunk is the ramp's first; `machine.usable_cpus` is left out where it is
# the node list's CPUs. omni_cpu.profile.upgrade brings each older form to this one.
PROFILE_SCHEMA_VERSION = 5
READABLE_SCHEMA_VERSIONS = (1, 2, 3, 4, 5)
# The pipeline's two stages, by the ids vLLM-Omni's Qwen3-TTS deploy config gives them: the
# one home of each id (every other room names a stage by these, or by Replica.talker).
TALKER_STAGE = 0
CODE2WAV_STAGE = 1
STAGE_NAMES = {TALKER_STAGE: "talker", CODE2WAV_STAGE: "code2wav"}


def stage_name(stage_id: int) -> str:
    """What a stage is called in plans and errors (a stage past the two Qwen3-TTS ones: stageN)."""
    return STAGE_NAMES.get(stage_id, f"stage{stage_id}")


DTYPES = ("bfloat16", "float32")

# What `omni_cpu.preload` may name; omni_cpu.plan.bind finds each one's files at start.
PRELOAD_NAMES = ("intel-openmp", "tcmalloc")


@dataclass(frozen=True)
class StagePlan:
    """One pipeline stage of one replica: its cores, memory and batch limits."""

    stage_id: int
    cpus: str  # VLLM_CPU_OMP_THREADS_BIND: one OpenMP thread per listed CPU
    numa_node: int  # the node its cores live on
    kv_cache_memory_bytes: int  # engine arg kv_cache_memory_bytes
    max_num_seqs: int  # engine arg max_num_seqs
    max_num_batched_tokens: int  # engine arg max_num_batched_tokens
    max_model_len: int  # engine arg max_model_len
    enforce_eager: bool = True  # engine arg enforce_eager (no CUDA graphs on CPU)
    dtype: str = "bfloat16"  # engine arg dtype
    # vLLM-Omni stage settings omni-cpu does not plan (sampling defaults, connectors),
    # kept as the file has them so a reviewed edit survives a round trip.
    settings: dict[str, Any] = field(default_factory=dict)
    # CPU_VISIBLE_MEMORY_NODES, kernel list syntax: the nodes its memory may come
    # from (a memoryless CPU node's nearest memory node; a grouped replica's nodes).
    # "" = numa_node.
    memory_nodes: str = ""
    # What the stage runs with besides its sizes (omni_cpu.profile.choices), as the
    # texts its entry's `additional_config.omni_cpu` says; {} = every knob's default.
    choices: dict[str, str] = field(default_factory=dict)
    # Whether `cpus` lists whole cores, SMT siblings included (one thread per CPU listed
    # either way). The planner binds one thread per physical core: False.
    smt_siblings: bool = False

    @property
    def name(self) -> str:
        return stage_name(self.stage_id)

    def choice(self, knob: Knob) -> Any:
        """What this stage's entry chooses for `knob` (no environment override)."""
        return choices.resolve(knob, self.choices, {})

    def memory_node_ids(self) -> tuple[int, ...]:
        from omni_cpu.cpulist import parse_cpu_list

        return parse_cpu_list(self.memory_nodes) if self.memory_nodes else (self.numa_node,)

    def cpu_ids(self) -> frozenset[int]:
        """The CPUs `cpus` lists."""
        from omni_cpu.cpulist import parse_cpu_list

        return frozenset(parse_cpu_list(self.cpus))


@dataclass(frozen=True)
class ReplicaCapacity:
    """What the cost model predicts one replica carries (omni_cpu.plan.capacity).

    Read by people sizing a machine and checked by `bench`; no process is configured by it.
    """

    source: str  # "calibrated" (probe --calibrate on this machine) or "built-in" constants
    weights: str  # the talker's weight format: its dtype, or int8
    rtf_one_stream: float  # wall / audio of one steady stream
    ttfa_s: float  # one stream's first audio
    realtime_streams: int  # the most concurrent streams with RTF <= 1 (<= max_num_seqs)
    talker_step_ms: float  # one decode step at one stream
    talker_step_ms_at_max_seqs: float  # one decode step with max_num_seqs streams
    max_num_seqs: int  # the batch the step above is for
    code2wav_ms_per_frame: float  # one stream's new frame on its cores, chunk costs included
    limit: str  # why realtime_streams is not higher
    # One 124-frame (10 s) stream's earliest gap-free player start, s since submission.
    safe_start_s: float | None = None
    # Streams started together whose p95 safe start stays within 1 s (None: older profile).
    stall_free_streams: int | None = None


@dataclass(frozen=True)
class Capacity:
    """The whole machine's predicted real-time streams and what the prediction assumes."""

    realtime_streams: int
    source: str
    weights: str
    assumptions: tuple[str, ...] = ()
    stall_free_streams: int | None = None  # every replica's, as ReplicaCapacity's


@dataclass(frozen=True)
class Replica:
    """One whole pipeline (talker + code2wav) on one NUMA node or group of nearest nodes."""

    index: int
    # Its home: the first node its memory comes from; its CPUs' node where that memory
    # sits on a node without usable CPUs (memory-only, or outside the cpuset).
    numa_node: int
    frontend_cpus: str  # taskset of the API server / driver; "" = none reserved
    stages: tuple[StagePlan, ...]
    capacity: ReplicaCapacity | None = None  # None in profiles older than the capacity block
    # No one node holds its talker: the talker's memory interleaves over its memory
    # nodes (OMNI_CPU_INTERLEAVE_MEMORY=1 in the talker's environment).
    spanning: bool = False

    def frontend_cpu_ids(self) -> frozenset[int]:
        """The CPUs `frontend_cpus` lists (none where none is reserved)."""
        from omni_cpu.cpulist import parse_cpu_list

        return frozenset(parse_cpu_list(self.frontend_cpus))

    def cpu_ids(self) -> frozenset[int]:
        """Every CPU the replica's processes run on: its front end's and its stages'."""
        return self.frontend_cpu_ids().union(*(stage.cpu_ids() for stage in self.stages))

    def stage(self, stage_id: int) -> StagePlan:
        for stage in self.stages:
            if stage.stage_id == stage_id:
                return stage
        raise KeyError(stage_id)

    @property
    def talker(self) -> StagePlan:
        return self.stage(TALKER_STAGE)

    @property
    def code2wav(self) -> StagePlan:
        return self.stage(CODE2WAV_STAGE)


@dataclass(frozen=True)
class Streaming:
    """Codec chunking between talker and code2wav (SharedMemoryConnector extra args)."""

    initial_codec_chunk_frames: int
    codec_chunk_frames: int
    codec_left_context_frames: int
    # vLLM-Omni's codec_chunk_ramp: the sizes of the first chunks, one each, before
    # codec_chunk_frames ones (it replaces initial_codec_chunk_frames); () = no ramp.
    codec_chunk_ramp: tuple[int, ...] = ()


@dataclass(frozen=True)
class MachineStamp:
    """The machine a profile was planned for: a short fingerprint plus the facts used."""

    fingerprint: str
    architecture: str
    model_name: str
    usable_cpus: str
    numa_nodes: tuple[dict[str, Any], ...]  # {"id", "cpus", "memory_bytes"}
    isa: tuple[str, ...]
    memory_limit_bytes: int | None
    # What `probe --calibrate` measured here (omni_cpu.profile.calibration.Calibration.to_dict);
    # None: planned with the constants of omni_cpu.plan.costs.
    calibration: dict[str, Any] | None = None
    # What the CPU is (cpuinfo's vendor_id, cpu family, model): the cost model's class reads
    # them where flags cannot tell two CPUs apart (omni_cpu.plan.costs.cpu_class); None: unstated.
    vendor: str | None = None
    cpu_family: int | None = None
    cpu_model: int | None = None


@dataclass(frozen=True)
class Profile:
    """A deploy profile: per-replica, per-stage placement plus shared settings."""

    generated_by: str
    machine: MachineStamp
    model: str  # the footprint it was sized for (e.g. qwen3-tts-12hz-0.6b)
    dtype: str
    streaming: Streaming
    replicas: tuple[Replica, ...]
    env: dict[str, str] = field(default_factory=dict)  # every stage process's environment
    notes: tuple[str, ...] = ()  # why the planner chose what it chose
    # custom-voice, voice-design or base: the kind the plan counted ("" in older profiles)
    model_kind: str = ""
    # The file's form as read (written back in the current one): not a reviewed value.
    schema_version: int = field(default=PROFILE_SCHEMA_VERSION, compare=False)
    capacity: Capacity | None = None  # None in profiles older than the capacity block
    # Libraries every stage preloads, by name (PRELOAD_NAMES), in LD_PRELOAD order.
    preload: tuple[str, ...] = ()
    # Where those were found in the runtime that runs: set when the profile is bound at
    # start (omni_cpu.plan.bind), never written; LD_PRELOAD is made of them.
    preload_paths: tuple[str, ...] = ()

    @property
    def stages(self) -> tuple[StagePlan, ...]:
        """Replica 0's stages: what a single-replica `run` uses."""
        return self.replicas[0].stages

    def choice(self, knob: Knob) -> Any:
        """What the stage that reads `knob` runs with, by its entry (every replica's is one)."""
        return self.replicas[0].stage(choices.STAGE_OF[knob.name]).choice(knob)

    def with_choice(self, knob: Knob, text: str) -> Profile:
        """This profile with every replica's stage that reads `knob` choosing `text`."""
        stage_id = choices.STAGE_OF[knob.name]
        name = choices.NAME_OF[knob.name]

        def chosen(stage: StagePlan) -> StagePlan:
            if stage.stage_id != stage_id:
                return stage
            return dataclasses.replace(stage, choices={**stage.choices, name: text})

        replicas = tuple(
            dataclasses.replace(replica, stages=tuple(chosen(s) for s in replica.stages))
            for replica in self.replicas
        )
        return dataclasses.replace(self, replicas=replicas)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        # `stages` (replica 0's) is part of the documented --json contract.
        data["stages"] = [dataclasses.asdict(stage) for stage in self.stages]
        return data
