"""`bench --find-capacity`: the most concurrent streams whose p95 safe start stays under a limit.

Pure: the caller measures a level; this decides which level to measure next. Doubling
from one stream finds the first level over the limit in log2 steps, then halving the
gap between the last level under it and the first over it finds the edge.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class CapacitySearch:
    """The levels tried and their p95 safe starts; what is known of the edge so far."""

    limit_s: float
    max_streams: int
    tried: dict[int, float | None] = field(default_factory=dict)

    @property
    def passed(self) -> int:
        """The most streams measured under the limit (0 if even one stream was over)."""
        return max((n for n, s in self.tried.items() if _under(s, self.limit_s)), default=0)

    @property
    def failed(self) -> int | None:
        """The fewest streams measured over the limit, if any was."""
        over = [n for n, s in self.tried.items() if not _under(s, self.limit_s)]
        return min(over) if over else None

    def next_level(self) -> int | None:
        """The next concurrency to measure, or None when the edge is found."""
        low, high = self.passed, self.failed
        if high is None:
            if low >= self.max_streams:
                return None
            return min(max(low * 2, 1), self.max_streams)
        if high - low <= 1:
            return None
        return (low + high) // 2

    def to_dict(self) -> dict[str, object]:
        return {
            "stall_free_streams": self.passed,
            "safe_start_limit_s": self.limit_s,
            "max_streams": self.max_streams,
            "tried": {str(n): s for n, s in sorted(self.tried.items())},
        }


def _under(safe_start_p95_s: float | None, limit_s: float) -> bool:
    return safe_start_p95_s is not None and safe_start_p95_s <= limit_s


def search_capacity(
    measure: Callable[[int], float | None], limit_s: float, max_streams: int
) -> CapacitySearch:
    """Measure levels (`measure(n)` gives n streams' p95 safe start) until the edge is found."""
    search = CapacitySearch(limit_s, max_streams)
    while (level := search.next_level()) is not None:
        search.tried[level] = measure(level)
    return search
