"""Start the two stage engines through vLLM-Omni's offline `Omni` API and write audio.

Imports torch/vLLM only inside `PipelineSession` and `run_pipeline`. Written
against vllm-omni 0.30.0: `Omni(model, deploy_config=PATH)`,
`generate(..., py_generator=True)` yielding `OmniRequestOutput`s whose
`multimodal_output` carries `audio`/`sr`, and streaming through
`output_kind=DELTA` on both stages.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omni_cpu import envs, pins
from omni_cpu.errors import OmniCpuError, RuntimeMissingError, StageError
from omni_cpu.launch import logs, startup
from omni_cpu.launch.interrupts import (
    ENGINES_STARTED,
    STOPPING,
    Interrupts,
    StallAlarm,
    quiet_thread_errors,
)
from omni_cpu.launch.plan import DRIVER_ENV_DEFAULTS, LaunchPlan
from omni_cpu.launch.results import RunResult, Utterance
from omni_cpu.launch.stage_errors import stage_error
from omni_cpu.platform import stage_startup
from omni_cpu.process import proctree, stage_processes
from omni_cpu.process.guard import StageGuard
from omni_cpu.process.progress import run_progress_dir
from omni_cpu.process.watch import StageWatch, stall_seconds
from omni_cpu.speech.prompts import PromptBuilder, check_prompt_lengths, request_index
from omni_cpu.speech.request import SpeechRequest

STAGE_INIT_TIMEOUT_S = 900  # a 2-core box loads two engines in 1-3 minutes


def record_relaunch(phases: dict[str, float]) -> None:
    """Add what re-executing the driver cost this start, when it did (launch.relaunch)."""
    from omni_cpu.launch import relaunch

    seconds = relaunch.relaunch_seconds()
    if seconds is not None:
        phases["driver_relaunch_s"] = seconds


def choose_stage_start(plan: LaunchPlan) -> str:
    """Fork the stage engine cores from this process when that is right here, else spawn;
    either way without vLLM-Omni's machine-wide device locks (platform.init_locks).

    Call after vLLM-Omni is imported. Why a plan cannot fork is logged (--verbose).
    """
    from omni_cpu.launch import relaunch
    from omni_cpu.platform import fork, init_locks

    init_locks.install()  # no machine-wide lock around a CPU stage's start-up
    blocker = relaunch.fork_blocker(plan)
    if blocker is None:
        fork.install()
        return "fork"
    fork.uninstall()
    logging.getLogger("omni_cpu").info("stage engine cores are spawned: %s", blocker)
    return "spawn"


def _audio_array(output: Any) -> Any:
    """The float32 numpy audio an output carries (empty when none)."""
    import numpy as np
    import torch

    payload = output.multimodal_output
    audio = payload.get("audio") if payload is not None else None
    if audio is None:
        return np.zeros(0, dtype=np.float32)
    if isinstance(audio, (list, tuple)):
        parts = [a.reshape(-1) for a in audio if a is not None and a.numel()]
        if not parts:
            return np.zeros(0, dtype=np.float32)
        audio = torch.cat(parts)
    return audio.detach().reshape(-1).float().cpu().numpy()


def _sampling_params(omni: Any, requests: list[SpeechRequest], stream: bool) -> list[Any]:
    from vllm.sampling_params import RequestOutputKind

    params = [copy.deepcopy(p) for p in omni.default_sampling_params_list]
    # The talker completes frame k while sampling token k+1 (its code predictor runs on
    # the next step), so N frames take N+1 tokens: max_tokens=N gave N-1 frames.
    params[0].max_tokens = max(request.max_frames for request in requests) + 1
    if stream:
        # Both stages must emit deltas, or vLLM-Omni holds audio until the end.
        for p in params:
            if hasattr(p, "output_kind"):
                p.output_kind = RequestOutputKind.DELTA
    return params


# A chunk of audio for request `index` (float32 samples), `seconds` after submission.
ChunkHandler = Callable[[int, Any, float], None]


STOP_GRACE_S = 2.0  # killed stage processes get this long to be gone


class PipelineSession:
    """Both stage engines of one launch plan, up for the life of a `with` block.

    `run` uses one session for one batch of utterances; `bench` and `tune` send
    many batches through one session. Either way every request goes through
    `generate`, so both paths send the engines identical requests. Every process
    the engines start is owned by a `StageGuard`: it ends with the session, or
    with this process however it ends.
    """

    def __init__(
        self,
        plan: LaunchPlan,
        *,
        verbose: bool = False,
        check: list[SpeechRequest] | None = None,
        output_folders: tuple[Path, ...] = (),
    ) -> None:
        self.plan = plan
        self.verbose = logs.verbose_requested(verbose)
        self.load_s = 0.0  # Omni(): the engines alone (startup["engines_s"])
        self.startup: dict[str, float] = {}
        self.stage_startup: dict[str, dict[str, Any]] = {}  # each stage's own phases
        self.stage_start = ""  # "fork" or "spawn" (choose_stage_start)
        self.stage_pids: list[int] = []
        self.binding: dict[str, list[int]] = {}  # observed OpenMP binding per stage env
        self._omni: Any = None
        self._builder: PromptBuilder | None = None
        self._check = check or []
        self._output_folders = output_folders
        # What starting the engines entered, left in the reverse order (close()).
        self._started = contextlib.ExitStack()
        self._watch: StageWatch | None = None
        self._alarm: StallAlarm | None = None
        self._progress_dir: str | None = None  # where the stages count their work steps

    @property
    def talker_max_model_len(self) -> int:
        return self.plan.profile.replicas[self.plan.replica].talker.max_model_len

    def __enter__(self) -> PipelineSession:
        for key, value in DRIVER_ENV_DEFAULTS.items():
            os.environ.setdefault(key, value)
        logs.apply_to_this_process(self.verbose)
        # The resource tracker unlinks what the stopped stages left when this process
        # ends, and warns about each kind; that is the cleanup working, not a leak.
        logs.add_warning_filter(logs.TRACKER_QUIET)
        start = time.perf_counter()
        try:
            from vllm_omni.entrypoints.omni import Omni

            from omni_cpu.platform.hf_config import register_qwen3_tts_config
        except ImportError as error:
            raise RuntimeMissingError.on_import(error) from None
        self.startup["runtime_import_s"] = time.perf_counter() - start
        if (other := pins.other_versions()) is not None:
            print(f"warning: {other}", file=sys.stderr)
        record_relaunch(self.startup)
        self.stage_start = choose_stage_start(self.plan)
        # Prompts too long for the talker are refused before any engine loads.
        tokenizer_start = time.perf_counter()
        self._builder = PromptBuilder(self.plan.model)
        self.startup["prompt_tokenizer_s"] = time.perf_counter() - tokenizer_start
        check_prompt_lengths(self._builder, self._check, self.talker_max_model_len)
        if not getattr(threading.excepthook, "omni_cpu_quiet", False):
            threading.excepthook = quiet_thread_errors(threading.excepthook)
        STOPPING.clear()
        try:
            ENGINES_STARTED.set()
            self._start_engines(Omni, register_qwen3_tts_config)
        except BaseException as error:
            failure = error
            if not isinstance(error, (OmniCpuError, KeyboardInterrupt, SystemExit)):
                failure = stage_error("starting the stage engines", error, self._watch)
            self.close()
            if failure is error:
                raise
            raise failure from error
        return self

    def _start_engines(self, omni_class: Any, register_config: Callable[[], None]) -> None:
        """Start the stages under a guard, each step's undoing pushed on `self._started`."""
        started = self._started
        started.callback(self._drop_progress_dir)
        started.enter_context(StageGuard(self._output_folders))
        started.callback(self._close_omni)
        started.callback(self._kill_stages)
        binds = stage_processes.stage_binds(self.plan.deploy_config)
        # The stages (started below, with this environment) count their work steps
        # there: the stall watch's measure of progress (omni_cpu.process.progress).
        self._progress_dir = str(run_progress_dir())
        os.environ[envs.STAGE_PROGRESS_DIR.name] = self._progress_dir
        self._watch = StageWatch(os.getpid(), binds, stall_seconds(), self._progress_dir)
        self._alarm = StallAlarm(self._watch)
        self._alarm.start()
        started.callback(self._alarm.stop)
        register_config()
        launched = dataclasses.replace(
            self.plan,
            deploy_config=startup.launch_deploy_config(self.plan.deploy_config, self.verbose),
        )
        with tempfile.TemporaryDirectory(prefix="omni-cpu-") as tmp:
            deploy_path = launched.write_deploy_config(Path(tmp))
            start = time.perf_counter()
            with stage_startup.collected() as self.stage_startup:
                self._omni = omni_class(
                    model=self.plan.model,
                    deploy_config=str(deploy_path),
                    stage_init_timeout=STAGE_INIT_TIMEOUT_S,
                    log_stats=False,
                )
            self.load_s = self.startup["engines_s"] = time.perf_counter() - start
        self._watch.sample()
        self.stage_pids = proctree.descendants(os.getpid())
        self.binding = stage_processes.observed_binding(self.stage_pids, binds)

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the engines and every process they left, and sweep what they left in /dev/shm.

        vLLM-Omni's own close() waits about 10 s on a 2-core box for stages that
        have nothing left to do; the outputs are committed by now and the watchdog
        removes what the stages held, so the stage processes are killed first and
        close() then finds nothing to wait for.
        """
        STOPPING.set()
        self._started.close()  # the stall alarm, the stages, the engines, the guard, the folder

    def _kill_stages(self) -> None:
        spare = StageGuard.watchdog_pids
        # The resource tracker ignores SIGTERM and ends by itself once this process
        # does, unlinking what it tracked: leave it to that (and to the watchdog).
        stages = [
            pid
            for pid in proctree.descendants(os.getpid())
            if pid not in spare
            and stage_processes.RESOURCE_TRACKER_MARK not in proctree.command_line(pid)
        ]
        if stages:
            # Stopping them on purpose: vLLM-Omni's "Stage-N is dead" errors would mislead.
            logging.getLogger("vllm_omni").setLevel(logging.CRITICAL)
        proctree.signal_all(stages, signal.SIGKILL)
        proctree.wait_gone(stages, STOP_GRACE_S)

    def _close_omni(self) -> None:
        if self._omni is not None:
            # With its stages gone close() may raise; the sweep after it still runs.
            with contextlib.suppress(Exception):
                self._omni.close()
            self._omni = None

    def _drop_progress_dir(self) -> None:
        if self._progress_dir is not None:
            os.environ.pop(envs.STAGE_PROGRESS_DIR.name, None)
            shutil.rmtree(self._progress_dir, ignore_errors=True)
            self._progress_dir = None

    def generate(
        self,
        requests: list[SpeechRequest],
        *,
        stream: bool,
        on_chunk: ChunkHandler,
        on_done: Callable[[int], None] | None = None,
    ) -> float:
        """Submit `requests` at once; `on_chunk` gets each audio chunk. The wall seconds.

        Streaming passes every delta as it arrives; otherwise each request's audio
        comes once, when it finishes. `on_done` gets a request's index once its
        audio is complete.
        """
        import numpy as np

        if self._omni is None or self._builder is None:
            raise RuntimeError("PipelineSession.generate outside its with block")
        check_prompt_lengths(self._builder, requests, self.talker_max_model_len)
        prompts = [self._builder.prompt(request.additional_information()) for request in requests]
        params = _sampling_params(self._omni, requests, stream)
        start = time.perf_counter()
        alarm = self._alarm
        if alarm is not None:
            alarm.working(True)
        try:
            for output in self._omni.generate(prompts, params, py_generator=True, use_tqdm=False):
                if getattr(output, "error", None):
                    raise stage_error("synthesis", RuntimeError(str(output.error)), self._watch)
                if not stream and not output.finished:
                    continue
                audio = _audio_array(output)
                if audio.size:
                    if not np.isfinite(audio).all():
                        raise StageError(
                            "code2wav produced non-finite audio (NaN/inf)",
                            "check the checkpoint's speech_tokenizer weights and the stage dtype",
                        )
                    if alarm is not None:  # a slow consumer holds the audio, not the stages
                        alarm.working(False)
                    on_chunk(request_index(output.request_id), audio, time.perf_counter() - start)
                    if alarm is not None:
                        alarm.working(True)
                if output.finished and on_done is not None:
                    on_done(request_index(output.request_id))
        except KeyboardInterrupt:
            if alarm is not None and alarm.stalled is not None:
                raise StageError(
                    f"synthesis failed: {alarm.stalled}",
                    "the stage is hung, not dead: its log above may say why "
                    f"({envs.STAGE_STALL_S.name} sets how long work may go without progress)",
                ) from None
            raise
        except (OmniCpuError, SystemExit):
            raise
        except Exception as error:
            raise stage_error("synthesis", error, self._watch) from error
        finally:
            if alarm is not None:
                alarm.working(False)
        return time.perf_counter() - start


def run_pipeline(
    plan: LaunchPlan,
    requests: list[SpeechRequest],
    out_paths: list[Path],
    *,
    stream: bool = False,
    allow_special: bool = False,
    progress: Callable[[str], None] = lambda message: None,
    on_audio: Callable[[list[Utterance], float], None] | None = None,
    verbose: bool = False,
) -> RunResult:
    """Load both stages, synthesize every request into its WAV, stop every stage process.

    `on_audio` sees every utterance and the seconds since generation started after
    each chunk (a progress display); `verbose` shows the engines' own logs.
    The outputs are checked (the first in each folder opened, unlinked) and the
    prompts measured before any engine starts; each WAV is opened at its first
    chunk and committed as soon as its audio is complete, so a file of many
    lines holds only the utterances in flight open.
    """
    from omni_cpu.speech.wav import WavOutputs

    outputs = WavOutputs(out_paths, allow_special=allow_special)
    utterances = [Utterance(index, path) for index, path in enumerate(out_paths)]
    folders = outputs.folders

    interrupts = Interrupts()

    def write_chunk(index: int, audio: Any, seconds: float) -> None:
        interrupts.check()
        utterance = utterances[index]
        if utterance.first_audio_s is None:
            utterance.first_audio_s = seconds
        outputs.append(index, audio)
        utterance.samples += audio.size
        utterance.chunks += 1
        if on_audio is not None:
            on_audio(utterances, seconds)

    def finish(index: int) -> None:
        interrupts.check()
        outputs.commit(index)

    interrupts.install()
    try:
        progress("loading the talker and code2wav engines")
        session = PipelineSession(plan, verbose=verbose, check=requests, output_folders=folders)
        with session:
            interrupts.check()
            progress(
                f"engines up in {sum(session.startup.values()):.1f} s; "
                f"synthesizing {len(requests)} utterance(s)"
            )
            wall_s = session.generate(requests, stream=stream, on_chunk=write_chunk, on_done=finish)
            interrupts.check()
            # The audio is complete: the WAVs are in place before the engines stop.
            outputs.commit_all()
        return RunResult(
            session.load_s,
            wall_s,
            stream,
            utterances,
            session.binding,
            session.stage_pids,
            session.startup,
            session.stage_startup,
            session.stage_start,
        )
    except BaseException:
        outputs.abort()
        raise
    finally:
        interrupts.restore()
