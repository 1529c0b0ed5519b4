"""What more than one test module needs: builders, fixtures' bodies, clients and checks.

Test modules import from here, never from one another; a fixture shared across
folders is registered in tests/conftest.py on top of these. Each module is small
and named for what it builds or reaches: `machines` (hand-built machines, as facts
and as sysroots), `sysroots` (the real machines' dumps), `engines` (`omni-cpu` run
as a user runs it, and what its processes did), `serving` (a server on loopback),
`profiles` (planned profiles spoiled on purpose), `audio` (WAV files and codec
frames), `tensors`, `predictors` and `attention` (the kernels' and model code's
references).
"""
