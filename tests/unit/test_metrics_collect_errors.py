"""A part of an instance's scrape that fails is served around, counted, and written to
the instance's error log (AMQ7880) with the part and the error: once, then at most once a
REPORT_INTERVAL while it keeps failing the same way. Before, the count alone rose and the
reason (``last_error``) was never written anywhere, although the HELP text sent the
operator to the instance's output file."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

from miqm.metrics.instance import InstanceCollector


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_failing_part_is_served_around_counted_and_written_to_the_error_log(
        tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry

    from lockfs.volume import open_volume
    from miqm.bench.store import _create_store, _open_store
    from miqm.metrics.bench import StoreView
    from miqm.metrics.server import exposition

    _create_store(str(tmp_path))
    store = _open_store(str(tmp_path))
    said: list[tuple[str, str]] = []
    wrote = threading.Event()
    try:
        view = StoreView(store, open_volume(str(tmp_path / "data")))

        def say(number: str, text: str) -> str:
            said.append((number, text))
            wrote.set()
            return text

        view.say = say

        def broken_stats(**kwargs: object) -> dict:
            raise OSError("Stale file handle")

        store.log.stats = broken_stats  # the store part fails at every scrape
        clock = _Clock()
        collector = InstanceCollector(view, clock=clock)
        collector.fs.deadline = 10.0
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)

        def scrape() -> str:
            wrote.clear()
            return exposition(registry).decode()

        text = scrape()
        assert wrote.wait(10)
        assert re.search(r"miqm_metrics_collect_errors_total\{[^}]*\} 1\.0", text)
        assert 'miqm_instance_role{instance="bench",qmgr="BENCH",role="active"} 1.0' in text
        assert "miqm_log_forces_total" not in text  # the failed part's families are missing
        assert len(said) == 1
        number, line = said[0]
        assert number == "AMQ7880" and "_store: OSError: Stale file handle" in line
        assert "\n" not in line

        for _ in range(3):  # the same failure again within the interval: counted, not said
            clock.now += 10
            text = scrape()
        time.sleep(0.2)
        assert len(said) == 1
        assert re.search(r"miqm_metrics_collect_errors_total\{[^}]*\} 4\.0", text)
        clock.now += InstanceCollector.REPORT_INTERVAL  # still failing a minute later: said
        scrape()
        assert wrote.wait(10) and len(said) == 2
    finally:
        store.close()
