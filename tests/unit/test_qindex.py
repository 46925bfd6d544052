"""The queue index file (miqm/store/qindex.py): a deep queue opens from its index, keeps
every message in order per priority with its selectors, and an index that cannot be
trusted (damaged, torn, stale, missing) is detected, reported with AMQ1130 and rebuilt
from the queue file; records of a checkpoint that never completed stay dead even when
the queue file is scanned after a restart that loaded it from its index."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from lockfs.posix import PosixVolume
from miqm.store import checkpoint as ckpt
from miqm.store.qmstore import QueueManagerStore
from miqm.store.settings import LogSettings, StoreTuning

SETTINGS = LogSettings(file_pages=256, primary_files=3, secondary_files=2)
TUNING = StoreTuning(index_min_records=10, checkpoint_wait_len=1e9)
#: every change writes the whole index again (no delta files)
FULL = StoreTuning(index_min_records=10, index_delta_records=0, checkpoint_wait_len=1e9)
_GEN = itertools.count(1)


class Store:
    """A store on ``root`` opened with a new generation each time; the error log kept."""

    def __init__(self, root: Path, tuning: StoreTuning = TUNING) -> None:
        self.root = root
        self.tuning = tuning
        self.data = root / "data"
        for d in ("data", "log"):
            (root / d).mkdir(exist_ok=True)
        QueueManagerStore.create(PosixVolume(str(self.data)), PosixVolume(str(root / "log")),
                                 "QM", SETTINGS)
        self.errors: list[tuple[str, str]] = []

    def open(self) -> QueueManagerStore:
        self.errors.clear()
        return QueueManagerStore.open(
            PosixVolume(str(self.data)), PosixVolume(str(self.root / "log")), "QM", SETTINGS,
            self.tuning, generation=next(_GEN), background=False,
            errlog=lambda n, t: self.errors.append((n, t)))

    def amq1130(self) -> list[str]:
        return [t for n, t in self.errors if n == "AMQ1130"]


def crash(s: QueueManagerStore) -> None:
    """Stop using the store without its shutdown checkpoint (what kill -9 leaves; the
    page cache is the disk here)."""
    s._closed = True
    s.log.close()
    s._close_files()


def fill(s: QueueManagerStore, n: int = 60) -> list[tuple[int, bytes]]:
    """``n`` persistent messages, priorities 0-9 mixed, some with a chosen msgid or a
    correlid; returns (priority, body) in the order a drain must return them."""
    s.define_queue("Q", MAXDEPTH=100000)
    sent = []
    u = s.begin()
    for i in range(n):
        prio = (i * 7) % 10
        body = b"m%04d-" % i + bytes(i % 700)
        kw = {}
        if i % 11 == 0:
            kw["msgid"] = b"chosen-%d" % i
        if i % 13 == 0:
            kw["correlid"] = b"corr-%d" % i
        s.put("Q", body, persistent=True, priority=prio, uow=u, **kw)  # type: ignore[arg-type]
        sent.append((prio, body))
    s.commit(u)
    # delivery order: priority high first, FIFO within a priority
    return sorted(sent, key=lambda pb: -pb[0])


def drain(s: QueueManagerStore) -> list[tuple[int, bytes]]:
    out = []
    while (m := s.get("Q")) is not None:
        out.append((m.priority, m.body))
    return out


def test_deep_queue_opens_from_its_index_in_order(tmp_path: Path) -> None:
    st = Store(tmp_path)
    s = st.open()
    want = fill(s)
    s.checkpoint()
    got = s.get("Q")  # one get after the checkpoint: replayed on top of the index
    assert got is not None
    crash(s)
    s = st.open()
    assert s.recovery_stats["indexed_queues"] == 1 and s.recovery_stats["scanned_queues"] == 0
    assert not st.amq1130()
    assert s.queue_attrs("Q")["CURDEPTH"] == len(want) - 1
    assert s.get("Q", msgid=b"chosen-22") is not None  # a caller-chosen msgid from the index
    m = s.get("Q", correlid=b"corr-26")
    assert m is not None and m.body.startswith(b"m0026-")
    rest = drain(s)
    expected = [pb for pb in want[1:] if not pb[1].startswith((b"m0022-", b"m0026-"))]
    assert rest == expected
    s.close()


@pytest.mark.parametrize("damage", ["flip", "torn", "stale", "missing", "other-qid"])
def test_an_untrustworthy_index_is_rebuilt_from_the_queue_file(tmp_path: Path,
                                                                 damage: str) -> None:
    st = Store(tmp_path, FULL)
    s = st.open()
    want = fill(s)
    s.checkpoint()
    idx = st.data / "queues" / "Q" / "idx"
    old = idx.read_bytes()
    s.put("Q", b"late", persistent=True, priority=0)
    s.checkpoint()  # a newer index; the old one is stale
    s.close()
    raw = idx.read_bytes()
    if damage == "flip":
        pos = len(raw) // 2
        idx.write_bytes(raw[:pos] + bytes([raw[pos] ^ 0x40]) + raw[pos + 1:])
    elif damage == "torn":
        idx.write_bytes(raw[: len(raw) - 700])
    elif damage == "stale":
        idx.write_bytes(old)
    elif damage == "missing":
        idx.unlink()
    else:
        info = ckpt.read(PosixVolume(str(st.data)))
        other = tmp_path / "other"
        other.mkdir()
        s2 = Store(other).open()
        s2.define_queue("PAD")  # Q gets another qid there
        fill(s2)
        s2.close()
        idx.write_bytes((other / "data" / "queues" / "Q" / "idx").read_bytes())
        assert info.idx.get("Q")
    s = st.open()
    lines = st.amq1130()
    assert len(lines) == 1 and "queue Q" in lines[0], st.errors
    assert s.recovery_stats["scanned_queues"] == 1
    assert s.queue_attrs("Q")["CURDEPTH"] == len(want) + 1
    s.close()
    # the open's checkpoint wrote a good index: the next open uses it, no error line
    s = st.open()
    assert not st.amq1130() and s.recovery_stats["indexed_queues"] == 1
    assert drain(s) == [*want, (0, b"late")]
    s.close()


def test_index_of_a_completed_checkpoint_is_found_before_its_rename(tmp_path: Path) -> None:
    """A crash after the checkpoint file named the new index but before ``idx.new`` was
    renamed to ``idx``: the new one is used, the old one (stale) is not."""
    st = Store(tmp_path, FULL)
    s = st.open()
    want = fill(s)
    s.checkpoint()
    qdir = st.data / "queues" / "Q"
    old = (qdir / "idx").read_bytes()
    s.put("Q", b"late", persistent=True, priority=0)
    s.checkpoint()
    crash(s)
    (qdir / "idx").rename(qdir / "idx.new")
    (qdir / "idx").write_bytes(old)
    s = st.open()
    assert not st.amq1130() and s.recovery_stats["indexed_queues"] == 1
    assert drain(s) == [*want, (0, b"late")]
    s.close()


def test_records_of_an_aborted_checkpoint_never_come_back(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """A checkpoint writes an uncommitted message's record into the queue file and dies
    before it completes. The restart loads the queue from its (older) index, so nothing
    zeroes that record; the restart undoes the message. A later scan of the file (the
    index damaged) must still not take the record as live: the aborted checkpoint is
    remembered in the checkpoint file."""
    st = Store(tmp_path)
    s = st.open()
    want = fill(s)
    s.checkpoint()
    u = s.begin()
    s.put("Q", b"never-committed", persistent=True, priority=9, uow=u)

    def die(*_a: object) -> None:
        raise SystemExit("power loss before the checkpoint file")

    monkeypatch.setattr(ckpt, "write", die)
    with pytest.raises(SystemExit):
        s.checkpoint()
    monkeypatch.undo()
    crash(s)
    raw = (st.data / "queues" / "Q" / "q").read_bytes()
    assert b"never-committed" in raw  # the record the dead checkpoint wrote is on disk
    s = st.open()
    assert s.recovery_stats["indexed_queues"] == 1 and s.recovery_stats["rolled_back"] == 1
    assert ckpt.read(PosixVolume(str(st.data))).aborted  # remembered
    crash(s)
    (st.data / "queues" / "Q" / "idx").write_bytes(b"junk")
    (st.data / "queues" / "Q" / "idx.new").unlink(missing_ok=True)
    s = st.open()
    assert st.amq1130() and s.recovery_stats["scanned_queues"] == 1
    assert drain(s) == want
    s.close()


def test_empty_queues_come_from_the_catalog_and_a_bad_catalog_is_reported(
        tmp_path: Path) -> None:
    """Queues without a live record are defined from the queue catalog, and those that
    never held one have no file at all; a damaged catalog is reported and its second copy
    used (AMQ1132); with both copies damaged (AMQ1131) every queue file is opened and the
    queues that have none are reported damaged."""
    st = Store(tmp_path)
    s = st.open()
    for i in range(30):
        s.define_queue(f"E.{i:02d}", DESCR=f"empty {i}")
    want = fill(s)
    s.alter_queue("E.07", MAXDEPTH=77)
    s.close()
    assert not (st.data / "queues" / "E.05").exists()  # nothing to hold: no file
    s = st.open()
    assert s.recovery_stats["catalog_queues"] == 30, s.recovery_stats
    assert s.recovery_stats["indexed_queues"] == 1
    assert s.queue_attrs("E.07")["MAXDEPTH"] == 77
    assert s.queue_attrs("E.12")["DESCR"] == "empty 12"
    s.put("E.03", b"first", persistent=True)  # its file is written at the checkpoint
    s.checkpoint()
    assert (st.data / "queues" / "E.03" / "q").exists()
    crash(s)
    s = st.open()
    assert s.recovery_stats["catalog_queues"] == 29
    assert s.get("E.03").body == b"first"  # type: ignore[union-attr]
    s.close()
    cat = st.data / ckpt.CATALOG
    raw = cat.read_bytes()
    cat.write_bytes(raw[:-3] + b"xx}")
    s = st.open()
    assert [t for n, t in st.errors if n == "AMQ1132"], st.errors
    assert not [t for n, t in st.errors if n == "AMQ1131"]
    assert s.recovery_stats["catalog_queues"] == 30  # from the copy
    assert s.queue_attrs("E.07")["MAXDEPTH"] == 77
    s.close()
    assert cat.read_bytes() != raw[:-3] + b"xx}"  # the open's checkpoint wrote both again
    for name in ckpt.CATALOGS:
        (st.data / name).write_bytes(b"MIQC" + bytes(30))
    s = st.open()
    lines = [t for n, t in st.errors if n == "AMQ1131"]
    assert len(lines) == 1 and "amqalcat.fil" in lines[0] and "amqalca2.fil" in lines[0]
    assert s.recovery_stats["catalog_queues"] == 0
    assert s.recovery_stats["scanned_queues"] == 1  # E.03, emptied: its file is there
    damaged = [t for n, t in st.errors if n == "AMQ7472"]
    assert len(damaged) == 29 and all("is missing" in t for t in damaged), damaged
    assert drain(s) == want
    s.close()


def test_index_rewritten_in_the_background_after_a_takeover(tmp_path: Path) -> None:
    """The checkpoint that ends the open leaves a changed deep queue without an index;
    the checkpoint thread writes it at once (without delta files: with them the open's
    checkpoint writes one, tests/unit/test_qindex_delta.py)."""
    from tests.waiting import wait_until

    st = Store(tmp_path, FULL)
    s = st.open()
    want = fill(s)
    s.checkpoint()
    s.put("Q", b"late", persistent=True, priority=0)  # replayed: the open changes the file
    crash(s)
    s = QueueManagerStore.open(
        PosixVolume(str(st.data)), PosixVolume(str(tmp_path / "log")), "QM", SETTINGS,
        FULL, generation=next(_GEN), background=True)
    try:
        data = PosixVolume(str(st.data))
        wait_until(lambda: ckpt.read(data).idx.get("Q", 0) > 0, timeout=30,
                   what="the index written by the checkpoint thread")
    finally:
        s._stop.set()
        s._cp_kick.set()
        crash(s)
    s = st.open()
    assert s.recovery_stats["indexed_queues"] == 1 and not st.amq1130()
    assert drain(s) == [*want, (0, b"late")]
    s.close()


def test_a_queue_defined_again_replaces_the_old_file_even_when_empty(tmp_path: Path) -> None:
    """DELETE and DEFINE of one name before a checkpoint: the new, empty incarnation gets
    a file of its own (the old one's is not left behind under its name), so even with
    both catalog copies lost the queue comes back, not as damaged."""
    st = Store(tmp_path)
    s = st.open()
    s.define_queue("R", DESCR="old")
    s.put("R", b"x", persistent=True)
    s.checkpoint()
    assert s.get("R") is not None
    s.delete_queue("R")
    s.define_queue("R", DESCR="new")
    s.close()
    for name in ckpt.CATALOGS:
        (st.data / name).write_bytes(b"junk")
    s = st.open()
    assert not [t for n, t in st.errors if n == "AMQ7472"], st.errors
    assert s.queue_attrs("R")["DESCR"] == "new"
    s.close()


def test_the_catalog_writes_each_attribute_set_once_and_reads_the_older_form(
        tmp_path: Path) -> None:
    import json as _json

    from crc32c import crc32c

    vol = PosixVolume(str(tmp_path))
    same = {"MAXDEPTH": 5000, "DESCR": ""}
    queues = {f"Q{i}": (i + 1, dict(same)) for i in range(100)}
    queues["ODD"] = (500, {"MAXDEPTH": 7, "DESCR": "odd"})
    raw = ckpt.encode_catalog(9, queues)
    body = _json.loads(raw[16:])
    assert len(body["attrs"]) == 2  # one set for the hundred, one for ODD
    (tmp_path / ckpt.CATALOG).write_bytes(raw)
    got, why = ckpt.read_catalog(vol, 9)
    assert got == queues and not why

    def write(obj: dict) -> None:  # type: ignore[type-arg]
        b = _json.dumps(obj).encode()
        (tmp_path / ckpt.CATALOG).write_bytes(ckpt._HDR.pack(b"MIQC", ckpt.VERSION, 0,
                                                             crc32c(b), len(b)) + b)

    write({"seq": 9, "queues": {"OLD": [3, {"DESCR": "older form"}]}})
    got, _why = ckpt.read_catalog(vol, 9)
    assert got == {"OLD": (3, {"DESCR": "older form"})}
    write({"seq": 9, "attrs": [{"DESCR": "x"}], "queues": {"PER": [4, 0]}})
    got, _why = ckpt.read_catalog(vol, 9)
    assert got == {"PER": (4, {"DESCR": "x"})}  # an object per queue, shared sets
    write({"seq": 9, "attrs": [{}], "queues": {"BAD": [3, -1]}})
    got, why = ckpt.read_catalog(vol, 9)
    assert got is None and "attribute set -1" in why
    # the lists: each inconsistency makes the copy unusable, never a wrong table
    for bad, said in (({"names": ["A", "B"], "qids": [1], "sets": [0, 0]}, "2 names, 1 qids"),
                      ({"names": ["A"], "qids": [1], "sets": [1]}, "outside 0..0"),
                      ({"names": ["A"], "qids": [1], "sets": [-1]}, "outside 0..0"),
                      ({"names": [5], "qids": [1], "sets": [0]}, "not text"),
                      ({"names": ["A"], "qids": ["1"], "sets": [0]}, "not a number")):
        write({"seq": 9, "attrs": [{}], **bad})
        got, why = ckpt.read_catalog(vol, 9)
        assert got is None and said in why, (bad, why)


def test_queue_files_of_format_1_are_still_read_and_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A queue file written before format 2 (512-byte blocks) keeps working: opened from
    its index or by a scan, with new messages added to it in its own format; a queue
    defined now gets format 2 (32-byte blocks: an 8-byte message takes 96 bytes)."""
    from miqm.store import queues

    st = Store(tmp_path)
    monkeypatch.setattr(queues, "QFILE_VERSION", 1)
    s = st.open()
    want = fill(s)
    s.close()
    monkeypatch.undo()
    qpath = st.data / "queues" / "Q" / "q"
    assert qpath.stat().st_size >= 4096 + 60 * 512
    s = st.open()
    assert s.state.queues["Q"].file.fmt.version == 1  # type: ignore[union-attr]
    s.put("Q", b"late", persistent=True, priority=0, correlid=b"c1")
    s.define_queue("NEW")
    for i in range(100):
        s.put("NEW", b"%08d" % i, persistent=True)
    s.checkpoint()
    crash(s)
    new = st.data / "queues" / "NEW" / "q"
    assert new.stat().st_size == 4096 + 100 * 96
    for name in ("idx", "idx.d", "idx.new", "idx.d.new"):  # and by a scan of both
        (st.data / "queues" / "Q" / name).unlink(missing_ok=True)
    s = st.open()
    assert s.state.queues["NEW"].file.fmt.version == 2  # type: ignore[union-attr]
    assert drain(s) == [*want, (0, b"late")]
    got = []
    while (m := s.get("NEW")) is not None:
        got.append(m.body)
    assert got == [b"%08d" % i for i in range(100)]
    s.close()


def test_the_index_read_piece_by_piece_is_the_index(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """read_index (what an open uses) fills the arrays from pieces of any size, and a file
    that ends early or differs anywhere is refused."""
    from miqm.store import qindex

    st = Store(tmp_path)
    s = st.open()
    fill(s)
    s.checkpoint()
    qid, cp = s.state.queues["Q"].qid, s.state.queues["Q"].idx_cp
    s.close()
    raw = (st.data / "queues" / "Q" / "idx").read_bytes()
    whole = qindex.decode(raw, qid, cp, 1 << 30)
    monkeypatch.setattr(qindex, "READ_CHUNK", 7)
    reads = []

    def pread(n: int, off: int) -> bytes:
        reads.append(n)
        return raw[off:off + n]

    assert qindex.read_index(pread, len(raw), qid, cp, 1 << 30) == whole
    assert len(reads) > (len(raw) - 120) // 7 and max(reads[1:]) <= 7
    # reads shorter than asked (a network filesystem's), ending inside an 8-byte key
    assert qindex.read_index(lambda n, off: raw[off:off + min(n, 5)], len(raw), qid, cp,
                             1 << 30) == whole

    def short(n: int, off: int) -> bytes:
        return raw[off:off + n] if off < len(raw) - 40 else b""

    with pytest.raises(qindex.IndexInvalid, match="ends at"):
        qindex.read_index(short, len(raw), qid, cp, 1 << 30)
    bad = bytearray(raw)
    bad[len(raw) // 3] ^= 1
    with pytest.raises(qindex.IndexInvalid, match="checksum"):
        qindex.read_index(lambda n, off: bytes(bad[off:off + n]), len(raw), qid, cp, 1 << 30)


def test_a_catalog_found_under_its_new_name_is_no_damage(tmp_path: Path) -> None:
    """A crash after the checkpoint file named the new catalog but before it was renamed:
    it is read from ``amqalcat.fil.new`` and nothing is reported (the second copy is for
    damage, not for this)."""
    vol = PosixVolume(str(tmp_path))
    (tmp_path / ckpt.CATALOG).write_bytes(ckpt.encode_catalog(8, {"OLD": (1, {})}))
    (tmp_path / (ckpt.CATALOG + ".new")).write_bytes(ckpt.encode_catalog(9, {"NEW": (2, {})}))
    assert ckpt.read_catalog(vol, 9) == ({"NEW": (2, {})}, "")
    (tmp_path / (ckpt.CATALOG + ".new")).unlink()
    (tmp_path / ckpt.CATALOG_COPY).write_bytes(ckpt.encode_catalog(9, {"NEW": (2, {})}))
    found, why = ckpt.read_catalog(vol, 9)
    assert found == {"NEW": (2, {})} and "of checkpoint 8" in why
