"""The shared filesystem as the queue manager sees it: files and byte-range locks.

A :class:`Volume` is rooted at one directory (a queue manager's data or log directory,
or a directory under test). Every path passed to it is relative to that root and uses
``/`` separators. Backends: :mod:`lockfs.posix` (a mounted path: kernel NFSv4 in
production, local disk in tests) and :mod:`lockfs.nfs4` (userspace NFSv4 over libnfs);
:func:`lockfs.open_volume` (:mod:`lockfs.open`) picks one for a location.

Duties every backend keeps (the store and the HA layer rely on them):

* ``VolumeFile.pwrite`` writes all bytes or raises :class:`VolumeIOError`; after a
  failure the written range is unknown (possibly torn).
* ``VolumeFile.fdatasync`` returns only when every byte written before it through this
  file is on stable storage; a failure raises and nothing may be assumed durable.
* ``Volume.rename`` atomically replaces the target (readers see old or new, never a mix).
* ``VolumeFile.try_lock`` never blocks waiting for another holder: it returns ``False`` at
  once when a conflicting lock is held elsewhere (blocking NFS lock waits can miss a
  release - IBM APAR IT43349). Locks belong to the open file, not the process: closing
  one VolumeFile never drops a lock held through another.
* A lost lock (lease expiry on NFSv4) shows as ``lock_lost() == True`` and makes later
  I/O through that file raise :class:`LockLostError`.
* ``VolumeFile.reachability()`` says what the holder may do now (:class:`Reachability`):
  ``OK`` read and write; ``SUSPECT`` start no new writes until a renewal or a verify
  succeeds; ``LOST`` stop.
* A call that cannot complete in time raises :class:`VolumeStalled` instead of blocking
  for ever; its effect is unknown (a write may or may not have landed).
"""

from __future__ import annotations

import enum
import errno
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType

from lockfs.errors import LockFsError, LockLostError, VolumeIOError, VolumeNotFound

#: ``length`` value meaning "to the end of the file, however long it grows".
WHOLE_FILE = 0


class LockMode(enum.Enum):
    """A byte-range lock mode."""

    SHARED = "shared"
    EXCLUSIVE = "exclusive"


class Reachability(enum.Enum):
    """How far an instance can trust the shared filesystem right now.

    * ``OK``: the last operation completed within its deadline; locks held are ours.
    * ``SUSPECT``: an operation is overdue or failed transiently; locks may already be
      lost. An instance may not start new writes and must re-verify before resuming.
    * ``LOST``: a lock is known lost or the filesystem failed hard: stop at once.
    """

    OK = "ok"
    SUSPECT = "suspect"
    LOST = "lost"


@dataclass(frozen=True)
class FileStat:
    """Size and modification time (seconds since the epoch) of a file, and its id on
    its filesystem (an inode number, an NFS fileid) where the backend knows it."""

    size: int
    mtime: float
    is_dir: bool = False
    file_id: int | None = None


@dataclass(frozen=True)
class FileHead:
    """The first bytes of a file (all of it if shorter) and its size when they were read."""

    size: int
    data: bytes


class VolumeFile(ABC):
    """One open file on a volume. Not safe for concurrent use by threads without a lock,
    except ``pread``/``pwrite`` at disjoint offsets, which backends allow."""

    path: str

    @abstractmethod
    def pread(self, size: int, offset: int) -> bytes:
        """Read up to ``size`` bytes at ``offset``; shorter only at end of file."""

    @abstractmethod
    def pwrite(self, data: bytes | bytearray | memoryview, offset: int) -> None:
        """Write all of ``data`` at ``offset`` (not durable until :meth:`fdatasync`)."""

    @abstractmethod
    def fdatasync(self) -> None:
        """Make every write through this file durable before returning."""

    @abstractmethod
    def size(self) -> int:
        """Current size in bytes."""

    @abstractmethod
    def truncate(self, size: int) -> None:
        """Set the file's size (shrink, or extend with a hole)."""

    def allocate_zeroed(self, size: int, chunk: int = 1 << 20) -> None:
        """Extend the file to ``size`` bytes of written zeros and make that durable.

        Pre-formatted (zero-filled) files make later write+fdatasync measurably faster
        than growing or merely fallocated files (facts.md), so log extents use this.
        """
        current = self.size()
        zeros = bytes(chunk)
        while current < size:
            n = min(chunk, size - current)
            self.pwrite(zeros[:n], current)
            current += n
        self.fdatasync()

    def write_back(self, offset: int, length: int) -> None:
        """Start writing this range's written data to the device and wait for it.

        Not a durability guarantee (:meth:`fdatasync` still is): it lets a large batch of
        writes reach the disk in steps, so that small forces elsewhere on the same disk
        queue behind one step rather than behind the whole batch. Backends that cannot
        do this do nothing.
        """

    def file_id(self) -> int | None:
        """This open file's id on its filesystem (what :attr:`FileStat.file_id` of the
        path names while the path still names this file), or None where the backend
        cannot tell. Two files alive at once never share an id, so a path whose id
        differs names another file, whatever its bytes."""
        return None

    def direct_fd(self) -> int | None:
        """A kernel descriptor native code may ``pwrite``/``fdatasync`` directly, or None
        when every write must pass through this object (remote clients in user space,
        fault injection, recording)."""
        return None

    def direct_sync_fd(self) -> int | None:
        """A descriptor of this file whose writes return only once durable (O_DSYNC),
        for native code writing a force in one write; None when there is none."""
        return None

    def direct_error(self, exc: OSError, what: str) -> LockFsError:
        """The volume's error for ``exc`` raised by native I/O on :meth:`direct_fd`."""
        return VolumeIOError(f"{what} {self.path}: {exc.strerror or exc}", errno=exc.errno,
                             path=self.path)

    @abstractmethod
    def try_lock(self, mode: LockMode, start: int = 0, length: int = WHOLE_FILE) -> bool:
        """Take a lock without waiting: ``True`` if granted, ``False`` if held elsewhere.

        Re-locking a range this file already holds converts its mode (as fcntl does).
        """

    @abstractmethod
    def unlock(self, start: int = 0, length: int = WHOLE_FILE) -> None:
        """Release a range locked through this file."""

    def lock_lost(self) -> bool:
        """True once the backend knows a lock held through this file was lost."""
        return False

    def renew_after(self, since: float) -> None:
        """Make sure the server has answered a renewal of this file's lock lease that was
        sent after ``since`` (a ``time.monotonic()`` instant); send one now if need be.

        The nfs4 backend calls it on a volume's ``lease_anchor`` before each write through
        an unlocked file (docs/lockfs.md, "One lease for all writes"). Raises
        :class:`LockLostError` when no lock is held any more or the server says its state
        is gone. Backends without leases only check :meth:`lock_lost`."""
        if self.lock_lost():
            raise LockLostError("the lease anchor's lock was lost")

    def lease_age(self) -> float | None:
        """Seconds since the server last confirmed the lease the locks held through this
        file depend on; None where locks never expire (local disk). An instance stops
        well before this reaches the lease, since the server frees the locks then."""
        return None

    def reachability(self) -> Reachability:
        """How far the locks held through this file (and its I/O) can be trusted now.

        ``LOST`` once :meth:`lock_lost` is true; backends with leases report ``SUSPECT``
        while renewals fail or are overdue but the lease may still hold. Backends without
        leases report ``OK`` until a lock is lost.
        """
        return Reachability.LOST if self.lock_lost() else Reachability.OK

    @abstractmethod
    def close(self) -> None:
        """Close the file; releases the locks held through this file (and only those)."""

    def __enter__(self) -> VolumeFile:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Volume(ABC):
    """A directory tree on a (possibly shared) filesystem; see the module docstring."""

    #: The location as the user gave it (a path or ``nfs4://`` URL).
    url: str
    #: The filesystem's lock lease in seconds; ``None`` where locks never expire (local disk).
    lease_seconds: float | None = None
    #: Called before a write is sent on state the backend had to establish again (an NFSv4
    #: client whose lease ran out while the file sat idle, or while this process was
    #: stopped); raising refuses the write. The user of the volume sets it to whatever
    #: proves the data is still its own to write: a write on renewed state would otherwise
    #: land even if another process took the data over meanwhile.
    write_fence: Callable[[], None] | None = None
    #: A locked file (the instance's ``master``) whose lease every write through this
    #: volume's unlocked files must be shown to outlive: before such a write the nfs4
    #: backend has the anchor renewed (:meth:`VolumeFile.renew_after`) after the file's
    #: previous call was answered, so the server expires the file's state no later than
    #: the anchor's lock and a write sent after the lock passed to another holder is
    #: refused by the server. ``None``: no anchor (posix ignores it: the kernel client
    #: already holds all state under one lease).
    lease_anchor: VolumeFile | None = None
    #: Whether several threads may sync and rename *different* files of this volume at
    #: once (a checkpoint after thousands of new queues then waits for the filesystem's
    #: journal a few times, not once per file). Off unless the backend says so.
    concurrent_syncs: bool = False
    #: Whether several threads should open *different* files of this volume at once: an
    #: open over NFS is a connection and a client of its own, about a millisecond, so a
    #: takeover with many queues holding messages opens their files side by side (a
    #: local open takes microseconds: not worth a thread).
    concurrent_opens: bool = False
    #: Test-only pause point (:mod:`lockfs.faults`, kind ``stop``): called by the backend
    #: as ``before_send(op, path, offset, data)`` just before a write goes on the wire,
    #: after every check the backend makes.
    before_send: Callable[[str, str, int, bytes], None] | None = None

    @abstractmethod
    def open(self, path: str, *, create: bool = False, exclusive: bool = False) -> VolumeFile:
        """Open ``path`` for reading and writing.

        ``create`` makes it if missing; ``exclusive`` with ``create`` fails if it exists.
        Raises :class:`VolumeNotFound` if missing and not ``create``.
        """

    def open_readonly(self, path: str) -> VolumeFile:
        """Open ``path`` for reading only where the backend can, for readers outside the
        instance that write nothing (dspmq's look at a lock file, a client reading the
        listener record): they then also work on a read-only mount. Raises
        :class:`VolumeNotFound` if missing. By default (a backend that opens files one
        way only, such as ``nfs4://``, whose client is the instance's own) it is
        :meth:`open`."""
        return self.open(path)

    @abstractmethod
    def stat(self, path: str) -> FileStat:
        """Size and mtime; raises :class:`VolumeNotFound`."""

    @abstractmethod
    def listdir(self, path: str = "") -> list[str]:
        """Names in a directory, sorted."""

    @abstractmethod
    def makedirs(self, path: str) -> None:
        """Create a directory and its parents; no error if it exists."""

    @abstractmethod
    def rename(self, src: str, dst: str) -> None:
        """Atomically rename, replacing ``dst`` if it exists."""

    @abstractmethod
    def unlink(self, path: str) -> None:
        """Remove a file; no error if it is already gone."""

    @abstractmethod
    def rmdir(self, path: str) -> None:
        """Remove an empty directory; no error if it is already gone."""

    def exists(self, path: str) -> bool:
        """True if ``path`` exists."""
        try:
            self.stat(path)
        except VolumeNotFound:
            return False
        return True

    def read_bytes(self, path: str) -> bytes:
        """The whole content of a (small) file."""
        with self.open(path) as f:
            return f.pread(f.size(), 0)

    def read_head(self, path: str, size: int) -> bytes:
        """The first ``size`` bytes of a file (all of it if it is shorter)."""
        with self.open(path) as f:
            return f.pread(size, 0)

    def read_heads(self, wanted: Sequence[tuple[str, int]]) -> list[FileHead | None]:
        """For each ``(path, size)``: the file's first ``size`` bytes and its size, or
        None if it does not exist; any other failure raises as :meth:`read_head` does.
        A backend whose every call is a round trip reads them all in one (nfs4)."""
        heads: list[FileHead | None] = []
        for path, size in wanted:
            try:
                st = self.stat(path)
                if st.is_dir:
                    raise VolumeIOError(f"{path} is a directory", errno=errno.EISDIR, path=path)
                heads.append(FileHead(st.size, self.read_head(path, size)))
            except VolumeNotFound:
                heads.append(None)
        return heads

    def write_atomic(self, path: str, data: bytes) -> None:
        """Replace ``path`` with ``data`` durably: write a temporary file, sync, rename."""
        tmp = f"{path}.tmp"
        with self.open(tmp, create=True) as f:
            f.truncate(0)
            f.pwrite(data, 0)
            f.fdatasync()
        self.rename(tmp, path)

    def remove_tree(self, path: str = "") -> None:
        """Remove a directory tree (used by dltmqm). Missing paths are ignored."""
        if not self.exists(path):
            return
        st = self.stat(path)
        if not st.is_dir:
            self.unlink(path)
            return
        for name in self.listdir(path):
            child = f"{path}/{name}" if path else name
            self.remove_tree(child)
        if path:
            self.rmdir(path)

    def available_bytes(self) -> int | None:
        """Bytes an unprivileged writer could still write to the filesystem (statvfs
        ``f_bavail * f_frsize``); ``None`` where the backend cannot tell."""
        return None

    def reachability(self) -> Reachability:
        """The filesystem as this volume's metadata calls last found it: ``SUSPECT`` after
        a call stalled or the connection broke, until a later call succeeds; else ``OK``.
        (Lock state is per file: :meth:`VolumeFile.reachability`.)"""
        return Reachability.OK

    def close(self) -> None:
        """Release backend resources (network contexts). Open files stay the caller's."""

    def describe(self) -> str:
        """A short human name for messages."""
        return self.url


def __getattr__(name: str) -> object:
    """``lockfs.volume.open_volume``, the old import path, for callers outside this
    package: the function lives in :mod:`lockfs.open`, above the backends (this module
    defines the interface they implement and imports none of them)."""
    if name == "open_volume":
        from lockfs.open import open_volume

        return open_volume
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
