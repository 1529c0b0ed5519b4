"""Profiles survive a round trip, read well, and load strictly."""

from __future__ import annotations

import contextlib
import dataclasses
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from omni_cpu.errors import ProfileError
from omni_cpu.plan import footprint_for_model, plan_profile
from omni_cpu.profile import deploy_config_dict, dump_profile, parse_profile
from omni_cpu.profile.deploy import OPENMP_BINDING_KEYS, openmp_binding_env
from tests.helpers.machines import machine

PROFILE = plan_profile(machine({0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}), footprint_for_model("0.6b"))
TEXT = dump_profile(PROFILE)


V3_PRELOAD = Path(__file__).parent / "v3-2core-int4-preload.yaml"


def edited(old: str, new: str, count: int = 1) -> str:
    assert old in TEXT, old
    return TEXT.replace(old, new, count)


def test_round_trip_gives_the_same_profile():
    assert parse_profile(TEXT) == PROFILE


def test_dump_is_stable():
    assert dump_profile(parse_profile(TEXT)) == TEXT


def test_every_planned_field_says_what_it_becomes():
    for key in ("kv_cache_memory_bytes", "max_num_seqs", "max_num_batched_tokens", "max_model_len"):
        lines = [line for line in TEXT.splitlines() if line.strip().startswith(f"{key}:")]
        assert lines and all("#" in line for line in lines), key
    assert "# engine arg --kv-cache-memory-bytes" in TEXT
    assert "# VLLM_CPU_OMP_THREADS_BIND" in TEXT


def test_file_is_the_vllm_omni_deploy_config_but_for_the_environment_start_derives():
    data = yaml.safe_load(TEXT)
    deploy = {key: value for key, value in data.items() if key != "omni_cpu"}
    launched = deploy_config_dict(PROFILE, 0)
    assert deploy["platforms"] == {"cpu": {"model_runner": "v1"}}
    assert {**deploy, "platforms": launched["platforms"]} == launched
    assert [s["stage_id"] for s in data["stages"]] == [0, 1]
    binds = [s["env"]["VLLM_CPU_OMP_THREADS_BIND"] for s in launched["platforms"]["cpu"]["stages"]]
    assert binds == [stage.cpus for stage in PROFILE.replicas[0].stages]


def test_a_stage_s_cpus_are_written_once():
    talker = PROFILE.replicas[0].stages[0]
    values = [line for line in TEXT.splitlines() if not line.startswith("#")]
    assert sum(f'"{talker.cpus}"' in line for line in values) == 1
    assert not any(key in TEXT for key in ("OMP_NUM_THREADS:", "OMP_PLACES:", "KMP_AFFINITY:"))


def test_moving_a_stage_is_one_edit_of_its_cpus():
    # Swap replica 0's stages: one edit each, and everything derived follows.
    text = edited('cpus: "0-2"', 'cpus: "1-3"').replace('cpus: "3"', 'cpus: "0"', 1)
    moved = parse_profile(text)
    talker, code2wav = (
        deploy_config_dict(moved, 0)["platforms"]["cpu"]["stages"][i]["env"] for i in (0, 1)
    )
    # The stages want Intel OpenMP (omni_cpu.preload), whose binding is KMP_AFFINITY's.
    assert (talker["VLLM_CPU_OMP_THREADS_BIND"], talker["KMP_AFFINITY"]) == (
        "1-3",
        "granularity=fine,explicit,proclist=[1,2,3]",
    )
    assert (code2wav["VLLM_CPU_OMP_THREADS_BIND"], code2wav["OMP_NUM_THREADS"]) == ("0", "1")


def test_the_derived_environment_is_not_read_back():
    with pytest.raises(ProfileError, match=r"platforms\.cpu\.stages.*derived at start"):
        parse_profile(
            edited('    model_runner: "v1"\n', '    model_runner: "v1"\n    stages: []\n')
        )


def test_an_ld_preload_path_is_refused_in_favour_of_a_name():
    text = edited("  env:", '  env:\n    LD_PRELOAD: "/opt/lib/libiomp5.so"')
    with pytest.raises(ProfileError) as error:
        parse_profile(text)
    assert re.search(r"omni_cpu\.env\.LD_PRELOAD.*omni_cpu\.preload", error.value.one_line())


def test_an_unknown_preload_name_is_refused_with_the_closest():
    text = edited('preload: ["intel-openmp", "tcmalloc"]', 'preload: ["intel-openmpp"]')
    with pytest.raises(ProfileError) as error:
        parse_profile(text)
    assert re.search(r"omni_cpu\.preload\[0\].*did you mean 'intel-openmp'", error.value.one_line())


def test_no_absolute_path_is_written():
    preloading = dataclasses.replace(
        PROFILE, preload=("intel-openmp", "tcmalloc"), preload_paths=("/opt/x/libiomp5.so",)
    )
    text = dump_profile(preloading)
    assert not re.search(r"(^|[\s\"'=])/[A-Za-z]", text, re.MULTILINE)
    assert 'preload: ["intel-openmp", "tcmalloc"]' in text
    assert parse_profile(text) == dataclasses.replace(preloading, preload_paths=())


def test_second_replica_deploy_config_binds_its_own_node():
    env = deploy_config_dict(PROFILE, 1)["platforms"]["cpu"]["stages"][0]["env"]
    assert env["CPU_VISIBLE_MEMORY_NODES"] == "1"
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == PROFILE.replicas[1].stages[0].cpus


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ("schema_version: 5", "schema_version: 99", "omni_cpu.schema_version"),
        ("  env:", "  surprise: 1\n  env:", "omni_cpu.surprise"),
        ("\n    max_num_seqs: ", "\n    max_num_seqs: many #", "stages[0].max_num_seqs"),
        ("kv_cache_memory_bytes: ", "kv_cache_memory_bytes: -", "stages[0].kv_cache_memory_bytes"),
        ('cpus: "0-2"', 'cpus: "0-"', "omni_cpu.replicas[0].stages[0].cpus"),
        ('cpus: "0-2"', 'cpus: "three"', "omni_cpu.replicas[0].stages[0].cpus"),
        ("enforce_eager: true", "enforce_eager: 1", "stages[0].enforce_eager"),
        ("async_scheduling: false", "async_scheduling: true", "stages[0].async_scheduling"),
        ('dtype: "bfloat16"', 'dtype: "int4"', "stages[0].dtype"),
        ("codec_chunk_frames: ", "codec_chunk_frames: 0 #", "codec_chunk_frames"),
        (
            "kv_cache_memory_bytes: ",
            "kv_cache_memory_bytes: 1" + "0" * 17 + " #",
            "stages[0].kv_cache_memory_bytes",
        ),
        ("memory_bytes: ", "memory_bytes: -", "omni_cpu.machine.numa_nodes[0].memory_bytes"),
        ('cpus: "0-2"', 'cpus: "0-70000"', "omni_cpu.replicas[0].stages[0].cpus"),
        (
            'VLLM_OMNI_CPU_INDUCTOR: "0"',
            'VLLM_OMNI_CPU_INDUCTOR: "0"\n    OMNI_CPU_STAGE_START: "x"',
            "omni_cpu.env.OMNI_CPU_STAGE_START",
        ),
    ],
)
def test_bad_value_is_one_line_naming_the_key(old, new, key):
    with pytest.raises(ProfileError) as error:
        parse_profile(edited(old, new))
    message = error.value.one_line()
    assert "\n" not in message
    assert key in message


def test_a_schema_3_stage_env_that_disagrees_with_the_plan_is_refused():
    text = V3_PRELOAD.read_text().replace(
        'VLLM_CPU_OMP_THREADS_BIND: "0"', 'VLLM_CPU_OMP_THREADS_BIND: "0-1"'
    )
    with pytest.raises(ProfileError, match=r"platforms\.cpu\.stages\[0\]\.env"):
        parse_profile(text)


def test_stage_env_binds_the_openmp_runtime_one_thread_per_cpu():
    # Where the runtime has no Intel OpenMP (bound: no path for it), GNU OpenMP's binding.
    gnu = dataclasses.replace(PROFILE, preload_paths=("/usr/lib/libtcmalloc.so.4",))
    stage = gnu.replicas[0].stages[0]
    env = deploy_config_dict(gnu, 0)["platforms"]["cpu"]["stages"][0]["env"]
    assert stage.cpus == "0-2"
    assert env["OMP_NUM_THREADS"] == "3"
    assert env["OMP_PLACES"] == "{0},{1},{2}"
    assert env["OMP_PROC_BIND"] == "true"


def test_intel_openmp_in_ld_preload_gets_kmp_affinity_instead():
    env = openmp_binding_env("4,6-7", "/opt/libiomp5.so:/opt/libtcmalloc.so")
    assert env == {
        "OMP_NUM_THREADS": "3",
        "KMP_AFFINITY": "granularity=fine,explicit,proclist=[4,6,7]",
        "KMP_BLOCKTIME": "5",
        "KMP_TPAUSE": "0",
    }
    # validate lets a file leave out exactly these (they follow from the binding)
    assert set(env) | set(openmp_binding_env("0", "")) <= set(OPENMP_BINDING_KEYS)


def test_a_schema_3_file_written_before_the_openmp_env_still_loads():
    text = V3_PRELOAD.read_text()
    lines = [
        line
        for line in text.splitlines(keepends=True)
        if not line.strip().startswith(("OMP_NUM_THREADS:", "KMP_AFFINITY:", "KMP_BLOCKTIME:"))
    ]
    assert len(lines) < len(text.splitlines())
    assert parse_profile("".join(lines)) == parse_profile(text)


def test_a_schema_3_openmp_env_that_disagrees_with_the_binding_is_refused():
    text = V3_PRELOAD.read_text().replace('OMP_NUM_THREADS: "1"', 'OMP_NUM_THREADS: "8"', 1)
    with pytest.raises(ProfileError, match=r"env\.OMP_NUM_THREADS"):
        parse_profile(text)


def test_reviewed_sampling_edit_survives_a_round_trip():
    text = edited("temperature: 0.9", "temperature: 0.7")
    assert "temperature: 0.7" in dump_profile(parse_profile(text))


def test_yaml_syntax_error_names_the_line():
    with pytest.raises(ProfileError, match=r"line \d+"):
        parse_profile("omni_cpu: [\n")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_garbage_never_raises_anything_but_profile_error(text):
    with contextlib.suppress(ProfileError):
        parse_profile(text)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=len(TEXT) - 1), st.text(max_size=8))
def test_mutated_profiles_never_raise_anything_but_profile_error(position, insert):
    with contextlib.suppress(ProfileError):
        parse_profile(TEXT[:position] + insert + TEXT[position + 1 :])


def test_numbers_in_comments_match_the_values():
    header = re.search(r"usable CPUs (\S+), fingerprint (\w+)\.", TEXT)
    assert header is not None
    loaded = parse_profile(TEXT)
    assert header.groups() == (loaded.machine.usable_cpus, loaded.machine.fingerprint)
    # The derived environment, shown as comments, says each stage's binding as loaded.
    derived = re.findall(
        r"^#   replica (\d+) (\w+) \(node (\d+)\): VLLM_CPU_OMP_THREADS_BIND=(\S+)"
        r" OMP_NUM_THREADS=(\d+)"
        r".* CPU_VISIBLE_MEMORY_NODES=(\S+)$",
        TEXT,
        re.MULTILINE,
    )
    expected = [
        (str(r.index), s.name, str(s.numa_node), s.cpus, str(len(s.cpu_ids())), s.memory_nodes)
        for r in loaded.replicas
        for s in r.stages
    ]
    assert derived == expected


def test_cpu_lists_stay_quoted_so_they_load_as_text():
    # Unquoted, `0,1` or `3` would load as something other than a CPU list.
    assert re.search(r'cpus: "\d', TEXT)


def test_the_model_kind_is_written_and_read_back():
    assert 'model_kind: "custom-voice"' in TEXT
    assert parse_profile(TEXT).model_kind == "custom-voice"


def test_a_profile_from_before_model_kind_still_loads():
    older = "\n".join(line for line in TEXT.splitlines() if "model_kind" not in line)
    assert parse_profile(older).model_kind == ""


V1_FILE = Path(__file__).with_name("v1-epyc-7451-2s-8node.yaml")


def test_a_version_1_profile_still_loads_with_one_size_for_every_replica():
    # Written by omni-cpu before schema 2 (profiles/epyc-7451-2s-8node.yaml at 30bf37c).
    profile = parse_profile(V1_FILE.read_text())
    assert len(profile.replicas) == 8
    sizes = {(s.stage_id, s.kv_cache_memory_bytes, s.max_num_seqs) for r in profile.replicas
             for s in r.stages}  # fmt: skip
    assert len(sizes) == 2  # one talker size, one code2wav size, as version 1 meant
    for replica in profile.replicas:
        assert all(s.memory_node_ids() == (replica.numa_node,) for s in replica.stages)
    # Written again it is a version-2 file that loads to the same plan.
    assert parse_profile(dump_profile(profile)) == profile


def test_a_key_given_twice_is_refused_naming_its_line():
    text = edited("  generated_by:", '  model: "other"\n  generated_by:')
    line = next(n for n, t in enumerate(text.splitlines(), 1) if t == '  model: "other"')
    again = r"line \d+: key 'model' is given twice \(first at line " + str(line) + r"\)"
    with pytest.raises(ProfileError, match=again):
        parse_profile(text, "deploy.yaml")


def test_a_yaml_alias_bomb_is_refused_at_once():
    bomb = "\n".join(
        ['  notes: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
        + [f"  n{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, 6)]
    )
    noteless = dump_profile(dataclasses.replace(PROFILE, notes=()))
    assert "  notes: []" in noteless
    text = noteless.replace("  notes: []", bomb, 1)
    with pytest.raises(ProfileError, match=r"line \d+: YAML alias \*a0 is not allowed"):
        parse_profile(text, "deploy.yaml")


def test_a_profile_over_the_size_limit_is_refused_before_it_is_parsed(tmp_path: Path):
    from omni_cpu.profile import load_profile
    from omni_cpu.profile.strict_yaml import MAX_PROFILE_BYTES

    path = tmp_path / "huge.yaml"
    path.write_text(TEXT + "#" * MAX_PROFILE_BYTES)
    with pytest.raises(ProfileError, match=f"a profile is at most {MAX_PROFILE_BYTES}"):
        load_profile(path)
    with pytest.raises(ProfileError, match="at most"):
        parse_profile(TEXT + "#" * MAX_PROFILE_BYTES)


def test_stages_that_share_cores_each_bind_a_team_to_every_core_and_split_stages_do_not():
    from omni_cpu.plan import PlanOptions
    from omni_cpu.profile.deploy import stage_env

    two_cores, model = machine({0: [0, 1]}), footprint_for_model("0.6b")
    shared = plan_profile(two_cores, model, PlanOptions(stages=1))
    split = plan_profile(two_cores, model, PlanOptions(stages=2))
    talker, code2wav = (stage_env(shared, 0, stage) for stage in (0, 1))
    assert talker["VLLM_CPU_OMP_THREADS_BIND"] == code2wav["VLLM_CPU_OMP_THREADS_BIND"] == "0-1"
    assert talker["OMP_NUM_THREADS"] == code2wav["OMP_NUM_THREADS"] == "2"
    binds = {stage_env(split, 0, stage)["VLLM_CPU_OMP_THREADS_BIND"] for stage in (0, 1)}
    assert binds == {"0", "1"}


def test_a_chunk_ramp_round_trips_and_reaches_the_connector():
    ramped = dataclasses.replace(
        PROFILE, streaming=dataclasses.replace(PROFILE.streaming, codec_chunk_ramp=(2, 4, 10))
    )
    text = dump_profile(ramped)
    assert parse_profile(text) == ramped
    extra = deploy_config_dict(ramped)["connectors"]["connector_of_shared_memory"]["extra"]
    assert extra["codec_chunk_ramp"] == [2, 4, 10]
    plain = dataclasses.replace(
        PROFILE, streaming=dataclasses.replace(PROFILE.streaming, codec_chunk_ramp=())
    )
    connector = deploy_config_dict(plain)["connectors"]["connector_of_shared_memory"]
    assert "codec_chunk_ramp" not in connector["extra"]


@pytest.mark.parametrize("ramp", ["[10]", "[1, 0, 10]", "[1, true, 10]", '"1,2"'])
def test_a_ramp_that_is_not_two_or_more_positive_counts_is_refused(ramp: str):
    ramped = dataclasses.replace(
        PROFILE, streaming=dataclasses.replace(PROFILE.streaming, codec_chunk_ramp=(2, 4, 10))
    )
    text = dump_profile(ramped)
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "codec_chunk_ramp:" in line)
    end = start + 1
    while end < len(lines) and lines[end].lstrip().startswith("- "):
        end += 1
    indent = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
    broken = "\n".join([*lines[:start], f"{indent}codec_chunk_ramp: {ramp}", *lines[end:]])
    with pytest.raises(ProfileError, match="codec_chunk_ramp"):
        parse_profile(broken)


def test_a_fifo_nobody_writes_to_is_refused_not_a_hang(tmp_path, monkeypatch):
    import os
    import time

    from omni_cpu.profile import load_profile, strict_yaml

    monkeypatch.setattr(strict_yaml, "PIPE_WAIT_S", 0.5)
    fifo = tmp_path / "deploy.yaml"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(ProfileError, match="pipe nobody wrote") as caught:
        load_profile(fifo)
    assert time.monotonic() - started < 5
    assert "give the profile as a file" in caught.value.one_line()


def test_a_profile_written_into_a_fifo_is_read(tmp_path):
    import os
    import threading

    from omni_cpu.profile import load_profile

    fifo = tmp_path / "deploy.yaml"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text(TEXT))
    writer.start()
    try:
        assert load_profile(fifo) == PROFILE
    finally:
        writer.join(10)


def test_an_unknown_key_names_the_file_its_line_and_the_key_meant(tmp_path: Path):
    from omni_cpu.profile import load_profile

    path = tmp_path / "deploy.yaml"
    path.write_text(edited("    max_num_seqs: ", "    max_num_seq: "))
    line = next(
        number
        for number, text in enumerate(path.read_text().splitlines(), start=1)
        if "max_num_seq:" in text
    )
    with pytest.raises(ProfileError) as error:
        load_profile(path)
    message = error.value.one_line()
    assert message.startswith(f"{path} line {line}: unknown key ")
    assert "max_num_seq " in message and "did you mean max_num_seqs?" in message


def test_broken_yaml_says_the_parser_s_reason():
    with pytest.raises(ProfileError) as error:
        parse_profile(edited("    max_num_seqs: ", "    max_num_seqs: ["), "deploy.yaml")
    message = error.value.one_line()
    assert message.startswith("deploy.yaml is not valid YAML at line ")
    assert "while parsing a flow sequence (opened at line" in message
    assert "expected ',' or ']'" in message


def test_a_missing_key_points_at_the_block_it_belongs_in():
    text = "\n".join(line for line in TEXT.splitlines() if "generated_by:" not in line)
    with pytest.raises(ProfileError, match=r"^deploy\.yaml line 9: missing key omni_cpu\."):
        parse_profile(text, "deploy.yaml")


def test_replica_0_s_sizes_have_one_home_in_the_deploy_config():
    replica_0 = TEXT.split("    - index: 1")[0].split("  replicas:")[1]
    assert "kv_cache_memory_bytes" not in replica_0.split("capacity:")[0]
    text = edited("\n    max_num_seqs: ", "\n    max_num_seqs: 3 #")
    assert parse_profile(text).replicas[0].stage(0).max_num_seqs == 3  # one edit
