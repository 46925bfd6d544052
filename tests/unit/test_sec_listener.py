"""The listener over real loopback sockets against hostile clients (a security test's
findings): JSON nested past the parser's depth, huge headers from an application
principal, a hello naming another queue manager, a flood of garbage against the error
log, and the controller's own ops reached by an application principal. Each is answered
with MQ's reason code while a well-behaved client on another connection is served."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest

from miqm.net import protocol
from miqm.net.auth import Authenticator
from miqm.net.listen import app_handler
from miqm.net.server import MAX_REQUEST_HEADER, Listener, Session

SECRET = "s" * 64
APP_SECRET = "a" * 64


def _handler(request: dict[str, Any], session: Session) -> dict[str, Any]:
    """Echoes; a hello naming another queue manager gets 2058, as the service's does;
    ``end`` and ``instance`` answer as the controller's do."""
    op = request.get("op")
    if op == "hello" and request.get("qmgr") not in (None, "QM1"):
        return protocol.error_reply(protocol.MQRC_Q_MGR_NAME_ERROR, "not this one")
    if op == "end":
        ENDED.append(session.principal)
        return {"ok": True, "pid": 1}
    return {"ok": True, "op": op, "principal": session.principal}


ENDED: list[Any] = []


class _Ctl:
    """What listen.app_handler reads of a controller: a standby has no service."""

    qmgr = "QM1"
    service = None


@pytest.fixture()
def listener() -> Iterator[tuple[Listener, list[str]]]:
    lines: list[str] = []
    auth = Authenticator({"admin": SECRET, "APP1": APP_SECRET})
    lst = Listener(_handler, authenticator=auth, log=lines.append, handshake_timeout=5.0,
                   app_handler=app_handler(_Ctl(), _handler))
    lst.start()
    ENDED.clear()
    try:
        yield lst, lines
    finally:
        lst.stop()


def _frame(header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">II", 4 + len(header) + len(body), len(header)) + header + body


def _connect(lst: Listener, credential: str | None = None,
             qmgr: str = "QM1") -> socket.socket:
    s = socket.create_connection(lst.address, timeout=10)
    if credential is not None:
        protocol.write_frame(s, {"id": 1, "op": "hello", "v": 2, "qmgr": qmgr,
                                 "credential": credential})
        assert protocol.read_frame(s)["ok"]
    return s


def _closed(s: socket.socket) -> bool:
    s.settimeout(10)
    try:
        while True:
            if not s.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def _good_client_works(lst: Listener) -> None:
    with _connect(lst, f"admin:{SECRET}") as s:
        protocol.write_frame(s, {"id": 2, "op": "ping"})
        assert protocol.read_frame(s)["ok"]


@pytest.mark.parametrize("who", [None, "admin", "APP1"])
def test_json_nested_too_deep_is_a_malformed_frame(listener, who) -> None:
    """A few KiB of '[' (within the 8 KiB before hello) made the JSON parser raise
    RecursionError, which ended the session's thread with a traceback on the controller's
    output: no reply, no count, no error log line."""
    lst, lines = listener
    good = _connect(lst, f"admin:{SECRET}")
    credential = {None: None, "admin": f"admin:{SECRET}", "APP1": f"APP1:{APP_SECRET}"}[who]
    with _connect(lst, credential) as s:
        s.sendall(_frame(b'{"op":' + b"[" * 3000 + b"]" * 3000 + b"}"))
        reply = protocol.read_frame(s)
        assert reply["mqrc"] == protocol.MQRC_UNEXPECTED_ERROR and reply["amq"] == "AMQ9504"
        assert _closed(s)
    assert lst.rejected.get("malformed") == 1
    assert any("AMQ9504" in line and "127.0.0.1(" in line for line in lines)
    with good:  # a client connected meanwhile is served as before
        protocol.write_frame(good, {"id": 2, "op": "ping"})
        assert protocol.read_frame(good)["ok"]
    _good_client_works(lst)


def test_an_application_principals_huge_header_is_refused_before_it_is_read(
        listener) -> None:
    """An application principal's 23 MiB header of '[],' took 600 MiB of the queue
    manager's memory (kept after the request): a header over MAX_REQUEST_HEADER from a
    principal other than admin is now refused (2010) from its length fields."""
    lst, _lines = listener
    header = b'{"op":"ping","x":[' + b"[]," * (MAX_REQUEST_HEADER // 3) + b"[]]}"
    with _connect(lst, f"APP1:{APP_SECRET}") as s:
        s.sendall(struct.pack(">II", 4 + len(header), len(header)) + header[:1024])
        reply = protocol.read_frame(s)
        assert reply["mqrc"] == protocol.MQRC_DATA_LENGTH_ERROR
        assert str(MAX_REQUEST_HEADER) in reply["error"]
        assert _closed(s)
    # the administrator is not limited (its requests do not pay for the check) ...
    with _connect(lst, f"admin:{SECRET}") as s:
        s.sendall(_frame(header))
        assert protocol.read_frame(s)["ok"]
    # ... and an application's usual requests, bodies of any size included, pass
    with _connect(lst, f"APP1:{APP_SECRET}") as s:
        body = b"m" * (2 * MAX_REQUEST_HEADER)
        protocol.write_frame(s, {"id": 2, "op": "put", "queue": "Q", "body": body})
        assert protocol.read_frame(s)["ok"]
        s.sendall(_frame(b'{"id":3,"op":"ping"}') * 50)  # pipelined, read in one go
        assert all(protocol.read_frame(s)["id"] == 3 for _ in range(50))


def test_a_hello_naming_another_queue_manager_ends_the_connection(listener) -> None:
    """It was answered 2058 and the connection stayed, authenticated, serving puts and
    MQSC without ever appearing in DISPLAY CONN."""
    lst, _lines = listener
    with socket.create_connection(lst.address, timeout=10) as s:
        protocol.write_frame(s, {"id": 1, "op": "hello", "v": 2, "qmgr": "QMOTHER",
                                 "credential": f"admin:{SECRET}"})
        assert protocol.read_frame(s)["mqrc"] == protocol.MQRC_Q_MGR_NAME_ERROR
        try:
            protocol.write_frame(s, {"id": 2, "op": "ping"})
        except OSError:
            pass
        assert _closed(s)
    _good_client_works(lst)


def test_a_flood_of_garbage_writes_a_bounded_number_of_lines(listener) -> None:
    """Every malformed frame wrote a line: an unauthenticated flood rotated the error
    log's other entries away. Now at most 20 a minute (counted all the same)."""
    lst, lines = listener
    for _ in range(60):
        with socket.create_connection(lst.address, timeout=10) as s:
            s.sendall(_frame(b"not json"))
            protocol.read_frame(s)
    assert lst.rejected.get("malformed") == 60
    assert sum("AMQ9504" in line for line in lines) == 20
    _good_client_works(lst)


@pytest.mark.parametrize("op", ["end", "instance"])
def test_an_application_principal_cannot_reach_the_controllers_ops(listener, op) -> None:
    """The controller answers end and instance before the queue service's authority
    checks: any principal with a credential ended the queue manager."""
    lst, _lines = listener
    with _connect(lst, f"APP1:{APP_SECRET}") as s:
        protocol.write_frame(s, {"id": 2, "op": op, "mode": "immediate"})
        reply = protocol.read_frame(s)
        assert reply["mqrc"] == protocol.MQRC_NOT_AUTHORIZED and reply["amq"] == "AMQ8077"
        protocol.write_frame(s, {"id": 3, "op": "ping"})  # the connection stays
        assert protocol.read_frame(s)["principal"] == "APP1"
    assert ENDED == []
    with _connect(lst, f"admin:{SECRET}") as s:  # the administrator's endmqm works
        protocol.write_frame(s, {"id": 2, "op": op, "mode": "immediate"})
        assert protocol.read_frame(s)["ok"]
    assert ENDED == (["admin"] if op == "end" else [])


def test_the_log_limit_says_how_many_lines_it_left_out() -> None:
    from miqm.net.server import _LogLimit

    now = [0.0]
    lines: list[str] = []
    limit = _LogLimit(lines.append, 2, clock=lambda: now[0])
    for i in range(5):
        limit(f"line {i}")
    assert lines == ["line 0", "line 1"]
    now[0] = 61.0
    limit("line 5")
    assert lines[-1] == "line 5 (3 more such lines in the last minute were not logged)"


def test_silent_unauthenticated_connections_cannot_hold_every_slot() -> None:
    """6,600 connections opened and left silent filled the listener's 5,000 slots for
    their handshake deadline, and a client with a good credential got 2025. Only a fifth
    of the slots may wait for a hello now; past that the oldest such connection goes."""
    auth = Authenticator({"admin": SECRET})
    lst = Listener(_handler, authenticator=auth, max_connections=20, handshake_timeout=60)
    lst.start()
    silent: list[socket.socket] = []
    try:
        with _connect(lst, f"admin:{SECRET}") as working:  # connected before the flood
            for _ in range(40):
                silent.append(socket.create_connection(lst.address, timeout=10))
            with _connect(lst, f"admin:{SECRET}") as s:  # would have been 2025
                protocol.write_frame(s, {"id": 2, "op": "ping"})
                assert protocol.read_frame(s)["ok"]
            protocol.write_frame(working, {"id": 2, "op": "ping"})
            assert protocol.read_frame(working)["ok"]
        assert lst.rejected.get("preauth_evicted", 0) >= 30
        assert lst.rejected.get("max_connections", 0) == 0
        assert _closed(silent[0])  # the oldest silent ones were dropped
    finally:
        for s in silent:
            s.close()
        lst.stop()


@pytest.mark.parametrize(("credential", "names"), [(f"APP1:{'x' * 64}", "principal 'APP1'"),
                                                   ("admin:nope", "crtmqm created")])
def test_a_wrong_credential_says_where_a_credential_comes_from(listener, credential,
                                                               names) -> None:
    # an application may pass its credential to connect() rather than set MIQM_CREDENTIAL:
    # the advice names both (it named only the variable)
    lst, _lines = listener
    with socket.create_connection(lst.address, timeout=10) as s:
        protocol.write_frame(s, {"id": 1, "op": "hello", "v": 2, "qmgr": "QM1",
                                 "credential": credential})
        reply = protocol.read_frame(s)
    assert reply["mqrc"] == 2035
    assert "MIQM_CREDENTIAL" in reply["error"] and "credential=" in reply["error"]
    assert names in reply["error"]
