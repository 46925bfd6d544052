"""The logger-style integrity test: ``-f`` format, ``-a`` write, ``-i`` analyse; ``-x``.

``-f`` makes ``amqmfsck.dat``: a header page and data pages (``-p`` pages of 4 KiB,
rounded up to a multiple of 16), written with zeros and synced, as log extents are.

``-a`` runs on two hosts at once. Whoever holds the file's exclusive lock writes as the
logger does: one page at a time, each followed by ``fdatasync``, round the data pages. A
page carries its sequence number, the *generation* of its writer (one more than the
highest generation found in the file when the writer was granted the lock) and a CRC.
The other waits for the lock; when the administrator does something dreadful to the
writer (kills its host, pulls its cable), it is granted the lock, finds the last page
written, and carries on from there in the next generation.

``-i`` reads the file afterwards. In sequence order the generations must never go down:
a page of an older generation after a newer one is a write that failed before the
outage yet landed after it (a *hole* in the log, MQ's "Media image not available" in
waiting). Every page of the last lap must be there and intact; a torn page is allowed
only where the last writer was stopped mid-write.
"""

from __future__ import annotations

import errno
import hashlib
import signal
import struct
import time
from dataclasses import dataclass
from typing import Any

import crc32c

from fsck.meet import PERIOD, Party, describe_party, live_parties, progress
from fsck.report import (
    CAUSE_BUSY,
    CAUSE_FULL,
    CAUSE_INTEGRITY,
    Failed,
    FsckError,
    TestResult,
    run_test,
)
from lockfs.errors import (
    LockFsError,
    LockLostError,
    VolumeIOError,
    VolumeNotFound,
    VolumeStalled,
)
from lockfs.volume import LockMode, Volume, VolumeFile

PAGE = 4096
DATA_FILE = "amqmfsck.dat"
_FILE_HEAD = struct.Struct("<8sII")  # magic, pages, crc
_PAGE_HEAD = struct.Struct("<4sIQQI8sI")  # magic, gen, seq, gen start, index, writer, crc
FILE_MAGIC = b"FSCKLOG1"
PAGE_MAGIC = b"FSPG"


def round_pages(pages: int) -> int:
    """``pages`` rounded up to a multiple of 16 (at least 16)."""
    return max(16, (pages + 15) // 16 * 16)


def make_page(gen: int, seq: int, index: int, writer: bytes, start: int = 1) -> bytes:
    """A data page with its header and a payload derived from its identity; ``start`` is
    the sequence number its generation began at."""
    pattern = struct.pack("<IQI", gen, seq, index) + writer
    body = (pattern * (PAGE // len(pattern) + 1))[:PAGE - _PAGE_HEAD.size]
    head = _PAGE_HEAD.pack(PAGE_MAGIC, gen, seq, start, index, writer, 0)
    crc = crc32c.crc32c(head + body)
    return _PAGE_HEAD.pack(PAGE_MAGIC, gen, seq, start, index, writer, crc) + body


@dataclass(frozen=True)
class Page:
    """What one page of the file holds."""

    index: int
    state: str  # "blank", "torn" or "valid"
    gen: int = 0
    seq: int = 0
    writer: bytes = b""
    start: int = 0


def parse_page(index: int, raw: bytes) -> Page:
    """Classify one page."""
    if not raw.strip(b"\0"):
        return Page(index, "blank")
    if len(raw) != PAGE:
        return Page(index, "torn")
    magic, gen, seq, start, idx, writer, crc = _PAGE_HEAD.unpack_from(raw)
    body = raw[_PAGE_HEAD.size:]
    if magic != PAGE_MAGIC or idx != index or crc32c.crc32c(
            _PAGE_HEAD.pack(magic, gen, seq, start, idx, writer, 0) + body) != crc:
        return Page(index, "torn")
    return Page(index, "valid", gen, seq, writer, start)


def index_of(seq: int, pages: int) -> int:
    """The data page sequence number ``seq`` is written to (page 0 is the header)."""
    return (seq - 1) % (pages - 1) + 1


def read_layout(vol: Volume) -> tuple[int, list[Page]]:
    """(pages, every data page) of the test file."""
    try:
        f = vol.open(DATA_FILE)
    except VolumeNotFound:
        # -i is the third phase: it analyses what -a wrote (a -c run's data file is
        # checked by -c itself), so say the whole sequence, not only the format
        raise FsckError(f"{vol.url} has no {DATA_FILE} to analyse: -i checks the file "
                        "that amqmfsck -f formats and amqmfsck -a (on two hosts at once, "
                        "one of them then stopped in some dreadful way) writes; run those "
                        "first") from None
    with f:
        head = f.pread(PAGE, 0)
        pages = check_header(head, vol.url)
        out: list[Page] = []
        chunk = 256
        for first in range(1, pages, chunk):
            n = min(chunk, pages - first)
            raw = f.pread(n * PAGE, first * PAGE)
            for k in range(n):
                out.append(parse_page(first + k, raw[k * PAGE:(k + 1) * PAGE]))
    return pages, out


def check_header(head: bytes, where: str) -> int:
    """The page count in a header page; FsckError if it is not one."""
    if len(head) < _FILE_HEAD.size:
        raise FsckError(f"{DATA_FILE} in {where} is empty: format it with amqmfsck -f")
    magic, pages, crc = _FILE_HEAD.unpack_from(head)
    if magic != FILE_MAGIC or crc32c.crc32c(_FILE_HEAD.pack(magic, pages, 0)) != crc:
        raise FsckError(f"{DATA_FILE} in {where} is not an amqmfsck test file (or its header "
                        "is damaged): format it again with amqmfsck -f")
    return int(pages)


def ensure_no_writer(vol: Volume, what: str) -> None:
    """FsckError when an ``-a`` writer is still at work on the test file: ``what`` (format
    it again, analyse it) would destroy its test or read pages still being written."""
    live = live_parties(vol, ("a",), states=("waiting", "writing"))
    if live:
        raise FsckError(f"cannot {what}: {describe_party(live[0])}, is still running in "
                        f"{vol.url}; stop every amqmfsck -a first (Ctrl-C or kill)")
    try:
        f = vol.open(DATA_FILE)
    except VolumeNotFound:
        return
    with f:
        if not f.try_lock(LockMode.EXCLUSIVE):
            raise FsckError(f"cannot {what}: {DATA_FILE} in {vol.url} is locked by a "
                            "writer: an amqmfsck -a still runs somewhere, or its host was "
                            "cut off and the server has not yet released its lock (wait for "
                            "the lease to end)")
        f.unlock()


#: bytes -f zero-fills and syncs between two progress lines
FORMAT_STEP = 64 << 20


def run_format(vol: Volume, results: list[TestResult], pages: int,
               quiet: bool = True) -> None:
    """-f: write a fresh zero-filled test file of ``pages`` pages."""
    ensure_no_writer(vol, f"format {DATA_FILE} again")
    with run_test(results, "format test file") as res:
        pages = _fit(vol, round_pages(pages), res)
        progress(f"Formatting {DATA_FILE}: {pages} pages of 4 KiB "
                 f"({pages * PAGE / (1 << 20):.1f} MiB)...", quiet)
        _unlink(vol, DATA_FILE)
        for name in vol.listdir(""):  # what earlier writers synced is of no concern now
            if name.startswith("amqmfsck.a.") and name.endswith(".state"):
                _unlink(vol, name)
        try:
            with vol.open(DATA_FILE, create=True) as f:
                # in steps with a line each: a GiB over a slow NFS link takes minutes,
                # which in silence look like a hang
                total, done = pages * PAGE, 0
                while done < total:
                    done = min(total, done + FORMAT_STEP)
                    f.allocate_zeroed(done)
                    if total > FORMAT_STEP:
                        progress(f"  {done / (1 << 20):.0f} of {total / (1 << 20):.0f} MiB "
                                 "written and synced", quiet)
                magic = FILE_MAGIC
                crc = crc32c.crc32c(_FILE_HEAD.pack(magic, pages, 0))
                f.pwrite(_FILE_HEAD.pack(magic, pages, crc).ljust(PAGE, b"\0"), 0)
                f.fdatasync()
        except BaseException:
            # half a test file (a full filesystem, Ctrl-C) is no test file: -a and -i
            # would only call it damaged
            try:
                vol.unlink(DATA_FILE)
            except LockFsError:
                pass
            raise
        res.details["pages"] = pages
        res.step(f"formatted {DATA_FILE}: {pages} pages of 4 KiB ({pages * PAGE} bytes)")


def _fit(vol: Volume, pages: int, res: TestResult) -> int:
    """``pages`` reduced (as MQ's amqmfsck reduces the test file) to take at most 90% of
    the free space, so that -f does not fill the filesystem only to fail at the end of a
    long format; a filesystem without room for 16 pages fails the test as full."""
    try:
        avail = vol.available_bytes()
    except LockFsError:
        return pages  # cannot tell: the writes will say
    if avail is None or pages * PAGE <= avail * 0.9:
        return pages
    fit = int(avail * 0.9) // PAGE // 16 * 16
    if fit < 16:
        raise Failed(f"format test file: the filesystem is full ({avail // 1024} KiB free; "
                     f"the smallest test file takes {16 * PAGE // 1024} KiB)", CAUSE_FULL,
                     "free space on the filesystem, or raise the user's quota: a queue "
                     "manager needs room for its log extents and queue files")
    res.notes.append(f"the test file was reduced from {pages} to {fit} pages "
                     f"({fit * PAGE / (1 << 20):.1f} MiB) to fit the "
                     f"{avail / (1 << 20):.1f} MiB free")
    return fit


def _unlink(vol: Volume, name: str) -> None:
    """Remove ``name``; gone already is as good."""
    try:
        vol.unlink(name)
    except VolumeNotFound:
        pass


def analyse(pages: int, layout: list[Page],
            acked: dict[int, int] | None = None) -> dict[str, Any]:
    """The verdict on a file's pages: ``ok``, ``problems`` and a summary.

    ``acked`` maps a generation to the last sequence number its writer saw synced (from
    the writers' state files): the next generation must start after it, or writes the
    filesystem had acknowledged were lost."""
    valid = sorted((p for p in layout if p.state == "valid"), key=lambda p: p.seq)
    torn = [p.index for p in layout if p.state == "torn"]
    problems: list[str] = []
    gens: dict[int, list[int]] = {}
    for p in valid:
        lo_hi = gens.setdefault(p.gen, [p.seq, p.seq])
        lo_hi[0], lo_hi[1] = min(lo_hi[0], p.seq), max(lo_hi[1], p.seq)
    if not valid:
        return {"ok": True, "pages": pages, "written": 0, "problems": [],
                "generations": {}, "torn": torn,
                "summary": "nothing was written (run -a first)"}
    starts: dict[int, int] = {}
    for p in valid:
        starts[p.gen] = min(starts.get(p.gen, p.start), p.start)
    for p in valid:
        later = [g for g, st in starts.items() if g > p.gen and st <= p.seq]
        if later:
            problems.append(f"hole: page {p.index} holds sequence {p.seq} of generation "
                            f"{p.gen}, but generation {min(later)} had taken over from "
                            f"sequence {starts[min(later)]} (a write that failed before the "
                            "outage landed after it)")
    for g, last in sorted((acked or {}).items()):
        nxt = min((st for h, st in starts.items() if h > g), default=None)
        if nxt is not None and nxt <= last:
            problems.append(f"lost: generation {g} had sequence {last} acknowledged as "
                            f"synced, yet the next writer found the log ending at "
                            f"{nxt - 1} (acknowledged writes did not survive)")
    max_seq = valid[-1].seq
    lap = pages - 1
    want = range(max(1, max_seq - lap + 1), max_seq + 1)
    by_index = {p.index: p for p in layout}
    tail = index_of(max_seq + 1, pages)
    for seq in want:
        p = by_index[index_of(seq, pages)]
        if (p.state == "valid" and p.seq == seq) or (p.index == tail and p.state == "torn"):
            continue  # present, or overwritten by the last writer's torn final write
        what = ("torn" if p.state == "torn" else "blank" if p.state == "blank"
                else f"sequence {p.seq} of generation {p.gen}")
        problems.append(f"hole: sequence {seq} is missing from page {p.index} ({what})")
        if len(problems) >= 8:
            break
    torn_inside = [i for i in torn if i != tail]
    if torn_inside and not any("torn" in x for x in problems):
        problems.append(f"torn pages inside the log: {torn_inside[:8]}")
    summary = (f"{len(want)} pages of the last lap in sequence "
               f"{want.start}-{max_seq}; generations "
               + ", ".join(f"{g}: {lo}-{hi}" for g, (lo, hi) in sorted(gens.items())))
    if tail in torn:
        summary += f"; the page after the last ({tail}) is torn: the last writer was stopped"
    return {"ok": not problems, "pages": pages, "written": max_seq, "problems": problems[:8],
            "generations": {str(g): v for g, v in gens.items()}, "torn": torn,
            "summary": summary}


def acked_by_generation(vol: Volume) -> dict[int, int]:
    """What the -a writers' state files say they had synced, per generation."""
    import json

    out: dict[int, int] = {}
    for name in vol.listdir(""):
        if not (name.startswith("amqmfsck.a.") and name.endswith(".state")):
            continue
        try:
            rec = json.loads(vol.read_bytes(name).decode("utf-8", "replace").strip())
            gen, last = rec["gen"], rec["acked"]
        except (LockFsError, ValueError, KeyError, TypeError, RecursionError):
            continue
        if type(gen) is not int or type(last) is not int or gen < 1 or last < 0:
            continue  # not a writer's record: garbage, or another program's file
        out[gen] = max(out.get(gen, 0), last)
    return out


def run_analyse(vol: Volume, results: list[TestResult]) -> None:
    """-i: analyse the test file (refused while an -a writer is at work on it)."""
    ensure_no_writer(vol, f"analyse {DATA_FILE}")
    with run_test(results, "integrity analysis") as res:
        pages, layout = read_layout(vol)
        if not any(p.state == "valid" for p in layout):
            torn = sum(p.state == "torn" for p in layout)
            raise FsckError(f"{DATA_FILE} in {vol.url} holds no page written by amqmfsck -a"
                            + (f" ({torn} pages hold something else)" if torn else "")
                            + ": run amqmfsck -a on two hosts first (after -f)")
        verdict = analyse(pages, layout, acked_by_generation(vol))
        res.details.update(verdict)
        res.step(verdict["summary"])
        gens = sorted(int(g) for g in verdict["generations"])
        if len(gens) == 1:
            # a pass that tested no outage: one writer only, or the survivor wrote a whole
            # lap over the pages around the takeover
            res.notes.append(f"the file holds generation {gens[0]} only: no takeover is left "
                             "to check (one writer wrote, or the next one overwrote the "
                             "pages around the takeover); run -a on two hosts, do something "
                             "dreadful to the writer, and stop the survivor before it has "
                             "written a whole lap (or format a larger file with -f -p)")
        if not verdict["ok"]:
            raise Failed("; ".join(verdict["problems"][:3]), CAUSE_INTEGRITY,
                         "this filesystem lets a write that failed before an outage land "
                         "after it: it cannot hold a recovery log for multi-instance queue "
                         "managers (check hard mounts and the server's handling of "
                         "reconnecting clients)")


def run_writer(vol: Volume, results: list[TestResult], *, wait: float | None,
               quiet: bool) -> None:
    """-a: take the test file's lock when it comes free and write as the logger does,
    until SIGTERM or SIGINT (Ctrl-C) stops it, its lock is lost or a write fails.
    ``wait``: seconds to wait for the lock (None: until stopped, as the test needs)."""
    stop = {"signal": 0}

    def on_stop(signum: int, _frame: object) -> None:
        stop["signal"] = signum

    with run_test(results, "logger-style writes") as res:
        try:
            f = vol.open(DATA_FILE)
        except VolumeNotFound:
            raise FsckError(f"{vol.url} has no {DATA_FILE}: format one first with "
                            "amqmfsck -f [-p pages]") from None
        old = {sig: signal.signal(sig, on_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            with f:
                _writer(vol, f, res, wait, quiet, stop)
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)


def _writer(vol: Volume, f: VolumeFile, res: TestResult, wait: float | None, quiet: bool,
            stop: dict[str, int]) -> None:
    pages = check_header(f.pread(PAGE, 0), vol.url)
    party = Party(vol, "a")
    try:
        party.publish("waiting")
        progress("Waiting for the test file's lock...", quiet)
        t0 = party.clock()
        while not f.try_lock(LockMode.EXCLUSIVE):
            if stop["signal"]:
                res.notes.append(f"stopped by {signal.Signals(stop['signal']).name} "
                                 "before it was granted the lock: wrote nothing")
                return
            if wait is not None and party.clock() - t0 > wait:
                res.notes.append(f"never granted the lock in {wait:g} s: the other "
                                 "writer kept it")
                return
            party.publish()
            party.sleep(PERIOD)
        waited = party.clock() - t0
        layout = []
        for first in range(1, pages, 256):
            n = min(256, pages - first)
            raw = f.pread(n * PAGE, first * PAGE)
            layout += [parse_page(first + k, raw[k * PAGE:(k + 1) * PAGE])
                       for k in range(n)]
        valid = [p for p in layout if p.state == "valid"]
        gen = max((p.gen for p in valid), default=0) + 1
        seq = max((p.seq for p in valid), default=0) + 1
        start = seq
        writer = hashlib.blake2b(party.token.encode(), digest_size=8).digest()
        res.details.update(generation=gen, first_seq=seq, waited=round(waited, 3))
        res.step(f"granted the lock after {waited:.2f} s: generation {gen} writes from "
                 f"sequence {seq}")
        party.publish("writing", gen=gen, seq=seq, acked=seq - 1)
        progress(f"Writing as the logger does (generation {gen}). Stop this host in "
                 "some dreadful way, then run amqmfsck -i.", quiet)
        last = answered = party.clock()
        written = 0
        try:
            while not stop["signal"]:
                f.pwrite(make_page(gen, seq, index_of(seq, pages), writer, start),
                         index_of(seq, pages) * PAGE)
                f.fdatasync()
                written += 1
                seq += 1
                if party.clock() - last >= PERIOD:
                    party.publish(seq=seq, acked=seq - 1)
                    last = party.clock()
                answered = party.clock()
        except (LockLostError, VolumeStalled, LockFsError) as exc:
            why = writer_stopped_why(exc, party.clock() - answered, vol.lease_seconds)
            res.notes.append(f"stopped writing after {written} pages: {why} ({exc}); "
                             "now run amqmfsck -i")
        if stop["signal"]:
            res.notes.append(f"stopped by {signal.Signals(stop['signal']).name} after "
                             f"{written} pages; now run amqmfsck -i")
        res.details.update(written=written, last_seq=seq - 1)
        res.step(f"wrote {written} pages (to sequence {seq - 1})")
    finally:
        try:
            party.publish("stopped")
        except LockFsError:
            pass
        try:
            party.close(remove=False)  # -i reads what each writer had synced; -x removes
        except LockFsError:
            pass


def writer_stopped_why(exc: LockFsError, silent: float, lease: float | None) -> str:
    """Why an -a writer stopped writing, for its note: a call that failed after none was
    answered for longer than the lease means this writer was stopped (SIGSTOP) or cut off
    and its lease ran out, as NFSv4 says it must (the call "timing out" on resuming was
    reported as a server that stopped answering)."""
    if lease and silent > lease:
        return (f"this process was stopped or cut off for {silent:.1f} s, longer than the "
                f"lease ({lease:g} s): its lock passed to the other writer")
    if isinstance(exc, LockLostError):
        return "its lock was lost"
    if isinstance(exc, VolumeStalled):
        return "the filesystem stopped answering"
    return "a write failed"


def delete_files(vol: Volume, results: list[TestResult], *, wait: float = 120.0,
                 quiet: bool = True) -> None:
    """-x: remove every amqmfsck test file in the directory, once no other amqmfsck is
    at work in it (waiting up to ``wait`` seconds for those that are to end)."""
    with run_test(results, "delete test files") as res:
        end = time.monotonic() + wait
        told = False
        while True:
            live = live_parties(vol)
            if not live:
                break
            if time.monotonic() >= end:
                raise Failed(f"{describe_party(live[0])}, is still running in {vol.url}: "
                             "deleting its files would break its test", CAUSE_BUSY,
                             "let it end (or stop it), then run amqmfsck -x again")
            if not told:
                progress(f"Waiting for {describe_party(live[0])} to end...", quiet)
                told = True
        names = sorted(n for n in vol.listdir("") if n.startswith("amqmfsck."))
        deleted = []
        for n in names:
            try:
                vol.unlink(n)
                deleted.append(n)
            except VolumeNotFound:
                pass  # removed by its owner meanwhile
            except VolumeIOError as exc:
                if exc.errno != errno.EISDIR:
                    raise
                res.notes.append(f"{n} is a directory, not a test file: left alone")
        res.step(f"deleted {len(deleted)} files: {', '.join(deleted) or 'none'}")


__all__ = ["DATA_FILE", "Page", "analyse", "delete_files", "ensure_no_writer", "index_of",
           "make_page", "parse_page", "round_pages", "run_analyse", "run_format",
           "run_writer"]
