"""omni-cpu's CPU kernels: C++ sources (`csrc/`), their builds, their Python face.

`build` describes each extension module (sources, flags, the ISA it needs) and compiles it
into a cache once per machine; `packing` quantizes and lays out weights for them; `gemv`
picks the module this CPU runs and wraps packed weights as callables (the weight-streaming
GEMV in bf16, W8A8 and W4A8, the code predictor's one-position attention and the codec's
one-pass SnakeBeta);
`weight_cache` keeps packed weights on disk; `fbgemm` is the int8 fallback; `timing` times
the kernels against the library ones for `probe --calibrate`. Model code calls them
(omni_cpu.models); nothing here knows a model.
"""
