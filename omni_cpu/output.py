"""Output paths checked before any work starts, and text files never left half-written.

Every file the CLI writes (a profile, manifests, a JSON table, a WAV) goes through
`check_output_path` at the door, so `--output /tmp` or `--out /proc/x` is one line
before a plan, a sweep or an engine runs. Text is written to a hidden file in the
output's own folder and renamed over the output in one step (`write_text_output`):
a failed or killed write leaves the old file, or none, never half of a new one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from pathlib import Path

from omni_cpu.errors import OutputError

SPECIAL_FLAG = "--out-special"


def why(error: OSError) -> str:
    """The system's words for a failed call, without Python's `[Errno N]` prefix."""
    return os.strerror(error.errno) if error.errno else str(error)


def write_fix(error: OSError) -> str:
    """The fix for a failed write, by its cause."""
    if error.errno in (errno.EMFILE, errno.ENFILE):
        return "too many files open in this process: raise `ulimit -n`"
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return "free space in that folder or name another"
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "name a folder you can write"
    return "name a folder you can write, with space free"


def check_output_path(path: Path, *, allow_special: bool = False, option: str = "--out") -> Path:
    """The path to write, or OutputError when it must not or cannot be written.

    A directory is never an output; a symlink, device, FIFO or socket only with
    `allow_special` (a symlink is then written through to its target). A missing
    parent folder is created, as `mkdir -p` would. `option` names the flag in the
    message (only `run`'s `--out` takes special files).
    """
    path = Path(path)
    special = SPECIAL_FLAG
    if path.is_symlink():
        if not allow_special:
            raise OutputError(
                f"{option} {path} is a symlink",
                f"name a regular file, or pass {special} to write to its target"
                if option == "--out"
                else "name a regular file",
            )
        path = path.resolve()
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as error:
        raise OutputError(f"{option} {path}: {why(error)}", "name a file you can write") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise OutputError(
            f"{option} {path} is a directory", f"name a file in it, e.g. {path}/{_example(option)}"
        )
    if mode is not None and not stat.S_ISREG(mode) and not allow_special:
        raise OutputError(
            f"{option} {path} is a device, FIFO or socket, not a regular file",
            f"name a regular file, or pass {special} to write to it"
            if option == "--out"
            else "name a regular file",
        )
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise OutputError(
            f"{option} {path}: cannot create the folder {parent}: {why(error)}",
            "name a writable folder",
        ) from None
    if not parent.is_dir():
        raise OutputError(f"{option} {path}: {parent} is not a folder", "name a file in a folder")
    if mode is None or stat.S_ISREG(mode):
        _try_a_file_in(parent, path, option)
    return path


def check_output_folder(path: Path, *, option: str = "--out") -> Path:
    """A folder to write files into, made as `mkdir -p` would, or OutputError in one line."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputError(f"{option} {path} is a file", "name a new or empty folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise OutputError(f"{option} {path}: {why(error)}", "name a folder you can write") from None
    _try_a_file_in(path, path / "checkpoint", option)
    return path


def _try_a_file_in(folder: Path, path: Path, option: str) -> None:
    """Create and remove a hidden file in `folder`: what the write will need, asked now.

    Permission bits do not answer it (root, read-only mounts, /proc), so the door asks
    the file system itself.
    """
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=folder)
    except OSError as error:
        raise OutputError(
            f"{option} {path}: cannot write in {folder}: {why(error)}", write_fix(error)
        ) from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe)


def _example(option: str) -> str:
    return {"--out": "out.wav", "--plot": "plot.png", "--table": "runs.json"}.get(
        option, "out.yaml"
    )


def write_text_output(path: Path, text: str, *, option: str = "--output") -> Path:
    """Write `text` to `path` whole or not at all: a hidden temp file in its folder, renamed."""
    path = check_output_path(path, option=option)
    temp: str | None = None
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temp, 0o666 & ~umask)
        os.replace(temp, path)
        temp = None
    except OSError as error:
        raise OutputError(f"cannot write {option} {path}: {why(error)}", write_fix(error)) from None
    finally:
        if temp is not None:
            with contextlib.suppress(OSError):
                os.unlink(temp)
    return path
