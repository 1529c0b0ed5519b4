"""WAV output that is never left half-written, and output paths checked before any engine starts.

The file is written unlinked (O_TMPFILE) in the output folder and linked into
place on `commit`: a run killed at any point, SIGKILL included, leaves nothing.
Where the file system has no O_TMPFILE the file is written beside the output
as `.NAME.omni-cpu-PID.partial`, and the next run sweeps those whose writer is
gone.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import wave
from pathlib import Path
from typing import BinaryIO

import numpy as np
import psutil

from omni_cpu.checkpoint.geometry import SAMPLE_RATE
from omni_cpu.errors import OutputError
from omni_cpu.output import check_output_path, write_fix
from omni_cpu.output import why as _why

_PARTIAL = re.compile(r"^\.(?P<name>.+)\.omni-cpu-(?P<pid>\d+)(?:-\d+)?\.partial$")


def to_pcm16(samples: np.ndarray) -> bytes:
    """float audio in [-1, 1] -> little-endian 16-bit PCM (clipped), as `serve` writes it.

    vLLM-Omni's server encodes with libsndfile, whose float to 16-bit conversion is
    floor(x * 32768) held to [-32768, 32767]: the same samples here make `run` and a
    `serve` request give the same bytes (rounding x * 32767 put them 1 LSB apart).
    """
    clipped = np.clip(np.asarray(samples, dtype=np.float32).reshape(-1), -1.0, 1.0)
    scaled = np.floor(clipped * np.float32(32768.0))
    return np.clip(scaled, -32768, 32767).astype("<i2").tobytes()


def sweep_partials(folder: Path) -> list[Path]:
    """Remove `.NAME.omni-cpu-PID.partial` files in `folder` whose writer no longer runs."""
    removed = []
    with contextlib.suppress(OSError):
        for entry in folder.iterdir():
            match = _PARTIAL.match(entry.name)
            if match is None or psutil.pid_exists(int(match.group("pid"))):
                continue
            with contextlib.suppress(OSError):
                entry.unlink()
                removed.append(entry)
    return removed


def _open_hidden(folder: Path, name: str) -> tuple[BinaryIO, Path | None]:
    """A file in `folder` no other process can see: unlinked if possible, else a .partial."""
    try:
        fd = os.open(folder, os.O_TMPFILE | os.O_WRONLY, 0o666)
        return os.fdopen(fd, "w+b"), None
    except OSError as error:
        if error.errno in (errno.EACCES, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EMFILE):
            raise  # no file at all
    temp = folder / f".{name}.omni-cpu-{os.getpid()}.partial"
    fd = os.open(temp, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o666)
    return os.fdopen(fd, "w+b"), temp


class AtomicWavWriter:
    """24 kHz mono 16-bit WAV, appended to as chunks arrive, visible only after `commit`.

    Opening writes the header, so a folder that is read-only or full fails here,
    before any engine starts. A device or FIFO (with `allow_special`) gets the
    whole file at `commit`: it cannot be renamed into place.
    """

    def __init__(
        self, path: Path, sample_rate: int = SAMPLE_RATE, *, allow_special: bool = False
    ) -> None:
        self.path = check_output_path(path, allow_special=allow_special)
        self.samples = 0
        self._temp: Path | None = None
        self._special = self.path.exists() and not self.path.is_file()
        try:
            if self._special:
                self._file: BinaryIO = io.BytesIO()
            else:
                self._file, self._temp = _open_hidden(self.path.parent, self.path.name)
            # Held open across appends (a context manager would close it): commit/abort close it.
            self._wave = wave.open(self._file, "wb")  # noqa: SIM115
            self._wave.setnchannels(1)
            self._wave.setsampwidth(2)
            self._wave.setframerate(sample_rate)
            self._wave.writeframes(b"")  # the header, now
            self._file.flush()
        except OSError as error:
            self._discard()
            raise self._error(error) from None

    def _error(self, error: OSError) -> OutputError:
        return OutputError(f"cannot write {self.path}: {_why(error)}", write_fix(error))

    def append(self, samples: np.ndarray) -> None:
        """Add float samples; the header's length is rewritten on each write."""
        data = to_pcm16(samples)
        try:
            self._wave.writeframes(data)
            self._file.flush()
        except OSError as error:
            raise self._error(error) from None
        self.samples += len(data) // 2

    def commit(self) -> Path:
        """Close and move into place."""
        try:
            self._wave.close()  # patches the header; leaves our file object open
            self._file.flush()
            if self._special:
                assert isinstance(self._file, io.BytesIO)
                with open(self.path, "wb") as sink:
                    sink.write(self._file.getvalue())
            else:
                os.fsync(self._file.fileno())
                self._link_into_place()
        except OSError as error:
            self._discard()
            raise self._error(error) from None
        self._file.close()
        return self.path

    def _link_into_place(self) -> None:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(self._file.fileno(), 0o666 & ~umask)
        if self._temp is None:
            # Give the unlinked file a hidden name, then rename it over the output in one step.
            self._temp = self.path.with_name(f".{self.path.name}.omni-cpu-{os.getpid()}.partial")
            self._temp.unlink(missing_ok=True)
            # A dir fd makes os.link call linkat(AT_SYMLINK_FOLLOW), which links the
            # unlinked file itself rather than the /proc symlink to it.
            folder = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                source = f"/proc/self/fd/{self._file.fileno()}"
                os.link(source, self._temp.name, dst_dir_fd=folder, follow_symlinks=True)
            finally:
                os.close(folder)
        os.replace(self._temp, self.path)
        self._temp = None

    def _discard(self) -> None:
        wave_file = getattr(self, "_wave", None)
        if wave_file is not None:
            # Closed here (its header write may fail again), not later from __del__.
            with contextlib.suppress(Exception):
                wave_file.close()
        with contextlib.suppress(Exception):
            self._file.close()
        if self._temp is not None:
            self._temp.unlink(missing_ok=True)
            self._temp = None

    def abort(self) -> None:
        """Close and delete: no partial file stays behind."""
        self._discard()


class WavOutputs:
    """The WAVs of one run, one per utterance, opened one at a time.

    Every path is checked at once (no file opened); each distinct folder gets its
    first file opened now, so a read-only or full folder fails before any engine
    starts. Any other file is opened at its first chunk and committed as soon as
    its utterance is done, so a run of 100,000 lines holds a handful of files open.
    """

    def __init__(self, paths: list[Path], *, allow_special: bool = False) -> None:
        self.allow_special = allow_special
        self.paths = [check_output_path(path, allow_special=allow_special) for path in paths]
        self._open: dict[int, AtomicWavWriter] = {}
        self._done: set[int] = set()
        self.folders = tuple(sorted({path.parent for path in self.paths}))
        first: dict[Path, int] = {}
        for index, path in enumerate(self.paths):
            first.setdefault(path.parent, index)
        try:
            for index in first.values():
                self._writer(index)
        except BaseException:
            self.abort()
            raise

    def _writer(self, index: int) -> AtomicWavWriter:
        writer = self._open.get(index)
        if writer is None:
            writer = AtomicWavWriter(self.paths[index], allow_special=self.allow_special)
            self._open[index] = writer
        return writer

    def append(self, index: int, samples: np.ndarray) -> None:
        """Add audio to utterance `index`'s WAV (opened now if it was not)."""
        self._writer(index).append(samples)

    def commit(self, index: int) -> None:
        """Utterance `index` is complete: its WAV goes into place (empty if it had no audio)."""
        if index in self._done:
            return
        self._writer(index).commit()
        del self._open[index]
        self._done.add(index)

    def commit_all(self) -> None:
        for index in range(len(self.paths)):
            self.commit(index)

    def abort(self) -> None:
        """Delete every WAV not yet committed; the committed ones stay."""
        for writer in self._open.values():
            writer.abort()
        self._open.clear()

    @property
    def open_count(self) -> int:
        return len(self._open)
