"""The client/server wire protocol, version 2 (see docs/protocol.md).

A frame is::

    uint32 BE  length of what follows (header length field + header + body)
    uint32 BE  header length
    header     UTF-8 JSON object
    body       raw bytes (a message body, or a push's bodies one after another)

Requests carry ``id`` (echoed in the reply) and ``op``; replies carry ``ok`` and, on
failure, ``mqrc`` and ``error``. A message body travels as raw bytes after the header
(no base64); a header with ``"_b": 1`` has one, so an empty body and no body differ.
Message and correlation ids are small and stay base64 strings in the header.

Version 1 framed bare JSON after the length, so the first payload byte was ``{``; version
2's header length is far below 2**24, so its first payload byte is 0. The listener
tells them apart by that byte and answers a version 1 client with a version 1 refusal it
can print (see :func:`is_v1_payload`).

Requests on a connection may be pipelined: the server answers them in order, and may
interleave ``push`` frames (a streaming consumer's messages) between replies.
"""

from __future__ import annotations

import base64
import json
import json.encoder
import json.scanner
import socket
import struct
from typing import Any

from miqm.errors import NetError

#: Bumped when a request or reply changes incompatibly; the server refuses other versions.
PROTOCOL_VERSION = 2
#: Largest message body (MQ's MAXMSGL limit, 100 MiB).
MAX_MESSAGE = 100 * 1024 * 1024
#: Largest frame either side accepts: one largest message plus headroom for the header.
#: Anything larger is a corrupt or hostile length prefix.
MAX_FRAME = MAX_MESSAGE + 1024 * 1024
#: Largest JSON header (ids, queue names, an MQSC command, a push's message list).
MAX_HEADER = 16 * 1024 * 1024

#: A packed streaming batch's per-message table entry (miqm/net/streaming.py): body
#: length, priority, persistence (0/1), put time in microseconds since the epoch.
PACKED_ENTRY = struct.Struct(">IBBq")

_LEN = struct.Struct(">I")
_HDR = struct.Struct(">II")

#: MQ reason codes the network layer produces itself.
MQRC_CONNECTION_BROKEN = 2009
MQRC_DATA_LENGTH_ERROR = 2010
MQRC_MAX_CONNS_LIMIT_REACHED = 2025
MQRC_NOT_AUTHORIZED = 2035
MQRC_Q_MGR_NAME_ERROR = 2058
MQRC_Q_MGR_NOT_AVAILABLE = 2059
MQRC_UNEXPECTED_ERROR = 2195
MQRC_SSL_INITIALIZATION_ERROR = 2393
MQRC_STANDBY_Q_MGR = 2543
MQRC_CALL_INTERRUPTED = 2549
MQRC_BACKED_OUT = 2003


class ProtocolError(NetError):
    """The peer sent something that is not a valid frame (bad length, not JSON)."""

    def __init__(self, message: str, mqrc: int = MQRC_CONNECTION_BROKEN) -> None:
        super().__init__(message, mqrc=mqrc)


class PeerClosed(NetError):
    """The peer closed the connection (cleanly between frames, or in the middle of one)."""

    def __init__(self, message: str = "the connection was closed by the peer") -> None:
        super().__init__(message, mqrc=MQRC_CONNECTION_BROKEN)


class OldProtocol(ProtocolError):
    """The peer speaks protocol version 1 (bare JSON frames)."""


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


def _not_json(obj: Any) -> Any:
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


# Every request and reply is a JSON header, so both sides encode and decode one per
# call: the C encoder and scanner are made once here and called directly, not through
# JSONEncoder.encode/JSONDecoder.decode, which build a new encoder per call and add two
# Python frames (about a third of the cost of a small header). Same output and errors.
_c_encoder = getattr(json.encoder, "c_make_encoder", None)
_c_scanner = getattr(json.scanner, "c_make_scanner", None)
if _c_encoder is not None and _c_scanner is not None:
    _encode_header = _c_encoder({}, _not_json, json.encoder.c_encode_basestring, None, ":",
                                ",", False, False, True)
    _scan = _c_scanner(json.JSONDecoder())
    _decode_any = json.JSONDecoder().decode

    def _dumps(obj: Any) -> str:
        return "".join(_encode_header(obj, 0))

    def _loads(text: str) -> Any:
        try:
            obj, end = _scan(text, 0)
        except (StopIteration, ValueError):
            end = -1
        if end != len(text):
            # whitespace around the value, or not JSON: the full decoder's answer
            return _decode_any(text)
        return obj
else:  # an interpreter without the C accelerators
    _dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
    _loads = json.JSONDecoder().decode


def encode(obj: dict[str, Any], body: bytes | bytearray | memoryview | None = None) -> bytes:
    """One frame. ``body`` (or, if not given, a bytes ``obj["body"]``) goes raw after the
    header."""
    if body is None:
        raw = obj.get("body")
        if isinstance(raw, (bytes, bytearray, memoryview)):
            obj = dict(obj)
            del obj["body"]
            obj["_b"] = 1
            body = raw
    header = _dumps(obj).encode("utf-8")
    hlen = len(header)
    blen = 0 if body is None else len(body)
    total = 4 + hlen + blen
    if total > MAX_FRAME:
        raise ProtocolError(f"a frame of {total} bytes exceeds the {MAX_FRAME} limit",
                            mqrc=MQRC_DATA_LENGTH_ERROR)
    if hlen > MAX_HEADER:
        raise ProtocolError(f"a frame header of {hlen} bytes exceeds the "
                            f"{MAX_HEADER} limit", mqrc=MQRC_DATA_LENGTH_ERROR)
    if not blen:
        return _HDR.pack(total, hlen) + header
    return b"".join((_HDR.pack(total, hlen), header, body))  # type: ignore[arg-type]


def ok_frame(request_id: int) -> bytes:
    """``encode({"ok": True, "id": request_id})``, byte for byte, without the encoder:
    the reply to nearly every put+commit, commit and ping (a few µs of the server's
    interpreter lock per message, measured in docs/benchmarks.md)."""
    header = b'{"ok":true,"id":%d}' % request_id
    return _HDR.pack(4 + len(header), len(header)) + header


def decode_header(header: bytes | memoryview) -> dict[str, Any]:
    """The object in a frame header; ProtocolError unless it is a JSON object."""
    try:
        obj = _loads(str(header, "utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ProtocolError("a frame header is not valid UTF-8 JSON") from None
    except RecursionError:
        # a header nested deeper than the parser goes (a few KiB of "["): garbage from
        # the peer, on either side of the connection, not a crash of the reading thread
        raise ProtocolError("a frame header is JSON nested too deep") from None
    if not isinstance(obj, dict):
        raise ProtocolError("a frame header does not hold a JSON object")
    return obj


def decode(payload: bytes) -> dict[str, Any]:
    """A frame's payload (everything after the first length) as one object, the raw body
    under ``body`` when the header says there is one."""
    if is_v1_payload(payload):
        raise OldProtocol("the peer speaks protocol version 1 (JSON frames)")
    if len(payload) < 4:
        raise ProtocolError("a frame is shorter than its header length")
    (hlen,) = _LEN.unpack_from(payload)
    if hlen > len(payload) - 4:
        raise ProtocolError("a frame header is longer than its frame")
    obj = decode_header(memoryview(payload)[4:4 + hlen])
    if obj.pop("_b", None):
        obj["body"] = bytes(payload[4 + hlen:])
    elif len(payload) > 4 + hlen:
        obj["body"] = bytes(payload[4 + hlen:])
    return obj


def is_v1_payload(payload: bytes | bytearray | memoryview) -> bool:
    """Whether a payload is a version 1 frame (bare JSON, first byte ``{``)."""
    return len(payload) > 0 and payload[0] == 0x7B


def is_tls_hello(prefix: bytes | bytearray) -> bool:
    """Whether the first bytes on a plain connection are a TLS ClientHello record."""
    return len(prefix) >= 3 and prefix[0] == 0x16 and prefix[1] == 0x03


def encode_v1(obj: dict[str, Any]) -> bytes:
    """A version 1 frame (length + bare JSON): only to refuse a version 1 client in words
    it can print."""
    payload = _dumps(obj).encode("utf-8")
    return _LEN.pack(len(payload)) + payload


class FrameReader:
    """Reads frames from a socket through one buffer (few recv calls for many small
    pipelined frames). ``buffered()`` tells whether a whole frame is already here, so a
    server can hold its replies back until it has answered everything it has read."""

    def __init__(self, sock: socket.socket, max_frame: int = MAX_FRAME) -> None:
        self.sock = sock
        self.max_frame = max_frame
        self._buf = bytearray()
        self._pos = 0

    def _fill(self, need: int, at_boundary: bool) -> None:
        while len(self._buf) - self._pos < need:
            if self._pos and self._pos > len(self._buf) // 2:
                del self._buf[:self._pos]
                self._pos = 0
            chunk = self.sock.recv(max(65536, min(need, 1 << 22)))
            if not chunk:
                if at_boundary and len(self._buf) == self._pos:
                    raise PeerClosed()
                raise PeerClosed("the connection was closed in the middle of a frame")
            self._buf += chunk
            at_boundary = False

    def peek_prefix(self) -> bytes:
        """The first bytes of the next frame (at least 4), read if need be."""
        self._fill(4, True)
        return bytes(self._buf[self._pos:self._pos + 8])

    def unread(self) -> int:
        """Bytes read from the socket and not yet taken as frames (part of one, maybe)."""
        return len(self._buf) - self._pos

    def buffered(self) -> bool:
        """True if a whole frame is already in the buffer."""
        avail = len(self._buf) - self._pos
        if avail < 4:
            return False
        (length,) = _LEN.unpack_from(self._buf, self._pos)
        return avail >= 4 + length

    def read(self) -> dict[str, Any]:
        """The next frame; PeerClosed at a clean end of stream, ProtocolError on garbage
        (OldProtocol for a version 1 frame, with the stream still in step)."""
        # every request and reply passes here: the checks a frame already buffered needs
        # come first, inline, and _fill only when more must be read
        buf, pos = self._buf, self._pos
        if len(buf) - pos < 4:
            self._fill(4, True)
            buf, pos = self._buf, self._pos
        (length,) = _LEN.unpack_from(buf, pos)
        if length > self.max_frame:
            raise ProtocolError(f"the peer announced a frame of {length} bytes (limit "
                                f"{self.max_frame})", mqrc=MQRC_DATA_LENGTH_ERROR)
        if len(buf) - pos < 4 + length:
            self._fill(4 + length, False)
            buf, pos = self._buf, self._pos
        start = pos + 4
        end = start + length
        self._pos = end
        if length and buf[start] == 0x7B:  # "{"
            raise OldProtocol("the peer speaks protocol version 1 (JSON frames)")
        if length < 4:
            raise ProtocolError("a frame is shorter than its header length")
        (hlen,) = _LEN.unpack_from(buf, start)
        if hlen > length - 4:
            raise ProtocolError("a frame header is longer than its frame")
        body_at = start + 4 + hlen
        obj = decode_header(memoryview(buf)[start + 4:body_at])
        if obj.pop("_b", None) or end > body_at:
            obj["body"] = bytes(buf[body_at:end])
        if end == len(buf):
            buf.clear()
            self._pos = 0
        return obj


#: What a read past its deadline raises: TimeoutError on a socket with a Python timeout,
#: BlockingIOError (EAGAIN) on a blocking one with SO_RCVTIMEO (see set_deadlines).
READ_TIMEOUT = (TimeoutError, BlockingIOError)

_TIMEVAL = struct.Struct("@ll")


def set_deadlines(sock: socket.socket, seconds: float | None) -> None:
    """Make ``sock`` blocking, with reads and writes that give up after ``seconds``
    (None or 0: never) through SO_RCVTIMEO/SO_SNDTIMEO, and so raise
    :data:`READ_TIMEOUT`.

    A Python timeout does the same with a ``poll`` before every ``recv`` and ``send``:
    two system calls, and the interpreter lock dropped twice, per read. On a busy
    listener that doubles the thread switches per request. Not for TLS sockets, whose
    reads need the Python timeout to retry a partial record."""
    if sock.gettimeout() is not None:
        sock.settimeout(None)
    secs = 0.0 if not seconds or seconds <= 0 else float(seconds)
    tv = _TIMEVAL.pack(int(secs), int((secs - int(secs)) * 1e6) if secs else 0)
    if secs and tv == _TIMEVAL.pack(0, 0):
        tv = _TIMEVAL.pack(0, 1)  # below a microsecond: still a deadline, not "never"
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)


def read_frame(sock: socket.socket) -> dict[str, Any]:
    """Read one frame without buffering past it (a reader that owns the socket should
    use :class:`FrameReader`)."""
    (length,) = _LEN.unpack(_recv_exact(sock, 4, at_boundary=True))
    if length > MAX_FRAME:
        raise ProtocolError(f"the peer announced a frame of {length} bytes (limit {MAX_FRAME})",
                            mqrc=MQRC_DATA_LENGTH_ERROR)
    return decode(_recv_exact(sock, length, at_boundary=False))


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


def write_frame(sock: socket.socket, obj: dict[str, Any]) -> None:
    """Send one frame (all of it, or raise OSError)."""
    sock.sendall(encode(obj))


def error_reply(mqrc: int, message: str, amq: str | None = None) -> dict[str, Any]:
    """The reply shape for a failed request."""
    reply: dict[str, Any] = {"ok": False, "mqrc": mqrc, "error": message}
    if amq:
        reply["amq"] = amq
    return reply
