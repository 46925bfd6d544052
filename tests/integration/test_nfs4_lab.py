"""The nfs4 backend against a real NFSv4 server (tests/nfslab/lab.sh: nfs-ganesha, lease 5 s).

Lock holders run as separate processes in the network namespaces miqm-a and miqm-b, so
each is its own NFS client host whose link can be cut. Measured hand-off times are
printed (``pytest -s`` shows them).
"""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest

from lockfs import LockMode, Reachability, open_volume
from lockfs.errors import LockLostError, VolumeIOError, VolumeNotFound, VolumeStalled
from tests import lab

pytestmark = [pytest.mark.root, pytest.mark.integration, pytest.mark.timeout(120)]



def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_volume_round_trip(nfs_lab: lab.NfsLab) -> None:
    sub = _name("rt")
    vol = open_volume(nfs_lab.url(sub))
    try:
        assert vol.lease_seconds == nfs_lab.lease
        vol.makedirs("q/sub")
        with vol.open("q/data", create=True) as f:
            payload = os.urandom(20000)  # several WRITEs (libnfs encodes 4 KiB at most)
            f.pwrite(payload, 0)
            f.fdatasync()
            assert f.size() == len(payload)
            assert f.pread(len(payload) + 10, 0) == payload
            f.truncate(100)
            assert f.size() == 100
        # a READ larger than the server's maximum (ganesha: 1 MiB) is split, not refused
        big = os.urandom(3 << 20)
        (nfs_lab.export_dir / sub / "q" / "big").write_bytes(big)
        with vol.open("q/big") as f:
            assert f.pread(4 << 20, 0) == big
            assert f.pread(len(big), 100) == big[100:]
        vol.unlink("q/big")
        vol.write_atomic("q/ini", b"one")
        vol.write_atomic("q/ini", b"two")
        assert vol.read_bytes("q/ini") == b"two"
        vol.rename("q/data", "q/data2")
        assert vol.listdir("q") == ["data2", "ini", "sub"]
        assert vol.stat("q/sub").is_dir and not vol.stat("q/ini").is_dir
        assert (nfs_lab.export_dir / sub / "q" / "ini").read_bytes() == b"two"
        with pytest.raises(VolumeNotFound):
            vol.open("q/data")
        vol.unlink("q/data2")
        vol.unlink("q/data2")  # already gone: no error
        vol.remove_tree("q")
        assert vol.listdir("") == []
        # the server's free space for the export, as statvfs of the exported directory
        # gives it (the two are read moments apart on a machine that writes meanwhile)
        local = os.statvfs(nfs_lab.export_dir)
        free = vol.available_bytes()
        assert free is not None
        assert abs(free - local.f_bavail * local.f_frsize) < 256 << 20
    finally:
        vol.close()


def test_small_reads_share_one_context_and_survive_its_trouble(nfs_lab: lab.NfsLab) -> None:
    """read_bytes and read_head open, read and close in one shared context (no connection
    per file); a missing file or a directory is one clear error without spoiling it, a
    file replaced by a longer one is read whole, a big one in pieces, and after the
    context's client state ran out (idle past the lease) the read still succeeds."""
    sub = _name("rd")
    vol = open_volume(nfs_lab.url(sub))
    try:
        vol.makedirs("d")
        vol.write_atomic("d/small", b"0123456789")
        big = os.urandom((1 << 20) + 4096 * 3 + 5)  # past one READ of 1 MiB
        (nfs_lab.export_dir / sub / "d" / "big").write_bytes(big)
        assert vol.read_bytes("d/small") == b"0123456789"
        assert vol.read_head("d/small", 4) == b"0123"
        assert vol.read_head("d/small", 100) == b"0123456789"
        assert vol.read_bytes("d/big") == big
        assert vol.read_head("d/big", 70000) == big[:70000]
        first = vol._reader  # type: ignore[attr-defined]
        with pytest.raises(VolumeNotFound):
            vol.read_bytes("d/missing")
        with pytest.raises(VolumeIOError, match="is a directory"):
            vol.read_head("d", 4)
        assert vol.read_bytes("d/small") == b"0123456789"
        assert vol._reader is first  # type: ignore[attr-defined]  # one context for all
        vol.write_atomic("d/small", b"a longer content than before" * 300)
        assert vol.read_bytes("d/small") == b"a longer content than before" * 300
        time.sleep(nfs_lab.lease + 1)  # its client state expires at the server
        assert vol.read_head("d/big", 10) == big[:10]
        assert vol._reader is not first  # type: ignore[attr-defined]
    finally:
        vol.remove_tree("d")
        vol.close()


def test_file_heads_come_from_one_exchange_with_the_server(
        nfs_lab: lab.NfsLab, monkeypatch: pytest.MonkeyPatch) -> None:
    """read_heads sends a COMPOUND per file (LOOKUP, GETATTR, READ with the anonymous
    stateid) before awaiting any answer, and gets what the file-by-file way gets: the
    first bytes and the size, None for a missing file or directory, and the file-by-file
    way's error for a directory. None of them falls back to that way."""
    from lockfs import FileHead, Volume

    sub = _name("hd")
    vol = open_volume(nfs_lab.url(sub))
    ordinary = Volume.read_heads
    fallbacks: list[list[tuple[str, int]]] = []

    def counted(self: Volume, wanted: list[tuple[str, int]]) -> list[FileHead | None]:
        fallbacks.append(list(wanted))
        return ordinary(self, wanted)

    try:
        vol.makedirs("d/sub")
        vol.write_atomic("d/small", b"0123456789")
        vol.write_atomic("d/empty", b"")
        big = os.urandom(70000)
        (nfs_lab.export_dir / sub / "d" / "big").write_bytes(big)
        wanted = [("d/small", 4), ("d/small", 100), ("d/big", 8192), ("d/missing", 4),
                  ("gone/x", 4), ("d/empty", 8), ("d/big", 0)]
        expect = ordinary(vol, wanted)
        assert expect == [FileHead(10, b"0123"), FileHead(10, b"0123456789"),
                          FileHead(70000, big[:8192]), None, None, FileHead(0, b""),
                          FileHead(70000, b"")]
        monkeypatch.setattr(Volume, "read_heads", counted)
        assert vol.read_heads(wanted) == expect
        assert fallbacks == []
        with pytest.raises(VolumeIOError, match="is a directory"):
            vol.read_heads([("d/small", 4), ("d/sub", 4)])
        assert fallbacks == [[("d/sub", 4)]]  # what the server would not READ
    finally:
        monkeypatch.undo()
        vol.remove_tree("d")
        vol.close()


def test_lease_is_read_from_the_server(nfs_lab: lab.NfsLab) -> None:
    plain = nfs_lab.url("").split("?")[0]
    for url, lease, source in ((plain, nfs_lab.lease, "server"),
                               (plain + "?lease=600", nfs_lab.lease, "server"),
                               (plain + "?lease=2", 2, "url")):
        vol = open_volume(url)
        try:
            vol.listdir("")  # the first connection asks the server
            assert (vol.lease_seconds, vol.lease_source) == (lease, source), vol.lease_note
            assert vol.timeout == lab_timeout(lease)  # type: ignore[attr-defined]
        finally:
            vol.close()
    vol = open_volume(plain + "?lease=600")
    try:
        vol.listdir("")
        assert "longer than the server's" in vol.lease_note  # type: ignore[attr-defined]
    finally:
        vol.close()


def lab_timeout(lease: float) -> int:
    from lockfs.nfs4 import default_timeout

    return default_timeout(lease)


def test_exclusive_lock_excludes_other_host_and_renewal_keeps_it(nfs_lab: lab.NfsLab) -> None:
    url, path = nfs_lab.url(""), _name("master")
    a = nfs_lab.holder("a", url, path)
    b = c = None
    try:
        locked = a.expect("locked")
        b = nfs_lab.holder("b", url, path)
        b.expect("refused")
        # well past the lease, a keeps the lock only because it renews it
        c = nfs_lab.holder("b", url, path, wait=2.5 * nfs_lab.lease, poll=0.5)
        refused = c.expect("refused", timeout=4 * nfs_lab.lease)
        assert refused["t"] - locked["t"] >= 2.5 * nfs_lab.lease
        assert a.saw("lost") is None and a.saw("suspect") is None
        a.send("renew")
        assert a.expect("renewed")["answered"] is True
        a.send("write")
        a.expect("wrote")
        a.send("quit")
        a.expect("closed")
        d = nfs_lab.holder("b", url, path)
        d.expect("locked")  # released by close: at once
        d.stop()
    finally:
        for p in (a, b, c):
            if p is not None:
                p.stop()


def test_kill_9_hands_the_lock_over_after_the_lease(nfs_lab: lab.NfsLab) -> None:
    url, path = nfs_lab.url(""), _name("master")
    a = nfs_lab.holder("a", url, path)
    b = None
    try:
        a.expect("locked")
        b = nfs_lab.holder("b", url, path, wait=6 * nfs_lab.lease, poll=0.1)
        b.expect("opened")
        time.sleep(0.5)
        killed = time.time()
        os.kill(a.proc.pid, signal.SIGKILL)  # ip netns exec execs the interpreter
        got = b.expect("locked", timeout=6 * nfs_lab.lease)
        handoff = got["t"] - killed
        print(f"\nnfs4 lab: kill -9 -> other host holds the lock after {handoff:.2f}s "
              f"(lease {nfs_lab.lease}s)")
        # the server keeps the lock until the holder's lease runs out (renewed <= lease/3
        # before the kill), then hands it over within a few seconds
        assert 2 * nfs_lab.lease / 3 - 0.5 <= handoff <= 3 * nfs_lab.lease
    finally:
        for p in (a, b):
            if p is not None:
                p.stop()


def test_cut_link_loses_lock_before_other_host_takes_it(nfs_lab: lab.NfsLab) -> None:
    url, path = nfs_lab.url(""), _name("master")
    a = nfs_lab.holder("a", url, path)
    b = None
    try:
        a.expect("locked")
        b = nfs_lab.holder("b", url, path, wait=6 * nfs_lab.lease, poll=0.1)
        b.expect("opened")
        time.sleep(0.5)
        cut = time.time()
        nfs_lab.cut("a")
        suspect = a.expect("suspect", timeout=2 * nfs_lab.lease)
        lost = a.expect("lost", timeout=2 * nfs_lab.lease)
        got = b.expect("locked", timeout=6 * nfs_lab.lease)
        print(f"\nnfs4 lab: link cut -> holder SUSPECT after {suspect['t'] - cut:.2f}s, "
              f"LOST after {lost['t'] - cut:.2f}s, other host holds the lock after "
              f"{got['t'] - cut:.2f}s (lease {nfs_lab.lease}s)")
        assert suspect["t"] < lost["t"]
        assert lost["t"] - cut <= nfs_lab.lease + 0.3
        assert got["t"] >= lost["t"], "the other host got the lock while the holder trusted it"
        assert got["t"] - cut >= 2 * nfs_lab.lease / 3 - 0.5
        nfs_lab.heal("a")
        a.send("write")
        failed = a.expect("write_failed", "wrote", timeout=3 * nfs_lab.lease)
        assert failed["event"] == "write_failed", failed
        assert failed["error"] == "LockLostError"
        # not only this side's belief: the server itself refuses the old stateid
        a.send("renew")
        said = a.expect("renew_failed", "renewed", timeout=3 * nfs_lab.lease)
        assert said["event"] == "renew_failed", said
        assert said["error"] == "LockLostError" and "NFS4ERR_" in said["message"], said
        print(f"nfs4 lab: after heal the server answers the old holder: {said['message']}")
        b.send("write")
        b.expect("wrote")
    finally:
        nfs_lab.heal("a")
        for p in (a, b):
            if p is not None:
                p.stop()


def test_shared_locks_coexist_and_exclude_exclusive(nfs_lab: lab.NfsLab) -> None:
    url, path = nfs_lab.url(""), _name("active")
    procs = []
    try:
        a = nfs_lab.holder("a", url, path, mode="shared")
        procs.append(a)
        a.expect("locked")
        b = nfs_lab.holder("b", url, path, mode="shared")
        procs.append(b)
        b.expect("locked")
        c = nfs_lab.holder("b", url, path, mode="exclusive")
        procs.append(c)
        c.expect("refused")
        # a probe without taking the lock (dspmq): LOCKT sees the holders
        vol = open_volume(url)
        try:
            with vol.open(path) as f:
                assert f.conflicting_lock(LockMode.EXCLUSIVE)  # type: ignore[attr-defined]
        finally:
            vol.close()
    finally:
        for p in procs:
            p.stop()


def test_lock_file_records_over_nfs4(nfs_lab: lab.NfsLab) -> None:
    from lockfs.lockfile import HolderRecord, LockFile, peek

    vol = open_volume(nfs_lab.url(""))
    name = _name("lockfile")
    first, second = LockFile(vol, name), LockFile(vol, name)
    try:
        record = HolderRecord("host-a", 7, time.time(), os.getpid(), generation=3)
        assert first.acquire(LockMode.EXCLUSIVE, record)
        assert first.read_record() == record
        assert not second.acquire(LockMode.EXCLUSIVE, keep_open=True)
        assert not second.acquire(LockMode.EXCLUSIVE, keep_open=True)  # LOCKT on the spare
        assert peek(vol, name) == (record, True)
        first.release()
        assert second.acquire(LockMode.EXCLUSIVE)
        assert second.previous == record
        assert not second.lost()
    finally:
        first.release()
        second.release()
        vol.close()


def test_hung_server_raises_stalled_and_loses_the_lock(nfs_lab: lab.NfsLab) -> None:
    pid = nfs_lab.server_pid()
    vol = open_volume(nfs_lab.url(""))
    name = _name("stall")
    f = vol.open(name, create=True)
    stopped = False
    try:
        assert f.try_lock(LockMode.EXCLUSIVE)
        assert f.reachability() is Reachability.OK
        timeout = vol.timeout  # type: ignore[attr-defined]
        stopped = True
        assert nfs_lab.stop_server() == pid
        t0 = time.monotonic()
        with pytest.raises(VolumeStalled):
            f.pwrite(b"x", 0)
        assert time.monotonic() - t0 <= timeout + 1.5
        if not f.lock_lost():
            assert f.reachability() is Reachability.SUSPECT
        with pytest.raises(VolumeStalled):
            vol.stat(name)
        assert vol.reachability() is Reachability.SUSPECT
        deadline = time.monotonic() + nfs_lab.lease + 1
        while not f.lock_lost() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert f.lock_lost() and f.reachability() is Reachability.LOST
        os.kill(pid, signal.SIGCONT)
        stopped = False
        with pytest.raises(LockLostError):
            f.pwrite(b"x", 0)
        # the server answers again (a timed-out WRITE may or may not have landed: unknown)
        assert vol.stat(name).size in (0, 1)
        assert vol.reachability() is Reachability.OK
    finally:
        if stopped:
            os.kill(pid, signal.SIGCONT)
        f.close()
        vol.close()


def test_idle_file_follows_a_rename_after_its_client_state_expires(
        nfs_lab: lab.NfsLab) -> None:
    """Each open file is its own NFS client; an idle one's state expires after the lease
    and it is opened again by path, which must be the path it was renamed to (as a
    checkpoint renames q.new to q) and must still name the same file."""
    sub = _name("ren")
    vol, other = open_volume(nfs_lab.url(sub)), open_volume(nfs_lab.url(sub))
    try:
        vol.makedirs("d")
        moved = vol.open("d/q.new", create=True)
        moved.pwrite(b"moved data", 0)
        moved.fdatasync()
        vol.rename("d/q.new", "d/q")
        assert moved.path == "d/q"
        replaced = vol.open("d/r", create=True)
        replaced.pwrite(b"old", 0)
        replaced.fdatasync()
        other.write_atomic("d/r", b"stranger")  # the path now names another file
        # and two idle files never locked: a lock test and a first lock on expired state
        tested, locked = vol.open("d/lt", create=True), vol.open("d/lk", create=True)
        time.sleep(nfs_lab.lease * 2 + 1)  # all idle: their client state expires
        assert moved.pread(10, 0) == b"moved data"
        with pytest.raises(VolumeIOError):
            replaced.pread(3, 0)
        # opened again and asked once more, as a read or a write is (not LockLostError:
        # these files held no lock to lose)
        assert tested.conflicting_lock(LockMode.EXCLUSIVE) is False
        assert locked.try_lock(LockMode.EXCLUSIVE)
        assert not locked.lock_lost()
        seen = other.open("d/lk")
        assert seen.conflicting_lock(LockMode.EXCLUSIVE) is True
        for f in (moved, replaced, tested, locked, seen):
            f.close()
    finally:
        vol.close()
        other.close()


def test_a_write_on_expired_state_waits_for_the_write_fence(nfs_lab: lab.NfsLab) -> None:
    """An idle file's client state expires; opening it again would let a write that was
    held up (a stopped process) land after another instance took over. So a write on
    re-established state goes through the volume's write fence first; a read does not."""
    sub = _name("fence")
    vol = open_volume(nfs_lab.url(sub))
    calls: list[str] = []
    owned = [False]

    def fence() -> None:
        calls.append("fence")
        if not owned[0]:
            raise RuntimeError("not ours any more")

    vol.write_fence = fence
    try:
        vol.makedirs("d")
        f = vol.open("d/data", create=True)
        f.pwrite(b"before", 0)
        f.fdatasync()
        assert calls == []  # live state: no fence on the hot path
        time.sleep(nfs_lab.lease * 2 + 1)  # idle: the file's client state expires
        with pytest.raises(RuntimeError):
            f.pwrite(b"late!!", 0)
        assert calls == ["fence"]
        assert f.pread(6, 0) == b"before"  # reads open again without the fence
        time.sleep(nfs_lab.lease * 2 + 1)
        owned[0] = True
        f.pwrite(b"after!", 0)
        f.fdatasync()
        assert f.pread(6, 0) == b"after!" and calls == ["fence", "fence"]
        f.close()
    finally:
        vol.close()
