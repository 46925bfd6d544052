"""``miqm exporter`` names the URL it serves: with ``--bind ::1`` it said
``http://::1:9465/metrics``, which no browser, curl or scrape config takes (an IPv6
address in a URL is in brackets)."""

from __future__ import annotations

import socket
import threading
import types

import pytest


def _serve_once(monkeypatch: pytest.MonkeyPatch, bind: str) -> str:
    import miqm.paths
    from miqm.metrics.exporter import run_exporter

    monkeypatch.setattr(miqm.paths, "find", lambda q: types.SimpleNamespace(data_path="/x"))
    stop = threading.Event()
    stop.set()  # serve, say where, and stop at once
    said: list[str] = []
    assert run_exporter("QMX", _free(bind), bind, echo=said.append, stop=stop) == 0
    assert len(said) == 1
    return said[0]


def _free(bind: str) -> int:
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    with socket.socket(family) as s:
        s.bind((bind, 0))
        return int(s.getsockname()[1])


def test_the_url_said_at_start_brackets_an_ipv6_address(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    line = _serve_once(monkeypatch, "::1")
    assert "http://[::1]:" in line and "/metrics" in line, line
    line = _serve_once(monkeypatch, "127.0.0.1")
    assert "http://127.0.0.1:" in line, line
