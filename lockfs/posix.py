"""The posix backend: a mounted directory (kernel NFSv4 in production, local disk in tests).

Locks are open-file-description locks (``F_OFD_SETLK``): they belong to the open file,
so closing another descriptor of the same file, or another thread's activity, never drops
them (classic fcntl locks are per process and vanish on any close - design point 5).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import stat
import struct
from collections.abc import Callable, Sequence

from lockfs.errors import (
    BadLocation,
    LockFsError,
    VolumeIOError,
    VolumeNotFound,
    VolumePermissionError,
)
from lockfs.volume import WHOLE_FILE, FileHead, FileStat, LockMode, Volume, VolumeFile

# struct flock on Linux x86_64/aarch64: short l_type, short l_whence, off_t l_start,
# off_t l_len, pid_t l_pid (+ tail padding). OFD locks require l_pid == 0.
_FLOCK = struct.Struct("@hhqqi4x")
_F_OFD_SETLK = getattr(fcntl, "F_OFD_SETLK", 37)
_F_OFD_GETLK = getattr(fcntl, "F_OFD_GETLK", 36)


def _libc_sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """glibc's sync_file_range (Linux), or None; ctypes drops the GIL around the call."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn  # type: ignore[no-any-return]


_sync_file_range = _libc_sync_file_range()
# SYNC_FILE_RANGE_WAIT_BEFORE | WRITE | WAIT_AFTER: the range is on the device on return
_SYNC_RANGE_WRITE_AND_WAIT = 1 | 2 | 4


def _wrap_oserror(exc: OSError, what: str, path: str) -> LockFsError:
    """One exception type per cause, with a message that says what failed where."""
    msg = f"{what} {path}: {exc.strerror or exc}"
    if exc.errno == errno.ENOENT:
        return VolumeNotFound(msg, errno=exc.errno, path=path)
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return VolumePermissionError(msg, errno=exc.errno, path=path)
    return VolumeIOError(msg, errno=exc.errno, path=path)


class PosixFile(VolumeFile):
    """A file opened O_RDWR on a mounted filesystem."""

    def __init__(self, fd: int, path: str) -> None:
        self._fd = fd
        self._sync_fd = -1  # opened on first use by direct_sync_fd
        self.path = path

    def fileno(self) -> int:
        """The OS descriptor (for tests and fault injection)."""
        return self._fd

    def file_id(self) -> int:
        """The inode number (an open file's inode is never reused while it is open)."""
        return os.fstat(self._fd).st_ino

    def direct_fd(self) -> int:
        """The descriptor itself: writes through it are exactly this file's writes."""
        return self._fd

    def direct_sync_fd(self) -> int | None:
        """A second descriptor of this file opened O_DSYNC (a write through it returns
        once it is durable, as a write and an fdatasync would), opened on first use
        through /proc/self/fd, so it is this file even after a rename; None where that
        cannot be done. Also O_DIRECT where the filesystem allows it, so writes through
        it must be page-aligned (the recovery log's C writer, its one user, writes whole
        aligned pages, and goes back to :meth:`direct_fd` if a write is refused). Locks
        stay on :meth:`direct_fd` (OFD locks belong to their own open file, so this
        descriptor neither holds nor drops them)."""
        if self._sync_fd < 0 and self._fd >= 0:
            path = f"/proc/self/fd/{self._fd}"
            flags = os.O_WRONLY | os.O_DSYNC | os.O_CLOEXEC
            try:
                # O_DIRECT: no page cache copy, a few percent per force on this disk
                self._sync_fd = os.open(path, flags | getattr(os, "O_DIRECT", 0))
            except OSError:
                try:
                    self._sync_fd = os.open(path, flags)
                except OSError:
                    return None
        return self._sync_fd if self._sync_fd >= 0 else None

    def direct_error(self, exc: OSError, what: str) -> LockFsError:
        """The same error a :meth:`pwrite` or :meth:`fdatasync` failing so would raise."""
        return _wrap_oserror(exc, what, self.path)

    def pread(self, size: int, offset: int) -> bytes:
        try:
            return os.pread(self._fd, size, offset)
        except OSError as exc:
            raise _wrap_oserror(exc, "read", self.path) from exc

    def pwrite(self, data: bytes | bytearray | memoryview, offset: int) -> None:
        view = memoryview(data)
        try:
            while view:
                n = os.pwrite(self._fd, view, offset)
                view = view[n:]
                offset += n
        except OSError as exc:
            raise _wrap_oserror(exc, "write", self.path) from exc

    def fdatasync(self) -> None:
        try:
            os.fdatasync(self._fd)
        except OSError as exc:
            raise _wrap_oserror(exc, "fdatasync", self.path) from exc

    def write_back(self, offset: int, length: int) -> None:
        """sync_file_range over the range, waiting for it (nothing where unavailable)."""
        if _sync_file_range is None or length <= 0:
            return
        if _sync_file_range(self._fd, offset, length, _SYNC_RANGE_WRITE_AND_WAIT) != 0:
            err = ctypes.get_errno()
            if err in (errno.ENOSYS, errno.EINVAL, errno.ESPIPE):
                return  # not supported here: fdatasync does it all
            raise _wrap_oserror(OSError(err, os.strerror(err)), "write-back", self.path)

    def size(self) -> int:
        try:
            return os.fstat(self._fd).st_size
        except OSError as exc:
            raise _wrap_oserror(exc, "stat", self.path) from exc

    def truncate(self, size: int) -> None:
        try:
            os.ftruncate(self._fd, size)
        except OSError as exc:
            raise _wrap_oserror(exc, "truncate", self.path) from exc

    def _fcntl_lock(self, ltype: int, start: int, length: int) -> bool:
        arg = _FLOCK.pack(ltype, os.SEEK_SET, start, length, 0)
        try:
            fcntl.fcntl(self._fd, _F_OFD_SETLK, arg)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                return False
            raise _wrap_oserror(exc, "lock", self.path) from exc
        return True

    def try_lock(self, mode: LockMode, start: int = 0, length: int = WHOLE_FILE) -> bool:
        ltype = fcntl.F_WRLCK if mode is LockMode.EXCLUSIVE else fcntl.F_RDLCK
        return self._fcntl_lock(ltype, start, length)

    def unlock(self, start: int = 0, length: int = WHOLE_FILE) -> None:
        self._fcntl_lock(fcntl.F_UNLCK, start, length)

    def conflicting_lock(self, mode: LockMode, start: int = 0, length: int = WHOLE_FILE) -> bool:
        """True if a lock held elsewhere would conflict with ``mode`` (F_OFD_GETLK)."""
        ltype = fcntl.F_WRLCK if mode is LockMode.EXCLUSIVE else fcntl.F_RDLCK
        arg = _FLOCK.pack(ltype, os.SEEK_SET, start, length, 0)
        try:
            res = fcntl.fcntl(self._fd, _F_OFD_GETLK, arg)
        except OSError as exc:
            raise _wrap_oserror(exc, "getlk", self.path) from exc
        return _FLOCK.unpack(res)[0] != fcntl.F_UNLCK

    def close(self) -> None:
        fds = (self._sync_fd, self._fd)
        self._sync_fd = self._fd = -1
        for fd in fds:
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass


class PosixVolume(Volume):
    """A volume rooted at a local (or kernel-mounted) directory."""

    #: the kernel serialises what must be: fsync and rename of different files in parallel
    concurrent_syncs = True
    # an open is microseconds here: threads would cost more than they overlap

    def __init__(self, root: str, *, lease_seconds: float | None = None) -> None:
        if not root:
            raise BadLocation("empty directory name")
        self.url = root
        self.root = os.path.abspath(root)
        self.lease_seconds = lease_seconds

    def _p(self, path: str) -> str:
        if path.startswith("/") or ".." in path.split("/"):
            raise BadLocation(f"path {path!r} escapes the volume {self.root}")
        return os.path.join(self.root, path) if path else self.root

    def available_bytes(self) -> int | None:
        try:
            st = os.statvfs(self.root)
        except OSError:
            return None
        return st.f_bavail * st.f_frsize

    def open(self, path: str, *, create: bool = False, exclusive: bool = False) -> VolumeFile:
        flags = os.O_RDWR | os.O_CLOEXEC
        if create:
            flags |= os.O_CREAT
            if exclusive:
                flags |= os.O_EXCL
        full = self._p(path)
        try:
            fd = os.open(full, flags, 0o660)
        except OSError as exc:
            raise _wrap_oserror(exc, "open", full) from exc
        return PosixFile(fd, full)

    def stat(self, path: str) -> FileStat:
        full = self._p(path)
        try:
            st = os.stat(full)
        except OSError as exc:
            raise _wrap_oserror(exc, "stat", full) from exc
        return FileStat(size=st.st_size, mtime=st.st_mtime, is_dir=stat.S_ISDIR(st.st_mode),
                        file_id=st.st_ino)

    def open_readonly(self, path: str) -> PosixFile:
        """``path`` opened read-only: for readers outside the instance that write nothing
        (dspmq's look at a lock file, a client reading the listener record), which then
        also work on a read-only mount. Writes through it fail. (The store's own reads
        keep opening for writing: a data directory it cannot write is refused at open.)"""
        full = self._p(path)
        try:
            fd = os.open(full, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise _wrap_oserror(exc, "open", full) from exc
        return PosixFile(fd, full)

    def read_heads(self, wanted: Sequence[tuple[str, int]]) -> list[FileHead | None]:
        """Each file opened read-only, its size from the open file and its head read:
        three calls where a stat, an open for writing and a read took five (a takeover
        reads some forty heads)."""
        heads: list[FileHead | None] = []
        for path, size in wanted:
            full = self._p(path)
            try:
                fd = os.open(full, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                heads.append(None)
                continue
            except OSError as exc:
                raise _wrap_oserror(exc, "open", full) from exc
            try:
                st = os.fstat(fd)
                if stat.S_ISDIR(st.st_mode):
                    raise VolumeIOError(f"{full} is a directory", errno=errno.EISDIR,
                                        path=full)
                data = os.pread(fd, size, 0) if size else b""
            except OSError as exc:
                raise _wrap_oserror(exc, "read", full) from exc
            finally:
                os.close(fd)
            heads.append(FileHead(st.st_size, data))
        return heads

    def listdir(self, path: str = "") -> list[str]:
        full = self._p(path)
        try:
            return sorted(os.listdir(full))
        except OSError as exc:
            raise _wrap_oserror(exc, "list", full) from exc

    def mkdir(self, path: str) -> None:
        """Create one directory whose parent exists (VolumeNotFound if it does not); no
        error if it exists. Unlike :meth:`makedirs` it never makes the parents again: a
        writer that must not make the volume's own directory again, removed meanwhile."""
        full = self._p(path)
        try:
            os.mkdir(full, 0o770)
        except FileExistsError:
            if not os.path.isdir(full):
                raise _wrap_oserror(FileExistsError(errno.EEXIST, "exists and is not a "
                                                    "directory"), "mkdir", full) from None
        except OSError as exc:
            raise _wrap_oserror(exc, "mkdir", full) from exc

    def makedirs(self, path: str) -> None:
        full = self._p(path)
        try:
            os.makedirs(full, mode=0o770, exist_ok=True)
        except OSError as exc:
            raise _wrap_oserror(exc, "mkdir", full) from exc

    def rename(self, src: str, dst: str) -> None:
        s, d = self._p(src), self._p(dst)
        try:
            os.replace(s, d)
            self._sync_dir(os.path.dirname(d))
        except OSError as exc:
            raise _wrap_oserror(exc, "rename", f"{s} -> {d}") from exc

    def _sync_dir(self, full_dir: str) -> None:
        # A rename is durable only once its directory is; best effort where unsupported.
        try:
            fd = os.open(full_dir, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)

    def unlink(self, path: str) -> None:
        full = self._p(path)
        try:
            os.unlink(full)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise _wrap_oserror(exc, "unlink", full) from exc

    def rmdir(self, path: str) -> None:
        full = self._p(path)
        try:
            os.rmdir(full)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise _wrap_oserror(exc, "rmdir", full) from exc
