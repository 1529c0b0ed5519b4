"""`check-weights`: the same texts in the talker's own dtype and in each quantized format.

The reference run is greedy in the talker's own dtype (bfloat16 or float32, as
the plan gives it): the talker picks each frame's layer-0 code by argmax and the
code predictor the 15 residual codes the same way, until the codec's
end-of-speech code or the frame cap. Each other
format is then teacher-forced on the reference: every step it is fed the
reference's previous frame, so its figures at frame t compare the same
position, not two utterances that parted at their first different code.
Per frame:
- the KL divergence of the talker's layer-0 distribution from the reference's,
  and whether its argmax is the reference's code;
- the 15 residual codes its code predictor picks for the reference's layer-0
  code, against the reference's;
- the frame the format would have emitted there (its own layer-0 code, its
  predictor's codes for it), decoded with the rest of its frames by the same
  float32 codec decoder as the reference's: the log-mel distance of the two
  waves over that frame, and for a Base checkpoint the speaker encoder's
  embeddings of the two whole waves, compared by cosine.
"""

from __future__ import annotations

import gc
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from omni_cpu.errors import InputError
from omni_cpu.quality import figures

Progress = Callable[[str], None]


@dataclass
class Reference:
    """One utterance in the talker's own dtype: its frames and the logits that chose them."""

    text: str
    codes: torch.Tensor  # [frames, 16]
    logits: list[torch.Tensor]  # per frame, the talker's logits for its layer-0 code
    wave: torch.Tensor
    speaker: torch.Tensor | None


@dataclass
class Utterance:
    """One utterance's figures for one format."""

    text: str
    kl: list[float]  # per frame, nats
    top1: list[bool]  # per frame
    codes: dict[str, float]  # code_agreement of the residual codes
    log_mel_db: list[float]  # per frame
    speaker_cosine: float | None

    @property
    def frames(self) -> int:
        return len(self.kl)

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "frames": self.frames,
            "logit_kl_mean": _significant(_mean(self.kl)),
            "top1_agreement": _share(self.top1),
            "codes_equal": self.codes["codes_equal"],
            "frames_all_equal": self.codes["frames_all_equal"],
            "log_mel_db_mean": _round(_mean(self.log_mel_db)),
            "speaker_cosine": _round(self.speaker_cosine),
            "per_frame": {
                "logit_kl": [_significant(v) for v in self.kl],
                "top1_equal": self.top1,
                "log_mel_db": [round(v, 4) for v in self.log_mel_db],
            },
        }


@dataclass
class FormatResult:
    """Every utterance's figures for one weight format, and their summary."""

    weights: str
    kernels: dict[str, int]
    utterances: list[Utterance] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        kl = [v for u in self.utterances for v in u.kl]
        frames = sum(u.frames for u in self.utterances)
        residual = 15 * frames
        codes_equal = sum(u.codes["codes_equal"] * 15 * u.frames for u in self.utterances)
        whole = sum(u.codes["frames_all_equal"] * u.frames for u in self.utterances)
        cosines = [u.speaker_cosine for u in self.utterances if u.speaker_cosine is not None]
        return {
            "frames": frames,
            "logit_kl_mean": _significant(_mean(kl)),
            "logit_kl_p95": _significant(_quantile(kl, 0.95)),
            "logit_kl_max": _significant(max(kl) if kl else None),
            "top1_agreement": _share([v for u in self.utterances for v in u.top1]),
            "codes_equal": round(codes_equal / residual, 4) if residual else None,
            "frames_all_equal": round(whole / frames, 4) if frames else None,
            "log_mel_db_mean": _round(_mean([v for u in self.utterances for v in u.log_mel_db])),
            "speaker_cosine": _round(min(cosines)) if cosines else None,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "weights": self.weights,
            "kernels": self.kernels,
            **self.summary(),
            "utterances": [u.to_dict() for u in self.utterances],
        }


@dataclass
class WeightsCheck:
    """What `check-weights` found on one checkpoint."""

    model: str
    random_weights: bool
    reference: str  # the reference format's dtype, e.g. "bfloat16"
    reference_kernels: dict[str, int]
    texts: list[str]
    max_frames: int
    formats: list[FormatResult]

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "random_weights": self.random_weights,
            "note": RANDOM_NOTE if self.random_weights else None,
            "reference": {"weights": "model", "dtype": self.reference},
            "reference_kernels": self.reference_kernels,
            "greedy": True,
            "teacher_forced": True,
            "max_frames": self.max_frames,
            "texts": self.texts,
            "formats": {result.weights: result.to_dict() for result in self.formats},
        }


RANDOM_NOTE = (
    "random weights (every talker norm is exactly 1, as make-checkpoint writes it): "
    "these figures say how far the format perturbs a random network, not how a trained "
    "voice sounds; run check-weights on the real checkpoint before turning a format on"
)


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def _significant(value: float | None) -> float | None:
    """4 significant digits: a KL of 3e-6 nats matters as much as its size says."""
    return None if value is None else float(f"{value:.4g}")


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _share(flags: list[bool]) -> float | None:
    return round(sum(flags) / len(flags), 4) if flags else None


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def free_run(talker: Any, info: dict[str, Any], max_frames: int) -> tuple[torch.Tensor, list]:
    """Greedy frames [n, 16] and, per frame, the logits that chose its layer-0 code."""
    prompt = talker.prompt(info)
    hidden, logits = talker.forward(prompt.embeds, reset=True)
    frames: list[torch.Tensor] = []
    chosen_by: list[torch.Tensor] = []
    for step in range(max_frames):
        layer0 = int(logits.argmax())
        if layer0 == talker.eos_id:
            break
        text_step = talker.text_step(prompt, step)
        codes, embeds = talker.residual_codes(layer0, hidden, text_step)
        frames.append(codes)
        chosen_by.append(logits)
        hidden, logits = talker.forward(embeds)
    return _stack(frames), chosen_by


def teacher_forced(
    talker: Any, info: dict[str, Any], reference: torch.Tensor
) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """Fed the reference's frames: per-frame logits, residual codes for its layer-0, own frames."""
    prompt = talker.prompt(info)
    hidden, logits = talker.forward(prompt.embeds, reset=True)
    all_logits: list[torch.Tensor] = []
    residuals: list[torch.Tensor] = []
    own: list[torch.Tensor] = []
    for step, frame in enumerate(reference):
        text_step = talker.text_step(prompt, step)
        all_logits.append(logits)
        given, _ = talker.residual_codes(int(frame[0]), hidden, text_step)
        residuals.append(given)
        layer0 = int(logits.argmax())
        if layer0 == int(frame[0]):
            own.append(given)
        elif layer0 == talker.eos_id or layer0 >= talker.codebook_size:
            own.append(torch.zeros_like(given))  # as talker_mtp maps a stop: a silent frame
        else:
            own.append(talker.residual_codes(layer0, hidden, text_step)[0])
        hidden, logits = talker.forward(talker.frame_embeds(frame, text_step))
    return all_logits, _stack(residuals), _stack(own)


def _stack(frames: list[torch.Tensor]) -> torch.Tensor:
    return torch.stack(frames) if frames else torch.zeros(0, 16, dtype=torch.long)


def _speaker(talker: Any, wave: torch.Tensor, with_encoder: bool) -> torch.Tensor | None:
    if not with_encoder or wave.numel() == 0:
        return None
    return talker.speaker_embedding(wave.numpy(), figures.SAMPLE_RATE)


def compare(
    talker: Any, info: dict[str, Any], ref: Reference, decode: Callable[..., torch.Tensor]
) -> Utterance:
    """One utterance's figures for the format `talker` holds, teacher-forced on `ref`."""
    logits, residuals, own = teacher_forced(talker, info, ref.codes)
    kl = [figures.kl_divergence(a, b) for a, b in zip(ref.logits, logits, strict=True)]
    top1 = [int(b.argmax()) == int(frame[0]) for b, frame in zip(logits, ref.codes, strict=True)]
    codes = figures.code_agreement(list(residuals[:, 1:]), list(ref.codes[:, 1:]))
    wave = decode(own)
    log_mel = figures.log_mel_distance_per_frame(ref.wave, wave) if ref.codes.shape[0] else []
    speaker = _speaker(talker, wave, ref.speaker is not None)
    cosine = (
        None if speaker is None or ref.speaker is None else figures.cosine(ref.speaker, speaker)
    )
    return Utterance(ref.text, kl, top1, codes, log_mel[: len(kl)], cosine)


def check_weights(
    checkpoint: Path,
    requests: list[Any],
    formats: list[str],
    max_frames: int,
    progress: Progress = lambda message: None,
    threads: int = 1,
    dtype: str = "auto",
) -> WeightsCheck:
    """Every request through the talker's own dtype, then each format teacher-forced on it.

    `requests` are omni_cpu.speech.request.SpeechRequest; `formats` are weight
    formats ("int8", ...; "model" checks the reference against itself). `threads`:
    torch's intra-op threads (the kernels were tuned at one per stage core; more
    threads on a busy 2-core box made the code predictor 4x slower, not faster).
    `dtype`: the talker's, for every format (what is not quantized runs in it).
    """
    from omni_cpu.checkpoint.layout import has_speaker_encoder
    from omni_cpu.checkpoint.random_init import looks_random
    from omni_cpu.platform import inprocess

    torch.set_num_threads(threads)
    config = _config(checkpoint)
    with_encoder = has_speaker_encoder(config)
    infos = [request.additional_information() for request in requests]

    progress(f"loading the talker in {dtype}")
    reference_talker = inprocess.load_talker(checkpoint, "model", dtype)
    progress("loading the codec decoder")
    decoder = inprocess.Code2Wav(checkpoint)
    references = []
    for index, (request, info) in enumerate(zip(requests, infos, strict=True), start=1):
        progress(f"reference: utterance {index}/{len(requests)}, up to {max_frames} frames")
        codes, logits = free_run(reference_talker, info, max_frames)
        wave = decoder.decode(codes)
        speaker = _speaker(reference_talker, wave, with_encoder)
        references.append(Reference(request.text, codes, logits, wave, speaker))
    reference_dtype = str(reference_talker.dtype).removeprefix("torch.")
    reference_kernels = dict(sorted(reference_talker.kernels.items()))
    if "model" not in formats:
        del reference_talker  # one talker in memory at a time
        reference_talker = None
        gc.collect()

    results = []
    for weights in formats:
        if weights == "model":
            talker = reference_talker
        else:
            progress(f"loading the talker with {weights} weights")
            talker = inprocess.load_talker(checkpoint, weights, dtype)
            if not talker.quantized_layers:
                raise InputError(
                    f"--weights {weights}: no layer of this checkpoint took a {weights} kernel",
                    "leave it out, or check on a CPU that runs it",
                )
        result = FormatResult(weights, dict(sorted(talker.kernels.items())))
        for index, (info, ref) in enumerate(zip(infos, references, strict=True), start=1):
            progress(f"{weights}: utterance {index}/{len(requests)} ({ref.codes.shape[0]} frames)")
            result.utterances.append(compare(talker, info, ref, decoder.decode))
        results.append(result)
        if talker is not reference_talker:
            del talker
            gc.collect()
    return WeightsCheck(
        model=str(checkpoint),
        random_weights=looks_random(checkpoint),
        reference=reference_dtype,
        reference_kernels=reference_kernels,
        texts=[request.text for request in requests],
        max_frames=max_frames,
        formats=results,
    )


def _config(checkpoint: Path) -> dict[str, Any]:
    from omni_cpu.checkpoint.locate import read_configs

    return read_configs(checkpoint)[0]
