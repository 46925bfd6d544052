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
from miqm.net.server import Listener
from tests.unit.test_client import put_committed, served, tls_listener_of  # noqa: F401  (served: fixture)
from tests.waiting import wait_until

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
    put_committed(bodies)
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


def test_permanent_refusals_and_a_first_connect_fail_at_once(served) -> None:  # noqa: F811
    """A wrong queue manager name (2058), and a queue manager that is down at the first
    connect (2059), are reported at once, not after the reconnect timeout."""
    import time

    conname = "{}({})".format(*served.listener.address)
    t0 = time.monotonic()
    with pytest.raises(mq.QMgrNameError) as info:
        mq.connect("QMX", conname=conname, reconnect_timeout=30)
    assert info.value.reason == 2058 and "strmqm" not in str(info.value)
    with pytest.raises(mq.QMgrNameError):
        mq.connect("QMX", reconnect_timeout=30)  # bindings mode: not defined here
    served.stop()
    with pytest.raises(mq.QMgrNotAvailable) as info2:
        mq.connect("QMC", reconnect_timeout=30)  # bindings mode
    assert info2.value.reason == 2059
    with pytest.raises(mq.QMgrNotAvailable):
        mq.connect("QMC", conname=conname, reconnect_timeout=30)
    assert time.monotonic() - t0 < 10


@pytest.mark.skipif(importlib.util.find_spec("ssl") is None, reason="needs ssl")
def test_tls_mismatches_are_2393_at_once(served, tmp_path) -> None:  # noqa: F811
    import os
    import shutil
    import time

    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command")
    from miqm.net.client import client_tls_context
    from tests.unit.test_client import _make_certs

    os.makedirs(tmp_path / "a")
    os.makedirs(tmp_path / "b")
    certs = _make_certs(str(tmp_path / "a"))
    other = _make_certs(str(tmp_path / "b"))  # another CA
    tls_listener, tls_conname = tls_listener_of(served, certs)
    plain_conname = "{}({})".format(*served.listener.address)
    good = client_tls_context(certs["ca.crt"], certs["client.crt"], certs["client.key"])
    cases = {
        "plain client on a TLS listener": (tls_conname, None),
        "TLS client on a plain listener": (plain_conname, good),
        "listener's CA not trusted": (tls_conname, client_tls_context(
            other["ca.crt"], other["client.crt"], other["client.key"])),
        "no client certificate": (tls_conname, client_tls_context(certs["ca.crt"])),
    }
    try:
        for what, (conname, ctx) in cases.items():
            t0 = time.monotonic()
            with pytest.raises(mq.SSLInitializationError) as info:
                mq.connect("QMC", conname=conname, tls=ctx, credential="x",
                           reconnect_timeout=30)
            assert info.value.reason == 2393, what
            assert "strmqm" not in str(info.value), what
            assert time.monotonic() - t0 < 8, what
        from tests.waiting import wait_until

        tls_listener.idle_timeout = 0.5
        with mq.connect("QMC", conname=tls_conname, tls=good) as qm:
            qm.put("Q1", b"fine")
            # dropped as idle: over TLS too the next call finds it and reconnects first
            wait_until(lambda: tls_listener.rejected.get("idle") == 1, "idle drop", 10)
            assert qm.get("Q1").body == b"fine"
            assert qm.reconnects == 1
    finally:
        tls_listener.stop()


def test_an_idle_connection_the_listener_dropped_is_made_again_first(
        served, monkeypatch) -> None:  # noqa: F811
    """The listener drops a connection quiet for its IdleTimeout: the next call finds
    that before sending anything and reconnects, so nothing is in doubt (no 2549); a unit
    of work open on it is reported lost (2003). Reads found broken in flight (inquire,
    browse) are resent."""
    from miqm.net.client import Connection
    from tests.waiting import wait_until

    served.listener.idle_timeout = 0.5
    with mq.connect("QMC", reconnect_timeout=10) as qm:
        qm.put("Q1", b"one")
        wait_until(lambda: served.listener.rejected.get("idle") == 1, "idle drop", 10)
        qm.put("Q1", b"two", persistent=True)  # not 2549: nothing had been sent
        wait_until(lambda: served.listener.rejected.get("idle") == 2, "idle drop", 10)
        assert int(qm.inquire("Q1")["MAXDEPTH"]) == 100000
        qm.put("Q1", b"three", syncpoint=True)
        qm.put("Q1", b"four", syncpoint=True)
        wait_until(lambda: served.listener.rejected.get("idle") == 3, "idle drop", 10)
        with pytest.raises(mq.BackedOut):
            qm.commit()  # known lost before reconnecting
        assert qm.get("Q1").body == b"one"
        assert qm.reconnects == 3
        # a break found only when the reply does not come (the look at the socket
        # missed it): a read is sent again, not reported as in doubt
        monkeypatch.setattr(Connection, "peer_closed", lambda self: False)
        served.listener.idle_timeout = 600
        served.listener.stop()
        served.store.close()
        served.start()
        assert int(qm.inquire("Q1")["MAXDEPTH"]) == 100000
        served.listener.stop()
        served.store.close()
        served.start()
        assert qm.browse("Q1").body == b"two"
        assert qm.get("Q1").body == b"two"


def test_a_closed_connection_refuses_every_call_with_2018(served) -> None:  # noqa: F811
    qm = mq.connect("QMC")
    qm.put("Q1", b"kept", persistent=True)
    qm.close()
    for call in (lambda: qm.put("Q1", b"x"), lambda: qm.get("Q1"),
                 lambda: qm.browse("Q1"), lambda: qm.inquire("Q1"), qm.commit,
                 qm.backout, lambda: qm.put("Q1", b"y", syncpoint=True),
                 lambda: qm.consume("Q1", wait=0).next(0)):
        with pytest.raises(mq.HConnError) as info:
            call()
        assert info.value.reason == 2018
    qm.close()  # twice is harmless
    with mq.connect("QMC") as qm2:
        pass
    with pytest.raises(mq.HConnError):
        qm2.put("Q1", b"z")
    with mq.connect("QMC") as qm3:
        assert qm3.get("Q1").body == b"kept"  # nothing was put after the close
        with pytest.raises(mq.NoMessageAvailable):
            qm3.get("Q1")


def test_two_consumers_stream_on_one_connection(served) -> None:  # noqa: F811
    served.store.define_queue("Q2", MAXDEPTH=100000)
    with mq.connect("QMC") as qm:
        for i in range(150):
            qm.put("Q1", b"a%d" % i, syncpoint=True)
            qm.put("Q2", b"b%d" % i, syncpoint=True)
        qm.commit()
        one = qm.consume("Q1", prefetch=20, wait=0.5)
        two = qm.consume("Q2", prefetch=30, wait=0.5)
        got_one, got_two = [], []
        for _ in range(100):  # interleaved
            got_one.append(one.next(5).body)
            got_two.append(two.next(5).body)
        one.close()
        three = qm.consume("Q1", prefetch=10, wait=0.5)  # a third, after the first ended
        got_one += [m.body for m in three]
        got_two += [m.body for m in two]
    assert got_one == [b"a%d" % i for i in range(150)]
    assert got_two == [b"b%d" % i for i in range(150)]


def test_bad_arguments_are_typed_mq_errors_and_wait_minus_one_is_unlimited(
        served, monkeypatch) -> None:  # noqa: F811
    import threading
    import time

    monkeypatch.setattr(mq, "_WAIT_SLICE", 0.3)  # an unlimited wait spans several calls

    with mq.connect("QMC") as qm:
        bad_puts = [
            (dict(body=5), 2004), (dict(body="text"), 2004), (dict(body=None), 2004),
            (dict(priority=3.7), 2050), (dict(priority=True), 2050),
            (dict(priority="5"), 2050), (dict(persistent="yes"), 2047),
            (dict(persistent=2), 2047), (dict(msgid=b"m" * 25), 2206),
            (dict(msgid="m"), 2206), (dict(correlid=7), 2207),
        ]
        for args, reason in bad_puts:
            args = {"body": b"x", **args}
            for syncpoint in (False, True):
                rest = {k: v for k, v in args.items() if k != "body"}
                with pytest.raises(mq.InvalidArgument) as info:
                    qm.put("Q1", args["body"], syncpoint=syncpoint, **rest)
                assert info.value.reason == reason, args
                assert isinstance(info.value, ValueError)
        qm.commit()  # nothing was sent
        for wait in (float("inf"), 1e20, float("nan"), -2, -0.5, True, "1", None):
            with pytest.raises(mq.InvalidArgument) as info:
                qm.get("Q1", wait=wait)
            assert info.value.reason == 2090, wait
        with pytest.raises(mq.NoMessageAvailable):
            qm.get("Q1")
        qm.put("Q1", bytearray(b"ba"), persistent=1, priority=4, correlid=b"c1")
        # an empty or all-zero id selects nothing (MQCI_NONE, MQMI_NONE)
        assert qm.browse("Q1", correlid=b"", msgid=bytes(24)).body == b"ba"
        got = qm.get("Q1", correlid=b"")
        assert got.body == b"ba" and got.persistent and got.priority == 4

        # -1 waits without limit (MQWI_UNLIMITED): the message put later arrives
        def later() -> None:
            time.sleep(1.0)
            with mq.connect("QMC") as other:
                other.put("Q1", b"late")

        t = threading.Thread(target=later)
        t0 = time.monotonic()
        t.start()
        try:
            assert qm.get("Q1", wait=-1).body == b"late"
        finally:
            t.join()
        assert time.monotonic() - t0 >= 0.9


def test_error_classes_default_to_their_own_reason_and_conname_is_named() -> None:
    import os

    classes = {mq.NotAuthorized: 2035, mq.NoMessageAvailable: 2033,
               mq.UnknownObjectName: 2085, mq.StandbyQMgr: 2543, mq.QMgrNotAvailable: 2059,
               mq.ConnectionBroken: 2009, mq.CallInterrupted: 2549, mq.BackedOut: 2003,
               mq.QMgrNameError: 2058, mq.SSLInitializationError: 2393,
               mq.HConnError: 2018, mq.ReconnectFailed: 2548}
    for cls, reason in classes.items():
        assert cls("x").reason == reason, cls
        assert cls("x", mqrc=2195).reason == 2195
    for bad in ("hosta", "hosta(1414),hostb(x)", " , "):
        with pytest.raises(mq.MQError) as info:
            mq.connect("QM1", conname=bad)
        assert info.value.reason == 2278
        assert "conname" in str(info.value) and "MIQM_CONNECTION" not in str(info.value)
    assert os.path.exists(os.path.join(os.path.dirname(mq.__file__), "py.typed"))


def test_a_refused_commit_backs_the_unit_out_so_the_next_unit_starts_clean() -> None:
    """A commit the queue manager refused without doing it (here: 2195) left the unit
    open on the server while the client took it as ended: the application's next unit
    joined it and its commit committed both. The client now backs the refused unit out
    on the server and says so."""
    from miqm.errors import NetError
    from miqm.net.client import Endpoint, connect
    from miqm.net.server import Listener

    ops: list[str] = []

    def handle(request: dict, session: object) -> dict:
        ops.append(str(request.get("op")))
        if request.get("op") == "hello":
            return {"ok": True, "qmgr": "QM1", "host": "h", "session": 1, "version": 2}
        if request.get("op") == "commit" and ops.count("commit") == 1:
            return {"ok": False, "mqrc": 2195, "error": "the commit was refused"}
        return {"ok": True}

    listener = Listener(handle)
    host, port = listener.start()
    try:
        with connect("QM1", endpoints=[Endpoint(host, port)]) as conn:
            conn.call("put", queue="Q", body=b"first", syncpoint=True)
            with pytest.raises(NetError) as info:
                conn.call("commit")
            assert info.value.mqrc == 2195 and "backed out" in str(info.value)
            assert ops[-2:] == ["commit", "backout"]
            conn.call("put", queue="Q", body=b"second", syncpoint=True)
            conn.call("commit")
            assert ops[-2:] == ["put", "commit"]
    finally:
        listener.stop()


def _slow_commits(served, monkeypatch) -> None:  # noqa: F811
    """Each commit of the served store takes 0.3 s more (a consumer's acknowledged
    batches stay being committed for a while)."""
    import time

    real_commit = served.store.commit

    def slow_commit(uow: object) -> None:
        time.sleep(0.3)
        real_commit(uow)

    monkeypatch.setattr(served.store, "commit", slow_commit)


def test_closing_a_consumer_returns_once_its_acknowledged_batches_are_committed(
        served, monkeypatch) -> None:  # noqa: F811
    """A consumer's close waits for the cancel's reply, which said every batch
    acknowledged before it was committed; the server answered before its committer
    threads had done so. A crash just after brought back, unmarked, messages the
    application had had. With each commit slowed, the messages are gone from the queue
    when close returns."""
    put_committed([b"c%03d" % i for i in range(40)])
    _slow_commits(served, monkeypatch)
    with mq.connect("QMC") as qm:
        consumer = qm.consume("Q1", prefetch=10)
        got = [consumer.next(5.0) for _ in range(20)]
        assert all(m is not None for m in got)
        consumer.close()
        attrs = served.store.queue_attrs("Q1")
    assert attrs["CURDEPTH"] == 20 and attrs["UNCOM"] == "NO", attrs  # all committed


def test_a_consumer_told_of_an_end_counts_confirmations_that_came_after_the_word(
        served, monkeypatch) -> None:  # noqa: F811
    """A controlled end's word (2161) reached the consumer before the confirmations of
    the batches it had acknowledged (their commits were still running), and the instance
    ended before the consumer's cancel: the confirmations, read on the cancel's way, settle
    those batches, so the consumer does not say that messages may come again when none
    will."""
    from miqm.net.service import quiesce_reply

    put_committed([b"e%03d" % i for i in range(20)])
    _slow_commits(served, monkeypatch)
    service = served.listener.handler.__self__
    with mq.connect("QMC", reconnect=False) as qm:
        consumer = qm.consume("Q1", prefetch=10)
        got = [consumer.next(5.0) for _ in range(20)]  # both batches handed out, acked
        assert all(m is not None for m in got)
        service.quiesce(2161)  # its word goes out before the commits end
        # as a controlled end does: until no batch is unacknowledged or uncommitted
        wait_until(lambda: service.open_units() == 0,
                   "the acknowledged batches are committed and confirmed", timeout=10)
        served.listener.quiesce(quiesce_reply(2161, False, notice=True))
        served.listener.stop()
        with pytest.raises(mq.QMgrQuiescing) as info:
            consumer.next(5.0)
        assert "may be delivered again" not in str(info.value), str(info.value)
    served.listener = Listener(service.handle)  # for the fixture's stop
    served.listener.start()
