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


@pytest.mark.parametrize("master", ["foo", "local[0]", "spark://nohost",
                                    "spark://127.0.0.1:70000", "spark://127.0.0.1:0"])
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


def _path_without_java(tmp_path: Path) -> str:
    """PATH as it is, but every directory with a java in it replaced by a copy of its
    links without java."""
    import os

    dirs = []
    for i, d in enumerate(os.environ.get("PATH", "").split(os.pathsep)):
        if not os.path.exists(os.path.join(d, "java")):
            dirs.append(d)
            continue
        copy = tmp_path / f"bin{i}"
        copy.mkdir()
        for name in os.listdir(d):
            if name != "java":
                (copy / name).symlink_to(os.path.join(d, name))
        dirs.append(str(copy))
    return os.pathsep.join(dirs)


@pytest.mark.parametrize("java_home", [None, "/nonexistent/jdk"])
def test_no_java_is_one_line_saying_so(history: Path, tmp_path: Path,
                                       java_home: str | None) -> None:
    """Without Java it was 'could not start Spark on local[*]: [JAVA_GATEWAY_EXITED] Java
    gateway process exited before sending its port number', after a JVM launch attempt."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = _path_without_java(tmp_path)
    if java_home:
        env["JAVA_HOME"] = java_home
    proc = subprocess.run(["miqm", "analyze", "run", str(history), "--out",
                           str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    if java_home:
        assert lines[0].startswith(f"JAVA_HOME is {java_home}, which has no bin/java")
    else:
        assert lines[0].startswith("Spark needs Java 17 and there is no java on PATH")
    assert not (tmp_path / "out").exists()


def test_a_pipe_is_not_said_to_be_missing(tmp_path: Path) -> None:
    """``miqm analyze run <(zcat hist.jsonl.gz)`` names a pipe: it was 'history
    /dev/fd/63 does not exist'."""
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    proc = _run(str(fifo), "--out", str(tmp_path / "out"))
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"history {fifo} is not a file or directory (a pipe or a device): Spark reads "
        "files; save it to a file and name that"], proc.stderr
    assert not (tmp_path / "out").exists()
