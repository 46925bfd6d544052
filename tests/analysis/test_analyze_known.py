"""``miqm analyze run`` on a small hand-written history whose answers are known: durations,
nearest-rank percentiles, causes (kill, switchover, spurious, host loss), a torn line, a
malformed line, unknown events and fields, a newer format version, and a host-local copy
overlapping the shared one. The Spark session is shared (conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
# Spark starts in ~7 s on an idle 2-core machine, many times that on a busy one
pytestmark = pytest.mark.timeout(900)

T0 = 1_767_571_200.0  # 2026-01-05T00:00:00Z


def ts(sec: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(T0 + sec, dt.UTC).isoformat(timespec="microseconds")


class Hist:
    """Writes events the way miqm.ha.events does (one JSON object per line)."""

    def __init__(self) -> None:
        self.files: dict[str, list[str]] = {}
        self.seq: dict[str, int] = {}

    def ev(self, where: str, sec: float, qmgr: str, host: str, iid: str, event: str,
           **fields: object) -> str:
        self.seq[iid] = self.seq.get(iid, 0) + 1
        rec = {"v": 1, "ts": ts(sec), "qmgr": qmgr, "host": host, "instance_id": iid,
               "seq": self.seq[iid], "event": event, **fields}
        line = json.dumps(rec, separators=(",", ":"))
        self.files.setdefault(where, []).append(line)
        return line

    def write(self, root: Path) -> None:
        for name, lines in self.files.items():
            p = root / name
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text("\n".join(lines) + "\n")


# verify latencies of the active instances, in order (seconds)
A1_VERIFY = [0.002, 0.003, 0.002, 0.004, 0.002, 0.002]  # the last with an unknown field
B1_VERIFY = [0.003, 0.003, 0.005]
A2_VERIFY = [0.002, 0.002, 0.003, 0.002, 0.004, 0.002]
A2_SLOW = [0.5, 0.8]            # 02:01:00, 02:02:00 (the "backup")
C1_VERIFY = [0.001, 0.001]
D1_VERIFY = [0.006]
STANDBY_LOCK = [0.0004, 0.0005, 0.0007]


def build(root: Path) -> None:
    h = Hist()
    sa, sb = "shared/QM1/events/hosta.jsonl", "shared/QM1/events/hostb.jsonl"
    sc, sd = "shared/QM2/events/hostc.jsonl", "shared/QM2/events/hostd.jsonl"
    # QM1: a1 active, b1 standby
    h.ev(sa, 0, "QM1", "hosta", "a1", "lock_attempt", file="master", mode="exclusive",
         granted=True, latency_s=0.001)
    h.ev(sa, 0.5, "QM1", "hosta", "a1", "role", role="active", generation=1, failover=False)
    h.ev(sb, 1, "QM1", "hostb", "b1", "role", role="standby")
    for i, lat in enumerate(STANDBY_LOCK):
        h.ev(sb, 2 + i, "QM1", "hostb", "b1", "lock_attempt", file="master",
             mode="exclusive", granted=False, latency_s=lat)
    for i, lat in enumerate(A1_VERIFY[:-1]):
        h.ev(sa, 10 + 10 * i, "QM1", "hosta", "a1", "verify", ok=True, latency_s=lat)
    h.ev(sa, 55, "QM1", "hosta", "a1", "verify", ok=True, latency_s=A1_VERIFY[-1],
         brand_new_field={"x": 1})  # an unknown field: ignored (and this verify counts)
    # kill -9 of a1 at ~60 s: no last words; b1 takes over (2.0 s), a restarted at 120 s
    h.ev(sb, 65, "QM1", "hostb", "b1", "failover_start", from_status="Running")
    h.ev(sb, 65.5, "QM1", "hostb", "b1", "role", role="active", generation=2, failover=True)
    h.ev(sb, 67, "QM1", "hostb", "b1", "failover_end", duration_s=2.0, recovery_s=1.5)
    h.ev(sa, 120, "QM1", "hosta", "a2", "role", role="standby")
    for i, lat in enumerate(B1_VERIFY):
        h.ev(sb, 130 + 10 * i, "QM1", "hostb", "b1", "verify", ok=True, latency_s=lat)
    h.ev(sb, 200, "QM1", "hostb", "b1", "some_future_event", colour="green", n=7)
    # 01:00 switchover b1 -> a2 (1.0 s)
    h.ev(sb, 3600, "QM1", "hostb", "b1", "role", role="ended", mode="immediate",
         switchover=True)
    h.ev(sa, 3601, "QM1", "hosta", "a2", "failover_start", from_status="Ended immediately")
    h.ev(sa, 3601.5, "QM1", "hosta", "a2", "role", role="active", generation=3,
         failover=True)
    h.ev(sa, 3602, "QM1", "hosta", "a2", "failover_end", duration_s=1.0, recovery_s=0.5)
    h.ev(sb, 3900, "QM1", "hostb", "b2", "role", role="standby")
    for i, lat in enumerate(A2_VERIFY):
        h.ev(sa, 3700 + 60 * i, "QM1", "hosta", "a2", "verify", ok=True, latency_s=lat)
    # 02:00 slow I/O on hosta; a2 stalls and stops itself (AMQ7280) at 02:05:00; its last
    # words reached only its host-local copy (written both places up to the first slow one)
    local = "local/hosta/events/QM1/hosta.jsonl"
    tail = [h.ev(sa, 7260, "QM1", "hosta", "a2", "verify", ok=True, latency_s=A2_SLOW[0])]
    h.files[local] = list(tail)
    h.files[local].append(h.ev(sa, 7320, "QM1", "hosta", "a2", "verify", ok=True,
                               latency_s=A2_SLOW[1]))
    for event, sec, fields in (("monitor_stall", 7499, {"stalled_s": 3.5}),
                               ("fatal", 7500, {"amq": "AMQ7280",
                                                "detail": "verify stalled for 3.5s"})):
        h.ev(local, sec, "QM1", "hosta", "a2", event, **fields)
    h.ev(sb, 7510, "QM1", "hostb", "b2", "failover_start", from_status="Running")
    h.ev(sb, 7510.5, "QM1", "hostb", "b2", "role", role="active", generation=4,
         failover=True)
    h.ev(sb, 7514, "QM1", "hostb", "b2", "failover_end", duration_s=4.0, recovery_s=3.0)
    # QM2: c1 active on hostc, d1 standby; hostc is lost at ~03:00 (nothing more from it)
    h.ev(sc, 10000, "QM2", "hostc", "c1", "role", role="active", generation=1,
         failover=False)
    h.ev(sd, 10001, "QM2", "hostd", "d1", "role", role="standby")
    for i, lat in enumerate(C1_VERIFY):
        h.ev(sc, 10010 + 10 * i, "QM2", "hostc", "c1", "verify", ok=True, latency_s=lat)
    h.ev(sd, 10100, "QM2", "hostd", "d1", "failover_start", from_status="Running")
    h.ev(sd, 10100.5, "QM2", "hostd", "d1", "role", role="active", generation=2,
         failover=True)
    h.ev(sd, 10103, "QM2", "hostd", "d1", "failover_end", duration_s=3.0, recovery_s=2.0)
    h.ev(sd, 10110, "QM2", "hostd", "d1", "verify", ok=True, latency_s=D1_VERIFY[0])
    h.ev(sd, 10120, "QM2", "hostd", "d1", "verify", ok=False, error="EIO")
    h.ev(sd, 10130, "QM2", "hostd", "d1", "liveness", forces=10, waiting=0, ok=True,
         write_time_us=800.0, write_time_max_us=5000.0)
    h.ev(sd, 13730, "QM2", "hostd", "d1", "liveness", forces=20, waiting=0, ok=True,
         write_time_us=600.0, write_time_max_us=5000.0)
    h.write(root)
    # bad lines: a torn last line, garbage, a newer version, a blank line, a missing ts
    with open(root / sd, "a") as f:
        f.write('{"v":2,"ts":"2026-01-05T04:00:00.000000+00:00","qmgr":"QM2","host":"hostd",'
                '"instance_id":"d1","seq":99,"event":"verify","ok":true,"latency_s":9.0}\n')
        f.write("\n")
        f.write("this is not json\n")
        f.write('{"v":1,"qmgr":"QM2","host":"hostd","instance_id":"d1","event":"verify"}\n')
        f.write('{"v":1,"ts":"2026-01-05T04:00:01.000000+00:00","qmgr":"QM2","ho')


@pytest.fixture(scope="module")
def result(spark: object, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    from miqm.analysis.run import analyze

    root = tmp_path_factory.mktemp("hist")
    build(root)
    out = root / "out"
    summary = analyze([str(root / "shared"), str(root / "local")], str(out), spark=spark)
    return summary, out


def test_counts_skip_bad_lines_and_merge_copies(result: tuple[dict, Path]) -> None:
    s, _ = result
    assert s["malformed_lines"] == 3       # garbage, missing ts, torn last line
    assert s["unsupported_version_lines"] == 1
    assert s["blank_lines"] == 1
    assert s["duplicates_removed"] == 2    # a2's slow verifies are in both copies
    assert s["qmgrs"] == 2 and s["hosts"] == 4 and s["instances"] == 6


def test_failovers_causes_and_durations(result: tuple[dict, Path]) -> None:
    import pandas as pd

    s, out = result
    assert s["failovers"] == 3 and s["switchovers"] == 1
    assert s["failovers_by_cause"] == {"kill": 1, "spurious": 1, "host_loss": 1}
    # durations 2.0 (kill), 4.0 (spurious), 3.0 (host loss): nearest rank over [2, 3, 4]
    assert s["failover_seconds"] == {"p50": 3.0, "p95": 4.0, "max": 4.0}
    assert s["switchover_seconds"] == {"p50": 1.0, "p95": 1.0, "max": 1.0}
    assert s["spurious_failovers"] == 1
    tk = pd.read_csv(out / "tables" / "takeovers.csv")
    got = sorted(zip(tk["qmgr"], tk["cause"], tk["prev_instance"], tk["instance_id"],
                     tk["duration_s"], strict=False))
    assert got == [("QM1", "kill", "a1", "b1", 2.0), ("QM1", "spurious", "a2", "b2", 4.0),
                   ("QM1", "switchover", "b1", "a2", 1.0),
                   ("QM2", "host_loss", "c1", "d1", 3.0)]
    kill = tk[tk["cause"] == "kill"].iloc[0]
    assert kill["outage_s"] == pytest.approx(67 - 55)


def test_verify_and_lock_percentiles_by_nearest_rank(result: tuple[dict, Path]) -> None:
    import pandas as pd

    s, out = result
    ok = A1_VERIFY + B1_VERIFY + A2_VERIFY + A2_SLOW + C1_VERIFY + D1_VERIFY
    assert len(ok) == 20
    # 20 values: p50 = 10th smallest, p99 = 20th (ceil(19.8)); worked out by hand
    assert sorted(ok)[9] == 0.002 and max(ok) == 0.8
    assert s["lock_verify_seconds"] == {"p50": 0.002, "p99": 0.8}
    # lock attempts: 0.001, 0.0004, 0.0005, 0.0007 -> p50 = 2nd = 0.0005, p99 = 4th
    assert s["lock_acquire_seconds"] == {"p50": 0.0005, "p99": 0.001}
    lat = pd.read_csv(out / "tables" / "latency.csv")
    hosta = lat[(lat["kind"] == "verify") & (lat["host"] == "hosta") & (lat["hour"] == -1)]
    # hosta: A1 (6) + A2 (6) + 2 slow = 14 -> p50 = 7th smallest = 0.002, p99 = 14th = 0.8
    assert hosta.iloc[0]["count"] == 14 and hosta.iloc[0]["p50_s"] == 0.002
    assert hosta.iloc[0]["p99_s"] == 0.8
    hour2 = lat[(lat["kind"] == "verify") & (lat["host"] == "hosta") & (lat["hour"] == 2)]
    assert hour2.iloc[0]["count"] == 2 and hour2.iloc[0]["p50_s"] == 0.5


def test_spurious_failover_with_what_preceded_it(result: tuple[dict, Path]) -> None:
    import pandas as pd

    _, out = result
    sp = pd.read_csv(out / "tables" / "spurious.csv")
    assert len(sp) == 1
    r = sp.iloc[0]
    assert (r["qmgr"], r["prev_host"], r["prev_fatal_amq"]) == ("QM1", "hosta", "AMQ7280")
    # verifies in the 300 s before 02:05:00: 02:01 (0.5) and 02:02 (0.8)
    assert r["verifies_before"] == 2 and r["verify_max_before_s"] == 0.8
    assert r["verify_p50_before_s"] == 0.5 and r["stall_before_s"] == 3.5
    # the slow window found from hosta's latencies: the 02:00-02:05 bucket
    assert r["slow_window_start"] == "2026-01-05T02:00:00.000000Z"
    win = pd.read_csv(out / "tables" / "slow_windows.csv")
    assert list(win["host"]) == ["hosta"] and list(win["minutes"]) == [5.0]


def test_outputs_report_and_hwm(result: tuple[dict, Path]) -> None:
    import pandas as pd

    s, out = result
    assert json.loads((out / "summary.json").read_text())["failovers"] == 3
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") >= 3 and "spurious" in html
    # the role timeline's bar colours are named (it said "bar colour: host" and no more):
    # QM1 ran on hosta and hostb, QM2 on hostc and hostd
    key = html.split('<p class="key">active host: ', 1)[1].split("</p>", 1)[0]
    assert [k.split("<span")[0].strip() for k in key.split("</span>")[1:]] == [
        "hosta", "hostb", "hostc", "hostd"]
    for name in ("takeovers", "latency", "spurious"):
        assert (out / "tables" / f"{name}.parquet").stat().st_size > 0
    hwm = pd.read_csv(out / "tables" / "log_write_hwm.csv")
    assert list(hwm["peak_write_us"]) == [800.0, 600.0]
    assert list(hwm["hwm_write_us"]) == [800.0, 800.0]
    assert s["log_write_hwm_us"] == 800.0
    assert s["flapping_qmgrs"] == []
