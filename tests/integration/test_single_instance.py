"""A single-instance queue manager end to end, through the real console scripts as
separate processes: crtmqm, strmqm, runmqsc, amqsput, amqsbcg, amqsget, amqldmpa, endmqm,
dltmqm.

Persistent messages survive a restart; non-persistent ones do not. Each test has its own
MIQM_DATA_ROOT and MIQM_HOSTNAME; a finalizer ends the queue manager immediately and
kills any controller process still running for it (only processes whose command line
names this test's queue manager)."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        importlib.util.find_spec("miqm.cli.strmqm") is None
        or importlib.util.find_spec("miqm.store.qmstore") is None,
        reason="needs strmqm (execution controller) and the store",
    ),
]


@dataclass
class QM:
    """One queue manager under test and the environment its commands run with."""

    name: str
    root: str
    env: dict[str, str]

    def run(self, *argv: str, stdin: str | None = None, timeout: float = 60.0,
            ok: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(list(argv), env=self.env, input=stdin, capture_output=True,
                              text=True, timeout=timeout,
                              stdin=None if stdin is not None else subprocess.DEVNULL)
        assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
        if ok:
            assert proc.returncode == 0, (f"{' '.join(argv)} exited {proc.returncode}: "
                                          f"{proc.stdout}{proc.stderr}")
        return proc

    def data_dir(self) -> str:
        return os.path.join(self.root, "qmgrs", self.name)

    def wait_ended(self, timeout: float = 60.0) -> None:
        """Poll dspmq until the queue manager reports an Ended status."""
        deadline = time.monotonic() + timeout
        out = ""
        while time.monotonic() < deadline:
            out = self.run("dspmq", "-m", self.name, ok=False, timeout=10).stdout
            if "STATUS(Ended" in out:
                return
            time.sleep(0.1)
        raise AssertionError(f"{self.name} did not end within {timeout}s: {out}")

    def controller_pids(self) -> set[int]:
        pids: set[int] = set()
        try:
            with open(os.path.join(self.data_dir(), "listener"), encoding="utf-8") as f:
                pids.add(int(json.load(f)["pid"]))
        except (OSError, ValueError, KeyError, TypeError):
            pass
        run_dir = os.path.join(self.root, "run")
        for name in os.listdir(run_dir) if os.path.isdir(run_dir) else []:
            try:
                with open(os.path.join(run_dir, name), encoding="utf-8") as f:
                    pids.add(int(json.load(f)["pid"]))
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return pids


def _kill_if_ours(pid: int, qmgr: str) -> None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return
    if qmgr in cmdline:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture()
def qm(tmp_path) -> Iterator[QM]:
    name = f"IT{os.getpid()}"
    root = str(tmp_path / "root")
    env = dict(os.environ)
    env.update(MIQM_DATA_ROOT=root, MIQM_HOSTNAME="ithost")
    env.pop("MIQM_CONNECTION", None)
    q = QM(name, root, env)
    pids: set[int] = set()
    try:
        yield q
    finally:
        pids |= q.controller_pids()
        q.run("endmqm", "-i", name, ok=False, timeout=30)
        for pid in pids | q.controller_pids():
            _kill_if_ours(pid, name)


def _shrink_timings(q: QM) -> None:
    """Short checkpoint/poll timings, set the MQ way: by editing qm.ini."""
    path = os.path.join(q.data_dir(), "qm.ini")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    text = text.replace("StandbyPollInterval=2", "StandbyPollInterval=0.2")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def test_persistent_messages_survive_a_restart_and_non_persistent_do_not(qm: QM) -> None:
    out = qm.run("crtmqm", "-lf", "64", qm.name).stdout
    assert "miqm queue manager created." in out
    _shrink_timings(qm)
    qm.run("strmqm", qm.name, timeout=120)

    mqsc = qm.run("runmqsc", qm.name, stdin="DEFINE QLOCAL(IT.Q) MAXDEPTH(1000)\n").stdout
    assert f"Starting MQSC for queue manager {qm.name}." in mqsc
    assert "AMQ8006I: miqm queue created." in mqsc
    assert "All valid MQSC commands were processed." in mqsc

    persistent = [f"persistent {i:03d}" for i in range(25)]
    transient = [f"non-persistent {i:03d}" for i in range(10)]
    put = qm.run("amqsput", qm.name, "IT.Q", "--syncpoint", "10",
                 stdin="\n".join(persistent) + "\n").stdout
    assert put.splitlines() == ["Sample AMQSPUT0 start", "target queue is IT.Q",
                                "Sample AMQSPUT0 end"]
    qm.run("amqsput", qm.name, "IT.Q", "--non-persistent", stdin="\n".join(transient) + "\n")
    disp = qm.run("runmqsc", qm.name, stdin="DISPLAY QLOCAL(IT.Q) CURDEPTH\n").stdout
    assert "CURDEPTH(35)" in disp

    status = qm.run("runmqsc", qm.name, stdin="DISPLAY QMSTATUS ALL\n").stdout
    assert "AMQ8705I: Display Queue Manager Status Details." in status
    assert f"QMNAME({qm.name})" in status
    dump = qm.run("amqldmpa", "-m", qm.name, "-c", "H").stdout
    assert "logactive:" in dump and "WriteTimeMax" in dump

    refused = qm.run("dltmqm", qm.name, ok=False)
    assert refused.returncode != 0 and len(refused.stderr.strip().splitlines()) == 1

    qm.run("endmqm", "-w", qm.name, timeout=120)
    qm.wait_ended()
    down = qm.run("runmqsc", qm.name, stdin="DIS QL(*)\n", ok=False)
    assert down.returncode == 20 and "AMQ8146" in down.stderr
    nope = qm.run("amqsget", qm.name, "IT.Q", ok=False)
    assert nope.returncode != 0 and "2059" in nope.stderr

    qm.run("strmqm", qm.name, timeout=120)
    browsed = qm.run("amqsbcg", qm.name, "IT.Q").stdout  # browsing takes nothing
    assert browsed.count("MQGET of message number") == 25
    assert "MQGET of message number 25, CompCode:0 Reason:0" in browsed
    assert "No more messages (25 browsed)" in browsed
    assert "00000000:  7065 7273 6973 7465 6E74 2030 3030      'persistent 000  '" in browsed
    assert browsed.index("'persistent 000  '") < browsed.index("'persistent 024  '")
    got = qm.run("amqsget", qm.name, "IT.Q", "--wait", "1").stdout
    assert got.splitlines() == persistent
    missing = qm.run("amqsget", qm.name, "NO.SUCH.Q", ok=False)
    assert missing.returncode != 0 and "2085" in missing.stderr

    qm.run("endmqm", "-w", qm.name, timeout=120)
    qm.wait_ended()
    out = qm.run("dltmqm", qm.name).stdout
    assert out.strip() == f"miqm queue manager '{qm.name}' deleted."
    assert not os.path.exists(qm.data_dir())
    assert not os.path.exists(os.path.join(qm.root, "log", qm.name))
    gone = qm.run("dspmqinf", qm.name, ok=False)
    assert gone.returncode != 0 and "AMQ7048" in gone.stderr


def test_linear_logging_media_image_and_recreate(qm: QM) -> None:
    qm.run("crtmqm", "-ll", "-lf", "64", qm.name)
    qm.run("strmqm", qm.name, timeout=120)
    qm.run("runmqsc", qm.name, stdin="DEFINE QLOCAL(MEDIA.Q)\n")
    qm.run("amqsput", qm.name, "MEDIA.Q", stdin="kept\n")
    rec = qm.run("rcdmqimg", "-m", qm.name, "-t", "queue", "MEDIA.Q").stdout
    assert "MEDIA.Q" in rec and "AMQ7467" in rec
    status = qm.run("runmqsc", qm.name, stdin="DISPLAY QMSTATUS ALL\n").stdout
    assert "RECLOG(" in status and "MEDIALOG(" in status
    out = qm.run("rcrmqobj", "-m", qm.name, "-t", "queue", "MEDIA.Q").stdout
    assert "MEDIA.Q" in out
    assert qm.run("amqsget", qm.name, "MEDIA.Q", "--wait", "0").stdout == "kept\n"
