"""The API server process `omni-cpu serve` starts: vLLM-Omni's own CLI, without teardown.

`python -m omni_cpu.serve.server serve MODEL --omni ...` is exactly vLLM-Omni's
`vllm-omni serve` (its `main`, same arguments). Once the server has shut down, the
process ends with `os._exit`: interpreter teardown after vLLM has imported triton
prints ~90 lines of nanobind "leaked instance/type/function" reports (a broken
triton install on CPU, harmless) and spends seconds in native destructors, with
nothing left to do. The supervisor stops and sweeps every stage process itself.
A failure still raises (and prints its traceback) as before.
"""

from __future__ import annotations

import os
import sys


def _fork_stages_if_right() -> None:
    """Fork the stage engine cores from this process when that is right (launch.relaunch),
    and start them without vLLM-Omni's machine-wide device locks (platform.init_locks).

    The supervisor starts this process with the profile's environment, its
    LD_PRELOAD among it, so the stages' preloads are already loaded here.
    """
    from omni_cpu.launch.relaunch import preload_blocker, preload_entries
    from omni_cpu.platform import init_locks

    init_locks.install()  # no machine-wide lock around a CPU stage's start-up
    if preload_blocker(preload_entries(os.environ.get("LD_PRELOAD", ""))) is None:
        from omni_cpu.platform import fork

        fork.install()


def main() -> None:
    from vllm_omni.entrypoints.cli.main import main as vllm_omni_main

    _fork_stages_if_right()

    try:
        vllm_omni_main()
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
