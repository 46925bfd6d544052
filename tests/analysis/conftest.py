"""One Spark session for every analysis test (it takes seconds to start and the machine's
CPUs are shared), stopped after the last of them: kept for the whole run, its idle JVM
took a sixth of a CPU from every test after it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

#: small histories: Spark's CPU goes mostly to the JIT compiling Spark; C1 alone halves it
QUICK_JVM = "-XX:TieredStopAtLevel=1"


@pytest.fixture(scope="package")
def spark() -> Iterator[object]:
    pytest.importorskip("pyspark")
    from miqm.analysis.spark import session

    s = session("local[2]", shuffle_partitions=2, java_options=QUICK_JVM)
    yield s
    s.stop()
