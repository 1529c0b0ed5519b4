"""The weight-format registry is the one place a format is declared, and every reader follows it."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from omni_cpu import envs, weight_formats
from omni_cpu.cli.common import weights_help
from omni_cpu.errors import PlanError
from omni_cpu.plan import PlanOptions, footprint_for_model, plan_profile
from omni_cpu.plan.footprint import DTYPE_BYTES
from tests.helpers import sysroots
from tests.helpers.machines import machine

PACKAGE = Path(weight_formats.__file__).parent
REPO = PACKAGE.parent
FOOTPRINT = footprint_for_model("0.6b")


def test_the_weights_knob_takes_exactly_the_registrys_formats() -> None:
    assert envs.WEIGHTS.choices == weight_formats.NAMES
    for name in weight_formats.NAMES:
        assert envs.WEIGHTS.read(name, "--weights") == name


def test_int4_bytes_follow_from_its_group() -> None:
    # Half a byte a weight plus a bf16 scale and minimum (4 bytes) per group.
    int4 = weight_formats.INT4
    assert int4.bytes_per_weight == 0.5 + 4 / int4.group == 0.625


def test_the_help_figures_are_the_cost_models_bytes_a_frame() -> None:
    # `probe` prints each format's streamed GB a frame: the help's "Nx less" is their ratio.
    help_text = weights_help()
    reference = FOOTPRINT.streamed_bytes_per_frame("bfloat16")
    for name in ("int8", "int4"):
        ratio = reference / FOOTPRINT.streamed_bytes_per_frame("bfloat16", name)
        assert f"'{name}' (" in help_text
        assert f"{ratio:.2g}x less memory traffic" in help_text
    assert "2x less" in help_text  # int8: 1 byte against bf16's 2
    assert DTYPE_BYTES["bfloat16"] == 2


def test_a_format_runs_only_where_the_registry_says() -> None:
    # aarch64: ASIMD is the NEON kernels' floor; dotprod / i8mm only pick faster variants.
    assert weight_formats.runnable("aarch64", {"bf16", "asimd"}) == ["model", "int8", "int4"]
    assert weight_formats.runnable("aarch64", {"fp"}) == ["model"]
    # x86's flags name no aarch64 kernel, and aarch64's no x86 one.
    assert weight_formats.runnable("aarch64", {"avx2", "fma"}) == ["model"]
    assert weight_formats.runnable("x86_64", {"asimd"}) == ["model"]
    assert weight_formats.runnable("riscv64", {"v"}) == ["model"]
    assert weight_formats.runnable("x86_64", {"sse4_2", "avx"}) == ["model"]
    assert weight_formats.runnable("x86_64", {"avx2"}) == ["model", "int8"]
    assert weight_formats.runnable("x86_64", {"avx2", "fma"}) == ["model", "int8", "int4"]


def test_a_new_format_in_the_registry_is_planned_with_its_own_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What adding a format means for the planner: one registry entry, no planner edit.
    int3 = dataclasses.replace(
        weight_formats.INT4, name="int3", bytes_per_weight=0.5, step_overhead_ms=40.0
    )
    monkeypatch.setitem(weight_formats.FORMATS, "int3", int3)
    knob = dataclasses.replace(envs.WEIGHTS, choices=(*weight_formats.NAMES, "int3"))
    monkeypatch.setattr(envs, "WEIGHTS", knob)
    avx2 = machine({0: [0, 1]}, isa=("avx2", "fma"))
    int4 = plan_profile(avx2, FOOTPRINT, PlanOptions(weights="int4"))
    int3_plan = plan_profile(avx2, FOOTPRINT, PlanOptions(weights="int3"))
    assert int3_plan.replicas[0].stage(0).choices["weights"] == "int3"
    assert int3_plan.capacity is not None and int4.capacity is not None
    assert int3_plan.replicas[0].capacity.talker_step_ms < int4.replicas[0].capacity.talker_step_ms
    with pytest.raises(Exception, match="int3 needs ASIMD on aarch64"):
        plan_profile(
            machine({0: [0, 1]}, isa=("fp",), architecture="aarch64"),
            FOOTPRINT,
            PlanOptions(weights="int3"),
        )


def test_what_a_format_needs_is_said_for_the_cpus_architecture() -> None:
    int4 = weight_formats.INT4
    assert int4.needs("x86_64") == "AVX2 and FMA on x86"
    assert int4.needs("aarch64") == "ASIMD on aarch64"
    # Where it has no kernel at all, every architecture it runs on.
    assert int4.needs("riscv64") == "AVX2 and FMA on x86 or ASIMD on aarch64"
    assert int4.needs() == int4.needs("riscv64")
    assert weight_formats.MODEL.needs("aarch64") == "nothing"


def test_the_weights_doc_table_is_the_registrys() -> None:
    page = (REPO / "docs" / "weights.md").read_text()
    for weight_format in weight_formats.FORMATS.values():
        assert weight_format.markdown_row() in page.splitlines()


# A format's name is decided about in one place: a quoted name in another module is a
# second home the registry does not see (`weights == "int4"`).
QUOTED_INT4 = re.compile(r"""["']int4["']""")


def test_only_the_registry_names_int4_in_quotes() -> None:
    found = sorted(
        str(path.relative_to(REPO))
        for path in PACKAGE.rglob("*.py")
        if QUOTED_INT4.search(path.read_text())
    )
    assert found == ["omni_cpu/weight_formats.py"]


def _probe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "omni_cpu.cli", "probe", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )


@pytest.mark.parametrize("weights", ["int8", "int4"])
def test_probe_of_an_arm_dump_plans_the_formats_its_neon_kernels_run(
    weights: str, unpacked_dumps: Any
) -> None:
    # The dump's CPU states asimd (and asimddp, i8mm, bf16): the NEON kernels' floor.
    dump = next(d for d in sysroots.load_dumps() if d.id == "ul-arm-A510-A710-A715-X3")
    root = str(unpacked_dumps.root(dump))
    done = _probe("--sysroot", root, "--model", "0.6b", "--weights", weights, "--json")
    assert done.returncode == 0, done.stderr
    talker = json.loads(done.stdout)["profile"]["replicas"][0]["stages"][0]
    assert talker["choices"]["weights"] == weights


@pytest.mark.parametrize("weights", ["int8", "int4"])
def test_an_aarch64_cpu_without_asimd_is_refused_the_quantized_formats(weights: str) -> None:
    without_asimd = machine({0: [0, 1]}, isa=("fp",), architecture="aarch64")
    chosen = weight_formats.get(weights)
    with pytest.raises(PlanError) as refused:
        plan_profile(without_asimd, FOOTPRINT, PlanOptions(weights=weights))
    assert str(refused.value) == (
        f"--weights {weights} needs ASIMD on aarch64 ({chosen.kernels}); "
        "this aarch64 CPU lacks them"
    )
    assert refused.value.fix == "use --weights model"
