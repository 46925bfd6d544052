"""lockfs: the shared filesystem (files + byte-range locks), knowing nothing of queues."""

from lockfs.errors import (
    BadLocation,
    LockFsError,
    LockLostError,
    VolumeIOError,
    VolumeNotFound,
    VolumePermissionError,
    VolumeStalled,
)
from lockfs.open import open_volume
from lockfs.volume import (
    WHOLE_FILE,
    FileHead,
    FileStat,
    LockMode,
    Reachability,
    Volume,
    VolumeFile,
)

__all__ = [
    "WHOLE_FILE",
    "BadLocation",
    "FileHead",
    "FileStat",
    "LockFsError",
    "LockLostError",
    "LockMode",
    "Reachability",
    "Volume",
    "VolumeFile",
    "VolumeIOError",
    "VolumeNotFound",
    "VolumePermissionError",
    "VolumeStalled",
    "open_volume",
]
