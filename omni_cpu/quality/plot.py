"""`check-weights --plot`: each format's per-frame divergence from the reference, as a PNG."""

from __future__ import annotations

from pathlib import Path

from omni_cpu.checkpoint.geometry import FRAME_MS
from omni_cpu.quality.check_weights import WeightsCheck

FRAME_S = FRAME_MS / 1000  # one codec frame


def plot_divergence(check: WeightsCheck, path: Path) -> Path:
    """Two panels, utterances end to end: the talker's logit KL and the log-mel distance."""
    import matplotlib

    matplotlib.use("Agg")  # no display: write the file only
    from matplotlib import pyplot as plt

    figure, (kl_axes, mel_axes) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    for result in check.formats:
        kl: list[float] = []
        mel: list[float] = []
        bounds: list[int] = []
        for utterance in result.utterances:
            kl.extend(utterance.kl)
            mel.extend(utterance.log_mel_db)
            bounds.append(len(kl))
        seconds = [i * FRAME_S for i in range(len(kl))]
        kl_axes.plot(seconds, kl, label=result.weights, linewidth=1)
        mel_axes.plot(seconds[: len(mel)], mel, label=result.weights, linewidth=1)
    for bound in bounds[:-1] if check.formats else []:
        for axes in (kl_axes, mel_axes):
            axes.axvline(bound * FRAME_S, color="grey", linewidth=0.5, linestyle=":")
    kl_axes.set_ylabel("talker logit KL (nats)")
    mel_axes.set_ylabel("log-mel distance (dB)")
    mel_axes.set_xlabel("audio time (s), utterances end to end")
    title = f"{Path(check.model).name}: each format against {check.reference}, teacher-forced"
    if check.random_weights:
        title += " (random weights)"
    kl_axes.set_title(title)
    kl_axes.legend(loc="upper right")
    figure.tight_layout()
    figure.savefig(path, format="png", dpi=100)
    plt.close(figure)
    return path
