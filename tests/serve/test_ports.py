"""The serve tests' ports: never from the kernel's ephemeral range, never shared by workers."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.helpers.serving import FIRST_TEST_PORT, PORTS_A_WORKER, free_port


def ephemeral_range() -> tuple[int, int]:
    low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    return int(low), int(high)


def test_a_port_is_below_the_ephemeral_range_so_no_outgoing_socket_takes_it() -> None:
    low, _ = ephemeral_range()
    assert free_port() < low


@pytest.mark.parametrize("worker", [0, 1, 5])
def test_each_worker_draws_from_its_own_slice(worker: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{worker}")
    first = FIRST_TEST_PORT + worker * PORTS_A_WORKER
    assert first <= free_port() < first + PORTS_A_WORKER


def test_a_port_someone_listens_on_is_passed_over() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", free_port()))
        held.listen()
        taken = held.getsockname()[1]
        assert all(free_port() != taken for _ in range(PORTS_A_WORKER))
