"""Chaos: lock files removed by hand while an active instance runs (a 'stale lock'
clean-up), then another instance started. The new one is granted a new ``master`` at
once; it used to run as a second active on the same log until the first one's next
verify (up to VerifyInterval), both writing. The first still holds ``active``: an
instance granted ``master`` now looks at ``active`` before it writes anything, and only
the instance that held ``master`` before may still hold it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lockfs.lockfile import HolderRecord, LockFile
from lockfs.posix import PosixVolume
from lockfs.volume import LockMode
from miqm.ha.controller import Controller, Verdict


@pytest.fixture()
def ctl(tmp_path, monkeypatch) -> Iterator[Controller]:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("MIQM_HOSTNAME", "hostc")
    c = Controller("QM1", True, Verdict(None))
    c.data = PosixVolume(str(tmp_path))
    yield c
    if c.master is not None:
        c.master.release()


def _hold(volume: PosixVolume, name: str, record: HolderRecord,
          mode: LockMode = LockMode.SHARED) -> LockFile:
    lock = LockFile(volume, name)
    assert lock.acquire(mode, record)
    return lock


A = HolderRecord("hosta", 11, 1.0, 4242, 7)


def test_active_held_by_an_instance_that_never_held_this_master(ctl: Controller) -> None:
    """master removed and made again: no previous record, and hosta holds active."""
    active = _hold(ctl.data, "active", A)
    try:
        ctl.master = LockFile(ctl.data, "master")
        assert ctl.master.acquire(LockMode.EXCLUSIVE)
        assert ctl.master.previous is None
        who = ctl._active_held_elsewhere(wait=False)
        assert who is not None and "hosta" in who and "4242" in who
    finally:
        active.release()
    assert ctl._active_held_elsewhere(wait=False) is None  # it has gone


def test_the_previous_master_holder_may_still_hold_active(ctl: Controller) -> None:
    """A takeover on NFSv4: the dead active's own active lock outlives its master lock a
    little; that is the expected holder, not a second active."""
    old = _hold(ctl.data, "master", A, LockMode.EXCLUSIVE)
    old.release()  # the master record stays: A held it last
    active = _hold(ctl.data, "active", A)
    try:
        ctl.master = LockFile(ctl.data, "master")
        assert ctl.master.acquire(LockMode.EXCLUSIVE)
        assert ctl.master.previous == A
        assert ctl._active_held_elsewhere(wait=False) is None
        other = HolderRecord("hosta", 12, 2.0, 4343, 8)  # another activation: not A
        active.write_record(other)
        assert ctl._active_held_elsewhere(wait=False) is not None
    finally:
        active.release()


def test_nobody_holding_active_is_no_obstacle(ctl: Controller) -> None:
    ctl.master = LockFile(ctl.data, "master")
    assert ctl.master.acquire(LockMode.EXCLUSIVE)
    assert ctl._active_held_elsewhere(wait=False) is None
    leftover = _hold(ctl.data, "active", A)  # a record left behind, no lock: fine
    leftover.release()
    assert ctl._active_held_elsewhere(wait=True) is None


def test_a_takeover_that_finds_active_held_stays_the_standby(ctl: Controller,
                                                            monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """It says so once (AMQ7279) and polls on: the other instance stops at its next
    verify (its master file is no longer the path's), and a later poll takes over."""
    from miqm.ha import controller as mod
    from miqm.ha.qmstatus import QMStatus

    said: list[str] = []
    monkeypatch.setattr(ctl, "say", lambda number, text=None, **f: said.append(number))

    def refused(failover_from, status):  # type: ignore[no-untyped-def]
        raise mod._ActiveHeld("the instance on hosta (pid 1, generation 1)")

    monkeypatch.setattr(ctl, "become_active", refused)
    assert ctl._take_over(0.0, QMStatus("Running")) is None
    assert ctl._take_over(0.0, QMStatus("Running")) is None
    assert said == ["AMQ7279"]
