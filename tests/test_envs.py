"""The one table of environment variables: every knob declared once, read at use."""

from __future__ import annotations

import subprocess
import sys

import pytest

from omni_cpu import envs


def test_every_knob_has_a_default_a_doc_and_a_reader() -> None:
    for name, knob in envs.KNOBS.items():
        assert knob.name == name
        assert knob.doc.strip()
        assert knob.read_by in {"cli", "stage", "serve", "setup"}
        knob.value({})  # the default parses


def test_a_knob_is_read_when_used_not_at_import(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMNI_CPU_WEIGHTS", raising=False)
    assert envs.OMNI_CPU_WEIGHTS == "model"
    monkeypatch.setenv("OMNI_CPU_WEIGHTS", " INT8 ")
    assert envs.OMNI_CPU_WEIGHTS == "int8"


def test_flags_and_counts_parse_forgivingly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMNI_CPU_VERBOSE", "yes")
    assert envs.OMNI_CPU_VERBOSE is True
    monkeypatch.setenv("OMNI_CPU_VERBOSE", "0")
    assert envs.OMNI_CPU_VERBOSE is False
    monkeypatch.setenv("OMNI_CPU_SERVE_MAX_IN_FLIGHT", "many")
    assert envs.OMNI_CPU_SERVE_MAX_IN_FLIGHT == 0
    monkeypatch.setenv("OMNI_CPU_SERVE_MAX_IN_FLIGHT", "12")
    assert envs.OMNI_CPU_SERVE_MAX_IN_FLIGHT == 12


def test_an_undeclared_variable_is_an_error() -> None:
    with pytest.raises(AttributeError):
        _ = envs.OMNI_CPU_NOT_A_KNOB


def test_the_table_prints_without_importing_torch_or_vllm() -> None:
    code = (
        "import runpy, sys; runpy.run_module('omni_cpu.envs', run_name='__main__'); "
        "assert not {'torch', 'vllm', 'transformers'} & set(sys.modules), sys.modules.keys()"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    printed = {line.split("=", 1)[0] for line in done.stdout.splitlines()}
    assert printed == set(envs.KNOBS)
