"""The ownership belief and the verify / monitor / liveness steps, on an injected clock."""

from __future__ import annotations

import pytest

from miqm.errors import OwnershipLostError
from miqm.ha.monitors import Monitors, Ownership


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_guard_is_free_while_current_and_reverifies_once_expired() -> None:
    clock = Clock()
    calls: list[float] = []
    own = Ownership(3.0, lambda: calls.append(clock.t), clock)
    own.guard()  # never verified yet: the first write verifies first
    assert calls == [clock.t]
    calls.clear()
    own.renew()
    own.guard()
    assert calls == []
    clock.t += 2.9
    own.guard()
    assert calls == []
    clock.t += 0.2  # expired (a SIGSTOP, a stuck verify): the next write verifies first
    own.guard()
    assert calls == [clock.t]
    own.guard()
    assert len(calls) == 1  # renewed by that verify


def test_guard_refuses_when_the_reverify_fails_or_after_revoke() -> None:
    clock = Clock()

    def stolen() -> None:
        raise OwnershipLostError("the master record names another host")

    own = Ownership(1.0, stolen, clock)
    own.renew()
    clock.t += 5
    with pytest.raises(OwnershipLostError):
        own.guard()
    ok = Ownership(1.0, lambda: None, clock)
    ok.renew()
    ok.revoke()
    with pytest.raises(OwnershipLostError):
        ok.guard()
    ok.renew()  # a revoked belief is never renewed
    assert not ok.current()


def _monitors(clock: Clock, verify, progress=lambda: (0, 0)):  # type: ignore[no-untyped-def]
    fatal: list[tuple[str, str]] = []
    own = Ownership(3.0, lambda: None, clock)
    m = Monitors(own, verify, progress, lambda a, t: fatal.append((a, t)),
                 verify_interval=1.0, monitor_stall=2.0, liveness_interval=5.0, clock=clock)
    return m, own, fatal


def test_verify_renews_or_reports_amq7279() -> None:
    clock = Clock()
    m, own, fatal = _monitors(clock, lambda: 0.001)
    assert m.verify_once() and own.current() and fatal == []

    def bad() -> float:
        raise OwnershipLostError("owner changed")

    m2, own2, fatal2 = _monitors(clock, bad)
    assert not m2.verify_once()
    assert fatal2 and fatal2[0][0] == "AMQ7279" and not own2.current()


def test_monitor_trips_only_on_a_verify_stalled_past_monitor_stall() -> None:
    clock = Clock()
    m, _, fatal = _monitors(clock, lambda: 0.0)
    assert m.monitor_once()
    m.verify_started = clock.t  # a verify read is hanging
    clock.t += 1.9
    assert m.monitor_once() and fatal == []
    clock.t += 0.2
    assert not m.monitor_once()
    assert fatal[0][0] == "AMQ7280"


def test_monitor_reports_a_failed_store() -> None:
    clock = Clock()
    fatal: list[tuple[str, str]] = []
    m = Monitors(Ownership(3, lambda: None, clock), lambda: 0.0, lambda: (0, 0),
                 lambda a, t: fatal.append((a, t)), verify_interval=1, monitor_stall=2,
                 liveness_interval=5, health=lambda: ("AMQ6708", "log write failed"),
                 clock=clock)
    assert not m.monitor_once()
    assert fatal == [("AMQ6708", "log write failed")]


def test_liveness_no_false_alarm_when_busy_or_idle() -> None:
    clock = Clock()
    state = {"p": (10, 5)}
    m, _, fatal = _monitors(clock, lambda: 0.0, lambda: state["p"])
    assert m.liveness_once()  # first sample
    state["p"] = (250, 7)  # busy: forces completing, callers waiting
    assert m.liveness_once()
    state["p"] = (250, 0)  # idle: nothing waiting
    assert m.liveness_once()
    state["p"] = (250, 0)
    assert m.liveness_once() and fatal == []


def test_liveness_trips_when_callers_wait_and_no_force_completes() -> None:
    clock = Clock()
    state = {"p": (40, 3)}
    m, _, fatal = _monitors(clock, lambda: 0.0, lambda: state["p"])
    assert m.liveness_once()
    state["p"] = (40, 3)  # an interval later: same forces, still waiting
    assert not m.liveness_once()
    assert fatal[0][0] == "AMQ7280"


def test_a_suspect_filesystem_makes_every_write_verify_first() -> None:
    clock = Clock()
    calls: list[float] = []
    state = {"suspect": False}
    own = Ownership(30.0, lambda: calls.append(clock.t), clock,
                    suspect=lambda: state["suspect"])
    own.renew()
    own.guard()
    assert calls == []
    state["suspect"] = True  # renewals overdue: the belief alone no longer suffices
    own.guard()
    own.guard()
    assert len(calls) == 2


def test_the_belief_lasts_at_most_two_thirds_of_every_known_lease() -> None:
    """A kernel NFSv4 mount (posix volume, no lease of its own) is bounded by qm.ini's
    FilesystemLease as an nfs4:// volume is by its own: VerifyInterval 30 + MonitorStall
    50 passes the load check against a lease of 90, but a belief of 80 s would run to
    within 10 s of the lease."""
    from miqm.ha.monitors import belief_validity

    assert belief_validity(10, 20, (None, 90)) == 30  # the defaults: under 2/3 of 90
    assert belief_validity(30, 50, (None, 90)) == 60  # FilesystemLease bounds it
    assert belief_validity(1, 2, (5, 90)) == 3
    assert belief_validity(2, 2, (5, 90)) == pytest.approx(10 / 3)  # the volume's lease
    assert belief_validity(2, 2, (None, None)) == 4
