"""`omni-cpu probe`: read the machine, plan a deploy profile, show or write it."""

from __future__ import annotations

from pathlib import Path

import typer

from omni_cpu.cli.common import WEIGHTS_HELP, console, err_console, print_json
from omni_cpu.cli.render import facts_table, profile_table

PROBE_HELP = """Read this machine (or a sysfs/procfs dump of one) and plan a deploy profile.

The profile gives each pipeline stage its cores (VLLM_CPU_OMP_THREADS_BIND), KV cache
bytes, batch limits, dtype and streaming chunk sizes: one pipeline replica per NUMA node.

Examples:

  omni-cpu probe                              # show facts and plan as tables

  omni-cpu probe --output deploy.yaml         # write the profile to check into a repo

  omni-cpu probe --sysroot /tmp/dump --json   # plan for another machine's dump

  omni-cpu probe --model 1.7b --max-seqs 4    # another model size, smaller batches
"""


def probe(
    sysroot: Path = typer.Option(
        Path("/"),
        "--sysroot",
        help="Read this folder's proc/ and sys/ instead of the live machine.",
    ),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write the deploy profile (YAML) to this file."
    ),
    as_json: bool = typer.Option(
        False, "--json", help='Print {"facts": ..., "profile": ...} as JSON.'
    ),
    model: str = typer.Option(
        "0.6b", "--model", help="Size the plan for: 0.6b, 1.7b, tiny, a checkpoint dir or hub id."
    ),
    stages: int = typer.Option(
        2, "--stages", help="2: talker and code2wav on their own cores; 1: they share all cores."
    ),
    reserve: int | None = typer.Option(
        None, "--reserve", help="Cores per replica kept for the API server (default: by size)."
    ),
    max_seqs: int | None = typer.Option(
        None, "--max-seqs", help="Concurrent streams per replica (default: from cores and memory)."
    ),
    dtype: str | None = typer.Option(
        None, "--dtype", help="bfloat16 or float32 (default: bfloat16 where the CPU has bf16)."
    ),
    weights: str = typer.Option("model", "--weights", help=WEIGHTS_HELP),
) -> None:
    from omni_cpu.hardware.probe import read_facts
    from omni_cpu.plan import PlanError
    from omni_cpu.plan.machine import plan_for_facts
    from omni_cpu.profile import save_profile

    facts = read_facts(sysroot)
    try:
        profile = plan_for_facts(
            facts,
            model,
            sysroot,
            stages=stages,
            reserve=reserve,
            max_seqs=max_seqs,
            dtype=dtype,
            weights=weights,
        )
    except PlanError as error:
        # The facts are still worth showing: they say why the plan failed.
        if as_json:
            print_json({"facts": facts.to_dict(), "profile": None, "error": error.one_line()})
        else:
            console.print(facts_table(facts))
        raise
    if output is not None:
        save_profile(profile, output)
    if as_json:
        print_json({"facts": facts.to_dict(), "profile": profile.to_dict()})
        return
    console.print(facts_table(facts))
    console.print(profile_table(profile))
    for note in profile.notes:
        console.print(f"[yellow]note:[/] {note}")
    if output is not None:
        err_console.print(f"wrote {output}")
    else:
        console.print("[dim]write it with --output FILE; check it later with omni-cpu validate[/]")


def register(app: typer.Typer) -> None:
    app.command(help=PROBE_HELP)(probe)
