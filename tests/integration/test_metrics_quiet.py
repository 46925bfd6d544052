"""A normal switchover and a restart raise no alert: the shipped rules, unchanged (their
own ``for:``), in a real Prometheus scraping a real local pair and a ``miqm exporter``
every second, through ``endmqm -s`` and ``strmqm -x`` on the old host twice (hosta to
hostb and back) and an ``endmqm -x`` / ``strmqm -x`` restart of the standby. Alerts may
go pending (no active instance for a scrape, no standby until the old host's
``strmqm -x``, a target down), but none may fire: the rules that fire at once
(MiqmFailover, MiqmFlapping, MiqmLogWriteTimeHigh, MiqmMetricsIncomplete, ...) must not
take a switchover for a failure, and the ones with a ``for:`` must outlast it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import yaml

from miqm.localpair import LocalPair
from tests.integration import test_metrics
from tests.integration.test_metrics import (
    PROMETHEUS,
    RULES,
    _api,
    _pair_with_metrics,
    _prom_config,
    _start_exporter,
    _start_prometheus,
    _stop,
    _wait,
)
from tests.ports import free_port

pair = test_metrics.pair  # the local pair fixture (its output printed when a test fails)

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(PROMETHEUS is None, reason="the prometheus server is not "
                                 "installed (Debian package prometheus)")]


def test_switchovers_and_a_standby_restart_fire_no_alert(pair: LocalPair,
                                                         tmp_path: Path) -> None:
    ports, hostc = _pair_with_metrics(pair)
    ex_port, prom_port = free_port(), free_port()
    rules = tmp_path / "miqm-rules.yml"
    rules.write_text(RULES.read_text())  # as shipped: every for: as it is
    assert yaml.safe_load(rules.read_text())["groups"]
    config = _prom_config(tmp_path, {"miqm": list(ports.values()), "miqm-exporter": [ex_port]},
                          rules)
    exporter = prom = None
    fired: list[dict[str, str]] = []
    pending: set[str] = set()
    watching = threading.Event()
    watcher: threading.Thread | None = None
    try:
        exporter = _start_exporter(pair, hostc, ex_port)
        prom = _start_prometheus(config, tmp_path, prom_port)
        _wait("3 targets up", lambda: len([
            r for r in _api(prom_port, "query", query="up")["result"]
            if r["value"][1] == "1"]) == 3, timeout=90)
        time.sleep(3)  # a few evaluations of the steady state

        def watch() -> None:
            while watching.is_set():
                try:
                    for a in _api(prom_port, "alerts")["alerts"]:
                        if a["state"] == "firing":
                            fired.append(a["labels"])
                        else:
                            pending.add(a["labels"]["alertname"])
                except OSError:
                    pass
                time.sleep(0.3)

        watching.set()
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        for old, new in ((pair.a, "hostb"), (pair.b, "hosta")):
            pair.run(old, "endmqm", "-s", "-w", pair.qmgr)
            pair.wait_active(not_host=old.name)
            assert "standby instance" in pair.start(old)
            _wait(f"{new} scraped as active", lambda new=new: _api(
                prom_port, "query",
                query=f'miqm_instance_role{{role="active",instance="{new}"}} == 1')["result"],
                timeout=60, poll=0.3)
        pair.run(pair.b, "endmqm", "-x", pair.qmgr)  # the standby's restart
        assert "standby instance" in pair.start(pair.b)
        _wait("both instances scraped again", lambda: len([
            r for r in _api(prom_port, "query", query='up{job="miqm"}')["result"]
            if r["value"][1] == "1"]) == 2, timeout=60)
        time.sleep(5)  # evaluations after it: a rule that fires at once would show
    finally:
        watching.clear()
        if watcher is not None:
            watcher.join(10)
        _stop(prom)
        _stop(exporter)
    assert fired == [], fired
    # it did go through the seconds the for: durations are there for
    assert pending & {"MiqmNoStandby", "MiqmInstanceTargetDown"}, pending
