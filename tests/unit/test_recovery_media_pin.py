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

from miqm.store.qmstore import QueueManagerStore
from miqm.store.settings import LogSettings
from tests.unit.storedirs import create_store, open_store

pytestmark = pytest.mark.usefixtures("c_parts_or_python")

LINEAR = LogSettings(log_type="LINEAR", file_pages=64, primary_files=3, secondary_files=1)


def _with_a_deleted_image(tmp: Path) -> QueueManagerStore:
    """Q and QTMP defined, QTMP's image recorded, QTMP deleted (its DELETE forced)."""
    create_store(tmp, LINEAR)
    s = open_store(tmp, LINEAR, 1)
    s.define_queue("Q", DEFPSIST="YES", MAXDEPTH=100_000)
    s.define_queue("QTMP", DEFPSIST="YES")
    s.put("QTMP", b"a")
    s.record_image("QTMP")
    assert s.get("QTMP") is not None
    s.delete_queue("QTMP")
    return s


def _moved_on(s: QueueManagerStore, image: bool = True) -> None:
    """Three extents of traffic on Q, then (with ``image``) an image of every queue there
    is."""
    for i in range(300):
        s.put("Q", b"%06d" % i + bytes(3000))
        s.get("Q")
        if i % 50 == 0:
            s.checkpoint()
    if image:
        s.record_image("Q")


def _moved_on_and_released(s: QueueManagerStore) -> None:
    """After :func:`_moved_on`, media recovery needs no older log than restart does (the
    deleted queue's image pins nothing); ``s`` is closed."""
    try:
        _moved_on(s)
        assert s.log.oldest_extent_for_media() == s.log.oldest_extent_for_restart() != \
            "S0000000.LOG"
    finally:
        s.close()


def test_a_deleted_queue_releases_the_log_its_image_held(tmp_path: Path) -> None:
    s = _with_a_deleted_image(tmp_path)
    _moved_on_and_released(s)


def test_a_delete_redone_by_restart_releases_it_too(tmp_path: Path) -> None:
    """The DELETE is in the log but no checkpoint after it: the restart's replay deletes
    the queue, and its image goes with it."""
    s = _with_a_deleted_image(tmp_path)
    s._closed = True  # a crash: no checkpoint after the DELETE
    s._close_files()
    s.log.close()
    s = open_store(tmp_path, LINEAR, 2)
    _moved_on_and_released(s)


def test_the_error_log_says_which_log_files_are_needed_as_they_move(
        tmp_path: Path) -> None:
    """AMQ7467/AMQ7468 go to the error log when a checkpoint moves them (what an archiving
    job reads, as on MQ), and rcdmqimg/rcrmqobj leave AMQ7086/AMQ7107 there: the error
    log said none of them (they were only printed by the commands and DISPLAY QMSTATUS)."""
    s = _with_a_deleted_image(tmp_path)
    s.close()
    lines: list[tuple[str, str]] = []
    s = open_store(tmp_path, LINEAR, 2, errlog=lambda a, t: lines.append((a, t)))
    try:
        assert not [a for a, _t in lines if a in ("AMQ7467", "AMQ7468")]  # strmqm's as was
        _moved_on(s)
        said = [t for a, t in lines if a == "AMQ7467"]
        assert said and said[-1].endswith(f"is {s.log.oldest_extent_for_restart()}.")
        assert len(said) == len(set(said))  # only when it moves
        media = [t for a, t in lines if a == "AMQ7468"]
        assert media[-1].endswith(f"is {s.log.oldest_extent_for_media()}.")
        assert len(media) == len(set(media))
        assert ("AMQ7086", "Media image for object Q, type queue recorded.") in lines
        s.recreate_object("Q")
        assert ("AMQ7107", "Object Q, type queue recreated.") in lines
    finally:
        s.close()


def test_a_circular_log_writes_no_amq7467(tmp_path: Path) -> None:
    circular = LogSettings(file_pages=64, primary_files=3, secondary_files=1)
    create_store(tmp_path, circular)
    lines: list[tuple[str, str]] = []
    s = open_store(tmp_path, circular, 1, errlog=lambda a, t: lines.append((a, t)))
    try:
        s.define_queue("Q", DEFPSIST="YES")
        _moved_on(s, image=False)
        assert not [a for a, _t in lines if a in ("AMQ7467", "AMQ7468")]
    finally:
        s.close()

