"""A full disk and a read-only directory, for real: the store's log and data live on small
tmpfs mounts (root only). A write that cannot be made is one clear error with its AMQ
number; every message acknowledged before it is there after restart, once."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockfs.posix import PosixVolume
from miqm.errors import LogFullError, MiqmError
from miqm.store.qmstore import QueueManagerStore
from miqm.store.settings import LogSettings, StoreTuning

pytestmark = [pytest.mark.integration, pytest.mark.root]

LINEAR = LogSettings(log_type="LINEAR", file_pages=64, primary_files=2, secondary_files=1)
TUNING = StoreTuning(checkpoint_log_recd_max=100000, checkpoint_wait_len=1e9)


def _mount(path: Path, size: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                   check=True)


def _remount(path: Path, opts: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{opts}", str(path)], check=True)


@pytest.fixture
def mounts(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    data, log = tmp_path / "data", tmp_path / "log"
    try:
        _mount(data, "4m")
        _mount(log, "1200k")  # room for the first linear extents and not many more
        yield data, log
    finally:
        for p in (data, log):
            subprocess.run(["umount", "-l", str(p)], check=False)


def _open(data: Path, log: Path, gen: int) -> QueueManagerStore:
    return QueueManagerStore.open(PosixVolume(str(data)), PosixVolume(str(log)), "QM",
                                  LINEAR, TUNING, generation=gen, background=False)


def _drain(s: QueueManagerStore) -> list[bytes]:
    got = []
    while (m := s.get("Q")) is not None:
        got.append(m.body)
    return got


def test_log_disk_full_is_log_full_and_goes_on_when_there_is_room(
        mounts: tuple[Path, Path]) -> None:
    """A linear log whose filesystem has no room for its next extent is full (AMQ7463,
    MQRC 2102 to the put) with nothing written: the store goes on, and once the
    administrator makes room the next put works, and every acknowledged message is there
    after a restart, once (it stopped the store, AMQ6708, before a7d57c8)."""
    data, log = mounts
    QueueManagerStore.create(PosixVolume(str(data)), PosixVolume(str(log)), "QM", LINEAR)
    s = _open(data, log, 1)
    s.define_queue("Q", MAXDEPTH=100000)
    acked: list[bytes] = []
    failure: MiqmError | None = None
    for i in range(5000):
        body = b"%06d" % i + bytes(900)
        try:
            s.put("Q", body, persistent=True)
        except MiqmError as exc:
            failure = exc
            break
        acked.append(body)
    assert failure is not None, "the log never filled the disk"
    assert failure.amq == "AMQ7463", failure.user_line()
    assert "\n" not in failure.user_line() and "free space" in failure.user_line()
    assert s.failure is None  # not stopped: nothing was written
    with pytest.raises(LogFullError):  # still full: refused again, nothing written
        s.put("Q", b"refused" + bytes(4000), persistent=True)
    assert not [p.name for p in log.iterdir() if p.name.endswith(".tmp")]
    _remount(log, "size=8m")  # the administrator frees space
    s.put("Q", b"after", persistent=True)
    acked.append(b"after")
    s._closed = True  # a crash: only what was forced counts
    s._close_files()
    s = _open(data, log, 2)
    assert _drain(s) == acked
    s.close()


def test_read_only_data_directory_is_one_clear_error(mounts: tuple[Path, Path]) -> None:
    data, log = mounts
    QueueManagerStore.create(PosixVolume(str(data)), PosixVolume(str(log)), "QM", LINEAR)
    s = _open(data, log, 1)
    s.define_queue("Q", MAXDEPTH=100000)
    for i in range(20):
        s.put("Q", b"m%d" % i, persistent=True)
    s.close()
    _remount(data, "ro")
    with pytest.raises(MiqmError) as err:
        _open(data, log, 2)
    line = err.value.user_line()
    assert "\n" not in line and ("read-only" in line.lower() or "Read-only" in line), line
    _remount(data, "rw")
    s = _open(data, log, 3)
    assert _drain(s) == [b"m%d" % i for i in range(20)]
    s.close()
