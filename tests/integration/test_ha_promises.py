"""The HA promises end to end on real processes (two instances on this machine):

* a log force that stalls on a running active ends it with AMQ7280 from the *liveness*
  check (not the verify monitor) within two LivenessIntervals, and the standby takes over
  with every acknowledged message;
* PermitStandby=No: an active started without ``-x`` refuses a standby elsewhere (its
  own exit code, one line naming the reason) and ``qmstatus.ini`` records it;
* a real filesystem (a small tmpfs holding the data and log directories, root only) filled
  under a running active stops it cleanly, loses nothing acknowledged, and the standby
  takes over once space returns.

Faults are armed from events the test has seen (the instance reports Running, a put was
acknowledged), never a number of seconds after start.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from miqm.ha.decide import EXIT_RUNNING_ELSEWHERE, EXIT_STANDBY_NOT_PERMITTED
from miqm.localpair import LocalPair
from tests.integration.test_multi_instance import (
    _dump,
    _errlog,
    _run_pid,
    _wait_gone,
    created_pair,
)

pytestmark = pytest.mark.integration

LIVENESS = 3.0
TUNING = {"StandbyPollInterval": "0.2", "VerifyInterval": "0.5", "MonitorStall": "2",
          "LivenessInterval": f"{LIVENESS:g}", "FilesystemLease": "90"}


@pytest.fixture
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LocalPair]:
    yield from created_pair(request, tmp_path, TUNING)


def _events(p: LocalPair, host: str) -> list[dict]:
    path = Path(p.data_dir()) / "events" / f"{host}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _start_active_with(pair: LocalPair, faults: list[dict]) -> tuple[int, Path]:
    """strmqm -x on A with ``faults`` held back until the returned trigger file exists,
    then the standby on B and a queue; returns A's pid and the trigger."""
    trigger = Path(pair.base) / "arm-faults"
    pair.a.extra["MIQM_FAULTS"] = json.dumps([dict(f, armed=str(trigger)) for f in faults])
    assert "started using" in pair.start(pair.a)  # A reports Running
    del pair.a.extra["MIQM_FAULTS"]  # only A's controller has them: not later commands
    assert "standby instance" in pair.start(pair.b)
    pair.mqsc(pair.a, "DEFINE QLOCAL(HA.Q) MAXDEPTH(100000)\n")
    pid = _run_pid(pair.a)
    assert pid
    return pid, trigger


def test_a_stalled_log_force_ends_the_active_by_liveness_and_the_standby_takes_over(
        pair: LocalPair) -> None:
    pid, arm = _start_active_with(pair, [{"volume": "log", "op": "fdatasync",
                                          "path": "S*.LOG", "kind": "stall",
                                          "seconds": 600}])
    lines = [f"acked{i:02d}" for i in range(10)]
    pair.put(pair.a, "HA.Q", lines)  # acknowledged: these must survive
    arm.touch()
    armed = time.monotonic()
    # a put whose force never completes: its caller waits on the log
    stuck = subprocess.Popen(["amqsput", "QMHA", "HA.Q"], env=pair.a.env(),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert stuck.stdin is not None
        stuck.stdin.write("stalled\n")
        stuck.stdin.close()
        assert _wait_gone(pid, timeout=4 * LIVENESS + 15), \
            "a stalled log force did not stop the active"
        took = time.monotonic() - armed
        print(f"liveness: the active stopped {took:.1f}s after its log force stalled "
              f"(LivenessInterval {LIVENESS:g}s)")
        log = _errlog(pair)
        assert "AMQ7280" in log and "the logger made no progress" in log, log[-2000:]
        assert "verify of the master lock has been stalled" not in log  # liveness fired
        fatal = [e for e in _events(pair, "hosta") if e["event"] == "fatal"]
        assert fatal and fatal[-1]["amq"] == "AMQ7280"
        # waiting seen at one check, no force by the next: within two intervals (+slack)
        assert took < 2 * LIVENESS + 5, f"liveness stopped the active after {took:.1f}s"
        new = pair.wait_active(not_host="hosta", timeout=30)
        assert new["host"] == "hostb"
        got = pair.get_all(pair.b, "HA.Q")
        assert got[:10] == lines and got[10:] in ([], ["stalled"]), got
    finally:
        if stuck.poll() is None:
            stuck.kill()
        stuck.wait(10)
        for stream in (stuck.stdout, stuck.stderr):
            assert stream is not None
            stream.close()


def test_permit_standby_no_refuses_a_standby_and_qmstatus_records_it(
        pair: LocalPair) -> None:
    out = pair.run(pair.a, "strmqm", "QMHA").stdout  # no -x: standby not permitted
    assert "started using" in out
    status = [ln.strip() for ln in
              (Path(pair.data_dir()) / "qmstatus.ini").read_text().splitlines()]
    assert "CurrentStatus=Running" in status and "PermitStandby=No" in status, status
    refused = pair.run(pair.b, "strmqm", "-x", "QMHA", check=False)
    assert refused.returncode == EXIT_STANDBY_NOT_PERMITTED, (refused.returncode,
                                                              refused.stdout, refused.stderr)
    err = refused.stderr.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert "without permitting standby" in err[0] and "QMHA" in err[0], err[0]
    assert _run_pid(pair.b) is None, "a refused standby kept running"
    assert "without permitting standby" in _errlog(pair)
    # the active is untouched and still the only instance
    assert pair.active()["host"] == "hosta"
    instances = pair.status().get("instances", [])
    assert [i["host"] for i in instances] == ["hosta"], instances
    # a plain strmqm elsewhere: running elsewhere (exit 5)
    plain = pair.run(pair.b, "strmqm", "QMHA", check=False)
    assert plain.returncode == EXIT_RUNNING_ELSEWHERE and "running elsewhere" in plain.stderr


# ---------------------------------------------------------------- a real full filesystem
def _mount_tmpfs(where: Path, size: str) -> None:
    where.mkdir(parents=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "miqm-test",
                           str(where)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"unavailable: cannot mount a tmpfs ({proc.stderr.strip()})")


def _umount(where: Path) -> None:
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _fill(path: Path) -> int:
    """Write zeros to ``path`` until the filesystem is full; the bytes written."""
    n = 0
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                n += f.write(b"\0" * 65536)
        except OSError:
            pass
        try:
            while True:
                n += f.write(b"\0" * 512)
        except OSError:
            pass
    return n


@pytest.mark.root
def test_a_full_filesystem_stops_the_active_cleanly_and_the_standby_takes_over(
        tmp_path: Path) -> None:
    shared = tmp_path / "pair" / "shared"
    _mount_tmpfs(shared, "24m")  # data and log directories both on it
    p = LocalPair(qmgr="QMFULL", base=str(tmp_path / "pair"), tuning=dict(TUNING))
    ballast = shared / "ballast"
    try:
        p.create()
        assert "started using" in p.start(p.a)
        assert "standby instance" in p.start(p.b)
        p.mqsc(p.a, "DEFINE QLOCAL(FULL.Q) MAXDEPTH(1000000) MAXMSGL(4194304)\n")
        pid, standby = _run_pid(p.a, "QMFULL"), _run_pid(p.b, "QMFULL")
        assert pid and standby
        lines = [f"kept{i:03d}" for i in range(50)]
        p.put(p.a, "FULL.Q", lines)  # acknowledged before the disk fills
        _fill(ballast)
        big = "x" * 200_000  # to the log and the queue files: one client, many puts
        refused = p.run(p.a, "amqsput", "QMFULL", "FULL.Q", check=False, timeout=120,
                        stdin="".join(f"{big}{i}\n" for i in range(200)))
        assert "Traceback" not in refused.stdout + refused.stderr
        if refused.returncode == 0:
            refused = None
        assert refused is not None, "puts kept succeeding on a full filesystem"
        assert len((refused.stderr or refused.stdout).strip().splitlines()) == 1, refused
        assert _wait_gone(pid, timeout=30), "the active kept running on a full filesystem"
        log = _errlog(p)
        assert "AMQ6708" in log and "No space left" in log, log[-3000:]
        # no space to take over in: the standby stays the standby, nothing is active
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            assert _wait_gone(standby, timeout=0.1) is False, \
                "the standby ended instead of waiting for space:\n" + _errlog(p)[-3000:]
        assert "stays the standby" in _errlog(p)
        ballast.unlink()  # space returns
        new = p.wait_active(not_host="hosta", timeout=60)
        assert new["host"] == "hostb"
        got = p.get_all(p.b, "FULL.Q")
        assert got[:50] == lines, got[:60]
        assert all(g.startswith("x" * 1000) for g in got[50:]), "a foreign or torn message"
    except BaseException:
        _dump(p)
        raise
    finally:
        p.close()
        _umount(shared)
