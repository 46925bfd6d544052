"""One Spark session for every analysis test in the run (it takes seconds to start and the
machine's CPUs are shared)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    pytest.importorskip("pyspark")
    from miqm.analysis.spark import session

    s = session("local[2]", shuffle_partitions=2)
    yield s
    s.stop()
