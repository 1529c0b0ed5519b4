"""Rich tables for facts and profiles (everything here is also available as --json)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from omni_cpu import weight_formats
from omni_cpu.cpulist import format_cpu_list
from omni_cpu.hardware.facts import Facts
from omni_cpu.profile.model import Profile, StagePlan

if TYPE_CHECKING:
    from omni_cpu.plan.formats import FormatCapacity


def gib(value: int | None) -> str:
    return "?" if value is None else f"{value / 2**30:.1f} GiB"


def facts_table(facts: Facts) -> Table:
    """What this process may use (hwloc's view); the whole machine in the `host` row."""
    table = Table(title=f"Machine ({facts.source})", show_header=False, title_justify="left")
    table.add_column("fact", style="bold")
    table.add_column("value")
    rows = [
        ("architecture", facts.architecture),
        ("vendor / model", f"{facts.vendor or '?'} / {', '.join(facts.model_names) or '?'}"),
        ("sockets", _sockets_text(facts)),
        ("cores per socket", str(facts.cores_per_socket)),
        ("threads per core", str(facts.threads_per_core)),
        ("online CPUs", facts.online_cpus),
        ("offline CPUs", facts.offline_cpus or "-"),
        ("usable CPUs", format_cpu_list(facts.usable_cpus()) or "-"),
        ("NUMA nodes" + ("" if facts.numa_stated else " (assumed)"), _nodes_text(facts)),
        ("ISA", " ".join(facts.isa) or "-"),
        ("runtime", _runtime_text(facts)),
        ("memory", gib(facts.memory_total_bytes)),
        ("cgroup", _limits_text(facts)),
    ]
    if facts.host is not None:
        rows.append(("host", facts.host.describe()))
    for name, value in rows:
        table.add_row(name, value)
    for node in facts.numa_nodes:
        kind = node.kind
        if node.duplicate_of is not None:
            kind = f"repeats node {node.duplicate_of}"
        elif node.overlaps is not None:
            kind = f"lists node {node.overlaps}'s CPUs: one node with it"
        table.add_row(
            f"  node {node.id}",
            f"CPUs {node.cpus or '-'}, memory {gib(node.memory_bytes)} ({kind})",
        )
    return table


def _runtime_text(facts: Facts) -> str:
    from omni_cpu.plan.support import facts_refusal

    refusal = facts_refusal(facts)
    return "can serve it" if refusal is None else f"[bold red]cannot serve it:[/] {refusal}"


def _sockets_text(facts: Facts) -> str:
    text = "?" if facts.sockets is None else str(facts.sockets)
    if facts.sockets_by_core_type:
        per_type = ", ".join("?" if n is None else str(n) for n in facts.sockets_by_core_type)
        text += f" (per core type: {per_type})"
    return text


def _nodes_text(facts: Facts) -> str:
    if not facts.numa_count_basis:
        return str(facts.numa_node_count)
    return f"{facts.numa_node_count}: {facts.numa_count_basis}"


def _limits_text(facts: Facts) -> str:
    limits = facts.limits
    if limits.cgroup_version is None:
        return "-"
    memory = gib(limits.memory_max_bytes) if limits.memory_max_bytes else "unlimited"
    quota = limits.cpu_quota_cores or "none"
    cpuset = limits.cpuset_cpus or "all"
    mems = f", mems {limits.cpuset_mems}" if limits.cpuset_mems else ""
    return f"v{limits.cgroup_version}: cpuset {cpuset}{mems}, quota {quota}, memory {memory}"


def profile_table(profile: Profile) -> Table:
    table = Table(
        title=f"Deploy profile: {profile.model}, {profile.dtype}, chunks {chunk_sizes(profile)}",
        title_justify="left",
    )
    # Short headers: the table must fit an 80-column terminal.
    for column in ("replica", "node", "stage", "CPUs", "KV cache", "seqs", "tokens", "max len"):
        table.add_column(column)
    for replica in profile.replicas:
        for stage in replica.stages:
            table.add_row(
                # A spanning replica's talker memory interleaves over its nodes.
                f"{replica.index} spanning" if replica.spanning else str(replica.index),
                # Where its memory lives differs from its CPUs' node on grouped replicas
                # and memoryless nodes; "remote" where none of it is on its CPUs' node.
                memory_column(stage),
                stage.name,
                stage.cpus,
                gib(stage.kv_cache_memory_bytes),
                str(stage.max_num_seqs),
                str(stage.max_num_batched_tokens),
                str(stage.max_model_len),
            )
        if replica.frontend_cpus:
            table.add_row(str(replica.index), str(replica.numa_node), "front end",
                          replica.frontend_cpus, "", "", "", "")  # fmt: skip
    return table


def memory_column(stage: StagePlan) -> str:
    """The nodes a stage's memory comes from, marked remote where its CPUs' node is not one."""
    nodes = stage.memory_nodes or str(stage.numa_node)
    return nodes if stage.numa_node in stage.memory_node_ids() else f"{nodes} remote"


def chunk_sizes(profile: Profile) -> str:
    """The chunk schedule in frames: `1,2×2,4→10` (a ramp, repeats counted, then the steady
    size) or `1/10` (a first chunk, then the steady size)."""
    streaming = profile.streaming
    if streaming.codec_chunk_ramp:
        runs: list[list[int]] = []  # [size, count], in order
        for size in streaming.codec_chunk_ramp[:-1]:
            if runs and runs[-1][0] == size:
                runs[-1][1] += 1
            else:
                runs.append([size, 1])
        ramp = ",".join(str(size) if n == 1 else f"{size}×{n}" for size, n in runs)
        return f"{ramp}→{streaming.codec_chunk_frames} frames"
    return f"{streaming.initial_codec_chunk_frames}/{streaming.codec_chunk_frames} frames"


def capacity_table(profile: Profile) -> Table | None:
    """Each replica's predicted capacity (omni_cpu.plan.capacity); None for older profiles."""
    capacity = profile.capacity
    if capacity is None:
        return None
    table = Table(
        title=f"Predicted capacity ({capacity.source}, {capacity.weights} weights): "
        f"{capacity.realtime_streams} stream(s) in real time"
        + (
            ""
            if capacity.stall_free_streams is None
            else f", {capacity.stall_free_streams} without a gap"
        ),
        title_justify="left",
    )
    columns = ("replica", "RTF 1", "first audio", "safe start", "step 1/max", "code2wav")
    for column in (*columns, "real time", "no gap"):
        table.add_column(column, justify="right")
    for replica in profile.replicas:
        own = replica.capacity
        if own is None:
            continue
        table.add_row(
            str(replica.index),
            f"{own.rtf_one_stream:.2f}",
            f"{own.ttfa_s:.2f} s",
            "n/a" if own.safe_start_s is None else f"{own.safe_start_s:.2f} s",
            f"{own.talker_step_ms:.0f}/{own.talker_step_ms_at_max_seqs:.0f} ms",
            f"{own.code2wav_ms_per_frame:.0f} ms",
            str(own.realtime_streams),
            "n/a" if own.stall_free_streams is None else str(own.stall_free_streams),
        )
    return table


def formats_table(formats: tuple[FormatCapacity, ...], architecture: str | None = None) -> Table:
    """Each weight format this CPU runs, planned as the chosen one but for its weights; what
    each needs, on `architecture` where given."""
    source = next((row.source for row in formats if row.source), "built-in")
    chosen = next((row.weights for row in formats if row.chosen), "")
    table = Table(
        title=f"Each weight format here (predicted, {source}; chosen: {chosen})",
        title_justify="left",
    )
    for column in ("weights", "RTF 1", "safe start", "no gap", "real time", "needs"):
        table.add_column(column, justify="left" if column in ("weights", "needs") else "right")
    for row in formats:
        name = row.weights if row.talker == row.weights else f"{row.weights} ({row.talker})"
        if row.refused:
            table.add_row(name, "-", "-", "-", "-", row.refused)
            continue
        table.add_row(
            name,
            "n/a" if row.rtf_one_stream is None else f"{row.rtf_one_stream:.2f}",
            "n/a" if row.safe_start_s is None else f"{row.safe_start_s:.2f} s",
            "n/a" if row.stall_free_streams is None else str(row.stall_free_streams),
            "n/a" if row.realtime_streams is None else str(row.realtime_streams),
            weight_formats.get(row.weights).needs(architecture),
        )
    return table
