"""One Spark session for every analysis test in the run (it takes seconds to start and the
machine's CPUs are shared)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

#: small histories: Spark's CPU goes mostly to the JIT compiling Spark; C1 alone halves it
QUICK_JVM = "-XX:TieredStopAtLevel=1"


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    pytest.importorskip("pyspark")
    from miqm.analysis.spark import session

    s = session("local[2]", shuffle_partitions=2, java_options=QUICK_JVM)
    yield s
    s.stop()
