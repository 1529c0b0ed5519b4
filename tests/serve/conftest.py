"""The e2e server every serve test module starts the same way: a tiny checkpoint, planned here.

`tiny_server(kind, max_seqs, *options)` starts `omni-cpu serve OPTIONS` on a tiny `kind`
checkpoint with a profile planned on this machine for `max_seqs` requests at once
(tests.helpers.serving), waits until it is ready, and stops its whole tree when the
module ends. One folder per server, under the module's temporary folder.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from tests.helpers.serving import Server, TinyServer, serving_tiny


@pytest.fixture(scope="module")
def tiny_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TinyServer]:
    with contextlib.ExitStack() as started:

        def start(kind: str, max_seqs: int, *options: str) -> Server:
            folder = tmp_path_factory.mktemp(f"serve-{kind}")
            running = contextlib.contextmanager(serving_tiny)(folder, kind, max_seqs, *options)
            return started.enter_context(running)

        yield start
