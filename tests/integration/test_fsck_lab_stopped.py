"""amqmfsck -c on the NFSv4 lab (lease 5 s) with one writer stopped (SIGSTOP) longer
than the lease: each side names what happened."""

from __future__ import annotations

import re
import signal
import sys
import time

import pytest

from tests import fsckutil as fu
from tests import lab

pytestmark = [pytest.mark.root, pytest.mark.integration]


def test_c_writer_stopped_longer_than_the_lease(nfs_lab: lab.NfsLab) -> None:
    """The stopped writer, resumed, said 'the NFS server did not answer' (its RPC timed
    out on resuming): its lease had run out while it was stopped. The other one failed
    with 'stopped before it finished' without looking at the records. Stopped while it
    held the lock, it names the expired lease and the other checks the records; stopped
    between its turns, it lost nothing and both pass."""
    d = nfs_lab.export_dir / "fsck-cstop"
    d.mkdir(parents=True, exist_ok=True)
    url = nfs_lab.url("fsck-cstop")
    argv = [sys.executable, "-m", "fsck", "-c", "--count", "1500", "--wait", "40", url]
    a = nfs_lab.run_in("a", argv)
    b = nfs_lab.run_in("b", argv)
    try:
        fu.wait_state(d, "c", "running", proc=a, timeout=60)
        fu.wait_state(d, "c", "running", proc=b, timeout=60)
        time.sleep(1.0)
        b.send_signal(signal.SIGSTOP)
        time.sleep(3 * nfs_lab.lease)
        b.send_signal(signal.SIGCONT)
        code_a, _, err_a = fu.finish(a, timeout=180)
        code_b, _, err_b = fu.finish(b, timeout=180)
    finally:
        fu.reap(a, b)
    # the writers take turns at the lock (82bec7e), so the stop may catch B holding it or
    # between its turns, and the test cannot choose which
    # (between turns it held no lock to lose: its state was made again on resuming and
    # its records went on, exit 0)
    if code_b != 0:
        # caught holding the lock: its lease ran out while it lived, found either by the
        # writer's own check or by the lock's renewal (the lock lost under it)
        assert code_b == 1 and "Likely cause: lease not honoured" in err_b, err_b
        assert ("lease expired under a live writer" in err_b
                or "a lock this process held was lost under it" in err_b), err_b
    # A passes, or (B silent longer than it waits for a partner, whichever way B was
    # caught) fails having checked the records: never without looking at them
    assert code_a == 0 or (code_a == 1 and "intact" in err_a), err_a
    assert code_b == 0 or code_a == 1, (err_a, err_b)  # B's lock lost: A saw B go
    # never the wrong reason, on either side, whichever it was (a note may still quote
    # the RPC that timed out on resuming; the other's 'stopped before it finished' is
    # right when it goes on to say the records are intact, checked above)
    assert "locks not enforced" not in err_a + err_b
    assert not re.search("Reason: [^\n]*did not answer", err_a + err_b), (err_a, err_b)
    assert not list(d.glob("amqmfsck.c.*.dat"))
