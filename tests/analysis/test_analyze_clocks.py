"""Takeovers between hosts whose clocks disagree, and activations whose predecessor is
not where the time order puts it. The instance taken over from is found by the master
lock's generation, not by wall time: with the new active's host five minutes behind, a
kill was a takeover from nobody (cause ``unknown``, no outage) because the new active
"became active" before the old one did. An outage the two clocks make negative is no
figure (null), never a negative number of seconds."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytestmark = pytest.mark.timeout(900)

T0 = 1_767_571_200.0  # 2026-01-05T00:00:00Z


class Hist:
    """Event lines as miqm.ha.events writes them; ``skew`` seconds added to a host's
    clock."""

    def __init__(self, skew: dict[str, float]) -> None:
        self.skew = skew
        self.seq: dict[str, int] = {}
        self.lines: dict[str, list[str]] = {}

    def ev(self, sec: float, qmgr: str, host: str, iid: str, event: str,
           **fields: object) -> None:
        self.seq[iid] = self.seq.get(iid, 0) + 1
        when = dt.datetime.fromtimestamp(T0 + sec + self.skew.get(host, 0.0), dt.UTC)
        self.lines.setdefault(f"{qmgr}/{host}.jsonl", []).append(json.dumps(
            {"v": 1, "ts": when.isoformat(timespec="microseconds"), "qmgr": qmgr,
             "host": host, "instance_id": iid, "seq": self.seq[iid], "event": event,
             **fields}))

    def write(self, root: Path) -> None:
        for name, lines in self.lines.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text("\n".join(lines) + "\n")


def build(root: Path) -> None:
    # hostb's clock runs 300 s behind hosta's, hostd's 20 s behind hostc's
    h = Hist({"hostb": -300.0, "hostd": -20.0})
    # QM1: a1 (hosta) active, killed; b1 (hostb) takes over (its clock says 5 min before
    # a1 started); a2 restarted on hosta as the standby
    h.ev(0, "QM1", "hosta", "a1", "role", role="active", generation=1, failover=False)
    h.ev(1, "QM1", "hostb", "b1", "role", role="standby")
    for i in range(5):
        h.ev(10 + 10 * i, "QM1", "hosta", "a1", "verify", ok=True, latency_s=0.002)
    h.ev(65, "QM1", "hostb", "b1", "failover_start", from_status="Running")
    h.ev(65.5, "QM1", "hostb", "b1", "role", role="active", generation=2, failover=True)
    h.ev(67, "QM1", "hostb", "b1", "failover_end", duration_s=2.0, recovery_s=1.5)
    h.ev(120, "QM1", "hosta", "a2", "role", role="standby")
    # QM2: c1 (hostc) ends permitting switchover; d1 (hostd, 20 s behind) took generation
    # 3 after an activation that failed once it had taken 2: d1's predecessor is c1
    h.ev(0, "QM2", "hostc", "c1", "role", role="active", generation=1, failover=False)
    h.ev(5, "QM2", "hostd", "d1", "role", role="standby")
    h.ev(30, "QM2", "hostc", "c1", "verify", ok=True, latency_s=0.003)
    h.ev(40, "QM2", "hostc", "c1", "role", role="ended", mode="immediate", switchover=True)
    h.ev(40.5, "QM2", "hostd", "d1", "failover_start", from_status="Ended immediately")
    h.ev(41, "QM2", "hostd", "d1", "role", role="active", generation=3, failover=True)
    h.ev(42, "QM2", "hostd", "d1", "failover_end", duration_s=1.5, recovery_s=1.0)
    # QM3: the history starts with e1 taking over at generation 7 (6 not in it) after a
    # restart at generation 2 long ago: from an instance the history does not have
    h.ev(0, "QM3", "hoste", "e0", "role", role="active", generation=2, failover=False)
    h.ev(10, "QM3", "hoste", "e0", "verify", ok=True, latency_s=0.002)
    h.ev(9000, "QM3", "hostf", "e1", "role", role="active", generation=7, failover=True)
    h.ev(9001, "QM3", "hostf", "e1", "failover_end", duration_s=3.0, recovery_s=2.0)
    h.write(root)


@pytest.fixture(scope="module")
def result(spark: object, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    from miqm.analysis.run import analyze

    root = tmp_path_factory.mktemp("clocks")
    build(root / "hist")
    out = root / "out"
    summary = analyze([str(root / "hist")], str(out), spark=spark, report=False)
    return summary, root


def test_the_predecessor_is_found_by_generation_not_by_clock(
        result: tuple[dict, Path]) -> None:
    import pandas as pd

    s, root = result
    tk = pd.read_csv(root / "out" / "tables" / "takeovers.csv")
    got = sorted((q, c, p if isinstance(p, str) else None, i) for q, c, p, i in zip(
        tk["qmgr"], tk["cause"], tk["prev_instance"], tk["instance_id"], strict=True))
    assert got == [("QM1", "kill", "a1", "b1"), ("QM2", "switchover", "c1", "d1"),
                   ("QM3", "unknown", None, "e1")]
    assert s["failovers_by_cause"] == {"kill": 1, "unknown": 1}
    assert s["switchovers"] == 1


def test_an_outage_the_clocks_make_negative_is_no_figure(result: tuple[dict, Path]) -> None:
    import pandas as pd

    _, root = result
    tk = pd.read_csv(root / "out" / "tables" / "takeovers.csv").set_index("instance_id")
    assert pd.isna(tk.loc["b1", "outage_s"])  # 67 - 300 - 50 s: the clocks disagree
    assert pd.isna(tk.loc["d1", "outage_s"])  # 42 - 20 - 40 s (it was -18.0)
    d = pd.read_csv(root / "out" / "tables" / "durations.csv")
    assert (d["outage_p50_s"].dropna() >= 0).all()


def test_the_pandas_reference_agrees(result: tuple[dict, Path]) -> None:
    from miqm.analysis.pyref import analyze as by_pandas

    s, root = result
    p = by_pandas([str(root / "hist")])
    for key in ("failovers", "failovers_by_cause", "switchovers", "failover_seconds"):
        assert s[key] == p[key], key


def test_the_pandas_reference_reads_lines_as_spark_does(spark: object, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """A ``ts`` without a zone is UTC (Spark's session zone), not the machine's, and a
    line without ``v`` is of version 1: the pandas reference read the first in local time
    (a kill turned into a host loss 5 hours away) and dropped the second."""
    import time

    from miqm.analysis.pyref import analyze as by_pandas
    from miqm.analysis.run import analyze

    def line(ts: str, host: str, iid: str, seq: int, event: str, **f: object) -> str:
        return json.dumps({"ts": ts, "qmgr": "QM1", "host": host, "instance_id": iid,
                           "seq": seq, "event": event, **f})

    hist = tmp_path / "hist"
    hist.mkdir()
    (hist / "hosta.jsonl").write_text("\n".join([
        line("2026-01-05T00:00:00", "hosta", "a1", 1, "role", role="active", generation=1,
             failover=False),
        line("2026-01-05T00:00:10", "hosta", "a1", 2, "verify", ok=True, latency_s=0.002),
        line("2026-01-05T00:02:00", "hosta", "a2", 1, "role", role="standby")]) + "\n")
    (hist / "hostb.jsonl").write_text("\n".join([
        line("2026-01-05T00:00:30+00:00", "hostb", "b1", 1, "role", role="active",
             generation=2, failover=True),
        line("2026-01-05T00:00:31+00:00", "hostb", "b1", 2, "failover_end",
             duration_s=1.0)]) + "\n")
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        p = by_pandas([str(hist)])
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    s = analyze([str(hist)], str(tmp_path / "out"), spark=spark, report=False)
    assert s["failovers_by_cause"] == {"kill": 1}
    for key in ("events", "failovers", "failovers_by_cause", "malformed_lines",
                "unsupported_version_lines"):
        assert p[key] == s[key], key
