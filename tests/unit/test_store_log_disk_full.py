"""A linear log on a filesystem with no room for its next extent: the log is full
(AMQ7463, MQRC 2102 to the application) with nothing written, not a failed force that
stops the queue manager, and it goes on once there is room (found by exploratory testing:
a tmpfs log directory filled during puts stopped the instance, and the half-formatted
``S0000005.LOG.tmp`` left behind held the space the control file needed)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from lockfs.errors import VolumeIOError
from lockfs.posix import PosixVolume
from lockfs.volume import VolumeFile
from miqm.errors import LogFullError
from miqm.store.log import RecoveryLog
from miqm.store.settings import LogSettings

pytestmark = pytest.mark.usefixtures("c_parts_or_python")

LINEAR = LogSettings(log_type="LINEAR", file_pages=64, primary_files=2, secondary_files=2)


class FullVolume(PosixVolume):
    """A posix volume whose filesystem is full for new log extents while ``full``: the
    temporary file is made and partly written, then the write fails with ENOSPC."""

    full = False

    def open(self, path: str, *, create: bool = False, exclusive: bool = False
             ) -> VolumeFile:
        f = super().open(path, create=create, exclusive=exclusive)
        if self.full and create and path.endswith(".LOG.tmp"):
            f.pwrite(b"\0" * 16384, 0)
            f.close()
            raise VolumeIOError(f"write {path}: No space left on device", errno=errno.ENOSPC,
                                path=path)
        return f


def _record(i: int) -> bytes:
    return f"{i:06d}".encode() * 150  # 900 bytes: an extent of 62 pages holds ~270


def _log_on_a_full_disk(tmp_path: Path, settings: LogSettings
                        ) -> tuple[FullVolume, RecoveryLog]:
    """A new log opened (and read to its end), on a filesystem that is now full."""
    vol = FullVolume(str(tmp_path / "log"))
    RecoveryLog.create(vol, settings)
    log = RecoveryLog.open(vol, settings, generation=1)
    list(log.records(log.first_lsn()))
    vol.full = True
    return vol, log


def _goes_on_and_recovers(log: RecoveryLog, vol: FullVolume, settings: LogSettings,
                          forced: list[bytes], more: int) -> None:
    """Room made: ``more`` records are forced after the ``forced`` ones, and a restart
    reads back exactly all of them."""
    for i in range(len(forced), len(forced) + more):
        rec = _record(i)
        log.append_and_force(rec)
        forced.append(rec)
    log.close()
    again = RecoveryLog.open(vol, settings, generation=2)
    assert [r.payload for r in again.records(again.first_lsn())] == forced
    again.close()


def test_no_room_for_the_next_linear_extent_is_log_full_then_goes_on(tmp_path: Path
                                                                       ) -> None:
    vol, log = _log_on_a_full_disk(tmp_path, LINEAR)
    forced: list[bytes] = []
    with pytest.raises(LogFullError) as info:
        for i in range(2000):  # crtmqm made two extents: the third cannot be formatted
            rec = _record(i)
            log.append_and_force(rec)
            forced.append(rec)
    assert info.value.amq == "AMQ7463"
    assert "S0000002.LOG" in str(info.value) and "free space" in str(info.value)
    assert 100 < len(forced) < 2000
    # nothing half made is left to hold the space, and the log still works
    assert not [p.name for p in (tmp_path / "log").iterdir() if p.name.endswith(".tmp")]
    with pytest.raises(LogFullError):
        log.append(_record(-1))
    vol.full = False  # the administrator made room
    _goes_on_and_recovers(log, vol, LINEAR, forced, 300)


def test_the_store_writes_amq7463_once_while_the_log_stays_full(tmp_path: Path) -> None:
    """A put that finds the log full fails with MQRC 2102 and the store goes on; the
    error log says AMQ7463 with the log's reason (nothing said it before), once, not for
    every refused put."""
    from miqm.store.qmstore import QueueManagerStore
    from tests.unit.test_store_fakelog import FakeLog
    from tests.unit.test_store_units import SETTINGS, Harness

    class FullLog(FakeLog):
        full = False

        def append(self, payload: bytes) -> int:
            if self.full:
                raise LogFullError("the log is full: log file S0000009.LOG cannot be "
                                   "formatted (No space left on device)", amq="AMQ7463")
            return super().append(payload)

    h = Harness(tmp_path)
    h.log = FullLog()
    lines: list[tuple[str, str]] = []
    s = QueueManagerStore.open(h.data, None, "QM", SETTINGS, h.tuning, generation=1,
                               recovery_log=h.log, background=False,
                               errlog=lambda a, t: lines.append((a, t)))
    try:
        s.define_queue("Q", DEFPSIST="YES")
        s.put("Q", b"before")
        h.log.full = True
        for _ in range(3):
            with pytest.raises(LogFullError):
                s.put("Q", b"refused")
        full = [t for a, t in lines if a == "AMQ7463"]
        assert len(full) == 1 and "is full" in full[0] and "No space left" in full[0]
        assert s.failure is None
        assert not [a for a, _t in lines if a == "AMQ7464"]
        h.log.full = False
        s.put("Q", b"after")
        s.put("Q", b"and more")
        # the log says it is no longer full once, when a record goes in again
        assert [t for a, t in lines if a == "AMQ7464"] == [
            "The log for queue manager 'QM' is no longer full."]
        assert [m.body for m in iter(lambda: s.get("Q"), None)][:2] == [b"before", b"after"]
    finally:
        s.close()


CIRCULAR = LogSettings(log_type="CIRCULAR", file_pages=64, primary_files=2,
                       secondary_files=2)


def test_no_room_for_a_circular_secondary_is_log_full_then_goes_on(tmp_path: Path
                                                                   ) -> None:
    """The same for a circular log that needs a secondary extent: it was formatted only
    when a force reached it, and a full disk there stopped the queue manager ('the
    queue manager must stop')."""
    vol, log = _log_on_a_full_disk(tmp_path, CIRCULAR)
    forced: list[bytes] = []
    with pytest.raises(LogFullError) as info:
        for i in range(2000):  # the two primaries fill; no secondary can be formatted
            rec = _record(i)
            log.append_and_force(rec)
            forced.append(rec)
    assert info.value.amq == "AMQ7463" and "secondary log file" in str(info.value)
    assert 100 < len(forced) < 2000
    assert not [p.name for p in (tmp_path / "log").iterdir() if p.name.endswith(".tmp")]
    vol.full = False
    _goes_on_and_recovers(log, vol, CIRCULAR, forced, 200)
