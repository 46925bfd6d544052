"""What an MQ administrator runs, in the order one runs it, on two instances of one queue
manager on this machine (real commands, real processes): the findings of an
administrator's walk through the lifecycle, each pinned here.

Every test leaves no process behind (the pair's close ends what is left).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from miqm.localpair import Host, LocalPair

pytestmark = pytest.mark.integration

TUNING = {"StandbyPollInterval": "0.2", "VerifyInterval": "0.5", "MonitorStall": "2",
          "LivenessInterval": "5", "FilesystemLease": "90"}
QM = "QMADM"


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[LocalPair]:
    p = LocalPair(qmgr=QM, base=str(tmp_path / "pair"), tuning=dict(TUNING))
    p.create()
    try:
        yield p
    finally:
        p.close()


def _modes(p: LocalPair) -> list[tuple[str, str]]:
    return sorted((str(i["host"]), str(i["mode"])) for i in p.status()["instances"])


def test_a_damaged_run_record_does_not_let_strmqm_start_a_standby_beside_the_active(
        pair: LocalPair) -> None:
    """The run record of the active's host damaged (or removed): strmqm -x there started
    a second instance on the same host, as the standby of its own active, and the other
    host's standby was then refused as a third instance (AMQ1103)."""
    assert "started using" in pair.start(pair.a)
    run_record = Path(pair.a.root, "run", f"{QM}.json")
    run_record.write_text("garbage{")
    again = pair.run(pair.a, "strmqm", "-x", QM, check=False)
    assert again.returncode == 5, again.stdout + again.stderr
    line = again.stderr.strip()
    assert len(line.splitlines()) == 1 and line.startswith("AMQ1104: "), line
    run_record.unlink()
    again = pair.run(pair.a, "strmqm", "-x", QM, check=False)
    assert again.returncode == 5 and again.stderr.startswith("AMQ1104: "), again.stderr
    assert "standby instance" in pair.start(pair.b)  # the other host's standby is free
    assert _modes(pair) == [("hosta", "Active"), ("hostb", "Standby")]


def test_the_controller_itself_refuses_to_be_the_standby_of_its_own_hosts_active(
        pair: LocalPair) -> None:
    """strmqm's check of the run record and lock files can be raced (two strmqm at once)
    or skipped (a unit that execs the controller): the execution controller refuses too,
    exit 5 as for an instance already running here."""
    assert "started using" in pair.start(pair.a)
    Path(pair.a.root, "run", f"{QM}.json").unlink()
    proc = subprocess.run([sys.executable, "-m", "miqm.ha.controller", QM, "-x",
                           "--foreground"], env=pair.a.env(), capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 5, proc.stdout + proc.stderr
    assert "AMQ1104" in proc.stderr + proc.stdout
    assert "standby instance" in pair.start(pair.b)
    assert _modes(pair) == [("hosta", "Active"), ("hostb", "Standby")]
    assert os.path.exists(pair.data_dir())


def test_endmqm_s_without_a_standby_is_refused_and_ends_nothing(pair: LocalPair) -> None:
    """It ended the queue manager everywhere, saying 'ended, permitting switchover to a
    standby instance' with no standby to switch to."""
    assert "started using" in pair.start(pair.a)
    for argv in (("endmqm", "-s", QM), ("endmqm", "-w", "-s", QM), ("endmqm", "-i", "-s", QM)):
        refused = pair.run(pair.a, *argv, check=False)
        line = refused.stderr.strip()
        assert refused.returncode == 40 and len(line.splitlines()) == 1, refused.stderr
        assert "no standby instance" in line and "strmqm -x" in line and not refused.stdout
        assert pair.status()["status"] == "Running"
    assert "standby instance" in pair.start(pair.b)
    out = pair.run(pair.a, "endmqm", "-w", "-s", QM).stdout
    assert "permitting switchover" in out
    assert pair.wait_active(not_host="hosta")["host"] == "hostb"


def test_a_damaged_qmstatus_ini_says_to_rename_it_and_the_start_then_works(
        pair: LocalPair) -> None:
    """It said 'Correct or restore the file': nobody backs up a status file, and its
    content is rewritten at every start."""
    status = Path(pair.data_dir(), "qmstatus.ini")
    status.write_text("QueueManagerStatus:\n   Current\n")
    refused = pair.run(pair.a, "strmqm", "-x", QM, check=False)
    line = refused.stderr.strip()
    assert refused.returncode == 71 and len(line.splitlines()) == 1, refused.stderr
    assert line.startswith("AMQ7880: ") and "qmstatus.ini is damaged (line 2)" in line
    assert "rename it" in line
    status.rename(status.with_name("qmstatus.ini.damaged"))
    assert "started using" in pair.start(pair.a)


def _errlog(p: LocalPair) -> str:
    return Path(p.data_dir(), "errors", "AMQERR01.LOG").read_text(errors="replace")


def test_the_error_log_says_from_whom_and_why_the_standby_took_over(pair: LocalPair) -> None:
    """AMQ5975 said only 'is now the active instance': after a kill -9 nothing in
    AMQERR01.LOG said that the active had failed, nor where."""
    assert "started using" in pair.start(pair.a)
    assert "standby instance" in pair.start(pair.b)
    killed = pair.kill_active()
    assert pair.wait_active(not_host="hosta")["host"] == "hostb"
    entry = next(line for line in _errlog(pair).splitlines() if line.startswith("AMQ5975: "))
    assert f"from the active instance on hosta (pid {killed['pid']})" in entry
    assert "ended unexpectedly (status Running)" in entry and "failover" in entry
    assert "standby instance" in pair.start(pair.a)
    pair.run(pair.b, "endmqm", "-w", "-s", QM)
    assert pair.wait_active(not_host="hostb")["host"] == "hosta"
    last = [line for line in _errlog(pair).splitlines() if line.startswith("AMQ5975: ")][-1]
    assert "from the active instance on hostb" in last and "(endmqm -s)" in last


def test_lock_files_removed_under_a_running_pair_never_give_two_actives(
        pair: LocalPair, tmp_path: Path) -> None:
    """A 'stale lock' clean-up (rm master active standby) while the pair runs: the active
    went on through its open descriptor, unaware, and an instance started on a third host
    locked a new master and ran as a second active on the same log. Now the active stops
    (AMQ7279) at its next verify and the standby takes over through the new file."""
    assert "started using" in pair.start(pair.a)
    assert "standby instance" in pair.start(pair.b)
    first = pair.active()
    assert first is not None and first["host"] == "hosta"
    for name in ("master", "active", "standby"):
        os.unlink(os.path.join(pair.data_dir(), name))
    new = pair.wait_active(not_host="hosta", timeout=60)
    assert new["host"] == "hostb"
    deadline = time.monotonic() + 30
    while os.path.exists(f"/proc/{first['pid']}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{first['pid']}"), "the old active still runs"
    stops = [line for line in _errlog(pair).splitlines() if line.startswith("AMQ7279: ")]
    assert stops and "removed or replaced" in stops[-1]
    # a third host now gets the standby role, never a second active
    hostc = Host("hostc", str(tmp_path / "hostc"))
    os.makedirs(hostc.root)
    pair.run(hostc, *pair.run(pair.a, "dspmqinf", "-o", "command", QM).stdout.split())
    try:
        assert "standby instance" in pair.run(hostc, "strmqm", "-x", QM).stdout
        assert [i["mode"] for i in pair.status()["instances"]].count("Active") == 1
    finally:
        pair.run(hostc, "endmqm", "-i", "-x", QM, check=False)


def _rmvmqinf(p: LocalPair, host: Host) -> subprocess.CompletedProcess[str]:
    """The rmvmqinf console script."""
    return p.run(host, "rmvmqinf", QM, check=False)


def test_rmvmqinf_is_refused_while_an_instance_runs_here_then_removes_the_entry(
        pair: LocalPair) -> None:
    """MQ's rmvmqinf, which an administrator types to take a host out of the pair: there
    was none (dltmqm on the second host was the only way to drop its entry)."""
    assert "started using" in pair.start(pair.a)
    assert "standby instance" in pair.start(pair.b)
    for host, flag in ((pair.a, ""), (pair.b, " -x")):
        refused = _rmvmqinf(pair, host)
        line = refused.stderr.strip()
        assert refused.returncode == 5 and len(line.splitlines()) == 1, refused.stderr
        assert line.startswith("AMQ1104: ") and f"endmqm{flag} {QM}" in line
    pair.run(pair.b, "endmqm", "-x", QM)
    done = _rmvmqinf(pair, pair.b)
    assert done.returncode == 0 and "configuration information removed" in done.stdout
    gone = pair.run(pair.b, "dspmq", "-m", QM, check=False)
    assert gone.returncode == 72 and "AMQ7048" in gone.stderr
    assert os.path.exists(os.path.join(pair.data_dir(), "qm.ini"))  # the data stays
    assert pair.status()["status"] == "Running"


def test_dspmq_takes_mqs_s_a_and_n(pair: LocalPair) -> None:
    """dspmq -s (MQ's -o status), -a (running here) and -n were refused as unknown."""
    assert "started using" in pair.start(pair.a)
    line = pair.run(pair.a, "dspmq", "-s", "-n").stdout.strip()
    assert line.startswith(f"QMNAME({QM})") and line.endswith("STATUS(Running)")
    assert f"QMNAME({QM})" in pair.run(pair.a, "dspmq", "-a").stdout
    assert pair.run(pair.b, "dspmq", "-a").stdout.strip() == ""
    both = pair.run(pair.b, "dspmq", "-s", "-o", "standby").stdout
    assert "STATUS(Running elsewhere) STANDBY(Permitted)" in both


def test_dltmqm_of_a_running_pair_names_where_its_instances_run(pair: LocalPair) -> None:
    """It said 'an instance holds its master, active, standby lock', naming no host."""
    assert "started using" in pair.start(pair.a)
    assert "standby instance" in pair.start(pair.b)
    for host in (pair.a, pair.b):
        refused = pair.run(host, "dltmqm", QM, check=False)
        line = refused.stderr.strip()
        assert refused.returncode == 5 and len(line.splitlines()) == 1, refused.stderr
        assert line.startswith("AMQ8041: ") and "hosta (active), hostb (standby)" in line
    assert os.path.exists(os.path.join(pair.data_dir(), "qm.ini"))


def test_the_error_log_says_how_the_queue_manager_was_ended(pair: LocalPair) -> None:
    """AMQ8004 said only 'ended': whether by endmqm -i, -p, a controlled end or with -s,
    the error log did not say (dspmq's status says it only until the next start)."""
    for flags, said in ((("-i",), "an immediate end (endmqm -i, or SIGTERM); status Ended "
                         "immediately."), (("-w",), "a controlled end (endmqm -w); status "
                                           "Ended normally.")):
        assert "started using" in pair.start(pair.a)
        pair.run(pair.a, "endmqm", *flags, QM)
        last = [line for line in _errlog(pair).splitlines()
                if line.startswith("AMQ8004: ")][-1]
        assert last.endswith(f"ended. It was {said}"), last


def test_a_standby_outlives_the_shared_filesystem_going_read_only_for_a_while(
        tmp_path: Path) -> None:
    """A read-only remount (a storage failover, an fs error) ended the standby at its next
    poll (AMQ6062, exit 71), leaving nobody to take over when the filesystem came back.
    Now it keeps polling (AMQ1300, in this host's own error log since the shared one
    cannot take it), says AMQ1301 when it is writable again, and takes over as usual."""
    if os.geteuid() != 0:
        pytest.skip("needs root: a read-only bind mount of the shared directory")
    # a slow poll, so that the standby's first attempt on master (which opens the file;
    # later ones reuse it) comes once the filesystem is read-only
    pair = LocalPair(qmgr=QM, base=str(tmp_path / "pair"),
                     tuning=dict(TUNING, StandbyPollInterval="4"))
    pair.create()
    try:
        _read_only_for_a_while(pair)
    finally:
        pair.close()


def _read_only_for_a_while(pair: LocalPair) -> None:
    assert "started using" in pair.start(pair.a)
    assert "standby instance" in pair.start(pair.b)
    # its pid from its run record: dspmq would open and close master, and the close wakes
    # the standby into its first attempt before the filesystem is read-only
    standby = json.loads(Path(pair.b.root, "run", f"{QM}.json").read_text())
    subprocess.run(["mount", "--bind", pair.shared, pair.shared], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", pair.shared], check=True)
        local = Path(pair.b.root, "errors", "AMQERR01.LOG")
        deadline = time.monotonic() + 30
        while not (local.exists() and "AMQ1300" in local.read_text()) \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "AMQ1300" in local.read_text() and "Read-only" in local.read_text()
        time.sleep(1)  # several polls on the read-only filesystem
        assert os.path.exists(f"/proc/{standby['pid']}"), "the standby ended"
    finally:
        if subprocess.run(["umount", pair.shared]).returncode != 0:
            subprocess.run(["umount", "-l", pair.shared])
    deadline = time.monotonic() + 30
    while "AMQ1301" not in _errlog(pair) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "AMQ1301" in _errlog(pair)
    pair.kill_active()
    assert pair.wait_active(not_host="hosta")["host"] == "hostb"


def test_strmqm_without_x_on_a_third_host_does_not_advise_a_third_instance(
        pair: LocalPair, tmp_path: Path) -> None:
    """With a standby running, AMQ1101's 'Use strmqm -x to start a standby instance here'
    led to AMQ1103: the line now says the standby runs already, and where."""
    assert "started using" in pair.start(pair.a)
    assert "standby instance" in pair.start(pair.b)
    hostc = Host("hostc", str(tmp_path / "hostc"))
    os.makedirs(hostc.root)
    pair.run(hostc, *pair.run(pair.a, "dspmqinf", "-o", "command", QM).stdout.split())
    refused = pair.run(hostc, "strmqm", QM, check=False)
    line = refused.stderr.strip()
    assert refused.returncode == 5 and len(line.splitlines()) == 1, refused.stderr
    assert line.startswith("AMQ1101: ") and "already runs on hostb" in line
