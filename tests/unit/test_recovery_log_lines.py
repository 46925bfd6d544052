"""Every AMQ6118 a restart's read of the log raises says what to do, not only that the
queue manager cannot start (found by exploratory testing, 2026-11-28: a log file of
another queue manager copied over S0000003.LOG gave 'AMQ6118: the recovery log is damaged
at log file S0000003.LOG offset 167936: bad fragment at data offset 2541; the queue
manager cannot start', and a stale writer's records the same, with nothing to do)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lockfs.posix import PosixVolume
from miqm.errors import LogCorruptError, StoreError
from miqm.store.log import RecoveryLog
from miqm.store.settings import LogSettings

pytestmark = pytest.mark.usefixtures("c_parts_or_python")

SMALL = LogSettings(file_pages=64, primary_files=2, secondary_files=2)


def _log(path: Path) -> PosixVolume:
    vol = PosixVolume(str(path))
    RecoveryLog.create(vol, SMALL)
    return vol


def _refused(vol: PosixVolume, gen: int) -> str:
    log = RecoveryLog.open(vol, SMALL, generation=gen)
    try:
        with pytest.raises(LogCorruptError) as info:
            list(log.records(log.first_lsn()))
    finally:
        log.close()
    line = str(info.value)
    assert info.value.amq == "AMQ6118" and "\n" not in line
    return line


def test_a_log_file_of_another_queue_manager_copied_in_says_restore(tmp_path: Path) -> None:
    ours = _log(tmp_path / "ours")
    log = RecoveryLog.open(ours, SMALL, generation=1)
    list(log.records(log.first_lsn()))
    log.append_and_force(b"a" * 100)
    restart = log.append_and_force(b"b" * 100)
    log.set_restart_lsn(restart)
    log.close()
    theirs = _log(tmp_path / "theirs")
    other = RecoveryLog.open(theirs, SMALL, generation=1)
    list(other.records(other.first_lsn()))
    other.append_and_force(b"\xab" * 3000)  # our restart point is inside this record
    other.close()
    shutil.copy(tmp_path / "theirs" / "S0000000.LOG", tmp_path / "ours" / "S0000000.LOG")
    line = _refused(ours, 2)
    assert "S0000000.LOG" in line and "cannot start" in line
    assert "restore the data and log directories together from a backup" in line
    assert "another queue manager" in line


def test_a_stale_writer_after_a_takeover_says_what_to_do(tmp_path: Path) -> None:
    vol = _log(tmp_path / "log")
    old = RecoveryLog.open(vol, SMALL, generation=1)
    list(old.records(old.first_lsn()))
    for i in range(5):
        old.append_and_force(b"%03d" % i * 30)
    new = RecoveryLog.open(vol, SMALL, generation=2)
    list(new.records(new.first_lsn()))
    new.append_and_force(b"new active")
    for i in range(10):  # the fenced-off instance writes on
        old.append_and_force(b"%04d" % i * 250)
    line = _refused(vol, 3)
    assert "stale instance" in line and "amqmfsck" in line
    assert "restore the data and log directories together from a backup" in line
    old.close()
    new.close()


def test_amqldmpa_counts_only_extents_among_other_files(tmp_path: Path) -> None:
    """A file an operator left in a linear log directory (a saved copy) is not counted,
    and its name does not stop the logger dump (it raised ValueError on 'SAVED.LOG')."""
    linear = LogSettings(log_type="LINEAR", file_pages=64, primary_files=2,
                         secondary_files=2)
    vol = PosixVolume(str(tmp_path / "log"))
    RecoveryLog.create(vol, linear)
    for name in ("SAVED.LOG", "S0000000.LOG.bak", "S1.LOG"):
        (tmp_path / "log" / name).write_bytes(b"x")
    log = RecoveryLog.open(vol, linear, generation=1)
    try:
        list(log.records(log.first_lsn()))
        stats = log.stats()
        assert stats["FileCount"] == len(list((tmp_path / "log").glob("S???????.LOG")))
        assert stats["loginactive"] == 0
    finally:
        log.close()


def _wrapping(log: RecoveryLog, rounds: int) -> None:
    """Records through every extent of a circular log, several times over (the restart
    point moved on after each force, as checkpoints do)."""
    for i in range(rounds):
        lsn = log.append_and_force(b"%06d" % i * 500)
        log.set_restart_lsn(lsn)


def _assert_restarts_with_every_record(vol: PosixVolume) -> None:
    """The log in ``vol`` opens again (activation 2) and ends with _wrapping's last record."""
    log = RecoveryLog.open(vol, SMALL, generation=2)
    try:
        assert [r.payload for r in log.records(log.first_lsn())][-1] == b"%06d" % 299 * 500
    finally:
        log.close()


def test_a_free_circular_log_file_deleted_while_down_is_formatted_again(
        tmp_path: Path) -> None:
    """A file of the free list deleted while the queue manager was down: it started, ran
    until the log reached that file and then stopped ('log file S0000001.LOG ... is
    missing; the queue manager cannot start without it', Ended unexpectedly). It holds
    nothing the log needs: the first write of the activation formats it again."""
    vol = _log(tmp_path / "log")
    (tmp_path / "log" / "S0000001.LOG").unlink()
    log = RecoveryLog.open(vol, SMALL, generation=1)
    try:
        list(log.records(log.first_lsn()))
        _wrapping(log, 300)  # 900 KB through 2 primaries of 248 KiB: several laps
        assert (tmp_path / "log" / "S0000001.LOG").stat().st_size == 64 * 4096
    finally:
        log.close()
    _assert_restarts_with_every_record(vol)


def test_a_free_circular_log_file_deleted_while_running_is_formatted_again(
        tmp_path: Path) -> None:
    """The same deletion while the queue manager ran: when the log switched to that file
    it stopped ('AMQ7017: log file S0000001.LOG ... is missing; the queue manager stopped:
    restore it'), and its control file already named the missing file active, so the
    next start failed too (AMQ6767 'cannot start without it'). The switch now formats
    the file again, and the log goes on."""
    vol = _log(tmp_path / "log")
    events: list[tuple[str, dict]] = []  # type: ignore[type-arg]
    log = RecoveryLog.open(vol, SMALL, generation=1,
                           on_event=lambda name, **f: events.append((name, f)))
    try:
        list(log.records(log.first_lsn()))
        log.append_and_force(b"first")  # the start's own restore is behind it
        assert "S0000001.LOG" in log.control_summary()["Free"]
        (tmp_path / "log" / "S0000001.LOG").unlink()
        _wrapping(log, 300)
        assert (tmp_path / "log" / "S0000001.LOG").stat().st_size == 64 * 4096
        assert ("log_extent_restored", {"extent": "S0000001.LOG"}) in events
    finally:
        log.close()
    _assert_restarts_with_every_record(vol)


def _written(path: Path, generation: int, n: int) -> PosixVolume:
    """A log whose activation ``generation`` appended ``n`` records of 100 bytes."""
    vol = _log(path)
    log = RecoveryLog.open(vol, SMALL, generation=generation)
    list(log.records(log.first_lsn()))
    for i in range(n):
        log.append_and_force(b"%03d" % i * 33 + b"x")
    log.close()
    return vol


def test_a_log_file_with_records_newer_than_its_control_file_is_refused(
        tmp_path: Path) -> None:
    """Another queue manager's log file whose records line up with this one's, written
    by a later activation than this log's control file records (found reading as this
    log's, 2026-11-28): an activation records its generation before its first record,
    so no record of this log can be newer."""
    ours = _written(tmp_path / "ours", 1, 5)
    _written(tmp_path / "theirs", 3, 5)
    shutil.copy(tmp_path / "theirs" / "S0000000.LOG", tmp_path / "ours" / "S0000000.LOG")
    line = _refused(ours, 2)
    assert "newer than generation 1 the log control file records" in line
    assert "another queue manager" in line and "restore the data and log" in line


def test_a_control_file_put_back_from_an_older_copy_is_refused(tmp_path: Path) -> None:
    vol = _written(tmp_path / "log", 1, 5)
    old = (tmp_path / "log" / "amqhlctl.lfh").read_bytes()
    log = RecoveryLog.open(vol, SMALL, generation=2)
    list(log.records(log.first_lsn()))
    log.append_and_force(b"of generation 2")
    log.close()
    (tmp_path / "log" / "amqhlctl.lfh").write_bytes(old)
    line = _refused(vol, 2)
    assert "the control file is older than the log files" in line


def test_a_log_directory_that_is_no_longer_the_logs_stops_with_amq7017(
        tmp_path: Path) -> None:
    """A free file missing because the whole directory is another now (its filesystem
    no longer mounted, an empty mount point in its place) is not made there: the store
    stops with AMQ7017 (whose fields the error log fills) saying so, and the log starts
    again once its directory is back."""
    vol = _log(tmp_path / "log")
    log = RecoveryLog.open(vol, SMALL, generation=1)
    try:
        list(log.records(log.first_lsn()))
        log.append_and_force(b"first")
        (tmp_path / "log").rename(tmp_path / "away")  # its open files still write there
        (tmp_path / "log").mkdir()
        with pytest.raises(StoreError) as info:
            _wrapping(log, 300)
    finally:
        log.close()
    line = str(info.value)
    assert info.value.amq == "AMQ7017" and "\n" not in line
    assert "log file S0000001.LOG" in line and "missing, and so is S0000000.LOG" in line, line
    assert "stopped" in line and "cannot start" not in line
    assert not list((tmp_path / "log").glob("S*.LOG"))  # no extent made in the wrong place
    shutil.rmtree(tmp_path / "log")
    (tmp_path / "away").rename(tmp_path / "log")
    log = RecoveryLog.open(vol, SMALL, generation=2)
    try:
        assert [r.payload for r in log.records(log.first_lsn())]  # it starts
    finally:
        log.close()
