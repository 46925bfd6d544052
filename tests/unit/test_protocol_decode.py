"""Frame decoding refuses garbage with ProtocolError, whichever side reads it."""
from __future__ import annotations

import socket

import pytest

from miqm.net.protocol import FrameReader, ProtocolError, decode_header, encode


def test_a_header_nested_too_deep_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="nested too deep"):
        decode_header(b"[" * 200_000)


def test_a_reader_given_a_deep_header_refuses_it_and_keeps_working() -> None:
    a, b = socket.socketpair()
    try:
        deep = b"[" * 200_000
        frame = (4 + len(deep)).to_bytes(4, "big") + len(deep).to_bytes(4, "big") + deep
        a.sendall(frame + encode({"ok": True}))
        reader = FrameReader(b)
        with pytest.raises(ProtocolError):
            reader.read()
        assert reader.read() == {"ok": True}  # the stream stays in step
    finally:
        a.close()
        b.close()
