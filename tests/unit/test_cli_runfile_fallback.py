"""A missing or unreadable run record: the CLI believes the lock files about this host."""

from __future__ import annotations

from typing import Any

from miqm.cli.dspmq import describe, local_from_locks


def _locks(master: dict[str, Any] | None = None,
           standby: dict[str, Any] | None = None) -> dict[str, Any]:
    free = {"held": False, "host": None, "lock_id": None, "pid": None, "generation": None}
    return {"master": master or free, "active": master or free, "standby": standby or free}


def _held(host: str, pid: int, held: bool | None = True) -> dict[str, Any]:
    return {"held": held, "host": host, "lock_id": 7, "pid": pid, "generation": 1}


def test_master_held_here_by_a_live_process_is_the_local_active_instance() -> None:
    local = local_from_locks(_locks(_held("hosta", 42)), "hosta", lambda pid: pid == 42)
    assert local is not None and local["mode"] == "active" and local["pid"] == 42
    info = describe("QM1", {"locks": _locks(_held("hosta", 42)), "qmstatus": None}, local,
                    "hosta", lambda pid: True)
    assert info["status"] == "Running"
    assert info["instances"] == [{"host": "hosta", "mode": "Active", "pid": 42}]


def test_standby_held_here_is_the_local_standby() -> None:
    locks = _locks(_held("hostb", 9), _held("hosta", 43))
    local = local_from_locks(locks, "hosta", lambda pid: True)
    assert local is not None and local["mode"] == "standby" and local["pid"] == 43


def test_other_host_dead_process_or_free_lock_is_no_local_instance() -> None:
    assert local_from_locks(_locks(_held("hostb", 42)), "hosta", lambda pid: True) is None
    assert local_from_locks(_locks(_held("hosta", 42)), "hosta", lambda pid: False) is None
    assert local_from_locks(_locks(_held("hosta", 42, held=False)), "hosta",
                            lambda pid: True) is None
    assert local_from_locks({}, "hosta", lambda pid: True) is None
