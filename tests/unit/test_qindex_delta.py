"""Index delta files (``queues/<Q>/idx.d``, miqm/store/qindex.py): a checkpoint that
changes a deep queue records what changed since the queue's index instead of writing the
whole index again; the queue opens from index + delta with every message in order and its
selectors; two takeovers in a row (the second before any background work) still open
from the index; a delta that cannot be trusted is reported (AMQ1130) and the queue is
rebuilt from its queue file; a delta that grows too big is folded into a new index."""

from __future__ import annotations

from array import array
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from lockfs.posix import PosixVolume
from miqm.store import checkpoint as ckpt
from miqm.store import qindex
from miqm.store.settings import StoreTuning
from tests.unit.test_qindex import Store, crash, drain, fill

if TYPE_CHECKING:
    from miqm.store.qmstore import QueueManagerStore


def churn(s, rounds: int = 3) -> list[tuple[int, bytes]]:  # type: ignore[no-untyped-def]
    """Gets and puts (some under syncpoint, some with selectors) with a checkpoint after
    each round; returns what a drain must return afterwards."""
    want = fill(s)
    s.checkpoint()
    for r in range(rounds):
        for _ in range(4):  # FIFO within the highest priority: the first of ``want``
            m = s.get("Q")
            assert m is not None and (m.priority, m.body) == want.pop(0)
        u = s.begin()
        for i in range(5):
            body = b"r%d-%d" % (r, i)
            kw = {"msgid": b"late-%d-%d" % (r, i)} if i == 1 else {}
            if i == 2:
                kw["correlid"] = b"lcorr-%d" % r
            s.put("Q", body, persistent=True, priority=(r + i) % 10, uow=u, **kw)
            want.append(((r + i) % 10, body))
        s.commit(u)
        want.sort(key=lambda pb: -pb[0])  # stable: FIFO within a priority
        s.checkpoint()
    return want


def test_changes_after_the_index_go_to_a_delta_and_the_queue_opens_from_both(
        tmp_path: Path) -> None:
    st = Store(tmp_path)
    s = st.open()
    idx = st.data / "queues" / "Q" / "idx"
    want = churn(s)
    info = ckpt.read(PosixVolume(str(st.data)))
    assert "Q" not in info.idx and info.idxd["Q"][1] == info.seq, info
    base = info.idxd["Q"][0]
    assert qindex.decode(idx.read_bytes(), s.state.queues["Q"].qid, base, 1 << 30).cp == base
    crash(s)
    s = st.open()
    assert s.recovery_stats["indexed_queues"] == 1 and s.recovery_stats["scanned_queues"] == 0
    assert not st.amq1130()
    assert s.queue_attrs("Q")["CURDEPTH"] == len(want)
    m = s.get("Q", msgid=b"late-1-1")  # a caller-chosen msgid from the delta
    assert m is not None and m.body == b"r1-1"
    m = s.get("Q", correlid=b"lcorr-2")
    assert m is not None and m.body == b"r2-2"
    want = [pb for pb in want if pb[1] not in (b"r1-1", b"r2-2")]
    crash(s)
    # the same queue rebuilt from its queue file (index and delta gone) is the same queue
    s = st.open()
    u = s.begin()  # read under syncpoint: the crash below backs the gets out
    got_indexed = []
    while (m := s.get("Q", uow=u)) is not None:
        got_indexed.append((m.priority, m.body))
    crash(s)
    for name in ("idx", "idx.d", "idx.new", "idx.d.new"):
        (st.data / "queues" / "Q" / name).unlink(missing_ok=True)
    s = st.open()
    assert s.recovery_stats["scanned_queues"] == 1 and st.amq1130()
    assert drain(s) == got_indexed == want
    s.close()


def test_a_second_takeover_before_any_background_checkpoint_opens_from_the_index(
        tmp_path: Path) -> None:
    """The checkpoint that ends an open writes the replayed changes of a deep queue as a
    delta: a crash right after it (before the checkpoint thread ran) leaves an index the
    next open uses; without deltas the queue file is scanned (10 M messages: 40 s)."""
    st = Store(tmp_path)
    s = st.open()
    want = fill(s)
    s.checkpoint()
    s.put("Q", b"late", persistent=True, priority=0)  # replayed by the next open
    assert s.get("Q") is not None
    crash(s)
    s = st.open()
    assert s.recovery_stats["indexed_queues"] == 1
    s.put("Q", b"later", persistent=True, priority=0)
    crash(s)
    s = st.open()
    assert s.recovery_stats["indexed_queues"] == 1 and s.recovery_stats["scanned_queues"] == 0
    assert not st.amq1130()
    assert drain(s) == [*want[1:], (0, b"late"), (0, b"later")]
    s.close()


@pytest.mark.parametrize("damage", ["flip", "torn", "missing", "other-base", "index-torn"])
def test_an_untrustworthy_delta_is_reported_and_the_queue_rebuilt(tmp_path: Path,
                                                                  damage: str) -> None:
    st = Store(tmp_path)
    s = st.open()
    want = churn(s, rounds=2)
    s.close()
    dfile = st.data / "queues" / "Q" / "idx.d"
    raw = dfile.read_bytes()
    if damage == "flip":
        pos = len(raw) - 30
        dfile.write_bytes(raw[:pos] + bytes([raw[pos] ^ 0x01]) + raw[pos + 1:])
    elif damage == "torn":
        dfile.write_bytes(raw[:len(raw) // 2])
    elif damage == "missing":
        dfile.unlink()
    elif damage == "index-torn":  # the index the delta applies to
        idx = st.data / "queues" / "Q" / "idx"
        idx.write_bytes(idx.read_bytes()[:-100])
    else:  # a well-formed delta of another index (the checkpoint names another base)
        data = PosixVolume(str(st.data))
        info = ckpt.read(data)
        info.idxd["Q"][0] -= 1
        ckpt.write(data, info)
    s = st.open()
    lines = st.amq1130()
    named = "idx:" if damage == "index-torn" else "idx.d"
    assert len(lines) == 1 and "queue Q" in lines[0] and named in lines[0], st.errors
    assert s.recovery_stats["scanned_queues"] == 1
    assert drain(s) == want
    s.close()


def test_a_delta_that_grows_past_its_limit_becomes_a_new_index(tmp_path: Path) -> None:
    st = Store(tmp_path, StoreTuning(index_min_records=10, index_delta_records=12,
                                     checkpoint_wait_len=1e9))
    s = st.open()
    data = PosixVolume(str(st.data))
    want = fill(s)
    s.checkpoint()
    first = ckpt.read(data).idx["Q"]
    for i in range(5):
        s.put("Q", b"x%d" % i, persistent=True, priority=0)
    s.checkpoint()
    info = ckpt.read(data)
    assert info.idxd["Q"] == [first, info.seq]
    for i in range(5, 20):
        s.put("Q", b"x%d" % i, persistent=True, priority=0)
    s.checkpoint()
    info = ckpt.read(data)
    assert info.idx["Q"] == info.seq > first and "Q" not in info.idxd
    assert not (st.data / "queues" / "Q" / "idx.d").exists()
    crash(s)
    s = st.open()
    assert s.recovery_stats["indexed_queues"] == 1 and not st.amq1130()
    assert drain(s) == [*want, *((0, b"x%d" % i) for i in range(20))]
    s.close()


def _index(keys: list[int]) -> qindex.QueueIndexData:
    ks = [array("q") for _ in range(10)]
    bl = [array("q") for _ in range(10)]
    ls = [array("i") for _ in range(10)]
    for i, k in enumerate(keys):
        ks[4].append(k)
        bl[4].append(i)
        ls[4].append(10)
    return qindex.QueueIndexData(1, 1, ks, bl, ls, bytearray(b"\x01" * len(keys)), [], [])


def _delta(keys: list[int], blocks: list[int]) -> qindex.QueueIndexDelta:
    n = len(keys)
    end = max(blocks) + 1
    return qindex.QueueIndexDelta(
        1, 2, array("b", [4] * n), array("q", keys), array("q", blocks),
        array("i", [10] * n), array("q"), array("q", [0]), array("q", [end]),
        b"\x01" * end, [], [])


def test_apply_delta_merges_keys_in_order_and_refuses_a_repeated_key() -> None:
    d = _index([1, 5, 9])
    qindex.apply_delta(d, _delta([12, 3], [4, 3]), file_blocks=10)
    assert list(d.keys[4]) == [1, 3, 5, 9, 12] and list(d.blocks[4]) == [0, 3, 1, 2, 4]
    with pytest.raises(qindex.IndexInvalid, match="repeat"):
        qindex.apply_delta(_index([1, 5, 9]), _delta([5], [3]), file_blocks=10)
    with pytest.raises(qindex.IndexInvalid, match="queue file has"):
        qindex.apply_delta(_index([1, 5, 9]), _delta([12], [30]), file_blocks=10)


def test_delta_file_round_trip_and_damage() -> None:
    log = qindex.DeltaLog(3, 100)
    log.added(2, 50, 7, 100, 1, b"m" * 24, None)
    log.added(2, 51, 8, 100, 1, None, b"c" * 24)
    log.removed(10, 0, 2)
    log.removed(50, 7, 1)  # added then deleted: forgotten by both lists
    space = bytearray(b"\x00\x00\x00\x01\x01\x01\x01\x02\x01")
    raw = b"".join(qindex.encode_delta(9, 3, 5, log.snapshot(space)))
    x = qindex.decode_delta(raw, 9, 3, 5)
    assert list(x.keys) == [51] and list(x.deleted) == [10]
    assert x.correlids == [(51, b"c" * 24)] and x.msgids == []
    assert list(x.run_starts) == [0, 7] and list(x.run_lens) == [2, 2]
    assert x.run_bytes == b"\x00\x00\x00\x01"  # freed by the running checkpoint: free
    for bad, why in ((raw[:-1], "checksum"), (raw[:20], "shorter"),
                     (b"XXXX" + raw[4:], "magic")):
        with pytest.raises(qindex.IndexInvalid, match=why):
            qindex.decode_delta(bad, 9, 3, 5)
    with pytest.raises(qindex.IndexInvalid, match="incarnation"):
        qindex.decode_delta(raw, 8, 3, 5)
    with pytest.raises(qindex.IndexInvalid, match=r"checkpoints 3\.\.5"):
        qindex.decode_delta(raw, 9, 3, 6)


def test_the_open_writes_a_delta_however_big_and_a_later_checkpoint_folds_it(
        tmp_path: Path) -> None:
    """More was replayed than a delta normally holds: the open's checkpoint still writes
    one (a crash right after it must not mean a scan), and asks for the index to be
    written again, which the next checkpoint does."""
    st = Store(tmp_path, StoreTuning(index_min_records=10, index_delta_records=12,
                                     checkpoint_wait_len=1e9))
    s = st.open()
    want = fill(s)
    s.checkpoint()
    for i in range(20):
        s.put("Q", b"y%d" % i, persistent=True, priority=0)
    crash(s)
    s = st.open()
    data = PosixVolume(str(st.data))
    info = ckpt.read(data)
    assert info.idxd["Q"][1] == info.seq and s._index_later
    crash(s)
    s = st.open()
    assert s.recovery_stats["delta_queues"] == 1 and s.recovery_stats["scanned_queues"] == 0
    s.checkpoint()
    info = ckpt.read(data)
    assert info.idx["Q"] == info.seq and "Q" not in info.idxd
    crash(s)
    s = st.open()
    assert s.recovery_stats["indexed_queues"] == 1 and s.recovery_stats["delta_queues"] == 0
    assert drain(s) == [*want, *((0, b"y%d" % i) for i in range(20))]
    s.close()


def _indexed(tmp_path: Path, delta_records: int, top_min: int = 0
             ) -> tuple[Store, PosixVolume, Any, list[tuple[int, bytes]]]:
    """A store whose queue Q holds fill()'s messages, indexed by a checkpoint: (store
    maker, its data volume, the open store, what a drain returns)."""
    st = Store(tmp_path, StoreTuning(index_min_records=10, index_delta_records=delta_records,
                                     checkpoint_wait_len=1e9, index_top_min=top_min))
    s = st.open()
    want = fill(s)
    s.checkpoint()
    return st, PosixVolume(str(st.data)), s, want


def _wanted(data: PosixVolume) -> dict[str, tuple[int, int, int]]:
    return ckpt.read(data).indexed()


def _open_with(st: Store, cache: qindex.IndexCache):  # type: ignore[no-untyped-def]
    from miqm.store.qmstore import QueueManagerStore
    from tests.unit.test_qindex import _GEN, SETTINGS

    st.errors.clear()
    return QueueManagerStore.open(
        PosixVolume(str(st.data)), PosixVolume(str(st.root / "log")), "QM", SETTINGS,
        st.tuning, generation=next(_GEN), background=False,
        errlog=lambda n, t: st.errors.append((n, t)), index_cache=cache)


def test_a_takeover_uses_what_the_standby_read_ahead_only_while_it_is_current(
        tmp_path: Path) -> None:
    """The standby's read-ahead (IndexCache) is used when the index file is still the one
    it read, with the delta written since applied on top; a file replaced since (a new
    index) is read again, never taken from the stale copy."""
    st, data, s, want = _indexed(tmp_path, 12)
    cache = qindex.IndexCache()
    assert cache.refresh(data, _wanted(data)) == 1
    assert cache.refresh(data, _wanted(data)) == 0  # unchanged: not read again
    s.put("Q", b"after-read-ahead", persistent=True, priority=0)  # a delta on top
    s.checkpoint()
    crash(s)
    s = _open_with(st, cache)
    assert s.recovery_stats["prefetched_queues"] == 1
    assert s.recovery_stats["delta_queues"] == 1 and not st.amq1130()
    u = s.begin()
    got = []
    while (m := s.get("Q", uow=u)) is not None:
        got.append((m.priority, m.body))
    assert got == [*want, (0, b"after-read-ahead")]
    crash(s)  # the gets were never committed
    # read ahead (the index and its delta), then the index is written again (the delta
    # outgrew its limit)
    cache = qindex.IndexCache()
    assert cache.refresh(data, _wanted(data)) == 2
    s = st.open()
    for i in range(20):
        s.put("Q", b"z%d" % i, persistent=True, priority=0)
    s.checkpoint()
    s.checkpoint()
    assert "Q" in ckpt.read(data).idx  # a new index
    crash(s)
    s = _open_with(st, cache)
    assert s.recovery_stats["prefetched_queues"] == 0
    assert s.recovery_stats["indexed_queues"] == 1 and not st.amq1130()
    assert drain(s) == [*want, (0, b"after-read-ahead"), *((0, b"z%d" % i) for i in range(20))]
    s.close()


def test_blocks_in_use_is_the_map_without_its_free_tail() -> None:
    """Found by looking at the end in growing pieces, never copying the whole map."""
    import random

    rng = random.Random(5)
    for used in (0, 1, 7, 4095, 4096, 4097, 30_000):
        for tail in (0, 1, 4096, 9_000, 70_000):
            space = bytearray(rng.choice(b"\x01\x02") for _ in range(used)) + bytearray(tail)
            if used > 2:
                space[rng.randrange(used - 1)] = 0  # a free block inside: not the end
            assert qindex._blocks_in_use(space) == len(space.rstrip(b"\x00")), (used, tail)


def _flat_delta(prios: list[int], keys: list[int]) -> qindex.QueueIndexDelta:
    n = len(keys)
    return qindex.QueueIndexDelta(
        1, 2, array("b", prios), array("q", keys), array("q", [100 + k for k in keys]),
        array("i", [10] * n), array("q"), array("q", [0]), array("q", [200]),
        b"\x01" * 200, [], [])


def test_a_delta_is_written_grouped_by_priority_and_applied_by_slices() -> None:
    """DeltaLog keeps the added records per priority: the file holds them grouped (each
    group in write order) and apply_delta slices them; a file with the priorities
    interleaved (as written before) gives the same result record by record."""
    log = qindex.DeltaLog(3, 100)
    for i, (prio, key) in enumerate([(5, 20), (0, 21), (5, 22), (9, 23), (0, 24), (5, 25)]):
        log.added(prio, key, 10 + i, 8, 1, None, None)
    log.removed(22, 12, 1)  # added, then deleted before the snapshot: forgotten
    raw = b"".join(qindex.encode_delta(9, 3, 5, log.snapshot(bytearray(b"\x01" * 20))))
    x = qindex.decode_delta(raw, 9, 3, 5)
    assert list(x.prios) == [0, 0, 5, 5, 9] and list(x.keys) == [21, 24, 20, 25, 23]
    groups = qindex.delta_groups(x)
    assert [(p, list(k), list(b)) for p, k, b, _l in groups] == [
        (0, [21, 24], [11, 14]), (5, [20, 25], [10, 15]), (9, [23], [13])]
    again = qindex.DeltaLog.from_file(x, 100)  # a later delta starts from this one
    assert {p: list(g[0]) for p, g in again.by_prio.items()} == {0: [21, 24], 5: [20, 25],
                                                                  9: [23]}
    assert again.size() == 5
    # interleaved (an older file), and one that only looks grouped at first
    for prios, keys in (([5, 0, 5, 9, 0], [20, 21, 25, 23, 24]),
                        ([0, 0, 5, 0], [21, 24, 20, 30])):
        by_prio: dict[int, list[int]] = {}
        for p, k in zip(prios, keys, strict=True):
            by_prio.setdefault(p, []).append(k)
        got = {p: list(k) for p, k, _b, _l in qindex.delta_groups(_flat_delta(prios, keys))}
        assert got == by_prio
    d = _index([1, 5, 9])
    qindex.apply_delta(d, _flat_delta([4, 2, 4], [30, 31, 40]), file_blocks=200)
    assert list(d.keys[4]) == [1, 5, 9, 30, 40] and list(d.keys[2]) == [31]
    # within a group out of key order: put in order; a key twice: refused
    d = _index([1, 5, 9])
    qindex.apply_delta(d, _flat_delta([4, 4, 4], [40, 30, 35]), file_blocks=200)
    assert list(d.keys[4]) == [1, 5, 9, 30, 35, 40]
    assert list(d.blocks[4])[-3:] == [130, 135, 140]
    with pytest.raises(qindex.IndexInvalid, match="repeat"):
        qindex.apply_delta(_index([1, 5, 9]), _flat_delta([4, 4], [30, 30]), file_blocks=200)


def _same_index(a: qindex.QueueIndexData, b: qindex.QueueIndexData) -> bool:
    return (a.keys, a.blocks, a.lens, bytes(a.space).rstrip(b"\0"), a.msgids,
            a.correlids) == (b.keys, b.blocks, b.lens, bytes(b.space).rstrip(b"\0"),
                             b.msgids, b.correlids)


def _same_delta_log(a: qindex.DeltaLog, b: qindex.DeltaLog) -> None:
    assert (a.base_cp, a.base_n) == (b.base_cp, b.base_n)
    assert {p: tuple(map(list, g)) for p, g in a.by_prio.items()} == \
        {p: tuple(map(list, g)) for p, g in b.by_prio.items()}
    assert list(a.deleted) == list(b.deleted) and a.touched == b.touched
    assert (a.msgids, a.correlids) == (b.msgids, b.correlids)


def test_a_standby_applies_the_delta_ahead_and_undoes_it_for_a_newer_one(
        tmp_path: Path) -> None:
    """The standby reads the delta with the index and applies it when it only appends; a
    newer delta on the same index is applied in its place (the first undone exactly, the
    index not read again); the takeover then applies nothing itself, and every message,
    with the gets the deltas recorded, is where it should be."""
    st, data, s, want = _indexed(tmp_path, 1000)
    assert "Q" in ckpt.read(data).idx
    cache = qindex.IndexCache()
    assert cache.refresh(data, _wanted(data)) == 1  # the index alone
    entry = cache._by_name["Q"]
    assert entry.delta is None and not entry.applied
    pristine = qindex.read_index(data.open("queues/Q/idx").pread,
                                 data.stat("queues/Q/idx").size, entry.data.qid,
                                 entry.data.cp, 1 << 62)
    s.put("Q", b"a1", persistent=True, priority=3, msgid=b"mine-a1")
    s.checkpoint()
    assert cache.refresh(data, _wanted(data)) == 1  # the delta only
    assert cache._by_name["Q"] is entry and entry.applied
    assert sum(map(len, entry.data.keys)) == entry.base_n + 1
    m = s.get("Q")  # the first of the highest priority: a delete in the next delta
    assert m is not None and (m.priority, m.body) == want.pop(0)
    s.put("Q", b"a2", persistent=True, priority=3, correlid=b"corr-a2")
    s.checkpoint()
    assert cache.refresh(data, _wanted(data)) == 1  # the newer delta, the index kept
    assert entry.applied and sum(map(len, entry.data.keys)) == entry.base_n + 2
    assert entry.delta is not None and len(entry.delta.deleted) == 1
    assert cache.refresh(data, _wanted(data)) == 0  # nothing changed: nothing read
    entry.drop_delta()  # undone: the index exactly as its file holds it
    assert _same_index(entry.data, pristine)
    assert cache.refresh(data, _wanted(data)) == 1  # applied again
    assert entry.applied
    # the active's log of that delta, built ahead as the takeover would build it
    built = entry.dlog
    assert built is not None and entry.delta is not None
    _same_delta_log(built, qindex.DeltaLog.from_file(entry.delta, entry.base_n))
    crash(s)
    s = _open_with(st, cache)
    assert s.recovery_stats["prefetched_queues"] == 1
    assert s.recovery_stats["delta_queues"] == 1 and not st.amq1130()
    assert s.state.queues["Q"].dx is built  # taken, not built again
    m = s.get("Q", msgid=b"mine-a1")
    assert m is not None and m.body == b"a1"
    m = s.get("Q", correlid=b"corr-a2")
    assert m is not None and m.body == b"a2"
    assert drain(s) == want
    s.close()


def test_a_delta_changed_after_the_read_ahead_is_read_by_the_takeover(
        tmp_path: Path) -> None:
    """A delta written after the standby's last pass (a newer header) is not taken from
    the read-ahead: the takeover undoes the one applied ahead and applies the file's."""
    st, data, s, want = _indexed(tmp_path, 1000)
    s.put("Q", b"b1", persistent=True, priority=0)
    s.checkpoint()
    cache = qindex.IndexCache()
    assert cache.refresh(data, _wanted(data)) == 2
    assert cache._by_name["Q"].applied
    s.put("Q", b"b2", persistent=True, priority=0)
    s.checkpoint()  # after the standby's pass
    stale = cache._by_name["Q"].dlog
    crash(s)
    s = _open_with(st, cache)
    assert stale is not None and s.state.queues["Q"].dx is not stale
    assert s.recovery_stats["prefetched_queues"] == 1
    assert s.recovery_stats["delta_queues"] == 1 and not st.amq1130()
    assert drain(s) == [*want, (0, b"b1"), (0, b"b2")]
    s.close()


def test_a_delta_that_does_not_only_append_is_held_and_applied_at_takeover() -> None:
    """A delta with a key below the index's last of its priority (possible for records
    written out of key order) is kept decoded but not applied ahead; nothing changes."""
    d = qindex.QueueIndexData(1, 1, [array("q", [5, 9]) if p == 0 else array("q")
                                     for p in range(10)],
                              [array("q", [0, 1]) if p == 0 else array("q")
                               for p in range(10)],
                              [array("i", [3, 3]) if p == 0 else array("i")
                               for p in range(10)],
                              bytearray(b"\x01\x01\x01"), [], [])
    x = qindex.QueueIndexDelta(1, 2, array("b", [0]), array("q", [7]), array("q", [2]),
                               array("i", [3]), array("q"), array("q"), array("q"), b"",
                               [], [])
    assert not qindex.appends_only(d, x)
    ahead = qindex.IndexAhead(b"h", d)
    ahead.use_delta(b"dh", x)
    assert ahead.delta is x and not ahead.applied
    assert list(d.keys[0]) == [5, 9]
    y = qindex.QueueIndexDelta(1, 2, array("b", [0]), array("q", [12]), array("q", [2]),
                               array("i", [3]), array("q"), array("q", [2]),
                               array("q", [2]), b"\x01\x01", [(12, b"m" * 24)], [])
    assert qindex.appends_only(d, y)
    ahead.use_delta(b"dh2", y)
    assert ahead.applied and list(d.keys[0]) == [5, 9, 12] and len(d.space) == 4
    ahead.drop_delta()
    assert list(d.keys[0]) == [5, 9] and d.space == bytearray(b"\x01\x01\x01")
    assert d.msgids == [] and ahead.delta is None


def test_a_few_changes_on_a_big_delta_go_to_a_second_delta_file(tmp_path: Path) -> None:
    """Once the delta holds index_top_min records, a checkpoint whose changes since it are
    at most a quarter of it writes them to idx.d2 and leaves idx.d as it is; the queue
    opens from all three (with and without the standby's read-ahead), and more changes
    than that rewrite the delta and drop the second one."""
    st, data, s, want = _indexed(tmp_path, 1000, top_min=20)
    qdir = st.data / "queues" / "Q"
    for i in range(30):
        s.put("Q", b"d1-%d" % i, persistent=True, priority=i % 10)
    s.checkpoint()  # the first delta: 30 records
    info = ckpt.read(data)
    assert info.idxd["Q"][1] == info.seq and not info.idxd2
    d1_bytes = (qdir / "idx.d").read_bytes()
    m = s.get("Q")  # the first of the highest priority
    assert m is not None and (m.priority, m.body) == want.pop(0)
    s.put("Q", b"top-1", persistent=True, priority=9, msgid=b"top-msgid")
    s.put("Q", b"top-2", persistent=True, priority=0, correlid=b"top-corr")
    s.checkpoint()
    info = ckpt.read(data)
    d1_cp = info.idxd2["Q"][1]
    assert info.idxd2["Q"] == [info.idxd2["Q"][0], d1_cp, info.seq], info
    assert "Q" not in info.idxd and "Q" not in info.idx  # an older miqm scans it
    assert (qdir / "idx.d").read_bytes() == d1_bytes  # left as it was
    assert (qdir / "idx.d2").stat().st_size < len(d1_bytes)
    added = [(i % 10, b"d1-%d" % i) for i in range(30)]
    expect = sorted([*want, *added, (9, b"top-1"), (0, b"top-2")], key=lambda pb: -pb[0])
    # the standby's read-ahead applies the delta; the second one is read at takeover
    cache = qindex.IndexCache()
    assert cache.refresh(data, _wanted(data)) == 2
    crash(s)
    s = _open_with(st, cache)
    stats = s.recovery_stats
    assert stats["prefetched_queues"] == stats["second_delta_queues"] == 1, stats
    assert not st.amq1130()
    m = s.get("Q", msgid=b"top-msgid")
    assert m is not None and m.body == b"top-1"
    m = s.get("Q", correlid=b"top-corr")
    assert m is not None and m.body == b"top-2"
    crash(s)  # the two gets (outside syncpoint) are committed: replayed from the log
    s = st.open()  # without a read-ahead
    assert s.recovery_stats["second_delta_queues"] == 1 and not st.amq1130()
    expect = [pb for pb in expect if pb[1] not in (b"top-1", b"top-2")]
    u = s.begin()
    got = []
    while (m := s.get("Q", uow=u)) is not None:
        got.append((m.priority, m.body))
    assert got == expect
    s.backout(u)
    # many more changes (but fewer than the index's 60 records): the delta is written
    # again, the second one dropped
    for i in range(20):
        s.put("Q", b"more-%d" % i, persistent=True, priority=5)
    s.checkpoint()
    info = ckpt.read(data)
    assert "Q" in info.idxd and not info.idxd2 and not (qdir / "idx.d2").exists()
    crash(s)
    s = st.open()
    assert s.recovery_stats["delta_queues"] == 1 and not st.amq1130()
    expect = sorted([*expect, *((5, b"more-%d" % i) for i in range(20))],
                    key=lambda pb: -pb[0])
    assert drain(s) == expect
    s.close()


def test_a_damaged_second_delta_is_reported_and_the_queue_scanned(tmp_path: Path) -> None:
    st, _data, s, want = _indexed(tmp_path, 1000, top_min=20)
    qdir = st.data / "queues" / "Q"
    for i in range(30):
        s.put("Q", b"d1-%d" % i, persistent=True, priority=3)
    s.checkpoint()
    s.put("Q", b"top", persistent=True, priority=3)
    s.checkpoint()
    assert (qdir / "idx.d2").exists()
    crash(s)
    raw = bytearray((qdir / "idx.d2").read_bytes())
    raw[-1] ^= 0xFF
    (qdir / "idx.d2").write_bytes(bytes(raw))
    s = st.open()
    assert s.recovery_stats["scanned_queues"] == 1
    assert any("idx.d2" in t for t in st.amq1130()), st.errors
    expect = sorted([*want, *((3, b"d1-%d" % i) for i in range(30)), (3, b"top")],
                    key=lambda pb: -pb[0])
    assert drain(s) == expect
    s.close()


def _grown(base_n: int, records: int) -> qindex.DeltaLog:
    log = qindex.DeltaLog(1, base_n)
    for k in range(records):
        log.added(k % 10, 1_000_000 + k, k, 40, 1, None, None)
    return log


def test_a_delta_bigger_than_its_index_is_too_big() -> None:
    """A delta is worth writing while it is smaller than limit, or a sixteenth of a big
    index, and never once it holds more records than the index itself (a small queue's:
    rewriting the whole delta every checkpoint would cost more than the index)."""
    assert not _grown(100, 100).too_big(4096)
    assert _grown(100, 101).too_big(4096)
    assert not _grown(1_000_000, 62_500).too_big(4096)  # a sixteenth of the index
    assert _grown(1_000_000, 62_501).too_big(4096)
    assert not _grown(20_000, 4096).too_big(4096)
    assert _grown(20_000, 4097).too_big(4096)
    assert _grown(100, 1).too_big(0)  # 0: no deltas


def _twenty_each(s: QueueManagerStore, count: int) -> list[str]:
    """``count`` queues of twenty persistent messages each, checkpointed, and one more on
    the first that only the log holds; their names."""
    names = [f"Q{i}" for i in range(count)]
    for name in names:
        s.define_queue(name, MAXDEPTH=100000)
        for k in range(20):
            s.put(name, b"%s-%d" % (name.encode(), k), persistent=True)
    s.checkpoint()
    s.put(names[0], b"after", persistent=True)  # replayed from the log
    return names


def _replaced_and_damaged(st: Store, names: list[str]) -> Path:
    """The second queue's file left as a checkpoint's replacement (``q.new``, that
    checkpoint completed), the third's without a readable header; the queues directory."""
    qdir = st.data / "queues"
    (qdir / names[1] / "q").rename(qdir / names[1] / "q.new")
    (qdir / names[2] / "q").write_bytes(b"garbage" * 200)
    return qdir


def _all_twenty(s: QueueManagerStore, names: list[str], name: str) -> None:
    got = []
    while (m := s.get(name)) is not None:
        got.append(m.body)
    want = [b"%s-%d" % (name.encode(), k) for k in range(20)]
    assert got == want + ([b"after"] if name == names[0] else []), name


def test_an_open_with_several_queues_to_scan_opens_their_files_side_by_side(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With several queues to scan (no index), an open opens their files in threads
    where the volume asks for it (nfs4: each open is about a millisecond; here a local
    directory told to) and then loads them one by one as before: a damaged file
    reported and the others intact, a checkpoint's replacement file (``q.new``) put in
    place."""
    import threading

    from miqm.store import qmstore

    monkeypatch.setattr(PosixVolume, "concurrent_opens", True)

    st = Store(tmp_path, StoreTuning(index_min_records=10**9, checkpoint_wait_len=1e9))
    s = st.open()
    names = _twenty_each(s, qmstore._PARALLEL_OPEN_MIN + 3)
    crash(s)
    qdir = _replaced_and_damaged(st, names)
    real = qmstore.QueueManagerStore._open_queue_file
    threads = set()

    def recording(self, name, qid, completed, later=False):  # type: ignore[no-untyped-def]
        threads.add(threading.current_thread().name)
        return real(self, name, qid, completed, later)

    qmstore.QueueManagerStore._open_queue_file = recording  # type: ignore[method-assign]
    try:
        s = _open_with(st, qindex.IndexCache())
    finally:
        qmstore.QueueManagerStore._open_queue_file = real  # type: ignore[method-assign]
    try:
        assert threads and all(t.startswith("store-files") for t in threads), threads
        assert s.recovery_stats["scanned_queues"] == len(names) - 1, s.recovery_stats
        assert any(n == "AMQ7472" and names[2] in t for n, t in st.errors), st.errors
        assert (qdir / names[1] / "q").exists() and not (qdir / names[1] / "q.new").exists()
        for name in names:
            if name != names[2]:
                _all_twenty(s, names, name)
    finally:
        s.close()


def _read_ahead_then_crashed(tmp_path: Path, count: int
                             ) -> tuple[Store, list[str], qindex.IndexCache]:
    """``count`` indexed queues of twenty messages each (_twenty_each), read ahead as a
    standby does, then the store crashed: (the store, the queue names, the read-ahead)."""
    st = Store(tmp_path, StoreTuning(index_min_records=10, checkpoint_wait_len=1e9))
    s = st.open()
    names = _twenty_each(s, count)
    data = PosixVolume(str(st.data))
    cache = qindex.IndexCache()
    assert cache.refresh(data, _wanted(data)) == len(names)
    crash(s)
    return st, names, cache


def test_an_open_loads_indexed_queues_without_opening_their_files(
        tmp_path: Path) -> None:
    """A queue loaded from its index has its file's header and size read (over NFSv4
    through the shared reader context) and is opened at its first use: a get of a body
    only on file, or the checkpoint's writes. A damaged header is still reported, a
    ``q.new`` still put in place, and nothing is lost across the next crash."""
    st, names, cache = _read_ahead_then_crashed(tmp_path, 5)
    qdir = _replaced_and_damaged(st, names)
    s = _open_with(st, cache)
    try:
        assert s.recovery_stats["prefetched_queues"] == len(names) - 1, s.recovery_stats
        assert any(n == "AMQ7472" and names[2] in t for n, t in st.errors), st.errors
        assert (qdir / names[1] / "q").exists() and not (qdir / names[1] / "q.new").exists()
        live = [n for n in names if n != names[2]]
        files = {n: s.state.queues[n].file for n in live}
        # the open's checkpoint wrote names[0]'s replayed put: only that file is open
        assert [n for n, f in files.items() if f is not None and f._f is not None] == \
            [names[0]]
        assert all(f is not None and f._open_later for n, f in files.items()
                   if n != names[0])
        for name in live:
            _all_twenty(s, names, name)
            assert files[name]._f is not None  # opened by the first get
        s.put(names[3], b"late", persistent=True)
        s.checkpoint()
        crash(s)
        s = st.open()
        assert [m.body for m in iter(lambda: s.get(names[3]), None)] == [b"late"]
        assert s.get(names[4]) is None
    finally:
        s.close()


class _HeadSpy:
    """Records each ``PosixVolume.read_heads`` call (its paths) and the calls of one
    other volume method made outside it (the base class reads each head through them)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, other: str) -> None:
        self.batches: list[list[str]] = []
        self.others: list[str] = []
        self._in_batch = False
        real_heads, real_other = PosixVolume.read_heads, getattr(PosixVolume, other)

        def heads(vol: PosixVolume, wanted: list[tuple[str, int]]) -> list[object]:
            self.batches.append([path for path, _size in wanted])
            self._in_batch = True
            try:
                return real_heads(vol, wanted)  # type: ignore[return-value]
            finally:
                self._in_batch = False

        def recorded(vol: PosixVolume, path: str, *args: object, **kw: object) -> object:
            if not self._in_batch:
                self.others.append(path)
            return real_other(vol, path, *args, **kw)

        monkeypatch.setattr(PosixVolume, "read_heads", heads)
        monkeypatch.setattr(PosixVolume, other, recorded)


def test_an_open_reads_the_heads_of_indexed_queues_in_one_call(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The heads a takeover checks for each queue loaded from its index (its queue
    file's, a replacement's, its index file's against the standby's read-ahead) are read
    in one ``Volume.read_heads`` call: over NFSv4 one round trip for all the queues. Only
    a queue whose replacement file (``q.new``) is put in place reads its file's head
    again, after the rename; every message is still there."""
    st, names, cache = _read_ahead_then_crashed(tmp_path, 5)
    (st.data / "queues" / names[1] / "q").rename(st.data / "queues" / names[1] / "q.new")
    spy = _HeadSpy(monkeypatch, "read_head")
    s = _open_with(st, cache)
    try:
        assert len(spy.batches) == 1, spy.batches
        for name in names:
            assert {f"queues/{name}/{f}" for f in ("q", "q.new", "idx")} <= \
                set(spy.batches[0])
        assert [p for p in spy.others if p.startswith("queues/")] == \
            [f"queues/{names[1]}/q"]
        assert s.recovery_stats["prefetched_queues"] == len(names), s.recovery_stats
        for name in names:
            _all_twenty(s, names, name)
    finally:
        s.close()


def test_a_standby_checks_its_read_ahead_with_one_call_for_every_head(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each refresh of the read-ahead reads the heads of every index and delta file in
    one ``Volume.read_heads`` call (over NFS one round trip) and opens only the files
    that changed; what did not change stays in the table throughout, for a takeover that
    comes meanwhile."""
    st = Store(tmp_path, StoreTuning(index_min_records=10, checkpoint_wait_len=1e9))
    s = st.open()
    names = _twenty_each(s, 4)
    data = PosixVolume(str(st.data))
    cache = qindex.IndexCache()
    assert cache.refresh(data, _wanted(data)) == len(names)
    seen: list[int] = []

    def stop() -> bool:
        seen.append(len(cache._by_name))  # type: ignore[attr-defined]
        return False

    wanted = _wanted(data)
    spy = _HeadSpy(monkeypatch, "open")
    assert cache.refresh(data, wanted, stop) == 0
    assert len(spy.batches) == 1 and spy.others == []
    assert {f"queues/{n}/idx" for n in names} <= set(spy.batches[0])
    assert seen and all(n == len(names) for n in seen), seen
    for k in range(30):  # deltas, then a new index file for the third queue
        s.put(names[2], b"more-%d" % k, persistent=True)
        s.checkpoint()
    spy.batches.clear()
    wanted = _wanted(data)
    spy.others.clear()
    assert cache.refresh(data, wanted) >= 1
    assert len(spy.batches) == 1
    # the first queue's put before the checkpoints above changed its files too
    assert {p.split("/")[1] for p in spy.others} == {names[0], names[2]}, spy.others
    s.close()


def test_an_open_whose_heads_get_no_answer_fails_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that does not answer the heads' call fails the open there, without each
    queue's load then waiting as long again for its own reads."""
    from lockfs import VolumeStalled

    st, _names, cache = _read_ahead_then_crashed(tmp_path, 3)
    singles: list[str] = []

    def stalled(self: PosixVolume, wanted: list[tuple[str, int]]) -> list[object]:
        raise VolumeStalled("no answer from the server in time")

    real_head = PosixVolume.read_head
    monkeypatch.setattr(PosixVolume, "read_heads", stalled)
    monkeypatch.setattr(PosixVolume, "read_head", lambda self, path, size: (
        singles.append(path), real_head(self, path, size))[1])
    with pytest.raises(VolumeStalled):
        _open_with(st, cache)
    assert [p for p in singles if p.startswith("queues/")] == []
