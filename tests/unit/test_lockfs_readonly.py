"""Readers outside the instance that write nothing work on a read-only mount: dspmq's
look at a lock file (whose record and holder it shows) and a client's read of the
listener record. They opened the file for writing, so a shared filesystem remounted
read-only under a running instance showed 'Status not available' while it served."""
from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from lockfs.errors import VolumePermissionError
from lockfs.lockfile import HolderRecord, LockFile, peek
from lockfs.posix import PosixVolume
from lockfs.volume import LockMode

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (a bind mount)")


@pytest.fixture
def readonly_view(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(the directory, the same directory bind-mounted read-only elsewhere)."""
    src, view = tmp_path / "rw", tmp_path / "ro"
    src.mkdir()
    view.mkdir()
    subprocess.run(["mount", "--bind", str(src), str(view)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(view)], check=True)
        yield src, view
    finally:
        subprocess.run(["umount", str(view)], check=False)


def test_a_held_lock_file_is_seen_through_a_read_only_mount(readonly_view) -> None:
    src, view = readonly_view
    writer = PosixVolume(str(src))
    lock = LockFile(writer, "master")
    assert lock.acquire(LockMode.EXCLUSIVE)
    record = HolderRecord(host="hosta", lock_id=7, lock_time=1.0, pid=42, generation=3)
    lock.write_record(record)
    (src / "listener").write_text('{"host": "127.0.0.1", "port": 1414}')
    reader = PosixVolume(str(view))
    try:
        with pytest.raises(VolumePermissionError):  # what every look did before
            reader.open("master")
        found, held = peek(reader, "master")
        assert held is True and found is not None and found.same_holder(record)
        with reader.open_readonly("listener") as f:
            assert b'"port": 1414' in f.pread(f.size(), 0)
        lock.release()
        assert peek(reader, "master")[1] is False
    finally:
        lock.release()
