"""`omni-cpu probe`: read the machine, plan a deploy profile, show or write it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from omni_cpu.cli.common import WEIGHTS_HELP, console, err_console, print_json
from omni_cpu.cli.render import capacity_table, facts_table, formats_table, profile_table

PROBE_HELP = """Read this machine (or a sysfs/procfs dump of one) and plan a deploy profile.

The profile gives each pipeline stage its cores (VLLM_CPU_OMP_THREADS_BIND), KV cache
bytes, batch limits, dtype and streaming chunk sizes: one pipeline replica per NUMA node.
It ends with the plan's predicted capacity: streams in real time, one stream's RTF and
first audio and what stops more streams; then what each weight format this CPU runs
would give, and a hint where another plays better; then what the prediction assumes.
Where the chosen format cannot keep real time here and another can, the first line
after the plan says so, with both figures and the --weights to pass.

Examples:

  omni-cpu probe                              # show facts and plan as tables

  omni-cpu probe --output deploy.yaml        # the profile, to check in

  omni-cpu probe --sysroot /tmp/dump --json  # another machine's dump

  omni-cpu probe --sysroot /tmp/dump --weights int8   # its capacity, int8

  omni-cpu probe --model 1.7b --max-seqs 4   # another size, smaller batches

  omni-cpu probe --calibrate --output deploy.yaml   # measure first (<= 20 s)

Exit codes: 0 planned; 5 the machine cannot run the model: too little memory (the
facts still print, and one line says what it needs and what would fit) or a CPU
the runtime cannot serve (x86 without AVX2, armv7, ...; the plan still prints,
--force exits 0 and writes it); 6 the machine (or dump) cannot be read; 2 a usage
mistake.
"""


# `probe`'s options (typer's Annotated style): the signature is one line each.
Sysroot = Annotated[
    Path,
    typer.Option(
        "--sysroot", help="Read this folder's proc/ and sys/ instead of the live machine."
    ),
]
Output = Annotated[
    Path | None,
    typer.Option("--output", "-o", help="Write the deploy profile (YAML) to this file."),
]
AsJson = Annotated[
    bool,
    typer.Option(
        "--json",
        help='Print {"facts": ..., "profile": ..., "formats": [...], "formats_hint": ...} as JSON.',
    ),
]
Model = Annotated[
    str,
    typer.Option(
        "--model", help="Size the plan for: 0.6b, 1.7b, tiny, a checkpoint dir or hub id."
    ),
]
Stages = Annotated[
    int | None,
    typer.Option(
        "--stages",
        help="2: talker and code2wav on their own cores; 1: they share all cores "
        "(default: whichever the cost model finds faster).",
    ),
]
Reserve = Annotated[
    int | None,
    typer.Option(
        "--reserve", min=0, help="Cores per replica kept for the API server (default: by size)."
    ),
]
MaxSeqs = Annotated[
    int | None,
    typer.Option(
        "--max-seqs", min=1, help="Concurrent streams per replica (default: from cores and memory)."
    ),
]
Dtype = Annotated[
    str | None,
    typer.Option("--dtype", help="bfloat16 or float32 (default: bfloat16 where the CPU has bf16)."),
]
Code2wavDtype = Annotated[
    str | None,
    typer.Option("--code2wav-dtype", help="code2wav's own dtype (default: bfloat16 where native)."),
]
Weights = Annotated[str, typer.Option("--weights", help=WEIGHTS_HELP)]
Force = Annotated[
    bool,
    typer.Option(
        "--force",
        help="Plan (and write) a machine the runtime cannot serve, exiting 0: a capacity "
        "study of a dump, not a profile to run.",
    ),
]
Calibrate = Annotated[
    bool,
    typer.Option(
        "--calibrate",
        help="Measure weight-streaming bandwidth per core count, each linear kernel at 1-32 "
        "rows, the talker step's small-op time and code2wav's cost per frame and per call "
        "here first (<= 20 s, needs the runtime); the plan, its kernel choice and its "
        "predicted capacity use them, and the profile keeps them.",
    ),
]


def probe(
    sysroot: Sysroot = Path("/"),
    output: Output = None,
    as_json: AsJson = False,
    model: Model = "0.6b",
    stages: Stages = None,
    reserve: Reserve = None,
    max_seqs: MaxSeqs = None,
    dtype: Dtype = None,
    code2wav_dtype: Code2wavDtype = None,
    weights: Weights = "model",
    force: Force = False,
    calibrate: Calibrate = False,
) -> None:
    from omni_cpu.hardware.probe import read_facts
    from omni_cpu.output import check_output_path, write_text_output
    from omni_cpu.plan.machine import compare_formats_for_facts
    from omni_cpu.profile import dump_profile

    if output is not None:
        check_output_path(output, option="--output")
    facts = read_facts(sysroot)
    calibration = _calibrate(facts, dtype, quiet=as_json) if calibrate else None
    options = {
        "stages": stages,
        "reserve": reserve,
        "max_seqs": max_seqs,
        "dtype": dtype,
        "code2wav_dtype": code2wav_dtype,
        "weights": weights,
        "calibration": calibration,
    }
    profile = _plan(facts, model, options, as_json, force)
    formats = compare_formats_for_facts(facts, model, **options)
    if output is not None:
        write_text_output(output, dump_profile(profile))
    if as_json:
        _print_probe_json(facts, profile, formats)
        return
    _print_probe(facts, profile, formats, output)


def _plan(facts, model: str, options: dict, as_json: bool, force: bool):
    """The profile for `facts`; a plan that fails, or a machine the runtime cannot serve
    (without --force), is refused after the facts (and the plan) that say why are shown."""
    from omni_cpu.plan import PlanError
    from omni_cpu.plan.machine import plan_for_facts
    from omni_cpu.plan.support import unsupported_machine

    try:
        profile = plan_for_facts(facts, model, **options)
    except PlanError as error:
        # The facts are still worth showing: they say why the plan failed.
        if as_json:
            print_json({"facts": facts.to_dict(), "profile": None, "error": error.one_line()})
        else:
            console.print(facts_table(facts))
        raise
    unsupported = unsupported_machine(
        facts, "plan the machine that will run it; --force plans this one anyway"
    )
    if unsupported is None or force:
        return profile
    if as_json:
        print_json(
            {
                "facts": facts.to_dict(),
                "profile": profile.to_dict(),
                "error": unsupported.one_line(),
            }
        )
    else:
        console.print(facts_table(facts))
        console.print(profile_table(profile))
        for note in profile.notes:
            console.print(f"[yellow]note:[/] {note}")
    raise unsupported


def _print_probe_json(facts, profile, formats) -> None:
    from omni_cpu.plan.formats import format_headline, format_hint

    print_json(
        {
            "facts": facts.to_dict(),
            "profile": profile.to_dict(),
            "formats": [row.to_dict() for row in formats],
            "formats_hint": format_hint(formats),
            "formats_headline": format_headline(formats),
        }
    )


def _print_probe(facts, profile, formats, output: Path | None) -> None:
    """The facts, the plan, its headline first where it matters, then the detail."""
    from omni_cpu.plan.formats import format_headline

    console.print(facts_table(facts))
    console.print(profile_table(profile))
    if (headline := format_headline(formats)) is not None:
        # What matters first: the plan's own format cannot keep real time, another can.
        console.print(f"[bold yellow]{headline}[/]", highlight=False)
    print_capacity(profile)
    print_formats(formats, facts.architecture)
    print_assumptions(profile)
    for note in profile.notes:
        console.print(f"[yellow]note:[/] {note}")
    if output is not None:
        err_console.print(f"wrote {output}")
    else:
        console.print("[dim]write it with --output FILE; check it later with omni-cpu validate[/]")


def print_capacity(profile) -> None:
    """The predicted capacity and why each replica stops where it does."""
    from omni_cpu.cpulist import format_cpu_list

    table = capacity_table(profile)
    if table is None:
        return
    console.print(table)
    limits: dict[str, list[int]] = {}
    for replica in profile.replicas:
        if replica.capacity is not None:
            limits.setdefault(replica.capacity.limit, []).append(replica.index)
    for limit, indexes in limits.items():
        which = "replica" + ("s" if len(indexes) > 1 else "")
        console.print(f"[dim]{which} {format_cpu_list(indexes)} limit:[/] {limit}", highlight=False)


def print_assumptions(profile) -> None:
    """What the prediction assumes: after the figures and the hint, for who reads on."""
    if profile.capacity is None:
        return
    for line in profile.capacity.assumptions:
        console.print(f"[dim]assumes:[/] {line}", highlight=False)


def print_formats(formats, architecture: str | None = None) -> None:
    """Each weight format's predicted capacity here, and the hint where another plays better."""
    from omni_cpu.plan.formats import format_hint

    if len(formats) > 1:
        console.print(formats_table(formats, architecture))
    hint = format_hint(formats)
    if hint is not None:
        console.print(f"[yellow]hint:[/] {hint}", highlight=False)


def _calibrate(facts, dtype: str | None, quiet: bool):
    """Run the measurements on the live machine (torch imported only here)."""
    from omni_cpu.errors import InputError, RuntimeMissingError
    from omni_cpu.plan import choose_dtype
    from omni_cpu.plan.topology import nodes_with_cores

    if facts.source != "live":
        raise InputError("--calibrate measures this machine", "drop --sysroot to calibrate")
    try:
        from omni_cpu.bench.calibrate import calibrate
    except ImportError as missing:  # pragma: no cover - the light install
        raise RuntimeMissingError(f"--calibrate needs torch ({missing})", "make setup") from None
    cores = sum(len(home.cores) for home in nodes_with_cores(facts))

    def progress(message: str) -> None:
        if not quiet:
            err_console.print(f"[dim]calibrate:[/] {message}", highlight=False)

    try:
        measured = calibrate(cores, dtype or choose_dtype(facts), progress=progress)
    except ImportError as missing:
        raise RuntimeMissingError(f"--calibrate needs torch ({missing})", "make setup") from None
    if not (measured.bandwidth_gb_s or measured.code2wav_ms_per_frame or measured.small_op_us):
        err_console.print(
            "[yellow]calibrate:[/] nothing measured within 18 s (a busy machine?): "
            "planning with the stated constants"
        )
        return None
    return measured


def register(app: typer.Typer) -> None:
    app.command(help=PROBE_HELP)(probe)
