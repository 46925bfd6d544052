"""Analysis of event histories (``miqm analyze``): failovers and switchovers, lock and
verify latencies, spurious failovers and what preceded them, slow-I/O windows, flapping
queue managers, log write high-water marks; tables, ``summary.json`` and an HTML report.

The heavy parts (pyspark, matplotlib, pandas) are imported only by the modules that need
them; importing this package imports none of them.

Percentiles, everywhere in the analysis (Spark tables, summary.json, the report, the
tests): **nearest rank**. For ``n`` values sorted ascending ``x[1] <= ... <= x[n]``, the
p-th percentile (0 <= p <= 1) is ``x[max(1, ceil(p * n))]``: the smallest value with at
least a fraction p of the values at or below it. Always one of the values, never an
interpolation. In Spark it is ``percentile_disc(p) WITHIN GROUP (ORDER BY x)``, which is
exact (no approximation); :func:`nearest_rank` is the same in plain Python.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

PERCENTILE_DEFINITION = ("nearest rank: x[max(1, ceil(p*n))] of the n values sorted "
                         "ascending (exact; Spark percentile_disc)")


def nearest_rank(values: Sequence[float], p: float) -> float | None:
    """The p-th percentile (0..1) by nearest rank; None for no values."""
    if not values:
        return None
    xs = sorted(values)
    return xs[max(1, math.ceil(p * len(xs))) - 1]
