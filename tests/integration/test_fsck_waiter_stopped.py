"""amqmfsck -w and -c with a process stopped (SIGSTOP) midway: its own stop is no fault of
the filesystem's nor of its partner's.

The waiter measured the hand-off on its monotonic clock across its own stop and judged
it: stopped 16 s on the NFSv4 lab (limit: lease + 5 s), it failed a good filesystem as
'lease not honoured'; a call that then failed because its NFSv4 state had run out while
it was stopped was 'the NFS server did not answer'. A -c writer stopped until its partner
gave up said on resuming that the partner had 'stopped before it finished'."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from fsck.report import Failed
from lockfs.errors import VolumeStalled
from tests import fsckutil as fu

pytestmark = pytest.mark.integration


def test_w_waiter_stopped_does_not_judge_its_own_stop(tmp_path: Path) -> None:
    holder = fu.start("-w", "--hold", "2", "--wait", "2", str(tmp_path))
    waiter = None
    try:
        fu.wait_state(tmp_path, "w", "holding", proc=holder)
        waiter = fu.start("-w", "--json", "--wait", "60", "--handoff-limit", "1",
                          str(tmp_path))
        fu.wait_state(tmp_path, "w", "waiting", proc=waiter)
        time.sleep(0.5)  # it sees the holder's heartbeat move, then stops before the release
        os.kill(waiter.pid, signal.SIGSTOP)
        code1, _, err1 = fu.finish(holder)  # released, then gave up on the silent waiter
        time.sleep(1.5)
        os.kill(waiter.pid, signal.SIGCONT)
        code2, out2, err2 = fu.finish(waiter)
    finally:
        fu.reap(holder, waiter)
    assert code1 == 1 and "Likely cause: no second process" in err1, err1
    # the hand-off it measured includes its own stop (well over --handoff-limit 1): not
    # judged, and said so
    assert code2 == 0, err2
    test = fu.test_of(fu.result(out2), "waiting and releasing locks")
    assert test["details"]["handoff"]["paused"] > 1.0, test["details"]
    assert any("was not judged" in n for n in test["notes"]), test["notes"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["amqmfsck.lkw"]


class _Vol:
    lease_seconds = 5.0


def test_a_call_failing_after_the_waiter_was_stopped_names_the_stop() -> None:
    from fsck.meet import _stopped_waiter
    from fsck.report import CAUSE_STOPPED

    exc = VolumeStalled("pread call failed with \"Command timed out\"")
    with pytest.raises(Failed) as info:
        _stopped_waiter(_Vol(), 20.0, 0.0, exc)  # no call answered for 4 leases
    assert info.value.cause == CAUSE_STOPPED and "longer than the lease" in info.value.reason
    with pytest.raises(Failed):
        _stopped_waiter(_Vol(), 0.2, 12.0, exc)  # its last sleep overran by 12 s
    # a call failing while this process ran is the server's, as before
    _stopped_waiter(_Vol(), 0.2, 0.0, exc)


def test_c_writer_stopped_until_its_partner_gave_up_names_its_own_stop(
        tmp_path: Path) -> None:
    survivor = fu.start("-c", "--count", "400", "--wait", "5", str(tmp_path))
    stopped = None
    try:
        fu.wait_state(tmp_path, "c", "ready", proc=survivor)
        stopped = fu.start("-c", "--count", "400", "--wait", "60", str(tmp_path))
        fu.wait_state(tmp_path, "c", "running", proc=stopped)
        time.sleep(0.3)
        os.kill(stopped.pid, signal.SIGSTOP)
        code1, _, err1 = fu.finish(survivor)  # its partner silent: it gives up
        os.kill(stopped.pid, signal.SIGCONT)
        code2, _, err2 = fu.finish(stopped)
    finally:
        fu.reap(survivor, stopped)
    assert code1 == 1 and "Likely cause: no second process" in err1, err1
    assert code2 == 1, err2
    assert "Likely cause: this process was stopped" in err2, err2
    assert "this process was stopped or stalled for" in err2
    # nothing but the state files of nobody: the data file went with the run
    assert not list(tmp_path.glob("*.dat")), list(tmp_path.iterdir())
