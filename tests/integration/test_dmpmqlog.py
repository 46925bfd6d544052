"""``dmpmqlog``: the records of a queue manager's log, read without writing, for a queue
manager that is not running (one whose log stops strmqm is the case it is for)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def _run(env: dict[str, str], *argv: str, stdin: str | None = None
         ) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(argv), env=env, input=stdin, capture_output=True, text=True,
                          timeout=120)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


def _files(d: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(d.iterdir())
            if p.is_file()}


def test_dmpmqlog_lists_the_records_refuses_a_running_one_and_stops_at_damage(
        tmp_path: Path) -> None:
    env = dict(os.environ, MIQM_DATA_ROOT=str(tmp_path), MIQM_HOSTNAME="hostlog")
    env.pop("MIQM_CONNECTION", None)
    assert _run(env, "crtmqm", "-ll", "QMLOG").returncode == 0
    try:
        assert _run(env, "strmqm", "QMLOG").returncode == 0
        assert _run(env, "runmqsc", "QMLOG", stdin="DEFINE QLOCAL(APP.Q)\n").returncode == 0
        # two small messages, then three of 3,000 bytes: the first log pages are full
        # (sealed, in their own places) before the queue manager is killed
        lines = "first\nsecond\n" + ("x" * 3000 + "\n") * 3
        assert _run(env, "amqsput", "QMLOG", "APP.Q", stdin=lines).returncode == 0
        running = _run(env, "dmpmqlog", "-m", "QMLOG")
        assert running.returncode != 0 and "AMQ8041" in running.stderr, running.stderr
        assert len(running.stderr.strip().splitlines()) == 1
        # killed, as a queue manager whose log is then looked into: no checkpoint at its
        # end, so the restart point is before the puts
        pid = int(_run(env, "pgrep", "-f", "miqm.ha.controller QMLOG").stdout.split()[0])
        os.kill(pid, signal.SIGKILL)
        for _ in range(100):
            if not Path(f"/proc/{pid}").exists():
                break
            time.sleep(0.1)
    finally:
        _run(env, "endmqm", "-i", "QMLOG")
    log = tmp_path / "log" / "QMLOG"
    before = _files(log)
    dump = _run(env, "dmpmqlog", "-m", "QMLOG")
    assert dump.returncode == 0, dump.stderr
    puts = [line for line in dump.stdout.splitlines() if " PUT " in line and "APP.Q" in line]
    assert len(puts) == 5 and "body 5 bytes" in puts[0] and "body 6 bytes" in puts[1], \
        dump.stdout
    assert all("body 3000 bytes" in p for p in puts[2:]), dump.stdout
    assert "LogType:\tLINEAR" in dump.stdout and "EndLSN:" in dump.stdout
    doc = json.loads(_run(env, "dmpmqlog", "-m", "QMLOG", "--json").stdout)
    assert [r["type"] for r in doc["records"]].count("PUT") >= 2
    assert doc["error"] is None and doc["end"]["EndLSN"] > doc["control"]["RestartLSN"]
    assert _files(log) == before  # read, never written
    # a page in the middle of the records made garbage: the records before it, then one
    # line (exit 71); the log is still not written
    put_lsn = [r for r in doc["records"] if r["type"] == "PUT"][1]["lsn"]  # on page 0
    extent = log / doc["control"]["Active"][0]
    raw = bytearray(extent.read_bytes())
    at = (2 + put_lsn // 4096) * 4096  # docs/log-format.md: two header pages, then page g
    raw[at + 64:at + 4000] = os.urandom(3936)
    extent.write_bytes(bytes(raw))
    before = _files(log)
    damaged = _run(env, "dmpmqlog", "-m", "QMLOG")
    assert damaged.returncode == 71, damaged.stdout + damaged.stderr
    assert len(damaged.stderr.strip().splitlines()) == 1, damaged.stderr
    assert "LogType:" in damaged.stdout  # the control file was shown before the damage
    assert _files(log) == before
