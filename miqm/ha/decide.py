"""The execution controller's decisions as a pure state machine step.

The controller does the I/O (lock attempts, reading ``qmstatus.ini``, waiting) and hands
what it found to :func:`step`, which says what to do next. Nothing here touches a file
or a clock, so every rule is tested directly (tests/unit/test_decide.py).

::

    START ──master granted, same platform──────────────────────► ACTIVE
      │ master refused
      ├─ held by a live instance of this host ─────────────────────► REFUSED (AMQ1104, exit 5)
      ├─ without -x ─────────────────────────────────────────────► REFUSED (AMQ1101, exit 5)
      ├─ active runs without permitting standby ────────────────► REFUSED (AMQ1102, exit 43)
      ▼
    SEEKING_STANDBY ──standby refused (third instance)──────────► REFUSED (AMQ1103, exit 47)
      │ standby granted
      ▼
    STANDBY ──endmqm -x──────────────────────────────────────────► ENDED
      │ master granted at a poll
      ├─ unreadable qmstatus.ini, another platform (AMQ7272),
      │  active ended without -s, PermitFailover=No ─────────────► ENDED
      └─ otherwise ──────────────────────────────────────────────► ACTIVE (takeover)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from miqm import amq
from miqm.ha.qmstatus import QMStatus

#: exit codes come from the message table (MQ's strmqm return codes)
EXIT_RUNNING_ELSEWHERE = amq.exit_code("AMQ1101")  # 5: queue manager running
EXIT_STANDBY_NOT_PERMITTED = amq.exit_code("AMQ1102")  # 43: active does not permit standby
EXIT_STANDBY_REFUSED = amq.exit_code("AMQ1103")  # 47: already has a standby instance
EXIT_FATAL = 71


class State(enum.Enum):
    """Where an instance is in its life."""

    START = "start"                      # nothing held yet; about to try master
    SEEKING_STANDBY = "seeking_standby"  # master refused, -x given: about to try standby
    STANDBY = "standby"                  # holds standby; polls master
    ACTIVE = "active"                    # holds master and active
    ENDED = "ended"                      # stopped on purpose (exit 0)
    REFUSED = "refused"                  # strmqm fails


class Action(enum.Enum):
    """What the controller must do after a step."""

    BECOME_ACTIVE = "become_active"    # first start: master granted
    TRY_STANDBY = "try_standby"        # take the standby lock (non-blocking)
    BECOME_STANDBY = "become_standby"  # standby granted: listener, verdict, poll
    KEEP_POLLING = "keep_polling"      # master still held elsewhere
    TAKE_OVER = "take_over"            # standby got master and may take over
    END_STANDBY = "end_standby"        # release master if got, end the standby
    REFUSE = "refuse"                  # release what is held, fail strmqm with ``line``


@dataclass(frozen=True)
class Facts:
    """What the controller observed since the last step. Unset fields were not observed."""

    qmgr: str
    permit_standby: bool                 # strmqm -x
    our_signature: int                   # this platform's PlatformSignature
    master: bool | None = None           # the attempt on master was granted
    standby: bool | None = None          # the attempt on standby was granted
    status: QMStatus | None = None       # qmstatus.ini as read (None: not read / absent)
    status_error: str | None = None      # qmstatus.ini could not be read: why
    end_requested: bool = False          # endmqm -x reached this standby
    #: the pid of a live instance of this very host that holds master (its record names
    #: this host and a running miqm process), when master was refused
    master_here_pid: int | None = None
    #: the host of the standby instance that runs already (its lock held), when master
    #: was refused; None if there is none or it cannot be told
    standby_host: str | None = None


@dataclass(frozen=True)
class Step:
    """The next state, the action that gets there, and what to say."""

    state: State
    action: Action
    line: str = ""
    amq: str | None = None
    exit_code: int = 0


def foreign_platform(status: QMStatus, our_signature: int) -> bool:
    """True if the data was last run on another platform (0 = never run)."""
    return status.platform_signature not in (0, our_signature)


def platform_line(qmgr: str, status: QMStatus, ours: str) -> str:
    """The AMQ7272 text for data owned by another platform."""
    return amq.text("AMQ7272", qmgr=qmgr, platform=status.platform_string, ours=ours)


def takeover_refusal(facts: Facts, our_platform: str = "") -> tuple[str, str | None] | None:
    """Why a standby that got master must not take over, as (line, AMQ number); or None."""
    if facts.status_error is not None:
        return f"cannot read qmstatus.ini: {facts.status_error}", None
    status = facts.status or QMStatus()
    if foreign_platform(status, facts.our_signature):
        return platform_line(facts.qmgr, status, our_platform), "AMQ7272"
    if status.status.startswith("Ended") and not status.switchover:
        return ("the active instance ended without permitting switchover "
                f"(status {status.status}); the standby ends too"), None
    if not status.permit_failover:
        return ("the active instance ended while starting (PermitFailover=No): this "
                "standby does not take over, so a queue manager that crashes on start "
                "does not crash again here; fix the cause, then strmqm"), None
    return None


def step(state: State, facts: Facts, our_platform: str = "") -> Step:
    """One transition from ``state`` given ``facts``; ``our_platform`` only words AMQ7272."""
    q = facts.qmgr
    if state is State.START:
        if facts.master is None:
            raise ValueError("START needs the outcome of the attempt on master")
        if facts.master:
            status = facts.status or QMStatus()
            if facts.status_error is None and foreign_platform(status, facts.our_signature):
                return Step(State.REFUSED, Action.REFUSE,
                            platform_line(q, status, our_platform), "AMQ7272", EXIT_FATAL)
            return Step(State.ACTIVE, Action.BECOME_ACTIVE)
        if facts.master_here_pid is not None:
            # the active instance runs on this host: a standby beside it is no failover
            # (both go with the host) and would keep the other host's standby out
            return Step(State.REFUSED, Action.REFUSE,
                        amq.text("AMQ1104", qmgr=q, what="an instance",
                                 pid=facts.master_here_pid), "AMQ1104", EXIT_RUNNING_ELSEWHERE)
        if not facts.permit_standby:
            line = amq.text("AMQ1101", qmgr=q)
            if facts.standby_host:  # the advice to use -x would end on AMQ1103
                line += (f" (Its standby instance already runs on {facts.standby_host}, so "
                         "strmqm -x here would be refused as a third instance.)")
            return Step(State.REFUSED, Action.REFUSE, line, "AMQ1101", EXIT_RUNNING_ELSEWHERE)
        status = facts.status
        if status is not None and status.status in ("Running", "Starting") \
                and not status.permit_standby:
            return Step(State.REFUSED, Action.REFUSE, amq.text("AMQ1102", qmgr=q), "AMQ1102",
                        EXIT_STANDBY_NOT_PERMITTED)
        return Step(State.SEEKING_STANDBY, Action.TRY_STANDBY)
    if state is State.SEEKING_STANDBY:
        if facts.standby is None:
            raise ValueError("SEEKING_STANDBY needs the outcome of the attempt on standby")
        if facts.standby:
            return Step(State.STANDBY, Action.BECOME_STANDBY, amq.text("AMQ1002", qmgr=q),
                        "AMQ1002")
        return Step(State.REFUSED, Action.REFUSE, amq.text("AMQ1103", qmgr=q), "AMQ1103",
                    EXIT_STANDBY_REFUSED)
    if state is State.STANDBY:
        if facts.end_requested:
            return Step(State.ENDED, Action.END_STANDBY, "ended by endmqm -x")
        if not facts.master:
            return Step(State.STANDBY, Action.KEEP_POLLING)
        refusal = takeover_refusal(facts, our_platform)
        if refusal is not None:
            return Step(State.ENDED, Action.END_STANDBY, refusal[0], refusal[1])
        return Step(State.ACTIVE, Action.TAKE_OVER)
    raise ValueError(f"no step from {state.value}: the instance has settled")
