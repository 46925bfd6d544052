"""kill -9 of an active instance holding a deep queue (and many empty queues): the standby
takes over from the queue's index file and the queue catalog, and every message is
there, once, with its content, in order per priority. The figures of how long that takes
at a million messages are `miqm bench failover --backlog` (docs/benchmarks.md)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockfs.posix import PosixVolume
from miqm.bench.failover import (
    BACKLOG_QUEUE,
    event_lines,
    fill_backlog,
    host_events,
    wait_event,
)
from miqm.localpair import LocalPair
from miqm.store import checkpoint as ckpt
from tests.integration.test_multi_instance import TUNING, _errlog, _events, created_pair

pytestmark = pytest.mark.integration

DEPTH = 3000  # above index_min_records (1024): the queue gets an index file
QUEUES = 40


@pytest.fixture
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LocalPair]:
    yield from created_pair(request, tmp_path, TUNING)


def _body(i: int) -> bytes:
    return b"deep-%06d" % i


def _checkpoint_seq(data: Path) -> int:
    return ckpt.read(PosixVolume(str(data))).seq


def test_kill_9_with_a_deep_queue_keeps_every_message_in_order(pair: LocalPair) -> None:
    fill_backlog(pair, DEPTH, QUEUES, body=_body)
    data = Path(pair.data_dir())
    assert (data / "queues" / BACKLOG_QUEUE / "idx").exists()
    assert (data / "amqalcat.fil").exists()
    assert "started using" in pair.start(pair.a)
    seen = event_lines(pair.b.root, pair.qmgr, pair.b.name)
    assert "standby instance" in pair.start(pair.b)
    active = pair.wait_active()
    # more after the last checkpoint: replayed from the log on top of the index
    pair.put(pair.host(active["host"]), BACKLOG_QUEUE, ["late-1", "late-2"])
    pair.put(pair.host(active["host"]), "BACKLOG.Q00007", ["on-an-empty-one"])
    # the standby reads ahead as it starts (a few ms for this index) and says so
    ahead = wait_event(pair.b.root, pair.qmgr, pair.b.name, "readahead", seen, 30)
    assert ahead is not None and ahead["files"] >= 1, ahead
    before = _checkpoint_seq(data)
    killed = pair.kill_active()
    new = pair.wait_active(not_host=killed["host"], timeout=60)
    host = pair.host(new["host"])
    end = [e for e in _events(pair, new["host"]) if e["event"] == "failover_end"][-1]
    # it served before its checkpoint, which the checkpoint thread took a moment later
    assert end["checkpoint"] == "deferred", end
    # the three late puts were left to their queues' first use (or that checkpoint)
    assert end["deferred_puts"] == 3, end
    assert set(end["phases"]) == {"lock", "open", "serve"}, end
    inner = end["open_phases"]
    assert set(inner) == {"load", "replay"} and \
        inner["load"] + inner["replay"] <= end["phases"]["open"], end
    deadline = time.monotonic() + 30
    while _checkpoint_seq(data) == before:
        assert time.monotonic() < deadline, "the deferred checkpoint was never taken"
        time.sleep(0.05)
    # the index as the standby read it ahead, the delta of the late puts on top; the
    # empty queues from the catalog
    assert end["queues"]["prefetched_queues"] == 1, end
    assert end["queues"]["catalog_queues"] >= QUEUES - 2, end
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


def test_kill_9_twice_under_load_with_a_deep_queue(pair: LocalPair) -> None:
    """Producers and consumers (under syncpoint and outside it) work on a deep queue while
    the active is killed, and the new active is killed again as soon as the old host is
    back as its standby (before any checkpoint of its own but the one that ended its
    open). That checkpoint recorded the deep queue's changes as a delta of its index, so
    the second takeover opens from the index too; and nothing is lost, duplicated or
    brought back: every committed put and every message of the backlog is delivered or
    still on the queue, exactly once."""
    import json
    import threading
    import time

    from miqm.bench import campaign
    from miqm.bench.clients import client_of
    from miqm.bench.failover import fill_store, open_store_at

    fill_store(open_store_at(pair.data_dir(), pair.qmgr), DEPTH, 1, body=_body,
               queue=campaign.QUEUE)
    assert "started using" in pair.start(pair.a)
    assert "standby instance" in pair.start(pair.b)
    ledger = campaign._Ledger()
    stop = threading.Event()
    with client_of(pair.b.root, pair.b.name):
        workers = [threading.Thread(target=campaign._producer,
                                    args=(pair.qmgr, i, 3, stop, ledger), daemon=True)
                   for i in range(2)]
        workers += [threading.Thread(target=campaign._consumer,
                                     args=(pair.qmgr, i, i == 0, stop, ledger), daemon=True)
                    for i in range(2)]
        for w in workers:
            w.start()
        try:
            time.sleep(1.0)
            first = pair.kill_active()
            second = pair.wait_active(not_host=first["host"], timeout=60, poll=0.01)
            info = json.loads((Path(pair.data_dir()) / "amqalchk.fil").read_bytes()[16:])
            pair.start(pair.host(first["host"]))  # back as the standby, then at once:
            pair.kill_active()
            pair.wait_active(not_host=second["host"], timeout=60, poll=0.01)
            pair.start(pair.host(second["host"]))
            time.sleep(1.0)
        finally:
            stop.set()
            for w in workers:
                w.join(90)
        got = campaign._drain(pair.qmgr)
    # the open's checkpoint of the first takeover wrote a delta, not nothing
    assert campaign.QUEUE in info["idxd"] or campaign.QUEUE in info["idx"], info
    audit = campaign._audit(ledger, got)
    assert len(ledger.committed) > 10 and len(ledger.delivered) > 10, ledger
    # the backlog's messages are the only ones no producer of the ledger put
    backlog = {_body(i).decode() for i in range(DEPTH)}
    final = [*got, *ledger.delivered]
    known = {m for units in (ledger.committed, ledger.backed_out, ledger.unknown)
             for u in units for m in u}
    assert audit == {**audit, "lost": 0, "duplicated": 0, "resurrected": 0,
                     "torn_units": 0, "torn_gets": 0}, audit
    assert not {m for m in final if m not in known and m not in backlog}
    maybe = {m for u in ledger.delivered_unknown for m in u}
    missing = {m for m in backlog if m not in final and m not in maybe}
    assert len(missing) <= ledger.gets_uncertain, sorted(missing)[:10]
    log = _errlog(pair)
    assert "AMQ1130" not in log and "AMQ1131" not in log, log[-3000:]


@pytest.fixture
def pair_without_read_ahead(request: pytest.FixtureRequest,
                            tmp_path: Path) -> Iterator[LocalPair]:
    yield from created_pair(request, tmp_path, {**TUNING, "StandbyReadAhead": "No"})


def test_a_standby_told_not_to_read_ahead_reads_at_takeover(
        pair_without_read_ahead: LocalPair) -> None:
    """StandbyReadAhead=No (qm.ini): the standby holds nothing of the queues; the new
    active reads the index itself, and every message is there."""
    pair = pair_without_read_ahead
    fill_backlog(pair, DEPTH, 2, body=_body)
    assert "started using" in pair.start(pair.a)
    seen = event_lines(pair.b.root, pair.qmgr, pair.b.name)
    assert "standby instance" in pair.start(pair.b)
    time.sleep(1.5)  # longer than a read-ahead standby would need
    assert not [e for e in host_events(pair.b.root, pair.qmgr, pair.b.name, seen)
                if e["event"] == "readahead"]
    killed = pair.kill_active()
    new = pair.wait_active(not_host=killed["host"], timeout=60)
    end = [e for e in _events(pair, new["host"]) if e["event"] == "failover_end"][-1]
    assert end["queues"]["prefetched_queues"] == 0, end
    assert end["queues"]["indexed_queues"] == 1, end
    assert len(pair.get_all(pair.host(new["host"]), BACKLOG_QUEUE)) == DEPTH


def test_backlog_rounds_alternate_the_cases_and_pool_their_takeovers() -> None:
    """``miqm bench failover --backlog 0,0x20 --cycles 1 --rounds 2`` in short: the cases
    run in turn (one queue, twenty, one, twenty), each on a new pair with real kill -9
    takeovers, and each case's row pools its rounds."""
    from miqm.bench.failover import bench_backlog

    lines: list[str] = []
    result = bench_backlog([(0, 1), (0, 20)], cycles=1, echo=lines.append, rounds=2)
    started = [line for line in lines if line.startswith(("round ", "depth 0, "))
               and line.endswith(("filling ...", ":"))]
    assert started == ["round 1/2:", "depth 0, 1 queue(s): filling ...",
                       "round 1/2:", "depth 0, 20 queue(s): filling ...",
                       "round 2/2:", "depth 0, 1 queue(s): filling ...",
                       "round 2/2:", "depth 0, 20 queue(s): filling ..."], lines
    assert result["rounds"] == 2
    one, many = result["cases"]
    assert (one["queues"], many["queues"], one["rounds"], many["rounds"]) == (1, 20, 2, 2)
    assert len(one["takeover_seconds"]) == 2 and len(many["takeover_seconds"]) == 2
    assert all(0 < t < 60 for t in one["takeover_seconds"] + many["takeover_seconds"])
    assert len(many["first_takeovers"]) == 2 and many["first_takeover"] is not None
    assert len(many["lock_to_serving_seconds"]) == 2 and one["ratio"] == 1.0
