"""The client library as an MQ application developer uses it for the first time: threads
sharing one connection, ``close()`` from another thread, consumers under syncpoint across
a restart of the instance (an idle one is not told; messages of a lost unit come again
marked), errors that leave a consumer to iterate again, arguments of the wrong kind
(prefetch, consumer waits, queue and queue manager names, timeouts), a blank queue
manager name, and the amqsget sample's --wait. Against the real store behind the real
listener in this process (``served`` from test_client.py), ended and started again as
``endmqm -i`` / ``strmqm`` would (a new instance: no backout counts in memory)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import signal
import threading
import time
from typing import Any

import pytest

from miqm import client as mq
from tests.unit.test_client import put_committed, served  # noqa: F401  (served: fixture)
from tests.waiting import wait_until

pytestmark = pytest.mark.skipif(importlib.util.find_spec("miqm.store.log") is None,
                                reason="needs the store's recovery log")


def busy(qm: mq.QueueManager) -> bool:
    """Whether some thread is in a call on ``qm``."""
    if not hasattr(qm, "_busy"):  # a release without the guard: give the call time
        time.sleep(1.0)
        return True
    if qm._busy.acquire(False):
        qm._busy.release()
        return False
    return True


def in_thread(target: Any) -> tuple[threading.Thread, list[Any]]:
    """``target()`` in a thread; the list gets what it returned or raised."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(target())
        except BaseException as exc:  # handed to the test
            out.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def test_a_second_thread_is_refused_with_2219_and_close_wakes_the_first(served) -> None:  # noqa: F811
    """Two threads on one connection mixed their requests on the wire: replies went to
    the wrong call, a get's message could be lost. The second is refused (MQ's
    MQCNO_HANDLE_SHARE_NO_BLOCK), and close() from it ends the first's get-wait."""
    qm = mq.connect("QMC")
    t, out = in_thread(lambda: qm.get("Q1", wait=600))
    wait_until(lambda: busy(qm), "the get-wait under way")
    with pytest.raises(mq.CallInProgress) as info:
        qm.put("Q1", b"x")
    assert info.value.reason == 2219
    with pytest.raises(mq.CallInProgress):
        qm.put("Q1", b"x", syncpoint=True)
    with pytest.raises(mq.CallInProgress):
        qm.commit()
    qm.close()  # any thread may close
    t.join(60)
    assert not t.is_alive(), "close() from another thread did not end the get-wait"
    assert isinstance(out[0], mq.HConnError) and out[0].reason == 2018
    with mq.connect("QMC") as other:  # nothing was put by the refused calls
        with pytest.raises(mq.NoMessageAvailable):
            other.get("Q1")


def test_close_from_another_thread_ends_a_consumer_loop_and_nothing_is_lost(
        served) -> None:  # noqa: F811
    put_committed([b"a", b"b", b"c"])
    qm = mq.connect("QMC", reconnect_timeout=5)
    seen: list[bytes] = []
    started = threading.Event()

    def loop() -> str:
        for msg in qm.consume("Q1", prefetch=10):
            seen.append(msg.body)
            started.set()
        return "ended"

    t, out = in_thread(loop)
    assert started.wait(60)
    wait_until(lambda: busy(qm), "the consumer waiting for more")
    qm.close()
    t.join(60)
    assert not t.is_alive(), "the consumer reconnected a connection the application closed"
    assert out == ["ended"]
    with mq.connect("QMC") as other:
        rest = [m.body for m in other.consume("Q1", wait=0.5)]
    assert sorted(seen + rest) == [b"a", b"b", b"c"]


def test_closing_a_consumer_from_another_thread_ends_its_loop(served) -> None:  # noqa: F811
    with mq.connect("QMC") as qm:
        consumer = qm.consume("Q1", prefetch=10)
        t, out = in_thread(lambda: list(consumer))
        wait_until(lambda: busy(qm), "the consumer waiting")
        consumer.close()
        t.join(60)
        assert not t.is_alive() and out == [[]]
        assert qm._consumers == []


def test_an_idle_consumer_under_syncpoint_is_not_told_of_a_restart(served) -> None:  # noqa: F811
    """A get under syncpoint that got nothing (2033) held nothing: the instance ending
    and coming back cost the consumer nothing, so it goes on (it raised 2003, then the
    loop was over)."""
    with mq.connect("QMC", reconnect_timeout=30) as qm:
        consumer = qm.consume("Q1", syncpoint=True)
        assert consumer.next(0) is None
        served.stop()
        served.start()
        put_committed([b"after"])
        msg = consumer.next(30)
        assert msg is not None and msg.body == b"after" and msg.backout_count == 0
        qm.commit()


def test_a_unit_lost_with_the_instance_comes_again_marked_and_the_loop_goes_on(
        served) -> None:  # noqa: F811
    """A consumer under syncpoint holding messages in a unit of work when the instance
    ends: the application is told (2003/2009), backs out and iterates the same consumer
    again; the messages it had come again with backout_count >= 1 although the new
    instance has no counts, the others with 0."""
    put_committed([b"m0", b"m1", b"m2", b"m3"])
    with mq.connect("QMC", reconnect_timeout=30) as qm:
        consumer = qm.consume("Q1", syncpoint=True, wait=2)
        got: list[mq.Message] = []
        with pytest.raises((mq.BackedOut, mq.ConnectionBroken)):
            for msg in consumer:
                got.append(msg)
                if len(got) == 2:
                    served.stop()  # endmqm -i ...
                    served.start()  # ... strmqm: a new instance, its counts gone
        qm.backout()
        for msg in consumer:  # not closed by the error: iterate again
            got.append(msg)
        qm.commit()
    assert [(m.body, m.backout_count >= 1) for m in got] == [
        (b"m0", False), (b"m1", False), (b"m0", True), (b"m1", True), (b"m2", False),
        (b"m3", False)]


def test_the_documented_syncpoint_loop_goes_on_after_a_commit_lost_to_a_restart(
        served) -> None:  # noqa: F811
    """docs/client.md's loop: ``for msg in consumer: handle(msg); qm.commit()`` inside
    ``while True: try ... except (ConnectionBroken, BackedOut, CallInterrupted):
    qm.backout()``. The instance ends between a get and its commit, so the commit (in
    the loop's body) raises 2549 (or 2003). Leaving the loop closed the consumer, and
    iterating it again ended at once: the ``while True`` spun for ever at full CPU. Now
    the loop goes on, and the message of the lost unit comes again marked."""
    put_committed([b"m0", b"m1", b"m2"])
    handled: list[tuple[bytes, bool]] = []
    errors: list[int] = []
    with mq.connect("QMC", reconnect_timeout=30) as qm:
        consumer = qm.consume("Q1", syncpoint=True, wait=2)
        for _ in range(10):  # the documented loop is `while True`; bounded to fail
            try:
                for msg in consumer:
                    handled.append((msg.body, msg.redelivered))
                    if len(handled) == 2:
                        served.stop()  # the instance ends with m1 in the unit ...
                        served.start()  # ... and a new one (no backout counts) serves
                    qm.commit()
                break  # the consumer's wait ended: the queue is drained
            except (mq.ConnectionBroken, mq.BackedOut, mq.CallInterrupted) as exc:
                errors.append(exc.reason)
                qm.backout()
        with pytest.raises(mq.MQError) as info:  # closed by close(): told, not silent
            consumer.close()
            next(iter(consumer))
        assert info.value.reason == 2019
    assert len(errors) == 1 and errors[0] in (2003, 2549), errors
    assert handled == [(b"m0", False), (b"m1", False), (b"m1", True), (b"m2", False)]


def test_a_consumer_left_by_break_resumes_when_iterated_again(served) -> None:  # noqa: F811
    """A break ended the stream (the rest of the batch back on the queue); iterating the
    consumer again gave nothing, silently. Now it subscribes again."""
    put_committed([b"a", b"b", b"c"])
    with mq.connect("QMC") as qm:
        consumer = qm.consume("Q1", prefetch=10, wait=1)
        for msg in consumer:
            assert msg.body == b"a"
            break
        assert [m.body for m in consumer] == [b"b", b"c"]
        assert qm._consumers == []  # ended again with its wait: not kept


def test_a_backout_marks_what_a_syncpoint_consumer_handed_out(served) -> None:  # noqa: F811
    put_committed([b"x", b"y"])
    with mq.connect("QMC") as qm:
        consumer = qm.consume("Q1", syncpoint=True, wait=1)
        it = iter(consumer)
        assert next(it).body == b"x"
        qm.backout()
        again = next(it)
        assert again.body == b"x" and again.redelivered
        assert next(it).body == b"y"
        qm.commit()


def test_consume_arguments_of_the_wrong_kind_are_refused(served) -> None:  # noqa: F811
    with mq.connect("QMC") as qm:
        for bad in (0, -1, 1.5, "10", True, None, 10_001, 10**9):
            with pytest.raises(mq.InvalidArgument) as info:
                qm.consume("Q1", prefetch=bad)  # type: ignore[arg-type]
            assert info.value.reason == 2046 and "prefetch" in str(info.value)
        for bad_wait in (-2, math.nan, math.inf, "1"):
            with pytest.raises(mq.InvalidArgument) as info:
                qm.consume("Q1", wait=bad_wait)  # type: ignore[arg-type]
            assert info.value.reason == 2090
        for bad_queue in (None, 5, b"Q1"):
            with pytest.raises(mq.InvalidArgument) as info:
                qm.consume(bad_queue)  # type: ignore[arg-type]
            assert info.value.reason == 2152
            with pytest.raises(mq.InvalidArgument):
                qm.put(bad_queue, b"x")  # type: ignore[arg-type]
            with pytest.raises(mq.InvalidArgument):
                qm.get(bad_queue)  # type: ignore[arg-type]
        assert qm.consume("Q1", prefetch=10_000).prefetch == 10_000
        # wait=-1 is MQWI_UNLIMITED, as for get: it ended at once with nothing
        consumer = qm.consume("Q1", wait=-1)
        assert consumer.wait is None
        t = threading.Timer(0.5, put_committed, args=([b"later"],))
        t.start()
        try:
            assert next(iter(consumer)).body == b"later"
        finally:
            t.join()
            consumer.close()


def test_connect_arguments_of_the_wrong_kind_are_refused(served) -> None:  # noqa: F811
    for kwargs in ({"timeout": -1}, {"timeout": 0}, {"timeout": "5"}, {"timeout": math.nan},
                   {"call_timeout": 0}, {"reconnect_timeout": -1},
                   {"reconnect_timeout": math.inf}):
        with pytest.raises(mq.InvalidArgument) as info:
            mq.connect("QMC", **kwargs)
        assert info.value.reason == 2046, kwargs
    with pytest.raises(mq.InvalidArgument) as info2:
        mq.connect(None)  # type: ignore[arg-type]
    assert info2.value.reason == 2058
    with pytest.raises(mq.QMgrNameError):  # bindings mode: not a name (it was 2278)
        mq.connect("")
    mq.connect("QMC", reconnect_timeout=0).close()


def test_a_blank_queue_manager_name_takes_the_one_that_answers(served) -> None:  # noqa: F811
    data = os.path.join(served.root, "qmgrs", "QMC")
    with open(os.path.join(data, "listener")) as f:
        rec = json.load(f)
    conname = f"{rec['host']}({rec['port']})"
    with mq.connect("", conname=conname, credential="@" + os.path.join(data, "credentials")
                    ) as qm:
        assert qm.qmgr == "QMC"  # it said ''
        qm.put("Q1", b"blank")
        assert qm.get("Q1").body == b"blank"


def test_consumers_that_ended_are_not_kept(served) -> None:  # noqa: F811
    with mq.connect("QMC") as qm:
        for _ in range(20):
            assert list(qm.consume("Q1", wait=0)) == []
        for _ in range(5):
            with qm.consume("Q1", syncpoint=True, wait=0):
                pass
        assert qm._consumers == [] and qm._pulling == []


def test_amqsget_refuses_a_wait_that_is_not_a_number(served, capsys, monkeypatch) -> None:  # noqa: F811
    from miqm.cli import samples
    from tests.unit.test_cli_mqadmin import run

    for wait in ("nan", "inf", "-1"):
        rc, _out, err = run(samples.amqsget_main, ["amqsget", "QMC", "Q1", "--wait", wait],
                            capsys, monkeypatch)
        assert rc == 2 and "--wait" in err and len(err.strip().splitlines()) == 1, err


def test_browse_waits_for_a_message_as_get_does(served) -> None:  # noqa: F811
    with mq.connect("QMC") as qm:
        with pytest.raises(mq.InvalidArgument) as info:
            qm.browse("Q1", wait=math.nan)
        assert info.value.reason == 2090
        with pytest.raises(mq.NoMessageAvailable):
            qm.browse("Q1", wait=0.1)
        t = threading.Timer(0.3, put_committed, args=([b"looked at"],))
        t.start()
        try:
            assert qm.browse("Q1", wait=-1).body == b"looked at"
        finally:
            t.join()
        assert qm.get("Q1").body == b"looked at"  # it stayed on the queue


def test_a_call_interrupted_by_ctrl_c_does_not_leave_its_reply_to_the_next(
        served) -> None:  # noqa: F811
    """Ctrl-C in a get-wait, the application goes on: its next call read the get's
    reply (2549 after a reconnect, once the get-wait ended on the queue manager). The
    interrupted connection is dropped; the next call connects again first."""
    def interrupt(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        with mq.connect("QMC") as qm:
            signal.setitimer(signal.ITIMER_REAL, 0.3)
            with pytest.raises(KeyboardInterrupt):
                qm.get("Q1", wait=5)
            qm.put("Q1", b"after ctrl-c")
            # with a wait: the interrupted get-wait, still waiting on the queue manager
            # until it sees its connection gone, may be handed the message first and
            # put it back (the service's _put_back) a moment later
            assert qm.get("Q1", wait=5).body == b"after ctrl-c"
            qm.put("Q1", b"in a unit", syncpoint=True)
            signal.setitimer(signal.ITIMER_REAL, 0.3)
            with pytest.raises(KeyboardInterrupt):
                qm.get("Q1", wait=5, correlid=b"none such",
                       syncpoint=True)
            with pytest.raises(mq.BackedOut):  # the unit went with the connection
                qm.commit()
            with pytest.raises(mq.NoMessageAvailable):
                qm.get("Q1")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_syncpoint_must_be_a_yes_or_no(served) -> None:  # noqa: F811
    """``syncpoint="no"`` was true: the put went under syncpoint and was lost with the
    connection's end."""
    with mq.connect("QMC") as qm:
        for bad in ("no", "", None, 2):
            with pytest.raises(mq.InvalidArgument) as info:
                qm.put("Q1", b"x", syncpoint=bad)  # type: ignore[arg-type]
            assert info.value.reason == 2046
            with pytest.raises(mq.InvalidArgument):
                qm.get("Q1", syncpoint=bad)  # type: ignore[arg-type]
            with pytest.raises(mq.InvalidArgument):
                qm.consume("Q1", syncpoint=bad)  # type: ignore[arg-type]
        qm.put("Q1", b"one", syncpoint=0)
    with mq.connect("QMC") as qm:
        assert qm.get("Q1", syncpoint=1).body == b"one"
        qm.commit()
