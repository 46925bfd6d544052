"""Byte layout of the recovery log: pages and record fragments (pure functions).

The log is a sequence of 4 KiB pages numbered globally from 0. Every page starts with a
32-byte header and carries a checksum over its header and its used bytes, so a torn or
stale page is recognised on its own::

    magic "MQLP" | crc32c:u32 | page_no:u64 | generation:u32 | used:u16 | flags:u16 |
    batch_start:u64

``page_no`` ties the bytes to their place (a page left over from an earlier cycle of a
reused extent has another number), ``generation`` is the activation that wrote the page,
``used`` counts the data bytes after the header, flag ``SEALED`` says no more records
will be added to the page, and ``batch_start`` is the log position where the force that
wrote the page began (the reader uses it to tell a torn tail from corruption: a page
forced by a *later* force than a missing one proves the missing one had been forced).

Records are split into fragments that never cross a page::

    length:u16 | type:u8 (FULL, FIRST, MIDDLE, LAST) | 0:u8 | generation:u32 | bytes

A record's LSN is the log position of its first fragment header:
``page_no * 4096 + 32 + offset in the page's data``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

PAGE = 4096
PAGE_HEADER = 32
DATA = PAGE - PAGE_HEADER
FRAG_HEADER = 8
MAGIC = b"MQLP"
SEALED = 1

FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4

_PAGE = struct.Struct("<4sIQIHHQ")
_FRAG = struct.Struct("<HBBI")
FRAG = _FRAG  #: the fragment header layout, for readers that parse inline
_TAIL = struct.Struct("<QIHHQ")
_HEAD = struct.Struct("<4sI")
_ZERO_PAGE = bytes(PAGE)


@dataclass(frozen=True)
class PageInfo:
    """The header of a valid page."""

    page_no: int
    generation: int
    used: int
    sealed: bool
    batch_start: int

    def order(self) -> tuple[int, int, int]:
        """Which of two valid images of one page is newer (higher wins)."""
        return (self.generation, self.batch_start, self.used)


def page_lsn(page_no: int) -> int:
    """The LSN of the first data byte of ``page_no``."""
    return page_no * PAGE + PAGE_HEADER


def lsn_page(lsn: int) -> int:
    """The page an LSN falls in."""
    return lsn // PAGE


def pages_past(used: int, n: int) -> int:
    """How many pages past the current one (``used`` data bytes on it) an ``n``-byte record
    may reach: an upper bound, the log's room check (the C buffer computes the same)."""
    per_page = DATA - FRAG_HEADER
    return (used + n + FRAG_HEADER * (n // per_page + 2)) // DATA + 1


def page_image(data: bytes | bytearray | memoryview, page_no: int, generation: int,
               batch_start: int, sealed: bool) -> bytes:
    """A full 4096-byte page: header, ``data`` (at most DATA bytes), zero padding."""
    used = len(data)
    if used > DATA:
        raise ValueError(f"page data of {used} bytes exceeds {DATA}")
    tail = struct.pack("<QIHHQ", page_no, generation, used, SEALED if sealed else 0,
                       batch_start)
    crc = crc32c.crc32c(data, crc32c.crc32c(tail))
    return b"".join((MAGIC, struct.pack("<I", crc), tail, data, bytes(DATA - used)))


def seal_header(page: bytearray, page_no: int, generation: int, used: int, sealed: bool,
                batch_start: int) -> None:
    """Fill the header of a page buffer (PAGE bytes, data from offset PAGE_HEADER) in place,
    with its checksum over the header and the first ``used`` data bytes."""
    _TAIL.pack_into(page, 8, page_no, generation, used, SEALED if sealed else 0, batch_start)
    crc = crc32c.crc32c(memoryview(page)[8:PAGE_HEADER + used])
    _HEAD.pack_into(page, 0, MAGIC, crc)


def page_used(page: bytes | bytearray | memoryview) -> int:
    """The ``used`` field of a page image whose header :func:`seal_header` filled."""
    return int(_PAGE.unpack_from(page, 0)[4])


def check_page(buf: bytes | bytearray | memoryview, offset: int,
               expect_page_no: int | None = None) -> PageInfo | None:
    """Validate the page at ``buf[offset:offset+4096]``: its header, used length, checksum
    and (when given) its number. ``None`` for a zero, torn, stale or foreign page."""
    if len(buf) - offset < PAGE:
        return None
    magic, crc, page_no, gen, used, flags, batch_start = _PAGE.unpack_from(buf, offset)
    if magic != MAGIC or used > DATA:
        return None
    if expect_page_no is not None and page_no != expect_page_no:
        return None
    mv = memoryview(buf)
    start = offset + 8
    if crc32c.crc32c(mv[start:offset + PAGE_HEADER + used]) != crc:
        return None
    return PageInfo(page_no, gen, used, bool(flags & SEALED), batch_start)


def named_but_invalid(buf: bytes | bytearray | memoryview, offset: int, page_no: int
                      ) -> bool:
    """Whether the page at ``buf[offset:]`` carries the magic and number ``page_no`` but
    fails :func:`check_page`: an image that was begun and not finished (or damaged)."""
    if len(buf) - offset < PAGE:
        return False
    magic, _crc, number = _PAGE.unpack_from(buf, offset)[:3]
    return magic == MAGIC and number == page_no and check_page(buf, offset, page_no) is None


#: A page's magic and number, and nothing else of its PAGE bytes (iter_unpack, one per page)
_PAGE_ID = struct.Struct(f"<4s4xQ{PAGE - 16}x")


def pages_named(buf: bytes | bytearray | memoryview, offset: int, count: int,
                first_page_no: int) -> list[int]:
    """Of the ``count`` pages from ``buf[offset:]``, those (by index) whose header has the
    magic and the number ``first_page_no`` + their index: the only ones
    :func:`check_page` can accept with that number, found without checking each page
    in Python (a restart looks at every page after the log's end)."""
    count = max(0, min(count, (len(buf) - offset) // PAGE))
    ids = _PAGE_ID.iter_unpack(memoryview(buf)[offset:offset + count * PAGE])
    return [i for i, (magic, page_no) in enumerate(ids)
            if magic == MAGIC and page_no == first_page_no + i]


def frag_header(length: int, kind: int, generation: int) -> bytes:
    """The 8-byte header of one record fragment."""
    return _FRAG.pack(length, kind, 0, generation)


def parse_fragments(data: bytes | bytearray | memoryview, used: int,
                    start: int = 0) -> list[tuple[int, int, int, int]]:
    """The fragments in a page's data area from ``start``: (offset of the header, type,
    generation, length). Raises ValueError when the bytes are not a fragment sequence
    (only possible if a checksummed page was written wrong)."""
    out = []
    off = start
    unpack = _FRAG.unpack_from
    while off + FRAG_HEADER <= used:
        length, kind, _, gen = unpack(data, off)
        if kind not in (FULL, FIRST, MIDDLE, LAST) or off + FRAG_HEADER + length > used:
            raise ValueError(f"bad fragment at data offset {off}")
        out.append((off, kind, gen, length))
        off += FRAG_HEADER + length
    if off != used:
        raise ValueError(f"fragments end at {off}, page holds {used}")
    return out


def zero_page() -> bytes:
    """An all-zero page (what a pre-formatted extent holds, and what invalidates one)."""
    return _ZERO_PAGE
