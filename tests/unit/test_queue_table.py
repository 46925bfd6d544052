"""The queue table: a queue the catalog defines stays a dormant entry until something
uses it, so a takeover with thousands of queues makes objects for the few it touches
and its checkpoint visits only those (issue 22). Whatever is dormant behaves exactly as
a queue made from its catalog entry would; and the checkpoint file keeps its queue
table's text for the next checkpoint."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from lockfs.posix import PosixVolume
from miqm.store import checkpoint as ckpt
from miqm.store.queues import DEFAULT_ATTRS, LocalQueue, QueueTable
from tests.unit.test_qindex import Store, crash

N = 300


def test_a_dormant_queue_wakes_on_first_use_and_only_then() -> None:
    shared = {**DEFAULT_ATTRS, "DESCR": "shared"}
    t = QueueTable()
    t.set_dormant({"A": (1, shared), "B": (2, shared)})
    t["C"] = LocalQueue("C", 3, {})
    assert len(t) == 3 and "A" in t and "C" in t and "Z" not in t
    assert sorted(t.names()) == ["A", "B", "C"]
    assert t.qids() == {"A": 1, "B": 2, "C": 3}
    assert [q.name for q in t.live()] == ["C"]  # nothing woken by any of that
    assert t.names_with("DESCR", "shared") == ["A", "B"] or \
        sorted(t.names_with("DESCR", "shared")) == ["A", "B"]
    assert [q.name for q in t.live()] == ["C"]
    a = t.get("A")
    assert a is not None and a.qid == 1 and a.attrs is shared  # the catalog's dict
    assert not a.header_dirty and a.file_qid == 1 and a.present == 0
    assert t.get("A") is a and t["A"] is a and "A" in t and len(t) == 3
    assert sorted(q.name for q in t.live()) == ["A", "C"]
    assert t.get("Z") is None
    with pytest.raises(KeyError):
        t["Z"]
    with pytest.raises(TypeError):  # say which: names() or values()
        iter(t)
    assert t.pop("B") is not None and "B" not in t and t.qids() == {"A": 1, "C": 3}
    del t["C"]
    assert sorted(t.names()) == ["A"]
    with pytest.raises(KeyError):
        del t["C"]
    assert [q.name for q in t.values()] == ["A"]


def test_qids_is_one_dict_until_a_queue_comes_or_goes() -> None:
    t = QueueTable()
    t.set_dormant({f"Q{i}": (i, DEFAULT_ATTRS) for i in range(5)})
    first = t.qids()
    t.get("Q1")  # waking changes no qid
    assert t.qids() is first
    t["NEW"] = LocalQueue("NEW", 99, {})
    assert t.qids() is not first and t.qids()["NEW"] == 99
    second = t.qids()
    t.pop("Q2")
    assert "Q2" not in t.qids() and t.qids() is not second


def _with_many_queues(tmp_path: Path) -> Store:
    store = Store(tmp_path)
    s = store.open()
    for i in range(N):
        s.define_queue(f"MANY.Q{i:03d}", DESCR="many")
    s.define_queue("TEMP.Q", DEFTYPE="TEMPDYN")
    s.put("MANY.Q007", b"seven", persistent=True)
    s.close()
    return store


def test_a_takeover_makes_objects_only_for_the_queues_it_touches(tmp_path: Path) -> None:
    store = _with_many_queues(tmp_path)
    s = store.open()
    try:
        live = {q.name for q in s.state.queues.live()}
        assert live == {"MANY.Q007"}, live  # the one with a message on file
        assert s.recovery_stats["catalog_queues"] == N
        assert s.queues_with("DEFTYPE", "TEMPDYN") == ["TEMP.Q"]
        assert len(s.state.queues) == N + 1
        s.checkpoint()
        assert {q.name for q in s.state.queues.live()} == {"MANY.Q007"}
        # used: woken, with what the catalog said
        assert s.queue_attrs("MANY.Q100")["DESCR"] == "many"
        s.put("MANY.Q200", b"two hundred", persistent=True)
        s.alter_queue("MANY.Q201", DESCR="altered")
        s.delete_queue("MANY.Q202")
        with pytest.raises(Exception, match="2085"):
            s.put("MANY.Q202", b"gone", persistent=True)
        assert {q.name for q in s.state.queues.live()} == {
            "MANY.Q007", "MANY.Q100", "MANY.Q200", "MANY.Q201"}
        s.checkpoint()
    finally:
        crash(s)
    s = store.open()
    try:
        assert len(s.state.queues) == N  # MANY.Q202 deleted
        assert s.get("MANY.Q200").body == b"two hundred"
        assert s.get("MANY.Q007").body == b"seven"
        assert s.queue_attrs("MANY.Q201")["DESCR"] == "altered"
        assert s.queue_attrs("MANY.Q299")["DESCR"] == "many"
        assert "MANY.Q202" not in s.state.queues
        assert len(s.list_queues("MANY.*")) == N - 1  # a listing wakes them all
    finally:
        s.close()


def test_the_catalog_is_not_written_again_when_nothing_changed(tmp_path: Path) -> None:
    """Compared with the last one by identity of the entries: a takeover that changes no
    definition leaves the catalog files alone."""
    store = _with_many_queues(tmp_path)
    s = store.open()
    s.close()
    before = (store.data / ckpt.CATALOG).stat().st_mtime_ns
    s = store.open()
    s.put("MANY.Q007", b"more", persistent=True)  # a queue with a file: no catalog change
    s.checkpoint()
    s.close()
    assert (store.data / ckpt.CATALOG).stat().st_mtime_ns == before


def _header_version(store: Store) -> int:
    return int(ckpt._HDR.unpack_from((store.data / ckpt.NAME).read_bytes())[1])


def test_queues_that_come_to_hold_messages_are_named_not_the_catalog_rewritten(
        tmp_path: Path) -> None:
    """A few catalog queues that now hold records are listed in the checkpoint file
    (``filed``, version 2, which an older miqm refuses instead of taking them as empty)
    and the catalog files are left alone; they load from their files, and once they are
    empty again the list and the version go back. Past the limit, a new catalog."""
    store = _with_many_queues(tmp_path)
    catalog = store.data / ckpt.CATALOG
    s = store.open()
    s.close()
    before = catalog.read_bytes()
    s = store.open()
    for i in (10, 11, 12):
        s.put(f"MANY.Q{i:03d}", b"m%d" % i, persistent=True)
    s.checkpoint()
    info = ckpt.read(PosixVolume(str(store.data)))
    assert info.filed == ["MANY.Q010", "MANY.Q011", "MANY.Q012"], info.filed
    assert catalog.read_bytes() == before and _header_version(store) == 2
    crash(s)
    s = store.open()
    try:
        assert s.recovery_stats["filed_queues"] == 3, s.recovery_stats
        for i in (10, 11, 12):  # from their files, not taken as empty from the catalog
            m = s.get(f"MANY.Q{i:03d}")
            assert m is not None and m.body == b"m%d" % i
        s.checkpoint()  # empty again: exactly the catalog as it was
        info = ckpt.read(PosixVolume(str(store.data)))
        assert info.filed == [] and catalog.read_bytes() == before
        assert _header_version(store) == 1
        for i in range(100, 100 + ckpt_limit(N)):
            s.put(f"MANY.Q{i:03d}", b"x", persistent=True)
        s.checkpoint()  # one more than the limit: a new catalog, nothing named
        info = ckpt.read(PosixVolume(str(store.data)))
        assert info.filed == [] and catalog.read_bytes() != before
        assert info.catalog == info.seq
    finally:
        crash(s)
    s = store.open()
    try:
        assert s.recovery_stats["filed_queues"] == 0
        assert s.get("MANY.Q100") is not None and s.get("MANY.Q007") is not None
    finally:
        s.close()


def ckpt_limit(catalog_size: int) -> int:
    """One more queue than a checkpoint names instead of writing the catalog again."""
    from miqm.store import qmstore

    return max(qmstore._FILED_MIN, catalog_size // 16) + 1


def test_a_checkpoint_file_of_an_unknown_version_is_one_clear_error(tmp_path: Path) -> None:
    from crc32c import crc32c

    from miqm.errors import StoreError

    body = b'{"seq":1,"queues":{}}'
    (tmp_path / ckpt.NAME).write_bytes(
        ckpt._HDR.pack(b"MIQK", 3, 0, crc32c(body), len(body)) + body)
    with pytest.raises(StoreError, match="format version 3; this miqm reads versions 1, 2"):
        ckpt.read(PosixVolume(str(tmp_path)))


def test_the_metrics_read_depths_without_waking_a_queue(tmp_path: Path) -> None:
    from miqm.metrics.instance import InstanceCollector

    store = _with_many_queues(tmp_path)
    s = store.open()
    try:
        ctl = SimpleNamespace(store=s, qmgr="QM", host="h", mode="active")
        collector = InstanceCollector(ctl)
        depth = {}
        for m in collector.collect():
            if m.name == "miqm_queue_depth":
                depth = {x.labels["queue"]: x.value for x in m.samples}
        assert len(depth) == N + 1 and depth["MANY.Q007"] == 1 and depth["MANY.Q008"] == 0
        assert {q.name for q in s.state.queues.live()} == {"MANY.Q007"}
    finally:
        s.close()


def test_the_checkpoint_file_keeps_its_queue_table_text(tmp_path: Path) -> None:
    """Written last, read on its own and reused by the next encode of the same table;
    a file whose keys an older miqm sorted (the table in the middle) and text that looks
    like the table's key inside a string both read as they are."""
    from lockfs.posix import PosixVolume

    vol = PosixVolume(str(tmp_path))
    queues = {f"Q{i:03d}": i + 1 for i in range(100)}
    info = ckpt.CheckpointInfo(seq=4, queues=queues, uows=[{"txid": 1}],
                               qmgr={"DESCR": 'odd ,"queues":{"X":1} text}}'})
    ckpt.write(vol, info)
    got = ckpt.read(vol)
    assert got.queues == queues and got.qmgr == info.qmgr and got.uows == [{"txid": 1}]
    assert ckpt._last_queues is not None and ckpt._last_queues[0] is got.queues
    assert ckpt.CheckpointInfo(seq=5, queues=got.queues).encode() == \
        ckpt.CheckpointInfo(seq=5, queues=dict(queues)).encode()
    # as an older miqm wrote it: keys sorted, "queues" before "restart_lsn", "seq", ...
    body = json.dumps({**info.__dict__, "authrecs": []}, separators=(",", ":"),
                      sort_keys=True).encode()
    from crc32c import crc32c
    (tmp_path / ckpt.NAME).write_bytes(
        ckpt._HDR.pack(b"MIQK", ckpt.VERSION, 0, crc32c(body), len(body)) + body)
    got = ckpt.read(vol)
    assert got.queues == queues and got.seq == 4 and got.qmgr == info.qmgr


def test_a_takeover_uses_the_files_a_standby_decoded_only_while_they_are_current(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The standby decodes the checkpoint file and the catalog ahead (read only); the
    open takes them when the files are still exactly those bytes, and decodes the files
    itself when the active wrote new ones since."""
    from lockfs.posix import PosixVolume
    from miqm.store import qindex
    from tests.unit.test_qindex_delta import _open_with

    store = _with_many_queues(tmp_path)
    data = PosixVolume(str(store.data))
    decoded: list[str] = []
    real_decode, real_catalog = ckpt.decode, ckpt._decode_catalog

    def counting_decode(raw: bytes, where: str) -> ckpt.CheckpointInfo:
        decoded.append("checkpoint")
        return real_decode(raw, where)

    def counting_catalog(raw: bytes) -> tuple[int, dict]:  # type: ignore[type-arg]
        decoded.append("catalog")
        return real_catalog(raw)

    real_split = ckpt._split

    def counting_split(info: ckpt.CheckpointInfo, catalog: dict) -> ckpt.CatalogSplit:  # type: ignore[type-arg]
        decoded.append("split")
        return real_split(info, catalog)

    monkeypatch.setattr(ckpt, "decode", counting_decode)
    monkeypatch.setattr(ckpt, "_decode_catalog", counting_catalog)
    monkeypatch.setattr(ckpt, "_split", counting_split)
    cache = qindex.IndexCache()
    info = ckpt.read_ahead(data, cache)
    assert len(info.queues) == N + 1 and decoded == ["checkpoint", "catalog", "split"]
    ckpt.read_ahead(data, cache)
    assert decoded == ["checkpoint", "catalog", "split"]  # the same bytes: nothing again
    decoded.clear()
    s = _open_with(store, cache)
    try:
        # both files and which queues the catalog defines alone: from the read-ahead
        assert decoded == [], decoded
        assert s.recovery_stats["catalog_queues"] == N
        assert s.queue_attrs("MANY.Q123")["DESCR"] == "many"
        assert s.get("MANY.Q007").body == b"seven"
        s.define_queue("LATER.Q")  # the active changes both files after the read-ahead
        s.put("MANY.Q008", b"eight", persistent=True)
    finally:
        s.close()
    assert "LATER.Q" not in info.queues  # what the standby kept was never changed
    cache = qindex.IndexCache()
    ckpt.read_ahead(data, cache)
    s = store.open()
    s.define_queue("LATEST.Q")
    s.close()
    decoded.clear()
    s = _open_with(store, cache)
    try:
        assert decoded == ["checkpoint", "catalog", "split"], decoded  # stale: read anew
        assert "LATEST.Q" in s.state.queues and "LATER.Q" in s.state.queues
        assert s.get("MANY.Q008").body == b"eight"
    finally:
        s.close()


def test_a_burst_of_definitions_is_followed_by_a_checkpoint_once_it_pauses(
        tmp_path: Path) -> None:
    """256 definitions since the last checkpoint: the checkpoint thread takes one half a
    second (of the store's clock) after the last, so a takeover after runmqsc defined
    thousands of queues loads them from the catalog instead of replaying them."""
    import time

    from lockfs.posix import PosixVolume
    from miqm.store import qmstore
    from tests.unit.test_qindex import _GEN, SETTINGS

    store = Store(tmp_path)
    now = [1000.0]
    s = qmstore.QueueManagerStore.open(
        PosixVolume(str(store.data)), PosixVolume(str(store.root / "log")), "QM", SETTINGS,
        store.tuning, generation=next(_GEN), background=True, clock=lambda: now[0])
    try:
        first = s._completed_cp
        for i in range(qmstore._DEFINITION_BURST - 1):
            s.define_queue(f"BURST.Q{i:04d}")
        now[0] += 60
        time.sleep(1.2)  # more than the checkpoint thread's tick: it looked, and left it
        assert s._completed_cp == first
        s.define_queue("BURST.LAST")
        now[0] += qmstore._DEFINITION_PAUSE / 2
        time.sleep(0.3)
        assert s._completed_cp == first  # the burst has not paused long enough yet
        now[0] += qmstore._DEFINITION_PAUSE
        deadline = time.monotonic() + 10
        while s._completed_cp == first and time.monotonic() < deadline:
            time.sleep(0.02)
        assert s._completed_cp > first
    finally:
        crash(s)
    s = store.open()
    try:
        assert s.recovery_stats["catalog_queues"] == qmstore._DEFINITION_BURST
        assert s.recovery_stats["records"] < 10, s.recovery_stats  # nothing to replay
    finally:
        s.close()
