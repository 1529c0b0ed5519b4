"""Every command that starts engines checks `--model` first: one line, exit 2, nothing started.

The commands run in one child process (the CLI's own main(), HF_HUB_OFFLINE=1, an empty
hub cache, a fresh working directory); after all of them it reports whether the
runtime was imported or a child process started: a check that ran before any engine
leaves neither.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.cli import REPO

MODELS = ("/no/such", "checkpoints/tyni", "not-a-checkpoint")
COMMANDS = (
    ("run", "--text", "hi", "--out", "x.wav"),
    ("run", "--text", "hi", "--dry-run"),
    ("serve",),
    ("serve", "--dry-run"),
    ("bench",),
    ("tune",),
    ("tune", "--dry-run"),
    ("check-weights",),
)
CHILD = """
import contextlib, io, json, sys
import psutil
from omni_cpu.cli import main

results = []
for args in json.loads(sys.argv[1]):
    sys.argv = ["omni-cpu", *args]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            main()
            code = 0
        except SystemExit as done:
            code = done.code
    results.append({"args": args, "code": code, "stderr": err.getvalue()})
runtime = sorted(name for name in ("torch", "vllm", "vllm_omni") if name in sys.modules)
children = len(psutil.Process().children(recursive=True))
print(json.dumps({"results": results, "runtime": runtime, "children": children}))
"""


def test_a_model_that_is_not_there_is_one_line_exit_2_before_any_engine(tmp_path: Path) -> None:
    (tmp_path / "not-a-checkpoint").mkdir()
    (tmp_path / "not-a-checkpoint" / "README.md").write_text("weights go here\n")
    cases = [[command, "--model", model, *rest] for model in MODELS for command, *rest in COMMANDS]
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_CACHE": str(tmp_path / "hub-cache"),
        "COLUMNS": "80",  # a narrow terminal must not wrap the line
    }
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(cases)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    for result in report["results"]:
        model = result["args"][2]
        lines = result["stderr"].splitlines()
        assert result["code"] == 2, result
        assert len(lines) == 1 and lines[0].startswith("error: "), result
        assert model in lines[0] and "Traceback" not in result["stderr"], result
    assert report["runtime"] == [] and report["children"] == 0, report
