"""The client/server wire protocol: length-prefixed JSON frames (see docs/protocol.md).

A frame is a 4-byte big-endian unsigned length followed by that many bytes of UTF-8
JSON holding one object. Requests carry ``v`` (protocol version), ``id`` (echoed in the
reply) and ``op``; replies carry ``ok`` and, on failure, ``mqrc`` and ``error``. Message
bodies and ids are base64 strings, because JSON cannot carry raw bytes.

Kept deliberately small: one request, one reply, in order, per connection. The framing
functions work on any object with ``sendall``/``recv`` (a socket).
"""

from __future__ import annotations

import base64
import json
import socket
import struct
from typing import Any

from miqm.errors import NetError

#: Bumped when a request or reply changes incompatibly; the server refuses other versions.
PROTOCOL_VERSION = 1
#: Largest frame either side accepts: a 100 MiB message (MQ's MAXMSGL limit) in base64
#: plus headroom. Anything larger is a corrupt or hostile length prefix.
MAX_FRAME = 140 * 1024 * 1024

_LEN = struct.Struct(">I")

#: MQ reason codes the network layer produces itself.
MQRC_CONNECTION_BROKEN = 2009
MQRC_Q_MGR_NAME_ERROR = 2058
MQRC_Q_MGR_NOT_AVAILABLE = 2059
MQRC_UNEXPECTED_ERROR = 2195
MQRC_STANDBY_Q_MGR = 2543
MQRC_CALL_INTERRUPTED = 2549
MQRC_BACKED_OUT = 2003


class ProtocolError(NetError):
    """The peer sent something that is not a valid frame (bad length, not JSON)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, mqrc=MQRC_CONNECTION_BROKEN)


class PeerClosed(NetError):
    """The peer closed the connection (cleanly between frames, or in the middle of one)."""

    def __init__(self, message: str = "the connection was closed by the peer") -> None:
        super().__init__(message, mqrc=MQRC_CONNECTION_BROKEN)


def b64(data: bytes | None) -> str | None:
    """Bytes as a base64 string for a JSON field (None stays None)."""
    return None if data is None else base64.b64encode(data).decode("ascii")


def unb64(text: str | None) -> bytes | None:
    """The bytes of a base64 JSON field; ProtocolError if it is not base64."""
    if text is None:
        return None
    try:
        return base64.b64decode(text, validate=True)
    except (ValueError, TypeError):
        raise ProtocolError("a binary field is not valid base64") from None


def encode(obj: dict[str, Any]) -> bytes:
    """One frame: length prefix + compact UTF-8 JSON."""
    payload = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if len(payload) > MAX_FRAME:
        raise ProtocolError(f"a frame of {len(payload)} bytes exceeds the {MAX_FRAME} limit")
    return _LEN.pack(len(payload)) + payload


def decode(payload: bytes) -> dict[str, Any]:
    """The object in a frame's payload; ProtocolError unless it is a JSON object."""
    try:
        obj = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ProtocolError("a frame is not valid UTF-8 JSON") from None
    if not isinstance(obj, dict):
        raise ProtocolError("a frame does not hold a JSON object")
    return obj


def _recv_exact(sock: socket.socket, n: int, *, at_boundary: bool) -> bytes:
    """Exactly ``n`` bytes; PeerClosed if the peer closes first."""
    chunks: list[bytes] = []
    got = 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            if at_boundary and got == 0:
                raise PeerClosed()
            raise PeerClosed("the connection was closed in the middle of a frame")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_frame(sock: socket.socket) -> dict[str, Any]:
    """Read one frame; PeerClosed at a clean end of stream, ProtocolError on garbage."""
    (length,) = _LEN.unpack(_recv_exact(sock, _LEN.size, at_boundary=True))
    if length > MAX_FRAME:
        raise ProtocolError(f"the peer announced a frame of {length} bytes (limit {MAX_FRAME})")
    return decode(_recv_exact(sock, length, at_boundary=False))


def write_frame(sock: socket.socket, obj: dict[str, Any]) -> None:
    """Send one frame (all of it, or raise OSError)."""
    sock.sendall(encode(obj))


def error_reply(mqrc: int, message: str, amq: str | None = None) -> dict[str, Any]:
    """The reply shape for a failed request."""
    reply: dict[str, Any] = {"ok": False, "mqrc": mqrc, "error": message}
    if amq:
        reply["amq"] = amq
    return reply
