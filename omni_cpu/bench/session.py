"""Engines started once, then any number of request batches, each timed chunk by chunk.

`omni_cpu.launch.pipeline.run_pipeline` starts and stops the engines around one
batch and writes WAV files; a benchmark needs the engines up across many batches
and only the arrival times. This module drives the same vLLM-Omni `Omni` object
with `run_pipeline`'s own helpers (prompt builder, sampling parameters, audio
extraction) so both paths send the engines identical requests.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from omni_cpu.bench.stats import StreamTrace
from omni_cpu.errors import RuntimeMissingError, StageError
from omni_cpu.launch import processes
from omni_cpu.launch.plan import DRIVER_ENV_DEFAULTS, LaunchPlan
from omni_cpu.launch.request import SpeechRequest


class EngineSession:
    """Both stages of one launch plan, up for the life of a `with` block."""

    def __init__(self, plan: LaunchPlan) -> None:
        self.plan = plan
        self.load_s = 0.0
        self.stage_pids: list[int] = []
        self._omni: Any = None
        self._builder: Any = None

    def __enter__(self) -> EngineSession:
        from omni_cpu.launch.pipeline import STAGE_INIT_TIMEOUT_S, _PromptBuilder

        for key, value in DRIVER_ENV_DEFAULTS.items():
            os.environ.setdefault(key, value)
        try:
            from vllm_omni.entrypoints.omni import Omni
        except ImportError as error:
            raise RuntimeMissingError(
                f"the inference runtime does not import ({error})",
                "run scripts/install-runtime.sh .venv, then omni-cpu doctor",
            ) from None
        try:
            with tempfile.TemporaryDirectory(prefix="omni-cpu-bench-") as tmp:
                deploy_path = self.plan.write_deploy_config(Path(tmp))
                start = time.perf_counter()
                self._omni = Omni(
                    model=self.plan.model,
                    deploy_config=str(deploy_path),
                    stage_init_timeout=STAGE_INIT_TIMEOUT_S,
                    log_stats=False,
                )
                self.load_s = time.perf_counter() - start
            self.stage_pids = processes.descendant_pids()
            self._builder = _PromptBuilder(self.plan.model)
        except BaseException as error:
            self.close()
            if isinstance(error, (KeyboardInterrupt, SystemExit, RuntimeMissingError)):
                raise
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise StageError(
                f"starting the stage engines failed: {reason}",
                "the stage's own error is in the log above (--debug shows the traceback)",
            ) from error
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop the engines and every process they left."""
        if self._omni is not None:
            with contextlib.suppress(Exception):  # a dead stage can make close() raise
                self._omni.close()
            self._omni = None
        processes.terminate(processes.descendant_pids())

    def stream_batch(self, requests: list[SpeechRequest]) -> tuple[list[StreamTrace], float]:
        """Submit `requests` at once in streaming mode; each one's chunk times, and the wall."""
        from omni_cpu.launch.pipeline import _audio_array, _request_index, _sampling_params

        assert self._omni is not None, "use EngineSession in a with block"
        prompts = [self._builder.prompt(request) for request in requests]
        params = _sampling_params(self._omni, requests, stream=True)
        traces = [StreamTrace() for _ in requests]
        start = time.perf_counter()
        try:
            for output in self._omni.generate(prompts, params, py_generator=True, use_tqdm=False):
                if getattr(output, "error", None):
                    raise StageError(f"a stage failed: {output.error}", "see the log above")
                samples = int(_audio_array(output).size)
                if samples:
                    traces[_request_index(output.request_id)].add(
                        time.perf_counter() - start, samples
                    )
        except StageError:
            raise
        except Exception as error:
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise StageError(f"synthesis failed: {reason}", "see the log above") from error
        return traces, time.perf_counter() - start
