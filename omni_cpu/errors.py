"""One exception type per kind of user mistake; the CLI prints each as one line."""


class OmniCpuError(Exception):
    """Base: a problem the user can fix. `fix` says how, in one sentence."""

    exit_code = 2

    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.fix = fix

    def one_line(self) -> str:
        return f"{self} ({self.fix})" if self.fix else str(self)


class CpuListError(OmniCpuError, ValueError):
    """A CPU list that does not parse (kernel list syntax, e.g. `0-5,48-53`)."""


class SettingError(OmniCpuError, ValueError):
    """An environment variable, or the option that sets the same thing, with a value it does
    not take (omni_cpu.envs refuses it, naming the setting, the value and the allowed ones)."""

    def __str__(self) -> str:
        # A stage process shows str(error) in its traceback: the same line as the CLI's.
        return f"{self.args[0]} ({self.fix})"

    def one_line(self) -> str:
        return str(self)


class SysrootError(OmniCpuError):
    """The machine (or its dump) cannot be read at all: `probe` exits 6."""

    exit_code = 6


class ProfileError(OmniCpuError):
    """A deploy profile that does not load: bad YAML, schema, key or value."""


class ProfileMismatchError(OmniCpuError):
    """A deploy profile that does not fit the machine it is used on."""

    exit_code = 1


class PlanError(OmniCpuError):
    """The machine cannot hold the pipeline as asked (too little memory or CPUs), or an option
    it cannot run (a weight format without a kernel on this CPU)."""


class MachineTooSmallError(PlanError):
    """Not even one replica fits the machine's memory: `probe` exits with its own code."""

    exit_code = 5


class ModelError(OmniCpuError):
    """A model path, id or config that cannot be used."""


class CheckpointDirError(ModelError):
    """`make-checkpoint`'s output directory cannot take a new checkpoint."""


class InputError(OmniCpuError):
    """Bad request input: empty text, unknown speaker or language."""


class RuntimeMissingError(OmniCpuError):
    """The inference runtime (torch/vLLM/vLLM-Omni) is missing or wrong."""

    exit_code = 3

    @classmethod
    def on_import(cls, error: ImportError) -> "RuntimeMissingError":
        """The one line for a runtime that does not import, with its fix."""
        return cls(
            f"the inference runtime does not import ({error})",
            "run scripts/install-runtime.sh .venv, then omni-cpu doctor",
        )


class PortInUseError(OmniCpuError):
    """`serve` on an address and port something else already listens on."""


class StageError(OmniCpuError):
    """A pipeline stage failed or died."""

    exit_code = 4


class OutputError(OmniCpuError):
    """An output path that cannot be written: a directory, a device, a read-only or full disk."""


class UnsupportedMachineError(OmniCpuError):
    """A machine the inference runtime cannot serve (architecture or ISA): `probe` exits 5."""

    exit_code = 5
