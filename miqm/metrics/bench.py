"""``miqm bench metrics``: what serving /metrics costs, measured side by side in one run.

1. **Scrape latency under load**: a real active instance (``strmqm`` in a temporary data
   root, ``MIQM_METRICS_PORT``) with ``producers`` client threads doing persistent put +
   commit; a scraper in a process of its own fetches /metrics every 0.1 s; p50/p99/max.
2. **Throughput with and without a scraper**: the store as ``miqm bench store`` drives it
   (in this process, ``producers`` threads), serving /metrics from the same collector;
   slices without and with a scraper fetching every second (a process of its own)
   alternate, so both figures come from the same moments of a shared disk and CPU.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Scraper:
    """A process of its own that fetches ``url`` every ``interval`` seconds for as long as
    it is told (started once: its interpreter's start-up does not land in a measurement)."""

    def __init__(self, url: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "miqm.metrics.bench", "serve",
                                      url], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)

    def run(self, interval: float, seconds: float) -> list[float]:
        """Scrape for ``seconds``; the latencies."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{interval} {seconds}\n")
        self.proc.stdin.flush()
        return [float(x) for x in json.loads(self.proc.stdout.readline())]

    def start(self, interval: float, seconds: float) -> None:
        """Begin a run in the background (:meth:`result` collects it)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{interval} {seconds}\n")
        self.proc.stdin.flush()

    def result(self) -> list[float]:
        """The latencies of the run begun by :meth:`start`."""
        assert self.proc.stdout is not None
        return [float(x) for x in json.loads(self.proc.stdout.readline())]

    def close(self) -> None:
        """End the process."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(30)


def _scrape_loop(url: str, interval: float, seconds: float) -> list[float]:
    out = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.perf_counter()
        with urllib.request.urlopen(url, timeout=10) as r:
            r.read()
        out.append(time.perf_counter() - t0)
        time.sleep(max(0.0, interval - (time.perf_counter() - t0)))
    return out


def _pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(len(v) * q))] if v else 0.0


def _drain_in_units(store: Any, batch: int = 1000) -> None:
    """Empty BENCH.Q a thousand gets per unit of work (one force each, not one per get)."""
    while True:
        uow = store.begin()
        n = 0
        while n < batch and store.get("BENCH.Q", uow=uow) is not None:
            n += 1
        store.commit(uow)
        if n < batch:
            break
    store.checkpoint()


class StoreView:
    """What :class:`~miqm.metrics.instance.InstanceCollector` reads of an instance, for a
    store driven in this process (no controller: no monitors, no listener)."""

    def __init__(self, store: Any, data: Any) -> None:
        self.qmgr, self.host, self.pid = "BENCH", "bench", os.getpid()
        self.mode, self.status, self.permit_standby = "active", "Running", False
        self.store, self.data = store, data
        self.cfg = self.record = self.monitors = self.listener = self.service = None


def scrape_under_load(seconds: float, producers: int, echo: Callable[[str], None]
                      ) -> dict[str, Any]:
    """Part 1 (see the module docstring)."""
    from miqm.bench.clients import client_of
    from miqm.localpair import LocalPair
    from miqm.net.client import connect
    from miqm.net.protocol import b64

    port = _free_port()
    with LocalPair(qmgr="QMBENCHM") as pair:
        pair.a.extra["MIQM_METRICS_PORT"] = str(port)
        pair.create()
        pair.start(pair.a)
        pair.mqsc(pair.a, "DEFINE QLOCAL(BENCH.Q) MAXDEPTH(100000000)\n")
        stop = threading.Event()
        counts: list[int] = []
        errors: list[str] = []
        body = b64(b"x" * 1024)

        def producer() -> None:
            n = 0
            try:
                with connect("QMBENCHM") as conn:
                    while not stop.is_set():
                        conn.call("put", queue="BENCH.Q", body=body, persistent=True,
                                  syncpoint=True)
                        conn.call("commit")
                        n += 1
            except Exception as exc:  # reported with the figures
                errors.append(f"{type(exc).__name__}: {exc}")
            counts.append(n)

        scraper = Scraper(f"http://127.0.0.1:{port}/metrics")
        try:
            idle = scraper.run(0.1, min(seconds, 3.0))  # the same instance with no load
            with client_of(pair.a.root, pair.a.name):
                threads = [threading.Thread(target=producer, daemon=True)
                           for _ in range(producers)]
                for t in threads:
                    t.start()
                time.sleep(1.0)  # all connected and committing
                t0 = time.monotonic()
                lat = scraper.run(0.1, seconds)
                took = time.monotonic() - t0
                stop.set()
                for t in threads:
                    t.join(30)
        finally:
            scraper.close()
    result = {"producers": producers, "scrapes": len(lat),
              "idle_p50_ms": round(_pct(idle, 0.5) * 1000, 2),
              "idle_p99_ms": round(_pct(idle, 0.99) * 1000, 2),
              "p50_ms": round(_pct(lat, 0.5) * 1000, 2),
              "p99_ms": round(_pct(lat, 0.99) * 1000, 2),
              "max_ms": round(max(lat) * 1000, 2) if lat else 0.0,
              "client_commits_per_s": round(sum(counts) / took, 1) if took else 0.0}
    if errors:
        result["errors"] = errors[:3]
    echo(f"scrape latency of an active instance under {producers} client producers: "
         f"p50 {result['p50_ms']} ms, p99 {result['p99_ms']} ms, max {result['max_ms']} ms "
         f"({len(lat)} scrapes; {result['client_commits_per_s']:.0f} commits/s meanwhile); "
         f"the same instance idle: p50 {result['idle_p50_ms']} ms, p99 "
         f"{result['idle_p99_ms']} ms")
    return result


def store_with_and_without_scraper(seconds: float, rounds: int, producers: int,
                                   echo: Callable[[str], None],
                                   directory: str | None = None) -> dict[str, Any]:
    """Part 2 (see the module docstring)."""
    from lockfs.volume import open_volume
    from miqm.bench.store import _create_store, _open_store, commit_run
    from miqm.metrics.instance import InstanceCollector
    from miqm.metrics.server import serve

    base = tempfile.mkdtemp(prefix="miqm-bench-metrics-", dir=directory)
    try:
        _create_store(base)
        store = _open_store(base)
        server = None
        try:
            store.define_queue("BENCH.Q", MAXDEPTH=100_000_000)
            view = StoreView(store, open_volume(os.path.join(base, "data")))
            server = serve(InstanceCollector(view), _free_port(), "127.0.0.1", "bench")
            url = f"http://127.0.0.1:{server.address[1]}/metrics"
            body = b"x" * 1024
            totals = {False: [0, 0.0], True: [0, 0.0]}
            slices: dict[bool, list[float]] = {False: [], True: []}
            scrapes = 0
            scraper = Scraper(url)
            commit_run(store, producers, min(seconds, 1.0), body)  # warm-up, not counted
            _drain_in_units(store)
            for r in range(rounds):  # the order alternates too: no side always goes first
                for scraping in ((False, True) if r % 2 == 0 else (True, False)):
                    if scraping:
                        scraper.start(1.0, seconds)
                    run = commit_run(store, producers, seconds, body)
                    totals[scraping][0] += run.commits
                    totals[scraping][1] += run.commits / run.commits_per_s  # type: ignore[attr-defined]
                    slices[scraping].append(round(run.commits_per_s, 1))  # type: ignore[attr-defined]
                    if scraping:
                        scrapes += len(scraper.result())
                    _drain_in_units(store)
            scraper.close()
        finally:
            if server is not None:
                server.stop()
            store.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    without = totals[False][0] / totals[False][1] if totals[False][1] else 0.0
    with_ = totals[True][0] / totals[True][1] if totals[True][1] else 0.0
    result = {"producers": producers, "rounds": rounds, "slice_s": seconds,
              "commits_per_s_without_scraper": round(without, 1),
              "commits_per_s_with_1s_scraper": round(with_, 1),
              "ratio": round(with_ / without, 3) if without else 0.0, "scrapes": scrapes,
              # each slice's rate: how far the shared machine moves them apart by itself
              "slices_without": slices[False], "slices_with": slices[True]}
    echo(f"store, {producers} producers: {without:.0f} commits/s without a scraper, "
         f"{with_:.0f} with one scraping every second (ratio {result['ratio']}; "
         f"{rounds} alternating slices of {seconds:g}s each; slices ranged "
         f"{min(slices[False]):.0f}-{max(slices[False]):.0f} without, "
         f"{min(slices[True]):.0f}-{max(slices[True]):.0f} with)")
    return result


def bench_metrics(seconds: float = 10.0, rounds: int = 4, producers: int = 64,
                  echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Both parts; the figures as a dict."""
    return {"scrape_under_load": scrape_under_load(seconds, producers, echo),
            "store_scraper_effect": store_with_and_without_scraper(
                max(1.0, seconds / 4), rounds, producers, echo)}


def main(argv: list[str]) -> int:
    """``python -m miqm.metrics.bench serve URL`` (the scraper process): for each line
    ``INTERVAL SECONDS`` on stdin, scrape and print the latencies as one JSON line."""
    if len(argv) == 2 and argv[0] == "serve":
        for line in sys.stdin:
            interval, seconds = (float(x) for x in line.split())
            print(json.dumps(_scrape_loop(argv[1], interval, seconds)), flush=True)
        return 0
    print("usage: python -m miqm.metrics.bench serve URL", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
