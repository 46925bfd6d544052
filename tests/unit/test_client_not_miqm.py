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
