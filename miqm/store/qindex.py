"""The queue index ``queues/<Q>/idx``: a deep queue opens without reading its messages.

A checkpoint that changes a queue file holding at least ``index_min_records`` records
also writes the queue's index as of that checkpoint: the on-file part of the in-memory
:class:`~miqm.store.queues.PriorityIndex` (key, block, body length of every record, per
priority, in delivery order), the space map, and the caller-chosen msgids and non-zero
correlids. Opening the queue then reads one compact file (20 bytes a message) instead of
walking every record of the queue file.

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

import operator
import struct
import sys
import threading
from array import array
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from itertools import compress, islice
from typing import Any

from crc32c import crc32c

from lockfs.volume import FileHead

#: a space map's bytes with the blocks a running checkpoint freed (2) read as free (0)
FREED_AS_FREE = bytes.maketrans(b"\x02", b"\x00")

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
    free = bytes(space)
    if 2 in free:  # blocks the running checkpoint freed read as free
        free = free.translate(FREED_AS_FREE)
    free = free.rstrip(b"\x00")
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
    view = memoryview(data)
    return read_index(lambda n, off: bytes(view[off:off + n]), len(data), qid, cp,
                      file_blocks)


#: the piece of an index file read at a time by :func:`read_index`
READ_CHUNK = 1 << 20


def read_index(pread: Callable[[int, int], bytes], size: int, qid: int, cp: int,
               file_blocks: int, stop: Callable[[], bool] | None = None) -> QueueIndexData:
    """:func:`decode` reading the file piece by piece through ``pread(n, offset)``
    (``size`` bytes in all) straight into the arrays, instead of reading it whole first:
    at ten million messages that buffer would be 230 MB of fresh memory to fault in, which
    costs a takeover more than reading it. ``stop`` (a standby's read-ahead) is asked
    between pieces and ends the read with :class:`IndexInvalid` when it says so."""
    head = b""
    while len(head) < _HEAD.size:  # a read may return less than asked
        piece = pread(_HEAD.size - len(head), len(head))
        if not piece:
            break
        head += piece
    if len(head) < _HEAD.size:
        raise IndexInvalid(f"{size} bytes, shorter than its header")
    f = _HEAD.unpack_from(head, 0)
    magic, crc, ver, iqid, icp, nspace = f[:6]
    counts = f[6:16]
    nmsg, ncor = f[16], f[17]
    if magic != MAGIC:
        raise IndexInvalid("bad magic")
    want = _HEAD.size + 20 * sum(counts) + nspace + _SEL.size * (nmsg + ncor)
    if size != want:
        raise IndexInvalid(f"{size} bytes where its header implies {want}")
    running = crc32c(memoryview(head)[8:])
    pos = _HEAD.size

    def section(n: int, into: array | bytearray) -> None:
        """Read the next ``n`` bytes into ``into``, sized for them beforehand (growing
        it piece by piece would over-allocate: tens of MB at ten million messages)."""
        nonlocal pos, running
        end = pos + n
        dest = memoryview(into).cast("B")
        at = 0
        while pos < end:
            if stop is not None and stop():
                raise IndexInvalid("the read was stopped")
            piece = pread(min(READ_CHUNK, end - pos), pos)
            if not piece:
                raise IndexInvalid(f"it ends at {pos} bytes, its header implies {want}")
            running = crc32c(piece, running)
            dest[at:at + len(piece)] = piece
            at += len(piece)
            pos += len(piece)
        dest.release()

    keys, blocks, lens = [], [], []
    for n in counts:
        trio = [array("q", [0]) * n, array("q", [0]) * n, array("i", [0]) * n]
        for a in trio:
            section(n * a.itemsize, a)
            if _BIG:
                a.byteswap()
        keys.append(trio[0])
        blocks.append(trio[1])
        lens.append(trio[2])
    space = bytearray(nspace)
    section(nspace, space)
    tail = bytearray(_SEL.size * (nmsg + ncor))
    section(len(tail), tail)
    # the checks decode() makes, in the same order of importance
    if running != crc:
        raise IndexInvalid("bad checksum (torn or damaged)")
    if ver != VERSION:
        raise IndexInvalid(f"format version {ver}, this miqm reads {VERSION}")
    if iqid != qid:
        raise IndexInvalid(f"it belongs to queue incarnation {iqid}, not {qid}")
    if icp != cp:
        raise IndexInvalid(f"it describes checkpoint {icp}, the checkpoint file names {cp}")
    if nspace > file_blocks:
        raise IndexInvalid(f"its space map covers {nspace} blocks, the queue file has "
                           f"{file_blocks}")
    sel = [_SEL.unpack_from(tail, i * _SEL.size) for i in range(nmsg + ncor)]
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


# ------------------------------------------------------------------ index deltas
# ``queues/<Q>/idx.d``: what changed in the queue file since the checkpoint its ``idx``
# describes, so that a checkpoint changing a deep queue writes a few bytes per changed
# record instead of the whole index again (20 bytes for each of its messages), and the
# checkpoint that ends a takeover leaves an index the next takeover can use.
#
# Layout (little-endian): ``magic "MIQD", crc32c:u32`` (over everything after it),
# ``version:u32, qid:u32, base_cp:u64, cp:u64, nadd:u64, ndel:u64, nrun:u64,
# runbytes:u64, nmsgid:u32, ncorrelid:u32``; then the records added since ``base_cp``
# (priorities ``b``, keys ``q``, blocks ``q``, lengths ``i``; grouped by priority, see
# delta_groups), the keys of records deleted
# since then (``q``), the space map's changed runs (starts ``q``, lengths ``q``, then their
# ``runbytes`` bytes as of ``cp``), and the added records' selectors as in the index.
# Trusted only when the checkpoint file names (base_cp, cp) for the queue and both files
# check out; every deleted key must be found and no added key may be present already.

_DHEAD = struct.Struct("<4sIIIQQQQQQII")
DMAGIC = b"MIQD"


@dataclass
class QueueIndexDelta:
    """The content of a delta file, decoded."""

    base_cp: int
    cp: int
    prios: array
    keys: array
    blocks: array
    lens: array
    deleted: array
    run_starts: array
    run_lens: array
    run_bytes: bytes
    msgids: list[tuple[int, bytes]]
    correlids: list[tuple[int, bytes]]


class DeltaLog:
    """In memory: the changes to a queue file since its index file's checkpoint
    (``base_cp``, ``base_n`` records), kept by the checkpoints that make them.

    The added records are kept per priority, each priority's in the order the
    checkpoints wrote them (keys rising): the delta file then holds them grouped by
    priority, and a takeover applies it by slices (:func:`apply_delta`) instead of a
    Python step per record."""

    __slots__ = ("base_cp", "base_n", "by_prio", "correlids", "deleted", "msgids",
                 "touched")

    def __init__(self, base_cp: int, base_n: int) -> None:
        self.base_cp, self.base_n = base_cp, base_n
        #: priority -> (keys, blocks, lengths) of the records added since the base
        self.by_prio: dict[int, tuple[array, array, array]] = {}
        self.deleted = array("q")
        self.touched: list[tuple[int, int]] = []  # (first block, blocks) of the space map
        self.msgids: dict[int, bytes] = {}
        self.correlids: dict[int, bytes] = {}

    @classmethod
    def from_file(cls, x: QueueIndexDelta, base_n: int) -> DeltaLog:
        """The log a loaded delta file describes (later deltas include it)."""
        log = cls(x.base_cp, base_n)
        log.merge(x)
        return log

    def merge(self, x: QueueIndexDelta) -> None:
        """Add the changes of a later delta file (a second delta on top of this one's)."""
        for p, ks, bs, ls in delta_groups(x):
            group = self.by_prio.get(p)
            if group is None:
                self.by_prio[p] = (ks, bs, ls)
                continue
            group[0].extend(ks)
            group[1].extend(bs)
            group[2].extend(ls)
        self.deleted = self.deleted + x.deleted  # a new array: x's may be in use
        self.touched.extend(zip(x.run_starts, x.run_lens, strict=True))
        self.msgids.update(x.msgids)
        self.correlids.update(x.correlids)

    def added(self, prio: int, key: int, block: int, length: int, nblocks: int,
              msgid: bytes | None, correlid: bytes | None) -> None:
        """A record written to the file."""
        group = self.by_prio.get(prio)
        if group is None:
            group = self.by_prio[prio] = (array("q"), array("q"), array("i"))
        group[0].append(key)
        group[1].append(block)
        group[2].append(length)
        self.touched.append((block, nblocks))
        if msgid is not None:
            self.msgids[key] = msgid
        if correlid is not None:
            self.correlids[key] = correlid

    def removed(self, key: int, block: int, nblocks: int) -> None:
        """A record deleted from the file."""
        self.deleted.append(key)
        self.touched.append((block, nblocks))

    def size(self) -> int:
        """Records the delta file would hold."""
        return sum(len(g[0]) for g in self.by_prio.values()) + len(self.deleted)

    def too_big(self, limit: int) -> bool:
        """Whether the index should be written again instead: a delta is rewritten whole
        at every checkpoint that changes the queue, so past ``limit`` records or a
        sixteenth of the index's (whichever is more) it costs more than it saves, and so
        does one with more records than the index (a small queue's); 0 turns deltas
        off."""
        return limit <= 0 or self.size() > min(max(limit, self.base_n // 16),
                                                max(self.base_n, 1))

    def _compact(self) -> None:
        """Forget records both added and deleted since the base; merge the space runs."""
        if self.deleted and self.by_prio:
            gone = set(self.deleted)
            if any(not gone.isdisjoint(g[0]) for g in self.by_prio.values()):
                new: set[int] = set()
                for p, (ks, bs, ls) in list(self.by_prio.items()):
                    new.update(ks)
                    sel = [k not in gone for k in ks]
                    self.by_prio[p] = (array("q", compress(ks, sel)),
                                       array("q", compress(bs, sel)),
                                       array("i", compress(ls, sel)))
                self.deleted = array("q", (k for k in self.deleted if k not in new))
                for k in gone:
                    self.msgids.pop(k, None)
                    self.correlids.pop(k, None)
        runs: list[tuple[int, int]] = []
        for s, n in sorted(self.touched):
            if runs and s <= runs[-1][0] + runs[-1][1]:
                ps, pn = runs[-1]
                runs[-1] = (ps, max(pn, s + n - ps))
            else:
                runs.append((s, n))
        self.touched = runs

    def snapshot(self, space: bytes | bytearray) -> tuple[list[bytes], int, int, int]:
        """The delta as of now (under the store lock): pieces to pass to
        :func:`encode_delta`, with its counts. Blocks freed by the running checkpoint read
        as free, as in :func:`snapshot`."""
        self._compact()
        starts = array("q", (s for s, _n in self.touched))
        lens_runs = array("q", (n for _s, n in self.touched))
        raw = b"".join(bytes(space[s:s + n]).ljust(n, b"\x00") for s, n in self.touched)
        raw = raw.translate(FREED_AS_FREE)
        sel = b"".join([*(_SEL.pack(k, m) for k, m in self.msgids.items()),
                        *(_SEL.pack(k, c) for k, c in self.correlids.items())])
        groups = sorted(self.by_prio.items())  # grouped by priority, in write order
        prios = array("b", b"".join(bytes([p]) * len(g[0]) for p, g in groups))
        keys, blocks, lens = array("q"), array("q"), array("i")
        for _p, (ks, bs, ls) in groups:
            keys += ks
            blocks += bs
            lens += ls
        pieces = [_le(prios), _le(keys), _le(blocks), _le(lens),
                  _le(self.deleted), _le(starts), _le(lens_runs), raw, sel]
        return pieces, len(self.msgids), len(self.correlids), len(raw)


def encode_delta(qid: int, base_cp: int, cp: int,
                 snap: tuple[list[bytes], int, int, int]) -> list[bytes]:
    """The bytes of a delta file, in pieces."""
    pieces, nmsg, ncor, runbytes = snap
    nadd = len(pieces[1]) // 8
    ndel = len(pieces[4]) // 8
    nrun = len(pieces[5]) // 8
    head = _DHEAD.pack(DMAGIC, 0, VERSION, qid, base_cp, cp, nadd, ndel, nrun, runbytes,
                       nmsg, ncor)
    body = [head[8:], *pieces]
    crc = 0
    for piece in body:
        crc = crc32c(piece, crc)
    return [DMAGIC + struct.pack("<I", crc), *body]


def decode_delta(data: bytes, qid: int, base_cp: int, cp: int) -> QueueIndexDelta:
    """Decode and check a delta file; :class:`IndexInvalid` says why it cannot be used."""
    if len(data) < _DHEAD.size:
        raise IndexInvalid(f"delta of {len(data)} bytes, shorter than its header")
    (magic, crc, ver, iqid, ibase, icp, nadd, ndel, nrun, runbytes, nmsg,
     ncor) = _DHEAD.unpack_from(data, 0)
    if magic != DMAGIC:
        raise IndexInvalid("delta: bad magic")
    if crc32c(memoryview(data)[8:]) != crc:
        raise IndexInvalid("delta: bad checksum (torn or damaged)")
    if ver != VERSION:
        raise IndexInvalid(f"delta: format version {ver}, this miqm reads {VERSION}")
    if iqid != qid:
        raise IndexInvalid(f"delta: it belongs to queue incarnation {iqid}, not {qid}")
    if (ibase, icp) != (base_cp, cp):
        raise IndexInvalid(f"delta: it describes checkpoints {ibase}..{icp}, the checkpoint "
                           f"file names {base_cp}..{cp}")
    want = _DHEAD.size + 21 * nadd + 8 * ndel + 16 * nrun + runbytes + _SEL.size * (nmsg + ncor)
    if len(data) != want:
        raise IndexInvalid(f"delta: {len(data)} bytes where its header implies {want}")
    view = memoryview(data)
    pos = _DHEAD.size
    out = []
    for code, width, n in (("b", 1, nadd), ("q", 8, nadd), ("q", 8, nadd), ("i", 4, nadd),
                           ("q", 8, ndel), ("q", 8, nrun), ("q", 8, nrun)):
        a = array(code)
        a.frombytes(view[pos:pos + n * width])
        if _BIG:
            a.byteswap()
        pos += n * width
        out.append(a)
    raw = bytes(view[pos:pos + runbytes])
    pos += runbytes
    sel = []
    for _ in range(nmsg + ncor):
        sel.append(_SEL.unpack_from(data, pos))
        pos += _SEL.size
    prios, keys, blocks, lens, deleted, starts, rlens = out
    if sum(rlens) != runbytes or (rlens and min(rlens) <= 0) or (starts and min(starts) < 0):
        raise IndexInvalid("delta: its space runs do not add up")
    if prios and (min(prios) < 0 or max(prios) > 9):
        raise IndexInvalid("delta: a record's priority is outside 0-9")
    return QueueIndexDelta(ibase, icp, prios, keys, blocks, lens, deleted, starts, rlens,
                           raw, sel[:nmsg], sel[nmsg:])


def _blocks_in_use(space: bytearray) -> int:
    """The length of ``space`` without its trailing free (zero) blocks. Looks at the end
    in growing pieces: a rstrip copies the whole map (3 MB at a million messages, a
    millisecond of every takeover in fresh memory) when the free tail is mostly short."""
    end, step = len(space), 4096
    while end > 0:
        start = max(0, end - step)
        kept = len(space[start:end].rstrip(b"\x00"))
        if kept:
            return start + kept
        end, step = start, step * 2
    return 0


def _rising(keys: array) -> bool:
    """Whether ``keys`` rise strictly (one pass without a Python step per key)."""
    return all(map(operator.lt, keys, islice(keys, 1, None)))


def delta_groups(x: QueueIndexDelta) -> list[tuple[int, array, array, array]]:
    """The delta's added records by priority: (priority, keys, blocks, lengths), each in
    the order the file holds them. A file written by :class:`DeltaLog` holds them grouped
    by priority, each group sliced out without a Python step per record (a delta may hold
    a sixteenth of the index: 600,000 records at ten million messages); one written
    before that is grouped record by record."""
    prios, n = x.prios, len(x.prios)
    bounds: list[tuple[int, int, int]] = []
    start = 0
    while start < n:
        p = prios[start]
        end = bisect_right(prios, p, start)  # right if grouped and ascending: checked
        if end <= start or prios[start:end].count(p) != end - start or (
                bounds and bounds[-1][0] >= p):
            break
        bounds.append((p, start, end))
        start = end
    if start == n:
        return [(p, x.keys[i:j], x.blocks[i:j], x.lens[i:j]) for p, i, j in bounds]
    rows: dict[int, list[int]] = {}
    for i, p in enumerate(prios):
        rows.setdefault(p, []).append(i)
    return [(p, array("q", (x.keys[i] for i in idx)), array("q", (x.blocks[i] for i in idx)),
             array("i", (x.lens[i] for i in idx))) for p, idx in sorted(rows.items())]


def fit_space(d: QueueIndexData, file_blocks: int) -> None:
    """Check that the space map ``d.space`` uses no block past the queue file's end
    (``file_blocks``) and cut the free blocks past it."""
    used = _blocks_in_use(d.space)
    if used > file_blocks:
        raise IndexInvalid(f"its space map covers {used} blocks, the queue file has "
                           f"{file_blocks}")
    if len(d.space) > file_blocks:
        del d.space[file_blocks:]  # free blocks past the end of the file


def appends_only(d: QueueIndexData, x: QueueIndexDelta) -> bool:
    """Whether every record ``x`` adds comes after the index's last of its priority, in
    key order (the usual case): applying it then only appends, and can be undone."""
    for p, ak, _ab, _al in delta_groups(x):
        if not _rising(ak) or (d.keys[p] and d.keys[p][-1] >= ak[0]):
            return False
    return True


def apply_delta(d: QueueIndexData, x: QueueIndexDelta, file_blocks: int) -> None:
    """Bring an index's arrays and space map (``d``, changed in place) to the delta's
    checkpoint; the deleted keys are left to the caller (it tombstones them in its
    :class:`~miqm.store.queues.PriorityIndex`, each one it must find)."""
    space = d.space
    pos = 0
    for s, n in zip(x.run_starts, x.run_lens, strict=True):
        if s + n > len(space):
            space.extend(bytes(s + n - len(space)))
        space[s:s + n] = x.run_bytes[pos:pos + n]
        pos += n
    fit_space(d, file_blocks)
    n = len(space)
    if x.blocks and (min(x.blocks) < 0 or max(x.blocks) >= n
                     or 0 in map(space.__getitem__, x.blocks)):
        raise IndexInvalid("delta: an added record starts in a free block")
    if x.lens and min(x.lens) < 0:
        raise IndexInvalid("delta: an added record has a negative length")
    for p, ak, ab, al in delta_groups(x):
        if not _rising(ak):  # rare: not in key order
            rows = sorted(zip(ak, ab, al, strict=True))
            ak = array("q", (r[0] for r in rows))
            ab = array("q", (r[1] for r in rows))
            al = array("i", (r[2] for r in rows))
            if not _rising(ak):
                raise IndexInvalid(f"delta: keys of priority {p} repeat")
        ks = d.keys[p]
        if not ks or ks[-1] < ak[0]:  # the usual case: every added key after the index's
            ks.extend(ak)
            d.blocks[p].extend(ab)
            d.lens[p].extend(al)
            continue
        # rare: an added key below one of the index's (merged in key order)
        rows = sorted([*zip(ks, d.blocks[p], d.lens[p], strict=True),
                       *zip(ak, ab, al, strict=True)])
        d.keys[p] = array("q", (r[0] for r in rows))
        d.blocks[p] = array("q", (r[1] for r in rows))
        d.lens[p] = array("i", (r[2] for r in rows))
        if not _rising(d.keys[p]):
            raise IndexInvalid(f"delta: keys of priority {p} repeat or are out of order")
    d.msgids.extend(x.msgids)
    d.correlids.extend(x.correlids)


# ------------------------------------------------------------------ standby's read-ahead
#: bytes of an index file's header (its crc, qid, checkpoint and counts)
HEAD_SIZE = _HEAD.size
#: bytes of a delta file's header (likewise)
DHEAD_SIZE = _DHEAD.size


class IndexAhead:
    """What a standby read ahead for one queue: its index (``head``: the header bytes it
    was read under) and, when the checkpoint names a delta, the delta decoded (``dhead``:
    its header bytes) and, if it only appends, already applied to the index, in a way
    that can be undone when a newer delta on the same index replaces it."""

    __slots__ = ("_undo", "base_n", "data", "delta", "dhead", "dlog", "head")

    def __init__(self, head: bytes, data: QueueIndexData) -> None:
        self.head, self.data = head, data
        self.base_n = sum(len(k) for k in data.keys)  # records of the index itself
        self.dhead: bytes | None = None
        self.delta: QueueIndexDelta | None = None
        # the active's in-memory log of that delta (DeltaLog.from_file), built ahead too:
        # at ten million messages a takeover spent milliseconds building it
        self.dlog: DeltaLog | None = None
        # how to undo the delta applied to ``data`` (None: none is)
        self._undo: tuple[list[int], int, int, int, list[tuple[int, bytes]]] | None = None

    @property
    def applied(self) -> bool:
        """Whether ``delta`` is applied to ``data``."""
        return self._undo is not None

    def use_delta(self, dhead: bytes, x: QueueIndexDelta) -> None:
        """Hold ``x`` (read under header ``dhead``) instead of any delta held before, and
        apply it to the index when it only appends."""
        self.drop_delta()
        self.dhead, self.delta = dhead, x
        self.dlog = DeltaLog.from_file(x, self.base_n)
        d = self.data
        if not appends_only(d, x):
            return  # rare: the takeover merges it itself
        space = d.space
        saved = [(s, bytes(space[s:s + n])) for s, n in zip(x.run_starts, x.run_lens,
                                                              strict=True)]
        self._undo = ([len(k) for k in d.keys], len(space), len(d.msgids),
                      len(d.correlids), saved)
        try:
            apply_delta(d, x, 1 << 62)  # the queue file's size is checked at takeover
        except IndexInvalid:
            self.drop_delta()
            self.dhead = dhead  # known bad: not read again; the takeover finds out itself

    def drop_delta(self) -> None:
        """The index as its file holds it again (any delta held is forgotten)."""
        undo, self._undo = self._undo, None
        if undo is not None:
            lens, nspace, nmsg, ncor, saved = undo
            d = self.data
            for p, n in enumerate(lens):
                del d.keys[p][n:]
                del d.blocks[p][n:]
                del d.lens[p][n:]
            for s, orig in reversed(saved):
                d.space[s:s + len(orig)] = orig
            del d.space[nspace:]
            del d.msgids[nmsg:]
            del d.correlids[ncor:]
        self.dhead, self.delta, self.dlog = None, None, None


class IndexCache:
    """Index files a standby decoded ahead of a takeover, by queue name, each with the
    header bytes it was read under. Only reads: a standby never writes.

    A takeover uses an entry only if the file's header is still those bytes. Index files
    are written whole under another name and renamed, never changed in place, and their
    header holds the crc of all the rest, so an equal header means the same content, which
    was checked in full when the standby read it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_name: dict[str, IndexAhead] = {}
        # the checkpoint file and the queue catalog, decoded: file name -> (its bytes,
        # what they decode to); with thousands of queues each is a millisecond or two
        # of JSON that a takeover need not decode again if the bytes are the same
        self._files: dict[str, tuple[bytes, Any]] = {}

    def known_file(self, name: str, raw: bytes) -> Any:
        """What file ``name`` decodes to if decoded here from exactly ``raw`` (read only:
        it is kept for the taker), else None."""
        with self._lock:
            entry = self._files.get(name)
        return entry[1] if entry is not None and entry[0] == raw else None

    def keep_file(self, name: str, raw: bytes, decoded: Any) -> None:
        """Keep what file ``name``'s bytes ``raw`` decode to (never changed after)."""
        with self._lock:
            self._files[name] = (raw, decoded)

    def take_file(self, name: str, raw: bytes) -> Any:
        """What file ``name`` decodes to if it was decoded from exactly ``raw``, else
        None; given away (the taker may keep and build on it)."""
        with self._lock:
            entry = self._files.pop(name, None)
        return entry[1] if entry is not None and entry[0] == raw else None

    def refresh(self, volume: Any, wanted: dict[str, tuple[int, int, int]],
                stop: Callable[[], bool] = lambda: False) -> int:
        """Read the index (``queues/<name>/idx``) of each queue in ``wanted`` ({name: (qid,
        checkpoint of its index, checkpoint of its delta or 0)}) whose file changed since
        it was last read, and its delta (``idx.d``) likewise; forget the others. Files
        that cannot be read or checked are skipped (the takeover reads them itself).
        Returns how many files were read."""
        with self._lock:
            for name in [n for n in self._by_name if n not in wanted]:
                del self._by_name[name]
        if stop() or not wanted:
            return 0
        # every head first, in one call (over NFS one round trip for them all): only the
        # queues whose files changed are read, and out of the table while they are
        names = list(wanted)
        deltas = [name for name in names if wanted[name][2]]
        try:
            got = volume.read_heads([(f"queues/{n}/idx", HEAD_SIZE) for n in names]
                                    + [(f"queues/{n}/idx.d", _DHEAD.size) for n in deltas])
        except Exception:  # the takeover reads the files itself
            return 0
        heads = dict(zip(names, got[:len(names)], strict=True))
        dheads = dict(zip(deltas, got[len(names):], strict=True))
        read = 0
        for name, (qid, cp, dcp) in wanted.items():
            if stop():
                break
            head = heads[name]
            dhead = dheads.get(name)
            with self._lock:
                known = self._by_name.get(name)
                if known is not None and head is not None and known.head == head.data and (
                        known.dhead is None if not dcp
                        else dhead is not None and known.dhead == dhead.data):
                    continue  # nothing changed
                # out of the table while it changes: a takeover meanwhile reads for itself
                known = self._by_name.pop(name, None)
            try:
                if head is None:
                    continue  # no index file (yet): the takeover finds out for itself
                if known is None or known.head != head.data:
                    known = None
                    with volume.open(f"queues/{name}/idx") as f:
                        first = f.pread(HEAD_SIZE, 0)
                        known = IndexAhead(first, read_index(f.pread, f.size(), qid, cp,
                                                             1 << 62, stop))
                    read += 1
                if dcp:
                    read += self._follow_delta(volume, name, qid, cp, dcp, known, dhead)
                else:
                    known.drop_delta()
            except Exception:  # whatever it is, the takeover reads the files itself
                if known is None:
                    continue
                known.drop_delta()
            with self._lock:
                self._by_name[name] = known
        return read

    @staticmethod
    def _follow_delta(volume: Any, name: str, qid: int, cp: int, dcp: int,
                      known: IndexAhead, dhead: FileHead | None) -> int:
        """Bring ``known`` to the delta file of checkpoint ``dcp``, whose head
        :meth:`refresh` has just read (``dhead``; None: no such file, and
        ``known`` keeps the index alone); 1 if it was read."""
        if dhead is None:
            known.drop_delta()
            return 0
        if known.dhead == dhead.data:
            return 0
        raw = volume.read_bytes(f"queues/{name}/idx.d")
        known.drop_delta()
        try:
            x = decode_delta(raw, qid, cp, dcp)
        except IndexInvalid:
            return 1
        known.use_delta(raw[:_DHEAD.size], x)
        return 1

    def take(self, name: str, head: bytes) -> IndexAhead | None:
        """What was read ahead for queue ``name`` if its index was read from a file whose
        header is ``head``; given away (its arrays become the queue's)."""
        with self._lock:
            entry = self._by_name.pop(name, None)
        return entry if entry is not None and entry.head == head else None
