"""The synthetic fleet history: in exactly the event-history format, and analysed alike by
Spark and by the plain pandas reference (same rules, same percentile definition)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from miqm.analysis.generate import generate

    out = tmp_path_factory.mktemp("fleet") / "h"
    r = generate(60_000, str(out), seed=3)
    assert 55_000 <= r["events"] <= 65_000
    return out


def test_lines_are_in_the_event_log_format(fleet: Path, tmp_path: Path) -> None:
    from miqm.ha.events import EventLog

    log = EventLog(None, "QMX", "hostx", "hostx-1-2", local=str(tmp_path))
    log.emit("verify", ok=True, latency_s=0.001)
    log.close()
    real = json.loads((tmp_path / "hostx.jsonl").read_text())
    head = list(real)[:7]
    seqs: dict[str, int] = {}
    files = sorted(fleet.rglob("*.jsonl"))
    assert any("local" in f.parts for f in files)
    for f in files[:6]:
        last_ts = ""
        for line in f.read_text().splitlines():
            e = json.loads(line)
            assert list(e)[:7] == head
            assert e["v"] == 1 and e["ts"] >= last_ts and e["ts"].endswith("+00:00")
            last_ts = e["ts"]
            if "shared" in f.parts:
                assert e["seq"] > seqs.get(e["instance_id"], 0)
                seqs[e["instance_id"]] = e["seq"]


def test_spark_and_pandas_agree(fleet: Path, spark: object, tmp_path: Path) -> None:
    from miqm.analysis.pyref import analyze as by_pandas
    from miqm.analysis.run import analyze

    s = analyze([str(fleet)], str(tmp_path / "out"), spark=spark, report=False)
    p = by_pandas([str(fleet)])
    assert s["events"] == p["events"]
    assert s["duplicates_removed"] > 0  # the host-local tails overlap the shared copies
    for key in ("failovers", "failover_seconds", "spurious_failovers", "switchovers",
                "failovers_by_cause", "lock_verify_seconds", "lock_acquire_seconds",
                "slow_windows", "flapping_qmgrs"):
        assert s[key] == p[key], key
    # the fleet's generator put these in: the analysis must find them
    assert s["spurious_failovers"] >= 4 and "QM001" in s["flapping_qmgrs"]
    assert {"spurious", "kill", "host_loss"} <= set(s["failovers_by_cause"])
    assert s["switchovers"] >= 1
    assert 1 in s["slow_window_start_hours"]  # the nightly backup, 01:00 UTC
