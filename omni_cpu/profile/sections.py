"""The parts of a profile that hold facts and predictions, read strictly: the machine it was
planned for (and its calibration), the predicted capacity, the streaming chunks."""

from __future__ import annotations

import dataclasses
from typing import Any

from omni_cpu.cpulist import format_cpu_list, parse_cpu_list
from omni_cpu.errors import ProfileError
from omni_cpu.profile.deploy import CONNECTOR, CONNECTOR_DEFAULTS
from omni_cpu.profile.fields import FieldReader
from omni_cpu.profile.model import Capacity, MachineStamp, ReplicaCapacity, Streaming


def read_machine(reader: FieldReader) -> MachineStamp:
    reader.only(
        "fingerprint", "architecture", "model_name", "usable_cpus", "isa",
        "memory_limit_bytes", "numa_nodes", "calibration", "vendor", "cpu_family", "cpu_model",
    )  # fmt: skip
    nodes = []
    for node in reader.items("numa_nodes"):
        node.only("id", "cpus", "memory_bytes")
        nodes.append(
            {
                "id": node.non_negative("id"),
                "cpus": node.cpu_list("cpus", allow_empty=True),
                "memory_bytes": node.byte_count("memory_bytes", optional=True),
            }
        )
    isa = reader.get("isa", list)
    if not all(isinstance(flag, str) for flag in isa):
        raise ProfileError(f"{reader.path}.isa must be a list of strings")
    limit = reader.byte_count("memory_limit_bytes", optional=True)
    calibration = reader.get("calibration", dict, optional=True)
    if calibration is not None:
        calibration = read_calibration(calibration, f"{reader.path}.calibration")
    return MachineStamp(
        calibration=calibration,
        fingerprint=reader.get("fingerprint", str),
        architecture=reader.get("architecture", str),
        model_name=reader.get("model_name", str),
        usable_cpus=_usable_cpus(reader, nodes),
        numa_nodes=tuple(nodes),
        isa=tuple(isa),
        memory_limit_bytes=limit,
        vendor=reader.get("vendor", str, optional=True),
        cpu_family=_optional_count(reader, "cpu_family"),
        cpu_model=_optional_count(reader, "cpu_model"),
    )


def _usable_cpus(reader: FieldReader, nodes: list[dict[str, Any]]) -> str:
    """`usable_cpus` where written; left out (schema 5), the node list's CPUs."""
    if "usable_cpus" in reader.data:
        return reader.cpu_list("usable_cpus", allow_empty=True)
    return format_cpu_list(cpu for node in nodes for cpu in parse_cpu_list(node["cpus"]))


def usable_cpus_restate_nodes(machine: MachineStamp) -> bool:
    """Whether `usable_cpus` says no more than the node list (then it is not written)."""
    listed = {cpu for node in machine.numa_nodes for cpu in parse_cpu_list(node["cpus"])}
    return bool(listed) and set(parse_cpu_list(machine.usable_cpus)) == listed


def _optional_count(reader: FieldReader, key: str) -> int | None:
    """A non-negative whole number where the key is there, None where it is not."""
    return None if reader.get(key, int, optional=True) is None else reader.non_negative(key)


def read_calibration(data: dict[str, Any], path: str) -> dict[str, Any]:
    """A calibration block as `Calibration.to_dict` writes it; anything else names the key."""
    from omni_cpu.profile.calibration import Calibration

    reader = FieldReader(data, path)
    reader.only(
        "bandwidth_gb_s",
        "code2wav_ms_per_frame",
        "seconds",
        "code2wav_ms_per_call",
        "small_op_us",
        "kernels",
    )
    try:
        return Calibration.from_dict(data).to_dict()
    except (TypeError, ValueError, AttributeError):
        raise ProfileError(
            f"{path} must map core counts to GB/s and dtypes to ms",
            "rerun `omni-cpu probe --calibrate --output FILE`",
        ) from None


def _number(reader: FieldReader, key: str) -> float:
    value = reader.get(key, (int, float))
    if value < 0:
        raise ProfileError(f"{reader._key(key)} must not be negative ({value})")
    return float(value)


def _optional_number(reader: FieldReader, key: str) -> float | None:
    """A non-negative number a profile written before it existed leaves out."""
    return None if reader.get(key, (int, float), optional=True) is None else _number(reader, key)


def _optional_count(reader: FieldReader, key: str) -> int | None:
    return None if reader.get(key, int, optional=True) is None else reader.non_negative(key)


def read_replica_capacity(replica: FieldReader) -> ReplicaCapacity:
    """A replica's predicted capacity, as `_omni_block` writes it (written, never planned from)."""
    reader = replica.child("capacity")
    reader.only(*(f.name for f in dataclasses.fields(ReplicaCapacity)))
    return ReplicaCapacity(
        source=reader.get("source", str),
        weights=reader.get("weights", str),
        rtf_one_stream=_number(reader, "rtf_one_stream"),
        ttfa_s=_number(reader, "ttfa_s"),
        realtime_streams=reader.non_negative("realtime_streams"),
        talker_step_ms=_number(reader, "talker_step_ms"),
        talker_step_ms_at_max_seqs=_number(reader, "talker_step_ms_at_max_seqs"),
        max_num_seqs=reader.positive("max_num_seqs"),
        code2wav_ms_per_frame=_number(reader, "code2wav_ms_per_frame"),
        limit=reader.get("limit", str),
        safe_start_s=_optional_number(reader, "safe_start_s"),
        stall_free_streams=_optional_count(reader, "stall_free_streams"),
    )


def read_capacity(reader: FieldReader) -> Capacity:
    reader.only(*(f.name for f in dataclasses.fields(Capacity)))
    assumptions = reader.get("assumptions", list)
    if not all(isinstance(line, str) for line in assumptions):
        raise ProfileError(f"{reader.path}.assumptions must be a list of strings")
    return Capacity(
        realtime_streams=reader.non_negative("realtime_streams"),
        source=reader.get("source", str),
        weights=reader.get("weights", str),
        assumptions=tuple(assumptions),
        stall_free_streams=_optional_count(reader, "stall_free_streams"),
    )


def read_streaming(root: FieldReader) -> Streaming:
    connectors = root.child("connectors")
    connectors.only(CONNECTOR)
    connector = connectors.child(CONNECTOR)
    connector.only("name", "extra")
    if connector.get("name", str) != "SharedMemoryConnector":
        raise ProfileError(f"{connector.path}.name must be SharedMemoryConnector")
    extra = connector.child("extra")
    planned = (
        "codec_chunk_frames",
        "codec_left_context_frames",
        "initial_codec_chunk_frames",
        "codec_chunk_ramp",
    )
    extra.only(*CONNECTOR_DEFAULTS, *planned)
    for key, default in CONNECTOR_DEFAULTS.items():
        if key in extra.data and extra.data[key] != default:
            raise ProfileError(
                f"{extra.path}.{key} is fixed by omni-cpu at {default!r}",
                "remove the line or restore the value",
            )
    ramp = _chunk_ramp(extra)
    if ramp and "initial_codec_chunk_frames" in extra.data:
        raise ProfileError(
            f"{extra.path}.initial_codec_chunk_frames: with a codec_chunk_ramp the first "
            "chunk is the ramp's first",
            "remove the line, or edit codec_chunk_ramp[0]",
        )
    first = ramp[0] if ramp else extra.positive("initial_codec_chunk_frames")
    return Streaming(
        initial_codec_chunk_frames=first,
        codec_chunk_frames=extra.positive("codec_chunk_frames"),
        codec_left_context_frames=extra.non_negative("codec_left_context_frames"),
        codec_chunk_ramp=ramp,
    )


def _chunk_ramp(extra: FieldReader) -> tuple[int, ...]:
    """vLLM-Omni's codec_chunk_ramp: at least two positive frame counts, or none."""
    ramp = extra.get("codec_chunk_ramp", list, optional=True)
    if ramp is None:
        return ()
    if len(ramp) < 2 or not all(
        isinstance(size, int) and not isinstance(size, bool) and size > 0 for size in ramp
    ):
        raise ProfileError(
            f"{extra.path}.codec_chunk_ramp must list at least two positive frame counts",
            "write it like [1, 2, 4, 10], or remove the line for no ramp",
        )
    return tuple(ramp)
