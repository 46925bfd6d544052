"""The history of a real failover: two instances on this machine (miqm.localpair), kill -9
of the active, the old host back as standby, then a switchover. The analysis finds both
takeovers, their causes, and the durations the instances measured; the host-local copies
(under each host's MIQM_DATA_ROOT) merge with the shared one without double counting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from miqm.localpair import LocalPair

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

TUNING = {"StandbyPollInterval": "0.2", "VerifyInterval": "0.5", "MonitorStall": "2",
          "LivenessInterval": "1", "FilesystemLease": "90"}


def _events(path: Path) -> list[dict]:
    out = []
    for f in sorted(path.rglob("*.jsonl*")):
        for line in f.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def test_kill_and_switchover_found_with_measured_durations(spark: object,
                                                           tmp_path: Path) -> None:
    import pandas as pd

    from miqm.analysis.run import analyze

    p = LocalPair(qmgr="QMAN", base=str(tmp_path / "pair"), tuning=dict(TUNING))
    p.create()
    try:
        assert "started using" in p.start(p.a)
        assert "standby instance" in p.start(p.b)
        p.wait_active(timeout=30)
        victim = p.kill_active()
        assert victim["host"] == "hosta"
        p.wait_active(not_host="hosta", timeout=30)
        assert "standby instance" in p.start(p.a)
        p.run(p.b, "endmqm", "-i", "-s", "QMAN")
        p.wait_active(not_host="hostb", timeout=30)
    finally:
        p.close()
    shared = Path(p.data_dir()) / "events"
    local = [Path(h.root) / "events" / "QMAN" for h in (p.a, p.b)]
    assert all(d.is_dir() for d in local), "each host keeps its own copy of the history"
    measured = [d for _, d in sorted((e["ts"], e["duration_s"]) for e in _events(shared)
                                     if e["event"] == "failover_end")]
    assert len(measured) == 2
    out = tmp_path / "out"
    s = analyze([str(shared), *map(str, local)], str(out), spark=spark, report=False)
    assert s["failovers"] == 1 and s["switchovers"] == 1
    assert s["failovers_by_cause"] == {"kill": 1}
    assert s["duplicates_removed"] > 0 and s["malformed_lines"] == 0
    assert s["events"] >= len({(e["instance_id"], e["seq"]) for e in _events(shared)})
    tk = pd.read_csv(out / "tables" / "takeovers.csv").sort_values("active_s")
    assert list(tk["cause"]) == ["kill", "switchover"]
    assert list(tk["prev_host"]) == ["hosta", "hostb"]
    assert list(tk["duration_s"]) == measured  # in time order, as the instances wrote them
    assert s["failover_seconds"]["max"] == measured[0]
    assert s["lock_verify_seconds"]["p50"] is not None
