"""The HTTP endpoint: ``/metrics`` from one registry holding one collector, served by
prometheus_client on a daemon thread of its own (a scrape never runs on a thread of the
instance's)."""

from __future__ import annotations

import errno
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server

from miqm.errors import MetricsError


class MetricsServer:
    """A running endpoint; :meth:`stop` shuts it down."""

    def __init__(self, httpd: Any, thread: Any, registry: CollectorRegistry) -> None:
        self.httpd = httpd
        self.thread = thread
        self.registry = registry

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) it listens on."""
        host, port = self.httpd.server_address[:2]
        return str(host), int(port)

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self.httpd.shutdown()
        self.httpd.server_close()


def serve(collector: Any, port: int, bind: str, what: str) -> MetricsServer:
    """Serve ``collector`` on ``bind:port``; MetricsError naming ``what`` (the setting the
    port came from) when the port cannot be used."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    try:
        httpd, thread = start_http_server(port, addr=bind, registry=registry)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            why = "is in use by another process"
        elif exc.errno == errno.EACCES:
            why = "needs privileges this process does not have"
        elif exc.errno == errno.EADDRNOTAVAIL:
            why = "is not an address of this host"
        else:
            why = f"cannot be used ({exc.strerror or exc})"
        raise MetricsError(f"{what}={port}: {bind}:{port} {why}; choose another port "
                           "(0: no metrics endpoint)") from None
    httpd.daemon_threads = True
    return MetricsServer(httpd, thread, registry)
