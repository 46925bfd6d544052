"""Ask an NFSv4 server for its lease time, without libnfs and without any client state.

libnfs 4.0 offers no call that returns a server attribute of the pseudo root, so this
module sends one stateless ONC RPC over TCP (RFC 5531 record marking, AUTH_SYS):
``COMPOUND { PUTROOTFH; GETATTR(lease_time) }`` (RFC 7530, attribute 10) and reads the
``nfs_lease4`` (seconds) from the reply. No client id is set up, so nothing has to be
cleaned up on the server afterwards.

:func:`server_lease` returns the lease in seconds or raises :class:`LeaseProbeError`;
the nfs4 backend uses it to make sure it never believes in a longer lease than the
server grants (see ``Nfs4Volume.lease_seconds``).
"""

from __future__ import annotations

import os
import random
import socket
import struct
import time

NFS_PROGRAM = 100003
NFS_V4 = 4
PROC_COMPOUND = 1
AUTH_SYS = 1
OP_PUTROOTFH = 24
OP_GETATTR = 9
FATTR4_LEASE_TIME = 10
_LAST_FRAGMENT = 0x80000000


class LeaseProbeError(Exception):
    """The server did not tell its lease (unreachable, refused, or an odd reply)."""


def _opaque(data: bytes) -> bytes:
    """XDR variable-length opaque: length, bytes, padding to 4."""
    pad = (4 - len(data) % 4) % 4
    return struct.pack(">I", len(data)) + data + b"\0" * pad


def build_call(xid: int, machine: str = "miqm") -> bytes:
    """The RPC record (with its record mark) asking for the root's lease_time."""
    cred = struct.pack(">I", int(time.time()) & 0xFFFFFFFF) + _opaque(
        machine.encode()[:255]) + struct.pack(">III", 0, 0, 0)  # uid 0, gid 0, no gids
    header = struct.pack(">IIIIII", xid, 0, 2, NFS_PROGRAM, NFS_V4, PROC_COMPOUND)
    auth = struct.pack(">I", AUTH_SYS) + _opaque(cred) + struct.pack(">II", 0, 0)
    bitmap = struct.pack(">II", 1, 1 << FATTR4_LEASE_TIME)
    compound = (_opaque(b"") + struct.pack(">II", 0, 2) + struct.pack(">I", OP_PUTROOTFH)
                + struct.pack(">I", OP_GETATTR) + bitmap)
    body = header + auth + compound
    return struct.pack(">I", _LAST_FRAGMENT | len(body)) + body


class _Reader:
    """Sequential XDR decoding of a reply body."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def u32(self) -> int:
        if self.pos + 4 > len(self.data):
            raise LeaseProbeError("short reply from the NFS server")
        (value,) = struct.unpack_from(">I", self.data, self.pos)
        self.pos += 4
        return int(value)

    def opaque(self) -> bytes:
        n = self.u32()
        if n > len(self.data) - self.pos:
            raise LeaseProbeError("malformed reply from the NFS server")
        out = self.data[self.pos:self.pos + n]
        self.pos += n + (4 - n % 4) % 4
        return out


def parse_reply(xid: int, body: bytes) -> int:
    """The lease (seconds) in a reply body (record marks removed) to :func:`build_call`."""
    r = _Reader(body)
    if r.u32() != xid:
        raise LeaseProbeError("reply to another call")
    if r.u32() != 1:
        raise LeaseProbeError("not an RPC reply")
    if r.u32() != 0:
        raise LeaseProbeError("RPC call denied (authentication or version)")
    r.u32()  # verifier flavour
    r.opaque()  # verifier body
    accept = r.u32()
    if accept != 0:
        raise LeaseProbeError(f"RPC call not accepted (accept_stat {accept})")
    status = r.u32()
    r.opaque()  # tag
    if status != 0:
        raise LeaseProbeError(f"COMPOUND failed with NFSv4 status {status}")
    count = r.u32()
    if count != 2:
        raise LeaseProbeError(f"COMPOUND answered {count} operations, not 2")
    if r.u32() != OP_PUTROOTFH or r.u32() != 0:
        raise LeaseProbeError("PUTROOTFH failed")
    if r.u32() != OP_GETATTR or r.u32() != 0:
        raise LeaseProbeError("GETATTR failed")
    words = [r.u32() for _ in range(r.u32())]
    attrs = _Reader(r.opaque())
    if not words or not words[0] & (1 << FATTR4_LEASE_TIME):
        raise LeaseProbeError("the server did not return lease_time")
    if words[0] & ((1 << FATTR4_LEASE_TIME) - 1):
        raise LeaseProbeError("the server returned attributes that were not asked for")
    return attrs.u32()


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise LeaseProbeError("the NFS server closed the connection")
        out += chunk
    return bytes(out)


def server_lease(server: str, port: int = 2049, *, timeout: float = 3.0) -> int:
    """The server's NFSv4 lease time in seconds; every step is bounded by ``timeout``."""
    xid = random.getrandbits(32)
    try:
        with socket.create_connection((server, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(build_call(xid, socket.gethostname() or f"miqm-{os.getpid()}"))
            body = bytearray()
            while True:
                (mark,) = struct.unpack(">I", _recv_exact(sock, 4))
                length = mark & ~_LAST_FRAGMENT
                if length > 1 << 20:
                    raise LeaseProbeError("oversized reply from the NFS server")
                body += _recv_exact(sock, length)
                if mark & _LAST_FRAGMENT:
                    break
    except OSError as exc:
        raise LeaseProbeError(f"{server}:{port}: {exc}") from None
    lease = parse_reply(xid, bytes(body))
    if lease <= 0:
        raise LeaseProbeError(f"the server reported a lease of {lease}s")
    return lease
