"""Chaos: the wall clock of one host jumps (an NTP step, an administrator's ``date -s``)
while its instance is active. Every fencing decision must use the monotonic clock: a
jump forward must not expire the ownership belief or make a verify look stalled (a
spurious stop), and a jump back must not stretch the belief past what a verify earned.
Here ``time.time`` leaps a day forward and back between every call while the belief,
the verify, the monitor and the liveness checks run with their default clocks; they
must neither stop the instance nor verify more often than they would anyway.
"""

from __future__ import annotations

import itertools
import time

import pytest

from miqm.ha.monitors import Monitors, Ownership


@pytest.fixture()
def jumping_wall_clock(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    real = time.time
    leaps = itertools.cycle((86400.0, -86400.0, 3600.0, -7200.0))
    monkeypatch.setattr(time, "time", lambda: real() + next(leaps))


def test_the_belief_and_the_checks_ignore_wall_clock_jumps(jumping_wall_clock: None) -> None:
    verifies: list[float] = []
    fatal: list[tuple[str, str]] = []

    def verify() -> float:
        verifies.append(time.monotonic())
        return 0.001

    own = Ownership(5.0, lambda: (verify(), None)[1])
    own.renew()
    for _ in range(50):  # each write's guard: the belief holds, no synchronous verify
        own.guard()
    assert own.current() and verifies == []
    progress = iter([(1, 0), (2, 3), (3, 3), (4, 0)])
    mon = Monitors(own, verify, lambda: next(progress),
                   lambda number, text: fatal.append((number, text)),
                   verify_interval=1.0, monitor_stall=3.0, liveness_interval=1.0)
    assert mon.verify_once()
    for _ in range(20):
        assert mon.monitor_once()
    for _ in range(4):
        assert mon.liveness_once()
    assert fatal == []
    margins = mon.margins()
    assert 0 < margins["monitor"] <= 3.0 and 0 < margins["ownership"] <= 5.0


def test_an_expired_belief_is_not_revived_by_a_wall_clock_jump_back(
        jumping_wall_clock: None) -> None:
    """Expired on the monotonic clock, a write verifies first, whatever the wall says."""
    verifies: list[int] = []
    own = Ownership(0.0, lambda: verifies.append(1))
    own.renew()
    own.guard()
    assert verifies == [1]


def test_the_default_clocks_are_monotonic() -> None:
    """A default bound at import (``clock=time.time``) would escape the patch above."""
    import inspect

    for cls in (Ownership, Monitors):
        assert inspect.signature(cls).parameters["clock"].default is time.monotonic, cls
