"""A queue manager's store in a test's directory: ``data/`` and ``log/`` side by side, as
crtmqm makes them, created and opened without any HA (generation given by the test)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lockfs.posix import PosixVolume
from miqm.store.qmstore import QueueManagerStore
from miqm.store.settings import LogSettings, StoreTuning


def create_store(tmp: Path, settings: LogSettings) -> None:
    """Make ``tmp/data`` and ``tmp/log`` (and ``tmp``) and create queue manager QM there."""
    for d in ("data", "log"):
        (tmp / d).mkdir(parents=True)
    QueueManagerStore.create(PosixVolume(str(tmp / "data")), PosixVolume(str(tmp / "log")),
                             "QM", settings)


def open_store(tmp: Path, settings: LogSettings, gen: int,
               **options: Any) -> QueueManagerStore:
    """Open (start) QM under ``tmp`` as activation ``gen``, in the foreground (no
    background threads); ``options`` go to :meth:`QueueManagerStore.open` (``errlog``)."""
    return QueueManagerStore.open(PosixVolume(str(tmp / "data")),
                                  PosixVolume(str(tmp / "log")), "QM", settings,
                                  StoreTuning(), generation=gen, background=False, **options)
