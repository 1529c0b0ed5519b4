"""Where `--model` is: a checkpoint folder, or a hub id in the cache or on the hub.

The one reader of a model's config files. `checkpoint_folder` reads only the disk
(the plan and the request checks use it); `check_model` is the check every command
that starts engines makes first, so a model that is not there is one line naming
the fix, never an engine start that retries the hub and ends in a traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omni_cpu.checkpoint.layout import MODEL_FILE, SPEECH_TOKENIZER_FILE
from omni_cpu.errors import ModelError

CONFIG_FILE = "config.json"
SPEECH_TOKENIZER_CONFIG = "speech_tokenizer/config.json"
# A weights file or a sharded checkpoint's index: one of each must be there to load.
WEIGHT_FILES = tuple((name, f"{name}.index.json") for name in (MODEL_FILE, SPEECH_TOKENIZER_FILE))
MODEL_TYPE = "qwen3_tts"
HUB_LOOKUP_TIMEOUT_S = 10.0  # the whole look-up, DNS included: well inside 15 s
EXAMPLE_HUB_ID = "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"
MAKE_ONE = "omni-cpu make-checkpoint --size tiny --out DIR writes one"


@dataclass(frozen=True)
class ModelSource:
    """A checked `--model`: where its files are now, and the hub id the engines fetch."""

    spec: str
    folder: Path | None  # a local folder or the hub cache's snapshot; None: not downloaded yet
    hub_id: str | None  # None for a local folder


def looks_like_hub_id(spec: str) -> bool:
    """`owner/name`, not an absolute, home or dot path: how the hub's ids read."""
    return (
        not spec.startswith(("/", ".", "~")) and spec.count("/") == 1 and "" not in spec.split("/")
    )


def read_configs(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """config.json and speech_tokenizer/config.json of a Qwen3-TTS checkpoint folder."""
    configs = []
    for name in (CONFIG_FILE, SPEECH_TOKENIZER_CONFIG):
        path = folder / name
        try:
            configs.append(json.loads(path.read_text()))
        except FileNotFoundError:
            raise ModelError(
                f"{folder} is not a Qwen3-TTS checkpoint: no {name}",
                f"point --model at the folder holding {CONFIG_FILE} and speech_tokenizer/; "
                f"{MAKE_ONE}",
            ) from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as bad:
            raise ModelError(f"{path} does not read ({bad})", "re-download the model") from None
    config = configs[0]
    if not isinstance(config, dict) or config.get("model_type") != MODEL_TYPE:
        found = config.get("model_type") if isinstance(config, dict) else None
        raise ModelError(
            f"{folder} is a {found!r} model, not Qwen3-TTS ({MODEL_TYPE})",
            "point --model at a Qwen3-TTS checkpoint",
        )
    return config, configs[1]


def hub_offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE), read as huggingface_hub reads it: its own
    variable, so not one of omni-cpu's knobs (omni_cpu.envs)."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.upper() in {"1", "ON", "YES", "TRUE"}


def hub_cache() -> Path:
    """The hub's cache folder, found as huggingface_hub.constants finds it."""
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface"
    )
    cache = (
        os.environ.get("HF_HUB_CACHE")
        or os.environ.get("HUGGINGFACE_HUB_CACHE")
        or os.path.join(os.path.expandvars(os.path.expanduser(home)), "hub")
    )
    return Path(os.path.expandvars(os.path.expanduser(cache)))


def cached_snapshot(hub_id: str) -> Path | None:
    """The cache's snapshot of `hub_id` (main's, else any) holding both configs; None if none."""
    repo = hub_cache() / ("models--" + hub_id.replace("/", "--"))
    snapshots = repo / "snapshots"
    candidates: list[Path] = []
    with contextlib.suppress(OSError):  # no refs/main: any snapshot that is whole
        candidates.append(snapshots / (repo / "refs" / "main").read_text().strip())
    if snapshots.is_dir():
        candidates += sorted(snapshots.iterdir())
    for snapshot in candidates:
        if all((snapshot / name).is_file() for name in (CONFIG_FILE, SPEECH_TOKENIZER_CONFIG)):
            return snapshot
    return None


def checkpoint_folder(spec: str) -> Path | None:
    """The folder `spec`'s configs are in, from the disk alone (no network).

    A local folder must hold a Qwen3-TTS checkpoint's configs; a hub id is looked up
    in the cache, None where it is not there (the engines would download it). A path
    that is not there and does not read as a hub id is refused.
    """
    path = Path(spec).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelError(
                f"{spec} is a file, not a checkpoint folder",
                f"point --model at the folder holding {CONFIG_FILE}; {MAKE_ONE}",
            )
        read_configs(path)
        return path
    if not looks_like_hub_id(spec):
        raise ModelError(
            f"no folder {spec}",
            f"pass a checkpoint folder or a hub id like {EXAMPLE_HUB_ID}; {MAKE_ONE}",
        )
    return cached_snapshot(spec)


def check_model(spec: str, *, timeout_s: float = HUB_LOOKUP_TIMEOUT_S) -> ModelSource:
    """`--model` checked before any engine starts: every failure is one ModelError line.

    A folder must hold the configs and the weights; a hub id must be in the cache, or,
    with the network allowed, answer a look-up on the hub within `timeout_s`.
    """
    folder = checkpoint_folder(spec)
    hub_id = spec if looks_like_hub_id(spec) and not Path(spec).expanduser().exists() else None
    if folder is not None:
        for names in WEIGHT_FILES:
            if not any((folder / name).is_file() for name in names):
                raise ModelError(
                    f"{spec} has no {names[0]} (an unfinished download?)",
                    "download the checkpoint again, or point --model at a complete one",
                )
        return ModelSource(spec, folder, hub_id)
    assert hub_id is not None  # checkpoint_folder refused every other spec
    # `checkpoints/tyni` beside a checkpoints/ folder is a mistyped path before a hub id.
    owner_is_here = Path(spec.split("/")[0]).expanduser().is_dir()
    missing = (f"no folder {spec} and " if owner_is_here else "") + (
        f"no hub model {spec} in the cache {hub_cache()}"
    )
    if hub_offline():
        raise ModelError(
            f"{missing}, and HF_HUB_OFFLINE keeps the hub out",
            "pass a checkpoint folder (mounted, in a container), or unset HF_HUB_OFFLINE to "
            f"download the hub model; {MAKE_ONE}",
        )
    problem = _hub_lookup(spec, timeout_s)
    if problem is not None:
        raise ModelError(
            f"{missing}, and {problem}",
            "pass a checkpoint folder (mounted, in a container) or a hub id like "
            f"{EXAMPLE_HUB_ID} with the hub in reach; {MAKE_ONE}",
        )
    return ModelSource(spec, None, hub_id)


def _hub_lookup(hub_id: str, timeout_s: float) -> str | None:
    """What stops the engines from downloading `hub_id`, or None: one look-up, no retries.

    In a thread joined with the timeout, since a name look-up (DNS) does not heed the
    request's own timeout.
    """
    answer: list[str | None] = []

    def look_up() -> None:
        answer.append(_ask_hub(hub_id, timeout_s))

    thread = threading.Thread(target=look_up, name="omni-cpu-hub-lookup", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not answer:
        return f"the hub did not answer within {timeout_s:g} s"
    return answer[0]


def _ask_hub(hub_id: str, timeout_s: float) -> str | None:
    try:
        from huggingface_hub import model_info
        from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError
    except ImportError:  # the light install: no runtime, nothing would download it either
        return "huggingface_hub is not installed to fetch it"
    try:
        model_info(hub_id, timeout=timeout_s)
    except GatedRepoError:
        return None  # there: the engines use the token the user has set up
    except RepositoryNotFoundError:
        return "the hub has no such model, or it is private to an account not logged in"
    except Exception as error:  # the network's many ways to fail: all mean "cannot reach"
        return f"the hub is unreachable: {type(error).__name__}"
    return None
