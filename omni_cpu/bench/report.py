"""Render bench results: a rich table, and RTF/TTFA against concurrency as a PNG."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from omni_cpu.errors import InputError

GIB = 1 << 30


def _num(value: Any, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _ratio(measured: Any, predicted: Any) -> str:
    """measured / predicted as `1.12x (2.40)`: the prediction in brackets."""
    if measured is None or not predicted:
        return "n/a"
    return f"{measured / predicted:.2f}x ({predicted:.2f})"


def print_bench(console: Console, data: dict[str, Any]) -> None:
    """Latency and resource tables per level, bandwidth, and how each number is derived."""
    console.print(_latency_table(data))
    console.print(listener_table(data))
    capacity = data.get("capacity")
    if capacity is not None:
        console.print(
            f"stall-free streams: {capacity['stall_free_streams']} (p95 safe start within "
            f"{capacity['safe_start_limit_s']:g} s; tried "
            + ", ".join(
                f"{n}: {'n/a' if s is None else f'{s:.2f} s'}" for n, s in capacity["tried"].items()
            )
            + ")",
            highlight=False,
        )
    prediction = data.get("prediction") or {}
    if prediction:
        style = "dim" if prediction.get("measured_size", True) else "yellow"
        console.print(f"[{style}]{prediction_line(prediction)}[/]", highlight=False)
    console.print(_resources_table(data["levels"]))
    console.print(_bandwidth_line(data), highlight=False)
    for key, text in data["derivations"].items():
        console.print(f"[dim]{key}: {text}[/]", highlight=False)


def _latency_table(data: dict[str, Any]) -> Table:
    """Per level: streams, latency percentiles, throughput, and measured over predicted."""
    levels = data["levels"]
    latency = Table(title=f"omni-cpu bench · {data['model']} · {data['frames']} frames/request")
    for column in ("streams", "reqs", "TTFA p50 s", "TTFA p95 s", "RTF p50", "RTF p95"):
        latency.add_column(column, justify="right")
    latency.add_column("audio-s per wall-s", justify="right")
    # Measured over predicted (omni_cpu.plan.capacity): 1.00 is the cost model exactly.
    latency.add_column("RTF / model", justify="right")
    latency.add_column("TTFA / model", justify="right")
    for level in levels:
        latency.add_row(
            str(level["concurrency"]),
            str(level["requests"]),
            _num(level["ttfa_p50_s"]),
            _num(level["ttfa_p95_s"]),
            _num(level["rtf_p50"]),
            _num(level["rtf_p95"]),
            _num(level["audio_s_per_wall_s"]),
            _ratio(level["rtf_p50"], level.get("predicted_rtf")),
            _ratio(level["ttfa_p50_s"], level.get("predicted_ttfa_s")),
        )
    return latency


def _resources_table(levels: list[dict[str, Any]]) -> Table:
    """Per level: each stage's step times, busy fraction and peak memory."""
    stages = list(levels[0]["busy_fraction"]) if levels else []
    memory = list(levels[0]["peak_rss_bytes"]) if levels else []
    resources = Table(title="per stage")
    resources.add_column("streams", justify="right")
    resources.add_column("talker step ms", justify="right")
    resources.add_column("talker step p95 ms", justify="right")
    resources.add_column("code predictor ms", justify="right")
    resources.add_column("stream ms/frame", justify="right")
    resources.add_column("code2wav ms/frame", justify="right")
    for name in stages:
        resources.add_column(f"{name} busy", justify="right")
    for name in memory:
        resources.add_column(f"{name} peak GiB", justify="right")
    for level in levels:
        resources.add_row(
            str(level["concurrency"]),
            _num(level.get("talker_step_ms"), 1),
            _num(level.get("talker_step_ms_p95"), 1),
            _num(level.get("code_predictor_ms"), 1),
            _num(level["talker_ms_per_frame"], 1),
            _num(level["code2wav_ms_per_frame"], 1),
            *(_num(level["busy_fraction"].get(name)) for name in stages),
            *(_num(level["peak_rss_bytes"].get(name, 0) / GIB) for name in memory),
        )
    return resources


def _bandwidth_line(data: dict[str, Any]) -> str:
    """Memory bandwidth, the talker's weight streaming against it, and start-up's phases."""
    bandwidth = data["memory_bandwidth"]
    streaming = data["weight_streaming"]
    fraction = streaming["fraction_of_triad"]
    return (
        f"memory bandwidth (triad, {bandwidth['threads']} threads): "
        f"{bandwidth['gb_per_s']:.1f} GB/s · talker weight streaming at 1 stream: "
        + (
            "n/a"
            if fraction is None
            else f"{streaming['bytes_per_s'] / 1e9:.1f} GB/s = {fraction:.0%} of the triad"
        )
        + (
            ""
            if not streaming.get("fraction_of_stage_read")
            else f", {streaming['fraction_of_stage_read']:.0%} of what its own cores read "
            f"({data['talker_read_bandwidth']['gb_per_s']:.1f} GB/s)"
        )
        + f" · start-up {data['startup']['total_s']:.1f} s ("
        + ", ".join(
            f"{name.removesuffix('_s').replace('_', ' ')} {seconds:.1f} s"
            for name, seconds in data["startup"].items()
            if name != "total_s" and isinstance(seconds, (int, float))
        )
        + ")"
    )


def prediction_line(prediction: dict[str, Any]) -> str:
    """The model the predictions (the `/ model` columns) are for, and what they assume."""
    constants = f"{prediction['source']} constants, {prediction['weights']} weights"
    model = prediction.get("for_model")
    if model is None:  # a report written before predictions named their model
        head = f"model: {constants}"
    elif prediction.get("measured_size", True):
        head = f"predicted for the {model}: {constants}"
    else:
        head = (
            f"predicted for {model} at the pace of the published sizes (their step overhead "
            f"and code2wav cost, not {model}'s): a 0.6B-paced estimate; {constants}"
        )
    return "; ".join([head, *prediction["assumptions"]])


def listener_table(data: dict[str, Any]) -> Table:
    """What a listener hears per level: safe start, and a buffered player's gaps."""
    levels = data["levels"]
    buffer_ms = levels[0]["play_buffer_ms"] if levels else 0
    table = Table(title=f"what a listener hears · player starts at first audio + {buffer_ms:g} ms")
    for column in ("streams", "safe start p50 s", "safe start p95 s", "model p95 s"):
        table.add_column(column, justify="right")
    for column in ("stalled streams", "gaps p95", "silence p95 s"):
        table.add_column(column, justify="right")
    for level in levels:
        table.add_row(
            str(level["concurrency"]),
            _num(level["safe_start_p50_s"]),
            _num(level["safe_start_p95_s"]),
            _num(level.get("predicted_safe_start_s")),
            f"{level['stalled_streams']}/{level['requests']}",
            _num(level["gaps_p95"], 1),
            _num(level["stall_s_p95"]),
        )
    return table


def require_matplotlib() -> None:
    """Fail before any engine starts when --plot cannot be honoured."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InputError(
            "--plot needs matplotlib, which is not installed", "pip install matplotlib"
        ) from None


def write_plot(data: dict[str, Any], path: Path) -> None:
    """RTF and TTFA against concurrency; per stream, audio arrived against audio played."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = data["levels"]
    x = [level["concurrency"] for level in levels]
    figure, (rtf_axes, ttfa_axes, audio_axes) = plt.subplots(1, 3, figsize=(15, 4))
    for key, label in (("rtf_p50", "p50"), ("rtf_p95", "p95")):
        rtf_axes.plot(x, [level[key] for level in levels], marker="o", label=label)
    rtf_axes.axhline(1.0, color="grey", linestyle=":", label="real time")
    rtf_axes.set(xlabel="concurrent streams", ylabel="RTF (wall / audio)", title="RTF")
    for key, label in (("ttfa_p50_s", "p50"), ("ttfa_p95_s", "p95")):
        ttfa_axes.plot(x, [level[key] for level in levels], marker="o", label=label)
    ttfa_axes.set(xlabel="concurrent streams", ylabel="seconds", title="time to first audio")
    for axes in (rtf_axes, ttfa_axes):
        axes.set_xscale("log", base=2)
        axes.set_xticks(x, [str(value) for value in x])
        axes.legend()
    _arrived_and_played(audio_axes, levels)
    figure.suptitle(f"{data['model']} · {data['frames']} frames/request")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def _arrived_and_played(axes: Any, levels: list[dict[str, Any]]) -> None:
    """Per stream: audio received (solid) and audio played (dashed) against wall time.

    The player starts at first audio + the level's play buffer; where the dashed line
    runs flat the listener hears silence.
    """
    from omni_cpu.checkpoint.geometry import SAMPLE_RATE
    from omni_cpu.speech.playback import StreamTrace

    colors = iter(f"C{index % 10}" for index in range(1000))
    for level in levels:
        for number, stream in enumerate(level.get("streams", [])):
            trace = StreamTrace()
            for at, _offset, seconds in stream["chunks"]:
                trace.add(at, round(seconds * SAMPLE_RATE))
            if trace.ttfa_s is None:
                continue
            run = trace.playback(trace.ttfa_s + level["play_buffer_ms"] / 1000)
            color = next(colors)
            arrived_x, arrived_y = [0.0], [0.0]
            played_x, played_y = [run.start_s], [0.0]
            for (at, offset, seconds), play_at in zip(
                stream["chunks"], run.chunk_play_s, strict=True
            ):
                arrived_x += [at, at]
                arrived_y += [offset, offset + seconds]
                played_x += [play_at, play_at + seconds]
                played_y += [offset, offset + seconds]
            label = f"{level['concurrency']} streams, #{number + 1}"
            axes.plot(arrived_x, arrived_y, color=color, label=label)
            axes.plot(played_x, played_y, color=color, linestyle="--")
    axes.set(
        xlabel="seconds since submission",
        ylabel="seconds of audio",
        title="arrived (solid) and played (dashed)",
    )
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize="x-small")
