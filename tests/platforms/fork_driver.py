"""A stand-in driver for tests/platforms/test_fork.py, run with Intel OpenMP preloaded.

It imports torch and runs a parallel region (its OpenMP runtime is up, as a
driver's may be), sets a Ctrl-C handler of its own, then starts one
`StageForkProcess` with a stage's OpenMP environment set around the start, as
vLLM-Omni sets a stage's env while it starts the process. The child reports, as
one JSON line: its threads' allowed CPUs, torch's thread count, and whether its
SIGINT handler is Python's default.
"""

from __future__ import annotations

import json
import os
import signal
import sys

import torch

from omni_cpu.cpulist import format_cpu_list
from omni_cpu.process import procfs


def report(cpu: int) -> None:
    x = torch.randn(512, 512)
    for _ in range(20):
        x = torch.tanh(x @ x)
    threads = {
        task: format_cpu_list(cpus) for task, cpus in procfs.thread_cpus(os.getpid()).items()
    }
    print(
        json.dumps(
            {
                "cpu": cpu,
                "threads": threads,
                "torch_threads": torch.get_num_threads(),
                "default_sigint": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
            }
        ),
        flush=True,
    )


def main(cpu: int) -> int:
    from omni_cpu.platform.fork import StageForkContext
    from omni_cpu.profile.deploy import openmp_binding_env

    y = torch.randn(512, 512)
    for _ in range(5):
        y = torch.tanh(y @ y)

    def driver_handler(signum: int, frame: object) -> None:
        raise SystemExit(99)

    signal.signal(signal.SIGINT, driver_handler)
    stage_env = openmp_binding_env(str(cpu), os.environ.get("LD_PRELOAD", ""))
    before = {key: os.environ.get(key) for key in stage_env}
    os.environ.update(stage_env)
    process = StageForkContext().Process(target=report, args=(cpu,))
    process.start()
    for key, value in before.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    process.join(60)
    return process.exitcode or 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
