"""`omni-cpu make-checkpoint`: refuses to clobber, reports what it wrote."""

from __future__ import annotations

import json

from tests.helpers.cli import exit_code


def _run(monkeypatch, *args: str) -> int:
    return exit_code(monkeypatch, "make-checkpoint", *args)


def test_non_empty_directory_is_a_one_line_error(monkeypatch, capsys, tmp_path):
    (tmp_path / "model.safetensors").write_text("not mine")
    code = _run(monkeypatch, "--size", "tiny", "--out", str(tmp_path))
    err = capsys.readouterr().err
    assert code == 2
    assert "not empty" in err and "--force" in err
    assert (tmp_path / "model.safetensors").read_text() == "not mine"


def test_unknown_size_is_a_one_line_error(monkeypatch, capsys, tmp_path):
    code = _run(monkeypatch, "--size", "7b", "--out", str(tmp_path / "x"))
    assert code == 2
    assert "unknown checkpoint size" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_json_summary_lists_files_params_and_bytes(monkeypatch, capsys, tmp_path):
    out = tmp_path / "tiny"
    code = _run(monkeypatch, "--size", "tiny", "--out", str(out), "--json")
    summary = json.loads(capsys.readouterr().out)
    assert code == 0
    assert set(summary) == {
        "size",
        "kind",
        "out",
        "files",
        "params",
        "params_by_file",
        "bytes",
        "kept",
    }
    assert summary["kept"] is False
    assert summary["size"] == "tiny" and summary["out"] == str(out)
    assert {f["path"] for f in summary["files"]} >= {"config.json", "model.safetensors"}
    assert summary["bytes"] == sum(f["bytes"] for f in summary["files"])
    assert summary["params"] == sum(summary["params_by_file"].values()) > 0


def test_the_same_checkpoint_asked_for_again_is_kept_and_said_so(monkeypatch, capsys, tmp_path):
    out = tmp_path / "tiny"
    assert _run(monkeypatch, "--size", "tiny", "--out", str(out)) == 0
    written = {path: path.stat().st_mtime_ns for path in out.rglob("*") if path.is_file()}
    capsys.readouterr()
    assert _run(monkeypatch, "--size", "tiny", "--out", str(out)) == 0
    err = capsys.readouterr().err
    assert f"{out} already holds a tiny custom-voice checkpoint: kept it" in " ".join(err.split())
    assert {path: path.stat().st_mtime_ns for path in written} == written  # nothing rewritten
    # Another kind, or a checkpoint with a file short, is not what was asked: refused.
    assert _run(monkeypatch, "--size", "tiny", "--kind", "base", "--out", str(out)) == 2
    assert "not empty" in capsys.readouterr().err
    (out / "model.safetensors").write_bytes(b"cut short")
    assert _run(monkeypatch, "--size", "tiny", "--out", str(out)) == 2
    assert "not empty" in capsys.readouterr().err


def test_force_overwrites_a_previous_checkpoint(monkeypatch, capsys, tmp_path):
    assert _run(monkeypatch, "--size", "tiny", "--out", str(tmp_path), "--json") == 0
    assert _run(monkeypatch, "--size", "tiny", "--out", str(tmp_path), "--json", "--force") == 0
    capsys.readouterr()
    assert not list(tmp_path.rglob("*.partial"))


def test_base_kind_writes_a_base_config_with_speaker_encoder(monkeypatch, capsys, tmp_path):
    from omni_cpu.checkpoint.safetensors_file import read_layout

    out = tmp_path / "base"
    code = _run(monkeypatch, "--kind", "base", "--size", "tiny", "--out", str(out), "--json")
    summary = json.loads(capsys.readouterr().out)
    assert code == 0 and summary["kind"] == "base"
    config = json.loads((out / "config.json").read_text())
    assert config["tts_model_type"] == "base"
    names = read_layout(out / "model.safetensors")
    assert any(name.startswith("speaker_encoder.") for name in names)


def test_unpublished_kind_and_size_is_a_one_line_error(monkeypatch, capsys, tmp_path):
    code = _run(
        monkeypatch, "--kind", "voice-design", "--size", "0.6b", "--out", str(tmp_path / "x")
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "not published at 0.6b" in err and "1.7b" in err
    assert not (tmp_path / "x").exists()
