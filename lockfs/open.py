"""Choosing a backend for a location: the one module of :mod:`lockfs` above both
:mod:`lockfs.posix` and :mod:`lockfs.nfs4` (each of which builds on the
:class:`~lockfs.volume.Volume` interface and knows nothing of the other)."""

from __future__ import annotations

from lockfs.volume import Volume


def open_volume(location: str, *, lease_seconds: float | None = None) -> Volume:
    """Turn a Directory (a local path or ``nfs4://server[:port]/export/path``) into a Volume.

    The backends are imported on first use: ``nfs4`` loads libnfs through ctypes, which
    a queue manager on a kernel mount never needs."""
    if location.startswith("nfs4://"):
        from lockfs.nfs4 import Nfs4Volume

        return Nfs4Volume(location, lease_seconds=lease_seconds)
    from lockfs.posix import PosixVolume

    return PosixVolume(location, lease_seconds=lease_seconds)
