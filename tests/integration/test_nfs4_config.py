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
import time
from collections.abc import Iterator
from pathlib import Path

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
