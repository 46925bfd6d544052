"""Two instances of one queue manager on this machine (two data roots, two host names,
one shared data and log directory), driven through the real console commands as
separate processes: kill -9, SIGSTOP, switchover, refusals and injected faults.

Every test dumps both instances' error logs when it fails, and leaves no process behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from miqm.localpair import Host, LocalPair

pytestmark = pytest.mark.integration

TUNING = {"StandbyPollInterval": "0.2", "VerifyInterval": "0.5", "MonitorStall": "2",
          "LivenessInterval": "5", "FilesystemLease": "90"}


def created_pair(request: pytest.FixtureRequest, tmp_path: Path,
                 tuning: dict[str, str], qmgr: str = "QMHA") -> Iterator[LocalPair]:
    """A created pair (QMHA unless named) for a fixture to yield from: closed after the
    test, both error logs and run outputs printed first when the test failed."""
    p = LocalPair(qmgr=qmgr, base=str(tmp_path / "pair"), tuning=dict(tuning))
    p.create()
    try:
        yield p
    finally:
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            _dump(p)
        p.close()


@pytest.fixture
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LocalPair]:
    yield from created_pair(request, tmp_path, TUNING)


def _dump(p: LocalPair) -> None:
    errors = Path(p.data_dir()) / "errors"
    for f in sorted(errors.glob("AMQERR0*.LOG")) if errors.is_dir() else []:
        print(f"===== {f}\n{f.read_text(errors='replace')[-6000:]}")
    for host in (p.a, p.b):
        for f in sorted(Path(host.root, "run").glob("*.out")):
            print(f"===== {f}\n{f.read_text(errors='replace')[-3000:]}")


def _start_both(p: LocalPair) -> None:
    assert "started using" in p.start(p.a)
    assert "standby instance" in p.start(p.b)
    p.mqsc(p.a, "DEFINE QLOCAL(HA.Q) MAXDEPTH(100000)\n")


def _events(p: LocalPair, host: str) -> list[dict]:
    path = Path(p.data_dir()) / "events" / f"{host}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _wait_gone(pid: int, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[-1].split()[0] == "Z":
                    return True
        except (ProcessLookupError, FileNotFoundError):
            return True
        time.sleep(0.05)
    return False


def _errlog(p: LocalPair) -> str:
    path = Path(p.data_dir()) / "errors" / "AMQERR01.LOG"
    return path.read_text(errors="replace") if path.exists() else ""


def _run_pid(host: Host, qmgr: str = "QMHA") -> int | None:
    try:
        with open(os.path.join(host.root, "run", f"{qmgr}.json")) as f:
            return int(json.load(f)["pid"])
    except (OSError, ValueError, KeyError):
        return None


def _digest(*dirs: Path) -> str:
    h = hashlib.sha256()
    for d in dirs:
        for f in sorted(d.rglob("*")):
            if f.is_file():
                h.update(str(f).encode())
                h.update(f.read_bytes())
    return h.hexdigest()


# ---------------------------------------------------------------- failover and switchover
def test_kill_minus_nine_fails_over_and_keeps_every_committed_message(pair: LocalPair) -> None:
    _start_both(pair)
    lines = [f"m{i:04d}" for i in range(60)]
    pair.put(pair.a, "HA.Q", lines)
    victim = pair.kill_active()
    t0 = time.monotonic()
    assert victim["host"] == "hosta"
    new = pair.wait_active(not_host="hosta", timeout=15)
    took = time.monotonic() - t0
    assert new["host"] == "hostb"
    assert took < 5, f"failover took {took:.2f}s"
    assert sorted(pair.get_all(pair.b, "HA.Q")) == lines
    ends = [e for e in _events(pair, "hostb") if e["event"] == "failover_end"]
    assert ends and ends[0]["duration_s"] < 5
    # the old host sees the queue manager running elsewhere; restarted it is the standby
    assert "STATUS(Running elsewhere)" in pair.run(pair.a, "dspmq", "-m", "QMHA").stdout
    assert "standby instance" in pair.start(pair.a)


def test_switchover_with_endmqm_s(pair: LocalPair) -> None:
    _start_both(pair)
    pair.put(pair.a, "HA.Q", ["before switchover"])
    out = pair.run(pair.a, "endmqm", "-i", "-s", "QMHA").stdout
    assert "permitting switchover" in out
    new = pair.wait_active(not_host="hosta", timeout=15)
    assert new["host"] == "hostb"
    assert pair.get_all(pair.b, "HA.Q") == ["before switchover"]


def test_plain_endmqm_ends_the_standby_too(pair: LocalPair) -> None:
    _start_both(pair)
    standby_pid = _run_pid(pair.b)
    assert standby_pid
    pair.run(pair.a, "endmqm", "-i", "QMHA")
    assert _wait_gone(standby_pid), "the standby took over or kept running"
    out = pair.run(pair.b, "dspmq", "-m", "QMHA").stdout
    assert "STATUS(Ended immediately)" in out, out


def test_endmqm_on_the_standby_needs_x(pair: LocalPair) -> None:
    _start_both(pair)
    bad = pair.run(pair.b, "endmqm", "QMHA", check=False)
    assert bad.returncode != 0 and "endmqm -x" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    pid = _run_pid(pair.b)
    assert pid
    pair.run(pair.b, "endmqm", "-x", "QMHA")
    assert _wait_gone(pid)
    assert pair.active() is not None and pair.active()["host"] == "hosta"


def test_third_instance_and_a_second_active_are_refused(pair: LocalPair, tmp_path: Path
                                                        ) -> None:
    _start_both(pair)
    hostc = Host("hostc", str(tmp_path / "hostc"))
    os.makedirs(hostc.root)
    line = pair.run(pair.a, "dspmqinf", "-o", "command", "QMHA").stdout.split()
    pair.run(hostc, *line)
    third = pair.run(hostc, "strmqm", "-x", "QMHA", check=False)
    assert third.returncode == 47  # MQ's strmqm: the queue manager already has a standby
    assert "third instance" in third.stderr and "Traceback" not in third.stderr
    plain = pair.run(hostc, "strmqm", "QMHA", check=False)
    assert plain.returncode == 5 and "running elsewhere" in plain.stderr
    assert _run_pid(hostc) is None
    # the terminal carries the number the error log has for the same event
    assert third.stderr.startswith("AMQ1103: ") and plain.stderr.startswith("AMQ1101: ")
    for proc in (third, plain):
        number, text = proc.stderr.strip().split(": ", 1)
        deadline = time.monotonic() + 10  # the error log is written by a background thread
        while f"{number}: {text}" not in _errlog(pair) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert f"{number}: {text}" in _errlog(pair)


def test_endmqm_acts_only_where_it_is_typed(pair: LocalPair, tmp_path: Path) -> None:
    _start_both(pair)
    hostc = Host("hostc", str(tmp_path / "hostc"))
    os.makedirs(hostc.root)
    pair.run(hostc, *pair.run(pair.a, "dspmqinf", "-o", "command", "QMHA").stdout.split())
    for argv in (("endmqm", "QMHA"), ("endmqm", "-i", "QMHA"), ("endmqm", "-x", "QMHA"),
                 ("endmqm", "-s", "QMHA")):
        refused = pair.run(hostc, *argv, check=False)
        assert refused.returncode == 40, refused.stderr
        line = refused.stderr.strip()
        assert len(line.splitlines()) == 1 and line.startswith("AMQ1106: ")
        assert "hosta (active)" in line and "hostb (standby)" in line and "--remote" in line
    # -x typed on the active instance's host: refused, naming the standby's host
    wrong = pair.run(pair.a, "endmqm", "-x", "QMHA", check=False)
    assert wrong.returncode == 40 and wrong.stderr.startswith("AMQ1109: ")
    assert "hostb (standby)" in wrong.stderr
    status = pair.status()
    assert status["status"] == "Running" and len(status["instances"]) == 2  # nothing ended
    # --remote asks to act from here
    out = pair.run(hostc, "endmqm", "-x", "--remote", "QMHA").stdout
    assert "standby instance ended" in out
    out = pair.run(hostc, "endmqm", "-i", "--remote", "QMHA").stdout
    assert "miqm queue manager 'QMHA' ended." in out
    _wait_no_instance(pair)
    # with no instance anywhere, endmqm and endmqm -x answer alike: AMQ8146, exit 40
    for host in (pair.a, hostc):
        for argv in (("endmqm", "QMHA"), ("endmqm", "-x", "QMHA")):
            gone = pair.run(host, *argv, check=False)
            assert gone.returncode == 40 and gone.stderr.startswith("AMQ8146: "), gone.stderr


def _wait_no_instance(p: LocalPair, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not p.status().get("instances") and _run_pid(p.a) is None:
            return
        time.sleep(0.1)
    raise AssertionError(f"instances still run: {p.status()}")


def test_standby_refuses_data_of_another_platform(pair: LocalPair) -> None:
    _start_both(pair)
    status = Path(pair.data_dir()) / "qmstatus.ini"
    text = status.read_text()
    text = "\n".join("   PlatformSignature=12345" if "PlatformSignature" in ln else
                     "   PlatformString=OtherOS sparc big-endian" if "PlatformString" in ln
                     else ln for ln in text.splitlines()) + "\n"
    status.write_text(text)
    standby_pid = _run_pid(pair.b)
    assert standby_pid
    pair.kill_active()
    assert _wait_gone(standby_pid), "the standby took over data of another platform"
    assert "AMQ7272" in _errlog(pair)
    assert pair.active() is None


def test_no_failover_after_a_crash_during_startup(pair: LocalPair) -> None:
    # hosta hangs in restart (its log extents stall), then is killed while Starting
    pair.a.extra["MIQM_FAULTS"] = json.dumps(
        [{"volume": "log", "op": "open", "path": "S*.LOG", "kind": "stall", "seconds": 60}])
    starting = subprocess.Popen(["strmqm", "-x", "QMHA"], env=pair.a.env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        status = Path(pair.data_dir()) / "qmstatus.ini"
        deadline = time.monotonic() + 30
        while "Starting" not in (status.read_text(errors="replace")
                                 if status.exists() else ""):
            assert time.monotonic() < deadline, "hosta never reported Starting"
            assert starting.poll() is None, starting.communicate()
            time.sleep(0.05)
        assert "standby instance" in pair.start(pair.b)
        standby_pid = _run_pid(pair.b)
        active_pid = _run_pid(pair.a)
        assert standby_pid and active_pid
        os.kill(active_pid, signal.SIGKILL)
        assert _wait_gone(standby_pid), "the standby took over a queue manager that " \
                                        "crashed while starting"
        assert "PermitFailover=No" in _errlog(pair)
    finally:
        starting.kill()
        starting.wait()


# ---------------------------------------------------------------- pauses and stolen locks
def test_sigstop_past_monitor_stall_on_a_local_directory_carries_on(pair: LocalPair) -> None:
    _start_both(pair)
    pair.put(pair.a, "HA.Q", ["before pause"])
    pid = _run_pid(pair.a)
    assert pid
    os.kill(pid, signal.SIGSTOP)
    time.sleep(float(TUNING["MonitorStall"]) + 1.5)
    os.kill(pid, signal.SIGCONT)
    # the lock was never lost: the instance re-verifies and carries on (or would stop
    # cleanly); it must still be the only active one and serve
    pair.put(pair.a, "HA.Q", ["after pause"])
    assert pair.active()["host"] == "hosta"
    assert pair.get_all(pair.a, "HA.Q") == ["before pause", "after pause"]
    verifies = [e for e in _events(pair, "hosta") if e["event"] == "verify"]
    assert verifies and all(e["ok"] for e in verifies)


def test_stolen_lock_stops_with_amq7279_and_writes_nothing(pair: LocalPair) -> None:
    _start_both(pair)
    pair.put(pair.a, "HA.Q", ["committed"])
    pid = _run_pid(pair.a)
    standby_pid = _run_pid(pair.b)
    assert pid and standby_pid
    pair.run(pair.b, "endmqm", "-x", "QMHA")  # no standby: only the thief touches the data
    assert _wait_gone(standby_pid)
    os.kill(pid, signal.SIGSTOP)
    # while it is paused another instance "takes over": the master record now names it
    from lockfs.lockfile import HolderRecord

    master = Path(pair.data_dir()) / "master"
    old = HolderRecord.decode(master.read_bytes())
    assert old is not None
    thief = HolderRecord("thief", 42, time.time(), 1, old.generation + 1)
    with open(master, "r+b") as f:
        f.write(thief.encode())
    data_dir = Path(pair.data_dir())
    log_dir = Path(pair.shared) / "log" / "QMHA"
    before = _digest(log_dir, data_dir / "queues")
    os.kill(pid, signal.SIGCONT)
    assert _wait_gone(pid), "the paused instance kept running with a stolen lock"
    assert "AMQ7279" in _errlog(pair)
    assert _digest(log_dir, data_dir / "queues") == before


# ---------------------------------------------------------------- injected faults
def _faulted_start(pair: LocalPair, faults: list[dict]) -> tuple[int, Path]:
    """Start both with ``faults`` on host A, held back until the returned trigger file
    exists: the test arms them (touches it) from an event it has seen, not a time."""
    trigger = Path(pair.base) / "arm-faults"
    pair.a.extra["MIQM_FAULTS"] = json.dumps([dict(f, armed=str(trigger)) for f in faults])
    _start_both(pair)  # returns once A reported Running and B is the standby
    del pair.a.extra["MIQM_FAULTS"]  # only A's controller has them: not later commands
    pid = _run_pid(pair.a)
    assert pid
    return pid, trigger


def test_verify_stall_stops_the_instance(pair: LocalPair) -> None:
    pid, arm = _faulted_start(pair, [{"volume": "data", "op": "pread", "path": "master",
                                      "kind": "stall", "seconds": 120}])
    pair.put(pair.a, "HA.Q", ["before stall"])
    arm.touch()  # the put was acknowledged: now the next verify hangs
    assert _wait_gone(pid, timeout=20), "a stalled verify did not stop the instance"
    assert "AMQ7280" in _errlog(pair)
    pair.wait_active(not_host="hosta", timeout=15)
    assert pair.get_all(pair.b, "HA.Q") == ["before stall"]


def test_lost_lock_stops_the_instance(pair: LocalPair) -> None:
    pid, arm = _faulted_start(pair, [{"volume": "data", "op": "lock_lost", "path": "master",
                                      "kind": "lost"}])
    pair.put(pair.a, "HA.Q", ["before loss"])
    arm.touch()  # the put was acknowledged: now the lock is lost
    assert _wait_gone(pid, timeout=20), "a lost lock did not stop the instance"
    assert "AMQ7279" in _errlog(pair)
    pair.wait_active(not_host="hosta", timeout=15)
    assert pair.get_all(pair.b, "HA.Q") == ["before loss"]


def test_eio_on_the_log_stops_without_corrupting_anything(pair: LocalPair) -> None:
    pid, arm = _faulted_start(pair, [{"volume": "log", "op": "pwrite", "path": "S*.LOG",
                                      "kind": "eio"}])
    lines = [f"ok{i}" for i in range(20)]
    pair.put(pair.a, "HA.Q", lines)
    arm.touch()  # the 20 puts were acknowledged: the next log write fails
    failed = pair.run(pair.a, "amqsput", "QMHA", "HA.Q", stdin="doomed\n", check=False)
    assert failed.returncode != 0 and "Traceback" not in failed.stderr
    assert _wait_gone(pid, timeout=20), "a failed log write did not stop the instance"
    assert "AMQ6708" in _errlog(pair)
    pair.wait_active(not_host="hosta", timeout=15)  # its restart reads the log cleanly
    got = pair.get_all(pair.b, "HA.Q")
    assert got[:20] == lines and got[20:] in ([], ["doomed"])


def test_dspmq_answers_within_a_second_when_the_filesystem_hangs(pair: LocalPair) -> None:
    _start_both(pair)
    env = pair.b.env()
    env["MIQM_FAULTS"] = json.dumps([{"volume": "data", "op": "open", "path": "master",
                                      "kind": "stall", "seconds": 30}])
    t0 = time.monotonic()
    proc = subprocess.run(["dspmq", "-x", "-m", "QMHA"], env=env, capture_output=True,
                          text=True, timeout=20)
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    assert "STATUS(Status not available)" in proc.stdout
    assert "INSTANCE(hostb) MODE(Standby)" in proc.stdout  # what this host knows itself
    assert took < 3.0, f"dspmq took {took:.2f}s"  # ~1 s of probing plus interpreter start


def test_clients_reach_the_active_from_either_host_and_a_standby_only_says_2543(
        pair: LocalPair) -> None:
    _start_both(pair)
    pair.put(pair.b, "HA.Q", ["put from host b"])  # bindings mode on the standby's host
    assert pair.get_all(pair.a, "HA.Q") == ["put from host b"]
    with open(os.path.join(pair.b.root, "run", "QMHA.json")) as f:
        host, port = json.load(f)["address"]
    env = pair.b.env()
    env["MIQM_CONNECTION"] = f"{host}({port})"  # only the standby's listener
    proc = subprocess.run(["amqsput", "QMHA", "HA.Q"], env=env, input="x\n",
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0 and "2543" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


def test_short_fault_campaign_audits_clean() -> None:
    """``miqm bench campaign`` in short: kill -9 and switchover at random under two
    committing producers and two consumers (one under syncpoint, one outside it), then
    every message audited (the long campaign is a benchmark)."""
    proc = subprocess.run(["miqm", "bench", "campaign", "--cycles", "3", "--producers", "2",
                           "--consumers", "2", "--json"], capture_output=True, text=True,
                          timeout=600, stdin=subprocess.DEVNULL)
    assert "Traceback" not in proc.stdout + proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 0, (result, proc.stderr)
    assert result["units"]["committed"] > 0 and sum(result["faults"].values()) == 3
    for damage in ("lost", "duplicated", "resurrected", "torn_units", "torn_gets",
                   "phantoms", "two_owners", "stale_writes"):
        assert result[damage] == 0, result
    gets = result["gets"]
    assert gets["delivered"] > 0, result
    # each committed message drained at the end or consumed during the run
    assert result["messages_committed"] > result["units"]["committed"], result  # 1s and 3s
    assert result["messages_found"] + gets["delivered"] + gets["commit_unknown"] >= \
        result["messages_committed"] - gets["lost_in_flight"], result
