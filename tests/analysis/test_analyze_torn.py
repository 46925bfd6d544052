"""A torn line with the next write glued to it. A write cut short (a full disk: the
host-local copy's os.write returns short; a host crash: ext4 leaves the file's tail as
NUL bytes) ends without a newline, and the next write on that host appends straight
after it: one physical line holding a fragment and a whole event. That line was one
malformed line, and the whole event after the tear was lost: here the old active's
``fatal`` AMQ7280, so a spurious failover was counted as a kill."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytestmark = pytest.mark.timeout(900)

T0 = 1_767_571_200.0  # 2026-01-05T00:00:00Z


def _line(sec: float, host: str, iid: str, seq: int, event: str, **fields: object) -> str:
    ts = dt.datetime.fromtimestamp(T0 + sec, dt.UTC).isoformat(timespec="microseconds")
    return json.dumps({"v": 1, "ts": ts, "qmgr": "QM1", "host": host, "instance_id": iid,
                       "seq": seq, "event": event, **fields}, separators=(",", ":"))


def build(root: Path) -> None:
    shared = root / "shared" / "QM1" / "events"
    local = root / "local" / "hosta" / "events" / "QM1"
    shared.mkdir(parents=True)
    local.mkdir(parents=True)
    a = [_line(0, "hosta", "a1", 1, "role", role="active", generation=1, failover=False),
         _line(10, "hosta", "a1", 2, "verify", ok=True, latency_s=0.002)]
    torn = _line(20, "hosta", "a1", 3, "verify", ok=True, latency_s=0.9)[:70]
    fatal = _line(21, "hosta", "a1", 4, "fatal", amq="AMQ7280", detail="verify stalled")
    # the shared copy stops at seq 2 (the partition); the local one has the torn verify
    # (the disk filled) with the fatal appended to it, then a NUL tail (the host crashed)
    # with the next instance's first event after it
    (shared / "hosta.jsonl").write_text("\n".join(a) + "\n")
    a2 = _line(300, "hosta", "a2", 1, "role", role="standby")
    (local / "hosta.jsonl").write_text("\n".join(a) + "\n" + torn + fatal + "\n"
                                       + "\0" * 40 + a2 + "\n")
    b = [_line(1, "hostb", "b1", 1, "role", role="standby"),
         _line(30, "hostb", "b1", 2, "failover_start", from_status="Running"),
         _line(30.5, "hostb", "b1", 3, "role", role="active", generation=2, failover=True),
         _line(32, "hostb", "b1", 4, "failover_end", duration_s=2.0, recovery_s=1.0)]
    (shared / "hostb.jsonl").write_text("\n".join(b) + "\n")


def test_the_event_glued_after_a_torn_line_is_kept(spark: object, tmp_path: Path) -> None:
    from miqm.analysis.pyref import analyze as by_pandas
    from miqm.analysis.run import analyze

    build(tmp_path / "hist")
    s = analyze([str(tmp_path / "hist")], str(tmp_path / "out"), spark=spark, report=False)
    assert s["failovers_by_cause"] == {"spurious": 1}, s["failovers_by_cause"]
    assert s["spurious_failovers"] == 1 and s["instances"] == 3
    # hosta: 2 shared, 4 local (2 of them glued); hostb: 4
    assert (s["lines"], s["glued_lines"]) == (10, 2)
    assert s["malformed_lines"] == 2  # the torn verify and the NUL run: counted, skipped
    assert (s["events"], s["duplicates_removed"]) == (8, 2)
    p = by_pandas([str(tmp_path / "hist")])
    assert (p["events"], p["malformed_lines"], p["failovers_by_cause"]) == (
        8, 2, {"spurious": 1})
