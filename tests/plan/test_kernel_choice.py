"""The kernel per row count follows what `probe --calibrate` measured, into the talker's entry."""

from __future__ import annotations

from omni_cpu.plan import PlanOptions, footprint_for_model, plan_profile
from omni_cpu.plan.kernel_choice import amx_rows, kernel_choices
from omni_cpu.profile import dump_profile, parse_profile
from omni_cpu.profile.calibration import Calibration
from omni_cpu.profile.deploy import deploy_config_dict
from tests.helpers.machines import machine

# ms per layer on the 2-core Xeon (AMX), the shape of what kernel_timing measures.
XEON = {
    "threads": 2,
    "ms": {
        "bf16": {
            "gemv": {1: 2.4, 4: 3.6, 8: 4.9, 16: 7.0, 32: 11.5},
            "gemv-amx": {1: 2.7, 4: 2.7, 8: 2.8, 16: 3.6, 32: 3.2},
            "onednn": {1: 2.5, 4: 2.5, 8: 2.5, 16: 2.9, 32: 3.1},
        },
        "int8": {
            "gemv": {1: 0.7, 4: 1.1, 8: 1.6, 16: 2.2, 32: 3.2},
            "gemv-amx": {1: 1.7, 4: 2.6, 8: 2.3, 16: 1.9, 32: 1.3},
            "fbgemm": {1: 1.2, 4: 1.6, 8: 1.9, 16: 2.9, 32: 3.3},
        },
    },
}


def test_amx_takes_over_from_the_row_count_where_it_keeps_winning() -> None:
    assert amx_rows(XEON["ms"]["bf16"]) == 4
    assert amx_rows(XEON["ms"]["int8"]) == 16


def test_amx_that_loses_at_the_largest_count_is_never_used() -> None:
    times = {"gemv": {1: 1.0, 4: 2.0, 32: 5.0}, "gemv-amx": {1: 3.0, 4: 1.0, 32: 6.0}}
    assert amx_rows(times) == 0


def test_the_measured_times_become_the_kernel_settings() -> None:
    assert kernel_choices(XEON) == {"amx_rows": "bf16=4,int8=16"}


def test_no_measurement_sets_nothing_and_no_amx_sets_no_amx_rows() -> None:
    assert kernel_choices(None) == {}
    zen4 = {"ms": {"bf16": {"gemv": {1: 1.3, 32: 5.0}, "onednn": {1: 2.0, 32: 5.4}}}}
    assert kernel_choices(zen4) == {}


def test_the_gemv_stands_aside_only_where_the_library_wins_every_format() -> None:
    slower = {
        "ms": {
            "bf16": {"gemv": {1: 3.0}, "onednn": {1: 2.0}},
            "int8": {"gemv": {1: 1.0}, "fbgemm": {1: 1.2}},
        }
    }
    assert "gemv" not in kernel_choices(slower)
    slower["ms"]["int8"]["fbgemm"][1] = 0.5
    assert kernel_choices(slower)["gemv"] == "off"


def test_a_calibrated_profile_carries_the_choice_in_the_talkers_entry_and_back() -> None:
    calibration = Calibration({1: 12.7, 2: 24.0}, {"bfloat16": 30.0}, 15.0, kernels=XEON)
    profile = plan_profile(
        machine({0: [0, 1]}), footprint_for_model("0.6b"), PlanOptions(calibration=calibration)
    )
    assert "OMNI_CPU_AMX_ROWS" not in profile.env
    talker, code2wav = deploy_config_dict(profile, 0)["stages"]
    assert talker["additional_config"]["omni_cpu"]["amx_rows"] == "bf16=4,int8=16"
    assert "amx_rows" not in code2wav["additional_config"]["omni_cpu"]  # it runs no GEMV
    assert any(note.startswith("kernels measured here (bf16") for note in profile.notes)
    loaded = parse_profile(dump_profile(profile))
    assert loaded == profile
    assert Calibration.from_dict(loaded.machine.calibration).kernels == XEON


def test_a_kernel_choice_used_on_another_cpu_says_so() -> None:
    from omni_cpu.plan.fit import kernel_notes

    amx = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8")
    calibration = Calibration({1: 12.7}, {}, 5.0, kernels=XEON)
    xeon = machine({0: [0, 1]}, isa=amx)
    profile = plan_profile(xeon, footprint_for_model("0.6b"), PlanOptions(calibration=calibration))
    assert kernel_notes(profile, xeon) == []
    zen4 = machine({0: [0, 1]}, isa=("avx2", "avx512f", "avx512_bf16", "avx512_vnni"))
    (note,) = kernel_notes(profile, zen4)
    assert "amx_rows=bf16=4,int8=16" in note and "amx_bf16 amx_int8" in note
    assert "probe --calibrate" in note
