"""Free TCP ports for tests that run listeners, exporters or containers."""

from __future__ import annotations

import socket

import pytest


def free_port(*also: str) -> int:
    """A port free on 127.0.0.1 and on each address of ``also`` (e.g. ``"127.0.0.2"``,
    where the second instance of a local pair listens); skips the test if none is."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        try:
            for host in also:
                with socket.socket() as s2:
                    s2.bind((host, port))
            return port
        except OSError:
            continue
    pytest.skip(f"no port free on 127.0.0.1 and {', '.join(also)}")
