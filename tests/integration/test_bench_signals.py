"""A benchmark stopped by SIGTERM (``timeout``, a CI's limit, ``kill``) ends the way
Ctrl-C ends it: the two instances it started are ended by its cleanup, and it says so
in one line with exit 143. Its default action had ended the benchmark at once and left
both instances running (they run in sessions of their own)."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from tests.waiting import wait_until

pytestmark = pytest.mark.integration


def _controllers(qmgr: str) -> set[int]:
    """Pids of execution controllers of ``qmgr`` running now."""
    found = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except OSError:
            continue
        if b"miqm.ha.controller" in argv and qmgr.encode() in argv:
            found.add(int(pid))
    return found


def test_sigterm_ends_a_failover_benchmark_and_its_instances(tmp_path) -> None:
    before = _controllers("QMBENCH")
    bench = subprocess.Popen(["miqm", "bench", "failover", "--cycles", "50"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, TMPDIR=str(tmp_path)))
    try:
        wait_until(lambda: len(_controllers("QMBENCH") - before) >= 2,
                   "the benchmark's two instances", timeout=120, poll=0.2)
        started = _controllers("QMBENCH") - before
        time.sleep(0.5)
        bench.send_signal(signal.SIGTERM)
        _out, err = bench.communicate(timeout=120)
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.communicate()
    assert bench.returncode == 128 + signal.SIGTERM, err
    lines = err.strip().splitlines()
    assert lines and lines[-1].endswith("stopped by SIGTERM: the command did not complete")
    assert "Traceback" not in err, err
    wait_until(lambda: not (_controllers("QMBENCH") & started),
               "the benchmark's instances ended", timeout=30, poll=0.2)
    assert not os.listdir(tmp_path), os.listdir(tmp_path)  # its directories removed
