"""A CONNAME entry where something other than a queue manager listens (a web server on
the port, a typo in the port): the application is told what answered, not that a frame of
a thousand million bytes was announced."""

from __future__ import annotations

import socket
import threading

import pytest

from miqm import client as mq


def test_a_web_server_on_the_port_is_named_as_not_a_miqm_listener(monkeypatch) -> None:
    monkeypatch.delenv("MIQM_CONNECTION", raising=False)
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def answer() -> None:
        conn, _addr = server.accept()
        with conn:
            conn.recv(4096)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        with pytest.raises(mq.QMgrNotAvailable) as info:
            mq.connect("QM1", conname=f"127.0.0.1({port})", credential="x:y")
        text = str(info.value)
        assert info.value.reason == 2059
        assert "not a miqm listener" in text and "b'HTTP/1.1 400" in text, text
        assert "announced a frame" not in text, text
    finally:
        thread.join(10)
        server.close()


def test_nothing_answering_a_conname_advises_checking_it_not_starting_it(monkeypatch) -> None:
    """An application on another host told 'Start it with strmqm' when its CONNAME named
    a wrong port or a host down: it checks the address and the instances instead."""
    monkeypatch.delenv("MIQM_CONNECTION", raising=False)
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now: refused
    with pytest.raises(mq.QMgrNotAvailable) as info:
        mq.connect("QM1", conname=f"127.0.0.1({port})", credential="x:y")
    text = str(info.value)
    assert info.value.reason == 2059 and "AMQ8146" in text
    assert f"127.0.0.1({port})" in text and "CONNAME names" in text, text
    assert "strmqm" not in text, text
