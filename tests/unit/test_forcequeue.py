"""The log's force queue in C (``_forcequeue.ForceQueue``): who waits, who is woken as
durable, who leads next, and what a stopped log tells its waiters. Through the log, every
test of tests/unit/test_log.py runs over it too (its c-parts half)."""

from __future__ import annotations

import threading
import time

import pytest

from miqm.store.logbuffer import native_force_queue
from tests.skips import c_part_missing

ForceQueue = native_force_queue()
pytestmark = pytest.mark.skipif(ForceQueue is None, reason=c_part_missing("the C force queue"))

DURABLE, LEAD, STOPPED = 0, 1, 2


def _wait_for(cond: object, what: str) -> None:
    deadline = time.monotonic() + 10
    while not cond():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.002)


class _Caller:
    """A thread entering the queue for ``lsn``; ``outcome`` once it is let go."""

    def __init__(self, fq: object, lsn: int) -> None:
        self.outcome: int | None = None
        self.thread = threading.Thread(target=self._run, args=(fq, lsn), daemon=True)
        self.thread.start()

    def _run(self, fq: object, lsn: int) -> None:
        self.outcome = fq.enter(lsn)  # type: ignore[attr-defined]


def test_waiters_are_woken_in_lsn_order_and_the_lowest_left_leads() -> None:
    fq = ForceQueue()
    assert fq.enter(5) == LEAD  # nobody leads: the caller does
    assert fq.waiting() == 1
    callers = {}
    for n, lsn in enumerate((30, 10, 20, 20)):  # out of order, two equal
        callers[lsn, n] = _Caller(fq, lsn)
        _wait_for(lambda n=n: fq.waiting() == n + 2, f"{n + 1} callers wait")
    fq.done(15, False)  # 10 is durable now; the first 20 leads
    _wait_for(lambda: callers[10, 1].outcome is not None
              and callers[20, 2].outcome is not None, "10 and the first 20 are let go")
    assert callers[10, 1].outcome == DURABLE
    assert callers[20, 2].outcome == LEAD
    assert callers[20, 3].outcome is None and callers[30, 0].outcome is None
    assert fq.waiting() == 3  # the new leader and the two still waiting
    fq.done(25, False)  # the second 20 is durable; 30 leads (woken first)
    _wait_for(lambda: callers[30, 0].outcome is not None
              and callers[20, 3].outcome is not None, "30 and the second 20 are let go")
    assert callers[20, 3].outcome == DURABLE and callers[30, 0].outcome == LEAD
    fq.done(31, False)
    assert fq.waiting() == 0
    assert fq.enter(30) == DURABLE  # below what is durable: no wait, no lead
    assert fq.enter(31) == LEAD
    fq.done(32, False)
    for c in callers.values():
        c.thread.join(5)
        assert not c.thread.is_alive()


def test_a_stopped_queue_lets_every_waiter_go_but_only_durable_ones_as_durable() -> None:
    fq = ForceQueue()
    assert fq.enter(0) == LEAD
    low, high = _Caller(fq, 3), _Caller(fq, 50)
    _wait_for(lambda: fq.waiting() == 3, "two callers wait")
    fq.done(10, True)  # the force failed after making 10 durable
    for c in (low, high):
        c.thread.join(5)
    assert low.outcome == DURABLE  # its record was durable before the failure
    assert high.outcome == STOPPED
    assert fq.waiting() == 0
    assert fq.enter(60) == STOPPED  # and every later caller is told
    assert fq.enter(4) == DURABLE


def test_many_threads_each_get_one_answer_per_wait() -> None:
    """A leader that makes everything entered so far durable; every entry is answered
    exactly once, and the queue ends empty (no lost wake-up, no double one)."""
    fq = ForceQueue()
    lock = threading.Lock()
    next_lsn = [0]
    answers: list[int] = []

    def producer() -> None:
        for _ in range(300):
            with lock:
                lsn = next_lsn[0]
                next_lsn[0] += 1
            how = fq.enter(lsn)
            if how == LEAD:
                with lock:
                    top = next_lsn[0]
                fq.done(top, False)  # everything entered before now is durable
            with lock:
                answers.append(how)

    threads = [threading.Thread(target=producer) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert len(answers) == 16 * 300
    assert set(answers) <= {DURABLE, LEAD} and LEAD in answers
    assert fq.waiting() == 0


def test_a_thread_s_place_in_the_queue_goes_with_the_thread() -> None:
    """Every thread that enters gets a waiter of its own; it is freed when the thread
    ends, so a server whose connection threads come and go does not grow."""
    fq = ForceQueue(durable=100)

    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096

    def threads(n: int) -> None:
        for _ in range(n):
            t = threading.Thread(target=fq.enter, args=(1,))
            t.start()
            t.join()

    threads(2000)  # the allocator's and the interpreter's own growth first
    before = rss()
    threads(20000)
    assert (rss() - before) / 20000 < 16  # a kept waiter is 48 bytes and more
