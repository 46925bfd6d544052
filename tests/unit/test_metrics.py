"""Pure parts of the metrics: the histogram, the deadline-bounded probe cache, qm.ini's
Metrics: stanza, and the monitors' margins."""

from __future__ import annotations

import re
import threading
import time

import pytest

from miqm.config import Stanza
from miqm.errors import MetricsError
from miqm.ha.monitors import Monitors, Ownership
from miqm.histogram import Histogram
from miqm.metrics.probe import CachedProbe
from miqm.metrics.settings import metrics_required, metrics_settings


def test_histogram_counts_cumulatively_with_inf_last() -> None:
    h = Histogram((0.1, 1.0))
    for v in (0.05, 0.1, 0.5, 3.0):
        h.observe(v)
    buckets, total, count = h.snapshot()
    assert buckets == [(0.1, 2), (1.0, 3), (float("inf"), 4)]  # le: 0.1 counts 0.1 itself
    assert count == 4 and total == pytest.approx(3.65)
    with pytest.raises(ValueError):
        Histogram((1.0, 0.5))


def test_probe_returns_within_its_deadline_and_keeps_the_last_value_while_a_read_hangs(
        ) -> None:
    release = threading.Event()
    hang = threading.Event()
    calls = []

    def read() -> int:
        calls.append(1)
        if hang.is_set():
            release.wait(10)
        return len(calls)

    probe = CachedProbe("t", read, deadline=10.0)  # reads that come back (a loaded CPU)
    assert probe.get()[0] == 1 and probe.fresh
    probe.deadline = 0.05
    hang.set()
    t0 = time.monotonic()
    value, age = probe.get()
    assert time.monotonic() - t0 < 1.0
    assert value == 1 and age is not None and not probe.fresh and probe.in_flight
    value, _age = probe.get()  # no second read while one hangs
    assert len(calls) == 2 and value == 1 and probe.overdue == 2
    hang.clear()
    release.set()
    deadline = time.monotonic() + 5
    while probe.in_flight and time.monotonic() < deadline:
        time.sleep(0.01)
    probe.deadline = 10.0
    assert probe.get()[0] == 3 and probe.fresh  # the hung read came back (2), then a new one


def test_probe_failure_keeps_the_value_and_says_why() -> None:
    fail = [False]

    def read() -> str:
        if fail[0]:
            raise OSError("stale file handle")
        return "ok"

    probe = CachedProbe("t", read, deadline=1.0)
    assert probe.get()[0] == "ok"
    fail[0] = True
    assert probe.get()[0] == "ok" and not probe.fresh
    assert "stale file handle" in probe.error and probe.failures == 1


def _stanzas(**values: str) -> list[Stanza]:
    return [Stanza("Log", {"LogPath": "/x"}), Stanza("Metrics", dict(values))]


def test_metrics_settings_defaults_env_and_bad_values() -> None:
    s = metrics_settings([], env={})
    assert not s.enabled and s.bind == "127.0.0.1" and s.required
    s = metrics_settings(_stanzas(Port="9464", BindAddress="0.0.0.0"), env={})
    assert (s.port, s.bind, s.port_source) == (9464, "0.0.0.0", "qm.ini Metrics: Port")
    s = metrics_settings(_stanzas(Port="9464"), env={"MIQM_METRICS_PORT": "0"})
    assert not s.enabled and s.port_source == "MIQM_METRICS_PORT"
    for values, env, words in (
            ({"Port": "abc"}, {}, "qm.ini: Metrics: Port='abc' is not a port number"),
            ({"Port": "65536"}, {}, "Port='65536'"),
            ({"Port": "-1"}, {}, "Port='-1'"),
            ({}, {"MIQM_METRICS_PORT": "x1"}, "MIQM_METRICS_PORT (over qm.ini"),
            ({"Port": "1", "BindAddress": "localhost:9"}, {}, "BindAddress='localhost:9'"),
            ({"Required": "maybe"}, {}, "Required='maybe' must be Yes or No")):
        with pytest.raises(MetricsError) as info:
            metrics_settings(_stanzas(**values), env=env)
        assert words in str(info.value)
        assert "\n" not in info.value.user_line()
    assert metrics_required(_stanzas(Required="no")) is False
    assert metrics_required([]) is True


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_margins_count_down_to_the_check_that_would_stop_the_instance() -> None:
    clock = _Clock()
    progress = [(5, 0)]
    own = Ownership(3.0, lambda: None, clock=clock)
    mon = Monitors(own, lambda: 0.001, lambda: progress[0], lambda a, t: None,
                   verify_interval=1, monitor_stall=2, liveness_interval=10, clock=clock)
    mon.verify_once()
    m = mon.margins()
    assert m["monitor"] == 2 and m["ownership"] == pytest.approx(3.0)
    assert m["liveness"] == 20  # no check yet: the next one, then a whole interval
    mon.verify_started = clock.now - 1.5  # a verify hanging for 1.5 s of MonitorStall 2
    assert mon.margins()["monitor"] == pytest.approx(0.5)
    assert mon.margins(lease=10, lease_age=5.8)["monitor"] == pytest.approx(0.2)
    progress[0] = (5, 3)  # callers waiting at a check...
    mon.liveness_once()
    clock.now += 4
    assert mon.margins()["liveness"] == pytest.approx(6)  # ...and no force since: 6 s left
    progress[0] = (6, 3)  # a force completed: a whole interval more
    assert mon.margins()["liveness"] == pytest.approx(16)
    assert mon.verify_seconds.count == 1


def test_store_collector_exposition_is_what_prometheus_client_writes(tmp_path) -> None:
    """A real store driven in this process (as ``miqm bench metrics`` serves it): its log
    and checkpoint histograms count, the queue shows, and the lean formatter writes
    byte for byte what prometheus_client's generate_latest writes."""
    import re

    from prometheus_client import CollectorRegistry, generate_latest

    from lockfs.volume import open_volume
    from miqm.bench.store import _create_store, _open_store
    from miqm.metrics.bench import StoreView
    from miqm.metrics.instance import InstanceCollector
    from miqm.metrics.server import exposition

    _create_store(str(tmp_path))
    store = _open_store(str(tmp_path))
    try:
        store.define_queue("Q.ONE")
        for i in range(3):
            uow = store.begin()
            store.put("Q.ONE", b"m%d" % i, persistent=True, uow=uow)
            store.commit(uow)
        uow = store.begin()
        store.put("Q.ONE", b"open", persistent=True, uow=uow)
        assert store.log.force_seconds.count >= 3 and store.log.force_bytes.sum > 0
        assert store.checkpoint_seconds.count >= 1  # the one taken at open
        registry = CollectorRegistry(auto_describe=False)
        collector = InstanceCollector(StoreView(store, open_volume(str(tmp_path / "data"))))
        registry.register(collector)
        collector.fs.deadline = 10.0  # the shared-file read always completes in the scrape
        ours = exposition(registry).decode()
        theirs = generate_latest(registry).decode()
        age = r"(miqm_filesystem_probe_age_seconds\{[^}]*\}) \S+"
        assert re.sub(age, r"\1", ours) == re.sub(age, r"\1", theirs)
        assert 'miqm_queue_depth{instance="bench",qmgr="BENCH",queue="Q.ONE"} 4.0' in ours
        assert ('miqm_queue_uncommitted_messages{instance="bench",qmgr="BENCH",'
                'queue="Q.ONE"} 1.0') in ours
        assert 'miqm_log_space_backouts_total{instance="bench",qmgr="BENCH"} 0.0' in ours
        assert collector.errors == 0, collector.last_error
        store.backout(uow)
    finally:
        store.close()



def test_log_space_pinned_is_the_oldest_unit_not_the_space_in_use(tmp_path) -> None:
    """miqm_log_space_pinned_bytes (what MiqmLogSpaceNearlyFull reads) is the log from
    the oldest unit of work in flight to the head, as AMQ7469 weighs it: 0 with every
    unit committed however much log lies between the restart point and the head (that
    space climbs to half the log between checkpoints: the alert on it paged a healthy
    queue manager), and a unit held open pins all the log written after its first
    record."""
    from miqm.bench.store import _create_store, _open_store
    from miqm.metrics.instance import log_space_pinned

    _create_store(str(tmp_path))
    store = _open_store(str(tmp_path))
    try:
        store.define_queue("Q.ONE")
        for i in range(20):
            uow = store.begin()
            store.put("Q.ONE", b"m%d" % i * 100, persistent=True, uow=uow)
            store.commit(uow)
        assert store.log.usage() > 0  # log in use since the restart point...
        assert log_space_pinned(store) == 0  # ...but no unit holds any of it
        held = store.begin()
        store.put("Q.ONE", b"held", persistent=True, uow=held)
        first = held.first_lsn
        assert first is not None
        for i in range(20):
            uow = store.begin()
            store.put("Q.ONE", b"n%d" % i * 100, persistent=True, uow=uow)
            store.commit(uow)
        assert log_space_pinned(store) == store._last_lsn - first > 2000
        store.backout(held)
        assert log_space_pinned(store) == 0
    finally:
        store.close()

def test_queue_depth_counts_puts_a_takeover_left_to_the_queues_first_use(tmp_path) -> None:
    """Right after a takeover, a queue whose replayed puts are not applied yet (nobody
    has used it) shows the depth it will have, without being applied by the scrape."""
    from prometheus_client import CollectorRegistry

    from lockfs.volume import open_volume
    from miqm.metrics.bench import StoreView
    from miqm.metrics.instance import InstanceCollector
    from miqm.metrics.server import exposition
    from tests.unit.test_takeover_open import _crash, _create, _open, _put_committed

    _create(tmp_path)
    s1 = _open(tmp_path, 1)
    s1.define_queue("LATER")
    s1.checkpoint()
    _put_committed(s1, "LATER", [b"a", b"b", b"c"])
    _crash(s1)
    store = _open(tmp_path, 2, background=True, defer=True)
    try:
        registry = CollectorRegistry(auto_describe=False)
        collector = InstanceCollector(StoreView(store, open_volume(str(tmp_path / "data"))))
        registry.register(collector)
        text = exposition(registry).decode()
        assert re.search(r'miqm_queue_depth\{[^}]*queue="LATER"\} 3\.0', text), text
        assert store.state.queues.deferred_counts() == {"LATER": 3}  # still deferred
        assert store.queue_attrs("LATER")["CURDEPTH"] == 3
        assert store.state.queues.deferred_counts() == {}
    finally:
        store.close()


class _SlowCollector:
    """A collector whose scrape takes a moment, so that a client can leave before it."""

    def describe(self) -> list:
        return []

    def collect(self) -> list:
        from prometheus_client.core import GaugeMetricFamily

        time.sleep(0.2)
        return [GaugeMetricFamily("miqm_test_up", "1", value=1.0)]


def test_endpoint_says_nothing_when_scrapers_reset_and_goes_on_serving(capfd) -> None:
    """A scraper that resets its connection before the answer (Prometheus at its scrape
    timeout) used to print socketserver's traceback on the exporter's terminal (the
    instance's output file) once per scrape; now it is counted, and the next scrape is
    answered."""
    import socket
    import struct
    import urllib.request

    from miqm.metrics.server import serve

    server = serve(_SlowCollector(), 0, "127.0.0.1", "test")
    try:
        port = server.address[1]
        for _ in range(3):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()  # RST: the server's write finds the connection gone
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
            assert b"miqm_test_up 1.0" in r.read()
        deadline = time.monotonic() + 10
        while (getattr(server.httpd, "failed_requests", 0) < 3
               and time.monotonic() < deadline):
            time.sleep(0.05)
        err = capfd.readouterr().err
        assert "Traceback" not in err and "Exception occurred" not in err, err
        assert server.httpd.failed_requests == 3
        head = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", method="HEAD")
        with urllib.request.urlopen(head, timeout=30) as r:  # curl -I
            assert r.status == 200 and r.read() == b""
    finally:
        server.stop()


def test_endpoint_closes_a_connection_that_sends_no_request(monkeypatch) -> None:
    """An idle (or trickling) client is closed after REQUEST_TIMEOUT instead of holding
    one of the endpoint's threads for ever."""
    import socket

    from miqm.metrics import server as srv

    monkeypatch.setattr(srv, "REQUEST_TIMEOUT", 0.5, raising=False)
    server = srv.serve(_SlowCollector(), 0, "127.0.0.1", "test")
    try:
        with socket.create_connection(("127.0.0.1", server.address[1])) as s:
            s.settimeout(60)  # far beyond the 0.5 s: only a server that never closes fails
            assert s.recv(100) == b""
    finally:
        server.stop()


def test_exporter_port_errors_give_the_exporters_own_advice(monkeypatch) -> None:
    """miqm exporter refuses --port 0, so its port-in-use line must not offer '0: no
    metrics endpoint' (the instance's qm.ini advice); an address not of this host names
    --bind, not the port."""
    import socket
    import types

    import miqm.paths
    from miqm.metrics.exporter import run_exporter

    monkeypatch.setattr(miqm.paths, "find", lambda q: types.SimpleNamespace(data_path="/x"))
    stop = threading.Event()
    stop.set()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        with pytest.raises(MetricsError) as info:
            run_exporter("QMX", port, "127.0.0.1", echo=lambda s: None, stop=stop)
    line = info.value.user_line()
    assert f"--port={port}" in line and "is in use" in line and "--port" in line
    assert "0: no metrics endpoint" not in line, line
    with pytest.raises(MetricsError) as info:
        run_exporter("QMX", port, "192.0.2.1", echo=lambda s: None, stop=stop)
    line = info.value.user_line()
    assert "--bind=192.0.2.1" in line and "not an address of this host" in line, line
    assert "choose another port" not in line
