"""Command-line options derived from the knobs that declare them (omni_cpu.envs).

A setting a command takes both as a flag and as an environment variable is declared
once, as its knob (name, default, doc, parser, flag); the option here is built from
that: the flag's name, its help (the knob's doc and its variable), and the reading,
which is the knob's own, so `--max-in-flight 12k` and `OMNI_CPU_SERVE_MAX_IN_FLIGHT=12k`
are refused in the same words.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from omni_cpu import envs

# What a value looks like in --help, by the knob's parser; free text is a folder.
_METAVARS = {envs._count: "N", envs._seconds: "SECONDS", envs._host_list: "HOSTS"}


def knob_help(knob: envs.Knob) -> str:
    """The option's help: the knob's doc, and the variable that sets the same thing."""
    return f"{knob.doc[0].upper()}{knob.doc[1:]}. Also {knob.name}."


def knob_option(knob: envs.Knob) -> Any:
    """`Annotated[...]` for the option that sets `knob`: a switch for a flag knob, else text
    the knob reads (`read_option`), None when not given (the environment's, then the default)."""
    if not knob.flag:
        raise ValueError(f"{knob.name} declares no flag")
    if knob.parse is envs._flag:
        return Annotated[bool, typer.Option(knob.flag, help=knob_help(knob))]
    metavar = _METAVARS.get(knob.parse, "DIR")
    return Annotated[str | None, typer.Option(knob.flag, help=knob_help(knob), metavar=metavar)]


def read_option(knob: envs.Knob, raw: str | bool | None) -> Any:
    """The value an option derived from `knob` gave (None: not given), read by the knob."""
    if raw is None or raw is False:
        return None
    return knob.read(knob.text(raw) if isinstance(raw, bool) else raw, knob.flag)
