"""The planner's rules, each on a small machine built for it."""

from __future__ import annotations

import pytest

from omni_cpu import envs
from omni_cpu.cpulist import parse_cpu_list
from omni_cpu.errors import SettingError
from omni_cpu.hardware.facts import Limits
from omni_cpu.plan import PlanError, PlanOptions, costs, footprint_for_model, plan_profile
from omni_cpu.plan.policy import split_cores
from omni_cpu.plan.speed import SpeedInputs
from tests.helpers.machines import GIB, machine

FOOTPRINT = footprint_for_model("0.6b")


def cpus_of(profile, replica=0, stage=0) -> set[int]:
    return set(parse_cpu_list(profile.replicas[replica].stage(stage).cpus))


def test_two_core_float32_box_gives_each_stage_one_core_and_reserves_none():
    # Measured on the 2-core AVX2 EPYC: sharing both cores did not beat 1+1 (costs.py).
    profile = plan_profile(machine({0: [0, 1]}, isa=("avx2", "fma")), FOOTPRINT)
    assert profile.dtype == "float32"
    assert cpus_of(profile, stage=0) == {0}
    assert cpus_of(profile, stage=1) == {1}
    assert profile.replicas[0].frontend_cpus == ""
    assert "OMNI_CPU_WEIGHTS" not in profile.env
    assert profile.replicas[0].stage(0).choices["weights"] == "model"


def test_two_core_native_bf16_box_splits_the_stages_one_core_each():
    # Measured on the 2-core AVX-512-bf16 Zen 4 with omni-cpu's GEMV: 1+1 RTF 3.85
    # against 4.71 shared (before the GEMV it was the other way: 5.35 against 4.61).
    profile = plan_profile(machine({0: [0, 1]}), FOOTPRINT)
    assert profile.dtype == "bfloat16"
    assert cpus_of(profile, stage=0) == {0} and cpus_of(profile, stage=1) == {1}


def test_int8_weights_travel_in_every_replicas_talker_entry():
    profile = plan_profile(machine({0: [0, 1]}), FOOTPRINT, PlanOptions(weights="int8"))
    assert [replica.stage(0).choices["weights"] for replica in profile.replicas] == ["int8"]
    assert "OMNI_CPU_WEIGHTS" not in profile.env
    # Measured: sharing both cores did not beat 1+1 beyond noise for int8 either.
    assert cpus_of(profile, stage=0) == {0} and cpus_of(profile, stage=1) == {1}


def test_unknown_weights_are_refused_naming_the_option_and_the_choices():
    with pytest.raises(SettingError, match=r"--weights 'int3' .* model, int8, int4"):
        plan_profile(machine({0: [0, 1]}), FOOTPRINT, PlanOptions(weights="int3"))


def test_int4_weights_need_the_gemv_isa():
    avx2 = machine({0: [0, 1]}, isa=("avx2", "fma"))
    profile = plan_profile(avx2, FOOTPRINT, PlanOptions(weights="int4"))
    assert profile.choice(envs.WEIGHTS) == "int4"
    no_fma = machine({0: [0, 1]}, isa=("avx2",))
    with pytest.raises(PlanError, match="int4 needs AVX2 and FMA on x86") as raised:
        plan_profile(no_fma, FOOTPRINT, PlanOptions(weights="int4"))
    assert "--weights int8" in str(raised.value.fix)  # the smallest format that runs there


def test_int8_and_int4_are_planned_on_arm_where_the_cpu_states_asimd():
    # The NEON builds of the W8A8/W4A8 GEMV need ASIMD; dotprod and i8mm only speed them.
    arm = machine({0: [0, 1]}, isa=("bf16", "asimd"), architecture="aarch64")
    assert plan_profile(arm, FOOTPRINT).choice(envs.WEIGHTS) == "model"
    for weights in ("int8", "int4"):
        assert (
            plan_profile(arm, FOOTPRINT, PlanOptions(weights=weights)).choice(envs.WEIGHTS)
            == weights
        )


def test_int8_and_int4_are_refused_on_arm_without_asimd_naming_the_format_that_runs():
    arm = machine({0: [0, 1]}, isa=("fp",), architecture="aarch64")
    for weights in ("int8", "int4"):
        with pytest.raises(
            PlanError, match=f"--weights {weights} needs ASIMD on aarch64"
        ) as raised:
            plan_profile(arm, FOOTPRINT, PlanOptions(weights=weights))
        assert raised.value.fix == "use --weights model"
        assert raised.value.exit_code == 2


def test_smt_siblings_are_left_out_of_thread_binding():
    profile = plan_profile(machine({0: [0, 1, 2, 3]}, smt=2), FOOTPRINT)
    bound = cpus_of(profile, stage=0) | cpus_of(profile, stage=1)
    assert bound <= {0, 1, 2, 3}  # CPUs 4-7 are the second threads of cores 0-3


def test_one_replica_per_numa_node_and_no_stage_spans_nodes():
    facts = machine({0: list(range(0, 8)), 1: list(range(8, 16))})
    profile = plan_profile(facts, FOOTPRINT)
    assert [r.numa_node for r in profile.replicas] == [0, 1]
    for replica, node_cpus in zip(profile.replicas, (range(0, 8), range(8, 16)), strict=True):
        for stage in replica.stages:
            assert set(parse_cpu_list(stage.cpus)) <= set(node_cpus)
            assert stage.numa_node == replica.numa_node


def test_sparse_node_ids_are_kept():
    profile = plan_profile(machine({0: [0, 1], 2: [2, 3], 3: [4, 5]}), FOOTPRINT)
    assert [r.numa_node for r in profile.replicas] == [0, 2, 3]


def test_memory_only_node_gets_no_replica():
    facts = machine({0: [0, 1, 2, 3]})
    from dataclasses import replace

    from omni_cpu.hardware.facts import NumaNode

    facts = replace(facts, numa_nodes=[*facts.numa_nodes, NumaNode(1, "", 64 * GIB)])
    profile = plan_profile(facts, FOOTPRINT)
    assert [r.numa_node for r in profile.replicas] == [0]


def test_large_replica_reserves_one_core_for_the_front_end():
    profile = plan_profile(machine({0: list(range(costs.FRONTEND_RESERVE_MIN_CORES))}), FOOTPRINT)
    frontend = set(parse_cpu_list(profile.replicas[0].frontend_cpus))
    assert len(frontend) == costs.FRONTEND_RESERVED_CORES
    assert not frontend & (cpus_of(profile, stage=0) | cpus_of(profile, stage=1))


def test_small_replica_reserves_nothing():
    cores = costs.FRONTEND_RESERVE_MIN_CORES - 1
    profile = plan_profile(machine({0: list(range(cores))}), FOOTPRINT)
    assert profile.replicas[0].frontend_cpus == ""


def test_reserve_option_overrides_the_rule():
    profile = plan_profile(machine({0: [0, 1, 2, 3]}), FOOTPRINT, PlanOptions(reserve=1))
    assert len(parse_cpu_list(profile.replicas[0].frontend_cpus)) == 1


def test_talker_gets_more_cores_than_code2wav_on_a_big_node():
    profile = plan_profile(machine({0: list(range(16))}), FOOTPRINT)
    assert len(cpus_of(profile, stage=0)) > len(cpus_of(profile, stage=1)) >= 1


def test_split_follows_the_cost_model_not_the_box():
    # Every split leaves each stage at least one core and uses every core.
    for dtype in ("bfloat16", "float32"):
        inputs = SpeedInputs(FOOTPRINT, dtype, dtype)
        for cores in range(2, 40):
            talker, code2wav = split_cores(cores, 25, inputs)
            assert talker >= 1 and code2wav >= 1 and talker + code2wav == cores


def test_chunk_is_the_smallest_code2wav_keeps_up_with():
    from omni_cpu.plan.speed import choose_chunk_frames, talker_ms
    from omni_cpu.profile.calibration import Calibration

    fast = SpeedInputs(FOOTPRINT, "bfloat16", "bfloat16")
    # 2 cores, 1 + 1: a 10-frame chunk's fixed cost still leaves code2wav ahead.
    assert choose_chunk_frames(1, 2, fast) == costs.CODEC_CHUNK_FRAMES_CHOICES[0] == 10
    # A code2wav that only just keeps up per frame cannot pay for small chunks' calls.
    call_ms = costs.CODE2WAV_CORE_MS_PER_CALL["bfloat16"] + costs.CODEC_ENGINE_CALL_MS
    tight = talker_ms(1, fast) - costs.CODE2WAV_STAGE_MS_PER_FRAME - call_ms / 40
    slow = SpeedInputs(
        FOOTPRINT,
        "bfloat16",
        "bfloat16",
        calibration=Calibration(code2wav_ms_per_frame={"bfloat16": tight}),
    )
    assert choose_chunk_frames(1, 2, slow) == 50


def test_fixed_split_and_chunk_options_are_taken_as_given():
    options = PlanOptions(talker_cores=3, chunk_frames=50, max_seqs=2)
    profile = plan_profile(machine({0: list(range(6))}), FOOTPRINT, options)
    assert len(cpus_of(profile, stage=0)) == 3 and len(cpus_of(profile, stage=1)) == 3
    assert profile.streaming.codec_chunk_frames == 50


def test_code2wav_dtype_is_chosen_apart_from_the_talkers():
    profile = plan_profile(machine({0: [0, 1]}), FOOTPRINT, PlanOptions(dtype="float32"))
    assert {s.dtype for s in profile.stages} == {"float32"}
    split = plan_profile(
        machine({0: [0, 1]}), FOOTPRINT, PlanOptions(dtype="float32", code2wav_dtype="bfloat16")
    )
    assert [s.dtype for s in split.stages] == ["float32", "bfloat16"]


def test_single_stage_option_shares_all_cores():
    profile = plan_profile(machine({0: [0, 1]}), FOOTPRINT, PlanOptions(stages=1))
    assert cpus_of(profile, stage=0) == cpus_of(profile, stage=1) == {0, 1}


@pytest.mark.parametrize(
    ("architecture", "isa", "dtype"),
    [
        ("x86_64", ("avx2", "avx512f", "avx512_bf16"), "bfloat16"),
        ("x86_64", ("avx2", "amx_bf16", "amx_tile"), "bfloat16"),
        ("x86_64", ("avx2", "avx512f", "avx512_vnni"), "float32"),
        ("aarch64", ("asimd", "bf16"), "bfloat16"),
        ("aarch64", ("asimd",), "float32"),
        ("ppc64le", ("altivec",), "float32"),
    ],
)
def test_dtype_follows_native_bf16(architecture, isa, dtype):
    profile = plan_profile(machine({0: [0, 1]}, isa=isa, architecture=architecture), FOOTPRINT)
    assert profile.dtype == dtype
    assert {stage.dtype for stage in profile.stages} == {dtype}


def test_kv_cache_is_what_the_batch_needs_in_vllms_blocks():
    profile = plan_profile(machine({0: [0, 1]}, memory_per_node=512 * GIB), FOOTPRINT)
    talker = profile.stages[0]
    per_token = FOOTPRINT.talker_kv_bytes_per_token("bfloat16")
    # vLLM's CPU blocks hold 128 tokens (2304 = 18 blocks) and one block is the null block.
    assert talker.max_model_len % 128 == 0
    per_seq = per_token * talker.max_model_len
    assert talker.kv_cache_memory_bytes == talker.max_num_seqs * per_seq + 128 * per_token


def test_cgroup_memory_limit_shrinks_the_batch():
    roomy = plan_profile(machine({0: list(range(8))}), FOOTPRINT)
    limited = plan_profile(
        machine({0: list(range(8))}, limits=Limits(cgroup_version=2, memory_max_bytes=10 * GIB)),
        FOOTPRINT,
    )
    assert limited.stages[0].kv_cache_memory_bytes < roomy.stages[0].kv_cache_memory_bytes
    total = sum(s.kv_cache_memory_bytes for s in limited.stages)
    assert total < 10 * GIB


def test_too_little_memory_is_a_plan_error_that_says_the_fix():
    with pytest.raises(PlanError, match="GiB") as error:
        plan_profile(machine({0: [0, 1]}, memory_per_node=4 * GIB), FOOTPRINT)
    assert error.value.fix


def test_container_cpuset_limits_the_cores_planned():
    facts = machine({0: list(range(8))}, limits=Limits(cgroup_version=2, cpuset_cpus="2-3"))
    profile = plan_profile(facts, FOOTPRINT)
    assert cpus_of(profile, stage=0) | cpus_of(profile, stage=1) == {2, 3}


def test_offline_cpus_are_not_planned():
    profile = plan_profile(machine({0: [0, 1, 2]}, offline=(0,)), FOOTPRINT)
    assert 0 not in cpus_of(profile, stage=0) | cpus_of(profile, stage=1)


def test_no_usable_cpu_is_a_plan_error():
    facts = machine({0: [0, 1]}, limits=Limits(cgroup_version=2, cpuset_cpus="7"))
    with pytest.raises(PlanError, match="no usable CPU"):
        plan_profile(facts, FOOTPRINT)


def test_unknown_node_memory_sizes_kv_to_the_batch_and_says_so():
    profile = plan_profile(machine({0: [0, 1]}, memory_per_node=None), FOOTPRINT)
    assert any("memory unknown" in note for note in profile.notes)
    assert profile.stages[0].kv_cache_memory_bytes > 0


def test_max_seqs_option_is_used_when_it_fits():
    profile = plan_profile(machine({0: [0, 1]}), FOOTPRINT, PlanOptions(max_seqs=3))
    assert profile.stages[0].max_num_seqs == 3


@pytest.mark.parametrize("found", [["/x/libiomp5.so", "/x/libtcmalloc.so.4"], []])
def test_code_predictor_compile_is_off_and_preloads_are_what_a_stage_wants(found):
    from dataclasses import replace

    facts = replace(machine({0: [0, 1]}), preload_libraries=found)
    profile = plan_profile(facts, FOOTPRINT)
    assert profile.env["VLLM_OMNI_CPU_INDUCTOR"] == "0"
    # By name, whatever the planning host had: each runtime finds its own at start.
    assert profile.preload == ("intel-openmp", "tcmalloc")
    assert "LD_PRELOAD" not in profile.env


def test_intel_openmp_is_wanted_on_x86_only():
    arm = machine({0: [0, 1]}, architecture="aarch64", isa=("asimd", "bf16"))
    assert plan_profile(arm, FOOTPRINT).preload == ("tcmalloc",)


def test_streaming_left_context_covers_the_decoder_window():
    profile = plan_profile(machine({0: [0, 1]}), FOOTPRINT)
    assert profile.streaming.codec_left_context_frames == 72
    assert profile.streaming.initial_codec_chunk_frames <= profile.streaming.codec_chunk_frames


def test_node_meminfo_that_cannot_be_right_is_scaled_to_memtotal():
    from dataclasses import replace

    facts = machine({0: [0, 1]}, memory_per_node=10 * GIB)
    facts = replace(facts, memory_total_bytes=24 * GIB)
    profile = plan_profile(facts, FOOTPRINT)
    assert any("scaled" in note for note in profile.notes)
    trusted = plan_profile(machine({0: [0, 1]}, memory_per_node=24 * GIB), FOOTPRINT)
    assert profile.stages[0].kv_cache_memory_bytes == trusted.stages[0].kv_cache_memory_bytes


def test_auto_on_a_busy_machine_fits_the_memory_free_now():
    from dataclasses import replace

    busy = replace(
        machine({0: [0, 1]}, memory_per_node=24 * GIB), memory_available_bytes=int(5.8 * GIB)
    )
    capacity = plan_profile(busy, FOOTPRINT)
    now = plan_profile(busy, FOOTPRINT, PlanOptions(fit_available_memory=True))
    assert now.stages[0].kv_cache_memory_bytes < capacity.stages[0].kv_cache_memory_bytes
