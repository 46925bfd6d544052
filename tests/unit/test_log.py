"""The recovery log over byte buffers and small extents: framing, torn tails, mid-log
corruption, records across pages and extents, circular wrap, linear roll, stale writers,
TripleWrite, group commit, bad control files and missing extents."""

from __future__ import annotations

import hashlib
import os
import random
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from lockfs.posix import PosixVolume
from miqm.errors import LogCorruptError, LogFullError, StoreError
from miqm.store import framing as F
from miqm.store.log import CONTROL, SLOTS, RecoveryLog
from miqm.store.logbuffer import native_available
from miqm.store.settings import PAGE, LogSettings

# every test here runs over both append buffers (the C one writes forces itself) and
# both force queues
pytestmark = pytest.mark.usefixtures("c_parts_or_python")

SMALL = LogSettings(file_pages=64, primary_files=2, secondary_files=2)
LINEAR = LogSettings(log_type="LINEAR", file_pages=64, primary_files=2, secondary_files=2)


def new_log(tmp_path: Path, settings: LogSettings = SMALL) -> PosixVolume:
    vol = PosixVolume(str(tmp_path / "log"))
    RecoveryLog.create(vol, settings)
    return vol


def reopen(vol: PosixVolume, gen: int, settings: LogSettings = SMALL
           ) -> tuple[RecoveryLog, list[tuple[int, bytes]]]:
    log = RecoveryLog.open(vol, settings, generation=gen)
    recs = [(r.lsn, r.payload) for r in log.records(log.first_lsn())]
    return log, recs


def payload(i: int, size: int) -> bytes:
    return (f"{i:08d}".encode() * (size // 8 + 1))[:size]


def digest(directory: Path) -> str:
    h = hashlib.sha256()
    for name in sorted(os.listdir(directory)):
        h.update(name.encode())
        h.update((directory / name).read_bytes())
    return h.hexdigest()


# ---------------------------------------------------------------- framing (pure bytes)
def test_page_image_round_trip_and_rejections() -> None:
    data = F.frag_header(5, F.FULL, 7) + b"hello"
    img = F.page_image(data, 42, 7, 1000, sealed=False)
    assert len(img) == PAGE
    info = F.check_page(img, 0, 42)
    assert info is not None and (info.page_no, info.generation, info.used, info.sealed,
                                 info.batch_start) == (42, 7, len(data), False, 1000)
    assert F.check_page(img, 0, 43) is None  # a page from another place (stale cycle)
    torn = bytearray(img)
    torn[F.PAGE_HEADER + 3] ^= 0xFF
    assert F.check_page(torn, 0, 42) is None
    assert F.check_page(F.zero_page(), 0, 0) is None
    assert F.check_page(img[:100], 0, 42) is None
    # bytes after `used` are not covered: a live buffer may grow while it is written
    grown = bytearray(img)
    grown[F.PAGE_HEADER + len(data)] = 1
    assert F.check_page(grown, 0, 42) is not None


def test_seal_header_matches_page_image() -> None:
    data = F.frag_header(3, F.FULL, 1) + b"abc"
    buf = bytearray(PAGE)
    buf[F.PAGE_HEADER:F.PAGE_HEADER + len(data)] = data
    F.seal_header(buf, 9, 1, len(data), True, 77)
    assert bytes(buf) == F.page_image(data, 9, 1, 77, sealed=True)


def test_parse_fragments() -> None:
    data = F.frag_header(2, F.FIRST, 1) + b"ab" + F.frag_header(0, F.LAST, 1)
    assert F.parse_fragments(data, len(data)) == [(0, F.FIRST, 1, 2), (10, F.LAST, 1, 0)]
    with pytest.raises(ValueError):
        F.parse_fragments(data, len(data) - 1)


# ---------------------------------------------------------------- records and extents
def test_records_across_pages_and_extents_survive_reopen(tmp_path: Path) -> None:
    vol = new_log(tmp_path)
    log, recs = reopen(vol, 1)
    assert recs == []
    sizes = [0, 1, 100, F.DATA - F.FRAG_HEADER, F.DATA, 3 * PAGE + 5, 300_000, 7]
    written = []
    for i, size in enumerate(sizes):
        body = payload(i, size)
        written.append((log.append(body), body))
    log.force(written[-1][0])
    log.close()
    log, recs = reopen(vol, 2)
    assert recs == written
    # a record larger than one extent: it spans S0000000 and S0000001 at least
    assert log.stats()["logactive"] >= 2
    lsns = [lsn for lsn, _ in recs]
    assert lsns == sorted(lsns)
    log.close()


def test_unforced_records_are_lost_forced_ones_kept(tmp_path: Path) -> None:
    vol = new_log(tmp_path)
    log, _ = reopen(vol, 1)
    kept = [(log.append_and_force(payload(i, 200)), payload(i, 200)) for i in range(30)]
    log.append(b"never forced")  # the process dies with this only in memory
    log, recs = reopen(vol, 2)
    assert recs == kept
    assert log.end_lsn() == kept[-1][0] + F.FRAG_HEADER + 200
    log.close()


def test_torn_tail_is_the_end_and_appends_continue(tmp_path: Path) -> None:
    vol = new_log(tmp_path)
    log, _ = reopen(vol, 1)
    kept = [(log.append_and_force(payload(i, 900)), payload(i, 900)) for i in range(40)]
    head = log._buf.first_page
    # a torn write of the next in-place page and garbage in the next slot: a force that
    # never completed
    path = tmp_path / "log" / "S0000000.LOG"
    raw = bytearray(path.read_bytes())
    off = (SLOTS + head + 1) * PAGE
    raw[off:off + 600] = F.page_image(b"x" * 2000, head + 1, 1, log._durable, True)[:600]
    slot = log._slot_next[0]
    raw[slot * PAGE:slot * PAGE + 100] = os.urandom(100)
    path.write_bytes(bytes(raw))
    log, recs = reopen(vol, 2)
    assert recs == kept
    more = [(log.append_and_force(payload(100 + i, 900)), payload(100 + i, 900))
            for i in range(10)]
    log.close()
    log, recs = reopen(vol, 3)
    assert recs == kept + more
    log.close()


def test_a_sealed_page_readable_only_from_a_slot_is_kept_by_the_restart_after(
        tmp_path: Path) -> None:
    """A force writes a sealed page to a slot and syncs it before writing it in place; a
    crash between the two leaves the slot the page's only readable copy. The restart that
    follows writes that page in place before its tail seed and later forces reuse the
    slots: a second crash then still reads every record (it used to find the page
    missing, with later pages readable, and refuse the log as corrupt)."""
    vol = new_log(tmp_path)
    log, _ = reopen(vol, 1)
    kept = [(log.append_and_force(payload(i, 900)), payload(i, 900)) for i in range(40)]
    tail = F.lsn_page(log._durable)
    log.close()
    per_extent = SMALL.file_pages - SLOTS
    assert tail % per_extent >= 2, "the test needs the sealed page in the tail's extent"
    path = tmp_path / "log" / f"S{tail // per_extent:07d}.LOG"
    raw = bytearray(path.read_bytes())
    sealed = tail - 1
    at = (SLOTS + sealed % per_extent) * PAGE
    image = bytes(raw[at:at + PAGE])
    assert F.check_page(image, 0, sealed) is not None
    # the slot the restart's tail seed goes to: the one not holding the tail's newest
    # image (slot 0 when that image is in place)
    in_place = F.check_page(raw, (SLOTS + tail % per_extent) * PAGE, tail)
    newest, newest_slot = in_place, -1
    for s in range(SLOTS):
        info = F.check_page(raw, s * PAGE, tail)
        if info is not None and (newest is None or info.order() > newest.order()):
            newest, newest_slot = info, s
    target = 1 - newest_slot if newest_slot >= 0 else 0
    raw[target * PAGE:(target + 1) * PAGE] = image  # the sealed page's only copy ...
    raw[at:at + PAGE] = bytes(PAGE)  # ... its write in place lost with the crash
    path.write_bytes(bytes(raw))
    log, recs = reopen(vol, 2)
    assert recs == kept  # read from the slot
    more = [(log.append_and_force(payload(100 + i, 300)), payload(100 + i, 300))
            for i in range(3)]  # the tail seed and forces that write both slots
    log.close()
    log, recs = reopen(vol, 3)
    assert recs == kept + more
    log.close()


def test_an_unfinished_image_of_the_last_page_is_reported_by_restart(
        tmp_path: Path) -> None:
    """The newest image of the log's last page, begun and not finished (its checksum
    fails): restart ends the log before it, at the image before, and says so in
    ``torn_tail`` (naming the page and the place) instead of leaving it unseen; a clean
    restart, and the one after the repair, say nothing."""
    vol = new_log(tmp_path)
    log, _ = reopen(vol, 1)
    kept = [(log.append_and_force(payload(i, 300)), payload(i, 300)) for i in range(5)]
    tail = F.lsn_page(log._durable)
    log.close()
    log, recs = reopen(vol, 2)
    assert recs == kept and log.torn_tail is None  # a clean end
    log.close()
    log, _ = reopen(vol, 3)
    last = (log.append_and_force(payload(9, 300)), payload(9, 300))
    assert F.lsn_page(last[0]) == tail, "the test needs the last force on the same page"
    log.close()
    per_extent = SMALL.file_pages - SLOTS
    path = tmp_path / "log" / f"S{tail // per_extent:07d}.LOG"
    raw = bytearray(path.read_bytes())
    newest, newest_slot = None, -1
    for slot in range(SLOTS):
        info = F.check_page(raw, slot * PAGE, tail)
        if info is not None and (newest is None or info.order() > newest.order()):
            newest, newest_slot = info, slot
    assert newest_slot >= 0, "TripleWrite keeps the partial last page in a slot"
    # a byte of the last record's, inside what its checksum covers
    raw[newest_slot * PAGE + F.PAGE_HEADER + newest.used - 10] ^= 0xFF
    path.write_bytes(bytes(raw))
    log, recs = reopen(vol, 4)
    assert recs == kept  # the image before: the last force's record is not there
    assert log.torn_tail is not None
    assert f"page {tail} (slot {newest_slot} of S{tail // per_extent:07d}.LOG)" in \
        log.torn_tail
    assert f"LSN {last[0]}" in log.torn_tail  # the end named: where the record was
    more = [(log.append_and_force(payload(20, 300)), payload(20, 300))]
    log.close()
    log, recs = reopen(vol, 5)
    assert recs == kept + more and log.torn_tail is None
    log.close()


def _forced_extent(tmp_path: Path) -> tuple[PosixVolume, Path, bytearray]:
    """A log with 60 forced 700-byte records (pages sealed well before the tail): its
    volume, its first extent's path and that extent's bytes."""
    vol = new_log(tmp_path)
    log, _ = reopen(vol, 1)
    for i in range(60):
        log.append_and_force(payload(i, 700))
    log.close()
    path = tmp_path / "log" / "S0000000.LOG"
    return vol, path, bytearray(path.read_bytes())


def test_mid_log_corruption_names_extent_and_offset_and_writes_nothing(tmp_path: Path) -> None:
    vol, path, raw = _forced_extent(tmp_path)
    bad = (SLOTS + 3) * PAGE + 200  # a page forced long before the tail
    raw[bad] ^= 0x55
    path.write_bytes(bytes(raw))
    before = digest(tmp_path / "log")
    log = RecoveryLog.open(vol, SMALL, generation=2)
    with pytest.raises(LogCorruptError) as err:
        list(log.records(log.first_lsn()))
    assert "S0000000.LOG" in str(err.value) and f"offset {(SLOTS + 3) * PAGE}" in str(err.value)
    assert err.value.amq == "AMQ6118"
    with pytest.raises(LogCorruptError):  # nor does a later write attempt touch anything
        log.append(b"x")
    log.close()
    assert digest(tmp_path / "log") == before


def test_valid_page_with_broken_fragments_is_corruption(tmp_path: Path) -> None:
    """A page whose checksum holds but whose fragments do not chain (a bad writer, not a
    torn write) stops restart with the page named; it is never taken for the end."""
    vol, path, raw = _forced_extent(tmp_path)
    at = (SLOTS + 3) * PAGE
    info = F.check_page(raw, at, 3)
    assert info is not None and info.sealed
    data = bytearray(raw[at + F.PAGE_HEADER:at + F.PAGE_HEADER + info.used])
    first_len = int.from_bytes(data[0:2], "little")
    data[0:2] = (first_len + 1).to_bytes(2, "little")  # the chain now overruns by a byte
    raw[at:at + PAGE] = F.page_image(data, 3, info.generation, info.batch_start, True)
    path.write_bytes(bytes(raw))
    log = RecoveryLog.open(vol, SMALL, generation=2)
    with pytest.raises(LogCorruptError) as err:
        list(log.records(log.first_lsn()))
    assert "S0000000.LOG" in str(err.value) and err.value.amq == "AMQ6118"
    log.close()


def test_stale_writer_after_takeover_is_refused(tmp_path: Path) -> None:
    vol = new_log(tmp_path)
    old, _ = reopen(vol, 1)
    for i in range(5):
        old.append_and_force(payload(i, 100))
    # a new activation takes over (the old one is still running: a fenced-off writer)
    new, recs = reopen(vol, 2)
    assert len(recs) == 5
    new.append_and_force(b"new active")
    for i in range(10):  # the old instance writes after the takeover
        old.append_and_force(payload(i, 1000))
    third = RecoveryLog.open(vol, SMALL, generation=3)
    with pytest.raises(LogCorruptError, match="stale"):
        list(third.records(third.first_lsn()))
    for log in (old, new, third):
        log.close()


def test_older_generation_cannot_open(tmp_path: Path) -> None:
    vol = new_log(tmp_path)
    log, _ = reopen(vol, 5)
    log.append_and_force(b"a")
    log.close()
    with pytest.raises(LogCorruptError, match="generation 4"):
        RecoveryLog.open(vol, SMALL, generation=4)


def test_crash_after_generation_recorded_before_any_append(tmp_path: Path) -> None:
    vol = new_log(tmp_path)
    log, _ = reopen(vol, 1)
    big = payload(1, 20_000)
    log.append_and_force(b"first")
    lsn = log.append(big)
    # force only part of the big record: its first pages are sealed and written, the
    # LAST fragment is not (simulate by writing the buffer's sealed pages only)
    log._flush_lock.acquire()
    try:
        with log._lock:
            log._buf.seal(log._durable)
            for g, image, sealed in log._buf.captured():
                if sealed:
                    log._files[0].pwrite(image, log._offset(g))
        log._files[0].fdatasync()
    finally:
        log._flush_lock.release()
    log2, recs = reopen(vol, 2)
    assert [p for _, p in recs] == [b"first"]
    assert log2.end_lsn() == lsn
    log2._make_ready()  # records generation 2 and dies before appending anything
    log3, recs = reopen(vol, 3)
    assert [p for _, p in recs] == [b"first"]
    log3.append_and_force(b"after")
    log3.close()
    _, recs = reopen(vol, 4)
    assert [p for _, p in recs] == [b"first", b"after"]


# ---------------------------------------------------------------- log space
def test_circular_wrap_reuses_primaries_and_releases_secondaries(tmp_path: Path) -> None:
    vol = new_log(tmp_path)
    log, _ = reopen(vol, 1)
    extent = log.extent_bytes
    body = payload(0, 2000)
    count = 0
    for _round in range(12):  # about twelve extents' worth, restart point kept close
        last = 0
        for _ in range(extent // 2100 // 2):
            last = log.append(body)
            count += 1
        log.force(last)
        log.set_restart_lsn(last)
    names = sorted(n for n in os.listdir(tmp_path / "log") if n.endswith(".LOG"))
    assert names == ["S0000000.LOG", "S0000001.LOG"]  # only the primaries, reused
    assert log.extent_of_page(F.lsn_page(last)) >= 5  # the log really wrapped
    # pressure: without checkpoints the secondaries are formatted, then the log is full
    with pytest.raises(LogFullError) as full:
        while True:
            log.force(log.append(body))
    assert full.value.amq == "AMQ7463"
    names = sorted(n for n in os.listdir(tmp_path / "log") if n.endswith(".LOG"))
    assert len(names) == SMALL.primary_files + SMALL.secondary_files
    log.set_restart_lsn(log.end_lsn())
    names = sorted(n for n in os.listdir(tmp_path / "log") if n.endswith(".LOG"))
    assert len(names) == SMALL.primary_files  # secondaries released
    tail = log.append_and_force(b"still writable")
    log.close()
    log, recs = reopen(vol, 2)
    assert recs[-1] == (tail, b"still writable")
    log.close()


def test_linear_log_rolls_extents_and_keeps_inactive_ones(tmp_path: Path) -> None:
    vol = new_log(tmp_path, LINEAR)
    log, _ = reopen(vol, 1, LINEAR)
    first = log.append_and_force(b"first record")
    body = payload(0, 3000)
    last = 0
    for _ in range(4 * log.extent_bytes // 3000):
        last = log.append(body)
    log.force(last)
    assert log.oldest_extent_for_restart() == "S0000000.LOG"
    log.set_restart_lsn(last, media_lsn=first)
    st = log.stats()
    assert st["loginactive"] >= 3 and st["logactive"] == 1
    assert log.oldest_extent_for_restart() != "S0000000.LOG"
    assert log.oldest_extent_for_media() == "S0000000.LOG"
    # media recovery reads from an inactive extent
    assert next(iter(log.records(first))).payload == b"first record"
    log._preformat and log._preformat.join()
    names = sorted(n for n in os.listdir(tmp_path / "log") if n.endswith(".LOG"))
    assert len(names) >= st["logactive"] + st["loginactive"] + 1  # one formatted ahead
    log.close()
    log, recs = reopen(vol, 2, LINEAR)
    assert recs[0][0] == last
    log.close()


# ---------------------------------------------------------------- write integrity
class _SpyFile:
    def __init__(self, inner, writes):  # type: ignore[no-untyped-def]
        self._inner, self._writes = inner, writes

    def pwrite(self, data, offset):  # type: ignore[no-untyped-def]
        self._writes.append((offset, bytes(data)))
        return self._inner.pwrite(data, offset)

    def direct_fd(self) -> None:  # every write through the spy
        return None

    def __getattr__(self, name):  # type: ignore[no-untyped-def]
        return getattr(self._inner, name)


class _SyncSpyFile(_SpyFile):
    """Records every page write and every fdatasync, in order."""

    def fdatasync(self) -> None:
        self._writes.append((-1, b""))
        self._inner.fdatasync()


def _overwrites_of_only_copies(events: list[tuple[int, bytes]], start: bytes
                               ) -> tuple[int, Counter[str]]:
    """Replay page writes and syncs over the extent's bytes ``start``: how many writes
    overwrote the only durable copy of some page's newest forced image (what a torn write
    there would lose), and what kinds of write were seen."""
    durable = {i: start[i * PAGE:(i + 1) * PAGE] for i in range(len(start) // PAGE)}
    pending: set[int] = set()
    kinds: Counter[str] = Counter()
    bad = 0
    for offset, data in events:
        if offset < 0:  # fdatasync: everything written so far is durable
            pending.clear()
            continue
        for p in range(len(data) // PAGE):
            index = offset // PAGE + p
            image = data[p * PAGE:(p + 1) * PAGE]
            new = F.check_page(image, 0)
            assert new is not None
            kinds[("slot" if index < SLOTS else "in place")
                  + (" sealed" if new.sealed else " partial")] += 1
            old = F.check_page(durable[index], 0)
            if old is not None and index not in pending:
                copies = [i for i, raw in durable.items() if i != index and i not in pending
                          and (info := F.check_page(raw, 0)) is not None
                          and info.page_no == old.page_no and info.order() >= old.order()]
                newest = max(info.order() for raw in durable.values()
                              if (info := F.check_page(raw, 0)) is not None
                              and info.page_no == old.page_no)
                if old.order() == newest and not copies:
                    bad += 1
            durable[index] = image
            pending.add(index)
    return bad, kinds


def _check_c_plans(log: RecoveryLog, events: list[tuple[int, bytes]]) -> list[int]:
    """With the C buffer, check before each force written through Python that the C
    buffer plans the same writes, in the same order, with an fdatasync at the same places
    (the C force's own I/O cannot be watched; its plan can). Returns [forces checked]."""
    checked = [0]
    if not hasattr(log._buf_cls, "plan"):
        return []
    write_through_python = log._write_captured

    def compare(snap, files, k0, batch_start, target):  # type: ignore[no-untyped-def]
        plan = log._buf.plan(log.pages_per_extent, [log._slot_next.get(k0, 0)], log._triple,
                             log._exposed)
        mark = len(events)
        written = write_through_python(snap, files, k0, batch_start, target)
        ops: list[list[int]] = []
        for i, (offset, data) in enumerate(events[mark:]):
            if offset >= 0:
                ops.append([0, offset, len(data) // PAGE, 0])
            elif any(o >= 0 for o, _ in events[mark + i:]):
                ops[-1][3] = 1  # an fdatasync before the force's next write
        assert plan == ([tuple(op) for op in ops], log._exposed)
        checked[0] += 1
        return written

    log._write_captured = compare  # type: ignore[method-assign]
    return checked


@pytest.mark.parametrize("integrity", ["TripleWrite", "SingleWrite"])
def test_no_force_overwrites_the_only_copy_of_forced_records(
        tmp_path: Path, integrity: str) -> None:
    """With TripleWrite no write, up to the next fdatasync, ever replaces the only durable
    copy of a page's newest forced image (a torn write there would lose forced records),
    whatever the force sizes: fresh pages' first images at their own place, later ones in
    the slots, a page sealed right after its first image forced to a slot first. With
    SingleWrite that is exactly what happens (the option's documented risk)."""
    settings = LogSettings(file_pages=64, primary_files=2, secondary_files=2,
                           write_integrity=integrity)
    vol = new_log(tmp_path, settings)
    log, _ = reopen(vol, 1, settings)
    log._make_ready()
    start = (tmp_path / "log" / "S0000000.LOG").read_bytes()
    events: list[tuple[int, bytes]] = []
    log._files[0] = _SyncSpyFile(log._files[0], events)  # type: ignore[assignment]
    planned = _check_c_plans(log, events)
    rng = random.Random(3)
    sent = []
    while log._buf.first_page < 50:  # stays in the first extent
        for _ in range(rng.choice([1, 1, 1, 2, 5])):
            sent.append(payload(len(sent), rng.choice([40, 300, 1000, 2500, 6000])))
            log.append(sent[-1])
        log.force(log._append_lsn)
    bad, kinds = _overwrites_of_only_copies(events, start)
    if integrity == "TripleWrite":
        assert bad == 0, kinds
        # every placement was used: first images at their own place, later ones in a
        # slot, and pages sealed right after their first image forced to a slot first
        assert kinds["in place partial"] and kinds["slot partial"] and kinds["slot sealed"]
    else:
        assert bad > 0 and not kinds["slot partial"]
    assert planned == ([log._buf.forces] if native_available() and hasattr(log._buf, "plan")
                       else [])
    log.close()
    _, recs = reopen(vol, 2, settings)
    assert [p for _, p in recs] == sent


def test_concurrent_commits_share_forces(tmp_path: Path) -> None:
    vol = new_log(tmp_path, LogSettings(file_pages=1024, primary_files=3, secondary_files=2))
    log = RecoveryLog.open(vol, LogSettings(file_pages=1024, primary_files=3,
                                            secondary_files=2), generation=1)
    list(log.records(log.first_lsn()))
    per_thread = 200

    def worker(t: int) -> None:
        for i in range(per_thread):
            log.append_and_force(payload(t * 1000 + i, 100))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    forces, waiting = log.progress()
    assert waiting == 0
    assert forces < 16 * per_thread  # some commits shared a force
    log.close()


def test_a_failed_force_fails_every_caller_waiting_on_it(tmp_path: Path) -> None:
    """Callers queued behind a force that fails are woken with an error: none hangs and
    none is told its record is durable (a woken waiter returns early only when the
    durable point has passed its record)."""
    from miqm.errors import OwnershipLostError

    vol = new_log(tmp_path)
    waiters = 6
    queued = threading.Event()
    armed: list[bool] = [False]

    def guard() -> None:
        # once armed, the first force stalls here until every other caller waits behind
        # it, then fails
        if armed[0]:
            queued.wait(10)
            raise OwnershipLostError("lost the master lock during the force")

    log = RecoveryLog.open(vol, SMALL, generation=1, write_guard=guard)
    list(log.records(log.first_lsn()))
    log.append_and_force(b"ready")  # the log's first write (its tail) before the threads
    armed[0] = True
    outcomes: list[str] = []
    lock = threading.Lock()

    def commit(i: int) -> None:
        try:
            log.append_and_force(payload(i, 64))
            result = "durable"
        except Exception as exc:  # the outcome is what the test checks
            result = type(exc).__name__
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=commit, args=(i,)) for i in range(waiters + 1)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while log.progress()[1] < waiters + 1 and time.monotonic() < deadline:
        time.sleep(0.005)
    queued.set()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads), "a waiter hung after the failed force"
    assert len(outcomes) == waiters + 1
    assert "durable" not in outcomes
    assert outcomes.count("OwnershipLostError") == 1  # the leader gets the guard's error
    log.close()


# ---------------------------------------------------------------- bad input
def test_corrupt_control_file_is_one_clear_error(tmp_path: Path) -> None:
    vol = new_log(tmp_path)
    path = tmp_path / "log" / CONTROL
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0x20
    path.write_bytes(bytes(raw))
    with pytest.raises(LogCorruptError) as err:
        RecoveryLog.open(vol, SMALL, generation=1)
    assert CONTROL in str(err.value) and err.value.amq == "AMQ6118"
    path.write_bytes(b"garbage")
    with pytest.raises(LogCorruptError):
        RecoveryLog.open(vol, SMALL, generation=1)
    path.unlink()
    with pytest.raises(StoreError, match="missing"):
        RecoveryLog.open(vol, SMALL, generation=1)


def test_missing_or_short_extent_is_one_clear_error(tmp_path: Path) -> None:
    vol = new_log(tmp_path)
    (tmp_path / "log" / "S0000000.LOG").unlink()
    with pytest.raises(StoreError) as err:
        RecoveryLog.open(vol, SMALL, generation=1)
    assert "S0000000.LOG" in str(err.value) and err.value.amq == "AMQ6767"
    vol2 = new_log(tmp_path / "b")
    with open(tmp_path / "b" / "log" / "S0000000.LOG", "r+b") as f:
        f.truncate(PAGE * 3)
    with pytest.raises(LogCorruptError, match="damaged"):
        RecoveryLog.open(vol2, SMALL, generation=1)


def test_create_refuses_an_existing_log(tmp_path: Path) -> None:
    vol = new_log(tmp_path)
    with pytest.raises(StoreError, match="already holds a log"):
        RecoveryLog.create(vol, SMALL)


def test_a_refused_guard_stops_the_force_before_any_write(tmp_path: Path) -> None:
    """The write guard runs before a force writes: a refusal writes nothing, reaches the
    caller as the guard's own error, and stops the log."""
    from miqm.errors import LogWriteError, OwnershipLostError

    vol = new_log(tmp_path)
    refuse: list[bool] = [False]
    calls: list[int] = []

    def guard() -> None:
        calls.append(1)
        if refuse[0]:
            raise OwnershipLostError("the master lock is another instance's now")

    log = RecoveryLog.open(vol, SMALL, generation=1, write_guard=guard)
    list(log.records(log.first_lsn()))
    log.append_and_force(b"kept")
    assert calls
    extent = tmp_path / "log" / "S0000000.LOG"
    before = extent.read_bytes()
    refuse[0] = True
    with pytest.raises(OwnershipLostError, match="another instance's now"):
        log.append_and_force(b"never written")
    assert extent.read_bytes() == before
    with pytest.raises(LogWriteError):
        log.append(b"after the refusal")
    log, recs = reopen(vol, 2)
    assert [p for _, p in recs] == [b"kept"]
    log.close()


def test_the_pages_a_restart_checks_after_the_end_are_those_named_in_place() -> None:
    """After the log's end a restart checks only the pages whose header carries the magic
    and their own number (F.pages_named): a page of an older lap, a zero page and a
    page written elsewhere are passed over, and every page check_page accepts with its
    number is among those named."""
    first = 4096 * 7 + 10
    torn = bytearray(F.page_image(b"torn", first + 3, 1, 0, True))
    torn[F.PAGE_HEADER + 1] ^= 1  # its number is right, its checksum not: named, refused
    images = [F.page_image(b"this lap", first, 1, 0, True),
              F.page_image(b"older lap", first + 1 - 4096, 1, 0, True),
              bytes(F.PAGE),
              bytes(torn),
              F.page_image(b"moved", first + 99, 1, 0, False),
              F.page_image(b"this lap too", first + 5, 2, 0, False)]
    buf = b"\0" * 512 + b"".join(images)
    named = F.pages_named(buf, 512, len(images), first)
    assert named == [0, 3, 5]
    valid = [i for i in range(len(images)) if F.check_page(buf, 512 + i * F.PAGE, first + i)]
    assert valid == [0, 5] and set(valid) <= set(named)
    assert F.pages_named(buf, 512, 100, first) == named  # no further than the buffer
    assert F.pages_named(buf, 512 + F.PAGE, 2, first + 1) == []


def _tail_extent(tmp_path: Path, g: int) -> Path:
    return tmp_path / "log" / f"S{g // (SMALL.file_pages - SLOTS):07d}.LOG"


def test_a_damaged_image_superseded_by_a_later_one_is_not_reported_again(
        tmp_path: Path) -> None:
    """The first image of a fresh page goes to its own place; damaged there, restart ends
    the log before it and reports AMQ1134 (right: that image was the newest). The
    activation after it writes the page's later images to the slots (a first force too
    big to share the page goes to a slot), and its in-place image stays damaged until the
    page is sealed. The restart after that reported it again, naming an end the records
    had long passed: that image was superseded by the slot's, and nothing was lost."""
    vol = new_log(tmp_path)
    log, _ = reopen(vol, 1)
    kept = [(log.append_and_force(payload(i, 4000)), payload(i, 4000)) for i in range(3)]
    g = -1
    for i in range(300):
        kept.append((log.append_and_force(payload(i, 300)), payload(i, 300)))
        g = F.lsn_page(log._durable)
        if log._exposed == g and F.lsn_page(kept[-1][0]) == g and g >= 2:
            break
    assert log._exposed == g, "the test needs a first image written in place"
    log.close()
    path = _tail_extent(tmp_path, g)
    raw = bytearray(path.read_bytes())
    at = (SLOTS + g % (SMALL.file_pages - SLOTS)) * PAGE
    raw[at + F.PAGE_HEADER + 5] ^= 0xFF  # inside what its checksum covers
    path.write_bytes(bytes(raw))
    before = [r for r in kept if F.lsn_page(r[0]) < g]
    log, recs = reopen(vol, 2)
    assert recs == before and log.torn_tail is not None  # the newest image: reported
    more = [(log.append_and_force(payload(500, 2500)), payload(500, 2500))]
    assert F.lsn_page(more[0][0]) == g
    log.close()
    assert F.named_but_invalid(path.read_bytes(), at, g), "the damaged image stays"
    log, recs = reopen(vol, 3)
    assert recs == before + more
    assert log.torn_tail is None, log.torn_tail
    log.close()


def test_a_damaged_image_of_a_sealed_page_read_from_its_slot_is_not_reported(
        tmp_path: Path) -> None:
    """A force that seals a page whose first image is in place writes it to a slot and
    syncs it, then writes it in place with the next page's first image; a crash during
    that write leaves the in-place image torn and the next page unwritten. Restart reads
    the sealed page from the slot, every record on it intact: the torn image is one
    recovery does not need, and it was reported as AMQ1134 naming that page."""
    vol = new_log(tmp_path)
    log, _ = reopen(vol, 1)
    kept = [(log.append_and_force(payload(i, 700)), payload(i, 700)) for i in range(30)]
    g = F.lsn_page(log._durable) - 1  # a sealed page, and the tail page after it
    log.close()
    path = _tail_extent(tmp_path, g + 1)
    raw = bytearray(path.read_bytes())
    per_extent = SMALL.file_pages - SLOTS
    assert g % per_extent < per_extent - 1, "the test needs both pages in one extent"
    at = (SLOTS + g % per_extent) * PAGE
    image = bytes(raw[at:at + PAGE])
    info = F.check_page(image, 0, g)
    assert info is not None and info.sealed
    # the crash's state: the sealed copy in a slot (synced first), the in-place write torn
    # half way, and nothing of the next page; the slot chosen is one not holding the
    # next page (which the crash never wrote)
    raw[0:PAGE] = image
    raw[PAGE:2 * PAGE] = bytes(PAGE)
    raw[at + 2048:at + PAGE] = bytes(2048)
    nxt = (SLOTS + (g + 1) % per_extent) * PAGE
    raw[nxt:nxt + PAGE] = bytes(PAGE)
    path.write_bytes(bytes(raw))
    # the records that end on that page (one split onto the next is lost with it)
    on_g = [r for r in kept if r[0] + F.FRAG_HEADER + len(r[1]) <= F.page_lsn(g) + F.DATA]
    log, recs = reopen(vol, 2)
    assert recs == on_g  # every record of the sealed page, from its slot
    assert log.torn_tail is None, log.torn_tail
    log.close()


def test_a_damaged_newest_image_is_still_reported_after_a_clean_end(
        tmp_path: Path) -> None:
    """The warning stays for real damage: the newest image of the last page damaged in
    its data after a clean end (the older image in the other slot is what restart can
    use) and, separately, with no valid image of the page at all."""
    vol = new_log(tmp_path)
    log, _ = reopen(vol, 1)
    kept = [(log.append_and_force(payload(i, 300)), payload(i, 300)) for i in range(5)]
    tail = F.lsn_page(log._durable)
    log.close()
    path = _tail_extent(tmp_path, tail)
    raw = bytearray(path.read_bytes())
    images = [(s, F.check_page(raw, s * PAGE, tail)) for s in range(SLOTS)]
    s, newest = max(((s, i) for s, i in images if i is not None), key=lambda x: x[1].order())
    raw[s * PAGE + F.PAGE_HEADER + newest.used - 3] ^= 0x01
    path.write_bytes(bytes(raw))
    log, recs = reopen(vol, 2)
    assert recs != kept and log.torn_tail is not None
    assert f"page {tail} (slot {s} of" in log.torn_tail
    log.close()
