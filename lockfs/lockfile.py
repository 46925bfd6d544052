"""Lock files (``master``, ``active``, ``standby``) and the holder record written in them.

A :class:`LockFile` holds one byte-range lock on one file of a volume and keeps that file
open for as long as it holds it: the verify thread rereads the holder record through the
same open file (never a second descriptor: closing any descriptor of a file drops a
process's classic POSIX locks, and on NFS a reopen is a new open state).

The holder record is a fixed 512-byte block at offset 0::

    magic "MQLK" | version:u16 | reserved:u16 | crc32c:u32 | length:u32 | JSON | zeros

JSON: ``host``, ``lock_id``, ``lock_time`` (seconds since the epoch), ``pid``,
``generation`` (the activation generation). A short, torn or foreign record reads as
``None``; it never raises.
"""

from __future__ import annotations

import json
import struct
from dataclasses import asdict, dataclass

import crc32c

from lockfs.errors import LockFsError, VolumeNotFound, VolumePermissionError
from lockfs.volume import LockMode, Reachability, Volume, VolumeFile

RECORD_SIZE = 512
RECORD_VERSION = 1
_MAGIC = b"MQLK"
_HEAD = struct.Struct("<4sHHII")


@dataclass(frozen=True)
class HolderRecord:
    """Who holds a lock file: written by the holder, read by verify and by dspmq."""

    host: str
    lock_id: int
    lock_time: float
    pid: int
    generation: int = 0

    def encode(self) -> bytes:
        """The 512-byte on-disk form."""
        body = json.dumps(asdict(self), sort_keys=True).encode()
        if _HEAD.size + len(body) > RECORD_SIZE:
            raise ValueError("holder record too long (host name?)")
        head = _HEAD.pack(_MAGIC, RECORD_VERSION, 0, crc32c.crc32c(body), len(body))
        return (head + body).ljust(RECORD_SIZE, b"\0")

    @classmethod
    def decode(cls, raw: bytes) -> HolderRecord | None:
        """The record in ``raw``, or None if it is missing, torn or not a record."""
        if len(raw) < _HEAD.size:
            return None
        magic, version, _, crc, length = _HEAD.unpack_from(raw)
        body = raw[_HEAD.size:_HEAD.size + length]
        if (magic != _MAGIC or version != RECORD_VERSION or len(body) != length
                or crc32c.crc32c(body) != crc):
            return None
        try:
            d = json.loads(body)
            return cls(str(d["host"]), int(d["lock_id"]), float(d["lock_time"]),
                       int(d["pid"]), int(d.get("generation", 0)))
        except (ValueError, KeyError, TypeError):
            return None

    def same_holder(self, other: HolderRecord | None) -> bool:
        """True if ``other`` names the same instance and activation."""
        return (other is not None and other.host == self.host and other.lock_id == self.lock_id
                and other.pid == self.pid and other.generation == self.generation)


class LockFile:
    """One lock on one lock file, held through a file kept open until :meth:`release`."""

    def __init__(self, volume: Volume, name: str) -> None:
        self.volume = volume
        self.name = name
        self.mode: LockMode | None = None
        self._file: VolumeFile | None = None
        self._spare: VolumeFile | None = None  # kept open between refused attempts
        #: the record found in the file when the lock was taken (the previous holder's)
        self.previous: HolderRecord | None = None

    @property
    def held(self) -> bool:
        """True while this object holds the lock."""
        return self._file is not None

    def acquire(self, mode: LockMode, record: HolderRecord | None = None, *,
                keep_open: bool = False) -> bool:
        """Try once, without waiting; on success optionally write ``record``.

        Returns False at once if another holder conflicts. With ``keep_open`` a refused
        attempt keeps the file open for the next one (a polling standby must not close
        the file every time: each close is an inotify event that would wake it again).
        Raises LockFsError when the file cannot be opened or written.
        """
        if self._file is not None:
            raise LockFsError(f"lock file {self.name} is already held by this object")
        f = self._spare
        self._spare = None
        if f is None:
            try:
                f = self.volume.open(self.name)
            except VolumeNotFound:
                f = self.volume.open(self.name, create=True)
        try:
            if not f.try_lock(mode):
                if keep_open:
                    self._spare = f
                else:
                    f.close()
                return False
            self.previous = HolderRecord.decode(f.pread(RECORD_SIZE, 0))
            self._file, self.mode = f, mode
            if record is not None:
                self.write_record(record)
            return True
        except BaseException:
            self._file = None
            f.close()
            raise

    def write_record(self, record: HolderRecord) -> None:
        """Replace the holder record through the locked file and make it durable."""
        f = self._require()
        f.pwrite(record.encode(), 0)
        f.fdatasync()

    def read_record(self) -> HolderRecord | None:
        """The holder record, read through the locked file itself (verify's read)."""
        return HolderRecord.decode(self._require().pread(RECORD_SIZE, 0))

    @property
    def file(self) -> VolumeFile | None:
        """The locked file while held (a volume's ``lease_anchor``), else None."""
        return self._file

    def lost(self) -> bool:
        """True once the backend knows the lock was lost (an NFSv4 lease expired)."""
        return self._file is not None and self._file.lock_lost()

    def lease_age(self) -> float | None:
        """Seconds since the lease behind this lock was last renewed (None: no lease)."""
        return None if self._file is None else self._file.lease_age()

    def reachability(self) -> Reachability:
        """The locked file's :class:`Reachability` (``OK`` when nothing is held)."""
        return Reachability.OK if self._file is None else self._file.reachability()

    def release(self) -> None:
        """Unlock and close. Safe to call when not held."""
        f, self._file, self.mode = self._file, None, None
        spare, self._spare = self._spare, None
        if spare is not None:
            spare.close()
        if f is None:
            return
        try:
            f.unlock()
        except LockFsError:
            pass  # closing releases it anyway
        finally:
            f.close()

    def _require(self) -> VolumeFile:
        if self._file is None:
            raise LockFsError(f"lock file {self.name} is not held")
        return self._file


def peek(volume: Volume, name: str) -> tuple[HolderRecord | None, bool | None]:
    """(record in the file, whether some process holds a lock on it) for dspmq.

    ``held`` is asked without taking a lock where the backend can (posix F_OFD_GETLK);
    otherwise it is None (unknown). Never use this on a file this process holds locked
    through a LockFile: it opens and closes its own descriptor.
    """
    try:
        f = volume.open(name)
    except VolumeNotFound:
        return None, False
    except VolumePermissionError:
        # a read-only mount (or a file this user may only read): a look needs no write
        f = volume.open_readonly(name)
    try:
        record = HolderRecord.decode(f.pread(RECORD_SIZE, 0))
        query = getattr(f, "conflicting_lock", None)
        held = bool(query(LockMode.EXCLUSIVE)) if query is not None else None
        return record, held
    finally:
        f.close()
