"""Free TCP ports for tests that run listeners, exporters or containers."""

from __future__ import annotations

import socket

import pytest

# Ports this test process has handed out. The kernel may give the same ephemeral port to
# two binds in a row once the first socket is closed, and two services a test starts
# side by side (an exporter and a Prometheus server, say) must not both get it.
_handed_out: set[int] = set()


def free_port(*also: str) -> int:
    """A port free on 127.0.0.1 and on each address of ``also`` (e.g. ``"127.0.0.2"``,
    where the second instance of a local pair listens), never one handed out before in
    this process; skips the test if none is."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port in _handed_out:
            continue
        try:
            for host in also:
                with socket.socket() as s2:
                    s2.bind((host, port))
            _handed_out.add(port)
            return port
        except OSError:
            continue
    pytest.skip(f"no port free on 127.0.0.1 and {', '.join(also)}")
