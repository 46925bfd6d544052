"""A connection that breaks while a commit is in flight and whose reconnect is refused
for good (the credential was revoked or rotated meanwhile: 2035): the application must
still be told that the commit may or may not have taken effect, as it is told when the
reconnect merely times out (2548). It got only the refusal, which reads as if the commit
had been refused and was not done."""

from __future__ import annotations

import importlib.util
import socket

import pytest

from miqm import client as mq
from miqm.net import auth
from tests.unit.test_client import served  # noqa: F401  (fixture)
from tests.waiting import wait_until

pytestmark = pytest.mark.skipif(importlib.util.find_spec("miqm.store.log") is None,
                                reason="needs the store's recovery log")


def test_a_commit_cut_off_then_refused_on_reconnect_says_it_is_in_doubt(
        served, monkeypatch) -> None:  # noqa: F811
    served.listener.authenticator = auth.Authenticator({"admin": "a" * 64})
    conname = "{}({})".format(*served.listener.address)
    qm = mq.connect("QMC", conname=conname, credential="admin:" + "a" * 64, reconnect=True,
                    reconnect_timeout=20)
    try:
        qm.put("Q1", b"x", syncpoint=True)
        qm.put("Q1", b"y", syncpoint=True)
        # the secret is rotated, then the queue manager's side of the connection ends
        # before the commit is read (as at a failover)
        served.listener.authenticator = auth.Authenticator({"admin": "c" * 64})
        wait_until(lambda: len(served.listener.sessions()) == 1, "one session", 10)
        conn = qm._conn
        real_flush = conn._flush

        def flush_then_cut() -> None:
            # the commit goes out on a connection the queue manager has just dropped
            for session in served.listener.sessions():
                session._sock.shutdown(socket.SHUT_RDWR)
            real_flush()

        monkeypatch.setattr(conn, "_flush", flush_then_cut)
        with pytest.raises(mq.MQError) as info:
            qm.commit()
        monkeypatch.setattr(conn, "_flush", real_flush)
        text = str(info.value)
        assert info.value.reason == 2035, text  # waiting will not change it: at once
        assert "may or may not have taken effect" in text, text
    finally:
        qm.close()
