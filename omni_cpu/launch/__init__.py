"""The launcher: a deploy profile and a request become stage processes and a WAV file.

Planning what to run (`plan`, `request`) imports neither torch nor vLLM, so
`omni-cpu run --dry-run` is instant; only `pipeline` starts engines.
"""
