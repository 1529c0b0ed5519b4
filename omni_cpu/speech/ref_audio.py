"""Reference audio for voice cloning (Base models): read, mix to mono, resample, check.

Read with soundfile at whatever rate and channel count the file has, mixed down to
mono and resampled to 24 kHz (the rate of the speech tokenizer's encoder and the
speaker encoder), then checked the way vLLM-Omni's server checks a clip (1-30 s),
plus silence: a silent clip gives the speaker encoder nothing to hear. Each problem
is one `InputError` line, raised before any engine starts.

Decoded within bounds (a server decodes what strangers send): the header's length,
channel count and rate are checked before any sample is decoded, and decoding stops
one frame past the limit, so a small file that declares (or holds) hours of
8-channel audio costs nothing. At most MAX_SECONDS of MAX_CHANNELS at MAX_RATE are
ever decoded: about 23 MB of float32 samples, 60 MB with the resampling's FFT.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from omni_cpu.checkpoint.geometry import FRAME_SAMPLES, SAMPLE_RATE
from omni_cpu.errors import InputError

# vLLM-Omni's server refuses clips outside these (serving_speech._REF_AUDIO_*_DURATION).
MIN_SECONDS = 1.0
MAX_SECONDS = 30.0
# Peak below this (about -60 dBFS) is silence for the speaker encoder's mel frontend.
SILENCE_PEAK = 1e-3
# What a clip's header may declare: a voice needs neither surround nor ultrasound.
MAX_CHANNELS = 2
MAX_RATE = 96_000
# Decoded at most: the longest clip vLLM-Omni takes, and a little slack for rounding.
DECODE_SECONDS = MAX_SECONDS + 0.5


@dataclass(frozen=True, eq=False)
class ReferenceAudio:
    """A voice to clone: 24 kHz mono float32 samples and where they came from."""

    source: str
    samples: np.ndarray
    original_rate: int
    original_channels: int

    @property
    def seconds(self) -> float:
        return self.samples.size / SAMPLE_RATE

    @property
    def code_frames(self) -> int:
        """Codec frames the speech tokenizer's encoder makes of it (ceil of 1920 per frame)."""
        return -(-self.samples.size // FRAME_SAMPLES)


def resample(samples: np.ndarray, from_rate: int, to_rate: int) -> np.ndarray:
    """Band-limited resampling of a mono signal by FFT (no scipy in the runtime)."""
    if from_rate == to_rate or samples.size == 0:
        return samples.astype(np.float32, copy=False)
    count = max(1, round(samples.size * to_rate / from_rate))
    spectrum = np.fft.rfft(samples.astype(np.float64))
    bins = count // 2 + 1
    if bins <= spectrum.size:
        spectrum = spectrum[:bins]
    else:
        spectrum = np.concatenate([spectrum, np.zeros(bins - spectrum.size, spectrum.dtype)])
    out = np.fft.irfft(spectrum, n=count) * (count / samples.size)
    return out.astype(np.float32)


def check_reference(audio: ReferenceAudio) -> ReferenceAudio:
    """Refuse clips vLLM-Omni would refuse (or clone nothing from), one line each."""
    if audio.seconds < MIN_SECONDS:
        raise InputError(
            f"reference audio {audio.source} is too short ({audio.seconds:.2f} s)",
            f"give {MIN_SECONDS:.0f}-{MAX_SECONDS:.0f} s of clear speech (3-10 s clones best)",
        )
    if audio.seconds > MAX_SECONDS:
        raise InputError(
            f"reference audio {audio.source} is too long ({audio.seconds:.1f} s)",
            f"cut it to at most {MAX_SECONDS:.0f} s (3-10 s clones best)",
        )
    if not np.isfinite(audio.samples).all():
        raise InputError(
            f"reference audio {audio.source} holds NaN or infinite samples", "re-export the file"
        )
    if float(np.max(np.abs(audio.samples))) < SILENCE_PEAK:
        raise InputError(
            f"reference audio {audio.source} is silent", "record or pick a clip of the voice"
        )
    return audio


def from_samples(source: str, samples: np.ndarray, rate: int) -> ReferenceAudio:
    """A checked reference from samples shaped (frames,) or (frames, channels) at `rate`."""
    data = np.asarray(samples, dtype=np.float32)
    channels = 1 if data.ndim == 1 else int(data.shape[1])
    mono = data if data.ndim == 1 else data.mean(axis=1)
    audio = ReferenceAudio(source, resample(mono, int(rate), SAMPLE_RATE), int(rate), channels)
    return check_reference(audio)


# soundfile's "Error opening <what>: <why>" (its <what> a path, or a buffer's repr).
_OPENED = re.compile(r"^Error opening .*?: ")


def _cannot_read(source: str, reason: str) -> InputError:
    return InputError(
        f"cannot read reference audio {source}: {reason}",
        "give a WAV, FLAC or OGG file that soundfile can open",
    )


def _decode(source: str, file: str | BinaryIO) -> ReferenceAudio:
    """Decode a path or an open file with soundfile (any format libsndfile reads), checked,
    never decoding more than DECODE_SECONDS of at most MAX_CHANNELS at MAX_RATE."""
    import soundfile

    try:
        with soundfile.SoundFile(file) as sound:
            rate, channels, declared = int(sound.samplerate), int(sound.channels), sound.frames
            if channels > MAX_CHANNELS:
                raise InputError(
                    f"reference audio {source} has {channels} channels",
                    f"mix it down to mono (at most {MAX_CHANNELS} channels are read)",
                )
            if not 0 < rate <= MAX_RATE:
                raise InputError(
                    f"reference audio {source} is sampled at {rate} Hz",
                    f"resample it to at most {MAX_RATE} Hz (24 kHz is what the model hears)",
                )
            limit = int(DECODE_SECONDS * rate)
            if 0 < declared < (1 << 62) and declared > limit:
                raise InputError(
                    f"reference audio {source} is too long ({declared / rate:.1f} s declared)",
                    f"cut it to at most {MAX_SECONDS:.0f} s (3-10 s clones best)",
                )
            data = sound.read(frames=limit + 1, dtype="float32", always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError, OSError, ValueError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        # libsndfile names what it opened: a buffer's repr ("<_io.BytesIO object at 0x…>").
        reason = _OPENED.sub("", reason).strip() or type(error).__name__
        raise _cannot_read(source, reason) from None
    if len(data) > limit:  # a header that said less than the file holds
        raise InputError(
            f"reference audio {source} is too long (over {MAX_SECONDS:.0f} s)",
            f"cut it to at most {MAX_SECONDS:.0f} s (3-10 s clones best)",
        )
    return from_samples(source, data, rate)


def read_reference_audio(path: Path, source: str | None = None) -> ReferenceAudio:
    """Read `path` (WAV, FLAC, OGG... anything libsndfile reads) as a checked reference.

    `source` names it in errors (default: the path; serve gives the client's URL).
    """
    name = str(path) if source is None else source
    if not path.is_file():
        raise InputError(f"reference audio {name} does not exist", "check the --ref-audio path")
    return _decode(name, str(path))


def decode_reference_audio(source: str, data: bytes) -> ReferenceAudio:
    """The bytes of an audio file (a request's base64 `ref_audio`) as a checked reference.

    The same reading and checks as `run --ref-audio`, so `serve` refuses what `run`
    refuses: unreadable, silent, or outside 1-30 s.
    """
    return _decode(source, io.BytesIO(data))
