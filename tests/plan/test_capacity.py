"""The plan states its capacity: real-time streams, one stream's RTF and first audio, and why."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from omni_cpu import weight_formats
from omni_cpu.cpulist import format_cpu_list
from omni_cpu.hardware.probe import read_facts
from omni_cpu.plan import (
    MachineTooSmallError,
    PlanError,
    PlanOptions,
    costs,
    footprint_for_model,
    plan_profile,
)
from omni_cpu.plan.capacity import predict_request, profile_speed_inputs, stage_cores
from omni_cpu.plan.speed import SpeedInputs, code2wav_core_ms
from omni_cpu.profile import dump_profile, load_profile, parse_profile
from omni_cpu.profile.calibration import Calibration
from tests.helpers.machines import GIB, machine, with_memory

FOOTPRINT = footprint_for_model("0.6b")
BF16 = ("avx2", "avx512f", "avx512_bf16")
AVX2 = ("avx2", "fma")


def plan(cores: int, weights: str = "model", isa=BF16, nodes: int = 1, **options):
    per_node = cores // nodes
    layout = {node: list(range(node * per_node, (node + 1) * per_node)) for node in range(nodes)}
    facts = machine(layout, isa=isa, memory_per_node=256 * GIB)
    return plan_profile(facts, FOOTPRINT, PlanOptions(weights=weights, **options))


def test_every_replica_and_the_machine_carry_a_consistent_capacity():
    profile = plan(32, "int8", nodes=2)
    assert profile.capacity.realtime_streams == sum(
        replica.capacity.realtime_streams for replica in profile.replicas
    )
    for replica in profile.replicas:
        capacity = replica.capacity
        assert capacity.source == "built-in" and capacity.weights == "int8"
        assert 0 < capacity.realtime_streams <= replica.stage(0).max_num_seqs
        assert capacity.max_num_seqs == replica.stage(0).max_num_seqs
        assert capacity.talker_step_ms_at_max_seqs >= capacity.talker_step_ms > 0
        assert 0 < capacity.rtf_one_stream <= 1 and capacity.ttfa_s > 0


@pytest.mark.parametrize("weights", ["model", "int8"])
@pytest.mark.parametrize("isa", [BF16, AVX2], ids=["bf16", "avx2"])
def test_more_cores_never_predict_fewer_streams(weights, isa):
    streams = [plan(cores, weights, isa).capacity.realtime_streams for cores in range(1, 65)]
    assert streams == sorted(streams)
    assert streams[-1] > 0 or weights == "model"


@pytest.mark.parametrize("cores", [2, 4, 8, 16, 48])
@pytest.mark.parametrize("isa", [BF16, AVX2], ids=["bf16", "avx2"])
def test_int8_never_predicts_slower_than_the_checkpoints_dtype(cores, isa):
    model, int8 = plan(cores, "model", isa), plan(cores, "int8", isa)
    for plain, packed in zip(model.replicas, int8.replicas, strict=True):
        assert packed.capacity.rtf_one_stream <= plain.capacity.rtf_one_stream
        # First audio waits for the schedule's first chunk, which a faster talker may make
        # longer so that the stream plays without a gap: the listener's wait is the safe start.
        assert packed.capacity.safe_start_s <= plain.capacity.safe_start_s
        assert packed.capacity.realtime_streams >= plain.capacity.realtime_streams


def test_a_machine_too_small_for_a_stream_predicts_zero_and_says_why():
    # The 2-core box this project runs on: one talker core makes a frame in ~300 ms (bf16).
    profile = plan(2)
    capacity = profile.replicas[0].capacity
    assert profile.capacity.realtime_streams == capacity.realtime_streams == 0
    assert capacity.rtf_one_stream > 1
    assert capacity.limit.startswith("one stream: the talker's step takes")
    assert "over the 80 ms it plays" in capacity.limit


def test_streams_stop_at_max_num_seqs_and_say_so():
    profile = plan(32, "int8", max_seqs=2)
    capacity = profile.replicas[0].capacity
    assert capacity.realtime_streams == 2
    assert capacity.limit.startswith("max_num_seqs 2")


def test_a_calibration_is_named_as_the_source_and_moves_the_prediction():
    measured = Calibration(
        bandwidth_gb_s={1: 26.0, 2: 40.0},
        code2wav_ms_per_frame={"bfloat16": 20.0},
        code2wav_ms_per_call={"bfloat16": 30.0},
        small_op_us=costs.REFERENCE_SMALL_OP_US / 2,
    )
    built_in, calibrated = plan(2), plan(2, calibration=measured)
    assert calibrated.capacity.source == calibrated.replicas[0].capacity.source == "calibrated"
    assert built_in.capacity.source == "built-in"
    assert (
        calibrated.replicas[0].capacity.talker_step_ms
        < built_in.replicas[0].capacity.talker_step_ms
    )
    assert any(
        "measured here: 1 core(s) 26 GB/s" in line for line in calibrated.capacity.assumptions
    )


def test_uncalibrated_assumptions_state_bandwidth_per_core_and_isa_class():
    own = costs.CPU_CLASS_SPEEDS["AMD Zen 4"]
    lines = plan(2).capacity.assumptions
    assert any(f"{own.gemv_gb_s_per_core:g} GB/s per core" in line for line in lines)
    assert any(own.measured_on in line for line in lines)
    assert any(line.startswith("CPU class AVX-512 with bf16") for line in lines)


def identified(facts, vendor: str | None, family: int | None, model: int | None):
    return dataclasses.replace(facts, vendor=vendor, cpu_family=family, cpu_model=model)


TWO_CORES = machine({0: [0, 1]}, isa=BF16, memory_per_node=256 * GIB)


@pytest.mark.parametrize(
    ("vendor", "family", "model", "expected"),
    [
        ("AuthenticAMD", 0x1A, 0x02, "AMD Zen 5"),  # EPYC 9005 (Turin), the dump's guest
        ("AuthenticAMD", 0x1A, 0x44, "AMD Zen 5"),  # Ryzen 9000 (Granite Ridge)
        ("AuthenticAMD", 0x19, 0x11, "AMD Zen 4"),  # EPYC 9004 (Genoa)
        ("AuthenticAMD", 0x19, 0x61, "AMD Zen 4"),  # Ryzen 7000 (Raphael)
        ("AuthenticAMD", 0x1A, 0x50, "AVX-512 with bf16"),  # family 26, not a Zen 5 model
        ("GenuineIntel", 6, 0x55, "AVX-512 with bf16"),  # Cooper Lake: bf16, no AMX
        (None, None, None, "AVX-512 with bf16"),  # cpuinfo unread
    ],
)
def test_avx512_bf16_cpus_are_told_apart_by_vendor_family_and_model(
    vendor, family, model, expected
):
    facts = identified(TWO_CORES, vendor, family, model)
    assert (
        costs.cpu_class(
            facts.architecture, facts.isa, facts.vendor, facts.cpu_family, facts.cpu_model
        )
        == expected
    )


def test_a_zen5_plans_on_its_own_measured_speeds_and_a_zen4_on_its_own():
    zen5 = plan_profile(identified(TWO_CORES, "AuthenticAMD", 0x1A, 2), FOOTPRINT, PlanOptions())
    zen4 = plan_profile(identified(TWO_CORES, "AuthenticAMD", 0x19, 0x11), FOOTPRINT, PlanOptions())
    own = costs.CPU_CLASS_SPEEDS["AMD Zen 5"]
    streamed = FOOTPRINT.streamed_bytes_per_frame("bfloat16", "model")
    assert zen5.replicas[0].capacity.talker_step_ms == pytest.approx(
        streamed / own.gemv_gb_s_per_core / 1e6 + own.step_overhead_ms["model"], abs=0.1
    )
    assert zen5.replicas[0].capacity.talker_step_ms < zen4.replicas[0].capacity.talker_step_ms
    assert "CPU class AMD Zen 5: talker bfloat16, code2wav bfloat16" in zen5.capacity.assumptions
    assert (zen5.machine.vendor, zen5.machine.cpu_family, zen5.machine.cpu_model) == (
        "AuthenticAMD",
        0x1A,
        2,
    )


def test_an_unknown_cpu_is_planned_on_the_slowest_measured_class_of_its_isa_and_says_so():
    unknown = plan_profile(identified(TWO_CORES, "AuthenticAMD", 0x1A, 0x50), FOOTPRINT)
    zen4 = plan_profile(identified(TWO_CORES, "AuthenticAMD", 0x19, 0x11), FOOTPRINT)
    zen5 = plan_profile(identified(TWO_CORES, "AuthenticAMD", 0x1A, 0x02), FOOTPRINT)
    assert unknown.replicas[0].capacity == zen4.replicas[0].capacity
    assert zen5.replicas[0].capacity.talker_step_ms < zen4.replicas[0].capacity.talker_step_ms
    said = [line for line in unknown.capacity.assumptions if "slowest" in line]
    assert said == [
        "CPU class AVX-512 with bf16: talker bfloat16, code2wav bfloat16; this CPU is none "
        "measured in its ISA class (AMD Zen 4, AMD Zen 5): planned on the slowest of them, "
        "AMD Zen 4"
    ]
    assert not [line for line in zen5.capacity.assumptions if "slowest" in line]


def test_a_profile_reloaded_plans_on_the_class_it_was_planned_for():
    zen5 = plan_profile(identified(TWO_CORES, "AuthenticAMD", 0x1A, 2), FOOTPRINT)
    again = parse_profile(dump_profile(zen5))
    assert profile_speed_inputs(again, 0, FOOTPRINT).cpu_class == "AMD Zen 5"


def test_an_arm_cpu_plans_on_unmeasured_speeds_from_published_bandwidth_and_says_so():
    arm = machine({0: [0, 1]}, isa=("asimd", "bf16"), architecture="aarch64")
    profile = plan_profile(arm, FOOTPRINT, PlanOptions(weights="int4"))
    lines = profile.capacity.assumptions
    assert any(f"{costs.ARM_GEMV_GB_S_PER_CORE:g} GB/s per core" in line for line in lines)
    assert [line for line in lines if "UNMEASURED" in line] == [
        "CPU class Arm with bf16: talker bfloat16, code2wav bfloat16; UNMEASURED: built-in "
        f"speeds from {costs.CPU_CLASS_SPEEDS['Arm'].measured_on}"
    ]
    # Cautious: no faster a core than the slowest measured x86 reference.
    assert costs.ARM_GEMV_GB_S_PER_CORE <= costs.GEMV_GB_S_PER_CORE


def test_a_class_measured_apart_plans_on_its_own_speeds_and_others_on_the_reference():
    zen4 = plan(2).replicas[0].capacity
    avx2 = plan(2, isa=AVX2).replicas[0].capacity
    own = costs.CPU_CLASS_SPEEDS["AMD Zen 4"]
    streamed = FOOTPRINT.streamed_bytes_per_frame("bfloat16", "model")
    assert zen4.talker_step_ms == pytest.approx(
        streamed / own.gemv_gb_s_per_core / 1e6 + own.step_overhead_ms["model"], abs=0.1
    )
    assert "AVX2" not in costs.CPU_CLASS_SPEEDS  # unmeasured: the cautious reference
    assert any(
        f"{costs.GEMV_GB_S_PER_CORE:g} GB/s per core" in line
        for line in plan(2, isa=AVX2).capacity.assumptions
    )
    assert avx2.talker_step_ms > zen4.talker_step_ms


def test_recompute_decode_costs_code2wav_its_re_decoded_frames():
    stream = SpeedInputs(FOOTPRINT, "bfloat16", "bfloat16")
    recompute = SpeedInputs(FOOTPRINT, "bfloat16", "bfloat16", code2wav_decode="recompute")
    extra = code2wav_core_ms(25, recompute) - code2wav_core_ms(25, stream)
    per_frame = costs.CODE2WAV_CORE_MS_PER_FRAME["bfloat16"]
    assert extra == pytest.approx(per_frame * costs.CODEC_RECOMPUTED_FRAMES["recompute"] / 25)


def test_capacity_round_trips_through_yaml_and_older_profiles_load_without_it():
    profile = plan(16, "int8", nodes=2)
    assert parse_profile(dump_profile(profile)) == profile
    # Written before capacity existed: no capacity blocks at all.
    older = dataclasses.replace(
        profile,
        capacity=None,
        replicas=tuple(dataclasses.replace(r, capacity=None) for r in profile.replicas),
    )
    text = dump_profile(older)
    assert "capacity" not in text
    assert parse_profile(text) == older
    v1 = load_profile(Path(__file__).parents[1] / "profile" / "v1-epyc-7451-2s-8node.yaml")
    assert v1.capacity is None and all(r.capacity is None for r in v1.replicas)


def test_bench_predictions_come_from_the_profile_as_loaded():
    profile = parse_profile(dump_profile(plan(2, "int8")))
    speed = profile_speed_inputs(profile, 0, FOOTPRINT)
    rtf, ttfa = predict_request(profile, 0, speed, streams=1, frames=50)
    steady = profile.replicas[0].capacity.rtf_one_stream
    # A 50-frame request pays its first audio and last chunk on top of the steady rate.
    assert steady < rtf < steady * 1.3
    assert ttfa == pytest.approx(profile.replicas[0].capacity.ttfa_s)
    four, _ = predict_request(profile, 0, speed, streams=4, frames=50)
    assert four > rtf
    assert stage_cores(profile.replicas[0]).talker_cores == 1


def test_every_dump_states_capacity_and_int8_is_never_slower(dump, dump_root):
    facts = read_facts(dump_root)
    try:
        model = plan_profile(facts, FOOTPRINT)
    except MachineTooSmallError:  # its refusal is tests/plan/test_dumps.py's; plan it roomier
        facts = with_memory(facts, 64 * 2**30)
        model = plan_profile(facts, FOOTPRINT)
    assert model.capacity is not None and model.capacity.source == "built-in"
    if not weight_formats.INT8.runs_on(facts.architecture, facts.isa):
        # No int8 kernel here (not x86, or no AVX2): the plan refuses it.
        with pytest.raises(PlanError, match="--weights int8 needs"):
            plan_profile(facts, FOOTPRINT, PlanOptions(weights="int8"))
        return
    int8 = plan_profile(facts, FOOTPRINT, PlanOptions(weights="int8"))
    assert int8.capacity.realtime_streams >= model.capacity.realtime_streams
    for plain, packed in zip(model.replicas, int8.replicas, strict=True):
        assert packed.capacity.rtf_one_stream <= plain.capacity.rtf_one_stream
        if plain.capacity.realtime_streams == 0:
            assert plain.capacity.limit


def test_a_dump_given_more_of_its_cpus_never_predicts_fewer_streams(dump, dump_root):
    facts = read_facts(dump_root)
    # int8 where its kernels run (the faster plan, so more streams to lose), else the dtype's.
    runs = weight_formats.INT8.runs_on(facts.architecture, facts.isa)
    options = PlanOptions(weights="int8" if runs else "model")
    try:
        plan_profile(facts, FOOTPRINT, options)
    except MachineTooSmallError:  # streams depend on the CPUs given here, not its memory
        facts = with_memory(facts, 64 * 2**30)
    usable = facts.usable_cpus()
    counts = sorted({max(1, len(usable) * share // 4) for share in (1, 2, 3, 4)})
    streams = []
    for count in counts:
        limits = dataclasses.replace(facts.limits, affinity_cpus=format_cpu_list(usable[:count]))
        profile = plan_profile(dataclasses.replace(facts, limits=limits), FOOTPRINT, options)
        streams.append(profile.capacity.realtime_streams)
    assert streams == sorted(streams), dict(zip(counts, streams, strict=True))
