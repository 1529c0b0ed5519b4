"""`omni-cpu bench` and `omni-cpu tune`: measure the pipeline the way its users judge it.

Pure parts (statistics, the grid, the report) import neither torch nor vLLM; only
`omni_cpu.bench.session` starts engines, and only when asked to.
"""
