"""Random-weight Qwen3-TTS checkpoints in the exact real layout (files, names, shapes, dtypes).

Speed does not depend on weight values, so tests and benchmarks run on these
where the Hugging Face Hub is out of reach. `make_checkpoint` writes one;
`configs` holds the JSON files per size; `layout` derives every tensor from them.
"""
