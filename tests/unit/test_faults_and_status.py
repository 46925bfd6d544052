"""The fault-injecting volume, qmstatus.ini, and dspmq's status rules (pure)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from lockfs.errors import LockLostError, VolumeIOError
from lockfs.faults import Fault, FaultyVolume, faults_from_env
from lockfs.posix import PosixVolume
from miqm.cli.dspmq import describe, format_text
from miqm.errors import ConfigError
from miqm.ha import qmstatus
from miqm.ha.qmstatus import QMStatus


def test_eio_and_tear(tmp_path: Path) -> None:
    inner = PosixVolume(str(tmp_path))
    vol = FaultyVolume(inner, [Fault("pwrite", "S*.LOG", "tear", keep=3, times=1),
                               Fault("fdatasync", "S*.LOG", "eio")])
    with vol.open("S0000000.LOG", create=True) as f:
        with pytest.raises(VolumeIOError):
            f.pwrite(b"abcdef", 0)
        assert f.pread(10, 0) == b"abc"  # torn: only a prefix landed
        f.pwrite(b"xyz", 0)  # the tear fired once
        with pytest.raises(VolumeIOError):
            f.fdatasync()
    with vol.open("other", create=True) as g:  # other paths are untouched
        g.pwrite(b"ok", 0)
        g.fdatasync()


def test_lost_lock_and_stall_release(tmp_path: Path) -> None:
    fault = Fault("lock_lost", "master", "lost")
    stall = Fault("pread", "slow", "stall", seconds=30)
    vol = FaultyVolume(PosixVolume(str(tmp_path)), [fault, stall])
    f = vol.open("master", create=True)
    assert f.lock_lost()
    with pytest.raises(LockLostError):
        f.pread(1, 0)
    f.close()
    s = vol.open("slow", create=True)
    threading.Timer(0.2, stall.release.set).start()
    t0 = time.monotonic()
    s.pread(1, 0)
    assert 0.15 < time.monotonic() - t0 < 5
    s.close()


def test_delayed_fault_and_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MIQM_FAULTS", '[{"volume": "log", "op": "open", "kind": "eio", '
                                      '"after": 0.2}]')
    assert faults_from_env("data") == []
    faults = faults_from_env("log")
    vol = FaultyVolume(PosixVolume(str(tmp_path)), faults)
    vol.open("x", create=True).close()  # before `after`
    time.sleep(0.25)
    with pytest.raises(VolumeIOError):
        vol.open("x")


def test_qmstatus_round_trip_and_corruption(tmp_path: Path) -> None:
    vol = PosixVolume(str(tmp_path))
    assert qmstatus.read(vol) == QMStatus()
    st = QMStatus("Running", True, False, qmstatus.platform_signature(),
                  qmstatus.platform_string(), switchover=True)
    qmstatus.write(vol, st)
    assert qmstatus.read(vol) == st and st.ours()
    assert not st.with_(platform_signature=1).ours()
    (tmp_path / "qmstatus.ini").write_text("garbage without stanza\n")
    with pytest.raises(ConfigError):
        qmstatus.read(vol)
    assert qmstatus.try_read(vol) is None
    assert len(qmstatus.STATUSES) == 12


def _locks(master: bool, standby: bool = False) -> dict:
    def lk(held: bool, host: str) -> dict:
        return {"held": held, "host": host if held else None, "lock_id": 7, "pid": 9,
                "generation": 1}
    return {"master": lk(master, "hosta"), "active": lk(master, "hosta"),
            "standby": lk(standby, "hostb")}


@pytest.mark.parametrize(("probed", "local", "status"), [
    (None, None, "Status not available"),
    ({"locks": _locks(True, True), "qmstatus": {"status": "Running"}},
     {"mode": "active", "status": "Running", "host": "hosta", "pid": 9}, "Running"),
    ({"locks": _locks(True), "qmstatus": {"status": "Running"}},
     {"mode": "active", "status": "Quiescing", "host": "hosta", "pid": 9}, "Quiescing"),
    ({"locks": _locks(True, True), "qmstatus": {"status": "Running"}},
     {"mode": "standby", "host": "hostb", "pid": 5}, "Running as standby"),
    ({"locks": _locks(True), "qmstatus": {"status": "Running"}}, None, "Running elsewhere"),
    ({"locks": _locks(False), "qmstatus": {"status": "Running"}}, None, "Ended unexpectedly"),
    ({"locks": _locks(False), "qmstatus": {"status": "Ended immediately"}}, None,
     "Ended immediately"),
    ({"locks": _locks(False), "qmstatus": None}, None, "Ended normally"),
    ({"locks": _locks(True), "qmstatus": {"status": "Starting"}},
     {"mode": "starting", "host": "hosta", "pid": 9}, "Starting"),
])
def test_dspmq_status_rules(probed: dict | None, local: dict | None, status: str) -> None:
    info = describe("QM1", probed, local)
    assert info["status"] == status


def test_dspmq_text_layout() -> None:
    probed = {"locks": _locks(True, True), "qmstatus": {"status": "Running",
                                                         "permit_standby": True}}
    info = describe("QM1", probed, {"mode": "active", "status": "Running", "host": "hosta",
                                    "pid": 9})
    lines = format_text(info, instances=True, fields=["status", "standby"], locks=True)
    assert lines[0] == ("QMNAME(QM1)".ljust(58) + "STATUS(Running) STANDBY(Permitted)")
    assert lines[1:3] == ["    INSTANCE(hosta) MODE(Active)", "    INSTANCE(hostb) MODE(Standby)"]
    assert lines[3:] == ["    master(hosta,7)", "    active(hosta,7)", "    standby(hostb,7)"]
    assert [i["mode"] for i in info["instances"]] == ["Active", "Standby"]
