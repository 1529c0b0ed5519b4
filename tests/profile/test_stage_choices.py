"""Each stage's entry says what it runs with; old profiles keep their meaning; env overrides win."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from omni_cpu import envs
from omni_cpu.errors import ProfileError
from omni_cpu.plan import PlanOptions, footprint_for_model, plan_profile
from omni_cpu.profile import choices, deploy_config_dict, dump_profile, load_profile, parse_profile
from tests.helpers.machines import machine

HERE = Path(__file__).parent
PROFILE = plan_profile(
    machine({0: [0, 1, 2, 3]}), footprint_for_model("0.6b"), PlanOptions(weights="int8")
)
TEXT = dump_profile(PROFILE)


@pytest.fixture
def no_installed_entry() -> Iterator[None]:
    choices.install(None)
    yield
    choices.install(None)


def test_a_planned_profile_says_every_choice_in_the_stage_that_reads_it() -> None:
    talker, code2wav = deploy_config_dict(PROFILE)["stages"]
    assert talker["additional_config"] == {
        "omni_cpu": {
            "weights": "int8",
            "code_predictor": "fused",
            "gemv": "auto",
            "amx_rows": "auto",
        }
    }
    assert code2wav["additional_config"] == {"omni_cpu": {"code2wav": "stream"}}
    assert not set(PROFILE.env) & set(choices.STAGE_OF)  # no second home in the env


def test_a_schema_2_profile_with_the_weights_in_its_env_still_means_them() -> None:
    profile = load_profile(HERE / "v2-zen5-kvm-2core-int4.yaml")
    assert profile.choice(envs.WEIGHTS) == "int4"
    assert envs.WEIGHTS.name not in profile.env
    talker = deploy_config_dict(profile)["stages"][0]
    assert talker["additional_config"]["omni_cpu"]["weights"] == "int4"
    assert parse_profile(dump_profile(profile)) == profile  # and writes itself in the new form


def test_a_schema_1_profile_loads_with_every_stage_at_its_defaults() -> None:
    profile = load_profile(HERE / "v1-epyc-7451-2s-8node.yaml")
    for replica in profile.replicas:
        assert [stage.choices for stage in replica.stages] == [
            choices.defaults(0),
            choices.defaults(1),
        ]


def test_a_choice_in_both_the_env_and_the_entry_must_agree() -> None:
    both = TEXT.replace(
        "  env:                                      # environment of every stage process\n",
        "  env:                                      # environment of every stage process\n"
        '    OMNI_CPU_WEIGHTS: "int4"\n',
    )
    assert both != TEXT
    with pytest.raises(ProfileError, match=r"omni_cpu.env.OMNI_CPU_WEIGHTS is 'int4' but "):
        parse_profile(both)


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ('weights: "int8"', 'weights: "int3"', r"stages\[0\].additional_config.omni_cpu.weights"),
        ('weights: "int8"', 'weight: "int8"', r"unknown key stages\[0\].additional_config"),
        ('code2wav: "stream"', 'gemv: "off"', r"unknown key stages\[1\].additional_config"),
        ('amx_rows: "auto"', 'amx_rows: "bf16=x"', r"omni_cpu.amx_rows 'bf16=x' is not allowed"),
    ],
)
def test_a_bad_choice_is_one_line_naming_its_key(old: str, new: str, key: str) -> None:
    before, found, after = TEXT.rpartition(old)  # the stage entry's: the deploy config is last
    assert found
    with pytest.raises(ProfileError, match=key):
        parse_profile(before + new + after)


def test_the_installed_entry_is_the_stages_choice(
    no_installed_entry: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(envs.WEIGHTS.name, raising=False)
    assert choices.value(envs.WEIGHTS) == "model"  # outside a stage: the default
    talker = deploy_config_dict(PROFILE)["stages"][0]
    choices.install(talker["additional_config"])
    assert choices.value(envs.WEIGHTS) == "int8"
    assert choices.value(envs.AMX_ROWS) is None  # "auto", as the knob reads it


def test_the_environment_variable_overrides_the_entry(
    no_installed_entry: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    choices.install({"omni_cpu": {"weights": "int8"}})
    monkeypatch.setenv(envs.WEIGHTS.name, "int4")
    assert choices.value(envs.WEIGHTS) == "int4"
    (line,) = choices.overrides(PROFILE.stages[0].choices, 0, {envs.WEIGHTS.name: "int4"})
    assert line.startswith("OMNI_CPU_WEIGHTS=int4 in the environment overrides the profile's")
    assert choices.overrides(PROFILE.stages[0].choices, 0, {envs.WEIGHTS.name: "int8"}) == []
