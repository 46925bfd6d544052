"""``miqm analyze run`` as a user types it, for the mistakes that need no Spark job: a
master URL Spark does not take and a standalone master that is not there are one clear
line and exit 1 before any JVM starts (Spark itself retried an absent master for about
90 s, then said only 'An error occurred while calling None...SparkSession')."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("pyspark")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["miqm", "analyze", "run", *args], capture_output=True, text=True,
                          timeout=600)


@pytest.fixture
def history(tmp_path: Path) -> Path:
    path = tmp_path / "events" / "hosta.jsonl"
    path.parent.mkdir()
    path.write_text('{"v":1,"ts":"2026-01-05T00:00:00Z","qmgr":"QM1","host":"hosta",'
                    '"instance_id":"a1","seq":1,"event":"verify","ok":true,'
                    '"latency_s":0.001}\n')
    return path.parent


def test_a_master_that_is_not_there_is_one_line(history: Path, tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = _run(str(history), "--out", str(tmp_path / "out"), "--master",
                f"spark://127.0.0.1:{port}")
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"the Spark master spark://127.0.0.1:{port} does not answer (Connection refused): "
        "start it (docs/analysis.md, Spark) or name another with --master; without "
        "--master the analysis runs here (local[*])"], proc.stderr
    assert not (tmp_path / "out" / "summary.json").exists()


@pytest.mark.parametrize("master", ["foo", "local[0]", "spark://nohost"])
def test_a_master_url_spark_does_not_take_is_one_line(history: Path, tmp_path: Path,
                                                       master: str) -> None:
    proc = _run(str(history), "--out", str(tmp_path / "out"), "--master", master)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"--master {master!r}" in lines[0], proc.stderr
    assert "Java" not in lines[0]


def test_generate_refuses_more_events_than_it_can_hold(tmp_path: Path) -> None:
    """--events 10^14 was an AMQ6184 internal error (MemoryError allocating 100 GiB)."""
    proc = subprocess.run(["miqm", "analyze", "generate", "--events", "99999999999999",
                           "--out", str(tmp_path / "g")], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "--events 99999999999999: generate at most 100,000,000 events (about 23 GB of "
        "history) at once; for more, generate several histories with different --seed and "
        "--out and name them all to miqm analyze run"], proc.stderr
    assert not (tmp_path / "g").exists()
