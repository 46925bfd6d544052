"""The shipped Prometheus and Alertmanager configurations end to end: a real local pair,
a ``miqm exporter``, a real Prometheus (the shipped rules, every ``for:`` cut to 2 s,
the instance job's target labels taken from the shipped ``prometheus.yml``) sending to a
real Alertmanager on the shipped ``alertmanager.yml``. ``kill -9`` of both instances
raises MiqmNoActiveInstance and MiqmAllInstancesDown, one outage: Alertmanager must
page once, holding MiqmAllInstancesDown back (inhibited) behind MiqmNoActiveInstance of
the same queue manager. Both were active (two critical pages) before the targets carried
``qmgr``."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from miqm.localpair import LocalPair
from tests.integration import test_metrics
from tests.integration.test_metrics import (
    PROMETHEUS,
    _pair_with_metrics,
    _short_rules,
    _start_exporter,
    _start_prometheus,
    _stop,
    _wait,
)
from tests.ports import free_port

pair = test_metrics.pair  # the local pair fixture (its output printed when a test fails)

ROOT = Path(__file__).resolve().parents[2]
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(PROMETHEUS is None or ALERTMANAGER is None,
                                 reason="prometheus or prometheus-alertmanager is not "
                                        "installed (Debian packages)")]


def _am_alerts(port: int) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/alerts", timeout=5) as r:
        return json.load(r)


def _by_name(alerts: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [a for a in alerts if a["labels"].get("alertname") == name]


def test_every_instance_dead_pages_once_through_the_shipped_alertmanager(
        pair: LocalPair, tmp_path: Path) -> None:
    ports, hostc = _pair_with_metrics(pair)
    ex_port, am_port, prom_port = free_port(), free_port(), free_port()

    shipped = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    job = next(j for j in shipped["scrape_configs"] if j["job_name"] == "miqm")
    labels = dict(job["static_configs"][0].get("labels") or {})
    if "qmgr" in labels:
        labels["qmgr"] = pair.qmgr  # this pair's queue manager, where the file names QM1
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s",
                   "scrape_timeout": "900ms"},
        "rule_files": [str(_short_rules(tmp_path))],
        "alerting": {"alertmanagers": [
            {"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]},
        "scrape_configs": [
            {"job_name": "miqm", "honor_labels": True, "static_configs": [
                {"targets": [f"127.0.0.1:{p}" for p in ports.values()], "labels": labels}]},
            {"job_name": "miqm-exporter", "honor_labels": True, "static_configs": [
                {"targets": [f"127.0.0.1:{ex_port}"]}]}],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    exporter = am = prom = None
    try:
        exporter = _start_exporter(pair, hostc, ex_port)
        am = subprocess.Popen(
            [str(ALERTMANAGER), f"--config.file={ROOT / 'deploy/alertmanager/alertmanager.yml'}",
             f"--storage.path={tmp_path / 'am'}", f"--web.listen-address=127.0.0.1:{am_port}",
             "--cluster.listen-address=", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
        prom = _start_prometheus(tmp_path / "prometheus.yml", tmp_path, prom_port)
        _wait("3 targets up", lambda: len([
            r for r in test_metrics._api(prom_port, "query", query="up")["result"]
            if r["value"][1] == "1"]) == 3, timeout=90)
        _wait("Alertmanager answers", lambda: _am_alerts(am_port) == [], timeout=60)

        pair.kill_all()
        alerts = _wait("both alerts at Alertmanager", lambda: (lambda got: got if (
            _by_name(got, "MiqmNoActiveInstance") and _by_name(got, "MiqmAllInstancesDown"))
            else None)(_am_alerts(am_port)), timeout=120)
        noactive = _by_name(alerts, "MiqmNoActiveInstance")
        assert [a["status"]["state"] for a in noactive] == ["active"], noactive
        assert noactive[0]["labels"]["severity"] == "critical"
        down = _by_name(alerts, "MiqmAllInstancesDown")
        assert len(down) == 1 and down[0]["labels"].get("qmgr") == pair.qmgr, down
        assert down[0]["status"]["state"] == "suppressed", down
        assert down[0]["status"]["inhibitedBy"], down
    finally:
        _stop(prom)
        _stop(am)
        _stop(exporter)
