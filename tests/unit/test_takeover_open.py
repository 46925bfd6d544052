"""A takeover's open (issue 22): it serves before its checkpoint, which the checkpoint
thread takes a moment later, and a crash in between loses nothing; the log has room
and the data volume takes a write first, else the open checkpoints as before; replay
redoes a unit of one put and its COMMIT as one committed put. Real log and data
directories."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lockfs.faults import FaultyVolume
from lockfs.posix import PosixVolume
from lockfs.volume import Volume
from miqm.store import checkpoint as ckpt
from miqm.store import qmstore
from miqm.store.qmstore import QueueManagerStore
from miqm.store.settings import StoreTuning
from tests.unit.test_checkpoint_concurrency import SETTINGS, _create, _drain, _put_committed
from tests.waiting import wait_until


def _open(root: Path, generation: int, *, background: bool = False,
          defer: bool = False) -> QueueManagerStore:
    return QueueManagerStore.open(
        PosixVolume(str(root / "data")), PosixVolume(str(root / "log")), "QM", SETTINGS,
        StoreTuning(checkpoint_log_recd_max=1_000_000), generation=generation,
        background=background, defer_checkpoint=defer)


def _crash(store: QueueManagerStore) -> None:
    """kill -9 as far as the files are concerned: the log forced to its end, no
    shutdown checkpoint, and the checkpoint thread (if any) stopped before it takes one."""
    store.log.force(store.log.end_lsn())
    store._stop.set()
    store._cp_kick.set()
    if store._cp_thread is not None:
        store._cp_thread.join(10)
    store._closed = True
    store._close_files()


def _checkpoint_seq(root: Path) -> int:
    return ckpt.read(PosixVolume(str(root / "data"))).seq


def test_a_takeover_serves_before_its_checkpoint_and_a_crash_then_loses_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(qmstore, "_INDEX_DELAY", 3600.0)  # the deferred one never comes
    _create(tmp_path)
    s1 = _open(tmp_path, 1)
    s1.define_queue("Q", MAXDEPTH=1000)
    bodies = [b"m%02d" % i for i in range(30)]
    _put_committed(s1, "Q", bodies[:20])
    s1.checkpoint()
    _put_committed(s1, "Q", bodies[20:])  # in the log only
    inflight = s1.begin()
    assert s1.get("Q", uow=inflight).body == b"m00"  # locked, then backed out by restart
    s1.put("Q", b"never", persistent=True, uow=inflight)
    _crash(s1)
    seq = _checkpoint_seq(tmp_path)

    s2 = _open(tmp_path, 2, background=True, defer=True)
    assert s2.recovery_stats["checkpoint"] == "deferred"
    assert _checkpoint_seq(tmp_path) == seq  # serving, with no checkpoint written
    assert not os.path.exists(tmp_path / "data" / qmstore.SPACE_PROBE)
    again = s2.begin()
    assert again.txid > inflight.txid  # a txid of the log is never handed out again
    assert s2.get("Q", uow=again).body == b"m00"  # the backed-out get's message
    s2.commit(again)
    _put_committed(s2, "Q", [b"after"])
    _crash(s2)  # before its checkpoint: the next open replays both instances' records

    s3 = _open(tmp_path, 3)
    assert s3.recovery_stats["checkpoint"] == "taken"
    assert _drain(s3, "Q") == [*bodies[1:], b"after"]
    s3.close()


def test_the_deferred_checkpoint_is_taken_by_the_checkpoint_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(qmstore, "_INDEX_DELAY", 0.05)
    _create(tmp_path)
    s1 = _open(tmp_path, 1)
    s1.define_queue("Q")
    _put_committed(s1, "Q", [b"a", b"b"])
    _crash(s1)
    seq = _checkpoint_seq(tmp_path)
    s2 = _open(tmp_path, 2, background=True, defer=True)
    assert s2.recovery_stats["checkpoint"] == "deferred"
    wait_until(lambda: _checkpoint_seq(tmp_path) > seq, "the deferred checkpoint", 30)
    _crash(s2)
    s3 = _open(tmp_path, 3)
    assert s3.recovery_stats["records"] <= 2  # replayed from the deferred checkpoint on
    assert _drain(s3, "Q") == [b"a", b"b"]
    s3.close()


def test_the_open_checkpoints_itself_when_the_log_is_full_or_the_volume_has_no_room(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _create(tmp_path)
    s = _open(tmp_path, 1)
    s.define_queue("Q")
    _put_committed(s, "Q", [b"a"])
    _crash(s)

    def reopen(generation: int, data: Volume | None = None) -> QueueManagerStore:
        seq = _checkpoint_seq(tmp_path)
        store = QueueManagerStore.open(
            data or PosixVolume(str(tmp_path / "data")), PosixVolume(str(tmp_path / "log")),
            "QM", SETTINGS, StoreTuning(), generation=generation, background=True,
            defer_checkpoint=True)
        taken = store.recovery_stats["checkpoint"] == "taken"
        assert taken == (_checkpoint_seq(tmp_path) > seq)
        _crash(store)
        return store

    with monkeypatch.context() as m:
        m.setattr(qmstore, "_DEFER_LOG_USAGE", 0.0)  # "the log is half full"
        assert reopen(2).recovery_stats["checkpoint"] == "taken"
    with monkeypatch.context() as m:
        m.setattr(qmstore, "_SPACE_MIN", 1 << 62)  # more than statvfs finds free
        assert reopen(3).recovery_stats["checkpoint"] == "taken"
    # a backend that cannot tell its free space: the probe write decides
    unknown = FaultyVolume(PosixVolume(str(tmp_path / "data")), [])
    assert unknown.available_bytes() is None
    assert reopen(4, unknown).recovery_stats["checkpoint"] == "deferred"
    assert not os.path.exists(tmp_path / "data" / qmstore.SPACE_PROBE)
    with monkeypatch.context() as m:  # the probe cannot be written: its directory is gone
        m.setattr(qmstore, "SPACE_PROBE", "no-such-directory/probe")
        assert reopen(5, unknown).recovery_stats["checkpoint"] == "taken"
    assert reopen(6).recovery_stats["checkpoint"] == "deferred"
    s = _open(tmp_path, 7, background=False, defer=True)  # no thread to take it later
    assert s.recovery_stats["checkpoint"] == "taken"
    assert _drain(s, "Q") == [b"a"]
    s.close()


def test_replay_redoes_one_put_units_as_committed_and_the_rest_as_before(
        tmp_path: Path) -> None:
    _create(tmp_path)
    s = _open(tmp_path, 1)
    s.define_queue("Q", MAXDEPTH=1000)
    s.define_queue("R")
    s.checkpoint()
    inflight = s.begin()  # the lowest txid; its record comes last
    _put_committed(s, "Q", [b"one%d" % i for i in range(50)])
    two = s.begin()  # two puts, one COMMIT: not a unit of one put
    s.put("Q", b"two-a", persistent=True, uow=two)
    s.put("R", b"two-b", persistent=True, uow=two)
    s.commit(two)
    backed = s.begin()
    s.put("Q", b"backed", persistent=True, uow=backed)
    s.backout(backed)
    last = s.begin()  # the highest txid, a unit of one put
    s.put("Q", b"last", persistent=True, uow=last)
    s.commit(last)
    s.put("Q", b"inflight", persistent=True, uow=inflight)
    _crash(s)
    s = _open(tmp_path, 2)
    assert s.recovery_stats["rolled_back"] == 1
    assert s.begin().txid > last.txid  # never handed out again
    assert _drain(s, "Q") == [b"one%d" % i for i in range(50)] + [b"two-a", b"last"]
    assert _drain(s, "R") == [b"two-b"]
    s.close()


def test_a_takeover_leaves_committed_puts_to_their_queues_first_use_and_loses_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(qmstore, "_INDEX_DELAY", 3600.0)  # no checkpoint but the test's
    _create(tmp_path)
    s1 = _open(tmp_path, 1)
    for name in ("A", "B", "C"):
        s1.define_queue(name, MAXDEPTH=1000)
    s1.checkpoint()
    a = [b"a%02d" % i for i in range(10)]
    b = [b"b%02d" % i for i in range(10)]
    _put_committed(s1, "A", a)
    s1.put("B", b[0], persistent=True)  # outside syncpoint: a committed put too
    _put_committed(s1, "B", b[1:])
    _put_committed(s1, "C", [b"c0", b"c1"])
    assert s1.get("C").body == b"c0"  # a GET record: C's puts before it are applied first
    unit = s1.begin()  # two puts, one COMMIT: replayed at once, after C's deferred ones
    s1.put("C", b"u0", persistent=True, uow=unit)
    s1.put("C", b"u1", persistent=True, uow=unit)
    s1.commit(unit)
    _put_committed(s1, "C", [b"c4"])
    _crash(s1)

    s2 = _open(tmp_path, 2, background=True, defer=True)
    assert s2.recovery_stats["deferred_puts"] == 21
    assert s2.state.queues.deferred_counts() == {"A": 10, "B": 10, "C": 1}
    assert _drain(s2, "A") == a  # its first use applies A's records, and only A's
    assert s2.state.queues.deferred_counts() == {"B": 10, "C": 1}
    s2.checkpoint()  # applies B's and C's first: the log before it is not replayed again
    assert s2.state.queues.deferred_counts() == {}
    _crash(s2)

    s3 = _open(tmp_path, 3)
    assert _drain(s3, "A") == []
    assert _drain(s3, "B") == b
    assert _drain(s3, "C") == [b"c1", b"u0", b"u1", b"c4"]
    s3.close()


def test_a_queue_deleted_or_listed_after_a_takeover_sees_its_deferred_puts(
        tmp_path: Path) -> None:
    _create(tmp_path)
    s1 = _open(tmp_path, 1)
    s1.define_queue("GONE")
    s1.define_queue("LISTED")
    s1.checkpoint()
    _put_committed(s1, "GONE", [b"g"])
    _put_committed(s1, "LISTED", [b"l0", b"l1"])
    _crash(s1)
    s2 = _open(tmp_path, 2, background=True, defer=True)
    assert s2.state.queues.deferred_counts() == {"GONE": 1, "LISTED": 2}
    with pytest.raises(Exception, match="AMQ8143"):
        s2.delete_queue("GONE")  # a queue holding a message, as without deferring
    assert s2.state.queues.deferred_counts() == {"LISTED": 2}
    depths = {n: q.depth for n, q in s2.state.queues.items()}  # a listing applies all
    assert depths == {"GONE": 1, "LISTED": 2}
    assert s2.state.queues.deferred_counts() == {}
    s2.close()


def test_a_put_that_ends_a_batch_of_records_is_carried_to_the_next() -> None:
    """The replay meets a unit of one put with its COMMIT in one list, however the log
    reader cut its records into lists (the pure-Python one: one record a list)."""
    from miqm.store import records as R
    from miqm.store.recovery import _put_carried

    def rec(lsn: int, kind: int) -> tuple[int, int, bytes, int]:
        return (lsn, 1, bytes([kind]) + bytes(8), lsn + 1)

    p1, c1, x, p2, c2, p3 = (rec(1, R.PUT), rec(2, R.COMMIT), rec(3, R.GET),
                             rec(4, R.PUT), rec(5, R.COMMIT), rec(6, R.PUT))
    got = list(_put_carried([[p1], [c1], [x, p2], [c2, p3]], R.PUT))
    assert got == [[p1, c1], [x], [p2, c2], [p3]]
    assert list(_put_carried([[p1], [p3]], R.PUT)) == [[p1], [p3]]  # in order, once each
    assert list(_put_carried([], R.PUT)) == []
