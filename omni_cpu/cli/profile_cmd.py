"""`omni-cpu validate` and `omni-cpu diff`: review checked-in profiles."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from omni_cpu.cli.common import console, err_console, print_json

VALIDATE_HELP = """Check a deploy profile against this machine (or a dump of one).

Binds the profile's shape (cores per stage, home node) onto the CPUs and memory
nodes this process may use, as run and serve will, and prints how ("replica 0
talker: planned 0-2 -> here 4-6"). Then checks what start-up would: no two stages
share a CPU (a note, not a problem, names a library to preload that this runtime
lacks: the stages start without it); a stage stays on one
NUMA node; memory fits; the dtype and the weight format's instructions are
supported; with --model, that the profile was planned for that kind of model
(custom-voice, voice-design, base) and its memory. One line per problem; exit 1
if any, 5 (one line) when the shape does not fit at all or the runtime cannot serve
the machine (as probe judges it).

Examples:

  omni-cpu validate deploy.yaml

  omni-cpu validate deploy.yaml --model checkpoints/1.7b-base

  omni-cpu validate deploy.yaml --sysroot /tmp/dump-of-prod-box
"""

DIFF_HELP = """Show what changed between two deploy profiles, key by key.

Exit 0 when they are the same, 1 when they differ (like diff(1)).

Example:

  omni-cpu diff profiles/old.yaml deploy.yaml
"""


# `validate`'s options (typer's Annotated style): the signature is one line each.
ProfilePath = Annotated[Path, typer.Argument(metavar="FILE", help="The profile to check.")]
Sysroot = Annotated[
    Path, typer.Option("--sysroot", help="Check against this dump instead of the live machine.")
]
Model = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="Check against this model (checkpoint directory or hub id) instead of the "
        "profile's own: its memory and its kind.",
    ),
]
AsJson = Annotated[
    bool, typer.Option("--json", help='Print {"ok": ..., "problems": [...], "binding": [...]}.')
]


def validate(
    profile_path: ProfilePath,
    sysroot: Sysroot = Path("/"),
    model: Model = None,
    as_json: AsJson = False,
) -> None:
    from omni_cpu.errors import ModelError, ShapeMismatchError
    from omni_cpu.hardware.probe import read_facts
    from omni_cpu.plan.bind import bind_profile
    from omni_cpu.plan.fit import check_problems, failing_and_said, kernel_notes
    from omni_cpu.plan.footprint import footprint_for_model
    from omni_cpu.plan.support import unsupported_machine
    from omni_cpu.profile import load_profile
    from omni_cpu.profile.reader import key_lines_of, where

    profile = load_profile(profile_path)
    facts = read_facts(sysroot)
    # Judged as probe judges it (plan.support): nothing fits where the runtime cannot run.
    unsupported = unsupported_machine(facts, "validate against a machine the runtime serves")
    if unsupported is not None:
        if as_json:
            print_json({"ok": False, "problems": [unsupported.one_line()], "binding": None})
        raise unsupported
    if model is not None:
        footprint = footprint_for_model(model)  # a model named by the user must be readable
    else:
        try:
            footprint = footprint_for_model(profile.model)
        except ModelError:
            footprint = None  # weights unknown: check the KV bytes alone
    binding = bind_profile(profile, facts)
    if binding.misfit:
        if as_json:
            print_json({"ok": False, "problems": [binding.misfit], "binding": None})
        raise ShapeMismatchError(
            f"{profile_path}: {binding.misfit}",
            "give the process that many cores on one node (cgroup cpuset, taskset), or plan "
            "this machine: omni-cpu probe --output FILE",
        )
    problems, notes = failing_and_said(check_problems(binding.profile, facts, footprint))
    same_machine = profile.machine.fingerprint == _fingerprint(facts)
    notes += kernel_notes(profile, facts)
    if profile.preload and facts.source != "live":
        notes.append(
            f"omni_cpu.preload ({', '.join(profile.preload)}) is checked where it runs, "
            "not against a dump"
        )
    if as_json:
        print_json(
            {
                "ok": not problems,
                "problems": problems,
                "same_machine": same_machine,
                "notes": notes,
                "relocated": binding.relocated,
                "binding": [{**move.__dict__, "line": move.line()} for move in binding.moves],
            }
        )
    else:
        for line in binding.lines():
            console.print(line, highlight=False)
        lines = key_lines_of(profile_path) if problems else {}
        for problem in problems:
            at = where(problem, str(profile_path), lines)
            err_console.print(f"[red]problem:[/] {at}: {problem}", highlight=False)
        for note in notes:
            err_console.print(f"[yellow]note:[/] {note}", highlight=False)
        if not problems:
            note = "" if same_machine else " (planned on another machine or before a change)"
            moved = ", bound onto other CPUs" if binding.relocated else ""
            console.print(f"[green]ok[/]: {profile_path} fits this machine{moved}{note}")
    if problems:
        raise typer.Exit(1)


def _fingerprint(facts: object) -> str:
    from omni_cpu.plan.policy import machine_stamp

    return machine_stamp(facts).fingerprint  # type: ignore[arg-type]


def diff(
    before: Path = typer.Argument(..., metavar="A", help="The old profile."),
    after: Path = typer.Argument(..., metavar="B", help="The new profile."),
    as_json: bool = typer.Option(False, "--json", help="Print the changes as a JSON list."),
) -> None:
    from omni_cpu.profile import load_profile
    from omni_cpu.profile.diff import diff_profiles

    changes = diff_profiles(load_profile(before), load_profile(after))
    if as_json:
        print_json([change.__dict__ for change in changes])
    elif not changes:
        console.print("no differences")
    for change in changes if not as_json else ():
        if change.kind == "added":
            console.print(f"[green]+ {change.key}: {change.after!r}[/]", highlight=False)
        elif change.kind == "removed":
            console.print(f"[red]- {change.key}: {change.before!r}[/]", highlight=False)
        else:
            console.print(
                f"[yellow]~ {change.key}: {change.before!r} -> {change.after!r}[/]",
                highlight=False,
            )
    if changes:
        raise typer.Exit(1)


UPGRADE_HELP = """Rewrite a deploy profile in the current schema, keeping every reviewed value.

Profiles written by an older omni-cpu (schema 1-4) load as they are; this writes
one in today's form: each stage's CPUs once (the OpenMP/vLLM variables, its node
and its memory nodes derived from them at start, so a move is one edit), the
libraries to preload by name instead of a path of the planning machine. Written
in place (or to --output) through a temporary file; exit 0.

Examples:

  omni-cpu profile upgrade deploy.yaml

  omni-cpu profile upgrade old.yaml --output deploy.yaml
"""

profile_app = typer.Typer(help="Work on deploy profile files.", no_args_is_help=True)


@profile_app.command("upgrade", help=UPGRADE_HELP)
def upgrade(
    profile_path: Path = typer.Argument(..., metavar="FILE", help="The profile to upgrade."),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write here instead of over FILE."
    ),
    as_json: bool = typer.Option(False, "--json", help='Print {"file", "from", "to"}.'),
) -> None:
    from omni_cpu.output import check_output_path
    from omni_cpu.profile import load_profile, save_profile
    from omni_cpu.profile.model import PROFILE_SCHEMA_VERSION

    written = check_output_path(output or profile_path, option="--output")
    profile = load_profile(profile_path)
    save_profile(profile, written)
    if as_json:
        print_json(
            {"file": str(written), "from": profile.schema_version, "to": PROFILE_SCHEMA_VERSION}
        )
    else:
        console.print(
            f"{written}: schema {profile.schema_version} → {PROFILE_SCHEMA_VERSION}",
            highlight=False,
        )


def register(app: typer.Typer) -> None:
    app.command(help=VALIDATE_HELP)(validate)
    app.command(help=DIFF_HELP)(diff)
    app.add_typer(profile_app, name="profile")
