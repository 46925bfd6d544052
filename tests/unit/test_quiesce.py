"""An ending instance, in process: the service refuses work with 2161/2162 (a session's
open unit of work may still finish during a controlled end), a get-wait ends with the
reason, and the listener's last frame tells an idle client the reason instead of a
broken connection."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from miqm.errors import NetError
from miqm.net.client import QMgrEnding, connect
from miqm.net.server import Listener, Session
from miqm.net.service import QueueService, quiesce_reply
from tests.unit.test_net import FakeStore


def _service() -> tuple[QueueService, Session]:
    service = QueueService(FakeStore(), "QM1", host_name="hosta")
    service.store.define_queue("Q1")
    session = Session()
    assert service.handle({"op": "hello", "qmgr": "QM1"}, session)["ok"]
    return service, session


def test_a_controlled_end_refuses_new_work_and_lets_a_unit_finish() -> None:
    service, session = _service()
    other = Session()
    service.handle({"op": "hello", "qmgr": "QM1"}, other)
    assert service.handle({"op": "put", "queue": "Q1", "body": b"a", "syncpoint": True},
                          session)["ok"]
    assert service.open_units() == 1
    service.quiesce(2161)
    hello = service.handle({"op": "hello", "qmgr": "QM1"}, Session())
    assert hello["mqrc"] == 2161 and hello["reconnect"] is False
    assert service.handle({"op": "put", "queue": "Q1", "body": b"b"}, other)["mqrc"] == 2161
    assert service.handle({"op": "get", "queue": "Q1", "wait": 1, "syncpoint": True},
                          session)["mqrc"] == 2161
    assert service.handle({"op": "put", "queue": "Q1", "body": b"c", "syncpoint": True},
                          session)["ok"]
    assert service.handle({"op": "commit"}, session)["ok"]
    assert service.open_units() == 0
    assert len(service.store.msgs["Q1"]) == 2


def test_an_immediate_end_refuses_even_the_commit() -> None:
    service, session = _service()
    service.handle({"op": "put", "queue": "Q1", "body": b"a", "syncpoint": True}, session)
    service.quiesce(2162, reconnect=True)
    reply = service.handle({"op": "commit"}, session)
    assert reply["mqrc"] == 2162 and reply["reconnect"] is True


def test_a_get_wait_in_progress_ends_with_2161() -> None:
    service, session = _service()
    out: dict[str, Any] = {}

    def get() -> None:
        out["reply"] = service.handle({"op": "get", "queue": "Q1", "wait": 30}, session)

    t = threading.Thread(target=get)
    t.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    service.quiesce(2161)
    t.join(5)
    assert out["reply"]["mqrc"] == 2161 and time.monotonic() - t0 < 2


@pytest.fixture()
def served() -> Iterator[tuple[QueueService, Listener, str]]:
    service = QueueService(FakeStore(), "QM1", host_name="hosta")
    service.store.define_queue("Q1")
    listener = Listener(service.handle)
    host, port = listener.start()
    yield service, listener, f"{host}({port})"
    listener.stop()


def _connect(conname: str, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> Any:
    monkeypatch.setenv("MIQM_CONNECTION", conname)
    return connect("QM1", **kw)


def test_the_last_frame_tells_an_idle_client_the_reason(served, monkeypatch) -> None:
    service, listener, conname = served
    conn = _connect(conname, monkeypatch, reconnect=True, reconnect_timeout=30)
    time.sleep(0.3)
    assert not conn.peer_closed()  # a connection that made no call yet is not "closed"
    service.quiesce(2161)
    listener.quiesce(quiesce_reply(2161, False, notice=True))
    listener.stop()
    t0 = time.monotonic()
    with pytest.raises(QMgrEnding) as info:
        conn.call("ping")
    assert info.value.mqrc == 2161
    with pytest.raises(NetError) as again:  # not 2548 after reconnect_timeout
        conn.call("ping")
    assert again.value.mqrc == 2161 and time.monotonic() - t0 < 5
    conn.close()


def test_a_unit_open_at_the_last_frame_is_reported_backed_out(served, monkeypatch) -> None:
    service, listener, conname = served
    conn = _connect(conname, monkeypatch, reconnect=False)
    conn.send("put", queue="Q1", body=b"a", syncpoint=True)  # pipelined: not sent yet
    listener.quiesce(quiesce_reply(2162, False, notice=True))
    listener.stop()
    with pytest.raises(NetError) as info:
        conn.call("commit")
    assert info.value.mqrc == 2003 and "2162" in str(info.value)
    assert not service.store.msgs.get("Q1")


@contextlib.contextmanager
def _two_instances(monkeypatch) -> Iterator[tuple[QueueService, QueueService, Any]]:
    """Two instances' services behind their listeners (hosta, then hostb) and a
    reconnecting connection to the first through a CONNAME list naming both."""
    old = QueueService(FakeStore(), "QM1", host_name="hosta")
    new = QueueService(FakeStore(), "QM1", host_name="hostb")
    listeners = []
    for service in (old, new):
        service.store.define_queue("Q1")
        listener = Listener(service.handle)
        listener.start()
        listeners.append(listener)
    try:
        (h1, p1), (h2, p2) = (lst.address for lst in listeners)
        conn = _connect(f"{h1}({p1}),{h2}({p2})", monkeypatch, reconnect=True,
                        reconnect_timeout=10)
        try:
            yield old, new, conn
        finally:
            conn.close()
    finally:
        for listener in listeners:
            listener.stop()


def test_a_switchover_refusal_moves_a_reconnecting_client(monkeypatch) -> None:
    """2161 with ``reconnect`` (endmqm -s): the refused call, not done, is sent again on
    the other instance, which the old one's 2161 to hello does not hide."""
    with _two_instances(monkeypatch) as (old, new, conn):
        assert conn.server_host == "hosta"
        old.quiesce(2161, reconnect=True)
        conn.call("put", queue="Q1", body=b"moved", persistent=True)
        assert conn.server_host == "hostb" and conn.reconnects == 1
        assert len(new.store.msgs["Q1"]) == 1 and not old.store.msgs.get("Q1")
        got = conn.call("get", queue="Q1", syncpoint=True)
        assert got["body"] == b"moved"
        conn.call("commit")


def test_a_get_wait_moved_by_a_switchover_waits_only_what_is_left(monkeypatch) -> None:
    """A get-wait refused by endmqm -s goes on on the other instance for the rest of
    its wait, not for the whole wait again (MQ's WaitInterval is the call's)."""
    with _two_instances(monkeypatch) as (old, _new, conn):
        timer = threading.Timer(1.5, old.quiesce, args=(2161,), kwargs={"reconnect": True})
        timer.start()
        t0 = time.monotonic()
        with pytest.raises(NetError) as info:
            conn.call("get", queue="Q1", wait=3.0)
        elapsed = time.monotonic() - t0
        timer.join()
        assert info.value.mqrc == 2033 and conn.server_host == "hostb"
        # the whole wait again would end after 1.5 + 3 s
        assert 2.9 <= elapsed < 4.0, elapsed


def test_a_unit_the_store_rolled_back_is_not_waited_for(tmp_path) -> None:
    # AMQ7469 rolls back a unit that holds too much of the log; its application hears of
    # it (2003) at its next call. A controlled end (a switchover) counted it open and
    # waited the whole grace for that call (found by the operator's walk: endmqm -s 10 s)
    from miqm.store.settings import StoreTuning
    from tests.unit.test_store_units import Harness

    h = Harness(tmp_path, StoreTuning(uow_log_space_limit=0.1))
    store = h.open()
    try:
        store.define_queue("Q", DEFPSIST="YES", MAXDEPTH=100000)
        service = QueueService(store, "QM")
        held, other = Session(), Session()
        for s in (held, other):
            assert service.handle({"op": "hello", "qmgr": "QM"}, s)["ok"]
        assert service.handle({"op": "put", "queue": "Q", "body": b"old",
                               "syncpoint": True}, held)["ok"]
        assert service.open_units() == 1
        for _ in range(int(store._capacity * 0.15 / 4000) + 2):  # the log moves on
            store.put("Q", b"z" * 4000)
        assert any(a == "AMQ7469" for a, _t in h.lines)
        assert service.handle({"op": "put", "queue": "Q", "body": b"new",
                               "syncpoint": True}, other)["ok"]
        assert service.open_units() == 1  # the other unit, which may still commit
        assert service.handle({"op": "commit"}, held)["mqrc"] == 2003
        assert service.handle({"op": "commit"}, other)["ok"]
        assert service.open_units() == 0
    finally:
        store.close()
