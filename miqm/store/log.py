"""The recovery log: pre-formatted extents, write-ahead appends, group commit, TripleWrite.

Layout (see ``docs/log-format.md``): the log directory holds the control file
``amqhlctl.lfh`` and extents ``S0000000.LOG``… of ``LogFilePages`` pages each. Pages 0
and 1 of every extent are the TripleWrite slots; pages 2… hold log pages (framing in
:mod:`miqm.store.framing`). Log pages are numbered globally: page ``g`` lives in logical
extent ``g // (LogFilePages - 2)``. Circular logs map logical extents onto a ring of
reusable files (the control file says which); linear logs name the file after the
logical extent.

Writing rules that make every crash recoverable:

* A page image never overwrites the place holding that page's newest forced image
  unless a newer copy is already durable elsewhere (TripleWrite; exactly where each image
  goes is ``_write_captured``'s docstring and docs/log-format.md). Sealed (full) pages go
  in place; the partial last page of a force goes to one of the two slots of its extent,
  alternately, except the first image of a fresh page, which nothing forced yet, goes in
  place. ``SingleWrite`` rewrites the partial page in place instead (faster, and a torn
  write can then damage records already forced on that page - MQ's trade-off).
* A force writes everything appended so far and fdatasyncs it; concurrent ``force`` calls
  queue on one lock and the holder writes for all of them (group commit). Threads that
  wait for a force gather on one CPU (``gather_cpu``; see ``_forcequeue.c`` for why).
* The control file names every extent before any page of it is written.

Reading stops at the first page with no valid image (torn tail) or at the last
unsealed page. If a valid page written by a *later* force than the missing one exists
further on, the missing page had been forced: that is corruption, reported with the
extent and offset, and nothing is written. Records of an older activation generation
after a newer one are refused (a stale writer).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import heapq
import itertools
import json
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import crc32c

from lockfs.errors import LockFsError, VolumeNotFound
from lockfs.volume import Volume, VolumeFile
from miqm.errors import LogCorruptError, LogFullError, LogWriteError, StoreError
from miqm.histogram import SIZE_BUCKETS, Histogram
from miqm.store import framing as F
from miqm.store.logbuffer import (
    WriteStats,
    buffer_class,
    full_fragment_scanner,
    native_force_queue,
)
from miqm.store.settings import GATHER_AUTO, GATHER_NONE, PAGE, LogSettings, cpu_text

CONTROL = "amqhlctl.lfh"
SLOTS = 2
CONTROL_MAGIC = b"MQLH"
CONTROL_VERSION = 1
_CTL_HDR = struct.Struct("<4sHHII")  # magic, version, reserved, crc32c, length
_CHUNK_PAGES = 256
#: the fewest pages a circular log keeps back for the records that make room (else a
#: 32nd of an extent): 16 KiB, a CHECKPOINT record of some 200 units in flight
_RESERVE_MIN_PAGES = 4
#: what AMQ6118 for a page that cannot be a record of this log tells the operator
_DAMAGED_REMEDY = ("restore the data and log directories together from a backup (a log "
                   "file copied in from another queue manager or another time reads the "
                   "same way)")
_STALE_REMEDY = ("the queue manager cannot start: end every instance, check the shared "
                 "filesystem's locking with amqmfsck, and restore the data and log "
                 "directories together from a backup")


def extent_name(index: int) -> str:
    """``S0000012.LOG`` for file index 12."""
    return f"S{index:07d}.LOG"


class LogRecord(NamedTuple):
    """One record read back from the log (a tuple: restart reads a million of them)."""

    lsn: int
    generation: int
    payload: bytes
    next_lsn: int


# builds a LogRecord without the namedtuple's Python-level __new__ (restart makes millions)
_record = tuple.__new__


@dataclass
class _Control:
    log_type: str
    file_pages: int
    generation: int
    restart_lsn: int
    media_lsn: int | None
    active: list[tuple[int, str]]  # (logical extent, file name), in order
    free: list[str]  # circular: formatted files ready for reuse
    generation_lsn: int = 0  # where the current generation began to append

    def to_bytes(self) -> bytes:
        body = json.dumps({
            "log_type": self.log_type, "file_pages": self.file_pages,
            "generation": self.generation, "restart_lsn": self.restart_lsn,
            "media_lsn": self.media_lsn, "active": [list(a) for a in self.active],
            "free": self.free, "generation_lsn": self.generation_lsn,
        }, sort_keys=True).encode()
        return _CTL_HDR.pack(CONTROL_MAGIC, CONTROL_VERSION, 0, crc32c.crc32c(body),
                             len(body)) + body

    @classmethod
    def from_bytes(cls, raw: bytes, where: str) -> _Control:
        bad = LogCorruptError(
            f"the log control file {where} is corrupt; restore the log directory from a "
            "backup (the extents themselves were not touched)", amq="AMQ6118")
        if len(raw) < _CTL_HDR.size:
            raise bad
        magic, version, _, crc, length = _CTL_HDR.unpack_from(raw)
        body = raw[_CTL_HDR.size:_CTL_HDR.size + length]
        if magic != CONTROL_MAGIC or len(body) != length or crc32c.crc32c(body) != crc:
            raise bad
        if version != CONTROL_VERSION:
            raise LogCorruptError(f"the log control file {where} has format version "
                                  f"{version}; this miqm reads version {CONTROL_VERSION}",
                                  amq="AMQ6118")
        try:
            d = json.loads(body)
            return cls(str(d["log_type"]), int(d["file_pages"]), int(d["generation"]),
                       int(d["restart_lsn"]),
                       None if d["media_lsn"] is None else int(d["media_lsn"]),
                       [(int(k), str(n)) for k, n in d["active"]], [str(n) for n in d["free"]],
                       int(d.get("generation_lsn", 0)))
        except (ValueError, KeyError, TypeError) as exc:
            raise bad from exc


class RecoveryLog:
    """The write-ahead recovery log of one queue manager (API in docs/architecture.md)."""

    # ------------------------------------------------------------------ creation
    @staticmethod
    def create(volume: Volume, settings: LogSettings) -> None:
        """crtmqm: pre-format the first extents and write the control file.

        Circular logs get all their primary files, linear logs their first extent and
        one formatted ahead. Refuses to touch a directory that already holds a log.
        """
        try:
            existing = [n for n in volume.listdir("") if n == CONTROL or
                        (n.startswith("S") and n.endswith(".LOG"))]
        except VolumeNotFound:
            volume.makedirs("")
            existing = []
        except LockFsError as exc:
            raise StoreError(f"cannot read the log directory {volume.describe()}: {exc}",
                             amq="AMQ7017") from exc
        if existing:
            raise StoreError(f"the log directory {volume.describe()} already holds a log "
                             f"({existing[0]}); delete it or choose another -ld path",
                             amq="AMQ7017")
        count = settings.primary_files if settings.log_type == "CIRCULAR" else 2
        size = settings.file_size
        try:
            for i in range(count):
                _format_extent(volume, extent_name(i), size)
            ctl = _Control(settings.log_type, settings.file_pages, 0, F.page_lsn(0), None,
                           [(0, extent_name(0))],
                           [extent_name(i) for i in range(1, count)]
                           if settings.log_type == "CIRCULAR" else [])
            volume.write_atomic(CONTROL, ctl.to_bytes())
        except LockFsError as exc:
            for i in range(count):
                try:
                    volume.unlink(extent_name(i))
                    volume.unlink(extent_name(i) + ".tmp")
                except LockFsError:
                    pass
            raise LogWriteError(f"cannot create the log in {volume.describe()}: {exc}",
                                amq="AMQ6708") from exc

    @staticmethod
    def recorded_generation(volume: Volume) -> int:
        """The activation generation in the control file (0 if it cannot be read): the
        HA layer starts the next activation above it."""
        try:
            raw = volume.read_bytes(CONTROL)
            return _Control.from_bytes(raw, CONTROL).generation
        except (LockFsError, StoreError):
            return 0

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, volume: Volume, settings: LogSettings, *, generation: int,
             write_guard: Callable[[], None] | None = None,
             on_event: Callable[..., None] | None = None,
             clock: Callable[[], float] = time.monotonic,
             gather_cpu: int = GATHER_NONE) -> RecoveryLog:
        """Open the log for restart. Nothing is written until the first append or force
        after :meth:`records` has found the end (so a corrupt log is left untouched).
        ``gather_cpu``: where threads waiting for a force are moved (GroupCommitCPU)."""
        try:
            raw = volume.read_bytes(CONTROL)
        except VolumeNotFound as exc:
            raise StoreError(f"log not available: {volume.describe()}/{CONTROL} is missing; "
                             "restore the log directory or recreate the queue manager",
                             amq="AMQ7017") from exc
        except LockFsError as exc:
            if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                todo = ("mount the log directory read-write and give the queue manager's "
                        "user write access to it, then start it again")
            else:
                todo = "check the log directory's filesystem, then start it again"
            raise StoreError(f"log not available: cannot open {volume.describe()}/{CONTROL} "
                             f"({exc}): {todo}", amq="AMQ7017") from exc
        ctl = _Control.from_bytes(raw, f"{volume.describe()}/{CONTROL}")
        if generation < ctl.generation:
            raise LogCorruptError(
                f"activation generation {generation} is older than generation "
                f"{ctl.generation} recorded in the log: another instance has taken over; "
                "this instance must not write", amq="AMQ7279")
        return cls(volume, settings, ctl, max(generation, ctl.generation + 1), write_guard,
                   on_event, clock, gather_cpu)

    def __init__(self, volume: Volume, settings: LogSettings, ctl: _Control, generation: int,
                 write_guard: Callable[[], None] | None,
                 on_event: Callable[..., None] | None,
                 clock: Callable[[], float], gather_cpu: int = GATHER_NONE) -> None:
        self.volume = volume
        self.settings = settings
        self._ctl = ctl
        self.circular = ctl.log_type == "CIRCULAR"
        self.file_pages = ctl.file_pages  # geometry is fixed at crtmqm
        self.pages_per_extent = self.file_pages - SLOTS
        self.extent_bytes = self.pages_per_extent * PAGE
        self._configured_extents = settings.primary_files + settings.secondary_files
        # qm.ini may now allow fewer extents than the log already spans (LogPrimaryFiles
        # or LogSecondaryFiles lowered with a unit in flight at a crash): the log keeps
        # what it spans, and one more for restart's undo records, until a checkpoint
        # moves its restart point on (set_restart_lsn); it could not start before
        self.max_extents = max(self._configured_extents, len(ctl.active) + 1
                               if len(ctl.active) > self._configured_extents else 0)
        self.generation = generation
        self._guard = write_guard
        self._on_event = on_event
        self._clock = clock
        self._files: dict[int, VolumeFile] = {}
        self._lock = threading.Lock()  # the append buffer
        self._flush_lock = threading.Lock()  # one force (and control-file update) at a time
        self._failed: BaseException | None = None
        self._closed = False
        self._ready = False
        self._end: int | None = None  # append point, once records() has reached the end
        self._cleanup: list[tuple[int, int]] = []  # (extent, page index in file) to zero
        # sealed pages whose only readable image is in a slot of the extent appends go on
        # in: (extent, page, image), written in place before a slot is written again
        self._rescue: list[tuple[int, int, bytes]] = []
        self._tail_seed: tuple[int, bytes, int] | None = None  # page, data, slot used
        #: what restart's scan found unfinished at the log's end (_torn_images), or None
        self.torn_tail: str | None = None
        self._slot_next: dict[int, int] = {}
        # TripleWrite: the page whose newest forced image is a partial one at its own place
        # (a fresh page's first image), -1 if none; its next image must go to a slot
        self._exposed = -1
        self._buf_cls = buffer_class()
        self._scan = full_fragment_scanner()
        self._buf: Any = None  # the append buffer (C or Python twin), once ready
        self._durable = 0
        self._buffer_limit = settings.effective_buffer_pages * PAGE
        # linear: the last logical extent known formatted (named in the control file, or
        # its file made ahead); appends stop short of the extent after it (_check_room)
        self._ready_through = max((k for k, _n in ctl.active), default=0)
        # circular: the last pages before the cap are kept for the records that make room
        # (a checkpoint's, AMQ7469's: append_reserved), as MQ keeps part of its active log
        # back, so a log that is full to ordinary records can still take the checkpoint
        # that frees it. A CHECKPOINT record takes about 80 bytes per unit in flight
        self._reserve_pages = (max(_RESERVE_MIN_PAGES, self.pages_per_extent // 32)
                               if self.circular else 0)
        self._page_limit = 0
        self._page_limit_reserved = 0
        self._set_page_limit()
        self._wlock = threading.Lock()  # the queue of callers waiting for a force
        self._waitq: list[tuple[int, int, _Waiter]] = []
        self._wseq = itertools.count()
        self._flushing = False
        self._gather_cpu = gather_cpu  # the Python queue's; the C queue keeps its own
        self._main_thread = threading.main_thread().ident or 0  # never moved
        # the same queue in C (waiting and waking without bytecode), unless switched off
        fq = native_force_queue()
        self._fq = None if fq is None else fq(gather_cpu=gather_cpu,
                                              main_thread=self._main_thread)
        self._triple = settings.triple_write
        # the C buffer writes a force itself when every file has a direct descriptor
        self._native_write = hasattr(self._buf_cls, "write")
        self._preformat: threading.Thread | None = None
        # each force's time (s) and the log bytes it made durable (the metrics exporter)
        self.force_seconds = Histogram()
        self.force_bytes = Histogram(SIZE_BUCKETS)
        for k, name in ctl.active:
            self._open_extent(k, name)

    def _open_extent(self, k: int, name: str) -> VolumeFile:
        f = self._files.get(k)
        if f is not None:
            return f
        try:
            f = self.volume.open(name)
            size = f.size()
        except VolumeNotFound as exc:
            todo = ("the queue manager stopped: restore it and start the queue manager "
                    "again" if self._ready else
                    "the queue manager cannot start without it: restore it")
            # running, AMQ7017 (log not available): the queue manager's last words fill
            # its fields, where AMQ6767's {file} read '?' in the error log
            raise StoreError(f"log file {name} of {self.volume.describe()} is missing; "
                             f"{todo}", amq="AMQ7017" if self._ready else "AMQ6767") from exc
        except LockFsError as exc:
            raise StoreError(f"log file {name} of {self.volume.describe()} cannot be opened: "
                             f"{exc}", amq="AMQ6767") from exc
        if size < self.file_pages * PAGE:
            f.close()
            raise LogCorruptError(f"log file {name} of {self.volume.describe()} is "
                                  f"{size} bytes, expected {self.file_pages * PAGE}: it is "
                                  "damaged; restore it", amq="AMQ6118")
        self._files[k] = f
        return f

    def _file_for(self, k: int) -> VolumeFile | None:
        f = self._files.get(k)
        if f is not None:
            return f
        if not self.circular and self.volume.exists(extent_name(k)):
            return self._open_extent(k, extent_name(k))  # an inactive linear extent
        return None

    # ------------------------------------------------------------------ geometry
    def extent_of_page(self, g: int) -> int:
        """The logical extent holding log page ``g``."""
        return g // self.pages_per_extent

    def _offset(self, g: int) -> int:
        return (SLOTS + g % self.pages_per_extent) * PAGE

    def _name_of(self, k: int) -> str:
        if not self.circular:
            return extent_name(k)
        for kk, name in self._ctl.active:
            if kk == k:
                return name
        return "?"

    def _where(self, g: int) -> str:
        k = self.extent_of_page(g)
        return f"log file {self._name_of(k)} offset {self._offset(g)}"

    def first_lsn(self) -> int:
        """The oldest LSN still needed for restart."""
        return self._ctl.restart_lsn

    # ------------------------------------------------------------------ reading
    def records(self, start_lsn: int) -> Iterator[LogRecord]:
        """Records from ``start_lsn`` (a record's LSN) to the end of the log.

        On a freshly opened log this is restart's scan: it finds the end (torn tail) and
        raises :class:`LogCorruptError` for damage before it or for a stale writer. On a
        log in use it reads what has been appended (forcing it first).
        """
        for batch in self.record_batches(start_lsn):
            yield from batch

    def record_batches(self, start_lsn: int) -> Iterator[list[LogRecord]]:
        """:meth:`records` in lists, as they are read (a run of whole records on a page
        at a time): restart's replay takes a million records without a generator step
        each."""
        if self._end is not None:
            self.force(self._append_lsn)
            yield from self._read(start_lsn, self._durable, finding_end=False)
            return
        yield from self._read(start_lsn, None, finding_end=True)

    def _check_available(self, start_lsn: int) -> None:
        k = self.extent_of_page(F.lsn_page(start_lsn))
        if self._file_for(k) is None or (self.circular and k < self._ctl.active[0][0]):
            raise StoreError(f"the log record at LSN {start_lsn} is in an extent that is no "
                             f"longer available in {self.volume.describe()}", amq="AMQ7017")

    def _read(self, start_lsn: int, limit: int | None, *, finding_end: bool
              ) -> Iterator[list[LogRecord]]:
        self._check_available(start_lsn)
        reader = _PageReader(self)
        g = F.lsn_page(start_lsn)
        off = start_lsn - F.page_lsn(g)
        if off < 0:
            raise LogCorruptError(f"LSN {start_lsn} is not the position of a record",
                                  amq="AMQ6118")
        max_gen = 0
        ctl_gen, gen_lsn = self._ctl.generation, self._ctl.generation_lsn
        stop_at = limit if limit is not None else 1 << 62
        FULL, FIRST, LAST = F.FULL, F.FIRST, F.LAST  # locals for the hot loop
        scan = self._scan
        KINDS = (F.FULL, F.FIRST, F.MIDDLE, F.LAST)
        FRAG_HEADER = F.FRAG_HEADER
        unpack_frag = F.FRAG.unpack_from
        pending: list[bytes] | None = None
        pending_lsn = 0
        pending_gen = 0
        complete_end = start_lsn
        stop_pos = start_lsn
        image: tuple[F.PageInfo, memoryview, int] | None = None
        last_k = self._ctl.active[-1][0] if self._ctl.active else 0
        while True:
            if limit is not None and F.page_lsn(g) + off >= limit:
                break
            if self.extent_of_page(g) > last_k and limit is None:
                stop_pos = F.page_lsn(g)
                image = None
                break
            image = reader.page(g)
            if image is None:
                if limit is not None:  # forced up to ``limit``: this page was written
                    raise self._unreadable(g, start_lsn, limit)
                stop_pos = F.page_lsn(g)
                break
            info, _data, _src = image
            base = F.page_lsn(g)
            used = info.used
            raw, roff = reader.last_raw
            data_at = roff + F.PAGE_HEADER  # the page's data area within ``raw``
            foff = off
            # fragments are parsed inline (a million records: no per-page lists); runs of
            # plain FULL fragments go through the C scanner when it is there, and the
            # fragment it stops at (anything else) through the code below
            while foff + FRAG_HEADER <= used:
                if scan is not None and pending is None:
                    recs, foff = scan(LogRecord, raw, data_at, foff, used, base, stop_at,
                                      max_gen, ctl_gen, gen_lsn)
                    if recs:
                        complete_end = recs[-1][3]
                        yield recs
                        continue
                length, kind, _zero, gen = unpack_frag(raw, data_at + foff)
                if kind not in KINDS or foff + FRAG_HEADER + length > used:
                    raise self._bad_page(g, f"bad fragment at data offset {foff}")
                lsn = base + foff
                if lsn >= stop_at:
                    break
                if gen != max_gen or (gen < ctl_gen and lsn >= gen_lsn):
                    self._check_generation(g, foff, gen, max_gen, lsn)
                    max_gen = gen
                at = data_at + foff + FRAG_HEADER
                body = raw[at:at + length]
                foff += FRAG_HEADER + length
                end = base + foff
                if kind == FULL:
                    if pending is not None:
                        raise self._bad_sequence(g, lsn - base)
                    complete_end = end
                    yield [_record(LogRecord, (lsn, gen, body, end))]
                elif kind == FIRST:
                    if pending is not None:
                        raise self._bad_sequence(g, lsn - base)
                    pending, pending_lsn, pending_gen = [body], lsn, gen
                else:
                    if pending is None:
                        raise self._bad_sequence(g, lsn - base)
                    pending.append(body)
                    if kind == LAST:
                        complete_end = end
                        payload = b"".join(pending)
                        pending = None
                        yield [_record(LogRecord, (pending_lsn, pending_gen, payload, end))]
            else:
                if foff != used:
                    raise self._bad_page(g, f"fragments end at {foff}, page holds {used}")
            if not info.sealed:
                stop_pos = base + info.used
                break
            g += 1
            off = 0
        if not finding_end:
            return
        end = pending_lsn if pending is not None else complete_end
        self._find_stale(reader, g, stop_pos, end)
        self._end = end

    def _unreadable(self, g: int, start_lsn: int, limit: int) -> StoreError:
        """Page ``g`` of a log in use (every page before ``limit`` was forced) has no
        valid image: its extent is missing (an inactive linear extent deleted or archived)
        or the page is damaged. Reading on would end the records early, and a queue
        rcrmqobj rebuilt from them would be silently short of its later messages."""
        k = self.extent_of_page(g)
        name = self._name_of(k)
        where = self.volume.describe()
        if self._file_for(k) is None:
            return StoreError(f"the log cannot be read from LSN {start_lsn} to {limit}: log "
                              f"file {name} is missing from {where}; restore it (and any "
                              "other missing log file from the oldest AMQ7468 names) and "
                              "run the command again", amq="AMQ7017")
        return LogCorruptError(f"the log cannot be read from LSN {start_lsn} to {limit}: the "
                               f"page at {self._where(g)} in {where} is damaged; restore "
                               "that log file from a copy and run the command again",
                               amq="AMQ6118")

    def _check_generation(self, g: int, foff: int, gen: int, max_gen: int, lsn: int) -> None:
        ctl = self._ctl
        if gen < max_gen:
            raise LogCorruptError(
                f"a record of activation generation {gen} follows generation {max_gen} at "
                f"{self._where(g)} (data offset {foff}): a stale instance wrote after the "
                f"takeover; {_STALE_REMEDY}", amq="AMQ6118")
        if gen > ctl.generation:
            # an activation records its generation in the control file before it writes
            # a record: a newer one cannot be this log's as the control file knows it
            raise LogCorruptError(
                f"a record of activation generation {gen} is at {self._where(g)} (data offset "
                f"{foff}), newer than generation {ctl.generation} the log control file "
                "records: the control file is older than the log files (put back from a "
                "copy), or the log file comes from another queue manager; "
                f"{self._damaged_remedy()}", amq="AMQ6118")
        if gen < ctl.generation and lsn >= ctl.generation_lsn:
            raise LogCorruptError(
                f"a record of activation generation {gen} is at {self._where(g)} (data offset "
                f"{foff}), after generation {ctl.generation} began at LSN "
                f"{ctl.generation_lsn}: a stale instance wrote after the takeover; "
                f"{_STALE_REMEDY}", amq="AMQ6118")

    def _bad_page(self, g: int, why: str) -> LogCorruptError:
        return LogCorruptError(f"the recovery log is damaged at {self._where(g)}: {why}; "
                               f"{self._damaged_remedy()}", amq="AMQ6118")

    def _damaged_remedy(self) -> str:
        """What to do about a damaged page: at restart (the end not yet found) the queue
        manager cannot start; a log in use read back (rcrmqobj) fails that command."""
        if self._end is None:
            return "the queue manager cannot start: " + _DAMAGED_REMEDY
        return _DAMAGED_REMEDY

    def _bad_sequence(self, g: int, foff: int) -> LogCorruptError:
        return LogCorruptError(f"the recovery log is damaged at {self._where(g)} (data offset "
                               f"{foff}): record fragments out of sequence; "
                               f"{self._damaged_remedy()}", amq="AMQ6118")

    def _find_stale(self, reader: _PageReader, g_stop: int, stop_pos: int, end: int) -> None:
        """After the scan stopped at page ``g_stop``: corruption, or a torn tail to clean."""
        end_page = F.lsn_page(end)
        cleanup: list[tuple[int, int]] = []
        for k, _name in self._ctl.active:
            f = self._files.get(k)
            if f is None:
                continue
            first_g = k * self.pages_per_extent
            for slot in range(SLOTS):
                info = reader.slot(k, slot)
                if info is not None and info.page_no > end_page:
                    if info.page_no > g_stop:
                        self._check_later(g_stop, stop_pos, info)
                    cleanup.append((k, slot))
            lo = max(first_g, end_page + 1)
            for g in reader.candidates(lo, first_g + self.pages_per_extent):
                found = reader.in_place(g)
                if found is None:
                    continue
                if g > g_stop:
                    self._check_later(g_stop, stop_pos, found)
                cleanup.append((k, SLOTS + g % self.pages_per_extent))
        seed_image = reader.page(end_page)
        seed_data = b""
        seed_slot = -1
        if seed_image is not None:
            info, data, src = seed_image
            if info.sealed and end == F.page_lsn(end_page) + info.used:
                # a full page on disk is never rewritten: appends start on the next one
                end_page += 1
            else:
                seed_data = bytes(data[:end - F.page_lsn(end_page)])
                seed_slot = src
        self._cleanup = cleanup
        self._tail_seed = (end_page, seed_data, seed_slot)
        self._rescue = self._slot_only_pages(reader, end_page)
        self.torn_tail = self._torn_images(reader, F.lsn_page(end), g_stop, end)

    def _torn_images(self, reader: _PageReader, first: int, last: int, end: int
                     ) -> str | None:
        """Where an image of a page from ``first`` to ``last`` (the log's last page and the
        one reading stopped at) was begun and not finished - it names its page and the log
        but its checksum fails - so the records it held were left out of restart: a force
        a crash cut short (never acknowledged), or damage to the newest image of the
        page. ``None`` when there is none: the end is where the last force ended.

        Only an image restart could have needed counts: none of a page whose newest valid
        image is sealed (its content is final), and none whose header says it is older
        than the page's newest valid image (generation, batch_start, used: a later force
        or a later activation superseded it; an activation writes the tail page's later
        images to the slots, so a damaged first image in place stays until the page is
        sealed, and each restart reported it again). A damaged header can only make an
        image look older if its generation or batch_start is hit; the checksum still
        fails, and the image is then one the log no longer reads either way."""
        places: list[str] = []
        for g in sorted({first, last}):
            k = self.extent_of_page(g)
            if self._file_for(k) is None:
                continue
            newest = reader.page(g)
            if newest is not None and newest[0].sealed:
                # a sealed image is the page's final content: no image of it, damaged or
                # not, can hold a record it does not (the torn in-place write of a page
                # whose sealed copy a force synced in a slot first)
                continue
            images: list[tuple[bytes, int, str]] = []
            raw = reader._slot_raw.get(k)
            if raw is None:
                reader._load_slots(k)
                raw = reader._slot_raw.get(k, b"")
            images += [(raw, s * PAGE, f"slot {s}") for s in range(SLOTS)]
            got = reader._in_place_raw(g)
            if got is not None:
                images.append((got[0], got[1], f"offset {self._offset(g)}"))
            for buf, off, where in images:
                if F.named_but_invalid(buf, off, g) and (
                        newest is None or _header_order(buf, off) >= newest[0].order()):
                    places.append(f"page {g} ({where} of {self._name_of(k)})")
        if not places:
            return None
        return (f"{', '.join(places)}; the log ends at LSN {end}, before it. A force cut "
                "short by a crash (it was never acknowledged) leaves this; if no crash "
                "preceded this start, the log's storage damaged data already forced")

    def _slot_only_pages(self, reader: _PageReader, end_page: int
                         ) -> list[tuple[int, int, bytes]]:
        """Sealed pages before ``end_page`` whose newest valid image is in a slot of the
        extent appends continue in. A force writes a sealed page to a slot and syncs it
        before writing it in place; a crash between the two leaves the slot the page's
        only readable copy. The tail seed and the forces after it write those slots, so
        such a page is first written in place (else a second crash finds it missing,
        with later pages readable: corruption)."""
        k = self.extent_of_page(end_page)
        if k not in self._files:
            return []
        out = []
        for s in range(SLOTS):
            info = reader.slot(k, s)
            if info is None or not info.sealed or info.page_no >= end_page or \
                    self.extent_of_page(info.page_no) != k:
                continue
            best = reader.page(info.page_no)
            if best is not None and best[2] == s:
                raw, off = reader.last_raw
                out.append((k, info.page_no, bytes(raw[off:off + PAGE])))
        return out

    def _check_later(self, g_stop: int, stop_pos: int, info: F.PageInfo) -> None:
        """A valid page after where reading stopped: a stale writer's, or proof that the
        page at ``g_stop`` had been forced (corruption); else a torn tail's leftovers."""
        ctl = self._ctl
        if info.generation < ctl.generation and F.page_lsn(info.page_no) >= ctl.generation_lsn:
            raise LogCorruptError(
                f"a page of activation generation {info.generation} is at "
                f"{self._where(info.page_no)}, after generation {ctl.generation} began at LSN "
                f"{ctl.generation_lsn}: a stale instance wrote after the takeover; "
                f"{_STALE_REMEDY}", amq="AMQ6118")
        if info.batch_start > stop_pos:
            raise self._corrupt(g_stop, info.page_no)

    def _corrupt(self, g_stop: int, later: int) -> LogCorruptError:
        return LogCorruptError(
            f"the recovery log is damaged at {self._where(g_stop)}: that page was forced "
            f"before page {later} ({self._where(later)}) but cannot be read (bad checksum or "
            "missing); nothing was overwritten: restore the log from a backup",
            amq="AMQ6118")

    def end_lsn(self) -> int:
        """Where appends go (finds the end first if restart has not)."""
        self._ensure_end()
        return self._append_lsn if self._ready else int(self._end)  # type: ignore[arg-type]

    def _ensure_end(self) -> None:
        if self._end is None:
            for _ in self._read(self._ctl.restart_lsn, None, finding_end=True):
                pass

    # ------------------------------------------------------------------ preparing to write
    def _make_ready(self) -> None:
        """Before the first write: zero stale pages after the end, write a fresh image of
        the tail page in this generation, then record the generation in the control file
        (in that order, so a crash in between never leaves an older generation's bytes
        after the point the control file says this generation began)."""
        self._ensure_end()
        with self._flush_lock:
            if self._ready:
                return
            self._check_usable()
            end = int(self._end)  # type: ignore[arg-type]
            if self.circular and self._ctl.free:
                self._restore_free_files()
            end_page, seed, slot = self._tail_seed or (F.lsn_page(end), b"", -1)
            page = bytearray(PAGE)
            page[F.PAGE_HEADER:F.PAGE_HEADER + len(seed)] = seed
            k_end = self.extent_of_page(end_page)
            try:
                if self._rescue:
                    self._guard_call()
                    for k, g, image in self._rescue:
                        self._files[k].pwrite(image, self._offset(g))
                    for k in sorted({k for k, _g, _i in self._rescue}):
                        self._files[k].fdatasync()
                touched: set[int] = set()
                if self._cleanup:
                    self._guard_call()
                    zero = F.zero_page()
                    for k, page_index in self._cleanup:
                        self._files[k].pwrite(zero, page_index * PAGE)
                        touched.add(k)
                    for k in sorted(touched):
                        self._files[k].fdatasync()
                if k_end in self._files:
                    slot = self._write_tail_seed(k_end, end_page, page, len(seed), slot, end)
                self._ctl.generation = self.generation
                self._ctl.generation_lsn = end
                self._write_control()
            except LockFsError as exc:
                self._failed = exc
                raise LogWriteError(f"cannot write the log in {self.volume.describe()}: {exc}",
                                    amq="AMQ6708") from exc
            if not self.circular:
                self._ready_through = max(self._ready_through, k_end)
                while self.volume.exists(extent_name(self._ready_through + 1)):
                    self._ready_through += 1
                self._set_page_limit()
            self._buf = self._buf_cls(end_page, self.generation, seed)
            self._durable = self._buf.append_lsn
            if slot >= 0:
                self._slot_next[k_end] = 1 - slot
            self._cleanup = []
            self._rescue = []
            self._ready = True

    def _restore_free_files(self) -> None:
        """Circular, before this activation's first write: a file of the free list that
        is missing (deleted or moved away while the queue manager was down) is formatted
        again. It holds nothing the log needs, and the queue manager ran until the log
        reached it and then stopped ('log file S0000002.LOG ... is missing'). With no
        room for it on the filesystem it leaves the free list instead (the control file
        written next says so): the log has an extent less until a secondary is formatted,
        as when a secondary cannot be. One directory listing, no per-file call."""
        try:
            present = set(self.volume.listdir(""))
        except LockFsError:
            return  # the writes that follow meet the same filesystem and say what it is
        missing = [n for n in self._ctl.free if n not in present]
        for name in missing:
            try:
                self._guard_call()
                _format_extent(self.volume, name, self.file_pages * PAGE)
            except LockFsError:
                self._ctl.free.remove(name)
                self._event("log_extent_dropped", extent=name)
            else:
                self._event("log_extent_restored", extent=name)
        if missing:
            self._set_page_limit()

    def _write_tail_seed(self, k: int, g: int, page: bytearray, used: int, slot: int,
                         end: int) -> int:
        F.seal_header(page, g, self.generation, used, False, end)
        f = self._files[k]
        self._guard_call()
        if self._triple:
            target = 1 - slot if slot >= 0 else 0
            f.pwrite(page, target * PAGE)
        else:
            target = -1
            f.pwrite(page, self._offset(g))
        f.fdatasync()
        return target

    def _guard_call(self) -> None:
        if self._guard is not None:
            self._guard()

    def _check_usable(self) -> None:
        if self._closed:
            raise StoreError("the recovery log is closed")
        if self._failed is not None:
            raise LogWriteError(f"the recovery log stopped after a write failure: "
                                f"{self._failed}", amq="AMQ6708")

    # ------------------------------------------------------------------ appending
    def append(self, payload: bytes, *, reserved: bool = False) -> int:
        """Buffer a record; returns its LSN. Not durable until :meth:`force`.
        ``reserved``: see :meth:`append_reserved`."""
        if not self._ready:
            self._make_ready()
        buf = self._buf
        while True:
            with self._lock:
                if self._failed is not None or self._closed:
                    self._check_usable()
                # the common case, one call: room in the buffer and on the current page
                lsn = buf.try_append(payload, self._durable, self._buffer_limit,
                                     self._page_limit_reserved if reserved
                                     else self._page_limit)
                if lsn is not None:
                    return int(lsn)
                head = buf.append_lsn
                n = len(payload)
                if head - self._durable <= self._buffer_limit or n > self._buffer_limit:
                    self._check_room(n, reserved=reserved)  # may reach past it: AMQ7463
                    return int(buf.append(payload))
            self.force(head)  # LogBufferPages is full: write it out first

    def append_reserved(self, payload: bytes) -> int:
        """:meth:`append` for a record that makes room in the log (a checkpoint's, or a
        unit AMQ7469 ends): it may use the pages a circular log keeps back from ordinary
        records, so a log full to them can still take the checkpoint that frees it."""
        return self.append(payload, reserved=True)

    def reclaimable(self, lsn: int) -> bool:
        """Whether a checkpoint that moves the restart point to ``lsn`` gives ordinary
        records more room: a circular log's restart point moving to a later extent.
        False means whatever holds the restart point's extent (a unit of work in flight)
        keeps the log full, and a checkpoint now would only cost time."""
        if not self.circular:
            return False
        return (self.extent_of_page(F.lsn_page(lsn))
                > self.extent_of_page(F.lsn_page(self._ctl.restart_lsn)))

    def could_hold(self, n: int) -> bool:
        """Whether an ``n``-byte record fits in the log at all: a circular log holds at
        most ``max_extents - 1`` whole extents (less its reserve) after the extent of the
        restart point, wherever that sits. A larger record is log full whatever a
        checkpoint does."""
        if not self.circular:
            return True
        room = (self.max_extents - 1) * self.pages_per_extent - self._reserve_pages
        return F.pages_past(0, n) <= room

    def append_and_force(self, payload: bytes) -> int:
        """Append and wait until the record is on stable storage."""
        lsn = self.append(payload)
        self.force(lsn)
        return lsn

    def _set_page_limit(self) -> None:
        """The last page a circular log may write before the restart point's extent is
        reused (``max_extents`` from it), or a linear log before the first extent not yet
        formatted: appends stop short of it, in C, without a room check in Python. Moved
        when a checkpoint moves the restart point, or an extent is formatted."""
        if not self.circular:
            self._page_limit = (self._ready_through + 1) * self.pages_per_extent - 1
            return
        k_first = self.extent_of_page(F.lsn_page(self._ctl.restart_lsn))
        # and short of an extent that would need a secondary file formatted: _check_room
        # formats it first, so a force never has to (a full disk there stopped the log)
        k_last = max((k for k, _n in self._ctl.active), default=k_first - 1)
        ready = (max(k_last, k_first - 1) + 1 + len(self._ctl.free)) * self.pages_per_extent
        cap = (k_first + self.max_extents) * self.pages_per_extent
        self._page_limit_reserved = min(cap, ready) - 1
        # ordinary records stop short of the reserve (append_reserved may use it)
        self._page_limit = min(cap - self._reserve_pages, ready) - 1

    def _check_room(self, n: int, reserved: bool = False) -> None:
        """AMQ7463 if an ``n``-byte record may reach past ``_page_limit`` (``reserved``:
        ``_page_limit_reserved``): the room test ``try_append`` makes, for the appends it
        leaves to Python."""
        buf = self._buf
        used = buf.last_used
        if used + F.FRAG_HEADER + n <= F.DATA:
            return
        last = buf.first_page + buf.count - 1 + F.pages_past(used, n)
        if not self.circular:
            while last > self._page_limit:
                self._format_ahead_now()
            return
        k_first = self.extent_of_page(F.lsn_page(self._ctl.restart_lsn))
        cap = (k_first + self.max_extents) * self.pages_per_extent - 1
        if not reserved:
            cap -= self._reserve_pages
        while self._limit(reserved) < min(last, cap):
            self._format_secondary_now()
        if last > self._limit(reserved) and not self.could_hold(n):
            raise LogFullError(
                f"the log is full for a record of {n} bytes: more than its "
                f"{self.max_extents} extents of {self.extent_bytes} bytes can ever hold "
                "with the restart point in one of them; increase LogFilePages or "
                "LogSecondaryFiles, or lower MAXMSGL", amq="AMQ7463")
        if last > self._limit(reserved):
            raise LogFullError(
                f"the log is full: {self.max_extents} extents are in use back to the restart "
                f"point in {self._name_of(k_first)}; a long-running unit of work holds it "
                "(commit or back it out) or increase LogSecondaryFiles", amq="AMQ7463")

    def _limit(self, reserved: bool) -> int:
        return self._page_limit_reserved if reserved else self._page_limit

    # ------------------------------------------------------------------ forcing
    def force(self, lsn: int) -> None:
        """Return once everything up to and including the record at ``lsn`` is durable.

        Concurrent callers share forces (group commit). One caller at a time leads: it
        writes everything appended so far. The others wait in LSN order, each on its own
        lock; when a force completes the leader wakes exactly the callers it made durable
        and hands the lead to the first one left, so nobody wakes just to wait again.
        With the C parts the queue is ``_forcequeue.ForceQueue`` (the same rules, each
        caller waiting on its thread's semaphore with the GIL released); the Python queue
        below is its reference and serves ``MIQM_NATIVE_LOG=0``.
        """
        if lsn < self._durable:
            return
        if not self._ready:
            self._make_ready()
        fq = self._fq
        if fq is not None:
            if self._failed is not None or self._closed:
                self._check_usable()
            how = fq.enter(lsn)  # 0: durable, 1: we lead, 2: the log stopped
            if how != 0:
                self._after_enter(how)
            return
        while True:
            with self._wlock:
                if lsn < self._durable:
                    return
                if self._failed is not None or self._closed:
                    self._check_usable()
                if not self._flushing:
                    self._flushing = True
                    break
                w = _thread_waiter()
                w.lead = False
                heapq.heappush(self._waitq, (lsn, next(self._wseq), w))
                gather = -1 if w.placed else self._gather_target(w)
            if gather >= 0:
                _gather_thread(gather)
            w.lock.acquire()  # released by a leader: our record is durable, or we lead
            if w.lead:
                break
            if lsn < self._durable:  # made durable (it only grows): no second wait-lock trip
                return
        try:
            with self._flush_lock:
                self._timed_flush()
        finally:
            self._hand_off()

    @property
    def gather_cpu(self) -> int:
        """The CPU threads waiting for a force are moved to; GATHER_NONE (-1) if none,
        GATHER_AUTO (-2) while no thread has waited yet."""
        return self._gather_cpu if self._fq is None else self._fq.gather_cpu()

    def gather_here(self) -> bool:
        """Move the calling thread to the gather CPU as if it had waited for a force: for
        a thread whose work goes hand in hand with the committing threads' (a streaming
        consumer's pusher), so that the interpreter lock passes between them on one CPU.
        False while that CPU is still to be chosen (ask again later); True once the
        thread is placed, or when nothing is to be done (no gathering, the main thread, a
        process allowed one CPU)."""
        cpu = self.gather_cpu
        if cpu == GATHER_AUTO:
            return False
        if cpu >= 0 and threading.get_ident() != self._main_thread:
            _gather_thread(cpu)
        return True

    def _gather_target(self, w: _Waiter) -> int:
        # the Python twin of gather_target() in _forcequeue.c (under _wlock)
        if self._gather_cpu == GATHER_NONE:
            return -1
        w.placed = True
        if threading.get_ident() == self._main_thread:
            return -1
        if self._gather_cpu == GATHER_AUTO:
            cpu = _current_cpu()
            self._gather_cpu = cpu if cpu >= 0 else GATHER_NONE
        return self._gather_cpu

    def _after_enter(self, how: int) -> None:
        """A caller the C force queue did not find durable: it leads a force (``how`` 1;
        then hands on) or the log stopped (2). The store's C commit calls ``enter`` itself
        and this only then."""
        if how == 2:
            self._check_usable()
            raise LogWriteError("the recovery log stopped", amq="AMQ6708")
        fq = self._fq
        try:
            with self._flush_lock:
                self._timed_flush()
        finally:
            fq.done(self._durable, self._failed is not None or self._closed)

    def _hand_off(self) -> None:
        with self._wlock:
            q = self._waitq
            if not q:  # nobody waited (a single producer): nothing to hand over
                self._flushing = False
                return
            durable = self._durable
            failed = self._failed is not None
            while q and (q[0][0] < durable or failed):
                w = heapq.heappop(q)[2]
                w.lead = False
                w.lock.release()
            if q:
                w = heapq.heappop(q)[2]
                w.lead = True  # the flag stays set: the lead passes without a gap
                w.lock.release()
            else:
                self._flushing = False

    def _timed_flush(self) -> None:
        """:meth:`_flush`, counted in :attr:`force_seconds` and :attr:`force_bytes` when it
        made records durable (under ``_flush_lock``: one writer)."""
        before = self._durable
        t0 = time.perf_counter()
        self._flush()
        if self._durable > before:
            self.force_seconds.observe(time.perf_counter() - t0)
            self.force_bytes.observe(self._durable - before)

    def _flush(self) -> None:
        if self._failed is not None or self._closed:
            self._check_usable()
        buf = self._buf
        durable = self._durable
        if buf.append_lsn <= durable:
            return
        try:
            if self._guard is not None:
                self._guard()
            if self._native_write:
                # the common force, one C call: every page in the extent of the first
                k = buf.first_page // self.pages_per_extent
                f = self._files.get(k)
                fd = f.direct_fd() if f is not None else None
                if fd is not None:
                    # a one-write force goes through the O_DSYNC descriptor: no fdatasync
                    sync_fd = f.direct_sync_fd()  # type: ignore[union-attr]
                    try:
                        done = buf.force_extent(fd, k, self.pages_per_extent,
                                                self._slot_next.get(k, 0), self._triple,
                                                durable, self._exposed,
                                                -1 if sync_fd is None else sync_fd)
                    except OSError as exc:
                        raise f.direct_error(exc, "write") from exc  # type: ignore[union-attr]
                    if done is not None:
                        self._durable, self._slot_next[k], self._exposed = done
                        return
            self._flush_general(buf, durable)
        except BaseException as exc:
            self._failed = exc
            if isinstance(exc, LockFsError):
                raise LogWriteError(f"the log write to {self.volume.describe()} failed: {exc}; "
                                    "the queue manager must stop (nothing forced is lost)",
                                    amq="AMQ6708") from exc
            raise

    def _flush_general(self, buf: Any, durable: int) -> None:
        """A force spanning extents, one needing a new extent, or on files without a
        direct descriptor: extents assigned first, then the captured pages written."""
        with self._lock:
            target, first, count = buf.seal(durable)
        t0 = time.perf_counter()
        per_extent = self.pages_per_extent
        k0 = first // per_extent
        k1 = (first + count - 1) // per_extent
        files = [self._files.get(k) or self._assign(k) for k in range(k0, k1 + 1)]
        fds = [f.direct_fd() if self._native_write else None for f in files]
        if None not in fds:
            slots = [self._slot_next.get(k, 0) for k in range(k0, k1 + 1)]
            try:
                _written, self._exposed = buf.write(fds, k0, per_extent, slots, self._triple,
                                                    self._exposed)
            except OSError as exc:
                i = exc.filename if isinstance(exc.filename, int) else 0
                raise files[i].direct_error(exc, "write") from exc
            finally:
                for i, slot in enumerate(slots):
                    self._slot_next[k0 + i] = slot
        else:
            written = self._write_captured(buf.captured(), files, k0, durable, target)
            buf.note(written, (time.perf_counter() - t0) * 1e6, k1)
        with self._lock:
            self._durable = target
            buf.release_written()

    def _write_captured(self, snap: list[tuple[int, Any, bool]], files: list[VolumeFile],
                        k0: int, batch_start: int, target: int) -> int:
        """The force's writes through the volume's files (volumes without a direct
        descriptor: NFSv4 over libnfs, fault injection, the crash harness's recorder).

        Where each page image goes (the C buffer's ``write_captured`` places them the same
        way; the crash harness proves this one): with SingleWrite, every page at its own
        place. With TripleWrite, a page image never overwrites the location holding that
        page's newest forced image unless a newer copy is already durable elsewhere:

        * sealed pages go to their own place; a sealed page whose newest forced image is a
          partial one at its own place (``_exposed``) is first written to a slot and
          forced there (a second fdatasync, rare: see below), then to its own place;
        * a partial page goes to the slot not holding its last image, except the first
          image of a fresh page (nothing of it forced yet), which goes to its own place,
          in the same write as the sealed page before it, when the page has room for
          another force of this size: then the next force adds to it (to a slot) before
          sealing it, so forces of one or two pages are one write each.
        """
        written = 0
        per_extent = self.pages_per_extent
        triple = self._triple
        exposed, self._exposed = self._exposed, -1
        new_bytes = target - batch_start
        run: list[Any] = []
        run_g = run_k = -1
        touched: dict[int, VolumeFile] = {}
        for g, image, is_sealed in snap:
            k = g // per_extent
            f = touched[k] = files[k - k0]
            in_place = True
            if triple and g == exposed:
                slot = self._slot_next.get(k, 0)
                f.pwrite(image, slot * PAGE)
                self._slot_next[k] = 1 - slot
                written += PAGE
                if is_sealed:
                    f.fdatasync()  # durable in the slot before its own place is touched
                else:
                    in_place = False
            elif triple and not is_sealed:
                in_place = (F.page_lsn(g) >= batch_start
                            and F.DATA - F.page_used(image) >= new_bytes)
                if in_place:
                    self._exposed = g
                else:
                    if run:
                        written += self._write_run(touched[run_k], run_g, run)
                        run = []
                    slot = self._slot_next.get(k, 0)
                    f.pwrite(image, slot * PAGE)
                    self._slot_next[k] = 1 - slot
                    written += PAGE
            if in_place:
                if run and (k != run_k or g != run_g + len(run)):
                    written += self._write_run(touched[run_k], run_g, run)
                    run = []
                if not run:
                    run_g, run_k = g, k
                run.append(image)
        if run:
            written += self._write_run(touched[run_k], run_g, run)
        for f in touched.values():
            f.fdatasync()
        return written

    def _write_run(self, f: VolumeFile, g: int, run: list[Any]) -> int:
        f.pwrite(run[0] if len(run) == 1 else b"".join(run), self._offset(g))
        return len(run) * PAGE

    def _assign(self, k: int) -> VolumeFile:
        """The file for logical extent ``k``, assigning a formatted one if it is new."""
        f = self._files.get(k)
        if f is not None:
            return f
        self._guard_call()
        if self.circular:
            if self._ctl.free:
                name = self._ctl.free.pop(0)
                if not self.volume.exists(name):
                    self._restore_free_file(name)
            else:  # a secondary extent, formatted now (the log is under pressure)
                taken = {n for _, n in self._ctl.active}
                i = 0
                while extent_name(i) in taken:
                    i += 1
                name = extent_name(i)
                _format_extent(self.volume, name, self.file_pages * PAGE)
        else:
            name = extent_name(k)
            if self._preformat is not None:
                self._preformat.join()
                self._preformat = None
            if not self.volume.exists(name):
                _format_extent(self.volume, name, self.file_pages * PAGE)
        self._ctl.active.append((k, name))
        self._write_control()  # the extent is named before any page of it is written
        f = self._open_extent(k, name)
        self._slot_next[k] = 0
        self._event("log_extent", extent=name, logical=k)
        if not self.circular:
            self._start_preformat(k + 1)
        return f

    def _restore_free_file(self, name: str) -> None:
        """Circular, running: a file of the free list, just taken for the next extent, was
        deleted while the queue manager ran. It holds nothing the log needs: formatted
        again before the control file names it active. Found missing, the queue manager
        stopped (AMQ7017 'restore it', though no copy of it matters), and its control file
        named the missing file active, so it could not start again either (AMQ6767).

        Not where the directory has lost the control file or an active extent too (its
        mount dropped, or it was moved away): the log would go on in another directory
        than its own. That stops the log (AMQ7017), as does a file that cannot be formatted
        (a full filesystem); either way the file stays on the free list, which the next
        start restores (:meth:`_restore_free_files`)."""
        try:
            present = set(self.volume.listdir(""))
            needed = {CONTROL} | {n for _, n in self._ctl.active}
            if not needed <= present:
                lost = ", ".join(sorted(needed - present))
                raise StoreError(
                    f"log file {name} of {self.volume.describe()} is missing, and so is "
                    f"{lost}: the log directory is not the one the log was written in (a "
                    "filesystem that is no longer mounted, or a directory moved away); "
                    "the queue manager stopped: mount or move it back, then start the "
                    "queue manager again", amq="AMQ7017")
            _format_extent(self.volume, name, self.file_pages * PAGE)
        except BaseException:
            self._ctl.free.insert(0, name)
            raise
        self._event("log_extent_restored", extent=name)

    def _format_ahead_now(self) -> None:
        """Linear: the next extent formatted before any record may reach it (under the
        append lock, once per extent, usually finding the file made ahead). A filesystem
        that has no room for it makes the log full (AMQ7463, MQRC 2102 to the caller)
        with nothing written: the record is not appended, every earlier one stays
        forceable, and appends go on once there is room. Formatting it only when a force
        needs it would fail the force, and so stop the queue manager."""
        k = self._ready_through + 1
        name = extent_name(k)
        ahead = self._preformat
        if ahead is not None:
            ahead.join()
        self._format_or_full(name, "log file", only_if_missing=True)
        self._ready_through = k
        self._set_page_limit()

    def _format_secondary_now(self) -> None:
        """Circular: a secondary extent formatted and put on the free list before any
        record may reach it (under the append lock, once per secondary). No room for it
        on the filesystem makes the log full (AMQ7463) with nothing written, as for a
        linear log (:meth:`_format_ahead_now`). The name is one no file has: a surplus
        secondary being deleted by a checkpoint keeps its name until it is gone."""
        names = {n for _k, n in self._ctl.active} | set(self._ctl.free)
        i = 0
        while extent_name(i) in names or self.volume.exists(extent_name(i)):
            i += 1
        name = extent_name(i)
        self._format_or_full(name, "secondary log file")
        self._ctl.free.append(name)
        self._set_page_limit()

    def _format_or_full(self, name: str, what: str, only_if_missing: bool = False) -> None:
        """Format extent ``name`` (``only_if_missing``: unless it is there already); no
        room for it on the filesystem is the log full (AMQ7463), nothing written."""
        try:
            if only_if_missing and self.volume.exists(name):
                return
            self._guard_call()
            _format_extent(self.volume, name, self.file_pages * PAGE)
        except LockFsError as exc:
            raise LogFullError(
                f"the log is full: {what} {name} cannot be formatted in "
                f"{self.volume.describe()} ({exc}); free space on the log's filesystem "
                "(AMQ6708): the queue manager goes on when there is room",
                amq="AMQ7463") from exc

    def _start_preformat(self, k: int) -> None:
        """Linear logs format the next extent ahead of need, off the commit path."""
        name = extent_name(k)

        def work() -> None:
            try:
                if not self.volume.exists(name):
                    self._guard_call()
                    _format_extent(self.volume, name, self.file_pages * PAGE)
            except Exception:  # formatted on demand instead; the error surfaces there
                pass

        self._preformat = threading.Thread(target=work, name="log-preformat", daemon=True)
        self._preformat.start()

    def _write_control(self) -> None:
        self._guard_call()
        self.volume.write_atomic(CONTROL, self._ctl.to_bytes())

    # ------------------------------------------------------------------ checkpoints
    def set_restart_lsn(self, lsn: int, media_lsn: int | None = None) -> None:
        """A checkpoint completed: extents wholly before ``lsn`` are no longer needed for
        restart. Circular logs reuse them (and delete surplus secondaries); linear logs
        keep them as inactive (``media_lsn``: the oldest needed for media recovery)."""
        if not self._ready:
            self._make_ready()
        with self._flush_lock:
            self._check_usable()
            k_first = self.extent_of_page(F.lsn_page(lsn))
            freed = [(k, n) for k, n in self._ctl.active if k < k_first]
            self._ctl.active = [(k, n) for k, n in self._ctl.active if k >= k_first]
            self._ctl.restart_lsn = lsn
            if self.max_extents > self._configured_extents:  # see __init__
                self.max_extents = max(self._configured_extents, len(self._ctl.active))
            self._set_page_limit()
            if media_lsn is not None or not self.circular:
                self._ctl.media_lsn = media_lsn
            deleted: list[str] = []
            if self.circular:
                for _k, name in freed:
                    self._ctl.free.append(name)
                surplus = len(self._ctl.active) + len(self._ctl.free) - \
                    self.settings.primary_files
                while surplus > 0 and self._ctl.free:
                    name = max(self._ctl.free)
                    self._ctl.free.remove(name)
                    deleted.append(name)
                    surplus -= 1
                self._set_page_limit()  # the free list it counts has changed
            try:
                self._write_control()
                for k, _n in freed:
                    f = self._files.pop(k, None)
                    if f is not None:
                        f.close()
                for name in deleted:
                    self.volume.unlink(name)
            except LockFsError as exc:
                self._failed = exc
                raise LogWriteError(f"cannot update the log control file in "
                                    f"{self.volume.describe()}: {exc}", amq="AMQ6708") from exc
            if freed:
                self._event("log_extents_freed", extents=[n for _, n in freed],
                            deleted=deleted, linear=not self.circular)

    # ------------------------------------------------------------------ state
    @property
    def _append_lsn(self) -> int:
        return self._buf.append_lsn if self._buf is not None else 0

    def usage(self) -> float:
        """Fraction of the active log between the restart point and the head."""
        head = self._append_lsn if self._ready else (self._end or self._ctl.restart_lsn)
        return max(0.0, (head - self._ctl.restart_lsn) / (self.max_extents * self.extent_bytes))

    def control_summary(self) -> dict[str, Any]:
        """The control file as this log read it (a log dump's header): type, geometry,
        the generation that last opened it and where it began, the restart and media
        points, and the files in use and free."""
        c = self._ctl
        return {"LogType": c.log_type, "LogFilePages": c.file_pages,
                "Generation": c.generation, "GenerationLSN": c.generation_lsn,
                "RestartLSN": c.restart_lsn, "MediaLSN": c.media_lsn,
                "Active": [n for _k, n in c.active], "Free": list(c.free)}

    def oldest_extent_for_restart(self) -> str:
        """AMQ7467: the oldest extent restart needs."""
        return self._name_of(self.extent_of_page(F.lsn_page(self._ctl.restart_lsn)))

    def extent_for_lsn(self, lsn: int) -> str:
        """The name of the extent holding ``lsn`` (DISPLAY CONN's UOWLOG: the extent a
        unit of work's first record is in, which it keeps from being reused)."""
        return self._name_of(self.extent_of_page(F.lsn_page(int(lsn))))

    def oldest_extent_for_media(self) -> str:
        """AMQ7468: the oldest extent media recovery needs (linear logs)."""
        lsn = self._ctl.media_lsn
        if lsn is None or lsn > self._ctl.restart_lsn:
            lsn = self._ctl.restart_lsn
        return self._name_of(self.extent_of_page(F.lsn_page(lsn)))

    def stats(self, list_files: bool = True) -> dict[str, Any]:
        """The logger's state in amqldmpa's terms. ``list_files=False``: nothing that reads
        the log directory (a linear log's ``loginactive`` and ``FileCount`` are then left
        out), so a caller that must not wait on the filesystem (the metrics scrape) may
        call it."""
        s = self._buf.write_stats() if self._buf is not None else WriteStats().as_dict()
        active = [k for k, _ in self._ctl.active]
        files: int | None
        inactive: int | None
        if self.circular:
            files = len(self._ctl.active) + len(self._ctl.free)
            inactive = 0
        elif not list_files:
            files = inactive = None
        else:
            try:
                # only S0000000.LOG-form names: a copy an operator left there
                # (SAVED.LOG, S3.LOG) is no extent, and its name would not parse
                names = [n for n in self.volume.listdir("") if len(n) == 12
                         and n.startswith("S") and n.endswith(".LOG") and n[1:8].isdigit()]
            except LockFsError:
                names = []
            files = len(names)
            first = active[0] if active else 0
            inactive = sum(1 for n in names if int(n[1:8]) < first)
        out = {
            "logactive": len(active),
            "loginactive": inactive,
            "FileCount": files,
            "filenum": [int(n[1:8]) for _, n in self._ctl.active],
            "logBufSz": self._buffer_limit // PAGE,
            "WriteSizeShort": round(s["size_short"]),
            "WriteSizeLong": round(s["size_long"]),
            "WriteSizeMax": int(s["size_max"]),
            "WriteTimeShort": round(s["time_short"]),
            "WriteTimeLong": round(s["time_long"]),
            "WriteTimeShortMax": round(s["time_short_max"]),
            "WriteTimeLongMax": round(s["time_long_max"]),
            "WriteTimeMax": round(s["time_max"]),
            "WriteTimeMaxAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(s["time_max_at"]))
            if s["time_max_at"] else "",
            "WriteTimeMaxFiles": [round(t) for _, t in s["per_file"]],
            "LogType": self._ctl.log_type,
            "Generation": self.generation,
            "Forces": int(s["forces"]),
            # where threads waiting for forces gather (auto: none has waited yet)
            "GroupCommitCPU": cpu_text(self.gather_cpu),
            "HeadLSN": self._append_lsn,
            "RestartLSN": self._ctl.restart_lsn,
            "current_extent": self._name_of(self.extent_of_page(F.lsn_page(
                max(self._append_lsn, self._ctl.restart_lsn)))),
        }
        if files is None:
            del out["loginactive"], out["FileCount"]
        return out

    def write_times(self) -> tuple[float, float]:
        """(moving average of about the last 8 forces, longest force since the log opened),
        in microseconds: the write times the event history records with each liveness
        check."""
        if self._buf is None:
            return (0.0, 0.0)
        s = self._buf.write_stats()
        return (float(s["time_short"]), float(s["time_max"]))

    def progress(self) -> tuple[int, int]:
        """(forces completed, callers waiting for a force now): the liveness check."""
        forces = self._buf.forces if self._buf is not None else 0
        if self._fq is not None:
            return (forces, self._fq.waiting())
        return (forces, len(self._waitq) + (1 if self._flushing else 0))

    def _event(self, name: str, **fields: Any) -> None:
        if self._on_event is not None:
            try:
                self._on_event(name, **fields)
            except Exception:  # an observer must never break the log
                pass

    def close(self) -> None:
        """Force what is buffered, record the state, close the extents."""
        if self._closed:
            return
        try:
            if self._ready and self._failed is None:
                self.force(self._append_lsn)
                with self._flush_lock:
                    self._write_control()
        finally:
            self._closed = True
            if self._preformat is not None:
                self._preformat.join()
            for f in self._files.values():
                try:
                    f.close()
                except LockFsError:
                    pass
            self._files.clear()


class _Waiter:
    """A thread's place in the force queue: a lock it blocks on until a leader releases it."""

    __slots__ = ("lead", "lock", "placed")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lock.acquire()
        self.lead = False
        self.placed = False  # its CPUs are settled: gathered, or left as they were


_local = threading.local()


def _thread_waiter() -> _Waiter:
    w = getattr(_local, "waiter", None)
    if w is None:
        w = _local.waiter = _Waiter()
    return w


def keep_thread_cpus() -> None:
    """No force queue ever moves the calling thread to its gather CPU (the checkpoint
    thread: its work without the GIL belongs beside the producers' CPU, not on it)."""
    _thread_waiter().placed = True
    if _keep_cpus is not None:
        _keep_cpus()


try:
    from miqm.store._forcequeue import keep_cpus as _keep_cpus
except ImportError:
    _keep_cpus = None

try:
    _sched_getcpu: Any = ctypes.CDLL(None, use_errno=True).sched_getcpu
except (OSError, AttributeError):
    _sched_getcpu = None


def _current_cpu() -> int:
    """The CPU the calling thread runs on now, or -1 if the C library cannot tell."""
    return int(_sched_getcpu()) if _sched_getcpu is not None else -1


def _gather_thread(cpu: int) -> None:
    # the Python twin of gather_thread() in _forcequeue.c: best effort, only saves CPU
    try:
        mask = os.sched_getaffinity(0)
        if cpu in mask and len(mask) > 1:
            os.sched_setaffinity(0, {cpu})
    except OSError:
        pass


class _PageReader:
    """Reads log pages in 1 MiB chunks and picks the newest valid image of each page."""

    def __init__(self, log: RecoveryLog) -> None:
        self.log = log
        self._chunk_key: tuple[int, int] | None = None
        self._chunk = b""
        self._slots: dict[int, list[tuple[F.PageInfo, memoryview] | None]] = {}
        self._slot_raw: dict[int, bytes] = {}
        self.last_raw: tuple[bytes, int] = (b"", 0)

    def _load_slots(self, k: int) -> list[tuple[F.PageInfo, memoryview] | None]:
        got = self._slots.get(k)
        if got is None:
            f = self.log._file_for(k)
            got = []
            raw = f.pread(SLOTS * PAGE, 0) if f is not None else b""
            self._slot_raw[k] = raw
            for s in range(SLOTS):
                info = F.check_page(raw, s * PAGE)
                got.append(None if info is None else
                           (info, memoryview(raw)[s * PAGE + F.PAGE_HEADER:(s + 1) * PAGE]))
            self._slots[k] = got
        return got

    def slot(self, k: int, s: int) -> F.PageInfo | None:
        """The header of slot ``s`` of extent ``k`` if it holds a valid image."""
        got = self._load_slots(k)[s]
        return None if got is None else got[0]

    def _in_place_raw(self, g: int) -> tuple[bytes, int] | None:
        log = self.log
        k = log.extent_of_page(g)
        idx = g % log.pages_per_extent
        cstart = idx - idx % _CHUNK_PAGES
        key = (k, cstart)
        if self._chunk_key != key:
            f = log._file_for(k)
            if f is None:
                return None
            self._chunk = f.pread(_CHUNK_PAGES * PAGE, (SLOTS + cstart) * PAGE)
            self._chunk_key = key
        return self._chunk, (idx - cstart) * PAGE

    def candidates(self, lo: int, hi: int) -> Iterator[int]:
        """The pages ``lo <= g < hi`` (one extent's) whose image at their own place
        carries the magic and their number: the only ones :meth:`in_place` can find
        valid, picked a chunk at a time (F.pages_named) instead of page by page."""
        g = lo
        while g < hi:
            got = self._in_place_raw(g)
            if got is None:
                return
            chunk, off = got
            n = min(hi - g, _CHUNK_PAGES - off // PAGE)
            for i in F.pages_named(chunk, off, n, g):
                yield g + i
            g += n

    def in_place(self, g: int) -> F.PageInfo | None:
        """The header of page ``g`` at its own place, if valid."""
        got = self._in_place_raw(g)
        if got is None:
            return None
        return F.check_page(got[0], got[1], g)

    def page(self, g: int) -> tuple[F.PageInfo, memoryview, int] | None:
        """The newest valid image of page ``g``: (header, data, -1 or the slot index).
        ``last_raw`` is then (bytes holding the image, offset of the image in them)."""
        best: tuple[F.PageInfo, memoryview, int] | None = None
        got = self._in_place_raw(g)
        if got is not None:
            raw, off = got
            info = F.check_page(raw, off, g)
            if info is not None:
                best = (info, memoryview(raw)[off + F.PAGE_HEADER:off + PAGE], -1)
                self.last_raw = (raw, off)
        for s, entry in enumerate(self._load_slots(self.log.extent_of_page(g))):
            if entry is not None and entry[0].page_no == g and (
                    best is None or entry[0].order() > best[0].order()):
                best = (entry[0], entry[1], s)
                self.last_raw = (self._slot_raw[self.log.extent_of_page(g)], s * PAGE)
        return best


def _header_order(buf: bytes | bytearray | memoryview, off: int) -> tuple[int, int, int]:
    """(generation, batch_start, used) as the header of the image at ``buf[off:]`` says,
    unchecked (the image failed its checksum): PageInfo.order()'s fields, to tell whether
    a damaged image is older than a page's newest valid one."""
    _page_no, gen, used, _flags, batch_start = _PAGE_TAIL.unpack_from(buf, off + 8)
    return (gen, batch_start, used)


_PAGE_TAIL = struct.Struct("<QIHHQ")  # the header after magic and checksum (framing)


def _format_extent(volume: Volume, name: str, size: int) -> None:
    """A zero-filled extent, created under a temporary name and renamed into place. If
    that fails (a full filesystem) the part made is removed: left, it would hold the
    space the control file's next replacement needs."""
    tmp = name + ".tmp"
    try:
        with volume.open(tmp, create=True) as f:
            f.truncate(0)
            f.allocate_zeroed(size)
        volume.rename(tmp, name)
    except BaseException:
        with contextlib.suppress(LockFsError):
            volume.unlink(tmp)
        raise
