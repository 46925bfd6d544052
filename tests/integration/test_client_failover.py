"""The client library against real instances (crtmqm, strmqm, endmqm in their own
processes, two 'hosts' on this machine): a unit of work open when the instance ends
with ``endmqm -i`` stays lost even when the reconnect gives up (2548, then 2003, never a
half commit), and a streaming consumer across a switchover (``endmqm -s``) delivers
every message, none a second time without saying so."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from miqm import client as mq
from miqm.localpair import LocalPair

pytestmark = pytest.mark.integration

QM = "QMCLF"


def bindings_pair(qmgr: str, tmp_path: Any, monkeypatch: Any) -> Iterator[LocalPair]:
    """Queue manager ``qmgr`` created on two 'hosts', this test process a client of it in
    bindings mode on host A (it follows the listener the active instance records in the
    shared data directory); closed after."""
    p = LocalPair(qmgr=qmgr, base=str(tmp_path))
    try:
        p.create()
        monkeypatch.setenv("MIQM_DATA_ROOT", p.a.root)
        monkeypatch.delenv("MIQM_CONNECTION", raising=False)
        monkeypatch.delenv("MIQM_CREDENTIAL", raising=False)
        yield p
    finally:
        p.close()


@pytest.fixture()
def pair(tmp_path, monkeypatch) -> Iterator[LocalPair]:
    yield from bindings_pair(QM, tmp_path, monkeypatch)


def test_a_unit_open_at_endmqm_i_is_never_half_committed(pair) -> None:
    pair.start(pair.a)
    pair.mqsc(pair.a, "DEFINE QLOCAL(Q1) DEFPSIST(YES)\n")
    qm = mq.connect(QM, reconnect_timeout=3)
    try:
        qm.put("Q1", b"debit", syncpoint=True)
        qm.put("Q1", b"debit2", syncpoint=True)
        pair.run(pair.a, "endmqm", "-i", QM)
        # found before sending (the connection is seen closed: the unit is known lost,
        # 2003) or in flight (the reconnect gives up: 2548)
        with pytest.raises((mq.BackedOut, mq.ReconnectFailed)):
            qm.get("Q1", syncpoint=True)
        t0 = time.monotonic()
        with pytest.raises(mq.ReconnectFailed) as info:
            qm.inquire("Q1")  # nothing to reconnect to: not 2059 for an established one
        assert info.value.reason == 2548 and time.monotonic() - t0 < 15
        pair.start(pair.a)
        with pytest.raises(mq.BackedOut):
            qm.put("Q1", b"credit", syncpoint=True)
        with pytest.raises(mq.BackedOut):
            qm.commit()
        qm.put("Q1", b"credit", syncpoint=True)
        qm.commit()
        assert qm.get("Q1").body == b"credit"
        with pytest.raises(mq.NoMessageAvailable):
            qm.get("Q1")
    finally:
        qm.close()


def test_a_consumer_across_a_switchover_flags_every_redelivery(pair) -> None:
    pair.start(pair.a)
    pair.start(pair.b)
    pair.mqsc(pair.a, "DEFINE QLOCAL(Q1) MAXDEPTH(100000)\n")
    n = 2000
    bodies = [f"m{i:05d}".encode() for i in range(n)]
    with mq.connect(QM) as qm:
        for i, b in enumerate(bodies):
            qm.put("Q1", b, persistent=True, syncpoint=True)
            if i % 200 == 199:
                qm.commit()
        qm.commit()
    seen: list[mq.Message] = []
    ender: threading.Thread | None = None
    with mq.connect(QM, reconnect_timeout=60) as qm:
        consumer = qm.consume("Q1", prefetch=100)
        while len({m.body for m in seen}) < n:
            msg = consumer.next(60)
            assert msg is not None, f"the consumer stalled after {len(seen)}"
            seen.append(msg)
            if ender is not None and qm.reconnects == 0:
                time.sleep(0.01)  # an application that takes its time: mid-stream
            if len(seen) == 750:
                ender = threading.Thread(target=pair.run, args=(
                    pair.a, "endmqm", "-s", QM), kwargs={"check": False}, daemon=True)
                ender.start()
        consumer.close()
        assert qm.reconnects >= 1 and qm.host == "hostb"
    assert ender is not None
    ender.join(60)
    first: set[bytes] = set()
    for m in seen:
        if m.body in first:
            assert m.redelivered, f"{m.body!r} delivered twice without being flagged"
        first.add(m.body)
    assert first == set(bodies)


def test_a_syncpoint_consumer_across_a_switchover_and_a_kill(pair) -> None:
    """A consumer under syncpoint holding messages in a unit of work at ``endmqm -s``:
    told once (2009/2003), it backs out and iterates the same consumer again; every
    message comes, the ones it had come again marked although the new active has no
    backout counts. Then, waiting with nothing in its unit at a ``kill -9`` of the
    active instance, it is not told at all and gets what is put after the failover."""
    pair.start(pair.a)
    pair.start(pair.b)
    pair.mqsc(pair.a, "DEFINE QLOCAL(Q1) DEFPSIST(YES)\n")
    bodies = [f"s{i:02d}".encode() for i in range(20)]
    with mq.connect(QM) as qm:
        for b in bodies:
            qm.put("Q1", b, syncpoint=True)
        qm.commit()
    seen: list[mq.Message] = []
    told: list[int] = []
    with mq.connect(QM, reconnect_timeout=60) as qm:
        consumer = qm.consume("Q1", syncpoint=True)
        for _loop in range(5):  # told once: two loops (an error ended the next silently)
            if len({m.body for m in seen}) == len(bodies):
                break
            try:
                for msg in consumer:
                    seen.append(msg)
                    if len(seen) == 5:
                        pair.run(pair.a, "endmqm", "-s", QM)  # the unit holds five
                    elif len(seen) > 5 and len(seen) % 4 == 0:
                        qm.commit()
                    if len({m.body for m in seen}) == len(bodies):
                        break
            except (mq.ConnectionBroken, mq.BackedOut) as exc:
                told.append(exc.reason)
                qm.backout()
        qm.commit()
        assert told and qm.host == "hostb"
        first: set[bytes] = set()
        for m in seen:
            if m.body in first:
                assert m.redelivered, f"{m.body!r} delivered twice without being flagged"
            first.add(m.body)
        assert first == set(bodies)
        assert [m.body for m in seen if m.redelivered] == bodies[:5]

        pair.start(pair.a)  # the standby again, for the kill
        consumer = qm.consume("Q1", syncpoint=True)
        assert consumer.next(0) is None  # waiting, nothing in its unit
        pair.kill_active()
        pair.wait_active(not_host="hostb", timeout=60)
        with mq.connect(QM) as other:
            other.put("Q1", b"after the kill")
        msg = consumer.next(60)  # it raised 2009: an empty unit was taken as lost
        assert msg is not None and msg.body == b"after the kill"
        qm.commit()
        assert qm.host == "hosta"
