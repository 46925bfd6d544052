"""Unit tests of the store's pure parts (records, index, units of work, checkpoint file)
and of QueueManagerStore over an in-memory log (tests/unit/test_store_fakelog.py) on a
real data directory: commit/backout/prepare across restarts, restart interrupted in undo,
AMQ7469, queue attributes and MQI semantics."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import pytest

from lockfs.posix import PosixVolume
from miqm.errors import MessagingError, ObjectError, StoreError
from miqm.store import checkpoint as ckpt
from miqm.store import records as R
from miqm.store.qmstore import QueueManagerStore
from miqm.store.queues import FORMAT_1, FORMAT_2, PriorityIndex
from miqm.store.settings import LogSettings, StoreTuning
from tests.unit.test_store_fakelog import FakeLog
from tests.waiting import wait_until

SETTINGS = LogSettings(file_pages=64, primary_files=2, secondary_files=1)


# -- records --------------------------------------------------------------------------
def test_put_record_round_trip() -> None:
    p = R.encode_put(7, "Q.A", 42, 5, 1.5, b"m" * 24, b"c" * 24, b"body")
    r = R.decode(p, lsn=99)
    assert (r.type, r.txid, r.queue, r.key, r.priority, r.put_time) == (R.PUT, 7, "Q.A", 42,
                                                                          5, 1.5)
    assert (r.msgid, r.correlid, r.body, r.lsn) == (b"m" * 24, b"c" * 24, b"body", 99)


def test_other_records_round_trip() -> None:
    assert R.decode(R.encode_get(3, "Q", 9)).key == 9
    assert R.decode(R.encode_end(R.COMMIT, 3)).type == R.COMMIT
    assert R.decode(R.encode_prepare(3, "X.1")).xid == "X.1"
    c = R.decode(R.encode_clr(3, "G", "Q", 9))
    assert (c.type, c.kind, c.queue, c.key) == (R.CLR, "G", "Q", 9)
    carry = R.decode(R.encode_json(R.CARRY, {"xid": "x", "ops": [["P", "Q", 1]]}, 4))
    assert carry.ops == [("P", "Q", 1)] and carry.txid == 4
    d = R.decode(R.encode_json(R.DEFINE, {"name": "Q", "qid": 5, "attrs": {"MAXDEPTH": 1}}))
    assert (d.queue, d.qid, d.attrs) == ("Q", 5, {"MAXDEPTH": 1})


def test_truncated_record_is_a_store_error() -> None:
    p = R.encode_put(1, "Q", 1, 0, 0.0, bytes(24), bytes(24), b"x" * 100)
    with pytest.raises(StoreError):
        R.decode(p[:-10])
    with pytest.raises(StoreError):
        R.decode(bytes([99]) + bytes(8))


def test_queue_record_is_whole_blocks() -> None:
    rec = FORMAT_1.encode(1, 1, 1, 0, True, 0.0, bytes(24), bytes(24), b"x" * 1024)
    assert len(rec) % 512 == 0 and len(rec) == 1536
    # format 2: an 8-byte message takes three 32-byte blocks; a correlid adds 24 bytes
    rec = FORMAT_2.encode(1, 1, 1, 0, True, 0.0, b"m" * 24, bytes(24), b"8 bytes!")
    assert len(rec) == 96 and FORMAT_2.blocks_for(FORMAT_2.stored_len(8, bytes(24))) == 3
    assert FORMAT_2.stored_len(8, b"c" * 24) == 32 and FORMAT_2.blocks_for(32) == 4


# -- index ----------------------------------------------------------------------------
def test_index_orders_priority_then_fifo_and_tombstones() -> None:
    ix = PriorityIndex()
    for key, prio in [(1, 0), (2, 5), (3, 0), (4, 5), (5, 9)]:
        ix.add(key, prio, -1, 10)
    order = [ix.keys[p][i] for p, i in ix.iter_order()]
    assert order == [5, 2, 4, 1, 3]
    p, i = ix.find(2)  # type: ignore[misc]
    ix.remove(p, i)
    assert ix.find(2) is None
    assert [ix.keys[p][i] for p, i in ix.iter_order()] == [5, 4, 1, 3]
    ix.add(0, 0, -1, 1)  # an out-of-order key (replay) is inserted in place
    assert [ix.keys[p][i] for p, i in ix.iter_order()][-3:] == [0, 1, 3]


# -- checkpoint file --------------------------------------------------------------------
def test_checkpoint_file_round_trip_and_corruption(tmp_path: Path) -> None:
    vol = PosixVolume(str(tmp_path))
    info = ckpt.CheckpointInfo(seq=3, cp_lsn=100, restart_lsn=50, queues={"Q": 2})
    ckpt.write(vol, info)
    assert ckpt.read(vol) == info
    raw = bytearray((tmp_path / ckpt.NAME).read_bytes())
    raw[-2] ^= 0xFF
    (tmp_path / ckpt.NAME).write_bytes(bytes(raw))
    with pytest.raises(StoreError, match=r"amqalchk\.fil is corrupt"):
        ckpt.read(vol)


# -- the store over an in-memory log ---------------------------------------------------
class Harness:
    """A data directory plus a fake log that can 'crash' (keep only forced records)."""

    def __init__(self, tmp: Path, tuning: StoreTuning | None = None) -> None:
        self.dir = tmp
        self.data = PosixVolume(str(tmp))
        self.data.makedirs("queues")
        ckpt.write(self.data, ckpt.CheckpointInfo())
        self.log = FakeLog()
        self.tuning = tuning or StoreTuning()
        self.lines: list[tuple[str, str]] = []
        self.gen = 0

    def open(self) -> QueueManagerStore:
        self.gen += 1
        return QueueManagerStore.open(
            self.data, None, "QM", SETTINGS, self.tuning, generation=self.gen,
            recovery_log=self.log, errlog=lambda a, t: self.lines.append((a, t)),
            background=False)

    def crash(self, store: QueueManagerStore) -> QueueManagerStore:
        """Drop the store without a shutdown checkpoint; keep only the forced log."""
        store._closed = True
        store._close_files()
        self.log = self.log.crashed()
        return self.open()


def drain(store: QueueManagerStore, q: str = "Q") -> list[bytes]:
    out = []
    while (m := store.get(q)) is not None:
        out.append(m.body)
    return out


def test_commit_backout_prepare_survive_crash(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    s = h.open()
    s.define_queue("Q", MAXDEPTH=100)
    s.put("Q", b"auto", persistent=True)
    s.put("Q", b"np", persistent=False)
    c = s.begin()
    s.put("Q", b"committed", persistent=True, uow=c)
    s.commit(c)
    b = s.begin()
    s.put("Q", b"backedout", persistent=True, uow=b)
    s.backout(b)
    inflight = s.begin()
    s.put("Q", b"inflight", persistent=True, uow=inflight)
    p = s.begin()
    s.put("Q", b"prepared", persistent=True, uow=p)
    xid = s.prepare(p)
    s.checkpoint()
    g = s.begin()
    assert s.get("Q", uow=g).body == b"auto"  # an uncommitted get: restored by restart
    s2 = h.crash(s)
    assert s2.in_doubt() == [xid]
    assert s2.queue_attrs("Q")["CURDEPTH"] == 3  # auto, committed, prepared (uncommitted)
    assert drain(s2) == [b"auto", b"committed"]
    s2.resolve(xid, commit=True)
    assert drain(s2) == [b"prepared"]
    assert any(a == "AMQ7229" for a, _ in h.lines)
    s2.close()


def test_in_doubt_survives_several_restarts_then_backout(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    s = h.open()
    s.define_queue("Q")
    p = s.begin()
    s.put("Q", b"x", persistent=True, uow=p)
    xid = s.prepare(p)
    for _ in range(3):
        s = h.crash(s)
        assert s.in_doubt() == [xid]
        s.checkpoint()
    s.resolve(xid, commit=False)
    assert drain(s) == []
    s = h.crash(s)
    assert s.in_doubt() == [] and drain(s) == []


def test_restart_interrupted_during_undo_resumes_with_clrs(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    s = h.open()
    s.define_queue("Q")
    for i in range(5):
        s.put("Q", b"m%d" % i, persistent=True)
    u = s.begin()
    for _ in range(3):
        s.get("Q", uow=u)
    s.put("Q", b"new", persistent=True, uow=u)
    s.log.force(s.log.end_lsn())  # the unit's records are durable, its end is not
    s._closed = True
    # restart 1 fails after writing two CLRs (everything appended counts as durable)
    h.log.forced = h.log.next
    h.log.fail_after = 2
    with pytest.raises(OSError):
        h.open()
    clrs = [r for r in h.log.records(0) if R.decode(r.payload).type == R.CLR]
    assert len(clrs) == 2
    h.log.fail_after = None
    h.log.forced = h.log.next
    s2 = h.open()
    recs = [R.decode(r.payload) for r in h.log.records(0)]
    undone = [(r.kind, r.key) for r in recs if r.type == R.CLR]
    assert len(undone) == 4 and len(set(undone)) == 4  # each operation undone once
    assert drain(s2) == [b"m0", b"m1", b"m2", b"m3", b"m4"]


def test_nonpersistent_gone_after_restart_and_never_logged(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    s = h.open()
    s.define_queue("Q", DEFPSIST="NO")
    before = len(h.log.recs)
    s.put("Q", b"np")
    assert len(h.log.recs) == before
    s.close()
    s = h.open()
    assert drain(s) == []


def test_priorities_msgid_correlid_browse(tmp_path: Path) -> None:
    s = Harness(tmp_path).open()
    s.define_queue("Q", DEFPSIST="YES")
    a = s.put("Q", b"low1", priority=1)
    s.put("Q", b"high", priority=8, correlid=b"C1")
    s.put("Q", b"low2", priority=1, msgid=b"MINE")
    assert s.get("Q", browse=True).body == b"high"
    assert s.get("Q", msgid=b"MINE").body == b"low2"
    assert s.get("Q", correlid=b"C1").body == b"high"
    assert s.get("Q", msgid=a).body == b"low1"
    assert s.get("Q") is None


def test_limits_maxdepth_maxumsgs_inhibit(tmp_path: Path) -> None:
    s = Harness(tmp_path, StoreTuning(max_umsgs=2)).open()
    s.define_queue("Q", MAXDEPTH=2)
    s.put("Q", b"1")
    s.put("Q", b"2")
    with pytest.raises(MessagingError) as e:
        s.put("Q", b"3")
    assert e.value.mqrc == 2053
    s.define_queue("R")
    u = s.begin()
    s.put("R", b"a", uow=u)
    s.put("R", b"b", uow=u)
    with pytest.raises(MessagingError) as e:
        s.put("R", b"c", uow=u)
    assert e.value.mqrc == 2024
    s.alter_queue("R", PUT="DISABLED")
    with pytest.raises(MessagingError) as e:
        s.put("R", b"d")
    assert e.value.mqrc == 2051
    with pytest.raises(MessagingError) as e:
        s.put("NOPE", b"x")
    assert e.value.mqrc == 2085
    with pytest.raises(ObjectError):
        s.define_queue("Q")
    with pytest.raises(ObjectError):
        s.delete_queue("Q")  # not empty
    s.delete_queue("Q", purge=True)
    assert [q["QUEUE"] for q in s.list_queues()] == ["R"]


def test_definitions_persist_across_restart(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    s = h.open()
    s.define_queue("A", MAXDEPTH=7, DESCR="first", DEFPSIST="YES")
    s.define_queue("B")
    s.checkpoint()
    s.alter_queue("A", MAXDEPTH=9)
    s.delete_queue("B")
    s.set_qmgr_attrs(MAXUMSGS=55)
    s = h.crash(s)
    a = s.queue_attrs("A")
    assert (a["MAXDEPTH"], a["DESCR"], a["DEFPSIST"]) == (9, "first", "YES")
    assert [q["QUEUE"] for q in s.list_queues()] == ["A"]
    assert s.qmgr_attrs()["MAXUMSGS"] == 55
    s.close()
    assert not (tmp_path / "queues" / "B").exists()


def test_get_wait_is_handed_a_put(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    s = h.open()
    s.define_queue("Q", DEFPSIST="YES")
    got: list[bytes] = []
    t = threading.Thread(target=lambda: got.append(s.get("Q", wait=5).body))
    t.start()
    wait_until(lambda: s._waiters.get("Q"), "the getter waiting on Q")
    before = len(h.log.recs)
    s.put("Q", b"direct")
    t.join(5)
    assert got == [b"direct"]
    assert len(h.log.recs) == before  # handed over: never on the queue, nothing logged
    assert s.queue_attrs("Q")["CURDEPTH"] == 0


def test_get_wait_under_syncpoint_woken_by_commit(tmp_path: Path) -> None:
    s = Harness(tmp_path).open()
    s.define_queue("Q", DEFPSIST="YES")
    got: list[bytes] = []

    def getter() -> None:
        u = s.begin()
        m = s.get("Q", wait=5, uow=u)
        s.commit(u)
        got.append(m.body)

    t = threading.Thread(target=getter)
    t.start()
    wait_until(lambda: s._sleepers > 0, "the getter waiting on Q")
    p = s.begin()
    s.put("Q", b"late", uow=p)
    t.join(0.1)  # an uncommitted put must not wake it with the message
    assert got == []
    s.commit(p)
    t.join(5)
    assert got == [b"late"]


def test_amq7469_rolls_back_oldest_and_rolls_forward_prepared(tmp_path: Path) -> None:
    h = Harness(tmp_path, StoreTuning(uow_log_space_limit=0.1))
    s = h.open()
    cap = s._capacity
    s.define_queue("Q", DEFPSIST="YES", MAXDEPTH=100000)
    old = s.begin()
    s.put("Q", b"old", uow=old)
    prep = s.begin()
    s.put("Q", b"prep", uow=prep)
    xid = s.prepare(prep, owner="app1")
    body = b"z" * 4000
    for _ in range(int(cap * 0.15 / 4000) + 2):
        s.put("Q", body)
    with pytest.raises(MessagingError) as e:
        s.put("Q", b"more", uow=old)
    assert e.value.mqrc == 2003
    assert any(a == "AMQ7469" and "rolled back" in t for a, t in h.lines)
    assert any(a == "AMQ7469" and "rolled forward" in t for a, t in h.lines)
    assert s.log_space_backouts == 2  # the metric miqm_log_space_backouts_total
    assert s.in_doubt() == [xid]
    first = s.state.uows.by_xid[xid].first_lsn
    assert first is not None and s.log.end_lsn() - first < cap * 0.1
    s = h.crash(s)
    assert s.in_doubt() == [xid]
    assert s.unit_owner(xid) == "app1"  # from the CARRY record: the PREPARE is not read
    s.resolve(xid, commit=True)
    bodies = drain(s)
    assert b"prep" in bodies and b"old" not in bodies


def test_queue_file_shrinks_when_oversized(tmp_path: Path) -> None:
    s = Harness(tmp_path).open()
    s.define_queue("Q", DEFPSIST="YES", MAXDEPTH=10000)
    for _ in range(200):
        s.put("Q", b"x" * 1000)
    s.checkpoint()
    big = (tmp_path / "queues/Q/q").stat().st_size
    drain(s)
    s.checkpoint()  # marks deletions
    s.checkpoint()  # the freed tail is now reusable, so it is cut
    small = (tmp_path / "queues/Q/q").stat().st_size
    assert big > 200 * 1024 and small <= 8192


def test_corrupt_queue_file_is_one_clear_line(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    s = h.open()
    s.define_queue("Q", DEFPSIST="YES")
    s.put("Q", b"x")
    s.close()
    (tmp_path / "queues/Q/q").write_bytes(b"garbage" * 1000)
    s = h.open()
    with pytest.raises(StoreError, match=r"queues/Q/q is corrupt"):
        s.get("Q")
    assert any("queues/Q/q is corrupt" in t for _, t in h.lines)


def test_message_bodies_leave_memory_at_checkpoint(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    s = h.open()
    s.define_queue("Q", DEFPSIST="YES", MAXDEPTH=10000)
    for i in range(300):
        s.put("Q", b"%d" % i, priority=i % 10)
    s.checkpoint()
    assert not s.state.queues["Q"].mem
    s = h.crash(s)
    bodies = drain(s)
    assert len(bodies) == 300 and bodies[0] == b"9"


def test_full_disk_at_checkpoint_is_clear_and_loses_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from lockfs.errors import VolumeIOError
    from lockfs.posix import PosixFile

    h = Harness(tmp_path)
    s = h.open()
    s.define_queue("Q", DEFPSIST="YES")
    for i in range(5):
        s.put("Q", b"m%d" % i)
    real = PosixFile.pwrite

    def full(self: PosixFile, data: bytes, offset: int) -> None:
        if "/queues/" in self.path:
            raise VolumeIOError(f"write {self.path}: No space left on device",
                                errno=errno.ENOSPC)
        real(self, data, offset)

    monkeypatch.setattr(PosixFile, "pwrite", full)
    assert s.failure is None
    with pytest.raises(StoreError, match="checkpoint of queue manager 'QM' failed"):
        s.checkpoint()
    assert "No space left on device" in str(s.failure)  # what the HA monitor reads
    with pytest.raises(StoreError, match="stopped after a failure"):
        s.put("Q", b"after")
    monkeypatch.setattr(PosixFile, "pwrite", real)
    s = h.crash(s)
    assert drain(s) == [b"m%d" % i for i in range(5)]


LINEAR = LogSettings(log_type="LINEAR", file_pages=64, primary_files=2, secondary_files=1)


def test_media_image_recreates_a_deleted_queue_file(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.settings = LINEAR
    s = QueueManagerStore.open(h.data, None, "QM", LINEAR, h.tuning, generation=1,
                               recovery_log=h.log, background=False)
    s.define_queue("Q", DEFPSIST="YES")
    for i in range(6):
        s.put("Q", b"m%d" % i)
    s.record_image("Q")
    assert s.get("Q").body == b"m0"
    s.put("Q", b"after-image")
    u = s.begin()
    s.put("Q", b"uncommitted", uow=u)
    s.checkpoint()
    (tmp_path / "queues/Q/q").unlink()
    s.recreate_object("Q")
    s.commit(u)
    assert drain(s) == [b"m1", b"m2", b"m3", b"m4", b"m5", b"after-image", b"uncommitted"]


def test_queue_file_lost_while_down_is_damaged_until_recreated(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    s = QueueManagerStore.open(h.data, None, "QM", LINEAR, h.tuning, generation=1,
                               recovery_log=h.log, background=False)
    s.define_queue("Q", DEFPSIST="YES")
    s.put("Q", b"a")
    s.record_image("Q")
    s.put("Q", b"b")
    s.close()
    (tmp_path / "queues/Q/q").unlink()
    lines: list[str] = []
    s = QueueManagerStore.open(h.data, None, "QM", LINEAR, h.tuning, generation=2,
                               recovery_log=h.log, background=False,
                               errlog=lambda a, t: lines.append(t))
    assert any("damaged" in t for t in lines)
    with pytest.raises(StoreError, match="rcrmqobj"):
        s.get("Q")
    s.recreate_object("Q")
    assert drain(s) == [b"a", b"b"]
    with pytest.raises(ObjectError):
        Harness(tmp_path / "c").open().record_image("NOPE")


def test_concurrent_producers_and_consumers_deliver_exactly_once(tmp_path: Path) -> None:
    s = Harness(tmp_path, StoreTuning(checkpoint_log_recd_max=300)).open()
    s.define_queue("Q", DEFPSIST="YES", MAXDEPTH=100000)
    got: list[bytes] = []
    lock = threading.Lock()
    done = threading.Event()

    def producer(p: int) -> None:
        for i in range(0, 150, 3):
            u = s.begin()
            for j in range(3):
                s.put("Q", b"%d-%d" % (p, i + j), uow=u, priority=(i + j) % 10)
            s.commit(u)

    def consumer() -> None:
        while True:
            u = s.begin()
            m = s.get("Q", uow=u, wait=0.05)
            if m is None:
                s.backout(u)
                if done.is_set():
                    return
                continue
            s.commit(u)
            with lock:
                got.append(m.body)

    ps = [threading.Thread(target=producer, args=(p,)) for p in range(6)]
    cs = [threading.Thread(target=consumer) for _ in range(3)]
    for t in ps + cs:
        t.start()
    for t in ps:
        t.join()
    done.set()
    for t in cs:
        t.join()
    assert sorted(got) == sorted(b"%d-%d" % (p, i) for p in range(6) for i in range(150))
    assert s.queue_attrs("Q")["CURDEPTH"] == 0


# -- the acknowledgement fence ----------------------------------------------------------
def test_a_commit_whose_force_outlived_the_belief_is_never_acknowledged(
        tmp_path: Path) -> None:
    """A pause between the write guard and the write (SIGSTOP, a stalled NFS call) can
    make a force land after the belief expired, when another instance may own the data:
    the commit must not report success, and the store must stop."""
    from miqm.errors import OwnershipLostError

    data, logv = PosixVolume(str(tmp_path / "d")), PosixVolume(str(tmp_path / "l"))
    (tmp_path / "d").mkdir()
    (tmp_path / "l").mkdir()
    QueueManagerStore.create(data, logv, "QM", SETTINGS)
    owned = [True]

    def guard() -> None:
        if not owned[0]:
            raise OwnershipLostError("the master lock is another instance's now")

    st = QueueManagerStore.open(data, logv, "QM", SETTINGS, StoreTuning(), generation=1,
                                write_guard=guard, background=False)
    st.define_queue("Q")
    force = st.log.force

    def force_then_lose(lsn: int) -> None:
        force(lsn)  # the guard before the write passed; the belief expires meanwhile
        owned[0] = False

    st.log.force = force_then_lose  # type: ignore[method-assign]
    uow = st.begin()
    st.put("Q", b"late", persistent=True, uow=uow)
    with pytest.raises(OwnershipLostError):
        st.commit(uow)
    with pytest.raises(StoreError):  # fail-stop: nothing more is accepted
        st.put("Q", b"after", persistent=True)
    with contextlib.suppress(OwnershipLostError):  # closing writes nothing unowned either
        st.log.close()


def test_a_checkpoint_writes_a_deep_queue_in_bounded_runs(tmp_path: Path) -> None:
    """Thousands of contiguous records go to the queue file in runs of at most a few MiB
    (not one buffer the size of the queue), and all of them read back after a crash."""
    from miqm.store import qmstore

    h = Harness(tmp_path, StoreTuning(max_umsgs=100_000, uow_log_space_limit=1000.0))
    store = h.open()
    store.define_queue("Q", MAXDEPTH=100_000)
    store.put("Q", b"seed", persistent=True)  # the queue has a file from here
    store.checkpoint()
    u = store.begin()
    bodies = [bytes([i % 251]) * 1024 for i in range(9500)]  # about 10 MiB of records
    for b in bodies:
        store.put("Q", b, persistent=True, uow=u)
    store.commit(u)
    q = store.state.queues["Q"]
    writes: list[int] = []
    real = q.file.f.pwrite  # type: ignore[union-attr]

    def spy(data, offset):  # type: ignore[no-untyped-def]
        writes.append(len(data))
        return real(data, offset)

    q.file.f.pwrite = spy  # type: ignore[union-attr,method-assign]
    store.checkpoint()
    assert sum(writes) > 10 << 20 and len(writes) >= 3
    assert max(writes) <= qmstore._RUN_MAX + 1536
    store = h.crash(store)
    assert drain(store) == [b"seed", *bodies]


def test_a_unit_begun_late_in_an_extent_is_rolled_back_before_the_log_fills(
        tmp_path: Path) -> None:
    """The log fills by whole extents from the one holding the restart point: a unit
    whose first record sits late in an extent pins all of that extent. AMQ7469 must roll
    it back before the log is full (AMQ7463), not only once it pins 80% of all extents
    counted from its own first record."""
    settings = LogSettings(file_pages=64, primary_files=2, secondary_files=1)
    (tmp_path / "data").mkdir()
    (tmp_path / "log").mkdir()
    data, log = PosixVolume(str(tmp_path / "data")), PosixVolume(str(tmp_path / "log"))
    QueueManagerStore.create(data, log, "QM", settings)
    lines: list[tuple[str, str]] = []
    store = QueueManagerStore.open(data, log, "QM", settings, StoreTuning(), generation=1,
                                   background=False, errlog=lambda a, t: lines.append((a, t)))
    store.define_queue("Q", DEFPSIST="YES", MAXDEPTH=100_000)
    extent = store.log.extent_bytes
    while store.log.end_lsn() % extent < extent * 0.9:  # late in the current extent
        store.put("Q", b"f" * 500)
        store.get("Q")
    pinning = store.begin()
    store.put("Q", b"pins the log", uow=pinning)
    for _ in range(int(3 * extent / 1200)):  # three extents of traffic
        store.put("Q", b"t" * 1000)
        store.get("Q")
    with pytest.raises(MessagingError) as e:
        store.commit(pinning)
    assert e.value.mqrc == 2003
    assert any(a == "AMQ7469" for a, _ in lines)
    store.close()


def test_get_many_reads_runs_of_file_records_and_checks_each(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lockfs.posix import PosixFile

    h = Harness(tmp_path)
    s = h.open()
    s.define_queue("Q", DEFPSIST="YES", MAXDEPTH=10000)
    bodies = [b"%d-" % i + b"y" * (i * 37 % 3000) for i in range(120)]
    bodies.append(b"z" * (1 << 20))  # past a run's size: read on its own
    bodies.append(b"tail")
    mids = [s.put("Q", b, correlid=b"c" if len(b) % 2 else None) for b in bodies]
    s.checkpoint()
    # gaps: every fifth message gone, its blocks free between the others
    for mid in mids[::5]:
        assert s.get("Q", msgid=mid) is not None
    s.checkpoint()
    assert not s.state.queues["Q"].mem  # every body is in the queue file now
    want = [b for i, b in enumerate(bodies) if i % 5]
    reads: list[int] = []
    real = PosixFile.pread

    def counted(self: PosixFile, n: int, offset: int) -> bytes:
        if "/queues/" in self.path:
            reads.append(n)
        return real(self, n, offset)

    monkeypatch.setattr(PosixFile, "pread", counted)
    got: list[bytes] = []
    uow = s.begin()
    while batch := s.get_many("Q", 64, uow):
        got.extend(m.body for m in batch)
        assert all(m.persistent for m in batch)
    s.commit(uow)
    assert got == want
    assert len(reads) <= 8  # 97 records: a few runs, not one read each
    # a damaged record in the middle of a run fails the batch, and takes none of it
    monkeypatch.setattr(PosixFile, "pread", real)
    for b in bodies[:10]:
        s.put("Q", b)
    s.checkpoint()
    q = s.state.queues["Q"]
    p = next(p for p in range(10) if q.index.keys[p] and q.index.head[p] < len(q.index.keys[p]))
    block = q.index.blocks[p][q.index.head[p] + 4]
    path = tmp_path / "queues/Q/q"
    raw = bytearray(path.read_bytes())
    at = q.file.fmt.offset(block) + q.file.fmt.fixed + 2
    raw[at] ^= 0xFF
    path.write_bytes(bytes(raw))
    uow = s.begin()
    with pytest.raises(StoreError, match=r"queues/Q/q is corrupt"):
        s.get_many("Q", 64, uow)
    assert not uow.ops and not q.locked
    s.backout(uow)


def test_restart_reports_what_the_log_found_unfinished_at_its_end(tmp_path: Path) -> None:
    """The log's note of an unfinished image of its last page (RecoveryLog.torn_tail,
    tested in test_log.py) reaches the error log as AMQ1134 at restart; a clean log's
    restart writes no such line."""
    h = Harness(tmp_path)
    s = h.open()
    s.define_queue("Q")
    s.close()
    assert not any(a == "AMQ1134" for a, _t in h.lines)
    h.log.torn_tail = "page 7 (slot 1 of S0000000.LOG); the log ends at LSN 100"
    h.open().close()
    assert [t for a, t in h.lines if a == "AMQ1134"] == [
        "Queue manager 'QM' restarted from a log whose last page has an unfinished image: "
        "page 7 (slot 1 of S0000000.LOG); the log ends at LSN 100."]


def _file_records(tmp: Path, queue: str = "Q") -> list[tuple[int, int]]:
    """(file offset of the record, its stored length) of each live record in the queue's
    file, as a scan finds them."""
    from miqm.store.queues import QueueFile

    qf = QueueFile(PosixVolume(str(tmp)), queue)
    assert qf.open_existing()
    recs = [(qf.fmt.offset(r.block) + qf.fmt.fixed, r.stored) for r in qf.scan(1 << 40)]
    qf.close()
    return recs


def _harness_with_messages(tmp: Path, n: int, settings: LogSettings = SETTINGS
                           ) -> tuple[Harness, list[str]]:
    h = Harness(tmp)
    lines: list[str] = []
    s = QueueManagerStore.open(h.data, None, "QM", settings, h.tuning, generation=1,
                               recovery_log=h.log, background=False)
    s.define_queue("Q", DEFPSIST="YES")
    for i in range(n):
        s.put("Q", b"message %02d" % i + bytes(300))
    if settings.log_type == "LINEAR":
        s.record_image("Q")
    s.close()  # its checkpoint writes them into the queue file
    return h, lines


def _reopen(h: Harness, lines: list[str], settings: LogSettings = SETTINGS,
            gen: int = 2) -> QueueManagerStore:
    return QueueManagerStore.open(h.data, None, "QM", settings, h.tuning, generation=gen,
                                  recovery_log=h.log, background=False,
                                  errlog=lambda a, t: lines.append(f"{a} {t}"))


def test_a_queue_file_keeps_its_count_through_gets_puts_and_restarts(tmp_path: Path) -> None:
    """The records a checkpoint leaves live in a queue file are written in its header and
    compared by the restart's scan: through gets (delete marks), puts and restarts the
    two agree, so no healthy queue is ever reported damaged."""
    h, lines = _harness_with_messages(tmp_path, 6)
    for gen in range(2, 6):
        s = _reopen(h, lines, gen=gen)
        assert s.get("Q") is not None
        s.put("Q", b"more %d" % gen, persistent=True)
        s.put("Q", b"more %d" % gen, persistent=True)
        s.close()
    assert not [t for t in lines if "AMQ7472" in t]
    s = _reopen(h, lines, gen=9)
    assert len(drain(s)) == 6 - 4 + 8
    s.close()


def test_a_record_overwritten_in_a_queue_file_is_reported_not_dropped(tmp_path: Path
                                                                       ) -> None:
    """One byte of a message changed in its queue file (circular log): the restart finds
    its checksum wrong and one record fewer than the checkpoint left; it says so in the
    error log (AMQ7472: how many are lost) and keeps the messages that can be read. It
    used to drop the message without a word."""
    h, lines = _harness_with_messages(tmp_path, 5)
    at, _stored = _file_records(tmp_path)[2]
    path = tmp_path / "queues/Q/q"
    raw = bytearray(path.read_bytes())
    raw[at + 40] ^= 0xFF
    path.write_bytes(bytes(raw))
    s = _reopen(h, lines)
    damaged = [t for t in lines if "AMQ7472" in t]
    assert len(damaged) == 1, lines
    assert "holds 4 readable messages where its last checkpoint left 5" in damaged[0]
    assert "1 lost" in damaged[0]
    s.close()
    lines.clear()
    # reported once: the checkpoint after the report records the 4, untouched as they are
    s = _reopen(h, lines, gen=3)
    assert not [t for t in lines if "AMQ7472" in t]
    got = drain(s)
    assert len(got) == 4 and b"message 02" + bytes(300) not in got
    s.close()


def test_a_truncated_queue_file_on_a_linear_log_is_damaged_until_rcrmqobj(
        tmp_path: Path) -> None:
    """A queue file cut short (linear log): the queue is damaged (AMQ7472, naming the
    counts and rcrmqobj) rather than silently shorter, and rcrmqobj brings every
    message back from the media image and the log."""
    h, lines = _harness_with_messages(tmp_path, 5, LINEAR)
    s = _reopen(h, lines, LINEAR)
    s.put("Q", b"after the image", persistent=True)
    s.close()
    at, _stored = _file_records(tmp_path)[3]
    path = tmp_path / "queues/Q/q"
    path.write_bytes(path.read_bytes()[:at])
    lines.clear()
    s = _reopen(h, lines, LINEAR, gen=3)
    damaged = [t for t in lines if "AMQ7472" in t]
    assert len(damaged) == 1 and "where its last checkpoint left 6" in damaged[0], lines
    assert "rcrmqobj" in damaged[0]
    with pytest.raises(StoreError, match="damaged") as info:
        s.get("Q")
    assert info.value.mqrc == 2101  # type: ignore[attr-defined]  # MQRC_OBJECT_DAMAGED
    s.recreate_object("Q")
    assert len(drain(s)) == 6
    s.close()


def test_who_prepared_a_unit_survives_restarts_checkpoints_and_carry(tmp_path: Path) -> None:
    """The listener lets only the principal that prepared an in-doubt unit (or one with
    CHG on the queue manager) resolve it: that must hold on the instance that takes
    over, so the owner is in the PREPARE record and the checkpoint (and a CARRY record:
    test_amq7469_rolls_back_oldest_and_rolls_forward_prepared)."""
    assert R.decode(R.encode_prepare(3, "X.1", "app1")).owner == "app1"
    assert R.decode(R.encode_prepare(3, "X.1")).owner == ""
    h = Harness(tmp_path)
    s = h.open()
    s.define_queue("Q")
    p = s.begin()
    s.put("Q", b"x", persistent=True, uow=p)
    xid = s.prepare(p, owner="app1")
    q = s.begin()
    s.put("Q", b"y", persistent=True, uow=q)
    anonymous = s.prepare(q)
    assert s.unit_owner(xid) == "app1" and s.unit_owner(anonymous) is None
    s = h.crash(s)  # replayed from the PREPARE record
    assert s.unit_owner(xid) == "app1" and s.unit_owner(anonymous) is None
    s.checkpoint()
    s = h.crash(s)  # from the checkpoint's table of units
    assert s.unit_owner(xid) == "app1"
    s.resolve(xid, commit=True)
    assert s.unit_owner(xid) is None
    s.close()


def test_a_browse_cursor_walks_the_queue_in_delivery_order(tmp_path: Path) -> None:
    """MQGMO_BROWSE_FIRST then BROWSE_NEXT: every message once, by priority then
    arrival, skipping uncommitted ones; a message of a higher priority that arrives
    after the cursor passed is not seen; the cursor survives a restart (keys are the
    log's) and a selection by correlid follows it too."""
    h = Harness(tmp_path)
    s = h.open()
    s.define_queue("Q")
    for body, prio in ((b"a", 5), (b"b", 5), (b"c", 9), (b"d", 0)):
        s.put("Q", body, persistent=True, priority=prio, correlid=b"C" if body in b"bd" else None)
    hidden = s.begin()
    s.put("Q", b"uncommitted", persistent=True, priority=5, uow=hidden)

    def walk(store, **ids) -> list[bytes]:
        seen, after = [], None
        while (m := store.get("Q", browse=True, after=after, **ids)) is not None:
            seen.append(m.body)
            after = m.position
        return seen

    assert walk(s) == [b"c", b"a", b"b", b"d"]
    first = s.get("Q", browse=True)
    assert first.body == b"c" and first.position is not None
    second = s.get("Q", browse=True, after=first.position)
    assert second.body == b"a"
    s.put("Q", b"late-high", persistent=True, priority=9)  # behind the cursor now
    assert [m.body for m in [s.get("Q", browse=True, after=second.position)]] == [b"b"]
    assert walk(s, correlid=b"C") == [b"b", b"d"]
    assert s.queue_attrs("Q")["CURDEPTH"] == 6  # browsing took nothing
    s = h.crash(s)
    assert s.get("Q", browse=True, after=second.position).body == b"b"
    assert s.get("Q").position is None  # a got message has no cursor
    s.close()
