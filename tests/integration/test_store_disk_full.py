"""A full disk and a read-only directory, for real: the store's log and data live on small
tmpfs mounts (root only). A write that cannot be made is one clear error with its AMQ
number; every message acknowledged before it is there after restart, once."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockfs.posix import PosixVolume
from miqm.errors import MiqmError, StoreError
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


def test_log_disk_full_stops_cleanly_and_loses_nothing(mounts: tuple[Path, Path]) -> None:
    data, log = mounts
    QueueManagerStore.create(PosixVolume(str(data)), PosixVolume(str(log)), "QM", LINEAR)
    s = _open(data, log, 1)
    s.define_queue("Q", MAXDEPTH=100000)
    acked: list[bytes] = []
    failure: MiqmError | None = None
    body = b""
    for i in range(5000):
        body = b"%06d" % i + bytes(900)
        try:
            s.put("Q", body, persistent=True)
        except MiqmError as exc:
            failure = exc
            break
        acked.append(body)
    assert failure is not None, "the log never filled the disk"
    assert failure.amq == "AMQ6708", failure.user_line()
    assert "\n" not in failure.user_line()
    with pytest.raises(StoreError):  # the store has stopped: no later write happens
        s.put("Q", b"after", persistent=True)
    s._closed = True
    s._close_files()
    _remount(log, "size=8m")  # the administrator frees space
    s = _open(data, log, 2)
    got = _drain(s)
    # the put that failed has an unknown outcome (like a commit cut off by a crash): it
    # may be there or not, but nothing acknowledged is missing and nothing else appears
    assert got in (acked, [*acked, body])
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
