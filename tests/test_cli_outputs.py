"""Bad output paths and plan numbers: one line at the door, no traceback, nothing half-written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from omni_cpu.errors import OutputError
from omni_cpu.output import check_output_path, write_text_output
from tests.helpers.cli import omni_cpu

REPO = Path(__file__).resolve().parent.parent
PROFILE = REPO / "profiles" / "zen5-kvm-2core.yaml"


def one_line_error(done) -> str:
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.mark.parametrize(
    "command",
    [
        ("probe", "--output"),
        ("probe", "-o"),
        ("export", "k8s", "--profile", str(PROFILE), "--output"),
        ("tune", "--model", "tiny", "--dry-run", "--output"),
        ("tune", "--model", "tiny", "--dry-run", "--table"),
    ],
    ids=lambda c: " ".join(a for a in c if "/" not in a),
)
@pytest.mark.parametrize("where", ["directory", "proc", "file-as-folder"])
def test_an_unwritable_output_is_one_line(tmp_path, command, where):
    target = {
        "directory": str(tmp_path),
        "proc": "/proc/omni-cpu-test.yaml",
        "file-as-folder": str(PROFILE / "inside.yaml"),
    }[where]
    done = omni_cpu(*command, target)
    line = one_line_error(done)
    assert done.returncode == 2
    assert line.startswith("error:") and target in line and "(" in line
    assert os.listdir(tmp_path) == []


def test_a_missing_folder_is_made_as_mkdir_p_and_the_profile_written_whole(tmp_path):
    target = tmp_path / "new" / "deploy.yaml"
    done = omni_cpu("probe", "--output", str(target))
    assert done.returncode == 0, done.stderr
    assert target.read_text().startswith("# omni-cpu deploy profile")
    assert os.listdir(target.parent) == ["deploy.yaml"]


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    target = tmp_path / "deploy.yaml"
    target.write_text("old\n")

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OutputError, match="No space left") as raised:
        write_text_output(target, "new\n")
    assert "free space" in raised.value.one_line()
    assert target.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["deploy.yaml"]


def test_a_written_file_replaces_the_old_one_with_the_usual_mode(tmp_path):
    target = tmp_path / "deploy.yaml"
    target.write_text("old\n")
    write_text_output(target, "new\n")
    assert target.read_text() == "new\n"
    assert target.stat().st_mode & 0o777 == 0o666 & ~_umask()
    assert os.listdir(tmp_path) == ["deploy.yaml"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_read_only_folder_is_refused_before_any_work(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes in read-only folders")
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o555)
    with pytest.raises(OutputError, match="cannot write in"):
        check_output_path(folder / "deploy.yaml", option="--output")


@pytest.mark.parametrize(
    ("option", "value"), [("--max-seqs", "0"), ("--max-seqs", "-3"), ("--reserve", "-1")]
)
def test_probe_refuses_impossible_plan_numbers_at_the_door(option, value):
    done = omni_cpu("probe", option, value)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if "Invalid value" in line]
    assert len(errors) == 1 and option in errors[0], done.stderr


@pytest.mark.parametrize("where", ["proc", "file", "under-a-file"])
def test_make_checkpoint_refuses_an_unwritable_out_in_one_line(tmp_path, where):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("keep\n")
    target = {"proc": "/proc/omni-cpu-ckpt", "file": str(a_file), "under-a-file": f"{a_file}/x"}[
        where
    ]
    done = omni_cpu("make-checkpoint", "--size", "tiny", "--out", target)
    line = one_line_error(done)
    assert done.returncode == 2 and line.startswith("error: --out") and target in line
    assert a_file.read_text() == "keep\n" and os.listdir(tmp_path) == ["notes.txt"]
