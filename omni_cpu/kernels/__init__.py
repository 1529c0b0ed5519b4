"""omni-cpu's CPU kernels: C++ sources (`csrc/`), their build and cache, their Python face.

`gemv` builds the AVX-512 (+AMX) and AVX2 extension modules once per machine and
wraps them (the weight-streaming GEMV in bf16, W8A8 and W4A8, and the code
predictor's one-position attention); `timing` times them against the library
kernels for `probe --calibrate`. Model code calls them (omni_cpu.models); nothing
here knows a model.
"""
