"""Configuration without a mount, and dspmq after a crash, on the real NFSv4 lab.

* ``crtmqm`` on an ``nfs4://`` data path measures the server's lease and chooses
  VerifyInterval/MonitorStall that fit it (one line), so ``strmqm -x`` starts on both
  hosts without anyone editing qm.ini on the server;
* ``setmqini`` edits qm.ini through the built-in NFSv4 client;
* after ``kill -9`` of the active, ``dspmq`` on its host says that the instance holding
  the master lock has ended and that the server releases the lock when its lease runs out,
  until the standby has taken over.

Root only (the ``nfs_lab`` fixture skips otherwise).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import lab

pytestmark = [pytest.mark.integration, pytest.mark.root]

ADDR = {"a": "10.77.0.2", "b": "10.77.0.3"}
QM = "QMCFG"


class NsHost:
    def __init__(self, ns: str, root: Path) -> None:
        self.ns, self.root = ns, root

    def env(self) -> dict[str, str]:
        return {"MIQM_DATA_ROOT": str(self.root), "MIQM_HOSTNAME": f"host{self.ns}",
                "MIQM_LISTENER_HOST": ADDR[self.ns], "PYTHONUNBUFFERED": "1"}


def _run(labx: lab.NfsLab, host: NsHost, *argv: str, ok: bool = True,
         timeout: float = 120) -> tuple[int, str, str]:
    exe = os.path.join(os.path.dirname(sys.executable), argv[0])
    proc = labx.run_in(host.ns, [exe, *argv[1:]], env=host.env())
    out, err = proc.communicate(None, timeout=timeout)
    assert "Traceback" not in out + err, out + err
    if ok:
        assert proc.returncode == 0, f"{' '.join(argv)} on {host.ns}: {out}{err}"
    return proc.returncode, out, err


def _pid(host: NsHost) -> int | None:
    try:
        return int(json.loads((host.root / "run" / f"{QM}.json").read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return None


@pytest.fixture
def hosts(nfs_lab: lab.NfsLab, tmp_path: Path, request: pytest.FixtureRequest
          ) -> Iterator[tuple[NsHost, NsHost]]:
    a, b = NsHost("a", tmp_path / "hosta"), NsHost("b", tmp_path / "hostb")
    for h in (a, b):
        h.root.mkdir()
    try:
        yield a, b
    finally:
        rep = getattr(request.node, "rep_call", None)
        errors = nfs_lab.export_dir / "cfg" / "data" / QM / "errors"
        if rep is not None and rep.failed and errors.is_dir():
            for f in sorted(errors.glob("AMQERR0*.LOG")):
                print(f"===== {f}\n{f.read_text(errors='replace')[-6000:]}")
        for h in (a, b):
            pid = _pid(h)
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def test_crtmqm_fits_the_lease_setmqini_over_nfs4_and_dspmq_after_a_crash(
        nfs_lab: lab.NfsLab, hosts: tuple[NsHost, NsHost]) -> None:
    a, b = hosts
    for sub in ("cfg/data", "cfg/log"):
        (nfs_lab.export_dir / sub).mkdir(parents=True, exist_ok=True)
    # the server's lease, measured: the URL carries none
    data = nfs_lab.url("cfg/data").split("?")[0]
    log = nfs_lab.url("cfg/log").split("?")[0]
    _, out, _ = _run(nfs_lab, a, "crtmqm", "-md", data, "-ld", log, "-lf", "256", QM)
    lease_line = next(ln for ln in out.splitlines() if "lease" in ln)
    print(lease_line)
    assert f"lease is {nfs_lab.lease}s" in lease_line
    ini = nfs_lab.export_dir / "cfg" / "data" / QM / "qm.ini"
    text = ini.read_text()
    verify = float(text.split("VerifyInterval=")[1].split()[0])
    stall = float(text.split("MonitorStall=")[1].split()[0])
    assert verify + stall <= nfs_lab.lease / 2
    assert f"FilesystemLease={nfs_lab.lease}" in text

    # setmqini through the built-in client (no mount): what the file on the server shows
    _run(nfs_lab, a, "setmqini", "-m", QM, "-s", "TuningParameters", "-k",
         "StandbyPollInterval", "-v", "0.2")
    assert "StandbyPollInterval=0.2" in ini.read_text()
    _, err = _run(nfs_lab, a, "setmqini", "-m", QM, "-s", "TuningParameters", "-k",
                  "MonitorStall", "-v", str(nfs_lab.lease * 10), ok=False)[0:3:2]
    assert err.strip().count("\n") == 0 and "FilesystemLease" in err

    _, line, _ = _run(nfs_lab, a, "dspmqinf", "-o", "command", QM)
    _run(nfs_lab, b, *line.split())
    _, out, _ = _run(nfs_lab, a, "strmqm", "-x", QM)
    assert "started" in out
    _, out, _ = _run(nfs_lab, b, "strmqm", "-x", QM)
    assert "standby" in out

    victim = _pid(a)
    assert victim
    os.kill(victim, signal.SIGKILL)
    killed = time.monotonic()
    time.sleep(0.3)
    _, out, _ = _run(nfs_lab, a, "dspmq", "-m", QM, "-x")
    print(out)
    took_over = None
    if time.monotonic() - killed < nfs_lab.lease * 0.8:  # the lock is surely still held
        assert "STATUS(Running elsewhere)" in out
        assert f"pid {victim}" in out and "has ended" in out and "lease" in out
        _, js, _ = _run(nfs_lab, a, "dspmq", "-m", QM, "--json")
        info = json.loads(js.strip().splitlines()[-1])
        assert info["holder_ended"]["pid"] == victim
        assert info["holder_ended"]["lease_seconds"] == nfs_lab.lease
    # from the other host it is just running elsewhere (the standby is there)
    deadline = time.monotonic() + nfs_lab.lease + 30
    while time.monotonic() < deadline:
        _, out, _ = _run(nfs_lab, a, "dspmq", "-m", QM, "-x", "--json")
        info = json.loads(out.strip().splitlines()[-1])
        modes = {i["host"]: i["mode"] for i in info["instances"]}
        if modes.get("hostb") == "Active":
            took_over = time.monotonic() - killed
            break
        time.sleep(0.2)
    print(f"lease {nfs_lab.lease}s: standby active {took_over}s after kill -9")
    assert took_over is not None, out
    assert "holder_ended" not in info
    _, out, _ = _run(nfs_lab, a, "dspmq", "-m", QM, "-x")
    assert "has ended" not in out
    _run(nfs_lab, b, "endmqm", "-i", QM)


class Entry:
    """``deploy/qm-entrypoint.sh`` (the compose hosts' entry point) run in a namespace."""

    SCRIPT = str(Path(__file__).resolve().parents[2] / "deploy" / "qm-entrypoint.sh")

    def __init__(self, labx: lab.NfsLab, host: NsHost, role: str, conf: Path) -> None:
        env = host.env()
        env.update({"MIQM_USER": "root",  # the image's mqm is not this machine's user
                    "MIQM_QMGR": "QMEP", "MIQM_ROLE": role, "MIQM_CONFIG_DIR": str(conf),
                    "MIQM_SHARED": f"{labx.url_base}/ep",
                    "PATH": os.path.dirname(sys.executable) + os.pathsep
                    + os.environ.get("PATH", "")})
        self.proc = labx.run_in(host.ns, ["sh", self.SCRIPT], env=env)
        self.lines: list[str] = []
        for stream in (self.proc.stdout, self.proc.stderr):
            threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            self.lines.append(line.rstrip("\n"))

    def text(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, needle: str, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and needle not in self.text():
            if self.proc.poll() is not None:
                time.sleep(0.2)
                break
            time.sleep(0.1)
        assert needle in self.text(), f"{needle!r} not seen:\n{self.text()}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)


def test_the_compose_entrypoint_first_start_is_idempotent_and_restarts_as_standby(
        nfs_lab: lab.NfsLab, hosts: tuple[NsHost, NsHost], tmp_path: Path) -> None:
    """The compose hosts' entry point, for real on the lab (no containers): qm-a creates
    the queue manager once with -ii/-ic, qm-b waits and adds it, both run in the
    foreground; a killed qm-a started again joins as the standby without creating
    anything; SIGTERM ends both with 0."""
    a, b = hosts
    (nfs_lab.export_dir / "ep").mkdir(exist_ok=True)
    conf = tmp_path / "conf"
    (conf / "ini").mkdir(parents=True)
    (conf / "mqsc").mkdir()
    (conf / "ini" / "10.ini").write_text("TuningParameters:\n   StandbyPollInterval=0.2\n")
    (conf / "mqsc" / "10.mqsc").write_text("DEFINE QLOCAL(EP.Q) REPLACE\n")
    running: list[Entry] = []
    try:
        ea = Entry(nfs_lab, a, "create", conf)
        running.append(ea)
        eb = Entry(nfs_lab, b, "add", conf)  # started at once: it must wait for qm-a
        running.append(eb)
        ea.wait_for("AMQ8003")
        assert "Setup completed." in ea.text() and "1 MQSC commands" in ea.text()
        eb.wait_for("standby instance")
        assert "AMQ7880" not in eb.text()  # it did not start on a half-created queue manager
        ini = (nfs_lab.export_dir / "ep" / "data" / "QMEP" / "qm.ini").read_text()
        assert "StandbyPollInterval=0.2" in ini and f"FilesystemLease={nfs_lab.lease}" in ini

        os.kill(ea.proc.pid, signal.SIGKILL)  # the container's pid 1 is the instance
        ea.stop()
        eb.wait_for("AMQ5975", timeout=nfs_lab.lease + 60)
        again = Entry(nfs_lab, a, "create", conf)
        running.append(again)
        again.wait_for("standby instance")
        assert "Setup completed." not in again.text()  # registered: nothing created

        # a host whose own root was lost (a new volume) finds the queue manager there
        fresh = NsHost("a", tmp_path / "hosta-new")
        fresh.root.mkdir()
        os.kill(again.proc.pid, signal.SIGTERM)
        assert again.proc.wait(60) == 0, again.text()
        third = Entry(nfs_lab, fresh, "create", conf)
        running.append(third)
        third.wait_for("standby instance")
        assert "already exists" in third.text()
        for e in (third, eb):
            os.kill(e.proc.pid, signal.SIGTERM)
        assert eb.proc.wait(60) == 0, eb.text()
        assert third.proc.wait(60) == 0, third.text()
    finally:
        for e in running:
            e.stop()
