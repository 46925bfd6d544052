"""The listener over real loopback sockets against clients that have not authenticated:
a small frame limit and the handshake deadline hold until a hello passes (plain TCP and
TLS), and an authenticated client gets the usual limits."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from miqm.net import protocol
from miqm.net.auth import Authenticator
from miqm.net.server import PREAUTH_MAX_FRAME, Listener, Session

SECRET = "s" * 64


def _echo(request: dict[str, Any], session: Session) -> dict[str, Any]:
    return {"ok": True, "op": request.get("op"), "size": len(request.get("body") or b"")}


def _listener(tls: ssl.SSLContext | None = None, **kw: Any) -> Listener:
    auth = Authenticator({"admin": SECRET})
    lst = Listener(_echo, authenticator=auth, tls=tls, handshake_timeout=0.6, **kw)
    lst.start()
    return lst


@pytest.fixture()
def listener() -> Iterator[Listener]:
    lst = _listener()
    try:
        yield lst
    finally:
        lst.stop()


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """True if the listener closes ``sock`` within ``seconds`` (replies are read past)."""
    sock.settimeout(seconds)
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            if not sock.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except (TimeoutError, ssl.SSLError):
        return False
    return False


def test_a_length_prefix_alone_is_dropped_at_the_handshake_deadline(listener) -> None:
    with socket.create_connection(listener.address) as s:
        s.sendall(b"\x00\x00\x00\x40")  # announces a frame, sends nothing more
        start = time.monotonic()
        assert _closed_within(s, 5.0)
        assert time.monotonic() - start < 3.0
    assert listener.rejected.get("handshake_timeout", 0) >= 1


def test_a_frame_dripped_slowly_does_not_escape_the_deadline(listener) -> None:
    with socket.create_connection(listener.address) as s:
        s.sendall(b"\x00\x00\x01\x00")
        start = time.monotonic()
        closed = False
        while time.monotonic() - start < 4.0:
            try:
                s.sendall(b"\x00")
            except OSError:
                closed = True
                break
            s.settimeout(0.2)
            try:
                if not s.recv(1):
                    closed = True
                    break
            except TimeoutError:
                pass
        assert closed
        assert time.monotonic() - start < 3.0


def test_a_big_frame_before_hello_is_refused_before_it_is_read(listener) -> None:
    with socket.create_connection(listener.address) as s:
        s.sendall((100 * 1024 * 1024).to_bytes(4, "big") + b"\x00" * 1024)
        s.settimeout(5)
        (length,) = protocol._LEN.unpack(s.recv(4))
        reply = protocol.decode(s.recv(length, socket.MSG_WAITALL))
        assert reply["mqrc"] == protocol.MQRC_DATA_LENGTH_ERROR
        assert _closed_within(s, 5.0)
    # a hello with a credential is well within the limit
    hello = protocol.encode({"op": "hello", "v": 2, "credential": f"admin:{SECRET}",
                             "qmgr": "QM1", "pid": 1, "appltag": "x" * 28})
    assert len(hello) < PREAUTH_MAX_FRAME


def test_after_hello_the_usual_limits_apply(listener) -> None:
    with socket.create_connection(listener.address) as s:
        s.settimeout(5)
        protocol.write_frame(s, {"id": 1, "op": "hello", "v": 2,
                                 "credential": f"admin:{SECRET}"})
        assert protocol.read_frame(s)["ok"]
        body = b"b" * (4 * PREAUTH_MAX_FRAME)
        protocol.write_frame(s, {"id": 2, "op": "put", "body": body})
        assert protocol.read_frame(s)["size"] == len(body)
        time.sleep(1.0)  # past the handshake deadline: an authenticated client stays
        protocol.write_frame(s, {"id": 3, "op": "ping"})
        assert protocol.read_frame(s)["ok"]


def test_memory_is_not_held_by_unauthenticated_clients(listener) -> None:
    """Five clients announce ~100 MiB frames and send 4 MiB each: nothing is buffered past
    the small limit (before, the listener read all of it)."""
    socks = [socket.create_connection(listener.address) for _ in range(5)]
    try:
        chunk = b"\x00" * (1 << 20)
        sent = []

        def flood(s: socket.socket) -> None:
            n = 0
            try:
                s.sendall((100 * 1024 * 1024).to_bytes(4, "big"))
                for _ in range(4):
                    s.sendall(chunk)
                    n += len(chunk)
            except OSError:
                pass
            sent.append(n)

        threads = [threading.Thread(target=flood, args=(s,)) for s in socks]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert listener.rejected.get("malformed", 0) == 5
        assert not listener.sessions() or all(
            s.principal is None for s in listener.sessions())
    finally:
        for s in socks:
            s.close()


def _tls_files(tmp_path) -> tuple[str, str]:
    cert, key = str(tmp_path / "qm.crt"), str(tmp_path / "qm.key")
    proc = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                           "-keyout", key, "-out", cert, "-days", "1", "-subj",
                           "/CN=localhost"], capture_output=True, timeout=60)
    if proc.returncode != 0:
        pytest.skip("openssl cannot make a test certificate here")
    return cert, key


def test_a_tls_client_silent_after_the_tls_handshake_is_dropped(tmp_path) -> None:
    from miqm.net.server import server_tls_context

    cert, key = _tls_files(tmp_path)
    lst = _listener(tls=server_tls_context(cert, key))
    try:
        ctx = ssl.create_default_context(cafile=cert)
        ctx.check_hostname = False
        with socket.create_connection(lst.address) as raw, \
                ctx.wrap_socket(raw, server_hostname="localhost") as s:
            start = time.monotonic()
            assert _closed_within(s, 5.0)
            assert time.monotonic() - start < 3.0
        # a TLS client that never finishes its handshake is dropped the same way
        with socket.create_connection(lst.address) as s:
            s.sendall(b"\x16\x03\x01")
            start = time.monotonic()
            assert _closed_within(s, 5.0)
            assert time.monotonic() - start < 3.0
    finally:
        lst.stop()
    assert os.path.exists(cert)
