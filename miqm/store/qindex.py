"""The queue index ``queues/<Q>/idx``: a deep queue opens without reading its messages.

A checkpoint that changes a queue file holding at least ``index_min_records`` records
also writes the queue's index as of that checkpoint: the on-file part of the in-memory
:class:`~miqm.store.queues.PriorityIndex` (key, block, body length of every record, per
priority, in delivery order), the space map, and the caller-chosen msgids and non-zero
correlids. Opening the queue then reads one compact file (20 bytes a message) instead of
walking every 512-byte record of the queue file.

Layout (little-endian): ``magic "MIQI", crc32c:u32`` (over everything after it),
``version:u32, qid:u32, cp:u64`` (the checkpoint it describes), ``nspace:u64``,
ten ``count:u64`` (records per priority 0..9), ``nmsgid:u32, ncorrelid:u32``; then per
priority the keys (``q``), the blocks (``q``) and the lengths (``i``); the space map
(``nspace`` bytes, 0 free / 1 in use); ``nmsgid`` × ``key:u64, msgid:24s``;
``ncorrelid`` × ``key:u64, correlid:24s``.

Trust: the checkpoint file names, per queue, the checkpoint whose index is current
(``CheckpointInfo.idx``). The index is used only if its crc, qid and checkpoint number
match, its arrays are consistent with each other and with the queue file's size;
anything else is reported (AMQ1130) and the queue is rebuilt from its queue file. The
file is written as ``idx.new`` during the checkpoint and renamed to ``idx`` once the
checkpoint is complete; on open either name is accepted when its checkpoint matches.
"""

from __future__ import annotations

import struct
import sys
from array import array
from dataclasses import dataclass
from itertools import compress

from crc32c import crc32c

_HEAD = struct.Struct("<4sIIIQQ10QII")
MAGIC = b"MIQI"
VERSION = 1
_SEL = struct.Struct("<Q24s")
_BIG = sys.byteorder == "big"


class IndexInvalid(Exception):
    """The index file cannot be used (the message says why); the caller rebuilds."""


@dataclass
class QueueIndexData:
    """The content of an index file, decoded."""

    qid: int
    cp: int
    keys: list[array]
    blocks: list[array]
    lens: list[array]
    space: bytearray
    msgids: list[tuple[int, bytes]]
    correlids: list[tuple[int, bytes]]


def _le(a: array) -> bytes:
    if _BIG:
        a = array(a.typecode, a)
        a.byteswap()
    return a.tobytes()


def snapshot(index: object, space: bytes | bytearray, msgids: dict[bytes, int],
             correlids: dict[bytes, list[int]]) -> tuple[list[bytes], bytes,
                                                         list[tuple[int, bytes]],
                                                         list[tuple[int, bytes]]]:
    """The on-file part of a queue's in-memory index, copied (under the store lock).

    Only slots with a block in the file count (not bodies held in memory, not removed
    slots); blocks freed by the running checkpoint read as free, as they will once it is
    complete."""
    parts: list[bytes] = []
    live: set[int] | None = None
    for p in range(10):
        h = index.head[p]  # type: ignore[attr-defined]
        ks, bl, ls = (index.keys[p][h:], index.blocks[p][h:],  # type: ignore[attr-defined]
                      index.lens[p][h:])  # type: ignore[attr-defined]
        if bl.count(-1) or bl.count(-2):
            sel = list(map((-1).__lt__, bl))
            ks = array("q", compress(ks, sel))
            ls = array("i", compress(ls, sel))
            bl = array("q", compress(bl, sel))
        parts += [_le(ks), _le(bl), _le(ls)]
    free = bytes(space).replace(b"\x02", b"\x00").rstrip(b"\x00")
    if msgids or correlids:
        live = set()
        for p in range(10):
            h = index.head[p]  # type: ignore[attr-defined]
            bl = index.blocks[p]  # type: ignore[attr-defined]
            live.update(k for k, b in zip(index.keys[p][h:], bl[h:],  # type: ignore
                                          strict=True) if b >= 0)
    ms = [(k, m) for m, k in msgids.items() if live is not None and k in live]
    cs = [(k, c) for c, keys in correlids.items() if live is not None
          for k in keys if k in live]
    return parts, free, ms, cs


def encode(qid: int, cp: int, parts: list[bytes], space: bytes,
           msgids: list[tuple[int, bytes]], correlids: list[tuple[int, bytes]]) -> list[bytes]:
    """The bytes of an index file (see the module docstring), in pieces to write one after
    the other (a million messages' arrays are not copied into one buffer again)."""
    counts = [len(parts[3 * p]) // 8 for p in range(10)]
    head = _HEAD.pack(MAGIC, 0, VERSION, qid, cp, len(space), *counts, len(msgids),
                      len(correlids))
    sel = b"".join([*(_SEL.pack(k, m) for k, m in msgids),
                    *(_SEL.pack(k, c) for k, c in correlids)])
    pieces = [head[8:], *parts, space, sel]
    crc = 0
    for piece in pieces:
        crc = crc32c(piece, crc)
    return [MAGIC + struct.pack("<I", crc), *pieces]


def decode(data: bytes, qid: int, cp: int, file_blocks: int) -> QueueIndexData:
    """Decode and check an index file; :class:`IndexInvalid` says why it cannot be used.

    ``file_blocks``: the data blocks the queue file holds; every record the index names
    must lie inside them."""
    if len(data) < _HEAD.size:
        raise IndexInvalid(f"{len(data)} bytes, shorter than its header")
    f = _HEAD.unpack_from(data, 0)
    magic, crc, ver, iqid, icp, nspace = f[:6]
    counts = f[6:16]
    nmsg, ncor = f[16], f[17]
    if magic != MAGIC:
        raise IndexInvalid("bad magic")
    if crc32c(memoryview(data)[8:]) != crc:
        raise IndexInvalid("bad checksum (torn or damaged)")
    if ver != VERSION:
        raise IndexInvalid(f"format version {ver}, this miqm reads {VERSION}")
    if iqid != qid:
        raise IndexInvalid(f"it belongs to queue incarnation {iqid}, not {qid}")
    if icp != cp:
        raise IndexInvalid(f"it describes checkpoint {icp}, the checkpoint file names {cp}")
    want = _HEAD.size + 20 * sum(counts) + nspace + _SEL.size * (nmsg + ncor)
    if len(data) != want:
        raise IndexInvalid(f"{len(data)} bytes where its header implies {want}")
    if nspace > file_blocks:
        raise IndexInvalid(f"its space map covers {nspace} blocks, the queue file has "
                           f"{file_blocks}")
    pos = _HEAD.size
    view = memoryview(data)
    keys, blocks, lens = [], [], []
    for n in counts:
        trio = []
        for code, width in (("q", 8), ("q", 8), ("i", 4)):
            a = array(code)
            a.frombytes(view[pos:pos + n * width])
            if _BIG:
                a.byteswap()
            pos += n * width
            trio.append(a)
        keys.append(trio[0])
        blocks.append(trio[1])
        lens.append(trio[2])
    space = bytearray(data[pos:pos + nspace])
    pos += nspace
    sel = []
    for _ in range(nmsg + ncor):
        sel.append(_SEL.unpack_from(data, pos))
        pos += _SEL.size
    _check(keys, blocks, lens, space)
    return QueueIndexData(iqid, icp, keys, blocks, lens, space, sel[:nmsg], sel[nmsg:])


def _check(keys: list[array], blocks: list[array], lens: list[array],
           space: bytearray) -> None:
    """Consistency checks that stay cheap at a million records (the crc already catches
    damage; these catch an index that does not fit the file): every block inside the
    space map, lengths not negative, keys rising within a priority, records starting in
    blocks in use, checked on every 64th record and the last (a get reads its record and
    checks its magic, length and crc anyway)."""
    n = len(space)
    used = 0
    for p in range(10):
        ks, bl, ls = keys[p], blocks[p], lens[p]
        if not ks:
            continue
        sb, sl = bl[::64], ls[::64]
        if (min(sb) < 0 or max(sb) >= n or min(sl) < 0 or not 0 <= bl[-1] < n
                or ls[-1] < 0):
            raise IndexInvalid(f"a record of priority {p} lies outside the space map")
        sk = ks[::64]
        if any(map(int.__ge__, sk, sk[1:])) or ks[-1] < sk[-1] or (
                len(ks) > 1 and ks[-1] <= ks[-2]):
            raise IndexInvalid(f"keys of priority {p} are not in order")
        if not all(map(space.__getitem__, sb)) or not space[bl[-1]]:
            raise IndexInvalid(f"a record of priority {p} starts in a free block")
        used += len(ks)
    if used > n:
        raise IndexInvalid("more records than blocks")
