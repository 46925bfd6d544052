"""kill -9 of an active instance holding a deep queue (and many empty queues): the standby
takes over from the queue's index file and the queue catalog, and every message is
there, once, with its content, in order per priority. The figures of how long that takes
at a million messages are `miqm bench failover --backlog` (docs/benchmarks.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from miqm.bench.failover import BACKLOG_QUEUE, fill_backlog
from miqm.localpair import LocalPair
from tests.integration.test_multi_instance import TUNING, _errlog, created_pair

pytestmark = pytest.mark.integration

DEPTH = 3000  # above index_min_records (1024): the queue gets an index file
QUEUES = 40


@pytest.fixture
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LocalPair]:
    yield from created_pair(request, tmp_path, TUNING)


def _body(i: int) -> bytes:
    return b"deep-%06d" % i


def test_kill_9_with_a_deep_queue_keeps_every_message_in_order(pair: LocalPair) -> None:
    fill_backlog(pair, DEPTH, QUEUES, body=_body)
    data = Path(pair.data_dir())
    assert (data / "queues" / BACKLOG_QUEUE / "idx").exists()
    assert (data / "amqalcat.fil").exists()
    assert "started using" in pair.start(pair.a)
    assert "standby instance" in pair.start(pair.b)
    active = pair.wait_active()
    # more after the last checkpoint: replayed from the log on top of the index
    pair.put(pair.host(active["host"]), BACKLOG_QUEUE, ["late-1", "late-2"])
    pair.put(pair.host(active["host"]), "BACKLOG.Q00007", ["on-an-empty-one"])
    killed = pair.kill_active()
    new = pair.wait_active(not_host=killed["host"], timeout=60)
    host = pair.host(new["host"])
    got = pair.get_all(host, BACKLOG_QUEUE)
    # delivery order: priority 9 first, first in first out within a priority; the
    # late ones were put at the default priority 0
    want = [_body(i).decode() for p in range(9, -1, -1) for i in range(p, DEPTH, 10)]
    want += ["late-1", "late-2"]
    assert len(got) == len(want) and len(set(got)) == len(got)
    assert got == want
    assert pair.get_all(host, "BACKLOG.Q00007") == ["on-an-empty-one"]
    log = _errlog(pair)
    # the new active used the index and the catalog: neither was reported unusable
    assert "AMQ1130" not in log and "AMQ1131" not in log, log[-3000:]
