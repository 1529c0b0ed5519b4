"""The launcher: a deploy profile and requests become running stages and audio.

`plan` turns `--deploy-profile auto|FILE` into what each stage process gets
(env, engine args, deploy config) and imports neither torch nor vLLM, so
`omni-cpu run --dry-run` is instant; `pipeline` starts the engines through
vLLM-Omni's `Omni` API, `startup` makes them start sooner, `logs` says what they
print. Processes are omni_cpu.process's; requests and audio, omni_cpu.speech's.
"""
