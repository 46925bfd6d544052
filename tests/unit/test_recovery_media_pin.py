"""A deleted queue's media image no longer holds the log media recovery needs (AMQ7468).

Found by exploratory testing (2026-11-28): on a linear log, `rcdmqimg` of a queue, then
DELETE QLOCAL, left its image's LSN in the checkpoint's media table for ever; after the
log had moved three extents on and `rcdmqimg '*'` recorded every queue that exists,
AMQ7468 and DISPLAY QMSTATUS MEDIALOG still named S0000003.LOG, so no log file from
there on could ever be archived or removed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lockfs.posix import PosixVolume
from miqm.store.qmstore import QueueManagerStore
from miqm.store.settings import LogSettings, StoreTuning

pytestmark = pytest.mark.usefixtures("c_parts_or_python")

LINEAR = LogSettings(log_type="LINEAR", file_pages=64, primary_files=3, secondary_files=1)


def _open(tmp: Path, gen: int) -> QueueManagerStore:
    return QueueManagerStore.open(PosixVolume(str(tmp / "data")),
                                  PosixVolume(str(tmp / "log")), "QM", LINEAR,
                                  StoreTuning(), generation=gen, background=False)


def _with_a_deleted_image(tmp: Path) -> QueueManagerStore:
    """Q and QTMP defined, QTMP's image recorded, QTMP deleted (its DELETE forced)."""
    for d in ("data", "log"):
        (tmp / d).mkdir()
    QueueManagerStore.create(PosixVolume(str(tmp / "data")), PosixVolume(str(tmp / "log")),
                             "QM", LINEAR)
    s = _open(tmp, 1)
    s.define_queue("Q", DEFPSIST="YES", MAXDEPTH=100_000)
    s.define_queue("QTMP", DEFPSIST="YES")
    s.put("QTMP", b"a")
    s.record_image("QTMP")
    assert s.get("QTMP") is not None
    s.delete_queue("QTMP")
    return s


def _moved_on(s: QueueManagerStore) -> None:
    """Three extents of traffic on Q, then an image of every queue there is."""
    for i in range(300):
        s.put("Q", b"%06d" % i + bytes(3000))
        s.get("Q")
        if i % 50 == 0:
            s.checkpoint()
    s.record_image("Q")


def test_a_deleted_queue_releases_the_log_its_image_held(tmp_path: Path) -> None:
    s = _with_a_deleted_image(tmp_path)
    try:
        _moved_on(s)
        assert s.log.oldest_extent_for_media() == s.log.oldest_extent_for_restart() != \
            "S0000000.LOG"
    finally:
        s.close()


def test_a_delete_redone_by_restart_releases_it_too(tmp_path: Path) -> None:
    """The DELETE is in the log but no checkpoint after it: the restart's replay deletes
    the queue, and its image goes with it."""
    s = _with_a_deleted_image(tmp_path)
    s._closed = True  # a crash: no checkpoint after the DELETE
    s._close_files()
    s.log.close()
    s = _open(tmp_path, 2)
    try:
        _moved_on(s)
        assert s.log.oldest_extent_for_media() == s.log.oldest_extent_for_restart() != \
            "S0000000.LOG"
    finally:
        s.close()
