"""Stages whose memory is remote to their CPUs, and what the cost model predicts that costs.

Pure. A stage's memory is remote where none of the nodes it is bound to
(CPU_VISIBLE_MEMORY_NODES) is a node its CPUs sit on: its CPUs' node is memoryless,
or the cgroup's cpuset.mems allows none of its memory. The talker streams its
weights every step, so its step slows with the memory's bandwidth; the cost model
takes remote bandwidth as the local one times the SLIT's local over remote distance
(the table is relative access cost, 10 local). Code2wav's cost is compute, not
weight streaming: remote memory is stated for it, not priced. Memory-only nodes
that no stage is bound to (a farther tier: NVM, CXL) are named as memory a user may
add (numactl --preferred), never as a home.
"""

from __future__ import annotations

import dataclasses

from omni_cpu.cpulist import format_cpu_list
from omni_cpu.hardware.facts import MEMORY_ONLY, NVM, Facts
from omni_cpu.plan.speed import SpeedInputs, talker_step_ms
from omni_cpu.profile.model import TALKER_STAGE, Replica, StagePlan

LOCAL_DISTANCE = 10  # the SLIT's distance of a node to itself


def remote_distance(facts: Facts, stage: StagePlan) -> int | None:
    """The SLIT distance from the stage's CPUs to its nearest bound memory; None if local."""
    cpu_of = facts.node_of_cpu()
    cpu_nodes = {cpu_of[cpu] for cpu in stage.cpu_ids() if cpu in cpu_of} or {stage.numa_node}
    memory_nodes = set(stage.memory_node_ids())
    if cpu_nodes & memory_nodes:
        return None
    distances = [
        facts.node_distance(cpu_node, memory) for cpu_node in cpu_nodes for memory in memory_nodes
    ]
    return min(distances, default=2 * LOCAL_DISTANCE)


def remote_speed(facts: Facts, replica: Replica, speed: SpeedInputs) -> SpeedInputs:
    """The cost model's inputs for this replica: its talker's remote memory priced in."""
    distance = remote_distance(facts, replica.talker)
    if distance is None or distance <= LOCAL_DISTANCE:
        return speed
    return dataclasses.replace(speed, memory_bandwidth_share=LOCAL_DISTANCE / distance)


def remote_notes(facts: Facts, replica: Replica, speed: SpeedInputs) -> list[str]:
    """One line per stage whose memory is remote, with the talker's predicted cost."""
    notes = []
    for stage in replica.stages:
        distance = remote_distance(facts, stage)
        if distance is None:
            continue
        where = (
            f"replica {replica.index} {stage.name} (CPUs {stage.cpus} on node "
            f"{stage.numa_node}) has no local memory: its memory is remote on node(s) "
            f"{stage.memory_nodes or stage.numa_node}, SLIT distance {distance}"
        )
        if stage.stage_id == TALKER_STAGE and distance > LOCAL_DISTANCE:
            cores = len(stage.cpu_ids())
            remote = remote_speed(facts, replica, speed)
            local_ms, remote_ms = talker_step_ms(cores, speed), talker_step_ms(cores, remote)
            where += (
                f": predicted talker step {remote_ms:.1f} ms against {local_ms:.1f} ms with "
                f"local memory (bandwidth x {LOCAL_DISTANCE}/{distance})"
            )
        notes.append(where)
    return notes


def unbound_tiers_note(facts: Facts, replicas: list[Replica]) -> str | None:
    """Memory-only nodes the process may use but no stage is bound to: slower tiers."""
    bound = {node for r in replicas for s in r.stages for node in s.memory_node_ids()}
    usable = set(facts.usable_memory_nodes())
    tiers = [
        node.id
        for node in facts.numa_nodes
        if node.kind in (MEMORY_ONLY, NVM) and node.id in usable and node.id not in bound
    ]
    if not tiers:
        return None
    return (
        f"memory-only nodes {format_cpu_list(tiers)} are farther memory tiers no stage is "
        "bound to (never a home): add them as slower memory with numactl --preferred"
    )
