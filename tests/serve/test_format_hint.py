"""`serve` says at start where its weight format plays no stream without a gap and another
would: the same line `probe` prints (omni_cpu.plan.formats), for `auto` and for a file."""

from __future__ import annotations

from omni_cpu.cli.serve_cmd import _formats_hint
from omni_cpu.launch.plan import with_weights
from omni_cpu.plan.footprint import footprint_for_model
from omni_cpu.plan.formats import compare_formats, format_hint
from omni_cpu.plan.policy import PlanOptions, plan_profile
from omni_cpu.plan.resolve import resolve
from omni_cpu.profile import save_profile
from tests.helpers.machines import machine

AVX2_6 = machine({0: [0, 1, 2, 3, 4, 5]}, isa=("avx2", "fma"))  # int4 plays, the dtype does not


def test_auto_serving_the_checkpoint_dtype_says_the_probe_hint():
    resolved = resolve("auto", None, "model", facts=AVX2_6)
    expected = format_hint(
        compare_formats(AVX2_6, footprint_for_model(None), PlanOptions(fit_available_memory=True))
    )
    assert expected is not None and "--weights int4 would play" in expected
    assert _formats_hint(resolved, resolved.profile) == expected


def test_a_file_says_it_for_its_weights_and_nothing_once_they_play(tmp_path):
    path = tmp_path / "deploy.yaml"
    save_profile(plan_profile(AVX2_6, footprint_for_model(None), PlanOptions()), path)
    resolved = resolve(str(path), None, facts=AVX2_6)
    assert _formats_hint(resolved, resolved.profile) is not None  # the file's model weights
    assert _formats_hint(resolved, with_weights(resolved.profile, "int4")) is None
