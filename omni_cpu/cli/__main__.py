"""`python -m omni_cpu.cli` runs the CLI (the tests use it to run the source tree)."""

from omni_cpu.cli import main

main()
