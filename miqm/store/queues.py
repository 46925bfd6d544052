"""Local queues: the queue file on the data volume and the compact in-memory index.

Queue file ``queues/<Q>/q`` (see docs/store-format.md):

* bytes 0..4095: two header slots (0 and 2048), written alternately, each with magic,
  crc32c, a write counter, the queue's incarnation id (qid), the checkpoint that created
  the file, and the definition (attributes, JSON). A torn header write leaves the other.
* from 4096: blocks (32 bytes in format 2, 512 in format 1: :class:`RecordFormat`). A
  message occupies a run of blocks starting with a record header followed by its body.
  The space map (which blocks are in use) lives in memory and is rebuilt from the index
  file or by scanning headers on open.

The delete mark (``del_cp u64, del_crc u32, pad u32``) is written alone and checked by
its own crc so a torn mark reads as "not deleted". It sits *after* the crc-covered header
on purpose: a torn write of a new record over a deleted one can change the mark only if
it has already replaced the header before it, so a deleted record can never come back
with a fresh-looking mark (the crash harness found exactly that with the mark first).

Crash safety without a second copy: the queue file changes only during a checkpoint, after
the log is forced (write-ahead). A checkpoint never writes into blocks that are in use as
of the last *completed* checkpoint C, so a crash mid-checkpoint leaves C's records intact;
records and delete marks stamped with a checkpoint newer than C are ignored on open (and
their headers zeroed), and the log is replayed from C.
"""

from __future__ import annotations

import gc
import json
import struct
import threading
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, NamedTuple

from crc32c import crc32c

from lockfs.errors import LockFsError, VolumeNotFound
from lockfs.volume import FileHead, Volume, VolumeFile
from miqm.errors import StoreError
from miqm.store.qindex import FREED_AS_FREE, DeltaLog

DATA_START = 4096
HDR_SLOT = 2048
_QHDR = struct.Struct("<4sIIQIQI")  # magic, crc, version, seq, qid, created_cp, json length
_QMAGIC = b"MIQQ"
#: after a header's JSON, outside its checksum (a reader that predates it ignores it):
#: magic, the checkpoint that wrote the header, the records live in the file once that
#: checkpoint completed, crc32c of the three and of the header's own crc
_QCOUNT = struct.Struct("<4sQQI")
_QCOUNT_MAGIC = b"MIQC"
_DEL = struct.Struct("<QII")
_DELKEY = struct.Struct("<QQI")
FLAG_PERSISTENT = 1
FLAG_CORRELID = 2  # format 2: a correlid follows the msgid
_NO_CORRELID = bytes(24)
_ONES = [b"\x01" * n for n in range(128)]  # space-map runs of the common sizes


@dataclass(frozen=True)
class RecordFormat:
    """How one version of the queue file lays out its records.

    Both versions: ``magic, crc u32`` (over the header from ``key`` up to the delete mark
    and everything after the mark: the stored part), ``key u64, cp u64, qid u32, stored
    u32, priority u8, flags u8, pad u16, put_time f64``, then in version 1 ``msgid 24s,
    correlid 24s``, then the 16-byte delete mark, then in version 2 the msgid, a correlid
    only when ``FLAG_CORRELID`` is set, and the body. ``stored`` is what follows the fixed
    part: the body (version 1), the optional correlid and the body (version 2); the index
    keeps it as the record's length.
    """

    version: int
    block: int
    magic: bytes
    head: struct.Struct  # the crc-covered header before the delete mark
    fixed: int  # bytes before the stored part (header, mark, version 2's msgid)

    @property
    def del_at(self) -> int:
        """Offset of the delete mark in a record."""
        return self.head.size

    def blocks_for(self, stored: int) -> int:
        """Blocks a record with ``stored`` bytes after its fixed part occupies."""
        return (self.fixed + stored + self.block - 1) // self.block

    def offset(self, block: int) -> int:
        """File offset of data block ``block``."""
        return DATA_START + block * self.block

    def stored_len(self, body_len: int, correlid: bytes) -> int:
        """``stored`` of a record of this body and correlid."""
        if self.version == 1 or not correlid.strip(b"\0"):
            return body_len
        return body_len + 24

    def encode(self, key: int, cp: int, qid: int, priority: int, persistent: bool,
               put_time: float, msgid: bytes, correlid: bytes, body: bytes) -> bytes:
        """A message record padded to whole blocks (delete mark clear)."""
        flags = FLAG_PERSISTENT if persistent else 0
        mark = _DEL.pack(0, 0, 0)
        if self.version == 1:
            rest = self.head.pack(b"", 0, key, cp, qid, len(body), priority, flags, 0,
                                  put_time, msgid, correlid)[8:]
            tail = body
        else:
            # fixed 24-byte fields, as format 1's struct makes them
            if len(msgid) != 24:
                msgid = msgid[:24].ljust(24, b"\0")
            if len(correlid) != 24:
                correlid = correlid[:24].ljust(24, b"\0")
            with_c = correlid != _NO_CORRELID
            if with_c:
                flags |= FLAG_CORRELID
            rest = self.head.pack(b"", 0, key, cp, qid, len(body) + (24 if with_c else 0),
                                  priority, flags, 0, put_time)[8:]
            tail = b"".join((msgid, correlid, body)) if with_c else msgid + body
        crc = crc32c(tail, crc32c(rest))
        data = b"".join((self.magic, crc.to_bytes(4, "little"), rest, mark, tail))
        pad = (-len(data)) % self.block
        return data + bytes(pad) if pad else data

    def split(self, rec: bytes | memoryview, s: int, fields: tuple[Any, ...]
              ) -> tuple[bytes, bytes, int]:
        """(msgid, correlid, offset of the body) of the record at ``s`` whose header
        ``fields`` were unpacked by :attr:`head`."""
        if self.version == 1:
            return fields[10], fields[11], s + self.fixed
        at = s + self.del_at + _DEL.size
        msgid = bytes(rec[at:at + 24])
        if fields[7] & FLAG_CORRELID:
            return msgid, bytes(rec[at + 24:at + 48]), at + 48
        return msgid, _NO_CORRELID, at + 24


#: the largest read of several records at once, and the most free space read over
#: between two of them (QueueFile.read_many)
_RUN_BYTES = 1 << 20
_GAP_BYTES = 16 << 10

#: 512-byte blocks, 108 bytes before the body (files written before format 2)
FORMAT_1 = RecordFormat(1, 512, b"MIQR", struct.Struct("<4sIQQIIBBHd24s24s"), 108)
#: 32-byte blocks, 84 bytes before the body (msgid included), the correlid only when one
#: was given: an 8-byte message takes 96 bytes. The delete mark (bytes 44-59) shares its
#: 32-byte block with the header's last bytes, so a torn write of a later record over it
#: (sectors are whole multiples of blocks) changes both or neither, as in format 1.
FORMAT_2 = RecordFormat(2, 32, b"MIQS", struct.Struct("<4sIQQIIBBHd"), 84)
FORMATS = {1: FORMAT_1, 2: FORMAT_2}
#: the format of new queue files
QFILE_VERSION = 2

DEFAULT_ATTRS: dict[str, Any] = {
    "MAXDEPTH": 5000, "DEFPSIST": "NO", "DEFPRTY": 0, "DESCR": "",
    "PUT": "ENABLED", "GET": "ENABLED", "MAXMSGL": 4194304, "BOTHRESH": 0, "BOQNAME": "",
}


def _count_crc(header_crc: int, cp: int, live: int) -> int:
    return crc32c(struct.pack("<IQQ", header_crc, cp, live))


def delete_mark(key: int, cp: int, qid: int) -> bytes:
    """The 16-byte delete mark for a record, stamped with the checkpoint that wrote it."""
    return _DEL.pack(cp, crc32c(_DELKEY.pack(key, cp, qid)), 0)


class FileRecord(NamedTuple):
    """A live record found by scanning a queue file."""

    key: int
    block: int
    nblocks: int
    stored: int  # the record's length as the index keeps it (RecordFormat)
    priority: int
    msgid: bytes
    correlid: bytes


_OPEN_LATER_LOCK = threading.Lock()


class QueueFile:
    """One queue file: header slots, record I/O and the space map."""

    def __init__(self, volume: Volume, name: str, path: str | None = None) -> None:
        self.volume = volume
        self.name = name
        self.path = path or f"queues/{name}/q"
        self._f: VolumeFile | None = None
        # opened at first use (open_existing(later=True)): see the property; its size
        # then is the one read with the header (only this process writes the file)
        self._open_later = False
        self._known_size = 0
        self.hseq = 0
        #: (header seq, checkpoint, live records) of each valid header slot that records
        #: them (:meth:`recorded_records`)
        self.counts: list[tuple[int, int, int]] = []
        self.qid = 0
        self.created_cp = 0
        self.attrs: dict[str, Any] = {}
        # 0 free, 1 in use, 2 freed by the running checkpoint (reusable once it completes)
        self.space = bytearray()
        self._hint = 0
        self.garbage: list[int] = []
        self.max_key = 0
        self.max_cp_seen = 0
        self.fmt = FORMATS[QFILE_VERSION]

    # -- open / header -------------------------------------------------------------
    @property
    def f(self) -> VolumeFile | None:
        """The open file; one that :meth:`open_existing` left for later is opened here,
        on its first use (a get of a body only on file, the checkpoint's writes)."""
        if self._open_later:
            with _OPEN_LATER_LOCK:  # the checkpoint thread and a getter may meet here
                if self._open_later:
                    self._f = self.volume.open(self.path)
                    self._open_later = False
        return self._f

    @f.setter
    def f(self, value: VolumeFile | None) -> None:
        self._f = value
        self._open_later = False

    def size(self) -> int:
        """The file's size in bytes (a file not opened yet: as its header was read)."""
        if self._open_later:
            return self._known_size
        f = self.f
        assert f is not None
        return f.size()

    def create(self, qid: int, created_cp: int, attrs: dict[str, Any]) -> None:
        """Make a fresh file (replacing any) with one header, in the current format; not
        yet synced."""
        self.fmt = FORMATS[QFILE_VERSION]
        self.volume.makedirs(self.path.rsplit("/", 1)[0])
        self.f = self.volume.open(self.path, create=True)
        self.f.truncate(0)
        self.qid, self.created_cp, self.hseq = qid, created_cp, 0
        self.space = bytearray()
        self.counts = []
        self.write_header(attrs)

    def open_existing(self, later: bool = False, head: FileHead | None = None) -> bool:
        """Open and read the header; False if the file does not exist. ``later``: read
        the header and the size without opening it (over NFSv4 an open is a client of
        its own, about a millisecond, and a takeover that loads a queue from its index
        may never need the file before the checkpoint after it); it is opened at its
        first use (:attr:`f`). ``head`` (with ``later``): those already read, the file's
        first DATA_START bytes and its size."""
        try:
            if head is not None:
                self._known_size, raw = head.size, head.data
                self._f, self._open_later = None, True
            elif later:
                self._known_size = self.volume.stat(self.path).size
                raw = self.volume.read_head(self.path, DATA_START)
                self._f, self._open_later = None, True
            else:
                self.f = self.volume.open(self.path)
                raw = self.f.pread(DATA_START, 0)
        except VolumeNotFound:
            self._open_later = False
            return False
        best = None
        self.counts = []
        for slot in (0, HDR_SLOT):
            part = raw[slot:slot + HDR_SLOT]
            if len(part) < _QHDR.size:
                continue
            magic, crc, ver, seq, qid, ccp, n = _QHDR.unpack_from(part, 0)
            body = part[_QHDR.size:_QHDR.size + n]
            if magic != _QMAGIC or len(body) != n:
                continue
            if crc32c(part[8:_QHDR.size] + body) != crc:
                continue
            if best is None or seq > best[0]:
                best = (seq, qid, ccp, body, ver)
            at = _QHDR.size + n
            if len(part) >= at + _QCOUNT.size:
                cmagic, cp, live, ccrc = _QCOUNT.unpack_from(part, at)
                if cmagic == _QCOUNT_MAGIC and ccrc == _count_crc(crc, cp, live):
                    self.counts.append((seq, cp, live))
        if best is None:
            raise StoreError(
                f"queue file {self.volume.describe()}/{self.path} is corrupt: no valid header "
                "(restore it with rcrmqobj, or delete the queue)")
        fmt = FORMATS.get(best[4])
        if fmt is None:
            raise StoreError(
                f"queue file {self.volume.describe()}/{self.path} has format version "
                f"{best[4]}; this miqm reads versions {', '.join(map(str, FORMATS))}")
        self.fmt = fmt
        self.hseq, self.qid, self.created_cp = best[0], best[1], best[2]
        self.attrs = json.loads(best[3])
        return True

    def write_header(self, attrs: dict[str, Any], records: tuple[int, int] | None = None
                     ) -> None:
        """Write the definition into the older header slot (the newer one stays valid);
        ``records``: (checkpoint, records live in the file once it completes), which a
        restart compares with what it finds (:meth:`recorded_records`)."""
        assert self.f is not None
        self.hseq += 1
        body = json.dumps(attrs, separators=(",", ":")).encode()
        if _QHDR.size + len(body) + _QCOUNT.size > HDR_SLOT:
            raise StoreError(f"queue {self.name}: definition too large for the header")
        rest = _QHDR.pack(_QMAGIC, 0, self.fmt.version, self.hseq, self.qid,
                          self.created_cp, len(body))[8:]
        crc = crc32c(rest + body)
        data = _QMAGIC + struct.pack("<I", crc) + rest + body
        # the slot written now no longer holds what it held
        self.counts = [c for c in self.counts if c[0] % 2 != self.hseq % 2]
        if records is not None:
            cp, live = records
            data += _QCOUNT.pack(_QCOUNT_MAGIC, cp, live, _count_crc(crc, cp, live))
            self.counts.append((self.hseq, cp, live))
        self.f.pwrite(data + bytes(HDR_SLOT - len(data)), (self.hseq % 2) * HDR_SLOT)
        self.attrs = dict(attrs)

    def recorded_records(self, completed_cp: int, aborted: frozenset[int] | set[int]
                         ) -> int | None:
        """How many records the file held live as of checkpoint ``completed_cp``, as the
        last header written by a checkpoint up to it says (a checkpoint that changes the
        file's records writes it; one that never completed is passed over, and a header
        it tore fails its checksums); None when no header says (a file written before
        headers recorded it)."""
        best: tuple[int, int, int] | None = None
        for seq, cp, live in self.counts:
            if cp <= completed_cp and cp not in aborted and (best is None or seq > best[0]):
                best = (seq, cp, live)
        return None if best is None else best[2]

    # -- scanning ------------------------------------------------------------------
    def scan(self, completed_cp: int, chunk: int = 4 << 20,
             aborted: frozenset[int] | set[int] = frozenset()) -> Iterator[FileRecord]:
        """Yield records live as of checkpoint ``completed_cp``; build the space map.

        Records or delete marks stamped with a newer checkpoint come from a checkpoint that
        never completed: such records are skipped (and their headers zeroed by
        :meth:`zero_garbage`), such marks ignored. So are records stamped with one of the
        ``aborted`` checkpoints (a checkpoint that never completed, found by a restart
        that loaded this file from its index and so left its records unzeroed).
        """
        assert self.f is not None
        fmt = self.fmt
        blk, magic, fixed, del_at = fmt.block, fmt.magic, fmt.fixed, fmt.del_at
        stored_at = del_at + _DEL.size  # the crc's second part starts after the mark
        pread = self.f.pread
        size = self.f.size()
        nblocks = max(0, (size - DATA_START) // blk)
        self.space = space = bytearray(nblocks)
        self.garbage = garbage = []
        self.max_key = max_key = 0
        self.max_cp_seen = max_cp = 0
        qid_here = self.qid
        unpack_rec, unpack_del = fmt.head.unpack_from, _DEL.unpack_from
        split = fmt.split if fmt.version == 1 else None  # format 2's is inlined below
        record = tuple.__new__  # FileRecord(...) without its Python-level __new__
        # a window of the file: buf holds blocks from buf_start; mv is a view of it (the
        # crc reads the body through it without copying)
        buf = b""
        mv = memoryview(buf)
        buf_start = nbuf = 0  # nbuf: len(buf)
        ones = _ONES
        n_ones = len(ones)
        b = 0
        while b < nblocks:
            s = (b - buf_start) * blk
            if s + fixed > nbuf:
                buf = pread(max(fixed, chunk), fmt.offset(b))
                mv, buf_start, s, nbuf = memoryview(buf), b, 0, len(buf)
                if nbuf < 4:
                    break
            if not buf.startswith(magic, s):
                # free space: on to the next block that starts with the magic
                j = buf.find(magic, s + 1)
                while j > 0 and j % blk:
                    j = buf.find(magic, j + 1)
                b = buf_start + (j // blk if j > 0 else max(1, nbuf // blk))
                continue
            if s + fixed > nbuf:  # a short read at the end of the file
                garbage.append(b)
                b += 1
                continue
            fields = unpack_rec(buf, s)
            crc, key, cp, qid, stored, prio = fields[1:7]
            del_cp, del_crc, _ = unpack_del(buf, s + del_at)
            n = (fixed + stored + blk - 1) // blk
            if cp > max_cp:
                max_cp = cp
            if b + n > nblocks or qid != qid_here or cp > completed_cp or cp in aborted:
                garbage.append(b)
                b += 1
                continue
            end = s + fixed + stored
            if end > nbuf:
                buf = pread(max(fixed + stored, chunk), fmt.offset(b))
                mv, buf_start, s, end = memoryview(buf), b, 0, fixed + stored
                nbuf = len(buf)
            if end > nbuf or crc32c(mv[s + stored_at:end],
                                        crc32c(mv[s + 8:s + del_at])) != crc:
                garbage.append(b)
                b += 1
                continue
            if del_cp:
                if del_cp > max_cp:
                    max_cp = del_cp
                if del_cp <= completed_cp and crc32c(_DELKEY.pack(key, del_cp, qid)) == del_crc:
                    b += 1  # deleted: its blocks are free, later records may start inside
                    continue
            space[b:b + n] = ones[n] if n < n_ones else b"\x01" * n
            if key > max_key:
                max_key = key
                self.max_key = key
            if split is None:  # format 2: msgid after the mark, then a correlid if flagged
                at = s + stored_at
                msgid = buf[at:at + 24]
                correlid = (buf[at + 24:at + 48] if fields[7] & FLAG_CORRELID
                            else _NO_CORRELID)
            else:
                msgid, correlid, _body_at = split(buf, s, fields)
            self.max_cp_seen = max_cp
            yield record(FileRecord, (key, b, n, stored, prio, msgid, correlid))
            b += n
        self.max_key, self.max_cp_seen = max_key, max_cp

    def zero_garbage(self) -> None:
        """Clear the magic of records left by an incomplete checkpoint (then sync)."""
        assert self.f is not None
        for b in self.garbage:
            if not self.space[b]:
                self.f.pwrite(bytes(8), self.fmt.offset(b))
        if self.garbage:
            self.f.fdatasync()
        self.garbage = []

    # -- records -------------------------------------------------------------------
    def read(self, block: int, stored: int) -> tuple[int, int, bool, float, bytes, bytes, bytes]:
        """(key, priority, persistent, put_time, msgid, correlid, body) of the record at
        ``block`` whose index length is ``stored``."""
        assert self.f is not None
        return self._parse(self.f.pread(self.fmt.fixed + stored, self.fmt.offset(block)),
                           0, block, stored)

    def read_many(self, places: list[tuple[int, int]]
                  ) -> list[tuple[int, int, bool, float, bytes, bytes, bytes]]:
        """:meth:`read` of each (block, stored) in ``places``, in that order, with one
        ``pread`` per run of records that lie one after another in the file (free space
        of up to 16 KiB between two is read over): a batch of messages put together is
        mostly one run, so a streaming consumer's batch costs one read, not one per
        message."""
        assert self.f is not None
        fmt = self.fmt
        gap = _GAP_BYTES // fmt.block
        out: list[tuple[int, int, bool, float, bytes, bytes, bytes]] = []
        i, n = 0, len(places)
        while i < n:
            first = places[i][0]
            end = first + fmt.blocks_for(places[i][1])
            j = i + 1
            # a run stops at a gap, or at a megabyte: large messages are read one by one
            while (j < n and end <= places[j][0] <= end + gap
                   and (end - first) * fmt.block < _RUN_BYTES):
                end = places[j][0] + fmt.blocks_for(places[j][1])
                j += 1
            if j == i + 1:
                out.append(self.read(*places[i]))
                i = j
                continue
            base = fmt.offset(first)
            data = self.f.pread(fmt.offset(end) - base, base)
            for block, stored in places[i:j]:
                at = fmt.offset(block) - base
                out.append(self._parse(data, at, block, stored))
            i = j
        return out

    def _parse(self, data: bytes, at: int, block: int, stored: int
               ) -> tuple[int, int, bool, float, bytes, bytes, bytes]:
        """The record at ``data[at:]`` (the one at ``block``, ``stored`` long): its
        magic, length and CRC checked (StoreError naming the offset if one is wrong)."""
        fmt = self.fmt
        size = fmt.fixed + stored
        fields = (fmt.head.unpack_from(data, at) if len(data) - at >= fmt.head.size
                  else None)
        if (fields is None or fields[0] != fmt.magic or fields[5] != stored
                or len(data) - at < size
                or crc32c(data[at + fmt.del_at + _DEL.size:at + size],
                          crc32c(data[at + 8:at + fmt.del_at])) != fields[1]):
            raise StoreError(
                f"queue file {self.volume.describe()}/{self.path} is corrupt at offset "
                f"{fmt.offset(block)} (restore it with rcrmqobj)")
        msgid, correlid, body_at = fmt.split(data, at, fields)
        return (fields[2], fields[6], bool(fields[7] & FLAG_PERSISTENT), fields[9], msgid,
                correlid, data[body_at:at + size])

    def allocate(self, n: int) -> int:
        """First run of ``n`` free blocks (extends the map past the end if needed)."""
        pat = b"\x00" * n
        # first fit from the hint; the hint only moves forward within a checkpoint, so
        # filling a large file is linear, not quadratic
        # (the first free byte by memchr first: a full map of millions of blocks, the
        # common case of a deep queue, costs a fraction of a pattern search)
        j = self.space.find(0, self._hint)
        i = self.space.find(pat, j) if j >= 0 else -1
        if i < 0:
            # grow: reuse a free tail if there is one
            tail = len(self.space)
            while tail > 0 and self.space[tail - 1] == 0:
                tail -= 1
            i = tail
            need = i + n - len(self.space)
            if need > 0:
                self.space.extend(bytes(need))
        self.space[i:i + n] = b"\x01" * n
        self._hint = i + n
        return i

    def mark_deleted(self, block: int, key: int, cp: int) -> None:
        """Write the delete mark of the record at ``block`` (checkpoint ``cp``)."""
        assert self.f is not None
        self.f.pwrite(delete_mark(key, cp, self.qid), self.fmt.offset(block) + self.fmt.del_at)

    def free_later(self, block: int, n: int) -> None:
        """Mark blocks freed by this checkpoint (reusable only after it completes)."""
        self.space[block:block + n] = b"\x02" * n

    def release_freed(self) -> None:
        """The checkpoint completed: blocks it freed may be reused."""
        if 2 in self.space:  # memchr: most checkpoints free nothing in most files
            # one pass over the map; a replace seeks each freed block in turn, several
            # times slower once a consumer has freed many (a third of the blocks: 4x)
            self.space = self.space.translate(FREED_AS_FREE)
        self._hint = 0

    def shrink_if_oversized(self) -> bool:
        """Truncate free tail blocks when they exceed both 1% of the file and 16 KiB."""
        used = len(self.space)
        while used > 0 and self.space[used - 1] == 0:
            used -= 1
        size = self.size()  # a file not opened yet stays so unless it must shrink
        want = self.fmt.offset(used)
        if size - want > 16384 and size - want > size // 100:
            f = self.f
            assert f is not None
            f.truncate(want)
            del self.space[used:]
            return True
        return False

    def close(self) -> None:
        """Close the file (one never opened stays unopened)."""
        f, self._f = self._f, None
        self._open_later = False
        if f is not None:
            try:
                f.close()
            except LockFsError:
                pass


class PriorityIndex:
    """Messages of one queue ordered by priority (high first) then key (FIFO), in arrays.

    Per message: key (8 bytes), block (8, -1 while the body is only in memory, -2 for a
    removed slot) and body length (4). Removed slots are tombstones compacted lazily.
    """

    __slots__ = ("blocks", "dead", "head", "keys", "lens")

    def __init__(self) -> None:
        self.keys = [array("q") for _ in range(10)]
        self.blocks = [array("q") for _ in range(10)]
        self.lens = [array("i") for _ in range(10)]
        self.head = [0] * 10
        self.dead = [0] * 10

    def add(self, key: int, prio: int, block: int, length: int) -> None:
        """Insert (normally appended: keys grow)."""
        ks = self.keys[prio]
        if not ks or ks[-1] < key:
            ks.append(key)
            self.blocks[prio].append(block)
            self.lens[prio].append(length)
            return
        i = bisect_left(ks, key)
        if i < len(ks) and ks[i] == key:
            return
        ks.insert(i, key)
        self.blocks[prio].insert(i, block)
        self.lens[prio].insert(i, length)
        if i < self.head[prio]:
            self.head[prio] = i

    def find(self, key: int, prio: int | None = None) -> tuple[int, int] | None:
        """(priority, index) of a present key."""
        for p in range(9, -1, -1) if prio is None else (prio,):
            ks = self.keys[p]
            if not ks:  # most queues use one or two priorities
                continue
            i = bisect_left(ks, key, self.head[p])
            if i < len(ks) and ks[i] == key and self.blocks[p][i] != -2:
                return p, i
        return None

    def remove(self, prio: int, i: int) -> None:
        """Tombstone slot ``i``; compact when tombstones dominate."""
        self.blocks[prio][i] = -2
        self.dead[prio] += 1
        h = self.head[prio]
        bl = self.blocks[prio]
        while h < len(bl) and bl[h] == -2:
            h += 1
        self.head[prio] = h
        live = len(bl) - self.dead[prio]
        if self.dead[prio] > 4096 and self.dead[prio] > live:
            self._compact(prio)

    def _compact(self, p: int) -> None:
        ks, bl, ls = self.keys[p], self.blocks[p], self.lens[p]
        keep = [i for i in range(self.head[p], len(bl)) if bl[i] != -2]
        self.keys[p] = array("q", (ks[i] for i in keep))
        self.blocks[p] = array("q", (bl[i] for i in keep))
        self.lens[p] = array("i", (ls[i] for i in keep))
        self.head[p] = 0
        self.dead[p] = 0

    def iter_order(self) -> Iterator[tuple[int, int]]:
        """(priority, index) of every present slot in delivery order."""
        for p in range(9, -1, -1):
            bl = self.blocks[p]
            for i in range(self.head[p], len(bl)):
                if bl[i] != -2:
                    yield p, i

    def count(self) -> int:
        """Present slots."""
        return sum(len(self.keys[p]) - self.dead[p] for p in range(10))


@dataclass(slots=True)
class QueueStats:
    """What DISPLAY QSTATUS and RESET QSTATS report of a queue, kept in memory only (as
    MQ keeps them: a restart or failover starts them again). Times are wall-clock
    seconds; ``qtime_short``/``qtime_long`` are moving averages of the time messages got
    from the queue spent on it, in microseconds (None before the first get)."""

    msgs_in: int = 0
    msgs_out: int = 0
    high_depth: int = 0
    last_put: float = 0.0
    last_get: float = 0.0
    qtime_short: float | None = None
    qtime_long: float | None = None
    reset_at: float = 0.0

    def got(self, now: float, put_time: float) -> None:
        """Count a destructive get of a message put at ``put_time``."""
        self.msgs_out += 1
        self.last_get = now
        us = max(0.0, now - put_time) * 1e6
        if self.qtime_short is None or self.qtime_long is None:
            self.qtime_short = self.qtime_long = us
        else:
            self.qtime_short += (us - self.qtime_short) / 4
            self.qtime_long += (us - self.qtime_long) / 64


@dataclass(slots=True)
class MemMessage:
    """A message whose body is in memory: non-persistent, or not yet checkpointed."""

    priority: int
    persistent: bool
    put_time: float
    msgid: bytes
    correlid: bytes
    body: bytes


class LocalQueue:
    """One local queue: definition, index, in-memory bodies and per-message UOW state."""

    def __init__(self, name: str, qid: int, attrs: dict[str, Any]) -> None:
        self.name = name
        self.qid = qid
        # replaced on ALTER, never changed in place (the queue catalog shares it): a
        # complete set (from the catalog) is kept as it is, so the checkpoint that
        # compares the catalog with the last one compares identities
        self.attrs: dict[str, Any] = (attrs if attrs.keys() >= DEFAULT_ATTRS.keys()
                                      else {**DEFAULT_ATTRS, **attrs})
        # self.index (PriorityIndex) is made on first use (__getattr__): a takeover of
        # thousands of queues defines them all, most never see a message
        self.mem: dict[int, MemMessage] = {}  # key -> body in memory
        self.locked: dict[int, int] = {}  # key -> txid of an uncommitted get
        self.uncommitted: dict[int, int] = {}  # key -> txid of an uncommitted put
        self.msgids: dict[bytes, int] = {}  # caller-chosen msgid -> key
        self.correlids: dict[bytes, list[int]] = {}
        self.present = 0
        #: records live in the queue file as of the last checkpoint that wrote it (None:
        #: not known, e.g. no file yet); what that checkpoint writes into the file's header
        self.file_records: int | None = None
        self.to_delete: list[tuple[int, int, int]] = []  # (block, nblocks, key) in the file
        self.file: QueueFile | None = None
        self.file_qid = 0  # qid of the file on disk (0: no file yet)
        self.header_dirty = True
        # a queue that holds nothing has no file (its definition is in the queue catalog)
        # unless this is set: a media image needs one, and a queue rebuilt by rcrmqobj or
        # defined again over an old incarnation's file replaces that file
        self.need_file = False
        self.media_lsn: int | None = None
        # the bodies a running checkpoint is writing to the file, until they are there
        self.in_flight: dict[int, MemMessage] | None = None
        #: DISPLAY QSTATUS / RESET QSTATS figures (memory only)
        self.stats = QueueStats()
        # the checkpoint whose index file (queues/<Q>/idx) describes the queue file; 0:
        # none (a small queue, or the file changed without a new index)
        self.idx_cp = 0
        self.idx_stale = False  # loaded by a scan: the next checkpoint considers an index
        # changes to the queue file since checkpoint idx_cp (qindex.DeltaLog; None without
        # an index) and the checkpoint of the delta file describing them (0: none)
        self.dx: DeltaLog | None = None
        self.dx_cp = 0
        # changes since delta file dx_cp, when a second delta file (idx.d2) of checkpoint
        # d2_cp records them (0: none; dx2 is kept whenever dx is)
        self.dx2: DeltaLog | None = None
        self.d2_cp = 0
        self.idx_fold = False  # the delta outgrew its limit: the next checkpoint (not an
        # open's) writes the index again

    def __getattr__(self, name: str) -> Any:
        """Only for attributes not yet set: ``index`` is created on first use (later
        accesses find it set and never come here)."""
        if name == "index":
            ix = self.index = PriorityIndex()
            return ix
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def depth(self) -> int:
        """CURDEPTH: present messages, counting uncommitted puts, not uncommitted gets."""
        return self.present - len(self.locked)

    def add(self, key: int, prio: int, block: int, length: int, msgid: bytes,
            correlid: bytes, generated: Callable[[bytes], int | None]) -> None:
        """Index a message (its body is in ``mem`` or at ``block`` in the file)."""
        ix = self.index
        ks = ix.keys[prio]
        if ks and ks[-1] >= key:
            ix.add(key, prio, block, length)
        else:  # the common case, keys rising: appended here (a put's hot path)
            ks.append(key)
            ix.blocks[prio].append(block)
            ix.lens[prio].append(length)
        self.present += 1
        if generated(msgid) != key:
            self.msgids[msgid] = key
        if correlid.strip(b"\0"):
            self.correlids.setdefault(correlid, []).append(key)

    def add_put(self, key: int, prio: int, length: int, msgid: bytes | None,
                correlid: bytes | None) -> None:
        """:meth:`add` for a new put's message, body in ``mem`` (a put's hot path): its key
        is above every key present; ``msgid`` only when the caller chose it, ``correlid``
        only when the caller gave one."""
        ix = self.index
        ks = ix.keys[prio]
        if ks and ks[-1] >= key:
            ix.add(key, prio, -1, length)
        else:
            ks.append(key)
            ix.blocks[prio].append(-1)
            ix.lens[prio].append(length)
        self.present += 1
        if msgid is not None:
            self.msgids[msgid] = key
        if correlid is not None and correlid.strip(b"\0"):
            self.correlids.setdefault(correlid, []).append(key)

    def add_scanned(self, records: Iterable[FileRecord],
                    generated: Callable[[bytes], int | None]) -> None:
        """:meth:`add` for every record of a queue file scan (a deep queue's load time is
        a failover's time: the common case, keys rising within a priority, is inlined)."""
        ix = self.index
        keys, blocks, lens = ix.keys, ix.blocks, ix.lens
        msgids, correlids = self.msgids, self.correlids
        count = 0
        for r in records:
            key, prio, msgid, correlid = r.key, r.priority, r.msgid, r.correlid
            ks = keys[prio]
            if not ks or ks[-1] < key:
                ks.append(key)
                blocks[prio].append(r.block)
                lens[prio].append(r.stored)
            else:
                ix.add(key, prio, r.block, r.stored)
            count += 1
            if generated(msgid) != key:
                msgids[msgid] = key
            if correlid != _NO_CORRELID and correlid.strip(b"\0"):
                correlids.setdefault(correlid, []).append(key)
        self.present += count

    def remove(self, key: int) -> None:
        """Drop a message for good (a committed get, or an undone put).

        The msgid/correlid maps are cleaned lazily (lookups check presence) so removal
        needs no read of the record."""
        hit = self.index.find(key)
        if hit is None:
            return
        p, i = hit
        block = self.index.blocks[p][i]
        if block >= 0:
            assert self.file is not None  # a record in the file: the file is open
            self.to_delete.append((block, self.file.fmt.blocks_for(self.index.lens[p][i]),
                                   key))
        self.index.remove(p, i)
        self.present -= 1
        self.mem.pop(key, None)
        self.locked.pop(key, None)
        self.uncommitted.pop(key, None)

    def purge_stale_selectors(self) -> None:
        """Drop msgid/correlid entries whose message is gone (run at checkpoints)."""
        for m, k in list(self.msgids.items()):
            if self.index.find(k) is None:
                del self.msgids[m]
        for c, ks in list(self.correlids.items()):
            live = [k for k in ks if self.index.find(k) is not None]
            if live:
                self.correlids[c] = live
            else:
                del self.correlids[c]

    def available(self, key: int) -> bool:
        """Visible to a getter: not an uncommitted put, not locked by a get."""
        return key not in self.locked and key not in self.uncommitted


class BodyWriter:
    """A checkpoint's writing of the persistent bodies held in memory, in two steps.

    :meth:`plan` (under the store lock) chooses each body's blocks and records them in
    the queue's index; :meth:`encode_next` (with the lock released: a get meanwhile finds
    the bodies in ``LocalQueue.in_flight``) then encodes the records, run by run of
    contiguous blocks of at most ``run_max`` bytes, for the caller to write.
    """

    def __init__(self, q: LocalQueue, qf: QueueFile, mem: dict[int, MemMessage], seq: int,
                 run_max: int) -> None:
        self.q, self.qf, self.mem, self.seq, self.run_max = q, qf, mem, seq, run_max
        # (block, key, message, stored length: the index's length of the record)
        self.planned: list[tuple[int, int, MemMessage, int]] = []
        self.next = 0

    def plan(self) -> dict[int, MemMessage]:
        """Choose the blocks of every persistent body that is still queued; returns the
        messages that stay in memory (non-persistent ones, and any no longer indexed)."""
        kept: dict[int, MemMessage] = {}
        ix = self.q.index
        find, blocks, lens, allocate = ix.find, ix.blocks, ix.lens, self.qf.allocate
        fmt = self.qf.fmt
        planned = self.planned
        for k, m in self.mem.items():
            hit = find(k, m.priority) if m.persistent else None
            if hit is None:
                kept[k] = m
                continue
            stored = fmt.stored_len(len(m.body), m.correlid)
            b = allocate(fmt.blocks_for(stored))
            blocks[hit[0]][hit[1]] = b
            lens[hit[0]][hit[1]] = stored
            planned.append((b, k, m, stored))
        return kept

    def encode_next(self) -> tuple[int, bytes] | None:
        """(first block, records) of the next run of contiguous blocks, or None."""
        planned, i = self.planned, self.next
        if i >= len(planned):
            return None
        start = planned[i][0]
        run = bytearray()
        seq, qid = self.seq, self.q.qid
        fmt = self.qf.fmt
        blk, encode = fmt.block, fmt.encode
        while i < len(planned):
            b, k, m, _stored = planned[i]
            if run and (b != start + len(run) // blk or len(run) >= self.run_max):
                break
            run += encode(k, seq, qid, m.priority, True, m.put_time, m.msgid, m.correlid,
                          m.body)
            i += 1
        self.next = i
        return start, bytes(run)


class QueueTable:
    """The local queues by name. A queue the queue catalog defines (it held nothing at
    the last checkpoint) stays a dormant ``(qid, attrs)`` entry until something looks it
    up: a takeover of a queue manager with thousands of queues makes objects for the few
    it touches, and the checkpoint ending it visits only those (issue 22).

    A dormant queue is exactly a :class:`LocalQueue` made from its catalog entry that no
    operation has touched: no file, no message, nothing for a checkpoint to write.
    Lookups (``get``, ``[]``, ``values()``, ``items()``) wake queues and so belong under
    the store lock, as every change does; ``live()``, ``dormant()``, ``qids()``,
    ``names()``, ``in`` and ``len`` never wake one, and read from any thread (a name is
    put among the live ones before it leaves the dormant ones).

    A live queue may also have *deferred* records: committed puts a restart read from the
    log and has not applied yet (:meth:`defer`), so that a takeover serves before it
    redoes a burst of puts to queues nobody has asked for yet. A lookup by name (``get``,
    ``[]``, ``pop``, a queue replacing it) applies that queue's records first;
    ``values()``, ``items()`` and :meth:`apply_deferred` apply them all, and a checkpoint
    calls the last before it looks at any queue. ``live()`` hands the queues out as they
    are: only for what does not read their messages (closing files; the metrics' depth,
    which adds :meth:`deferred_counts`)."""

    __slots__ = ("_deferred", "_dormant", "_live", "_qids", "_redo")

    def __init__(self) -> None:
        self._live: dict[str, LocalQueue] = {}
        self._dormant: dict[str, tuple[int, dict[str, Any]]] = {}
        self._qids: dict[str, int] | None = None  # qids() until a queue comes or goes
        # name -> committed puts to redo on that live queue (as the replay unpacked
        # their log records), in log order, and what redoes them (given by that replay)
        self._deferred: dict[str, list[Any]] = {}
        self._redo: Callable[[LocalQueue, list[Any]], None] | None = None

    def set_dormant(self, entries: dict[str, tuple[int, dict[str, Any]]]) -> None:
        """Add catalog entries, name -> (qid, complete attributes never changed in place)."""
        self._dormant.update(entries)
        self._qids = None

    def define_dormant(self, name: str, qid: int, attrs: dict[str, Any]) -> None:
        """Define queue ``name`` (replacing any of that name) as a dormant entry: for a
        queue that holds nothing yet and has no file, the same as a new LocalQueue."""
        if not attrs.keys() >= DEFAULT_ATTRS.keys():
            attrs = {**DEFAULT_ATTRS, **attrs}
        if self._deferred:
            self._apply(name)  # to the queue it replaces, as without deferring
        self._live.pop(name, None)
        self._dormant[name] = (qid, attrs)
        self._qids = None

    def get(self, name: str, default: LocalQueue | None = None) -> LocalQueue | None:
        """The queue called ``name`` (woken if dormant, its deferred records applied),
        else ``default``."""
        q = self._live.get(name)
        if q is None:
            entry = self._dormant.get(name)
            if entry is None:
                return default
            q = self._wake(name, entry)
        elif self._deferred and name in self._deferred:
            self._apply(name)
        return q

    # -- deferred records ------------------------------------------------------------
    def defer(self, q: LocalQueue, record: Any,
              redo: Callable[[LocalQueue, list[Any]], None]) -> None:
        """Keep ``record`` (a committed put to the live queue ``q``) for ``redo(q,
        records)`` to apply when ``q`` is next looked up by name, or at
        :meth:`apply_deferred`. A queue's records are applied in the order deferred, and
        whoever applies any other record to ``q`` looks it up first, so after them."""
        self._redo = redo
        pending = self._deferred.get(q.name)
        if pending is None:
            self._deferred[q.name] = [record]
        else:
            pending.append(record)

    def _apply(self, name: str) -> None:
        records = self._deferred.pop(name, None)
        redo = self._redo
        if not self._deferred:
            self._redo = None
        if records and redo is not None:
            collecting = gc.isenabled()
            gc.disable()  # as in the replay: many new objects, none to collect
            try:
                redo(self._live[name], records)
            finally:
                if collecting:
                    gc.enable()

    def apply_deferred(self) -> None:
        """Apply every deferred record (before anything reads all the queues, such as
        a checkpoint)."""
        for name in list(self._deferred):
            self._apply(name)

    def deferred_counts(self) -> dict[str, int]:
        """name -> how many deferred records that queue has (from any thread)."""
        return {n: len(r) for n, r in list(self._deferred.items())}

    def _wake(self, name: str, entry: tuple[int, dict[str, Any]]) -> LocalQueue:
        qid, attrs = entry
        q = LocalQueue(name, qid, attrs)
        q.header_dirty, q.file_qid = False, qid  # the catalog holds its definition
        self._live[name] = q
        del self._dormant[name]
        return q

    def __getitem__(self, name: str) -> LocalQueue:
        q = self.get(name)
        if q is None:
            raise KeyError(name)
        return q

    def __setitem__(self, name: str, q: LocalQueue) -> None:
        if self._deferred and name in self._deferred and self._live.get(name) is not q:
            self._apply(name)  # to the queue it replaces, as without deferring
        self._live[name] = q
        self._dormant.pop(name, None)
        self._qids = None

    def __delitem__(self, name: str) -> None:
        if self.pop(name, None) is None:
            raise KeyError(name)

    def pop(self, name: str, default: LocalQueue | None = None) -> LocalQueue | None:
        """Remove the queue called ``name``; it (woken if it was dormant) or ``default``."""
        q = self.get(name)
        if q is None:
            return default
        del self._live[name]
        self._qids = None
        return q

    def __contains__(self, name: object) -> bool:
        # dormant first: a queue being woken is live before it stops being dormant
        return name in self._dormant or name in self._live

    def __len__(self) -> int:
        return len(self._live) + len(self._dormant)

    def names(self) -> list[str]:
        """Every queue's name (none woken)."""
        return [*self._live, *self._dormant]

    __iter__ = None  # type: ignore[assignment]  # say names() or values(): which wakes

    def values(self) -> Iterable[LocalQueue]:
        """Every queue, all woken (an administrator's listing: not for a takeover's path)."""
        self._wake_all()
        return self._live.values()

    def items(self) -> Iterable[tuple[str, LocalQueue]]:
        """(name, queue) of every queue, all woken."""
        self._wake_all()
        return self._live.items()

    def _wake_all(self) -> None:
        for name, entry in list(self._dormant.items()):
            self._wake(name, entry)
        if self._deferred:
            self.apply_deferred()

    def live(self) -> Iterable[LocalQueue]:
        """The queues that are objects (woken or never dormant): the only ones a
        checkpoint can have anything to write for."""
        return self._live.values()

    def dormant(self) -> dict[str, tuple[int, dict[str, Any]]]:
        """The dormant entries, name -> (qid, attributes); read only."""
        return self._dormant

    def names_with(self, attr: str, value: Any) -> list[str]:
        """Names of the queues whose attribute ``attr`` is ``value`` (none woken). The
        dormant queues share a few attribute dicts (the catalog's sets): each distinct
        one is looked at once, and a takeover that looks for temporary dynamic queues
        among 5,000 finds none without a Python step per queue."""
        out = [n for n, q in self._live.items() if q.attrs.get(attr) == value]
        dormant = self._dormant
        sets = {id(a): a for a in map(itemgetter(1), dormant.values())}
        hits = {i for i, a in sets.items() if a.get(attr) == value}
        if hits:
            out += [n for n, e in dormant.items() if id(e[1]) in hits]
        return out

    def adopt_qids(self, qids: dict[str, int]) -> None:
        """Take ``qids`` (the checkpoint file's table, the one these queues were loaded
        from: equal by construction) as :meth:`qids`: the checkpoint ending the open
        then neither builds the table nor encodes it again."""
        self._qids = qids

    def qids(self) -> dict[str, int]:
        """name -> qid of every queue (none woken). The same dict until a queue is
        defined or deleted (a queue's qid never changes): read only, so that each
        checkpoint need not build it, nor encode it again (checkpoint.encode)."""
        out = self._qids
        if out is None:
            out = {n: e[0] for n, e in self._dormant.items()}
            out.update((n, q.qid) for n, q in self._live.items())
            self._qids = out
        return out
