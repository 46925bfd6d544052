"""The client library where connections fail: a unit of work broken by a reconnect
that gave up, a streaming consumer whose acknowledgement meets a broken connection,
permanent refusals at connect, idle connections the listener dropped, closed handles,
several consumers on one connection and bad arguments. Against the real store behind
the real listener in this process (``served`` from test_client.py), which a test ends
and starts again as ``endmqm -i`` / ``strmqm`` would."""

from __future__ import annotations

import importlib.util

import pytest

from miqm import client as mq
from tests.unit.test_client import served  # noqa: F401  (the fixture)

pytestmark = pytest.mark.skipif(importlib.util.find_spec("miqm.store.log") is None,
                                reason="needs the store's recovery log")


def test_a_unit_broken_by_a_failed_reconnect_is_never_half_committed(served) -> None:  # noqa: F811
    qm = mq.connect("QMC", reconnect_timeout=1)
    try:
        qm.put("Q1", b"debit", syncpoint=True)
        qm.put("Q1", b"debit2", syncpoint=True)
        served.stop()  # endmqm -i
        with pytest.raises(mq.ReconnectFailed) as info:
            qm.get("Q1", syncpoint=True)
        assert info.value.reason == 2548 and "backed out" in str(info.value)
        served.start()  # strmqm
        with pytest.raises(mq.BackedOut):
            qm.put("Q1", b"credit", syncpoint=True)
        with pytest.raises(mq.BackedOut) as info2:
            qm.commit()  # reports the lost unit once, and ends it
        assert info2.value.reason == 2003
        qm.put("Q1", b"credit", syncpoint=True)
        qm.commit()
        assert qm.get("Q1").body == b"credit"
        with pytest.raises(mq.NoMessageAvailable):
            qm.get("Q1")

        # a commit asked for after the failed reconnect reports the loss too, and a
        # backout ends the lost unit without complaint
        qm.put("Q1", b"a", syncpoint=True)
        qm.put("Q1", b"b", syncpoint=True)
        served.stop()
        with pytest.raises(mq.ReconnectFailed):
            qm.get("Q1", syncpoint=True)
        with pytest.raises(mq.BackedOut):
            qm.commit()  # known lost, even with nothing to reconnect to yet
        served.start()
        qm.commit()  # the lost unit was reported once: nothing open now
        qm.put("Q1", b"c", syncpoint=True)
        served.stop()
        with pytest.raises(mq.ReconnectFailed):
            qm.browse("Q1")
        served.start()
        qm.backout()
        qm.commit()  # nothing open, nothing lost
        with pytest.raises(mq.NoMessageAvailable):
            qm.get("Q1")
    finally:
        qm.close()


def test_a_consumer_whose_ack_meets_a_broken_connection_flags_what_comes_again(
        served) -> None:  # noqa: F811
    """The instance restarts (its in-memory backout counts gone) just before the
    application is handed the last message of a batch: the acknowledgement's send finds
    the connection broken and reconnects. The batch was never committed, so its messages
    come again: each must say so (backout_count >= 1)."""
    import socket

    bodies = [f"s{i:04d}".encode() for i in range(300)]
    with mq.connect("QMC") as qm:
        for b in bodies:
            qm.put("Q1", b, persistent=True, syncpoint=True)
        qm.commit()
    seen: list[mq.Message] = []
    restarted = False
    with mq.connect("QMC", reconnect_timeout=20) as qm:
        consumer = qm.consume("Q1", prefetch=40)
        while len({m.body for m in seen}) < len(bodies):
            batch = consumer._batch
            if (not restarted and len(seen) > 50 and batch is not None
                    and consumer._index == len(batch[1]) - 1):
                served.listener.stop()  # endmqm -i, then strmqm
                served.store.close()
                served.start()
                qm._conn._sock.shutdown(socket.SHUT_WR)  # the ack's send fails
                restarted = True
            msg = consumer.next(10)
            assert msg is not None, "the consumer stalled"
            seen.append(msg)
        consumer.close()
        assert restarted and qm.reconnects >= 1
    first: set[bytes] = set()
    again = 0
    for m in seen:
        if m.body in first:
            again += 1
            assert m.redelivered, f"{m.body!r} delivered twice without being flagged"
        first.add(m.body)
    assert first == set(bodies) and again >= 1
