"""The queue manager's MAXMSGL: MQ's default of 4 MB (4194304) for a new queue manager,
raised by ALTER QMGR up to 100 MB; a queue manager created before crtmqm stored it keeps
the 100 MB it had. A message longer than the queue's MAXMSGL is MQRC 2030, longer than
the queue manager's MQRC 2031."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockfs.posix import PosixVolume
from miqm.errors import MessagingError, ObjectError
from miqm.store import checkpoint as ckpt
from miqm.store.qmstore import QueueManagerStore
from miqm.store.settings import LogSettings
from tests.unit.storedirs import create_store, open_store

SETTINGS = LogSettings(file_pages=2048, primary_files=3, secondary_files=2)
MB4 = 4_194_304
MB100 = 104_857_600


def _open(tmp_path: Path, gen: int) -> QueueManagerStore:
    return open_store(tmp_path, SETTINGS, gen)


def _create(tmp_path: Path) -> None:
    create_store(tmp_path, SETTINGS)


def test_a_new_queue_manager_has_mq_default_and_alter_raises_it(tmp_path: Path) -> None:
    _create(tmp_path)
    s = _open(tmp_path, 1)
    try:
        assert s.qmgr_attrs()["MAXMSGL"] == MB4
        s.define_queue("Q", MAXMSGL=MB100)
        s.put("Q", b"x" * MB4)  # exactly the limit is allowed
        with pytest.raises(MessagingError) as info:
            s.put("Q", b"x" * (MB4 + 1))
        assert info.value.mqrc == 2031 and "ALTER QMGR MAXMSGL" in str(info.value)
        s.define_queue("SMALL", MAXMSGL=1000)
        with pytest.raises(MessagingError) as info:
            s.put("SMALL", b"x" * 1001)
        assert info.value.mqrc == 2030  # the queue's own limit comes first
        with pytest.raises(ObjectError):
            s.set_qmgr_attrs(MAXMSGL=MB100 + 1)
        s.set_qmgr_attrs(MAXMSGL=MB100)
        s.put("Q", b"y" * (MB4 + 1))
    finally:
        s.close()
    # the value is the queue manager's: stored, it survives a restart
    s = _open(tmp_path, 2)
    try:
        assert s.qmgr_attrs()["MAXMSGL"] == MB100
    finally:
        s.close()


def test_the_default_survives_restart_without_an_alter(tmp_path: Path) -> None:
    _create(tmp_path)
    _open(tmp_path, 1).close()
    s = _open(tmp_path, 2)
    try:
        assert s.qmgr_attrs()["MAXMSGL"] == MB4
    finally:
        s.close()


def test_a_queue_manager_created_before_the_default_changed_keeps_100_mb(
        tmp_path: Path) -> None:
    """crtmqm stored only MAXUMSGS before: such a queue manager's MAXMSGL was the code's
    default, 100 MB, and stays so after the upgrade (no message it took is refused)."""
    _create(tmp_path)
    data = PosixVolume(str(tmp_path / "data"))
    info = ckpt.read(data)
    assert info.qmgr.pop("MAXMSGL") == MB4
    ckpt.write(data, info)  # as an older crtmqm left it
    s = _open(tmp_path, 1)
    try:
        assert s.qmgr_attrs()["MAXMSGL"] == MB100
        s.define_queue("Q", MAXMSGL=MB100)
        s.put("Q", b"x" * (MB4 + 1))
        assert len(s.get("Q").body) == MB4 + 1  # type: ignore[union-attr]
    finally:
        s.close()
