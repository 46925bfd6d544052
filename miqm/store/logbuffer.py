"""The recovery log's append buffer: records framed into pages, sealed for a force.

Two implementations with one interface and byte-identical output: ``LogBuffer`` from the
C extension ``miqm.store._logbuffer`` (built by ``pip install``; it also writes a force
without the GIL) and :class:`PyLogBuffer` here, used when the extension is missing or
``MIQM_NATIVE_LOG=0``. The buffer knows pages and fragments only; which file a page goes
to, guards, extents and the control file stay in :class:`miqm.store.log.RecoveryLog`.

Interface (see ``_logbuffer.c`` for the C side):

* ``LogBuffer(first_page, generation, seed)``: page ``first_page`` starts with ``seed``.
* ``append(payload) -> lsn``; ``try_append(payload, durable, buffer_limit, page_limit)``
  appends only when no force is needed first and the record cannot reach past page
  ``page_limit`` (else None, nothing appended); ``append_lsn``,
  ``first_page``, ``count``, ``last_used``.
* ``seal(batch_start) -> (target_lsn, first_page, count)``: fill every page's header and
  capture the pages for a force; ``captured()`` lists them as (page_no, image, sealed);
  ``release_written()`` drops the leading captured pages that were sealed (they are on
  disk for good) once the force succeeded.
* ``page(i) -> (image, used, sealed)``.
* ``note(size, micros, extent)``, ``write_stats()``, ``forces``: amqldmpa's write figures.
* Only on the C buffer, which then does a force's I/O itself without the GIL:
  ``write(fds, first_extent, pages_per_extent, slots, triple)`` for a capture, and
  ``force_extent(fd, extent, pages_per_extent, slot, triple, batch_start)``: seal, write,
  count and release in one call when every page lies in one extent.
"""

from __future__ import annotations

import os
import time
from collections import deque
from typing import Any

from miqm.store import framing as F

PAGE = F.PAGE


class WriteStats:
    """amqldmpa's write-size and write-time figures (sizes in bytes, times in µs): moving
    averages over about 8 (short) and 128 (long) forces, and the last 8 files' maxima."""

    def __init__(self) -> None:
        self.size_short = self.size_long = 0.0
        self.size_max = 0
        self.time_short = self.time_long = 0.0
        self.time_short_max = self.time_long_max = 0.0
        self.time_max = 0.0
        self.time_max_at = 0.0
        self.per_file: deque[tuple[int, float]] = deque(maxlen=8)
        self.forces = 0

    def note(self, size: int, micros: float, extent: int) -> None:
        """Count one force of ``size`` bytes that took ``micros`` on logical extent."""
        self.forces += 1
        self.size_short += (size - self.size_short) / 8
        self.size_long += (size - self.size_long) / 128
        self.size_max = max(self.size_max, size)
        self.time_short += (micros - self.time_short) / 8
        self.time_long += (micros - self.time_long) / 128
        self.time_short_max = max(self.time_short_max, self.time_short)
        self.time_long_max = max(self.time_long_max, self.time_long)
        if micros > self.time_max:
            self.time_max = micros
            self.time_max_at = time.time()
        if not self.per_file or self.per_file[-1][0] != extent:
            self.per_file.append((extent, micros))
        elif micros > self.per_file[-1][1]:
            self.per_file[-1] = (extent, micros)

    def as_dict(self) -> dict[str, Any]:
        """The figures as ``write_stats()`` returns them."""
        return {
            "size_short": self.size_short, "size_long": self.size_long,
            "size_max": self.size_max, "time_short": self.time_short,
            "time_long": self.time_long, "time_short_max": self.time_short_max,
            "time_long_max": self.time_long_max, "time_max": self.time_max,
            "time_max_at": self.time_max_at, "forces": self.forces,
            # this buffer's forces always go through Python's pwrite and fdatasync
            "dsync_forces": 0, "per_file": list(self.per_file),
        }


class PyLogBuffer:
    """The pure-Python append buffer (the reference the C one is tested against)."""

    def __init__(self, first_page: int, generation: int, seed: bytes) -> None:
        if len(seed) > F.DATA:
            raise ValueError("seed longer than a page's data")
        page = bytearray(PAGE)
        page[F.PAGE_HEADER:F.PAGE_HEADER + len(seed)] = seed
        self._pages = [page]
        self._used = [len(seed)]
        self._sealed = [False]
        self.first_page = first_page
        self.generation = generation
        self.append_lsn = F.page_lsn(first_page) + len(seed)
        self._snap: list[tuple[int, bytearray, bool]] = []
        self._stats = WriteStats()

    @property
    def count(self) -> int:
        """Pages buffered."""
        return len(self._pages)

    @property
    def last_used(self) -> int:
        """Data bytes used on the last page."""
        return self._used[-1]

    def append(self, payload: bytes | bytearray | memoryview) -> int:
        """Frame one record; returns its LSN."""
        n = len(payload)
        u = self._used[-1]
        if u + F.FRAG_HEADER + n <= F.DATA:  # the common case: fits on the current page
            page = self._pages[-1]
            at = F.PAGE_HEADER + u
            page[at:at + F.FRAG_HEADER] = F.frag_header(n, F.FULL, self.generation)
            end = u + F.FRAG_HEADER + n
            page[at + F.FRAG_HEADER:F.PAGE_HEADER + end] = payload
            self._used[-1] = end
            base = (self.first_page + len(self._pages) - 1) * PAGE + F.PAGE_HEADER
            self.append_lsn = base + end
            return base + u
        return self._append_pages(payload)

    def try_append(self, payload: bytes | bytearray | memoryview, durable: int,
                   buffer_limit: int, page_limit: int) -> int | None:
        """:meth:`append` when at most ``buffer_limit`` bytes are not yet durable (or the
        record alone is larger) and the record fits on the current page or cannot reach
        past log page ``page_limit`` (:func:`framing.pages_past`); else None, nothing
        appended."""
        n = len(payload)
        if self.append_lsn - durable > buffer_limit and n <= buffer_limit:
            return None
        u = self._used[-1]
        if u + F.FRAG_HEADER + n > F.DATA and \
                self.first_page + len(self._pages) - 1 + F.pages_past(u, n) > page_limit:
            return None
        return self.append(payload)

    def _append_pages(self, payload: bytes | bytearray | memoryview) -> int:
        gen = self.generation
        mv = memoryview(payload)
        remaining = len(mv)
        pos = 0
        lsn = -1
        first = True
        pages, used, sealed = self._pages, self._used, self._sealed
        while True:
            u = used[-1]
            space = F.DATA - u
            if space < F.FRAG_HEADER + (1 if remaining else 0):
                sealed[-1] = True
                pages.append(bytearray(PAGE))
                used.append(0)
                sealed.append(False)
                continue
            chunk = min(space - F.FRAG_HEADER, remaining)
            last = chunk == remaining
            kind = (F.FULL if last else F.FIRST) if first else (F.LAST if last else F.MIDDLE)
            page = pages[-1]
            at = F.PAGE_HEADER + u
            page[at:at + F.FRAG_HEADER] = F.frag_header(chunk, kind, gen)
            page[at + F.FRAG_HEADER:at + F.FRAG_HEADER + chunk] = mv[pos:pos + chunk]
            if first:
                lsn = F.page_lsn(self.first_page + len(pages) - 1) + u
                first = False
            u += F.FRAG_HEADER + chunk
            used[-1] = u
            pos += chunk
            remaining -= chunk
            if last:
                break
        self.append_lsn = F.page_lsn(self.first_page + len(pages) - 1) + used[-1]
        return lsn

    def seal(self, batch_start: int) -> tuple[int, int, int]:
        """Fill every page's header for a force from ``batch_start``; capture the pages.

        Pages are written from the live buffers: appends only add bytes after ``used``,
        which the checksum does not cover and the reader ignores."""
        first, gen = self.first_page, self.generation
        used, sealed = self._used, self._sealed
        snap = []
        for i, page in enumerate(self._pages):
            F.seal_header(page, first + i, gen, used[i], sealed[i], batch_start)
            snap.append((first + i, page, sealed[i]))
        self._snap = snap
        return self.append_lsn, first, len(snap)

    def captured(self) -> list[tuple[int, Any, bool]]:
        """What the last :meth:`seal` captured: (page number, image, sealed)."""
        return self._snap

    def release_written(self) -> int:
        """Drop the leading captured pages that were sealed; returns how many."""
        done = 0
        for _g, _image, is_sealed in self._snap:
            if not is_sealed or done >= len(self._pages) - 1:
                break
            done += 1
        if done:
            del self._pages[:done]
            del self._used[:done]
            del self._sealed[:done]
            self.first_page += done
        self._snap = []
        return done

    def note(self, size: int, micros: float, extent: int) -> None:
        """Count a force in the write figures."""
        self._stats.note(size, micros, extent)

    def write_stats(self) -> dict[str, Any]:
        """The write figures (see :class:`WriteStats`)."""
        return self._stats.as_dict()

    @property
    def forces(self) -> int:
        """Forces counted in the write figures."""
        return self._stats.forces

    def page(self, i: int) -> tuple[bytes, int, bool]:
        """(image, used, sealed) of buffered page ``i``."""
        return bytes(self._pages[i]), self._used[i], self._sealed[i]


try:
    from miqm.store._logbuffer import LogBuffer as NativeLogBuffer
    from miqm.store._logbuffer import scan_full as _scan_full
except ImportError:  # not built (no compiler at install time): the Python twin serves
    NativeLogBuffer = None  # type: ignore[assignment,misc]
    _scan_full = None


def native_available() -> bool:
    """True when the C buffer was built and imports."""
    return NativeLogBuffer is not None


def native_part(part: Any) -> Any:
    """``part`` (one of the store's C classes or functions, None if it was not built),
    or None when the C parts are switched off: the one switch, ``MIQM_NATIVE_LOG=0``."""
    if part is not None and os.environ.get("MIQM_NATIVE_LOG", "1") != "0":
        return part
    return None


def buffer_class() -> type:
    """The buffer a newly opened log uses: C unless missing or switched off."""
    return native_part(NativeLogBuffer) or PyLogBuffer


def full_fragment_scanner() -> Any:
    """The C scanner restart reads runs of FULL fragments with (``scan_full``), or None
    for the pure-Python reader."""
    return native_part(_scan_full)


try:
    from miqm.store._forcequeue import ForceQueue as _ForceQueue
except ImportError:
    _ForceQueue = None


def native_force_queue() -> Any:
    """The C twin of the log's force queue (the class ``ForceQueue``; see
    ``_forcequeue.c``), or None for the Python queue in :mod:`miqm.store.log`."""
    return native_part(_ForceQueue)
