"""A small circular log filled by a producer faster than the checkpoint thread frees it:
an append that finds no room first makes room (it completes the checkpoint in progress,
or takes one) and only then, if something real holds the log's tail, reports the log
full (AMQ7463, MQRC 2102), and AMQ7464 once when records go in again.

Found on a log of 3 x 256 KiB extents: a producer committing 60 KB units one after
another got MQRC 2102 about every ninth unit with nothing holding the tail, because the
background checkpoint was still syncing the queue files when the log reached its end.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from lockfs.posix import PosixVolume
from miqm.errors import LogFullError
from miqm.store import framing as F
from miqm.store.log import RecoveryLog
from miqm.store.qmstore import QueueManagerStore
from miqm.store.settings import LogSettings, StoreTuning

pytestmark = pytest.mark.usefixtures("c_parts_or_python")

#: 3 primary extents of 256 KiB (62 log pages each), and the one secondary MQ requires
SMALL = LogSettings(file_pages=64, primary_files=3, secondary_files=1)
UNIT = 60_000


def _store(tmp_path: Path, *, background: bool, tuning: StoreTuning | None = None
           ) -> tuple[QueueManagerStore, list[tuple[str, str]]]:
    for d in ("data", "log"):
        (tmp_path / d).mkdir()
    data, log = PosixVolume(str(tmp_path / "data")), PosixVolume(str(tmp_path / "log"))
    QueueManagerStore.create(data, log, "QM", SMALL)
    lines: list[tuple[str, str]] = []
    s = QueueManagerStore.open(data, log, "QM", SMALL, tuning or StoreTuning(),
                               generation=1, background=background,
                               errlog=lambda a, t: lines.append((a, t)))
    s.define_queue("Q", DEFPSIST="YES", MAXDEPTH=1_000_000)
    return s, lines


def test_a_producer_of_60kb_units_never_gets_log_full_on_a_small_circular_log(
        tmp_path: Path) -> None:
    """The checkpoint thread's checkpoints are slow to reach the disk here (their step
    between writing the queue files and syncing them waits for a moment, as a busy disk
    makes it), so the producer reaches the end of the log while one is in progress: its
    append must wait for that checkpoint and use the room it frees, not fail."""
    s, lines = _store(tmp_path, background=True)
    gate = threading.Event()

    def slow_disk() -> None:
        gate.wait(0.2)  # not a timing assertion: only makes the producer outrun it

    s._cp_between = slow_disk
    failed = []
    try:
        for i in range(150):  # 9 MB through a log of 768 KiB: a dozen laps
            u = s.begin()
            try:
                s.put("Q", b"%06d" % i + bytes(UNIT - 6), uow=u)
                s.commit(u)
            except LogFullError:
                failed.append(i)
                s.backout(u)
        assert not failed, f"units {failed} got log full with nothing holding the tail"
        assert not [t for a, t in lines if a in ("AMQ7463", "AMQ6118")]
        assert s.failure is None
    finally:
        gate.set()
        s.close()
    s = QueueManagerStore.open(PosixVolume(str(tmp_path / "data")),
                               PosixVolume(str(tmp_path / "log")), "QM", SMALL,
                               StoreTuning(), generation=2, background=False)
    try:
        got = [m.body[:6] for m in iter(lambda: s.get("Q"), None)]
        assert got == [b"%06d" % i for i in range(150)]
    finally:
        s.close()


def test_without_a_checkpoint_thread_the_append_takes_the_checkpoint(tmp_path: Path
                                                                     ) -> None:
    """With no checkpoint in progress (here no thread at all, and the usage trigger
    never fires: CheckPointLogRecdMax and the usage step are out of reach of a producer
    of big records) the append that finds no room takes a checkpoint itself."""
    s, lines = _store(tmp_path, background=False)
    s._usage_after_cp = 10.0  # the usage trigger never fires: only the full log remains
    try:
        for _ in range(60):
            u = s.begin()
            s.put("Q", bytes(UNIT), uow=u)
            s.commit(u)
        assert not [t for a, t in lines if a == "AMQ7463"]
        assert s.log.first_lsn() > 0  # the restart point moved on: checkpoints freed it
    finally:
        s.close()


def test_a_unit_of_work_holding_the_tail_still_gets_log_full(tmp_path: Path) -> None:
    """A unit whose first record holds the restart point, and whose next message does
    not fit in what is left (before AMQ7469's limit is reached): no checkpoint can free
    anything, so the log is full for it, with the existing messages (AMQ7463 naming the
    unit of work, MQRC 2102 to the application through LogFullError), and no
    checkpoint is taken for nothing. Once the unit ends, the log takes records again and
    says so once (AMQ7464). No checkpoint thread: the usage trigger's checkpoints are
    taken within the puts, so the count below sees only what the full log does."""
    s, lines = _store(tmp_path, background=False)
    try:
        s.checkpoint()  # the restart point: where the unit begins
        u = s.begin()
        for _ in range(9):  # 540 KB pinned: under AMQ7469's 80% of 3 extents (595 KB)
            s.put("Q", bytes(UNIT), uow=u)
        checkpoints = s.checkpoint_seconds.count
        for _ in range(3):
            with pytest.raises(LogFullError) as info:  # 4 extents hold 992 KB
                s.put("Q", bytes(500_000), uow=u)
            assert info.value.amq == "AMQ7463"
            assert "a long-running unit of work holds it" in str(info.value)
        assert s.checkpoint_seconds.count == checkpoints  # none taken: none could help
        full = [t for a, t in lines if a == "AMQ7463"]
        assert len(full) == 1 and "is full" in full[0] and "unit of work" in full[0]
        assert not [a for a, _t in lines if a == "AMQ7469"]
        assert s.failure is None
        s.commit(u)  # the unit ends (its COMMIT record still had room)
        assert [a for a, _t in lines if a == "AMQ7464"] == ["AMQ7464"]
        for _ in range(20):  # the log is usable again, and says so only once
            v = s.begin()
            s.put("Q", bytes(UNIT), uow=v)
            s.commit(v)
        assert [t for a, t in lines if a == "AMQ7464"] == [
            "The log for queue manager 'QM' is no longer full."]
        assert len([a for a, _t in lines if a == "AMQ7463"]) == 1
    finally:
        s.close()


def test_a_record_larger_than_the_log_is_log_full_and_nothing_of_the_put_is_done(
        tmp_path: Path) -> None:
    """Something else real: a record no checkpoint can make room for. LogFullError (the
    network service answers it MQRC 2102), nothing of the put done, the unit goes on."""
    s, _lines = _store(tmp_path, background=False)
    try:
        u = s.begin()
        s.put("Q", bytes(100), uow=u)
        checkpoints = s.checkpoint_seconds.count
        with pytest.raises(LogFullError) as info:
            s.put("Q", bytes(2_000_000), uow=u)  # larger than the whole log
        assert "for a record of" in str(info.value) and "MAXMSGL" in str(info.value)
        assert s.checkpoint_seconds.count == checkpoints  # none could make room
        s.commit(u)
        assert s.get("Q").body == bytes(100)  # type: ignore[union-attr]
        assert s.get("Q") is None
        assert s.failure is None
    finally:
        s.close()


def test_the_log_keeps_pages_back_for_the_records_that_make_room(tmp_path: Path) -> None:
    """Ordinary records stop short of the last pages before the cap; a checkpoint's
    record (append_reserved) still goes in, so a log full to ordinary records can
    always take the checkpoint that frees it. ``reclaimable`` says whether moving the
    restart point somewhere frees room."""
    vol = PosixVolume(str(tmp_path / "log"))
    RecoveryLog.create(vol, SMALL)
    log = RecoveryLog.open(vol, SMALL, generation=1)
    list(log.records(log.first_lsn()))
    first = log.append_and_force(b"the restart point")
    with pytest.raises(LogFullError) as info:
        while True:
            log.append(bytes(3000))
    assert "a long-running unit of work holds it" in str(info.value)
    head = log.end_lsn()
    cap = (SMALL.primary_files + SMALL.secondary_files) * log.pages_per_extent
    assert F.lsn_page(head) < cap - 4  # the reserve is left
    cp = log.append_reserved(b"CHECKPOINT" * 100)
    log.force(cp)
    assert not log.reclaimable(first)  # the same extent: nothing freed
    assert log.reclaimable(cp)
    log.set_restart_lsn(cp)
    log.append_and_force(bytes(3000))  # room again
    log.close()


def test_a_restart_after_the_log_filled_can_still_undo_the_unit_holding_it(
        tmp_path: Path) -> None:
    """A unit fills the log (AMQ7469 switched off) and the queue manager dies. Restart's
    undo writes a compensation record per operation and a BACKOUT, then the open's
    checkpoint: they end units, so they may use the pages kept back from ordinary
    records (as all of the log was theirs before that reserve); without that the queue
    manager could not start again."""
    tuning = StoreTuning(uow_log_space_limit=5.0)
    s, _lines = _store(tmp_path, background=False, tuning=tuning)
    u = s.begin()
    puts = 0
    with pytest.raises(LogFullError):
        while True:
            s.put("Q", bytes(3000), uow=u)
            puts += 1
    assert puts > 200
    s.log.force(s.log.end_lsn())  # every put durable: the unit is in flight at the crash
    s._closed = True  # the process dies: no shutdown checkpoint, nothing closed cleanly
    s._close_files()
    lines: list[tuple[str, str]] = []
    again = QueueManagerStore.open(PosixVolume(str(tmp_path / "data")),
                                   PosixVolume(str(tmp_path / "log")), "QM", SMALL, tuning,
                                   generation=2, background=False,
                                   errlog=lambda a, t: lines.append((a, t)))
    try:
        assert again.recovery_stats["rolled_back"] == 1
        assert again.get("Q") is None  # the unit's messages are gone with it
        v = again.begin()
        again.put("Q", bytes(UNIT), uow=v)  # and the log takes records again
        again.commit(v)
    finally:
        again.close()
