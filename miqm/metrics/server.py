"""The HTTP endpoint: ``/metrics`` from one registry holding one collector, served on a
daemon thread of its own (a scrape never runs on a thread of the instance's).

The text is the Prometheus text format 0.0.4, byte for byte what prometheus_client's
``generate_latest`` writes for these families (a unit test compares them), written by a
lean loop: in an instance whose threads all want the interpreter lock, a scrape's
latency follows the CPU it needs, and the general formatter validates and escapes every
name of every sample again (about two thirds of a scrape's time).
"""

from __future__ import annotations

import errno
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.utils import floatToGoString

from miqm.errors import MetricsError

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: seconds a connection may take to send its request (a scraper sends it at once): an idle
#: or trickling client is closed instead of holding a thread for ever
REQUEST_TIMEOUT = 10.0


def _escape_value(v: str) -> str:
    if "\\" in v or "\n" in v or '"' in v:
        return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return v


def exposition(registry: CollectorRegistry) -> bytes:
    """The registry's samples in the text format (gauges, counters, histograms)."""
    out: list[str] = []
    add = out.append
    for metric in registry.collect():
        name, mtype = metric.name, metric.type
        if mtype == "counter":
            name += "_total"
        elif mtype == "unknown":
            mtype = "untyped"
        doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
        add(f"# HELP {name} {doc}\n# TYPE {name} {mtype}\n")
        for s in metric.samples:
            if s.name.endswith("_created"):
                continue  # not written in this format (prometheus_client puts them apart)
            labels = s.labels
            if labels:
                text = ",".join(f'{k}="{_escape_value(v)}"' for k, v in sorted(labels.items()))
                add(f"{s.name}{{{text}}} {floatToGoString(s.value)}\n")
            else:
                add(f"{s.name} {floatToGoString(s.value)}\n")
    return "".join(out).encode("utf-8")


class MetricsServer:
    """A running endpoint; :meth:`stop` shuts it down."""

    def __init__(self, httpd: ThreadingHTTPServer, thread: threading.Thread,
                 registry: CollectorRegistry) -> None:
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


def _handler(registry: CollectorRegistry) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        timeout = REQUEST_TIMEOUT

        def _serve(self, with_body: bool) -> None:
            if self.path.split("?")[0] not in ("/metrics", "/"):
                self.send_error(404, "only /metrics is served here")
                return
            try:
                body = exposition(registry)
            except Exception as exc:  # the collector is meant never to raise: say so
                self.send_error(500, f"collecting failed: {type(exc).__name__}")
                return
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if with_body:
                self.wfile.write(body)

        def do_GET(self) -> None:
            self._serve(True)

        def do_HEAD(self) -> None:  # curl -I, uptime checkers
            self._serve(False)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # a scrape every few seconds is not worth a line

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    #: requests that ended in an error (mostly a scraper that went away mid-answer)
    failed_requests = 0

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Count it and go on. socketserver's default prints a traceback to stderr, which
        is the exporter's terminal or the instance's output file, for every scraper that
        times out or resets its connection before the answer is written."""
        self.failed_requests += 1


def serve(collector: Any, port: int, bind: str, what: str, *,
          advice: str = "choose another port (0: no metrics endpoint)",
          bind_what: str = "Metrics: BindAddress") -> MetricsServer:
    """Serve ``collector`` on ``bind:port``; MetricsError naming ``what`` (the setting the
    port came from) and ``advice`` when the port cannot be used, or ``bind_what`` (the
    setting the address came from) when ``bind`` is not an address of this host."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    server_class: type[_Server] = _Server
    if ":" in bind:  # an IPv6 address
        import socket

        class _Server6(_Server):
            address_family = socket.AF_INET6

        server_class = _Server6
    try:
        httpd = server_class((bind, port), _handler(registry))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            why = "is in use by another process"
        elif exc.errno == errno.EACCES:
            why = "needs privileges this process does not have"
        elif exc.errno == errno.EADDRNOTAVAIL:
            raise MetricsError(f"{bind_what}={bind}: {bind} is not an address of this "
                               f"host; use one of its addresses (127.0.0.1: this host only, "
                               "0.0.0.0: every interface)") from None
        else:
            why = f"cannot be used ({exc.strerror or exc})"
        raise MetricsError(f"{what}={port}: {bind}:{port} {why}; {advice}") from None
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.5},
                              name="metrics-http", daemon=True)
    thread.start()
    return MetricsServer(httpd, thread, registry)
