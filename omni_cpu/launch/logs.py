"""What the engine processes print: their errors, and their chatter only when asked.

A healthy `run` used to print ~80 lines of engine logs. Each source is quietened
where it starts, through the environment every stage process inherits (the stage
processes are spawned, so nothing set later in the driver reaches them), and the
engines' errors stay on: vLLM's ERROR level, Python tracebacks and C++ errors are
untouched. `--verbose` or `OMNI_CPU_VERBOSE=1` keeps all of it.
"""

from __future__ import annotations

import copy
import os
import warnings
from collections.abc import MutableMapping
from typing import Any

from omni_cpu import envs

# vLLM-Omni's Qwen3-TTS configs call a transformers helper that transformers 5
# deprecated; the call is theirs and harmless (a FutureWarning at every config load).
_DEPRECATED_ROPE_CHECK = "`rope_config_validation` is deprecated"

# Each source of noise in a healthy run and the variable that quietens it there.
QUIET_ENV: dict[str, str] = {
    # vLLM and vLLM-Omni: INFO/WARNING lines of start-up and shut-down; errors stay.
    "VLLM_LOGGING_LEVEL": "ERROR",
    # transformers' notices on vLLM-Omni's default sub-configs (e.g. "codec_eos_token_id
    # must be within the vocabulary": a default it builds, then replaces with ours).
    "TRANSFORMERS_VERBOSITY": "error",
    # vLLM's CPU worker warns, in C++, that it binds memory to the NUMA node we chose.
    "TORCH_CPP_LOG_LEVEL": "ERROR",
    # Read by every (spawned) stage interpreter at start-up.
    "PYTHONWARNINGS": f"ignore:{_DEPRECATED_ROPE_CHECK}:FutureWarning",
}

# Both ways: vLLM logs go to stderr, so stdout keeps only omni-cpu's own output (--json).
ALWAYS_ENV: dict[str, str] = {"VLLM_LOGGING_STREAM": "ext://sys.stderr"}


def verbose_requested(flag: bool = False) -> bool:
    """`--verbose`, or `OMNI_CPU_VERBOSE=1` for services and scripts that cannot pass it."""
    return flag or bool(envs.OMNI_CPU_VERBOSE)


def engine_log_env(verbose: bool) -> dict[str, str]:
    """The environment that decides what the engine processes print."""
    if verbose:
        return {**ALWAYS_ENV, "VLLM_LOGGING_LEVEL": "INFO"}
    return {**ALWAYS_ENV, **QUIET_ENV}


def apply_to_this_process(verbose: bool) -> None:
    """Set the engine log environment here (values the user set win) before vLLM imports.

    The driver reads the same variables as its children, except PYTHONWARNINGS,
    which an interpreter reads only at start-up: its filter is installed here too.
    """
    merge_log_env(os.environ, engine_log_env(verbose))
    if not verbose:
        warnings.filterwarnings("ignore", message=_DEPRECATED_ROPE_CHECK, category=FutureWarning)


# Python's resource tracker warns about every shared-memory segment it finds already
# unlinked at exit (two lines each, thousands after a long server run): the stage guard
# sweeping them, not a leak.
TRACKER_QUIET = "ignore:resource_tracker:UserWarning"


def merge_log_env(environ: MutableMapping[str, str], log_env: dict[str, str]) -> None:
    """Add `log_env` (an `engine_log_env`) to `environ`: values already there win.

    `run` merges it into its own environment (its stages inherit it); `serve` into
    the environment it starts vLLM-Omni's API server with.
    """
    for key, value in log_env.items():
        if key == "PYTHONWARNINGS":  # a list of filters: add ours to the user's
            add_warning_filter(value, environ)
        else:
            environ.setdefault(key, value)


def add_warning_filter(entry: str, environ: MutableMapping[str, str] | None = None) -> None:
    """Append one PYTHONWARNINGS filter for the interpreters spawned with `environ`."""
    env = os.environ if environ is None else environ
    present = env.get("PYTHONWARNINGS", "")
    if entry not in present.split(","):
        env["PYTHONWARNINGS"] = ",".join(filter(None, [present, entry]))


def quiet_deploy_config(deploy_config: dict[str, Any], verbose: bool) -> dict[str, Any]:
    """`deploy_config` whose stages load weights without progress bars unless `verbose`.

    vLLM draws a tqdm bar per weight file (three per talker worker); the flag is
    an engine argument, so it goes in each stage's entry.
    """
    if verbose:
        return deploy_config
    config = copy.deepcopy(deploy_config)
    for stage in config.get("stages", []):
        stage.setdefault("use_tqdm_on_load", False)
    return config
