"""The shipped Alertmanager configuration (deploy/alertmanager/alertmanager.yml) against
the shipped rules: alerts are grouped per queue manager, each severity the rules use is
routed to a receiver that exists (critical pages), and every inhibition names alerts the
rules raise and labels both carry; and Alertmanager's own ``amtool check-config``
accepts it (the Debian package prometheus-alertmanager, among CI's system packages)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

from tests.skips import skip_unavailable

ROOT = Path(__file__).resolve().parents[2]
AM = ROOT / "deploy" / "alertmanager" / "alertmanager.yml"
RULES = ROOT / "deploy" / "prometheus" / "miqm-rules.yml"


def _rules() -> dict[str, dict]:
    doc = yaml.safe_load(RULES.read_text())
    return {r["alert"]: r for g in doc["groups"] for r in g["rules"]}


def _matchers(items: list[str]) -> dict[str, str]:
    """{label: value or regex} of matchers written as label="v" or label=~"v"."""
    out = {}
    for item in items:
        m = re.fullmatch(r'\s*(\w+)\s*=~?\s*"(.*)"\s*', item)
        assert m, f"matcher not understood: {item!r}"
        out[m.group(1)] = m.group(2)
    return out


def _route_for(route: dict, labels: dict[str, str]) -> str:
    """The receiver Alertmanager picks for ``labels`` (first matching child, else this)."""
    for child in route.get("routes", []):
        want = _matchers(child.get("matchers", []))
        if all(re.fullmatch(v, labels.get(k, "")) for k, v in want.items()):
            return _route_for(child, labels)
    return route["receiver"]


def test_alerts_are_grouped_per_queue_manager_and_critical_ones_page() -> None:
    am = yaml.safe_load(AM.read_text())
    route = am["route"]
    assert {"alertname", "qmgr"} <= set(route["group_by"])  # not one group for everything
    receivers = {r["name"] for r in am["receivers"]}
    rules = _rules()
    severities = {r["labels"]["severity"] for r in rules.values()}
    assert severities == {"critical", "warning"}
    for name, rule in rules.items():
        chosen = _route_for(route, {"alertname": name, **rule["labels"]})
        assert chosen in receivers, (name, chosen)
        assert (chosen == "page") == (rule["labels"]["severity"] == "critical"), name


def _labels_of(rule: dict) -> set[str]:
    """Labels an alert of ``rule`` carries: by (...) of its outermost aggregation, or any."""
    expr = rule["expr"]
    outer = re.match(r"\s*\(?\s*(?:sum|max|min|count) by \(([^)]*)\)", expr)
    if outer:
        return {x.strip() for x in outer.group(1).split(",")} | {"alertname"}
    if expr.lstrip().startswith("up{"):
        return {"instance", "job", "alertname"}  # Prometheus's own series: no qmgr
    return {"qmgr", "instance", "job", "alertname"}  # a plain selector keeps every label


def test_every_inhibition_names_alerts_the_rules_raise_and_labels_both_carry() -> None:
    am = yaml.safe_load(AM.read_text())
    rules = _rules()
    assert am["inhibit_rules"]
    for inhibit in am["inhibit_rules"]:
        ends = []
        for side in ("source_matchers", "target_matchers"):
            names = [n for n in rules if re.fullmatch(
                _matchers(inhibit[side])["alertname"], n)]
            assert names, (side, inhibit[side])
            ends.append(names)
        for name in (*ends[0], *ends[1]):
            # an equal: label missing on both sides matches everything: it must be there
            assert set(inhibit["equal"]) <= _labels_of(rules[name]), (name, inhibit)


def test_alertmanager_itself_accepts_the_configuration() -> None:
    amtool = shutil.which("amtool")
    if amtool is None:
        skip_unavailable("amtool (Debian package prometheus-alertmanager; make install-system)")
    proc = subprocess.run([amtool, "check-config", str(AM)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout
