"""The controller's pure decisions (miqm/ha/decide.py): every start and takeover rule."""

from __future__ import annotations

import pytest

from miqm.ha import decide
from miqm.ha.decide import Action, Facts, State, step
from miqm.ha.qmstatus import QMStatus

OURS = 1234
OTHER = 999


def facts(**kw: object) -> Facts:
    kw.setdefault("permit_standby", True)
    return Facts("QM1", our_signature=OURS, **kw)  # type: ignore[arg-type]


def running(**kw: object) -> QMStatus:
    base: dict[str, object] = {"status": "Running", "permit_standby": True,
                               "permit_failover": True, "platform_signature": OURS}
    base.update(kw)
    return QMStatus(**base)  # type: ignore[arg-type]


def test_first_instance_becomes_active_on_its_own_or_fresh_data() -> None:
    for status in (None, QMStatus(), running(status="Ended normally")):
        s = step(State.START, facts(master=True, status=status))
        assert (s.state, s.action) == (State.ACTIVE, Action.BECOME_ACTIVE)


def test_first_instance_refuses_data_of_another_platform() -> None:
    s = step(State.START, facts(master=True, status=running(platform_signature=OTHER,
                                                             platform_string="Other")),
             "Linux")
    assert (s.state, s.action, s.amq) == (State.REFUSED, Action.REFUSE, "AMQ7272")
    assert s.exit_code == decide.EXIT_FATAL and "AMQ7272" not in s.line and s.line


def test_master_held_elsewhere_without_x_fails_like_mq() -> None:
    s = step(State.START, facts(master=False, permit_standby=False, status=running()))
    assert (s.action, s.exit_code) == (Action.REFUSE, decide.EXIT_RUNNING_ELSEWHERE)
    assert "running elsewhere" in s.line and "strmqm -x" in s.line and s.amq == "AMQ1101"
    assert s.exit_code == 5


def test_without_x_while_a_standby_runs_the_line_does_not_advise_a_third_instance() -> None:
    s = step(State.START, facts(master=False, permit_standby=False, status=running(),
                                standby_host="hostb"))
    assert s.amq == "AMQ1101" and s.exit_code == 5
    assert "already runs on hostb" in s.line and "third instance" in s.line


def test_standby_is_refused_when_the_active_runs_without_x() -> None:
    for status in ("Running", "Starting"):
        s = step(State.START, facts(master=False,
                                    status=running(status=status, permit_standby=False)))
        assert (s.action, s.exit_code) == (Action.REFUSE, decide.EXIT_STANDBY_NOT_PERMITTED)
        assert "without permitting standby" in s.line and s.amq == "AMQ1102"
        assert s.exit_code == 43  # MQ's strmqm: active instance does not permit standbys
    # an unreadable or absent qmstatus.ini does not stop a standby from waiting
    s = step(State.START, facts(master=False, status=None))
    assert (s.state, s.action) == (State.SEEKING_STANDBY, Action.TRY_STANDBY)


def test_master_held_by_a_live_instance_of_this_host_is_refused_as_running_here() -> None:
    """Not a standby beside its own host's active (it would go down with it, and keep the
    other host's standby out as a third instance): AMQ1104, exit 5, with or without -x."""
    for permit in (True, False):
        s = step(State.START, facts(master=False, permit_standby=permit, status=running(),
                                    master_here_pid=4242))
        assert (s.state, s.action, s.amq) == (State.REFUSED, Action.REFUSE, "AMQ1104")
        assert s.exit_code == 5 and "4242" in s.line and "on this host" in s.line
    s = step(State.START, facts(master=False, status=running(), master_here_pid=None))
    assert s.action is Action.TRY_STANDBY


def test_standby_granted_or_third_instance_refused() -> None:
    s = step(State.SEEKING_STANDBY, facts(standby=True))
    assert (s.state, s.action) == (State.STANDBY, Action.BECOME_STANDBY)
    assert s.line == ("A standby instance of queue manager 'QM1' has been started. "
                      "The active instance is running elsewhere.")
    s = step(State.SEEKING_STANDBY, facts(standby=False))
    assert (s.state, s.exit_code) == (State.REFUSED, decide.EXIT_STANDBY_REFUSED)
    assert "third instance is not permitted" in s.line and s.amq == "AMQ1103"
    assert s.exit_code == 47  # MQ's strmqm: the queue manager already has a standby


def test_standby_polls_until_master_is_granted_and_ends_on_request() -> None:
    assert step(State.STANDBY, facts(master=False)).action is Action.KEEP_POLLING
    s = step(State.STANDBY, facts(master=False, end_requested=True))
    assert (s.state, s.action) == (State.ENDED, Action.END_STANDBY)
    # an endmqm -x that raced a grant still ends the standby (it releases master)
    s = step(State.STANDBY, facts(master=True, status=running(), end_requested=True))
    assert s.action is Action.END_STANDBY


@pytest.mark.parametrize("status", [
    running(),                                                # the active crashed running
    running(status="Ended normally", switchover=True),        # endmqm -s
    running(status="Ended immediately", switchover=True),     # endmqm -i -s
    running(platform_signature=0),                            # never stamped
])
def test_takeover_after_a_crash_or_a_switchover(status: QMStatus) -> None:
    s = step(State.STANDBY, facts(master=True, status=status))
    assert (s.state, s.action) == (State.ACTIVE, Action.TAKE_OVER)


@pytest.mark.parametrize("status, error, words, number", [
    (running(platform_signature=OTHER), None, "different platform", "AMQ7272"),
    (running(status="Starting", permit_failover=False), None, "PermitFailover=No", None),
    (running(status="Ended normally"), None, "without permitting switchover", None),
    (running(status="Ended pre-emptively"), None, "without permitting switchover", None),
    (None, "qmstatus.ini: garbage", "cannot read qmstatus.ini", None),
])
def test_takeover_refused(status: QMStatus | None, error: str | None, words: str,
                          number: str | None) -> None:
    s = step(State.STANDBY, facts(master=True, status=status, status_error=error))
    assert (s.state, s.action, s.amq) == (State.ENDED, Action.END_STANDBY, number)
    assert words in s.line


def test_settled_states_and_missing_observations_are_programming_errors() -> None:
    for state in (State.ACTIVE, State.ENDED, State.REFUSED):
        with pytest.raises(ValueError):
            step(state, facts(master=True))
    with pytest.raises(ValueError):
        step(State.START, facts())
    with pytest.raises(ValueError):
        step(State.SEEKING_STANDBY, facts())
