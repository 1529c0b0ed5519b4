"""Every serve setting, declared once as its knob, reaches the server from its flag and from
its variable alike; a bad value is refused in the knob's words from either."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from omni_cpu import envs
from omni_cpu.plan import PlanOptions, footprint_for_model, plan_profile
from omni_cpu.profile import save_profile
from omni_cpu.serve.knobs import SETTABLE, AdmissionLimits, knob
from tests.helpers.cli import exit_code
from tests.helpers.machines import machine

# Every knob the API server reads that no flag sets is the plan's own (its files, the
# talker's context, the checkpoint): adding a serve knob means a flag or a line here.
SET_BY_THE_PLAN = {"drain_file", "down_file", "talker_max_model_len", "tokenizer"}


def _sample(declared: envs.Knob, folder: Path) -> str:
    """A value the knob takes that is neither its default nor what serve computes."""
    samples = {envs._count: "7", envs._seconds: "2.5", envs._flag: "1"}
    samples[envs._host_list] = "example.com"
    return samples.get(declared.parse, str(folder))


@pytest.fixture(scope="module")
def deploy_yaml(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Path) -> Path:
    """A one-node profile beside the tiny checkpoint (its folder is the model served)."""
    path = tiny_checkpoint / "omni-cpu-deploy.yaml"
    save_profile(
        plan_profile(machine({0: [0, 1]}), footprint_for_model("tiny"), PlanOptions()), path
    )
    return path


def _dry_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], deploy: Path, *args: str
) -> tuple[int, dict[str, Any] | str]:
    """`serve --dry-run --json ARGS` in this process: its exit code, and its plan or stderr."""
    code = exit_code(
        monkeypatch, "serve", "--model", str(deploy.parent), "--deploy-profile", str(deploy),
        "--dry-run", "--json", *args,
    )  # fmt: skip
    out = capsys.readouterr()
    return code, (json.loads(out.out) if code == 0 else out.err)


def test_every_serve_knob_is_a_flag_or_the_plans_own() -> None:
    served = {field for field in AdmissionLimits().to_env()}
    fields = {name.removeprefix(envs.SERVE_PREFIX).lower() for name in served}
    assert set(SETTABLE) | SET_BY_THE_PLAN == fields
    assert not set(SETTABLE) & SET_BY_THE_PLAN
    assert len(SETTABLE) >= 11  # the walk below is over real settings


@pytest.mark.parametrize("field", SETTABLE)
def test_a_serve_setting_reaches_the_server_alike_from_its_flag_and_its_variable(
    field: str,
    deploy_yaml: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    declared = knob(field)
    for name in envs.KNOBS:
        monkeypatch.delenv(name, raising=False)
    raw = _sample(declared, tmp_path)
    expected = declared.read(raw)
    if field == "ref_audio_dir":
        expected = str(Path(raw).resolve())
    flag_args = (declared.flag,) if declared.parse is envs._flag else (declared.flag, raw)

    code, unset = _dry_run(monkeypatch, capsys, deploy_yaml)
    assert code == 0, unset
    assert unset["limits"][field] != expected, f"pick a sample {field} does not default to"

    code, by_flag = _dry_run(monkeypatch, capsys, deploy_yaml, *flag_args)
    assert code == 0, by_flag
    monkeypatch.setenv(declared.name, raw)
    code, by_variable = _dry_run(monkeypatch, capsys, deploy_yaml)
    assert code == 0, by_variable
    for plan in (by_flag, by_variable):
        assert plan["limits"][field] == expected
        assert plan["env"][declared.name] == declared.text(expected)


@pytest.mark.parametrize(
    "field",
    [name for name in SETTABLE if knob(name).parse is not envs._flag and knob(name).allowed],
)
def test_a_bad_serve_setting_is_refused_in_the_knobs_words_from_flag_and_variable(
    field: str,
    deploy_yaml: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    declared = knob(field)
    for name in envs.KNOBS:
        monkeypatch.delenv(name, raising=False)
    code, by_flag = _dry_run(monkeypatch, capsys, deploy_yaml, declared.flag, "-1")
    assert code == 2
    assert by_flag.strip() == f"error: {declared.flag} '-1' is not allowed (use {declared.allowed})"
    monkeypatch.setenv(declared.name, "-1")
    code, by_variable = _dry_run(monkeypatch, capsys, deploy_yaml)
    assert code == 2
    assert by_variable.strip() == (
        f"error: {declared.name}='-1' is not allowed (use {declared.allowed})"
    )
