"""``strmqm -x --foreground``: the instance stays in the foreground (containers, systemd).

Real processes on two "hosts" of this machine (two data roots sharing one data and log
directory): the process started *is* the instance (same pid), it logs to stdout as well as
the error log, SIGTERM ends it as ``endmqm -i`` (a standby just leaves), kill -9 of the
other instance makes it take over, and its exit code says why it ended (0 on request,
70 after it stopped itself on losing ownership).
"""

from __future__ import annotations

import json
import os
import signal
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
BIN = os.path.dirname(sys.executable)


class Fg:
    """One ``strmqm -x --foreground`` process, its stdout/stderr in files."""

    def __init__(self, host: Host, qmgr: str, tmp: Path, extra: dict[str, str] | None = None
                 ) -> None:
        self.out = tmp / f"{host.name}-{time.monotonic_ns()}.out"
        self.err = self.out.with_suffix(".err")
        env = host.env()
        env.update(extra or {})
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.proc = subprocess.Popen(
                [os.path.join(BIN, "strmqm"), "-x", "--foreground", qmgr], env=env,
                stdin=subprocess.DEVNULL, stdout=out, stderr=err)

    def text(self) -> str:
        return self.out.read_text(errors="replace") + self.err.read_text(errors="replace")

    def wait_for(self, needle: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.text():
                return
            if self.proc.poll() is not None and needle not in self.text():
                break
            time.sleep(0.05)
        raise AssertionError(f"{needle!r} not seen (exit {self.proc.poll()}):\n{self.text()}")

    def wait(self, timeout: float = 60.0) -> int:
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LocalPair]:
    p = LocalPair(qmgr="QMFG", base=str(tmp_path / "pair"), tuning=dict(TUNING))
    p.create()
    procs: list[Fg] = []
    p.fg = procs  # type: ignore[attr-defined]
    try:
        yield p
    finally:
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            for f in procs:
                print(f"===== {f.out}\n{f.text()[-4000:]}")
            log = Path(p.data_dir()) / "errors" / "AMQERR01.LOG"
            if log.exists():
                print(f"===== {log}\n{log.read_text(errors='replace')[-6000:]}")
        for f in procs:
            f.kill()
        p.close()


def _start(p: LocalPair, host: Host, tmp: Path, **extra: str) -> Fg:
    fg = Fg(host, p.qmgr, tmp, extra)
    p.fg.append(fg)  # type: ignore[attr-defined]
    return fg


def _instances(p: LocalPair) -> dict[str, dict]:
    return {i["host"]: i for i in p.status().get("instances", [])}


def test_foreground_active_and_standby_end_on_sigterm(pair: LocalPair, tmp_path: Path) -> None:
    a = _start(pair, pair.a, tmp_path)
    a.wait_for("AMQ8003")  # started: on stdout, and in the error log
    # 'starting.' first, before the recovery entries echoed meanwhile (it came after)
    out = a.text().splitlines()
    starting = next(i for i, line in enumerate(out) if line.endswith("starting."))
    assert all(i > starting for i, line in enumerate(out) if line.startswith("AMQ")), out
    assert "AMQ8003" in (Path(pair.data_dir()) / "errors" / "AMQERR01.LOG").read_text()
    b = _start(pair, pair.b, tmp_path)
    b.wait_for("standby instance")
    inst = _instances(pair)
    # the process the supervisor started is the instance itself (exec, same pid)
    assert inst["hosta"]["pid"] == a.proc.pid and inst["hosta"]["mode"].lower() == "active"
    assert inst["hostb"]["pid"] == b.proc.pid and inst["hostb"]["mode"].lower() == "standby"

    # SIGTERM to the standby: it just leaves (exit 0); the active goes on
    b.proc.send_signal(signal.SIGTERM)
    assert b.wait(30) == 0, b.text()
    assert "AMQ1008" in b.text()  # the standby instance ended
    assert a.proc.poll() is None and pair.serving(pair.a)

    # SIGTERM to the active: ended as endmqm -i (no switchover), so a standby ends too
    b = _start(pair, pair.b, tmp_path)
    b.wait_for("standby instance")
    a.proc.send_signal(signal.SIGTERM)
    assert a.wait(60) == 0, a.text()
    assert "ended" in a.text().lower()
    assert b.wait(60) == 0, b.text()
    assert "without permitting switchover" in b.text()
    assert "STATUS(Ended immediately)" in pair.run(pair.a, "dspmq", "-m", pair.qmgr).stdout


def test_foreground_standby_takes_over_after_kill_minus_nine(pair: LocalPair,
                                                             tmp_path: Path) -> None:
    a = _start(pair, pair.a, tmp_path)
    a.wait_for("AMQ8003")
    b = _start(pair, pair.b, tmp_path)
    b.wait_for("standby instance")
    pair.mqsc(pair.a, "DEFINE QLOCAL(FG.Q)\n")
    pair.put(pair.a, "FG.Q", ["one", "two"])
    a.proc.kill()
    assert a.wait(10) == -signal.SIGKILL  # a restart policy restarts on a signal
    b.wait_for("AMQ5975")  # the standby took over: said on its stdout
    assert pair.wait_active(not_host="hosta", timeout=30)["pid"] == b.proc.pid
    assert pair.get_all(pair.b, "FG.Q") == ["one", "two"]
    # started again, the old host comes back as the standby, still in the foreground
    a = _start(pair, pair.a, tmp_path)
    a.wait_for("standby instance")
    assert a.proc.poll() is None
    b.proc.send_signal(signal.SIGINT)  # Ctrl-C on a terminal: the same as SIGTERM
    assert b.wait(60) == 0, b.text()
    assert a.wait(60) == 0, a.text()


def test_foreground_exit_code_after_losing_ownership(pair: LocalPair, tmp_path: Path) -> None:
    """An active that stops itself on losing its master lock (injected: the filesystem
    reports the lock lost) exits 70, which a restart policy restarts; restarted with -x
    it comes back as the standby of the instance that took over."""
    lost = json.dumps([{"volume": "data", "op": "lock_lost", "path": "master",
                        "kind": "lost", "after": 5}])
    a = _start(pair, pair.a, tmp_path, MIQM_FAULTS=lost)
    a.wait_for("AMQ8003")
    b = _start(pair, pair.b, tmp_path)  # the standby, unless A has already stopped
    assert a.wait(60) == 70, a.text()
    assert "AMQ7279" in a.text()  # the reason, on stdout
    assert pair.wait_active(not_host="hosta", timeout=60)["pid"] == b.proc.pid
    a = _start(pair, pair.a, tmp_path)  # what Restart=on-failure does
    a.wait_for("standby instance")
    b.proc.send_signal(signal.SIGTERM)
    assert b.wait(60) == 0, b.text()
    assert a.wait(60) == 0, a.text()


def test_foreground_refusals_exit_with_their_codes(pair: LocalPair, tmp_path: Path) -> None:
    """Codes a restart policy must not retry: not defined here (72), a second instance
    on this host (5)."""
    nowhere = Host("hostc", str(tmp_path / "hostc"))
    c = Fg(nowhere, pair.qmgr, tmp_path)
    assert c.wait(30) == 72 and "AMQ7048" in c.text() and "Traceback" not in c.text()
    a = _start(pair, pair.a, tmp_path)
    a.wait_for("AMQ8003")
    again = _start(pair, pair.a, tmp_path)
    assert again.wait(30) == 5 and "AMQ1104" in again.text()
    a.proc.send_signal(signal.SIGTERM)
    assert a.wait(60) == 0


ENTRYPOINT = str(Path(__file__).resolve().parents[2] / "deploy" / "qm-entrypoint.sh")


def _entry(host: Host, role: str, shared: Path, conf: Path, tmp: Path) -> Fg:
    """``deploy/qm-entrypoint.sh`` (the compose hosts' entry point) as ``host``."""
    fg = Fg.__new__(Fg)
    fg.out = tmp / f"entry-{host.name}-{time.monotonic_ns()}.out"
    fg.err = fg.out.with_suffix(".err")
    env = host.env()
    env.update({"MIQM_QMGR": "QMEP", "MIQM_ROLE": role, "MIQM_SHARED": str(shared),
                "MIQM_CONFIG_DIR": str(conf), "MIQM_DATA_ROOT": host.root,
                "PATH": BIN + os.pathsep + os.environ.get("PATH", ""),
                # the image's user (mqm) is not this machine's: the switch to it is
                # tests/integration/test_deploy_entrypoint.py's, the start logic is this
                "MIQM_USER": "root"})
    with open(fg.out, "w") as out, open(fg.err, "w") as err:
        fg.proc = subprocess.Popen(["sh", ENTRYPOINT], env=env, stdin=subprocess.DEVNULL,
                                   stdout=out, stderr=err)
    return fg


def test_compose_entrypoint_first_start_is_idempotent(tmp_path: Path) -> None:
    """deploy/qm-entrypoint.sh on a shared local directory: qm-a creates the queue
    manager once (-ii/-ic from the config directory), qm-b waits for it and adds it, both
    run in the foreground (the script's pid is the instance); killed and started again,
    qm-a joins as the standby and creates nothing; a host whose own root was lost finds
    the existing queue manager; SIGTERM ends them with 0."""
    shared = tmp_path / "shared"
    shared.mkdir()
    conf = tmp_path / "conf"
    (conf / "ini").mkdir(parents=True)
    (conf / "mqsc").mkdir()
    (conf / "ini" / "10.ini").write_text("TuningParameters:\n   StandbyPollInterval=0.2\n"
                                         "   VerifyInterval=0.5\n   MonitorStall=2\n")
    (conf / "mqsc" / "10.mqsc").write_text("DEFINE QLOCAL(EP.Q) REPLACE\n")
    a, b = Host("hosta", str(tmp_path / "a")), Host("hostb", str(tmp_path / "b"))
    procs: list[Fg] = []
    try:
        procs.append(ea := _entry(a, "create", shared, conf, tmp_path))
        procs.append(eb := _entry(b, "add", shared, conf, tmp_path))  # waits for qm-a
        ea.wait_for("AMQ8003", timeout=120)
        assert "Setup completed." in ea.text() and "1 MQSC commands" in ea.text()
        eb.wait_for("standby instance", timeout=120)
        assert "AMQ7880" not in eb.text()  # it did not start a half-created queue manager
        assert "StandbyPollInterval=0.2" in (shared / "data" / "QMEP" / "qm.ini").read_text()

        ea.proc.kill()
        assert ea.wait(30) == -signal.SIGKILL
        eb.wait_for("AMQ5975", timeout=60)
        procs.append(again := _entry(a, "create", shared, conf, tmp_path))
        again.wait_for("standby instance", timeout=120)
        assert "Setup completed." not in again.text()  # registered already: nothing made
        again.proc.send_signal(signal.SIGTERM)
        assert again.wait(60) == 0, again.text()

        fresh = Host("hosta", str(tmp_path / "a-new"))  # a new, empty root volume
        procs.append(third := _entry(fresh, "create", shared, conf, tmp_path))
        third.wait_for("standby instance", timeout=120)
        assert "already exists" in third.text()
        for e in (third, eb):
            e.proc.send_signal(signal.SIGTERM)
        assert third.wait(60) == 0, third.text()
        assert eb.wait(60) == 0, eb.text()
    finally:
        for e in procs:
            e.kill()
