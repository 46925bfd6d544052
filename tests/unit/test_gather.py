"""GroupCommitCPU: a thread's first wait behind another thread's log force moves it to the
log's gather CPU, in the C force queue and in its Python twin. The main thread, a thread
that called ``keep_thread_cpus()`` and a thread that may not run there are never moved;
a thread that never waits (it leads every force itself) is not either. A thread may
also ask to join the gather CPU once it is chosen (``gather_here``: a consumer's pusher,
the checkpoint thread)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from lockfs.posix import PosixVolume
from miqm.config import parse_qm_ini
from miqm.store.log import RecoveryLog, keep_thread_cpus
from miqm.store.qmstore import QueueManagerStore
from miqm.store.settings import GATHER_AUTO, GATHER_NONE, LogSettings, StoreTuning

SMALL = LogSettings(file_pages=64, primary_files=2, secondary_files=2)
ALLOWED = os.sched_getaffinity(0)
pytestmark = [
    pytest.mark.skipif(len(ALLOWED) < 2, reason="gathering needs two CPUs to choose from "
                       "(this process may use one)"),
    pytest.mark.usefixtures("c_parts_or_python"),  # both force queues
]


def open_log(tmp_path: Path, gather_cpu: int | None) -> RecoveryLog:
    vol = PosixVolume(str(tmp_path / "log"))
    RecoveryLog.create(vol, SMALL)
    if gather_cpu is None:  # what a process embedding the store gets
        log = RecoveryLog.open(vol, SMALL, generation=1)
    else:
        log = RecoveryLog.open(vol, SMALL, generation=1, gather_cpu=gather_cpu)
    list(log.records(log.first_lsn()))  # restart's read: the log may be written now
    log.force(log.append(b"first"))  # the main thread leads it: nobody waits or moves
    return log


def waiting(log: RecoveryLog) -> int:
    """Callers in the log's force queue now, the leader included."""
    fq = log._fq  # the test watches the queue it drives
    return fq.waiting() if fq is not None else len(log._waitq) + int(log._flushing)


def wait_until(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.002)


class Committer:
    """A thread that appends a record and forces it; ``mask`` is its CPU affinity after."""

    def __init__(self, log: RecoveryLog, before: Callable[[], None] | None = None) -> None:
        self.mask: set[int] | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(log, before), daemon=True)
        self.thread.start()

    def _run(self, log: RecoveryLog, before: Callable[[], None] | None) -> None:
        try:
            if before is not None:
                before()
            log.force(log.append(b"x" * 100))
            self.mask = os.sched_getaffinity(0)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def join(self) -> set[int]:
        self.thread.join(10)
        assert not self.thread.is_alive() and self.error is None, self.error
        assert self.mask is not None
        return self.mask


def leader_and_waiter(log: RecoveryLog, before: Callable[[], None] | None = None
                      ) -> tuple[set[int], set[int]]:
    """A leader whose force is held back (the test holds the log's flush lock) and a second
    committer that therefore waits behind it: their masks once both are done."""
    with log._flush_lock:  # hold the leader inside its force
        leader = Committer(log)
        wait_until(lambda: waiting(log) == 1, "the first committer leads")
        waiter = Committer(log, before)
        wait_until(lambda: waiting(log) == 2, "the second committer waits")
    return leader.join(), waiter.join()


def test_a_waiting_thread_moves_to_the_gather_cpu_and_a_leader_stays(
        tmp_path: Path) -> None:
    cpu = max(ALLOWED)
    log = open_log(tmp_path, cpu)
    try:
        assert log.gather_cpu == cpu
        leader, waiter = leader_and_waiter(log)
        assert waiter == {cpu}
        assert leader == ALLOWED  # it never waited behind anyone
    finally:
        log.close()
    assert os.sched_getaffinity(0) == ALLOWED


def test_auto_gathers_on_the_cpu_of_the_first_waiter(tmp_path: Path) -> None:
    log = open_log(tmp_path, GATHER_AUTO)
    try:
        assert log.gather_cpu == GATHER_AUTO  # chosen at the first wait
        assert log.stats()["GroupCommitCPU"] == "auto"  # amqldmpa's line
        _, waiter = leader_and_waiter(log)
        chosen = log.gather_cpu
        assert chosen in ALLOWED
        assert waiter == {chosen}
        assert log.stats()["GroupCommitCPU"] == str(chosen)
        _, second = leader_and_waiter(log)  # the choice holds for later waiters
        assert second == {chosen} and log.gather_cpu == chosen
    finally:
        log.close()


def test_none_moves_nobody(tmp_path: Path) -> None:
    log = open_log(tmp_path, GATHER_NONE)
    try:
        _, waiter = leader_and_waiter(log)
        assert waiter == ALLOWED
        assert log.gather_cpu == GATHER_NONE
    finally:
        log.close()


def test_an_embedded_store_moves_nobody_unless_it_opts_in(tmp_path: Path) -> None:
    """The store's own default is none: a process that embeds it keeps its threads where
    it put them. The queue manager opts in through qm.ini (GroupCommitCPU, default auto)."""
    assert StoreTuning().group_commit_cpu == GATHER_NONE
    assert parse_qm_ini("").tuning.group_commit_cpu == GATHER_AUTO
    log = open_log(tmp_path, None)
    try:
        _, waiter = leader_and_waiter(log)
        assert waiter == ALLOWED
        assert log.gather_cpu == GATHER_NONE
    finally:
        log.close()


def test_a_thread_that_keeps_its_cpus_is_not_moved(tmp_path: Path) -> None:
    log = open_log(tmp_path, max(ALLOWED))
    try:
        _, waiter = leader_and_waiter(log, before=keep_thread_cpus)
        assert waiter == ALLOWED
    finally:
        log.close()


def test_a_thread_that_may_not_run_on_the_gather_cpu_is_not_moved(tmp_path: Path) -> None:
    cpu = max(ALLOWED)
    others = ALLOWED - {cpu}
    log = open_log(tmp_path, cpu)
    try:
        _, waiter = leader_and_waiter(log, before=lambda: os.sched_setaffinity(0, others))
        assert waiter == others
    finally:
        log.close()


def test_the_main_thread_is_never_moved(tmp_path: Path) -> None:
    """The main thread waits behind a leader; the threads it would start and the processes
    it would fork would inherit its mask, so it keeps every CPU."""
    assert threading.current_thread() is threading.main_thread()
    cpu = max(ALLOWED)
    log = open_log(tmp_path, cpu)
    try:
        hold = threading.Lock()
        hold.acquire()
        flush_lock = log._flush_lock

        def holder() -> None:  # keeps the leader inside its force until the main thread waits
            with flush_lock:
                hold.acquire()

        def release_when_main_waits() -> None:
            wait_until(lambda: waiting(log) == 2, "the main thread waits")
            hold.release()

        h = threading.Thread(target=holder, daemon=True)
        h.start()
        wait_until(flush_lock.locked, "the flush lock is held")
        leader = Committer(log)
        wait_until(lambda: waiting(log) == 1, "the first committer leads")
        releaser = threading.Thread(target=release_when_main_waits, daemon=True)
        releaser.start()
        log.force(log.append(b"main" * 25))  # waits behind the leader
        assert os.sched_getaffinity(0) == ALLOWED
        releaser.join(10)
        h.join(10)
        leader.join()
        # and a thread's later wait moves it: the queue is gathering, main is exempt
        _, waiter = leader_and_waiter(log)
        assert waiter == {cpu}
    finally:
        log.close()


def _gathered_in_thread(log: RecoveryLog) -> tuple[bool, set[int]]:
    """``log.gather_here()`` on a new thread: its answer and the thread's mask after."""
    out: list[tuple[bool, set[int]]] = []
    t = threading.Thread(target=lambda: out.append((log.gather_here(),
                                                    os.sched_getaffinity(0))), daemon=True)
    t.start()
    t.join(10)
    assert out, "the thread did not finish"
    return out[0]


def test_a_thread_may_join_the_gather_cpu_once_it_is_chosen(tmp_path: Path) -> None:
    """gather_here (a consumer's pusher): nothing while auto has not chosen (False: ask
    again), the chosen CPU after; never the main thread; nothing with gathering off."""
    log = open_log(tmp_path, GATHER_AUTO)
    try:
        assert _gathered_in_thread(log) == (False, ALLOWED)
        leader_and_waiter(log)  # the first wait chooses the CPU
        chosen = log.gather_cpu
        assert chosen in ALLOWED
        assert _gathered_in_thread(log) == (True, {chosen})
        assert log.gather_here() is True  # the main thread: nothing to do, never moved
        assert os.sched_getaffinity(0) == ALLOWED
    finally:
        log.close()
    off = open_log(tmp_path / "off", GATHER_NONE)
    try:
        assert _gathered_in_thread(off) == (True, ALLOWED)
    finally:
        off.close()


def _store_with_gather(tmp_path: Path, gather_cpu: int) -> QueueManagerStore:
    data, logv = PosixVolume(str(tmp_path / "d")), PosixVolume(str(tmp_path / "l"))
    (tmp_path / "d").mkdir(parents=True)
    (tmp_path / "l").mkdir()
    QueueManagerStore.create(data, logv, "QM", SMALL)
    # a checkpoint thread that looks every 0.05 s (CheckPointWaitLen / 10)
    tuning = StoreTuning(group_commit_cpu=gather_cpu, checkpoint_wait_len=0.5)
    return QueueManagerStore.open(data, logv, "QM", SMALL, tuning, generation=1)


def test_the_checkpoint_thread_joins_the_gather_cpu_once_it_is_chosen(
        tmp_path: Path) -> None:
    """Its writing of bodies runs under the interpreter lock the committers pass around:
    on their CPU once one is chosen; never chosen by its own waits (auto stays auto)."""
    cpu = max(ALLOWED)
    store = _store_with_gather(tmp_path / "fixed", cpu)
    try:
        tid = store._cp_thread.native_id  # the test watches the thread the store started
        wait_until(lambda: os.sched_getaffinity(tid) == {cpu}, "the checkpoint thread moved")
    finally:
        store.close()
    store = _store_with_gather(tmp_path / "auto", GATHER_AUTO)
    try:
        tid = store._cp_thread.native_id
        store.define_queue("Q")
        store.put("Q", b"x" * 100, persistent=True)
        store.checkpoint()  # the thread's forces: none of them chooses the CPU
        time.sleep(0.2)  # several turns of its loop
        assert store.log.gather_cpu == GATHER_AUTO
        assert os.sched_getaffinity(tid) == ALLOWED
    finally:
        store.close()
