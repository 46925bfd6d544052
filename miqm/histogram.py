"""A fixed-bucket histogram the store and the execution controller keep of their own
latencies and sizes (log forces, checkpoints, lock attempts, verifies), read by the
metrics exporter at scrape time (``miqm.metrics``). No dependency on anything: the store
and the HA layer import it without pulling in Prometheus.

``observe`` costs a bisect and two additions. It is not locked: each histogram has one
writer at a time (the log's force leader, the checkpoint thread, the verify thread, the
controller's main thread); a reader takes :meth:`snapshot`, whose count is the sum of the
bucket counts it copied, so the buckets it returns are always consistent with each other.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

#: seconds: a local disk's force (tens of µs) up to an NFS stall (tens of seconds)
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                   0.2, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 60.0)
#: bytes: one record up to a full log buffer
SIZE_BUCKETS = (512, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304)
#: seconds: a checkpoint or a restart (ms up to minutes)
LONG_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class Histogram:
    """Counts of observations at or below each upper bound, plus their sum."""

    __slots__ = ("_counts", "bounds", "sum")

    def __init__(self, bounds: Sequence[float] = LATENCY_BUCKETS) -> None:
        self.bounds = tuple(float(b) for b in bounds)
        if list(self.bounds) != sorted(set(self.bounds)):
            raise ValueError("histogram bounds must be strictly increasing")
        self._counts = [0] * (len(self.bounds) + 1)  # the last one: above every bound
        self.sum = 0.0

    def observe(self, value: float) -> None:
        """Count one observation."""
        self._counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        """Observations so far."""
        return sum(self._counts)

    def snapshot(self) -> tuple[list[tuple[float, int]], float, int]:
        """(cumulative (upper bound, count) pairs ending with +Inf, sum, count)."""
        counts = list(self._counts)
        total = 0
        cumulative: list[tuple[float, int]] = []
        for bound, n in zip((*self.bounds, float("inf")), counts, strict=True):
            total += n
            cumulative.append((bound, total))
        return cumulative, self.sum, total
