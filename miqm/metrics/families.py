"""Small builders for metric families that all carry the ``qmgr`` and ``instance`` labels."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

from miqm.histogram import Histogram


class Families:
    """Collects families for one scrape; ``base`` is the label values every sample has."""

    def __init__(self, base: dict[str, str]) -> None:
        self.base = base
        self.out: list[Metric] = []

    def _labels(self, extra: Sequence[str]) -> list[str]:
        return [*self.base, *extra]

    def gauge(self, name: str, doc: str, value: float | None = None,
              samples: Iterable[tuple[dict[str, str], float]] = ()) -> None:
        """One gauge family: ``value`` alone, or ``samples`` of (extra labels, value)."""
        self._simple(GaugeMetricFamily, name, doc, value, samples)

    def counter(self, name: str, doc: str, value: float | None = None,
                samples: Iterable[tuple[dict[str, str], float]] = ()) -> None:
        """One counter (``name`` without ``_total``; the exposition adds it): ``value``
        alone, or ``samples`` of (extra labels, value)."""
        self._simple(CounterMetricFamily, name, doc, value, samples)

    def _simple(self, family: type[GaugeMetricFamily] | type[CounterMetricFamily],
                name: str, doc: str, value: float | None,
                samples: Iterable[tuple[dict[str, str], float]]) -> None:
        samples = list(samples)
        extra = list(samples[0][0]) if samples else []
        fam = family(name, doc, labels=self._labels(extra))
        if value is not None:
            fam.add_metric(list(self.base.values()), float(value))
        for labels, v in samples:
            fam.add_metric([*self.base.values(), *labels.values()], float(v))
        self.out.append(fam)

    def histogram(self, name: str, doc: str,
                  hists: Iterable[tuple[dict[str, str], Histogram]]) -> None:
        """One histogram family from :class:`miqm.histogram.Histogram` snapshots."""
        hists = list(hists)
        extra = list(hists[0][0]) if hists else []
        fam = HistogramMetricFamily(name, doc, labels=self._labels(extra))
        for labels, h in hists:
            cumulative, total, _count = h.snapshot()
            buckets: list[Any] = [(floatToGoString(b), float(c)) for b, c in cumulative]
            fam.add_metric([*self.base.values(), *labels.values()], buckets, total)
        self.out.append(fam)
