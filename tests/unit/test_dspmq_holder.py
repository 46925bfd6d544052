"""dspmq on the host of a dead instance whose master lock the server still holds."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from miqm.cli.dspmq import controller_alive, describe, format_text


def _probed(host: str, pid: int, lease: float | None = 10.0) -> dict:
    rec = {"held": True, "host": host, "lock_id": 7, "pid": pid, "generation": 3}
    free = {"held": False, "host": None, "lock_id": None, "pid": None, "generation": None}
    return {"locks": {"master": rec, "active": rec, "standby": free}, "lease": lease,
            "qmstatus": {"status": "Running", "permit_standby": True}}


def test_a_dead_holder_on_this_host_is_said_to_have_ended() -> None:
    info = describe("QM1", _probed("hosta", 4242), None, "hosta", lambda pid: False)
    assert info["status"] == "Running elsewhere"  # what MQ shows while the lock is held
    assert info["holder_ended"] == {"host": "hosta", "pid": 4242, "lease_seconds": 10.0}
    assert info["instances"] == [{"host": "hosta", "mode": "Active", "pid": 4242,
                                  "ended": True}]
    lines = format_text(info, instances=True, fields=["status"], locks=False)
    assert lines[1] == "    INSTANCE(hosta) MODE(Active)"
    assert "pid 4242" in lines[2] and "lease (10s) runs out" in lines[2]
    assert len(format_text(info, instances=False, fields=["status"], locks=False)) == 2


def test_a_live_holder_or_one_on_another_host_is_not() -> None:
    for here, alive in (("hosta", lambda pid: True), ("hostb", lambda pid: False),
                        (None, None)):
        info = describe("QM1", _probed("hosta", 4242), None, here, alive)
        assert "holder_ended" not in info, (here, info)
        assert len(format_text(info, instances=True, fields=["status"], locks=False)) == 2


def test_controller_alive_checks_the_process_is_a_miqm_controller() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)",
                             "miqm.ha.controller"])
    try:
        deadline = time.monotonic() + 10  # until the child has exec'd
        while not controller_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert controller_alive(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert not controller_alive(proc.pid)
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        assert not controller_alive(sleeper.pid)  # a reused pid of another program
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_run_record_naming_this_process_or_another_program_is_stale(
        tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """After a container restart the record's pid may be the new pid 1 (this process) or
    another program: strmqm must not refuse with AMQ1104 then."""
    from miqm.ha import runfile

    monkeypatch.setenv("MIQM_DATA_ROOT", str(tmp_path))
    runfile.write("QM1", {"pid": os.getpid(), "mode": "active"})
    assert runfile.read("QM1") is None
    assert runfile.read("QM1", check_alive=False)["pid"] == os.getpid()
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        runfile.write("QM1", {"pid": sleeper.pid, "mode": "active"})
        assert runfile.read("QM1") is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_held_lock_with_a_damaged_record_is_an_instance_of_unknown_host() -> None:
    """Lock files written over while held: dspmq -x dropped the running standby and -f
    printed 'standby(None,None)'."""
    probed = _probed("hosta", 4242)
    probed["locks"]["standby"] = {"held": True, "host": None, "lock_id": None, "pid": None,
                                  "generation": None}
    probed["locks"]["active"] = dict(probed["locks"]["standby"])
    info = describe("QM1", probed, None, "hostb", lambda pid: True)
    assert [i["mode"] for i in info["instances"]] == ["Active", "Standby"]
    lines = format_text(info, instances=True, fields=["status"], locks=True)
    assert "    INSTANCE(unknown: its lock file holds no readable holder record) MODE(Standby)" \
        in lines
    assert "    master(hosta,7)" in lines and not any("None" in line for line in lines)
    assert "    standby(unknown: its lock file holds no readable holder record)" in lines


def test_a_stopped_instance_on_this_host_is_said_to_be_stopped() -> None:
    """SIGSTOP of the active: it keeps master and its pid, and dspmq on its host said
    STATUS(Running) with nothing else while it served nothing. An instance of another
    host is not looked at (its pid means nothing here)."""
    probed = _probed("hosta", 4242)
    probed["locks"]["standby"] = {"held": True, "host": "hostb", "lock_id": 8, "pid": 5151,
                                  "generation": 0}
    local = {"pid": 4242, "host": "hosta", "mode": "active", "status": "Running"}
    info = describe("QM1", probed, local, "hosta", lambda pid: True, lambda pid: True)
    assert info["instances"] == [
        {"host": "hosta", "mode": "Active", "pid": 4242, "stopped": True},
        {"host": "hostb", "mode": "Standby", "pid": 5151}]
    lines = format_text(info, instances=True, fields=["status"], locks=False)
    assert lines[0].endswith("STATUS(Running)")  # the status itself is MQ's
    assert len(lines) == 4 and "(hosta, pid 4242) is stopped (SIGSTOP)" in lines[3]
    assert "kill -CONT 4242" in lines[3]
    running = describe("QM1", probed, local, "hosta", lambda pid: True, lambda pid: False)
    assert all("stopped" not in i for i in running["instances"])
    assert len(format_text(running, instances=True, fields=["status"], locks=False)) == 3


def test_process_stopped_reads_the_state_of_a_real_process() -> None:
    import signal

    from miqm.cli.dspmq import process_stopped
    from tests.waiting import wait_until

    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        assert not process_stopped(sleeper.pid)
        os.kill(sleeper.pid, signal.SIGSTOP)
        wait_until(lambda: process_stopped(sleeper.pid), "the sleeper stopped", timeout=10)
        os.kill(sleeper.pid, signal.SIGCONT)
        wait_until(lambda: not process_stopped(sleeper.pid), "the sleeper resumed",
                   timeout=10)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not process_stopped(sleeper.pid)  # gone
