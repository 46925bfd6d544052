"""Chaos: the active's lock in its log directory (controller.LOG_ACTIVE).

A data directory replaced under a running active by a copy leaves that active holding
``master`` and ``active`` on files no path names; the copy's are free. Found on real
processes (tests/integration/test_chaos_replaced_datadir.py): an instance started then
ran as a second active on the same log. The active now holds ``active`` in the log
directory too, which a copy of the data directory does not replace; an instance granted
``master`` gives a holder of it (even master's previous holder) a grace to go, then
refuses a start or defers a takeover. The clock is injected.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from lockfs.lockfile import HolderRecord, LockFile
from lockfs.posix import PosixVolume
from lockfs.volume import LockMode
from miqm.ha import controller as ctl
from miqm.ha.controller import Controller, Verdict
from miqm.ha.qmstatus import QMStatus


class FakeClock:
    """A monotonic clock that moves only when slept on."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += seconds


@pytest.fixture()
def taking(tmp_path, monkeypatch) -> Iterator[Controller]:  # type: ignore[no-untyped-def]
    """An instance that was just granted ``master`` of a queue manager whose log
    directory is its own (as crtmqm makes it)."""
    monkeypatch.setenv("MIQM_HOSTNAME", "hostb")
    monkeypatch.setenv("MIQM_DATA_ROOT", str(tmp_path / "root"))
    os.makedirs(tmp_path / "data")
    os.makedirs(tmp_path / "log")
    c = Controller("QM1", True, Verdict(None))
    c.data = PosixVolume(str(tmp_path / "data"))
    c.log_volume = PosixVolume(str(tmp_path / "log"))
    c.master = LockFile(c.data, "master")
    assert c.master.acquire(LockMode.EXCLUSIVE)
    said: list[tuple[str, str]] = []
    c.say = lambda number, text=None, **f: said.append((number, text or "")) or ""  # type: ignore[method-assign]
    c.said = said  # type: ignore[attr-defined]
    yield c
    c.release_locks()


def _old_active(c: Controller) -> LockFile:
    """The log directory's lock as the first active holds it (its own file)."""
    lock = LockFile(PosixVolume(c.log_volume.url), ctl.LOG_ACTIVE)
    assert lock.acquire(LockMode.SHARED, HolderRecord("hosta", 7, 1.0, 4242, 3))
    return lock


def test_a_log_lock_that_stays_held_names_its_holder_after_the_grace(
        taking: Controller) -> None:
    old = _old_active(taking)
    clock = FakeClock()
    try:
        who = taking._log_active_held(clock=clock, sleep=clock.sleep)
    finally:
        old.release()
    assert who is not None and "hosta" in who and "4242" in who
    assert clock.slept >= ctl.LOG_ACTIVE_GRACE  # given its grace first, not refused at once


def test_a_log_lock_that_goes_within_the_grace_lets_the_instance_through(
        taking: Controller) -> None:
    old = _old_active(taking)
    clock = FakeClock()

    def sleep(seconds: float) -> None:  # the first instance exits half-way
        clock.sleep(seconds)
        if clock.slept >= ctl.LOG_ACTIVE_GRACE / 2:
            old.release()

    assert taking._log_active_held(clock=clock, sleep=sleep) is None
    assert clock.slept < ctl.LOG_ACTIVE_GRACE


def test_no_log_lock_file_is_no_holder(taking: Controller) -> None:
    """The first start, or an active of an earlier release: nothing to wait for."""
    clock = FakeClock()
    assert taking._log_active_held(clock=clock, sleep=clock.sleep) is None
    assert clock.slept == 0


def test_a_takeover_with_the_log_lock_held_is_deferred_before_writing(
        taking: Controller, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(ctl, "LOG_ACTIVE_GRACE", 0.05)
    assert taking.master is not None
    before = taking.data.read_bytes("master")
    old = _old_active(taking)
    try:
        assert taking._take_over(1.0, QMStatus("Running", True, True)) is None
    finally:
        old.release()
    assert not taking.master.held  # released: the next poll tries again
    assert taking.data.read_bytes("master") == before  # no record written
    assert taking.log_active_lock is None and taking.active_lock is None
    assert [n for n, _ in taking.said] == ["AMQ7279"]
    assert "log directory" in taking.said[0][1] and "hosta" in taking.said[0][1]


def test_the_active_holds_the_log_lock_and_gives_it_back_before_master(
        taking: Controller) -> None:
    """What a later instance finds: held while active, free after release_locks."""
    taking.record = taking.holder(1)
    taking.log_active_lock = LockFile(taking.log_volume, ctl.LOG_ACTIVE)
    assert taking.log_active_lock.acquire(LockMode.SHARED, taking.record)
    from lockfs.lockfile import peek

    assert peek(taking.log_volume, ctl.LOG_ACTIVE)[1] is True
    order: list[str] = []
    for lock in (taking.log_active_lock, taking.master):
        real = lock.release
        lock.release = (lambda r=real, n=lock.name: (order.append(n), r())[1])  # type: ignore[method-assign]
    taking.release_locks()
    assert order[:2] == [ctl.LOG_ACTIVE, "master"]
    assert peek(taking.log_volume, ctl.LOG_ACTIVE)[1] is False
