"""The controller's health check (run by the monitor thread): the lease-age fence stops
an active whose master-lock lease has gone unrenewed for 3/5 of its length (before the
server could hand the lock to the standby), a LOST lock stops it, a failed store stops it.
Pure logic over a stand-in lock file and volume; the real thing is in the NFSv4 lab."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from lockfs.lockfile import HolderRecord
from lockfs.volume import Reachability
from miqm.errors import OwnershipLostError
from miqm.ha.controller import Controller


@dataclass
class _Lock:
    age: float | None
    state: Reachability = Reachability.OK

    def reachability(self) -> Reachability:
        return self.state

    def lease_age(self) -> float | None:
        return self.age


@dataclass
class _Volume:
    lease_seconds: float | None


def _controller(lease: float | None, age: float | None,
                state: Reachability = Reachability.OK, failed: object = None) -> Controller:
    ctl = Controller.__new__(Controller)  # only what store_health reads
    ctl.master = _Lock(age, state)  # type: ignore[assignment]
    ctl.data = _Volume(lease)  # type: ignore[assignment]
    ctl.store = type("S", (), {"failure": failed})()
    return ctl


@pytest.mark.parametrize(("lease", "age", "stops"), [
    (5.0, 0.5, False), (5.0, 2.9, False), (5.0, 3.1, True), (5.0, 4.9, True),
    (90.0, 40.0, False), (90.0, 60.0, True), (None, 1000.0, False), (5.0, None, False)])
def test_the_lease_age_fence_stops_at_three_fifths_of_the_lease(
        lease: float | None, age: float | None, stops: bool) -> None:
    problem = _controller(lease, age).store_health()
    if stops:
        assert problem is not None and problem[0] == "AMQ7279", problem
        assert "not been renewed" in problem[1]
    else:
        assert problem is None, problem


def test_a_lost_lock_or_a_failed_store_stops_the_instance() -> None:
    lost = _controller(5.0, 0.1, Reachability.LOST).store_health()
    assert lost is not None and lost[0] == "AMQ7279" and "lost" in lost[1]
    failed = _controller(5.0, 0.1, failed=OSError("disk full")).store_health()
    assert failed is not None and failed[0] == "AMQ6708" and "disk full" in failed[1]
    assert _controller(5.0, 0.1, Reachability.SUSPECT).store_health() is None


# ---------------------------------------------------------------- verify and the standby
@dataclass
class _Master:
    found: HolderRecord | None
    is_lost: bool = False

    def lost(self) -> bool:
        return self.is_lost

    def read_record(self) -> HolderRecord | None:
        return self.found


def test_verify_accepts_only_this_instances_own_record() -> None:
    ours = HolderRecord("hosta", 7, 1.0, 100, 3)
    ctl = Controller.__new__(Controller)
    ctl.record = ours
    # the path check (c3ac5ab: the file locked is the one the path names) has its own
    # tests; here the path names it, except where said
    at_its_path = [True]
    ctl._master_at_its_path = lambda: at_its_path[0]  # type: ignore[method-assign]
    ctl.master = _Master(HolderRecord("hosta", 7, 1.0, 100, 3))  # type: ignore[assignment]
    assert ctl.verify_master() >= 0
    at_its_path[0] = False  # our record, on a lock file no longer at the path
    with pytest.raises(OwnershipLostError):
        ctl.verify_master()
    at_its_path[0] = True
    for thief in (HolderRecord("hostb", 8, 2.0, 200, 4), HolderRecord("hosta", 7, 1.0, 100, 4),
                  None):
        ctl.master = _Master(thief)  # type: ignore[assignment]
        with pytest.raises(OwnershipLostError) as info:
            ctl.verify_master()
        assert info.value.amq == "AMQ7279"
    ctl.master = _Master(ours, is_lost=True)  # type: ignore[assignment]
    with pytest.raises(OwnershipLostError):
        ctl.verify_master()


@pytest.mark.parametrize(("mode", "status"), [("standby", "Running as standby"),
                                              ("active", "Starting")])
def test_a_standby_or_a_starting_active_answers_every_queue_request_with_2543(
        mode: str, status: str) -> None:
    ctl = Controller.__new__(Controller)
    ctl.qmgr, ctl.host, ctl.pid, ctl.mode, ctl.status = "QM", "hostb", 1, mode, status
    ctl.service = None if mode == "standby" else object()
    ctl.listener = None
    for op in ("put", "get", "commit", "mqsc"):
        reply = ctl.handle({"op": op, "queue": "Q", "body": "eA=="}, None)
        assert reply["ok"] is False and reply["mqrc"] == 2543, reply
    assert ctl.handle({"op": "instance"}, None)["mode"] == mode


def test_a_standby_answers_another_queue_managers_hello_with_2058() -> None:
    """A client of QY walking a CONNAME list that reaches QX's standby was told 2543 (its
    queue manager running as a standby there) instead of 2058, as QX's active says."""
    ctl = Controller.__new__(Controller)
    ctl.qmgr, ctl.host, ctl.pid, ctl.mode, ctl.status = "QX", "hostb", 1, "standby", \
        "Running as standby"
    ctl.service, ctl.listener = None, None
    assert ctl.handle({"op": "hello", "qmgr": "QY"}, None)["mqrc"] == 2058
    assert ctl.handle({"op": "hello", "qmgr": "QX"}, None)["mqrc"] == 2543
    assert ctl.handle({"op": "hello"}, None)["mqrc"] == 2543  # a blank name takes any
