"""Processes: the one room that walks, watches, stops and cleans up after process trees.

`proctree` (psutil: find, signal, wait for, measure), `procfs` (the little psutil
does not give), `stage_processes` (which stage a process is, its CPU binding),
`watch` (the one stage watcher of `run` and `serve`: the dead, and a stage that
holds work and makes no progress), `guard` (nothing outlives its owner) and `shm`
(shared memory left in /dev/shm). Standard library and psutil only: run, serve,
bench and doctor all ask here.
"""
