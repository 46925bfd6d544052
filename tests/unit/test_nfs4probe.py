"""The NFSv4 lease probe's encoding and decoding, against a fake server on loopback."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from lockfs.nfs4probe import (
    FATTR4_LEASE_TIME,
    OP_GETATTR,
    OP_PUTROOTFH,
    LeaseProbeError,
    build_call,
    parse_reply,
    server_lease,
)


def _reply(xid: int, lease: int, *, status: int = 0, accept: int = 0) -> bytes:
    """A reply body as an NFSv4 server sends it for build_call()."""
    out = struct.pack(">IIIII", xid, 1, 0, 0, 0) + struct.pack(">I", accept)
    if accept:
        return out
    out += struct.pack(">II", status, 0)  # status, empty tag
    if status:
        return out + struct.pack(">I", 0)
    out += struct.pack(">I", 2) + struct.pack(">II", OP_PUTROOTFH, 0)
    out += struct.pack(">II", OP_GETATTR, 0)
    out += struct.pack(">II", 1, 1 << FATTR4_LEASE_TIME) + struct.pack(">II", 4, lease)
    return out


def test_call_layout() -> None:
    call = build_call(0x1234, "host")
    (mark,) = struct.unpack_from(">I", call)
    assert mark & 0x80000000 and (mark & 0x7FFFFFFF) == len(call) - 4
    xid, mtype, rpcvers, prog, vers, proc = struct.unpack_from(">IIIIII", call, 4)
    assert (xid, mtype, rpcvers, prog, vers, proc) == (0x1234, 0, 2, 100003, 4, 1)
    # the COMPOUND ends with PUTROOTFH, GETATTR and a one-word bitmap asking for bit 10
    assert call.endswith(struct.pack(">IIII", OP_PUTROOTFH, OP_GETATTR, 1, 1 << 10))
    assert len(call) % 4 == 0


def test_reply_decoding() -> None:
    assert parse_reply(7, _reply(7, 45)) == 45
    with pytest.raises(LeaseProbeError, match="another call"):
        parse_reply(8, _reply(7, 45))
    with pytest.raises(LeaseProbeError, match="not accepted"):
        parse_reply(7, _reply(7, 45, accept=2))
    with pytest.raises(LeaseProbeError, match="status 10008"):
        parse_reply(7, _reply(7, 45, status=10008))
    with pytest.raises(LeaseProbeError, match="short"):
        parse_reply(7, _reply(7, 45)[:-8])


def _serve(sock: socket.socket, lease: int, split: bool) -> None:
    conn, _ = sock.accept()
    with conn:
        (mark,) = struct.unpack(">I", conn.recv(4, socket.MSG_WAITALL))
        call = conn.recv(mark & 0x7FFFFFFF, socket.MSG_WAITALL)
        body = _reply(struct.unpack_from(">I", call)[0], lease)
        if split:  # two record fragments
            half = len(body) // 2
            conn.sendall(struct.pack(">I", half) + body[:half])
            conn.sendall(struct.pack(">I", 0x80000000 | (len(body) - half)) + body[half:])
        else:
            conn.sendall(struct.pack(">I", 0x80000000 | len(body)) + body)


@pytest.mark.parametrize("split", [False, True])
def test_server_lease_over_tcp(split: bool) -> None:
    with socket.create_server(("127.0.0.1", 0)) as srv:
        port = srv.getsockname()[1]
        t = threading.Thread(target=_serve, args=(srv, 17, split), daemon=True)
        t.start()
        assert server_lease("127.0.0.1", port, timeout=5) == 17
        t.join(5)


def test_server_lease_bounded_when_nobody_answers() -> None:
    with socket.create_server(("127.0.0.1", 0)) as srv:  # accepts, never answers
        port = srv.getsockname()[1]
        with pytest.raises(LeaseProbeError, match="timed out"):
            server_lease("127.0.0.1", port, timeout=0.3)
    with pytest.raises(LeaseProbeError):
        server_lease("127.0.0.1", port, timeout=0.3)  # nothing listens now
