"""Exceptions raised by lockfs. lockfs is a library of its own: it imports nothing of miqm."""

from __future__ import annotations


class LockFsError(Exception):
    """Root of every lockfs error. ``errno`` is set where an OS error lies behind it."""

    def __init__(self, message: str, *, errno: int | None = None, path: str | None = None) -> None:
        super().__init__(message)
        self.errno = errno
        self.path = path


class VolumeIOError(LockFsError):
    """An I/O operation on the shared filesystem failed (EIO, ENOSPC, EROFS, a dead server...).

    After a failed write the file's content in the written range is unknown: callers must
    treat it as possibly torn and never assume the old bytes are intact.
    """


class VolumeNotFound(LockFsError):
    """The path does not exist on the volume."""


class VolumePermissionError(LockFsError):
    """The volume refused access (EACCES/EPERM/EROFS on open or create)."""


class LockLostError(LockFsError):
    """A lock this process held is no longer held (lease expired, server said EXPIRED)."""


class VolumeStalled(LockFsError):
    """An operation did not complete within its deadline (the filesystem appears hung)."""


class BadLocation(LockFsError):
    """A Directory/URL given by the user cannot be turned into a volume."""
