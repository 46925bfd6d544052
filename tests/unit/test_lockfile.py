"""LockFile and its holder record: encoding, garbage, exclusion between processes, reads
through the held descriptor, peek for dspmq."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from lockfs.lockfile import RECORD_SIZE, HolderRecord, LockFile, peek
from lockfs.posix import PosixVolume
from lockfs.volume import LockMode

REC = HolderRecord("hosta", 1249388074, 1700000000.5, 4242, 7)


def test_record_round_trip_and_garbage() -> None:
    raw = REC.encode()
    assert len(raw) == RECORD_SIZE
    assert HolderRecord.decode(raw) == REC
    assert HolderRecord.decode(b"") is None
    assert HolderRecord.decode(b"garbage" * 100) is None
    torn = bytearray(raw)
    torn[30] ^= 1
    assert HolderRecord.decode(bytes(torn)) is None
    assert REC.same_holder(HolderRecord("hosta", 1249388074, 1.0, 4242, 7))
    assert not REC.same_holder(HolderRecord("hosta", 1249388074, 1.0, 4242, 8))
    assert not REC.same_holder(None)


HOLDER = textwrap.dedent("""
    import sys, time
    from lockfs.posix import PosixVolume
    from lockfs.lockfile import LockFile, HolderRecord
    from lockfs.volume import LockMode
    lf = LockFile(PosixVolume(sys.argv[1]), sys.argv[3])
    ok = lf.acquire(LockMode[sys.argv[2]], HolderRecord("other", 1, 2.0, 3, 4))
    print("granted" if ok else "refused", flush=True)
    if ok:
        sys.stdin.readline()
""")


def _holder(root: Path, mode: str, name: str = "master") -> subprocess.Popen[str]:
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(root), mode, name],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    return p


def test_exclusive_lock_excludes_another_process(tmp_path: Path) -> None:
    vol = PosixVolume(str(tmp_path))
    mine = LockFile(vol, "master")
    assert mine.acquire(LockMode.EXCLUSIVE, REC)
    other = _holder(tmp_path, "EXCLUSIVE")
    assert other.stdout.readline().strip() == "refused"  # type: ignore[union-attr]
    other.wait(10)
    # reading through a second descriptor in this process must not drop the lock (OFD)
    assert peek(vol, "master") == (REC, True)
    assert mine.read_record() == REC
    other = _holder(tmp_path, "EXCLUSIVE")
    assert other.stdout.readline().strip() == "refused"  # type: ignore[union-attr]
    other.wait(10)
    mine.release()
    other = _holder(tmp_path, "EXCLUSIVE")
    try:
        assert other.stdout.readline().strip() == "granted"  # type: ignore[union-attr]
        assert not LockFile(vol, "master").acquire(LockMode.SHARED)
        rec, held = peek(vol, "master")
        assert held is True and rec is not None and rec.host == "other"
    finally:
        other.communicate("\n", timeout=10)
    assert peek(vol, "master")[1] is False


def test_shared_locks_coexist_and_block_exclusive(tmp_path: Path) -> None:
    vol = PosixVolume(str(tmp_path))
    a = LockFile(vol, "active")
    assert a.acquire(LockMode.SHARED)
    other = _holder(tmp_path, "SHARED", "active")
    try:
        assert other.stdout.readline().strip() == "granted"  # type: ignore[union-attr]
    finally:
        other.communicate("\n", timeout=10)
    ex = _holder(tmp_path, "EXCLUSIVE", "active")
    assert ex.stdout.readline().strip() == "refused"  # type: ignore[union-attr]
    ex.wait(10)
    a.release()
    a.release()  # idempotent


def test_acquire_remembers_the_previous_holder(tmp_path: Path) -> None:
    vol = PosixVolume(str(tmp_path))
    first = LockFile(vol, "master")
    assert first.acquire(LockMode.EXCLUSIVE, REC)
    first.release()
    second = LockFile(vol, "master")
    assert second.acquire(LockMode.EXCLUSIVE)
    assert second.previous == REC
    assert peek(vol, "missing") == (None, False)
