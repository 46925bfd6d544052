"""An instance's last words (the ``fatal`` event) say how old its lease on the master lock
was: past the lease, it could not run while the lease ran out (paused, a frozen VM), and
the analysis calls the takeover ``paused``, not ``spurious``. Working that out must never
stop the stop itself."""

from __future__ import annotations

from typing import Any

from miqm.ha.controller import Controller, Verdict


class _Master:
    def __init__(self, age: float | None) -> None:
        self.age = age

    def lease_age(self) -> float | None:
        if self.age is not None and self.age < 0:
            raise OSError("the lock file is closed")
        return self.age


class _Volume:
    def __init__(self, lease: float | None) -> None:
        self.lease_seconds = lease


def _fields(lease: float | None, age: float | None, setup: bool = True) -> dict[str, Any]:
    c = Controller("QM1", True, Verdict(None))
    if setup:
        c.data = _Volume(lease)  # type: ignore[assignment]
    c.master = _Master(age)  # type: ignore[assignment]
    return c._lease_overdue()


def test_the_lease_age_and_the_lease_are_reported_where_there_is_a_lease() -> None:
    assert _fields(5, 12.34567) == {"lease_age_s": 12.346, "lease_s": 5.0}
    assert _fields(10, 6.1) == {"lease_age_s": 6.1, "lease_s": 10.0}


def test_nothing_is_added_without_a_lease_or_before_setup_or_when_asking_fails() -> None:
    assert _fields(None, 3.0) == {}       # a local directory: locks never expire
    assert _fields(5, None) == {}         # no lock held
    assert _fields(5, 3.0, setup=False) == {}
    assert _fields(5, -1.0) == {}         # the lock file cannot answer: the stop goes on
