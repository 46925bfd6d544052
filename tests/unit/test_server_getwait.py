"""A get-wait over a real loopback connection ends with its connection: a client that
went away does not take the next message (the service's _wait_get), while a client that
stays gets it, outside and under syncpoint, and a browse still waits."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import pytest

from miqm.errors import NetError
from miqm.net import protocol
from miqm.net.client import connect
from tests.unit.test_net import FakeStore, served  # noqa: F401
from tests.waiting import wait_until


def _send_get(served_listener: Any, **fields: Any) -> socket.socket:
    s = socket.create_connection(served_listener.address)
    protocol.write_frame(s, {"id": 1, "op": "hello", "v": 2, "qmgr": "QM1"})
    assert protocol.read_frame(s)["ok"]
    protocol.write_frame(s, {"id": 2, "op": "get", "queue": "Q1", **fields})
    return s


def test_a_gone_clients_get_wait_leaves_the_next_message(served) -> None:  # noqa: F811
    store, listener = served
    assert isinstance(store, FakeStore)
    store.define_queue("Q1")
    s = _send_get(listener, wait=20)
    wait_until(lambda: store.waiting == 1, "the get waits")
    s.close()  # the client goes away (as kill -9 does)
    wait_until(lambda: store.waiting == 0, "the get-wait ends with its connection",
               timeout=5)
    store.put("Q1", b"important", persistent=True)
    time.sleep(0.3)
    assert [m.body for m in store.msgs["Q1"]] == [b"important"]


def test_a_message_for_a_client_gone_mid_wait_is_put_back(served) -> None:  # noqa: F811
    """The message arrives in the same slice of the wait in which the client goes: the
    get finds the client gone once it has the message, and puts it back."""
    store, listener = served
    store.define_queue("Q1")
    s = _send_get(listener, wait=20)
    wait_until(lambda: store.waiting == 1, "the get waits")
    s.close()
    store.put("Q1", b"important", persistent=True)  # at once: before the next look
    wait_until(lambda: store.waiting == 0, "the get-wait ends", timeout=5)
    time.sleep(0.3)
    assert [m.body for m in store.msgs["Q1"]] == [b"important"]


def test_a_client_that_stays_gets_what_arrives(served) -> None:  # noqa: F811
    store, _listener = served
    store.define_queue("Q1")
    with connect("QM1") as conn:
        for fields in ({}, {"syncpoint": True}, {"browse": True}):
            threading.Timer(0.6, lambda: store.put("Q1", b"late")).start()
            got = conn.call("get", queue="Q1", wait=5, **fields)
            assert got["body"] == b"late", fields
            if fields.get("syncpoint"):
                conn.call("commit")
            if fields.get("browse"):
                conn.call("get", queue="Q1")
        assert store.msgs["Q1"] == []
        start = time.monotonic()
        with pytest.raises(NetError) as info:  # nothing came: 2033 after the wait
            conn.call("get", queue="Q1", wait=0.7)
        assert info.value.mqrc == 2033
        assert 0.6 < time.monotonic() - start < 3
