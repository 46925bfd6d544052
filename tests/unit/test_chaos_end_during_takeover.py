"""Chaos: ``endmqm -x`` reaching a standby in the middle of its takeover.

Found reading the controller: between the standby's decision to take over and the moment
it holds ``master`` and ``active`` (its mode flips to active there; the log directory's
lock may add a grace before it), its mode still said standby, so ``endmqm -x`` was
accepted; the instance then came up as the active and at once ended it with a controlled
end that permits no switchover: the queue manager that had just failed over was down,
and a standby started later would not take over from 'Ended normally'. Now the decision
and the request are ordered under one lock: a request that came first ends the standby
as asked, one that comes after is refused (AMQ1109) as meant for a standby that no
longer is. SIGTERM still ends whatever the instance is.
"""

from __future__ import annotations

import pytest

from miqm.ha.controller import Controller, Verdict


@pytest.fixture()
def standby(tmp_path, monkeypatch) -> Controller:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("MIQM_HOSTNAME", "hostb")
    monkeypatch.setenv("MIQM_DATA_ROOT", str(tmp_path / "root"))
    c = Controller("QM1", True, Verdict(None))
    c.mode, c.status = "standby", "Running as standby"
    return c


def test_endmqm_x_after_the_takeover_began_is_refused(standby: Controller) -> None:
    assert standby._begin_takeover()
    reply = standby.request_end({"mode": "controlled", "standby_only": True})
    assert reply["ok"] is False and reply["amq"] == "AMQ1109", reply
    assert standby._end_request is None  # the new active is not ended by it
    assert not standby._ended.is_set()


def test_endmqm_x_before_the_takeover_ends_the_standby(standby: Controller) -> None:
    reply = standby.request_end({"mode": "controlled", "standby_only": True})
    assert reply["ok"] is True
    assert not standby._begin_takeover()  # the standby ends as asked instead


def test_endmqm_without_x_during_the_takeover_ends_the_new_active(
        standby: Controller) -> None:
    """It is the active instance from the decision on: a plain endmqm is for it."""
    assert standby.request_end({"mode": "controlled"})["amq"] == "AMQ1105"  # a standby
    assert standby._begin_takeover()
    reply = standby.request_end({"mode": "controlled"})
    assert reply["ok"] is True and standby._end_request is not None


def test_sigterm_during_the_takeover_ends_the_instance(standby: Controller) -> None:
    assert standby._begin_takeover()
    reply = standby.request_end({"mode": "immediate", "standby_only": True, "signal": True})
    assert reply["ok"] is True and standby._end_request is not None
    assert standby._ended.is_set()
