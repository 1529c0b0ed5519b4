"""`bench --find-capacity`'s search, on made-up safe starts (no engines)."""

from __future__ import annotations

from omni_cpu.bench.capacity_search import search_capacity


def _linear(per_stream_s: float):
    """A box where every stream adds the same wait: n streams' p95 safe start is n * that."""
    asked: list[int] = []

    def measure(streams: int) -> float:
        asked.append(streams)
        return streams * per_stream_s

    return measure, asked


def test_the_search_finds_the_most_streams_under_the_limit() -> None:
    measure, asked = _linear(0.3)  # 3 streams: 0.9 s, 4: 1.2 s
    search = search_capacity(measure, limit_s=1.0, max_streams=64)
    assert search.passed == 3
    assert asked == [1, 2, 4, 3]  # doubling, then between the last pass and the first fail


def test_one_stream_over_the_limit_means_no_stall_free_stream() -> None:
    measure, asked = _linear(1.5)
    search = search_capacity(measure, limit_s=1.0, max_streams=64)
    assert search.passed == 0
    assert asked == [1]


def test_the_search_stops_at_the_most_streams_it_may_try() -> None:
    measure, asked = _linear(0.01)
    search = search_capacity(measure, limit_s=1.0, max_streams=6)
    assert search.passed == 6
    assert asked == [1, 2, 4, 6]


def test_a_level_with_no_audio_counts_as_over_the_limit() -> None:
    search = search_capacity(lambda n: None if n > 2 else 0.1, limit_s=1.0, max_streams=64)
    assert search.passed == 2
    assert search.to_dict()["tried"] == {"1": 0.1, "2": 0.1, "3": None, "4": None}
