"""Per-queue series are bounded: qm.ini ``Metrics: QueueLimit`` (1000 by default) queues
have series of their own, in name order; every queue, exported or not, counts in
``miqm_queues`` and ``miqm_queue_fullest_ratio`` (what MiqmQueueNearlyFull reads for the
queues past the limit)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from miqm.config import Stanza
from miqm.errors import MetricsError
from miqm.metrics.settings import DEFAULT_QUEUE_LIMIT, metrics_settings


def _scrape(store, data_dir: Path, **kwargs) -> str:
    from prometheus_client import CollectorRegistry

    from lockfs.volume import open_volume
    from miqm.metrics.bench import StoreView
    from miqm.metrics.instance import InstanceCollector
    from miqm.metrics.server import exposition

    registry = CollectorRegistry(auto_describe=False)
    collector = InstanceCollector(StoreView(store, open_volume(str(data_dir))), **kwargs)
    collector.fs.deadline = 10.0
    registry.register(collector)
    text = exposition(registry).decode()
    assert collector.errors == 0, collector.last_error
    return text


def _value(text: str, name: str) -> float:
    m = re.search(rf"^{name}\{{[^}}]*\}} (\S+)$", text, re.M)
    assert m, f"{name} missing"
    return float(m.group(1))


def test_queue_series_stop_at_the_limit_and_the_fullest_queue_is_still_seen(
        tmp_path: Path) -> None:
    from miqm.bench.store import _create_store, _open_store

    _create_store(str(tmp_path))
    store = _open_store(str(tmp_path))
    try:
        for i in range(5):
            store.define_queue(f"Q.{i}", MAXDEPTH=10)
        for _ in range(9):  # Q.4 (past a limit of 3) is 90 % full
            uow = store.begin()
            store.put("Q.4", b"m", persistent=True, uow=uow)
            store.commit(uow)
        text = _scrape(store, tmp_path / "data", queue_limit=3)
        shown = set(re.findall(r'^miqm_queue_depth\{[^}]*queue="([^"]+)"', text, re.M))
        assert shown == {"Q.0", "Q.1", "Q.2"}
        assert len(re.findall(r"^miqm_queue_max_depth\{", text, re.M)) == 3
        assert _value(text, "miqm_queues") == 5
        assert _value(text, "miqm_queues_unexported") == 2
        assert _value(text, "miqm_queue_fullest_ratio") == pytest.approx(0.9)
        assert _value(text, "miqm_queues_unexported_fullest_ratio") == pytest.approx(0.9)

        text = _scrape(store, tmp_path / "data")  # the default limit: every queue
        assert len(re.findall(r"^miqm_queue_depth\{", text, re.M)) == 5
        assert _value(text, "miqm_queues_unexported") == 0
        assert 'queue="Q.4"} 9.0' in text
    finally:
        store.close()


def test_queue_limit_setting_default_and_bad_values() -> None:
    def settings(**values: str):
        return metrics_settings([Stanza("Metrics", dict(values))], "/d/qm.ini", env={})

    assert settings(Port="9464").queue_limit == DEFAULT_QUEUE_LIMIT == 1000
    assert settings(Port="9464", QueueLimit="0").queue_limit == 0
    assert settings(QueueLimit="20000").queue_limit == 20000
    for bad in ("-1", "lots", "1e3"):
        with pytest.raises(MetricsError) as info:
            settings(Port="9464", QueueLimit=bad)
        line = info.value.user_line()
        assert f"/d/qm.ini: Metrics: QueueLimit='{bad}'" in line and "\n" not in line


def test_a_damaged_queue_is_counted_not_just_left_out(tmp_path: Path) -> None:
    """A queue whose file went missing while the queue manager was down is damaged
    (AMQ7472): it had no series at all, and nothing said so in the metrics."""
    from miqm.bench.store import _create_store, _open_store

    _create_store(str(tmp_path))
    store = _open_store(str(tmp_path))
    store.define_queue("Q.GONE")
    store.define_queue("Q.OK")
    uow = store.begin()
    store.put("Q.GONE", b"m", persistent=True, uow=uow)
    store.commit(uow)
    store.close()
    files = list((tmp_path / "data" / "queues").rglob("*"))
    gone = [f for f in files if f.is_file() and "Q.GONE" in str(f.parent)]
    assert gone, files
    for f in gone:
        f.unlink()
    store = _open_store(str(tmp_path))
    try:
        text = _scrape(store, tmp_path / "data")
        assert _value(text, "miqm_queues_damaged") == 1
        assert 'queue="Q.OK"' in text and 'queue="Q.GONE"' not in text
    finally:
        store.close()


def test_a_full_queue_past_the_limit_is_not_hidden_by_a_fuller_exported_one(
        tmp_path: Path) -> None:
    """Q.0 (with series) is full and Q.4 (past a limit of 3) is 90 % full: the fullest of
    all was Q.0's 1.0, so the rule's branch for the queues without series saw nothing of
    Q.4 of its own; the gauge of the unexported queues shows it."""
    from miqm.bench.store import _create_store, _open_store

    _create_store(str(tmp_path))
    store = _open_store(str(tmp_path))
    try:
        for i in range(5):
            store.define_queue(f"Q.{i}", MAXDEPTH=10)
        for queue, n in (("Q.0", 10), ("Q.4", 9)):
            for _ in range(n):
                uow = store.begin()
                store.put(queue, b"m", persistent=True, uow=uow)
                store.commit(uow)
        text = _scrape(store, tmp_path / "data", queue_limit=3)
        assert _value(text, "miqm_queue_fullest_ratio") == pytest.approx(1.0)
        assert _value(text, "miqm_queues_unexported_fullest_ratio") == pytest.approx(0.9)
        text = _scrape(store, tmp_path / "data")  # every queue has series: nothing past
        assert _value(text, "miqm_queues_unexported_fullest_ratio") == 0
    finally:
        store.close()
