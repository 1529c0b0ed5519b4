"""`python -m omni_cpu` runs the CLI (same as the `omni-cpu` script)."""

from omni_cpu.cli import main

main()
