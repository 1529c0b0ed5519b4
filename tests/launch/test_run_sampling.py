"""`run`'s sampling options: the profile keeps the defaults, an option overrides its own part.

Read from `run --dry-run --json` on the tiny checkpoint: the talker stage's engine arguments.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.cli import omni_cpu


def talker_args(checkpoint: Path, *options: str) -> dict[str, Any]:
    import json

    result = omni_cpu(
        "run", "--model", str(checkpoint), "--text", "Hi.", "--dry-run", "--json", *options
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["stages"][0]["engine_args"]


def test_without_options_the_profiles_sampling_stands(tiny_checkpoint: Path) -> None:
    args = talker_args(tiny_checkpoint)
    assert args["default_sampling_params"]["temperature"] == 0.9
    assert args["default_sampling_params"]["top_k"] == 50
    assert "seed" not in args["default_sampling_params"]
    assert args["subtalker_sampling_params"]["do_sample"] is True


def test_greedy_takes_the_argmax_in_the_talker_and_the_code_predictor(
    tiny_checkpoint: Path,
) -> None:
    args = talker_args(tiny_checkpoint, "--greedy")
    assert args["default_sampling_params"]["temperature"] == 0.0
    assert args["subtalker_sampling_params"]["do_sample"] is False
    assert args["default_sampling_params"]["repetition_penalty"] == 1.05  # the profile's


def test_a_seed_seeds_the_talker_and_the_code_predictor(tiny_checkpoint: Path) -> None:
    talker = talker_args(tiny_checkpoint, "--seed", "7")["default_sampling_params"]
    assert talker["seed"] == 7
    assert talker["extra_args"] == {"tts_local_seed": 7}
    assert talker["temperature"] == 0.9


def test_sampling_values_reach_both_samplers(tiny_checkpoint: Path) -> None:
    options = ("--temperature", "0.7", "--top-k", "20", "--top-p", "0.8")
    args = talker_args(tiny_checkpoint, *options, "--repetition-penalty", "1.0")
    talker, predictor = args["default_sampling_params"], args["subtalker_sampling_params"]
    assert (talker["temperature"], talker["top_k"], talker["top_p"]) == (0.7, 20, 0.8)
    assert talker["repetition_penalty"] == 1.0
    assert predictor == {"do_sample": True, "temperature": 0.7, "top_k": 20, "top_p": 0.8}


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--temperature", "-1"),
        ("--top-k", "-2"),
        ("--temperature", "2.5"),
        ("--top-p", "1.5"),
        ("--repetition-penalty", "0"),
        ("--seed", "-3"),
    ],
)
def test_an_out_of_range_value_is_one_line_naming_the_option(
    tiny_checkpoint: Path, option: str, value: str
) -> None:
    result = omni_cpu("run", "--model", str(tiny_checkpoint), "--text", "Hi.", "--dry-run",
                      option, value)  # fmt: skip
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2
    assert len(lines) == 1 and f"{option} {value}" in lines[0]
