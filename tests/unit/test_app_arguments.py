"""The client library used the way a new application developer uses it, with arguments
of the wrong kind and names that cannot be right: each is refused with a typed
:class:`miqm.client.MQError` carrying MQ's reason code and a line saying what to do,
never an AttributeError from inside the library, and never taken the wrong way (a
``delete="no"`` that deleted, a ``reconnect="no"`` that reconnected). Against the real
store behind the real listener in this process (``served`` from test_client.py)."""

from __future__ import annotations

import importlib.util

import pytest

from miqm import client as mq
from tests.unit.test_client import served  # noqa: F401  (served: fixture)

pytestmark = pytest.mark.skipif(importlib.util.find_spec("miqm.store.log") is None,
                                reason="needs the store's recovery log")


def test_open_options_and_dynamic_names_of_the_wrong_kind_are_refused(served) -> None:  # noqa: F811
    """``open("Q1", 5)`` raised AttributeError ('int' object has no attribute 'upper');
    ``dynamic=5`` was sent as it was."""
    with mq.connect("QMC") as qm:
        with pytest.raises(mq.InvalidArgument) as info:
            qm.open("Q1", 5)  # type: ignore[arg-type]
        assert info.value.reason == 2046 and '"INPUT"' in str(info.value)
        with pytest.raises(mq.InvalidArgument) as info:
            qm.open("Q1", "INPUT", dynamic=5)  # type: ignore[arg-type]
        assert info.value.reason == 2152 and "APP1.*" in str(info.value)
        assert qm.open("Q1", "input") == "Q1"  # the options' case does not matter


def test_close_queue_takes_a_name_and_a_yes_or_no(served) -> None:  # noqa: F811
    """``close_queue(q, delete="no")`` was true (MQCO_DELETE: a permanent dynamic queue
    was deleted); ``close_queue(None)`` was sent as the text 'None'."""
    with mq.connect("QMC") as qm:
        qm.open("Q1", "OUTPUT")
        with pytest.raises(mq.InvalidArgument) as info:
            qm.close_queue("Q1", delete="no")  # type: ignore[arg-type]
        assert info.value.reason == 2046 and "delete='no'" in str(info.value)
        with pytest.raises(mq.InvalidArgument) as info:
            qm.close_queue(None)  # type: ignore[arg-type]
        assert info.value.reason == 2152
        qm.close_queue("Q1", delete=0)
        qm.put("Q1", b"still there")  # not deleted
        assert qm.get("Q1").body == b"still there"


def test_connect_refuses_a_reconnect_credential_or_tls_of_the_wrong_kind(served) -> None:  # noqa: F811
    """``reconnect="no"`` was true; ``credential=5`` and ``tls="yes"`` raised
    AttributeError from inside the library."""
    for kwargs, words in (({"reconnect": "no"}, "reconnect='no'"),
                          ({"credential": 5}, "principal:secret"),
                          ({"tls": "yes"}, "ssl.SSLContext")):
        with pytest.raises(mq.InvalidArgument) as info:
            mq.connect("QMC", **kwargs)  # type: ignore[arg-type]
        assert info.value.reason == 2046 and words in str(info.value), kwargs
    mq.connect("QMC", reconnect=0).close()


def test_an_unknown_queue_says_what_to_do(served) -> None:  # noqa: F811
    """2085 said only 'is not defined', also for a name no queue can have (too long,
    a space, empty) and for 'q1' when runmqsc had defined 'Q1'."""
    with mq.connect("QMC") as qm:
        for name in ("Q" * 49, "Q 1", "", "Q\x001", "Qé"):
            for call in (lambda q: qm.put(q, b"x"), lambda q: qm.get(q),
                         lambda q: qm.inquire(q), lambda q: qm.consume(q, wait=0).next(0)):
                with pytest.raises(mq.UnknownObjectName) as info:
                    call(name)
                assert info.value.reason == 2085
                assert "cannot be a queue name, which is 1 to 48" in str(info.value), name
        with pytest.raises(mq.UnknownObjectName) as info:
            qm.put("q1", b"x")
        assert "case-sensitive" in str(info.value) and "'Q1'" in str(info.value)
        with pytest.raises(mq.UnknownObjectName) as info:
            qm.browse("NOPE")
        assert "DEFINE QLOCAL(NOPE)" in str(info.value)
        assert qm.put("Q1", b"ok")  # a good call after all of them


def test_a_closed_consumer_says_what_to_do(served) -> None:  # noqa: F811
    with mq.connect("QMC") as qm:
        consumer = qm.consume("Q1", wait=0)
        consumer.close()
        with pytest.raises(mq.MQError) as info:
            consumer.next(0)
        assert info.value.reason == 2019 and "consume()" in str(info.value)


def test_a_connection_without_reconnect_that_broke_says_to_connect_again(served) -> None:  # noqa: F811
    """reconnect=False: the call in flight said only 'broke: [Errno 104] ...', the later
    ones 'the connection is closed' (as if the application had closed it)."""
    qm = mq.connect("QMC", reconnect=False)
    try:
        qm.put("Q1", b"before")
        served.stop()
        served.start()
        with pytest.raises(mq.ConnectionBroken) as info:
            qm.put("Q1", b"in flight")
        text = str(info.value)
        assert info.value.reason == 2009 and "connect again" in text
        with pytest.raises(mq.ConnectionBroken) as info:
            qm.get("Q1")
        assert "broke earlier" in str(info.value) and "connect again" in str(info.value)
    finally:
        qm.close()


def test_a_priority_out_of_range_is_refused_by_the_put_not_by_the_commit(served) -> None:  # noqa: F811
    """put(priority=-5, syncpoint=True) was pipelined and the queue manager's 2050 came
    with the commit, which backed out the whole unit (the good puts with it); -1 is
    MQ's MQPRI_PRIORITY_AS_Q_DEF, which took 2050 too."""
    served.store.define_queue("QP7", DEFPRTY=7)
    with mq.connect("QMC") as qm:
        qm.put("Q1", b"good", syncpoint=True)
        for bad in (-5, 10, 2**40):
            with pytest.raises(mq.InvalidArgument) as info:
                qm.put("Q1", b"bad", priority=bad, syncpoint=True)
            assert info.value.reason == 2050 and "0 to 9" in str(info.value)
        qm.commit()  # the unit is the good put alone
        assert qm.get("Q1").body == b"good"
        qm.put("QP7", b"default", priority=-1)
        assert qm.get("QP7").priority == 7


def test_a_temporary_dynamic_queue_that_is_gone_is_not_to_be_defined(served) -> None:  # noqa: F811
    """A reply queue made from a model and deleted (closed here; at a failover too):
    its 2085 said 'define it (DEFINE QLOCAL(APP1.6B0A...))', advice for a queue the
    application never defined. It says the queue was a temporary dynamic one."""
    from miqm import mqsc

    with mq.connect("QMC") as qm:
        reply = qm._conn.call("mqsc", command=mqsc.parse_command(
            "DEFINE QMODEL(REPLY.MODEL) DEFTYPE(TEMPDYN)").to_dict())
        assert reply.get("ok"), reply
        reply_q = qm.open("REPLY.MODEL", "INPUT", dynamic="APP1.*")
        qm.put(reply_q, b"answer")
        assert qm.get(reply_q).body == b"answer"
        qm.close_queue(reply_q)
        for call in (lambda: qm.put(reply_q, b"late"), lambda: qm.get(reply_q),
                     lambda: qm.consume(reply_q, wait=0).next(0)):
            with pytest.raises(mq.UnknownObjectName) as info:
                call()
            assert "temporary dynamic queue" in str(info.value)
            assert "DEFINE QLOCAL" not in str(info.value)


def test_a_conname_may_write_an_ipv6_address_in_brackets() -> None:
    """'[::1](1414)' was looked up as the host name '[::1]' (2059, 'Name or service not
    known'); bare '::1(1414)' worked."""
    from miqm.net.client import parse_conname

    assert [(e.host, e.port) for e in parse_conname("[::1](1414), ::1(1415),hosta(1416)")] \
        == [("::1", 1414), ("::1", 1415), ("hosta", 1416)]


def test_the_annotations_take_the_bytes_like_values_the_calls_take(served) -> None:  # noqa: F811
    """A body, msgid or correlid may be a bytearray or memoryview (taken as bytes), but
    the annotations said ``bytes``: a type checker (mypy --strict) refused
    ``qm.put("Q1", bytearray(b"x"))`` in an application although the call works."""
    import typing

    for call, names in ((mq.QueueManager.put, ("body", "msgid", "correlid")),
                        (mq.QueueManager.get, ("msgid", "correlid")),
                        (mq.QueueManager.browse, ("msgid", "correlid")),
                        (mq.QueueManager.browse_next, ("msgid", "correlid")),
                        (mq.QueueManager.browse_all, ("msgid", "correlid"))):
        hints = typing.get_type_hints(call)
        for name in names:
            taken = typing.get_args(hints[name])
            assert bytearray in taken and memoryview in taken, (call.__name__, name)
    with mq.connect("QMC") as qm:  # and the calls do take them
        qm.put("Q1", memoryview(b"body"), msgid=bytearray(b"id-1"),
               correlid=memoryview(b"c-1"))
        msg = qm.get("Q1", msgid=bytearray(b"id-1"), correlid=memoryview(b"c-1"))
        assert msg.body == b"body" and msg.msgid.rstrip(b"\0") == b"id-1"


def test_a_put_under_syncpoint_returns_the_id_the_message_carries(served) -> None:  # noqa: F811
    """A short ``msgid`` (docs/client.md: "a prefix of its own and a counter") came back
    from a put under syncpoint as given, while the message (and a put outside syncpoint)
    carries it padded to 24 bytes: ``reply.correlid == put(...)`` never held."""
    with mq.connect("QMC") as qm:
        outside = qm.put("Q1", b"a", msgid=b"APP1-1")
        inside = qm.put("Q1", b"b", msgid=b"APP1-2", syncpoint=True)
        qm.commit()
        assert inside == b"APP1-2".ljust(24, b"\0") and outside == b"APP1-1".ljust(24, b"\0")
        assert [qm.get("Q1").msgid, qm.get("Q1").msgid] == [outside, inside]
        assert qm.put("Q1", b"c", syncpoint=True) is None  # the queue manager makes it
        qm.backout()
