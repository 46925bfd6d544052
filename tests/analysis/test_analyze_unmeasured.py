"""Failovers the instances did not finish measuring. A new active that stopped before it
served wrote ``role active`` but no ``failover_end``: its takeover counts as a failover
with no duration, and the figures say so (``failovers_unmeasured``, the durations table's
``measured``) instead of a count of 2 beside percentiles of 1. A standby that stopped
between taking the master lock's generation and becoming active left a gap in the
generations: the next takeover is still from the instance before it."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytestmark = pytest.mark.timeout(900)

T0 = 1_767_571_200.0  # 2026-01-05T00:00:00Z
SEQ: dict[str, int] = {}


def _line(sec: float, host: str, iid: str, event: str, **fields: object) -> str:
    SEQ[iid] = SEQ.get(iid, 0) + 1
    ts = dt.datetime.fromtimestamp(T0 + sec, dt.UTC).isoformat(timespec="microseconds")
    return json.dumps({"v": 1, "ts": ts, "qmgr": "QM2", "host": host, "instance_id": iid,
                       "seq": SEQ[iid], "event": event, **fields})


LINES = [
    _line(0, "hosta", "a1", "role", role="active", generation=1, failover=False),
    _line(10, "hosta", "a1", "verify", ok=True, latency_s=0.002),
    # a1 killed; b1 becomes active (generation 2) and dies before it serves
    _line(20, "hostb", "b1", "failover_start", from_status="Running"),
    _line(20.5, "hostb", "b1", "role", role="active", generation=2, failover=True),
    _line(25, "hosta", "a2", "role", role="standby"),
    # b2 (hostb again) takes the lock, burns generation 3, stops before becoming active
    _line(40, "hostb", "b2", "role", role="standby"),
    _line(80, "hostb", "b2", "failover_start", from_status="Running"),
    _line(80.2, "hostb", "b2", "fatal", amq="AMQ6708", detail="log write failed"),
    # a2 takes over at generation 4: from b1
    _line(90, "hosta", "a2", "failover_start", from_status="Running"),
    _line(90.5, "hosta", "a2", "role", role="active", generation=4, failover=True),
    _line(92, "hosta", "a2", "failover_end", duration_s=1.5, recovery_s=1.0),
]


def test_failovers_without_a_duration_are_counted_apart(spark: object,
                                                        tmp_path: Path) -> None:
    import pandas as pd

    from miqm.analysis.pyref import analyze as by_pandas
    from miqm.analysis.run import analyze

    hist = tmp_path / "hist"
    hist.mkdir()
    (hist / "h.jsonl").write_text("\n".join(LINES) + "\n")
    s = analyze([str(hist)], str(tmp_path / "out"), spark=spark, report=True)
    assert s["failovers"] == 2 and s["failovers_unmeasured"] == 1
    assert s["failover_seconds"] == {"p50": 1.5, "p95": 1.5, "max": 1.5}
    tk = pd.read_csv(tmp_path / "out" / "tables" / "takeovers.csv").set_index("instance_id")
    assert tk.loc["b1", "prev_instance"] == "a1" and tk.loc["b1", "cause"] == "kill"
    assert tk.loc["a2", "prev_instance"] == "b1"
    assert pd.isna(tk.loc["b1", "duration_s"])
    d = pd.read_csv(tmp_path / "out" / "tables" / "durations.csv")
    row = d[(d["qmgr"] == "*") & (d["kind"] == "failover")].iloc[0]
    assert (row["count"], row["measured"], row["p50_s"]) == (2, 1, 1.5)
    assert "measured" in (tmp_path / "out" / "report.html").read_text()
    p = by_pandas([str(hist)])
    assert (p["failovers"], p["failovers_by_cause"]) == (s["failovers"],
                                                         s["failovers_by_cause"])


def test_an_active_that_stopped_itself_with_no_standby_is_counted(
        spark: object, tmp_path: Path) -> None:
    """With no standby running, an active that stopped itself (AMQ7280) is no takeover:
    restarted by hand, the next active is a first activation. The analysis showed no
    trace of it (0 failovers, 0 spurious); active_self_stops counts every such stop."""
    from miqm.analysis.run import analyze

    lines = [
        _line(0, "hostc", "c1", "role", role="active", generation=1, failover=False),
        _line(10, "hostc", "c1", "monitor_stall", stalled_s=4.0),
        _line(11, "hostc", "c1", "fatal", amq="AMQ7280", detail="verify stalled"),
        _line(600, "hostc", "c2", "role", role="active", generation=2, failover=False),
        _line(610, "hostc", "c2", "verify", ok=True, latency_s=0.002),
    ]
    hist = tmp_path / "hist"
    hist.mkdir()
    (hist / "h.jsonl").write_text("\n".join(lines) + "\n")
    s = analyze([str(hist)], str(tmp_path / "out"), spark=spark, report=False)
    assert (s["failovers"], s["spurious_failovers"]) == (0, 0)
    assert s["active_self_stops"] == {"AMQ7280": 1}


def test_an_active_paused_past_its_lease_is_a_paused_failover_not_a_spurious_one(
        spark: object, tmp_path: Path) -> None:
    """An active stopped (SIGSTOP, a frozen VM) past its lease is taken over; when it runs
    again it finds the lock gone and stops itself (AMQ7279). Its last words carry the
    lease's age: past the lease, it could not have stopped itself in time, so the cause
    is ``paused``, not ``spurious`` (alive, it gave up). A stop within the lease stays
    spurious; Spark and the pandas reference agree."""
    import pandas as pd

    from miqm.analysis.pyref import analyze as by_pandas
    from miqm.analysis.run import analyze

    lines = [
        _line(0, "hoste", "e1", "role", role="active", generation=1, failover=False),
        _line(1, "hostf", "f1", "role", role="standby"),
        # e1 paused at ~5 s; f1 takes over after the lease; e1 runs again at 30 s
        _line(16, "hostf", "f1", "failover_start", from_status="Running"),
        _line(16.5, "hostf", "f1", "role", role="active", generation=2, failover=True),
        _line(17, "hostf", "f1", "failover_end", duration_s=1.0, recovery_s=0.5),
        _line(30, "hoste", "e1", "fatal", amq="AMQ7279", lease_age_s=25.0, lease_s=10.0,
              detail="the filesystem reports the master lock lost"),
        # e2, the standby again; f1 later stops itself within its lease: spurious
        _line(40, "hoste", "e2", "role", role="standby"),
        _line(100, "hostf", "f1", "fatal", amq="AMQ7279", lease_age_s=6.1, lease_s=10.0,
              detail="the lease on the master lock has not been renewed for 6.1s"),
        _line(100.5, "hoste", "e2", "failover_start", from_status="Running"),
        _line(101, "hoste", "e2", "role", role="active", generation=3, failover=True),
        _line(102, "hoste", "e2", "failover_end", duration_s=1.5, recovery_s=1.0),
    ]
    hist = tmp_path / "hist"
    hist.mkdir()
    (hist / "h.jsonl").write_text("\n".join(lines) + "\n")
    s = analyze([str(hist)], str(tmp_path / "out"), spark=spark, report=False)
    assert s["failovers_by_cause"] == {"paused": 1, "spurious": 1}
    assert s["spurious_failovers"] == 1
    tk = pd.read_csv(tmp_path / "out" / "tables" / "takeovers.csv").set_index("instance_id")
    assert tk.loc["f1", "cause"] == "paused" and tk.loc["e2", "cause"] == "spurious"
    p = by_pandas([str(hist)])
    assert p["failovers_by_cause"] == s["failovers_by_cause"]
    assert p["spurious_failovers"] == s["spurious_failovers"]
