"""The probe against every real machine's dump: it must say what lscpu says."""

from __future__ import annotations

import json

from omni_cpu.cpulist import parse_cpu_list
from omni_cpu.hardware.facts import Facts
from tests.helpers import sysroots


def cpu_set(text: str | None) -> set[int]:
    return set(parse_cpu_list(text or ""))


def test_every_dump_travels_with_the_clone_and_says_where_it_came_from(dump):
    assert dump.tarball.is_file()
    assert dump.tarball.resolve().is_relative_to(sysroots.REPO_ROOT)
    readme = (sysroots.SYSROOTS_DIR / "README.md").read_text()
    if dump.expected["source"].get("repo") == "util-linux/util-linux":
        assert dump.expected["source"]["commit"] in readme and "GPL-2.0-or-later" in readme
    else:  # this project's own dump is named there with its licence
        assert f"`{dump.tarball.name}`" in readme


def test_architecture_matches_manifest(dump, dump_facts):
    assert dump_facts.architecture == dump.expected["architecture"]


def test_sockets_match_manifest(dump, dump_facts):
    assert dump_facts.sockets == dump.expected["sockets"]


def test_cores_per_socket_match_manifest(dump, dump_facts):
    assert dump_facts.cores_per_socket == dump.expected["cores_per_socket"]


def test_threads_per_core_match_manifest(dump, dump_facts):
    assert dump_facts.threads_per_core == dump.expected["threads_per_core"]


def test_online_cpus_match_manifest(dump, dump_facts):
    assert cpu_set(dump_facts.online_cpus) == cpu_set(dump.expected["online_cpus"])
    assert len(dump_facts.cpus) == dump.expected["online_cpu_count"]


def test_offline_cpus_match_manifest(dump, dump_facts):
    assert cpu_set(dump_facts.offline_cpus) == cpu_set(dump.expected["offline_cpus"])


def test_model_names_match_manifest(dump, dump_facts):
    assert dump_facts.model_names == dump.expected["model_names"]


def test_vendor_matches_manifest(dump, dump_facts):
    assert dump_facts.vendor == dump.expected["vendor_id"]


def test_numa_nodes_match_manifest(dump, dump_facts):
    # lscpu prints the kernel's node lists; the facts keep only the online CPUs of
    # each (s390's node 0 names 141 possible CPUs of which 8 are online).
    numa = dump.expected["numa"]
    online = cpu_set(dump.expected["online_cpus"])
    assert dump_facts.numa_stated == numa["stated"]
    if numa["stated"]:
        expected = [(n["node"], cpu_set(n["cpus"]) & online) for n in numa["nodes"]]
    else:  # no NUMA data in the dump: one node holding every online CPU
        expected = [(0, cpu_set(dump.expected["online_cpus"]))]
    assert [(n.id, cpu_set(n.cpus)) for n in dump_facts.numa_nodes] == expected


def test_isa_flags_match_manifest(dump, dump_facts):
    # Keys like "fp16(fphp&asimdhp)" name a derived flag before the parenthesis.
    stated = {flag.split("(")[0]: present for flag, present in dump.expected["isa"].items()}
    found = {flag: flag in dump_facts.isa for flag in stated}
    assert found == stated


def test_bf16_flags_present_exactly_when_dtype_is_bfloat16(dump, dump_facts):
    has_bf16 = bool({"avx512_bf16", "amx_bf16", "bf16"} & set(dump_facts.isa))
    assert has_bf16 == (dump.expected["expected_dtype"] == "bfloat16")


def test_every_online_cpu_sits_in_a_core_type_and_a_node_where_nodes_say(dump, dump_facts):
    typed = set().union(*(cpu_set(t.cpus) for t in dump_facts.core_types))
    assert typed == cpu_set(dump_facts.online_cpus)
    noded = set().union(*(cpu_set(n.cpus) for n in dump_facts.numa_nodes))
    assert {c.cpu for c in dump_facts.cpus if c.node is not None} == (
        noded & cpu_set(dump_facts.online_cpus)
    )


def test_facts_survive_a_json_round_trip(dump, dump_facts):
    text = json.dumps(dump_facts.to_dict())
    assert Facts.from_dict(json.loads(text)) == dump_facts


def test_dump_reads_no_live_only_facts(dump, dump_facts):
    assert dump_facts.limits.affinity_cpus is None
    assert dump_facts.libnuma is None
    assert dump_facts.source != "live"
