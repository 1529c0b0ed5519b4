"""The one table of environment variables: every knob declared once, read at use."""

from __future__ import annotations

import ast
import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from omni_cpu import envs
from omni_cpu.errors import ProfileError, SettingError
from omni_cpu.hardware.probe import read_facts
from omni_cpu.launch.plan import make_launch_plan
from omni_cpu.plan import footprint_for_model, plan_profile
from omni_cpu.profile import dump_profile, save_profile
from omni_cpu.serve.knobs import AdmissionLimits
from tests.helpers.scripts import load_script

REPO = Path(__file__).resolve().parents[1]


def test_every_knob_has_a_default_a_doc_a_reader_and_an_audience() -> None:
    for name, knob in envs.KNOBS.items():
        assert knob.name == name
        assert knob.doc.strip()
        assert knob.read_by in {"cli", "stage", "serve", "setup"}
        assert knob.audience in envs.AUDIENCES
        knob.value({})  # the default parses


def test_a_knob_without_an_audience_is_refused_where_it_is_declared() -> None:
    with pytest.raises(ValueError, match="OMNI_CPU_NEW_THING: audience"):
        envs._declare(envs.Knob("OMNI_CPU_NEW_THING", "0", "a doc", "cli"))
    assert "OMNI_CPU_NEW_THING" not in envs.KNOBS


def serve_options() -> set[str]:
    from omni_cpu.cli import app

    command = typer.main.get_command(app).commands["serve"]
    return {name for param in command.params for name in param.opts}


def test_what_only_carries_a_flag_is_not_a_users_knob_and_a_set_up_choice_is() -> None:
    # serve's flags reach its middleware as variables (--max-in-flight as
    # OMNI_CPU_SERVE_MAX_IN_FLIGHT); omni-cpu's own plumbing says "not by hand". None of
    # them is for a user to set as a variable. The set-up scripts' choices are set by hand
    # on `make setup`'s command line (the README shows them), so they are a user's.
    options = serve_options()
    for knob in envs.KNOBS.values():
        carried = knob.read_by == "serve" and knob.flag in options
        assert not knob.flag or knob.flag in options, f"{knob.name}: serve has no {knob.flag}"
        if carried or "not by hand" in knob.doc:
            assert knob.audience == "internal", knob.name
        if knob.read_by == "setup":
            assert knob.audience == "user", knob.name
    assert "--max-in-flight" in options  # the check above reads serve's real options
    users = {name for name, knob in envs.KNOBS.items() if knob.audience == "user"}
    assert {"OMNI_CPU_VERBOSE", "OMNI_CPU_STAGE_STALL_S", "OMNI_CPU_KERNEL_CACHE"} <= users


def test_a_knob_is_read_when_used_not_at_import(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMNI_CPU_WEIGHTS", raising=False)
    assert envs.OMNI_CPU_WEIGHTS == "model"
    monkeypatch.setenv("OMNI_CPU_WEIGHTS", " INT8 ")
    assert envs.OMNI_CPU_WEIGHTS == "int8"


def test_flags_and_counts_read_their_usual_words(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMNI_CPU_VERBOSE", "yes")
    assert envs.OMNI_CPU_VERBOSE is True
    monkeypatch.setenv("OMNI_CPU_VERBOSE", " Off ")
    assert envs.OMNI_CPU_VERBOSE is False
    monkeypatch.setenv("OMNI_CPU_SERVE_MAX_IN_FLIGHT", "12")
    assert envs.OMNI_CPU_SERVE_MAX_IN_FLIGHT == 12
    monkeypatch.setenv("OMNI_CPU_STAGE_STALL_S", "2.5")
    assert envs.OMNI_CPU_STAGE_STALL_S == 2.5
    monkeypatch.setenv("OMNI_CPU_STAGE_STALL_S", "0")
    assert envs.OMNI_CPU_STAGE_STALL_S == 0.0


# Typos that used to read as 0 ("off", "no limit") or as False without a word.
TYPOS = {
    envs._count: ("many", "-1", "12k", "1.5", "inf"),
    envs._seconds: ("30s", "abc", "-1", "inf", "nan", "1e400"),
    envs._flag: ("maybe", "2", "ye", "-1"),
    envs._rows_by_format: ("-1", "bf16=-4", "fp8=3", "bf16=x"),
}
# Knobs whose value is free text (a path, `off`, a label): their parsers never refuse.
FREE_TEXT = {
    knob.name
    for knob in envs.KNOBS.values()
    if knob.parse in (str, envs._path_or_off) or (knob.parse is envs._lower and not knob.choices)
}


@pytest.mark.parametrize("knob", list(envs.KNOBS.values()), ids=lambda knob: knob.name)
def test_every_knob_refuses_garbage_in_one_line_naming_it_the_value_and_its_form(
    knob: envs.Knob, monkeypatch: pytest.MonkeyPatch
) -> None:
    if knob.name in FREE_TEXT:
        assert not knob.choices and not knob.allowed, knob.name  # takes any text
        return
    assert knob.allowed, f"{knob.name} refuses values but cannot say which it takes"
    for garbage in ("-1!", *TYPOS.get(knob.parse, ())):
        monkeypatch.setenv(knob.name, garbage)
        with pytest.raises(SettingError) as refused:
            getattr(envs, knob.name)
        line = refused.value.one_line()
        assert line.startswith(f"{knob.name}={garbage!r} is not allowed (use ")
        assert knob.allowed in line and "\n" not in line


def test_the_driver_check_refuses_a_stall_time_with_a_unit() -> None:
    with pytest.raises(SettingError, match=r"OMNI_CPU_STAGE_STALL_S='30s' is not allowed"):
        envs.check({"OMNI_CPU_STAGE_STALL_S": "30s"})


def test_an_undeclared_variable_is_an_error() -> None:
    with pytest.raises(AttributeError):
        _ = envs.OMNI_CPU_NOT_A_KNOB


def printed_knobs(*args: str) -> set[str]:
    # Printing it imports no runtime either: tests/test_import_light.py.
    done = subprocess.run(
        [sys.executable, "-m", "omni_cpu.envs", *args], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return {line.split("=", 1)[0] for line in done.stdout.splitlines()}


def test_the_table_prints_the_user_knobs_and_with_all_every_knob() -> None:
    users = {name for name, knob in envs.KNOBS.items() if knob.audience == "user"}
    assert printed_knobs() == users
    assert printed_knobs("--all") == set(envs.KNOBS)


CHOICE_KNOBS = [knob for knob in envs.KNOBS.values() if knob.choices]


@pytest.mark.parametrize("knob", CHOICE_KNOBS, ids=lambda knob: knob.name)
def test_a_choice_is_read_in_any_case(knob: envs.Knob, monkeypatch: pytest.MonkeyPatch) -> None:
    for choice in knob.choices:
        monkeypatch.setenv(knob.name, f" {choice.upper()} ")
        assert getattr(envs, knob.name) == choice


@pytest.mark.parametrize("knob", CHOICE_KNOBS, ids=lambda knob: knob.name)
def test_a_value_outside_the_choices_is_refused_naming_variable_value_and_choices(
    knob: envs.Knob, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(knob.name, "bogus")
    with pytest.raises(SettingError) as refused:
        getattr(envs, knob.name)
    line = refused.value.one_line()
    assert line.startswith(f"{knob.name}='bogus' is not allowed (use one of: ")
    assert all(choice in line for choice in knob.choices) and "\n" not in line


def test_a_stage_shows_the_same_line_as_the_cli() -> None:
    # A stage process prints str(error) in its traceback; the CLI prints one_line().
    refused = envs.CODE2WAV.refusal("fast")
    assert str(refused) == refused.one_line()
    assert str(refused) == "OMNI_CPU_CODE2WAV='fast' is not allowed (use one of: stream, recompute)"


def test_an_unreadable_value_is_refused_with_the_form_it_takes() -> None:
    with pytest.raises(SettingError, match=r"OMNI_CPU_AMX_ROWS='bf16=x' is not allowed \(use auto"):
        envs.AMX_ROWS.value({"OMNI_CPU_AMX_ROWS": "bf16=x"})


def test_the_option_that_sets_a_knob_is_refused_in_the_same_words() -> None:
    assert envs.WEIGHTS.read("INT8", "--weights") == "int8"
    with pytest.raises(SettingError) as refused:
        envs.WEIGHTS.read("fp4", "--weights")
    assert str(refused.value) == "--weights 'fp4' is not allowed (use one of: model, int8, int4)"


def test_the_gemv_reads_the_usual_words_for_off_as_off() -> None:
    for word in ("off", "0", "false", "NO"):
        assert envs.GEMV.value({"OMNI_CPU_GEMV": word}) == "off"
    with pytest.raises(SettingError):
        envs.GEMV.value({"OMNI_CPU_GEMV": "on"})


def test_check_refuses_a_bad_value_and_passes_good_ones() -> None:
    envs.check({"OMNI_CPU_SERVE_MAX_IN_FLIGHT": "4", "OMNI_CPU_VERBOSE": "yes"})
    with pytest.raises(SettingError, match="OMNI_CPU_SERVE_MAX_IN_FLIGHT='many'"):
        envs.check({"OMNI_CPU_SERVE_MAX_IN_FLIGHT": "many"})
    with pytest.raises(SettingError, match="OMNI_CPU_CODE_PREDICTOR='compiled'"):
        envs.check({"OMNI_CPU_CODE_PREDICTOR": "compiled"})


def test_a_value_is_written_back_as_the_text_that_reads_as_it() -> None:
    for knob, value in (
        (envs.VERBOSE, True),
        (envs.STAGE_STALL_S, 2.5),
        (envs.SERVE_MAX_IN_FLIGHT, 12),
        (envs.WEIGHTS, "int8"),
    ):
        assert knob.value({knob.name: knob.text(value)}) == value


def test_a_launch_refuses_a_bad_value_its_stages_would_get(
    tiny_checkpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile = plan_profile(read_facts("/"), footprint_for_model("0.6b"))
    bad = dataclasses.replace(profile, env={envs.STAGE_START.name: "fastest"})
    save_profile(bad, tmp_path / "p.yaml")
    # Refused as the file loads (so `validate` finds it too), naming the field.
    with pytest.raises(ProfileError, match=r"omni_cpu\.env\.OMNI_CPU_STAGE_START 'fastest'"):
        make_launch_plan(str(tiny_checkpoint), str(tmp_path / "p.yaml"))
    # A stage's choice lives in its entry now: the profile itself is refused, naming it.
    save_profile(profile.with_choice(envs.CODE2WAV, "fast"), tmp_path / "p.yaml")
    with pytest.raises(ProfileError, match=r"omni_cpu.code2wav 'fast' is not allowed"):
        make_launch_plan(str(tiny_checkpoint), str(tmp_path / "p.yaml"))
    save_profile(profile, tmp_path / "p.yaml")
    monkeypatch.setenv(envs.GEMV.name, "fastest")  # from the shell that starts it, likewise
    with pytest.raises(SettingError, match="OMNI_CPU_GEMV='fastest'"):
        make_launch_plan(str(tiny_checkpoint), str(tmp_path / "p.yaml"))


def test_serve_refuses_a_bad_value_in_one_line_before_anything_starts(tiny_checkpoint) -> None:
    env = {**os.environ, envs.WEIGHTS.name: "int9"}
    done = subprocess.run(
        [sys.executable, "-m", "omni_cpu.cli", "serve", "--model", str(tiny_checkpoint),
         "--dry-run"],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        "error: OMNI_CPU_WEIGHTS='int9' is not allowed (use one of: model, int8, int4)"
    )


def test_every_serve_knob_is_a_field_the_api_server_gets() -> None:
    served = {knob.name for knob in envs.KNOBS.values() if knob.read_by == "serve"}
    assert set(AdmissionLimits().to_env()) == served
    assert all(name.startswith(envs.SERVE_PREFIX) for name in served)
    limits = AdmissionLimits(
        max_in_flight=7, allow_ref_audio_urls="10.0.0.0/8,example.com", request_timeout_s=1.5
    )
    assert AdmissionLimits.from_env(limits.to_env()) == limits
    assert AdmissionLimits.from_env({}) == AdmissionLimits()


def test_a_stage_variable_in_a_profile_carries_its_doc_as_the_comment() -> None:
    profile = plan_profile(read_facts("/"), footprint_for_model("0.6b"))
    profile = dataclasses.replace(profile, env={**profile.env, envs.WEIGHT_CACHE.name: "off"})
    lines = [line for line in dump_profile(profile).splitlines() if "OMNI_CPU_WEIGHT_CACHE" in line]
    assert len(lines) == 1  # omni_cpu.env: each stage's environment is derived at start
    assert all(line.endswith(f"# {envs.WEIGHT_CACHE.doc}") for line in lines)


def test_a_stage_choice_in_a_profile_carries_its_knobs_doc_as_the_comment() -> None:
    profile = plan_profile(read_facts("/"), footprint_for_model("0.6b"))
    text = dump_profile(profile.with_choice(envs.CODE2WAV, "recompute"))
    (line,) = [line for line in text.splitlines() if 'code2wav: "recompute"' in line]
    assert line.endswith(f"# {envs.CODE2WAV.doc}")


def test_the_configuration_docs_list_every_user_knob_as_the_table_declares_it() -> None:
    examples = load_script("scripts/make_example_profiles.py")
    page = examples.CONFIGURATION.read_text()
    assert page == examples.with_env_table(page), "stale: run `make profiles`"
    listed = set(re.findall(r"^\| `([A-Z_0-9]+)` \|", page, re.MULTILINE))
    users = {name for name, knob in envs.KNOBS.items() if knob.audience == "user"}
    assert listed == users


# --- Only omni_cpu/envs.py names a variable ------------------------------------------

# A whole string that is a variable's name: any OMNI_CPU_* one, and every declared one.
VARIABLE_NAME = re.compile(r"(VLLM_)?OMNI_CPU_[A-Z0-9_]+")


def named_variables(source: str) -> list[tuple[int, str]]:
    """(line, name) of each string literal in `source` that names a variable.

    Reading one (`os.environ["X"]`, `os.environ.get("X")`, `os.getenv("X")`), setting
    one or declaring one again (`X_ENV = "X"`) all need the name as a literal; prose
    that mentions it (a docstring, a message) is a longer string and is not counted.
    """
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
            continue
        if VARIABLE_NAME.fullmatch(node.value) or node.value in envs.KNOBS:
            found.append((node.lineno, node.value))
    return found


@pytest.mark.parametrize(
    "snippet",
    [
        'os.environ["OMNI_CPU_WEIGHTS"]',
        'os.environ.get("OMNI_CPU_NEW_THING", "1")',
        'os.getenv("OMNI_CPU_STEP_LOG")',
        'environ.get("VLLM_OMNI_CPU_INDUCTOR")',
        'CODE2WAV_ENV = "OMNI_CPU_CODE2WAV"',
        'env = {"VLLM_TARGET_DEVICE": "cpu"}',
    ],
)
def test_the_check_finds_a_variable_read_or_named_in_code(snippet: str) -> None:
    assert named_variables(snippet)


def test_the_check_passes_prose_and_names_taken_from_a_knob() -> None:
    source = (
        '"""Set OMNI_CPU_WEIGHTS=int8 to quantize."""\n'
        'os.environ.get(envs.WEIGHTS.name)\nmessage = f"{envs.GEMV.name}=off"\n'
    )
    assert named_variables(source) == []


def test_no_module_but_envs_reads_or_names_a_variable() -> None:
    package = REPO / "omni_cpu"
    found = [
        f"{path.relative_to(REPO)}:{line}: {name}"
        for path in sorted(package.rglob("*.py"))
        if path != package / "envs.py"
        for line, name in named_variables(path.read_text())
    ]
    assert found == [], "take the name from its knob in omni_cpu/envs.py"
