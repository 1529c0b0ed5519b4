"""`omni-cpu bench` / `tune` argument handling: one-line errors, exit 2, nothing started."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from omni_cpu.bench.sweep import check_query_type, parse_concurrency
from omni_cpu.errors import InputError
from tests.helpers.hub import cache_model, offline_env

HUB_ID = "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"  # in a hub cache of its own, offline
OMNI_CPU = str(Path(sys.executable).with_name("omni-cpu"))


@pytest.fixture(scope="module")
def offline_hub(tiny_kinds: dict[str, Path], tmp_path_factory) -> dict[str, str]:
    """HUB_ID downloaded (a tiny CustomVoice in its cache) and the hub kept out: the model
    check passes as for a real download, and nothing reaches the network."""
    cache = tmp_path_factory.mktemp("hub-cache")
    cache_model(cache, HUB_ID, tiny_kinds["custom-voice"])
    return offline_env(cache)


def _omni_cpu(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([OMNI_CPU, *args], capture_output=True, text=True, timeout=600, env=env)


def test_concurrency_list_parses_in_order_without_repeats() -> None:
    assert parse_concurrency("1, 2,4,8,4") == (1, 2, 4, 8)


@pytest.mark.parametrize("text", ["0", "1,,2", "two", "1,-4", ""])
def test_concurrency_that_is_not_positive_integers_is_refused(text: str) -> None:
    with pytest.raises(InputError):
        parse_concurrency(text)


def test_query_type_is_matched_case_insensitively() -> None:
    assert check_query_type("customvoice") == "CustomVoice"


def test_bad_concurrency_is_one_line_and_exit_2(offline_hub) -> None:
    done = _omni_cpu("bench", "--model", HUB_ID, "--concurrency", "1,x", env=offline_hub)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert "--concurrency" in done.stderr and "'x'" in done.stderr


def test_unknown_query_type_is_one_line_and_exit_2(offline_hub) -> None:
    done = _omni_cpu("bench", "--model", HUB_ID, "--query-type", "VoiceClone", env=offline_hub)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert "CustomVoice" in done.stderr


def test_too_few_frames_is_a_usage_error() -> None:
    done = _omni_cpu("bench", "--model", "x", "--frames", "1")
    assert done.returncode == 2
    assert "--frames" in done.stderr


def test_tune_dry_run_lists_the_grid_with_auto_first(offline_hub) -> None:
    done = _omni_cpu(
        "tune", "--model", HUB_ID, "--dry-run", "--max-points", "3", "--json", env=offline_hub
    )
    assert done.returncode == 0, done.stderr
    runs = json.loads(done.stdout)["runs"]
    assert len(runs) <= 3
    assert runs[0]["auto"] is True
    assert [run["auto"] for run in runs].count(True) == 1
