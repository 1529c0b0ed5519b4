"""Places in flight: the one limit every engine route counts toward, and its metrics.

The counts live in vLLM's Prometheus registry, which `/metrics` serves and the
supervisor reads to drain and to tell a stalled stage from a slow client.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from omni_cpu.serve.asgi import BadBody
from omni_cpu.serve.knobs import IN_FLIGHT_METRIC, ON_CLIENT_METRIC, REJECTED_METRIC

IN_FLIGHT = Gauge(IN_FLIGHT_METRIC, "Speech requests admitted and not yet answered in full.")
ON_CLIENT = Gauge(
    ON_CLIENT_METRIC,
    "Speech requests in flight that no stage holds: waiting on their client, or on their "
    "reference audio being fetched or decoded.",
)
REJECTED = Counter(REJECTED_METRIC, "Speech requests turned away.", ["reason"])


def count_rejected(reason: str) -> None:
    """One more request turned away for `reason` (the counter's label)."""
    REJECTED.labels(reason).inc()


class Places:
    """Speech requests in flight (and how many of them wait on their client)."""

    def __init__(self, max_in_flight: int) -> None:
        self.max_in_flight = max_in_flight
        self.in_flight = 0
        self.on_client = 0

    def take(self, places: int, draining: bool) -> None:
        """Take `places`, or raise BadBody(429/503); no await between check and take."""
        if draining:
            raise BadBody(
                503, "server is shutting down; retry on another replica", None, "draining"
            )
        limit = self.max_in_flight
        if limit and self.in_flight + places > limit:
            raise BadBody(
                429,
                f"server is at capacity ({limit} speech requests in flight); retry later",
                None,
                "overloaded",
            )
        self.in_flight += places
        IN_FLIGHT.inc(places)

    def release(self, places: int) -> None:
        self.in_flight -= places
        IN_FLIGHT.dec(places)

    def client_waits(self, change: int) -> None:
        """One more (+1) or one fewer (-1) request in flight that no stage holds (its client
        reads slowly, or its reference audio is being fetched or decoded)."""
        self.on_client += change
        ON_CLIENT.inc(change)
