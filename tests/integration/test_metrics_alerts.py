"""The shipped alert rules in a real Prometheus (the Debian package's server, every
``for:`` cut to 2 s) scraping a real local pair and a ``miqm exporter``:

* a queue at 90 % of MAXDEPTH raises MiqmQueueNearlyFull with its name, which stays
  firing through a switchover (``endmqm -s``, then ``strmqm -x`` on the old host) and
  resolves once the queue is drained; with the queue-manager-wide expressions of
  before, it resolved at the switchover and started its ``for:`` again on the new host;
* ``kill -9`` of both instances raises MiqmAllInstancesDown (no rule saw it without the
  exporter) and MiqmNoActiveInstance;
* the exporter's data directory taken away (an unmount) raises MiqmStatusNotAvailable
  with ``miqm_qmgr_probe_errors_total`` rising and one line on the exporter's stderr
  naming the error; it resolves when the directory is back.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from miqm.localpair import LocalPair
from tests.integration import test_metrics
from tests.integration.test_metrics import (
    PROMETHEUS,
    _api,
    _firing,
    _pair_with_metrics,
    _prom_config,
    _short_rules,
    _start_exporter,
    _start_prometheus,
    _stop,
    _third_host,
    _wait,
)
from tests.ports import free_port

pair = test_metrics.pair  # the local pair fixture (its output printed when a test fails)

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(PROMETHEUS is None, reason="the prometheus server is not "
                                 "installed (Debian package prometheus)")]


def _prometheus(tmp_path: Path, targets: dict[str, list[int]],
                short_windows: bool = False) -> tuple[subprocess.Popen, int]:
    """A Prometheus on the shipped rules with every ``for:`` cut to 2 s; with
    ``short_windows`` their one-minute windows cut to 15 s too (still longer than a
    switchover here, so the same bridging is tested, and a drained queue's alert
    resolves in seconds rather than a minute)."""
    port = free_port()
    rules = _short_rules(tmp_path)
    if short_windows:
        rules.write_text(rules.read_text().replace("[1m]", "[15s]"))
    config = _prom_config(tmp_path, targets, rules)
    return _start_prometheus(config, tmp_path, port), port


def _up(prom_port: int, n: int) -> None:
    _wait(f"{n} targets up", lambda: len([
        r for r in _api(prom_port, "query", query="up")["result"] if r["value"][1] == "1"]) == n,
        timeout=90)


def test_queue_alert_holds_through_a_switchover_and_all_instances_down_pages(
        pair: LocalPair, tmp_path: Path) -> None:
    ports, hostc = _pair_with_metrics(pair)
    ex_port = free_port()
    exporter = prom = None
    try:
        exporter = _start_exporter(pair, hostc, ex_port)
        prom, prom_port = _prometheus(tmp_path, {"miqm": [ports["hosta"], ports["hostb"]],
                                                 "miqm-exporter": [ex_port]},
                                      short_windows=True)
        _up(prom_port, 3)
        pair.mqsc(pair.a, "DEFINE QLOCAL(ALMOST.FULL) MAXDEPTH(10)\n"
                          "DEFINE QLOCAL(HALF.FULL) MAXDEPTH(10)\n")
        pair.put(pair.a, "ALMOST.FULL", [f"m{i}" for i in range(9)])
        pair.put(pair.a, "HALF.FULL", [f"m{i}" for i in range(5)])
        alert = _wait("MiqmQueueNearlyFull", lambda: _firing(prom_port, "MiqmQueueNearlyFull"),
                      timeout=90)
        assert [(a["qmgr"], a.get("queue"), a["severity"]) for a in alert] == [
            (pair.qmgr, "ALMOST.FULL", "warning")]

        # the switchover: the alert never leaves the firing state (watched from another
        # thread all through it, a few times per evaluation)
        seen: list[int] = []
        watching = threading.Event()
        watching.set()

        def watch() -> None:
            while watching.is_set():
                seen.append(len(_firing(prom_port, "MiqmQueueNearlyFull")))
                time.sleep(0.2)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            pair.run(pair.a, "endmqm", "-s", "-w", pair.qmgr)
            pair.wait_active(not_host="hosta")
            assert "standby instance" in pair.start(pair.a)
            _wait("hostb's queue series", lambda: _api(
                prom_port, "query",
                query='miqm_queue_depth{instance="hostb",queue="ALMOST.FULL"}')["result"],
                timeout=60, poll=0.2)
            time.sleep(3)  # a few evaluations more: a new `for:` of 2 s would show
        finally:
            watching.clear()
            watcher.join(10)
        assert len(seen) > 10 and min(seen) == 1, seen
        assert _firing(prom_port, "MiqmSplitBrain") == []
        assert _firing(prom_port, "MiqmNoActiveInstance") == []

        assert len(pair.get_all(pair.b, "ALMOST.FULL")) == 9
        _wait("MiqmQueueNearlyFull resolved", lambda: not _api(prom_port, "alerts")["alerts"]
              or _firing(prom_port, "MiqmQueueNearlyFull") == [], timeout=150)
        assert [a for a in _api(prom_port, "alerts")["alerts"]
                if a["labels"]["alertname"] == "MiqmQueueNearlyFull"] == []

        pair.kill_all()
        down = _wait("MiqmAllInstancesDown", lambda: _firing(prom_port, "MiqmAllInstancesDown"),
                     timeout=90)
        assert down[0]["job"] == "miqm" and down[0]["severity"] == "critical"
        noactive = _wait("MiqmNoActiveInstance",
                         lambda: _firing(prom_port, "MiqmNoActiveInstance"), timeout=90)
        assert noactive[0]["qmgr"] == pair.qmgr
    finally:
        _stop(prom)
        _stop(exporter)


def test_exporter_without_its_data_directory_raises_status_not_available_and_says_why(
        tmp_path: Path) -> None:
    p = LocalPair(qmgr="QMGONE", base=str(tmp_path / "pair"))
    p.create()
    exporter = prom = None
    data = Path(p.data_dir())
    moved = data.with_name(data.name + ".unmounted")
    try:
        hostc = _third_host(p)
        ex_port = free_port()
        exporter = subprocess.Popen(
            ["miqm", "exporter", "-m", p.qmgr, "--port", str(ex_port)], env=hostc.env(),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        prom, prom_port = _prometheus(tmp_path, {"miqm-exporter": [ex_port]})
        _up(prom_port, 1)
        assert _firing(prom_port, "MiqmStatusNotAvailable") == []
        os.rename(data, moved)
        alert = _wait("MiqmStatusNotAvailable",
                      lambda: _firing(prom_port, "MiqmStatusNotAvailable"), timeout=90)
        assert alert[0]["qmgr"] == p.qmgr and alert[0]["instance"] == "hostc"
        errors = _api(prom_port, "query", query="miqm_qmgr_probe_errors_total > 0")["result"]
        assert errors, "the failed reads are not counted"
        os.rename(moved, data)
        _wait("MiqmStatusNotAvailable resolved",
              lambda: _firing(prom_port, "MiqmStatusNotAvailable") == [], timeout=90)
    finally:
        if moved.exists():
            os.rename(moved, data)
        _stop(prom)
        _stop(exporter)
        p.close()
    err = exporter.stderr.read() if exporter and exporter.stderr else ""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 2, lines  # one when the reads fail, one when they work again
    assert f"cannot read the shared files of '{p.qmgr}'" in lines[0] and str(data) in lines[0]
    assert "can be read again" in lines[1] and "Traceback" not in err
    shutil.rmtree(tmp_path / "tsdb", ignore_errors=True)


def test_slow_verifies_of_the_master_lock_raise_verify_latency_high(tmp_path: Path) -> None:
    """Every read of the master lock file stalled 3 s (MIQM_FAULTS, armed once
    Prometheus sees the instance; a verify reads it once) with MonitorStall 5: over half
    of it, not yet fatal. (It stalled 0.8 s a read when a verify made three reads, 2.4 s
    over MonitorStall 4's half; since a verify reads once, that was 0.8 s and the test
    waited in vain: the verifies' own histogram, 0.8 s each, showed it.) The real
    histogram and margin then raise MiqmVerifyLatencyHigh for the instance, while it is
    still active (no failover, no false MiqmNoActiveInstance)."""
    tuning = {"StandbyPollInterval": "0.2", "VerifyInterval": "0.5", "MonitorStall": "5",
              "LivenessInterval": "10", "FilesystemLease": "90"}
    p = LocalPair(qmgr="QMSLOW", base=str(tmp_path / "pair"), tuning=tuning)
    p.create()
    armed = tmp_path / "armed"
    port = free_port()
    p.a.extra["MIQM_METRICS_PORT"] = str(port)
    p.a.extra["MIQM_FAULTS"] = json.dumps([{"volume": "data", "op": "pread", "path": "master",
                                            "kind": "stall", "seconds": 3.0,
                                            "armed": str(armed)}])
    prom = None
    try:
        assert "started using" in p.start(p.a)
        del p.a.extra["MIQM_FAULTS"]  # the instance has it; endmqm at the end not
        prom, prom_port = _prometheus(tmp_path, {"miqm": [port]})
        _up(prom_port, 1)
        assert _firing(prom_port, "MiqmVerifyLatencyHigh") == []
        armed.touch()
        alert = _wait("MiqmVerifyLatencyHigh",
                      lambda: _firing(prom_port, "MiqmVerifyLatencyHigh"), timeout=90)
        assert alert[0]["instance"] == "hosta" and alert[0]["qmgr"] == p.qmgr
        assert alert[0]["severity"] == "warning"
        assert (p.active() or {}).get("host") == "hosta"
        assert _firing(prom_port, "MiqmNoActiveInstance") == []
    finally:
        _stop(prom)
        p.close()
