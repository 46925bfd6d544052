"""``miqm analyze run`` on a history with values no instance writes: NaN, Infinity, 1e999
and negative latencies, a JSON number for ``ts`` (Spark reads "12345" as the year
12345), years 1 and 9999, wrong types. Each such line is counted malformed and skipped;
the analysis finishes, summary.json is strict JSON, and the report is drawn. (Before:
the year-12345 line failed the whole Spark job, year 9999 failed the report's timeline,
and NaN reached summary.json, which no JSON reader takes.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytestmark = pytest.mark.timeout(900)


def _strict(text: str) -> dict:
    def refuse(name: str) -> float:
        raise ValueError(f"{name} in summary.json")

    return json.loads(text, parse_constant=refuse)


def _line(sec: float, iid: str, host: str, seq: int, event: str, **fields: object) -> str:
    import datetime as dt

    ts = dt.datetime.fromtimestamp(1_767_571_200 + sec, dt.UTC).isoformat()
    return json.dumps({"v": 1, "ts": ts, "qmgr": "QM1", "host": host, "instance_id": iid,
                       "seq": seq, "event": event, **fields})


GOOD = [
    _line(0, "a1", "hosta", 1, "role", role="active", generation=1, failover=False),
    _line(1, "b1", "hostb", 1, "role", role="standby"),
    _line(10, "a1", "hosta", 2, "verify", ok=True, latency_s=0.002),
    _line(20, "a1", "hosta", 3, "verify", ok=True, latency_s=0.003),
    _line(65, "b1", "hostb", 2, "failover_start", from_status="Running"),
    _line(65.5, "b1", "hostb", 3, "role", role="active", generation=2, failover=True),
    _line(67, "b1", "hostb", 4, "failover_end", duration_s=2.0, recovery_s=1.5),
    _line(70, "b1", "hostb", 5, "verify", ok=True, latency_s=0.004),
    _line(80, "b1", "hostb", 6, "liveness", forces=3, waiting=0, ok=True,
          write_time_us=700.0, write_time_max_us=900.0),
]
HEAD = '{"v":1,"qmgr":"QM1","host":"hostb","instance_id":"b1","event":"verify","ok":true,'
BAD = [
    HEAD + '"ts":"2026-01-05T00:01:30Z","seq":7,"latency_s":NaN}',
    HEAD + '"ts":"2026-01-05T00:01:31Z","seq":8,"latency_s":Infinity}',
    HEAD + '"ts":"2026-01-05T00:01:32Z","seq":9,"latency_s":1e999}',
    HEAD + '"ts":"2026-01-05T00:01:33Z","seq":10,"latency_s":-5}',
    HEAD + '"ts":"2026-01-05T00:01:34Z","seq":11,"latency_s":"NaN"}',
    HEAD + '"ts":12345,"seq":12,"latency_s":0.001}',
    HEAD + '"ts":"0001-01-01T00:00:00Z","seq":13,"latency_s":0.001}',
    HEAD + '"ts":"9999-12-31T23:59:59Z","seq":14,"latency_s":0.001}',
    '{"v":1,"ts":"2026-01-05T00:01:40Z","qmgr":"QM1","host":"hostb","instance_id":"b1",'
    '"seq":15,"event":"failover_end","duration_s":-1e308}',
    '{"v":1,"ts":"2026-01-05T00:01:41Z","qmgr":"QM1","host":"hostb","instance_id":"b1",'
    '"seq":16,"event":"liveness","write_time_us":Infinity}',
    '{"v":1,"ts":12345,"qmgr":7,"host":["a"],"instance_id":{"x":1},"seq":1.5,"event":5}',
    "[1,2,3]", '"text"', "42", "null", "{}",
]


def test_hostile_values_are_malformed_lines_and_the_outputs_stay_valid(
        spark: object, tmp_path: Path) -> None:
    from miqm.analysis.run import analyze

    hist = tmp_path / "hist" / "QM1" / "events"
    hist.mkdir(parents=True)
    (hist / "hostb.jsonl").write_text("\n".join(GOOD + BAD) + "\n")
    out = tmp_path / "out"
    summary = analyze([str(tmp_path / "hist")], str(out), spark=spark)
    written = _strict((out / "summary.json").read_text())
    assert written["malformed_lines"] == len(BAD), written
    assert written["events"] == len(GOOD)
    assert written["failovers"] == 1 and written["failover_seconds"]["max"] == 2.0
    assert written["lock_verify_seconds"] == {"p50": 0.003, "p99": 0.004}
    assert written["log_write_hwm_us"] == 700.0
    assert (written["from"], written["to"]) == ("2026-01-05T00:00:00.000000Z",
                                                "2026-01-05T00:01:20.000000Z")
    assert _strict(json.dumps(summary)) == written  # what --json prints
    assert "<img" in (out / "report.html").read_text()


def test_paths_with_glob_characters_are_read_as_named(spark: object, tmp_path: Path) -> None:
    """Spark takes every path for a glob: a directory named ``hist[1]`` was 'Path does not
    exist' (the pattern matches ``hist1``), a file ``h*1.jsonl`` could read others."""
    from miqm.analysis.run import analyze

    d = tmp_path / "hist[1]" / "QM1" / "events"
    d.mkdir(parents=True)
    (d / "hostb.jsonl").write_text("\n".join(GOOD) + "\n")
    f = tmp_path / "copy{x}" / "h*1.jsonl"
    f.parent.mkdir()
    f.write_text("\n".join(GOOD) + "\n")  # the same events again: merged
    (tmp_path / "copy{x}" / "h221.jsonl").write_text(BAD[0] + "\n")  # matched by h*1 only
    summary = analyze([str(tmp_path / "hist[1]"), str(f)], str(tmp_path / "out"),
                      spark=spark, report=False)
    assert (summary["events"], summary["duplicates_removed"]) == (len(GOOD), len(GOOD))
    assert summary["malformed_lines"] == 0 and summary["failovers"] == 1


def test_a_compressed_history_cut_short_is_named(spark: object, tmp_path: Path) -> None:
    """Spark reads ``*.jsonl.gz`` (a rotation compressed by logrotate); one cut short (the
    copy was taken while it was being written) failed the job with 'the Spark job failed:
    [FAILED_READ_FILE.NO_HINT] Encountered error while reading file file:///...  SQLSTATE:
    KD001', not saying why."""
    import gzip

    from miqm.analysis.run import analyze
    from miqm.errors import AnalysisError

    hist = tmp_path / "hist"
    hist.mkdir()
    whole = gzip.compress(("\n".join(GOOD * 20) + "\n").encode())
    (hist / "hostb.jsonl.1.gz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(AnalysisError) as err:
        analyze([str(hist)], str(tmp_path / "out"), spark=spark, report=False)
    assert str(err.value) == (
        f"cannot read the history file {hist}/hostb.jsonl.1.gz: Unexpected end of input "
        "stream (a compressed file cut short? check it with gzip -t, or leave it out)")
    assert not (tmp_path / "out").exists()


def test_names_beginning_with_underscore_or_dot_are_read(spark: object,
                                                         tmp_path: Path) -> None:
    """Spark leaves out files and directories whose names begin with ``_`` or ``.``, even
    named ones; ``_QM1`` is a queue manager name and ``_hostb``, ``.hosta`` host names:
    their histories were skipped, silently (here: 'no events')."""
    from miqm.analysis.run import analyze

    shared = tmp_path / "hist" / "_QM1" / "events"
    shared.mkdir(parents=True)
    (shared / "_hostb.jsonl").write_text("\n".join(GOOD) + "\n")
    local = tmp_path / "local" / ".hosta.jsonl"
    local.parent.mkdir()
    local.write_text("\n".join(GOOD[:3]) + "\n")  # a copy of the first three
    out = tmp_path / "out"
    summary = analyze([str(tmp_path / "hist"), str(local)], str(out), spark=spark,
                      report=False)
    assert (summary["events"], summary["duplicates_removed"]) == (len(GOOD), 3)
    assert summary["failovers"] == 1
    assert sorted(p.name for p in out.iterdir()) == ["summary.json", "tables"]


def test_a_directory_that_cannot_be_listed_is_one_line(tmp_path: Path) -> None:
    """os.walk skips, silently, a directory it cannot list (unreadable to this user, or
    gone or replaced while it walks: here a file where it expects a directory); the
    history under it would be missing from the figures without a word."""
    from miqm.analysis.history import _walk
    from miqm.errors import AnalysisError

    f = tmp_path / "events"
    f.write_text("")
    with pytest.raises(AnalysisError) as err:
        _walk(str(f))
    assert str(err.value) == (f"cannot list {f}: Not a directory: make it readable (or "
                              "name the directories beside it instead)")
