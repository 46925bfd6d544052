"""The fault-injecting volume wrapper (lockfs.faults) over a local directory: stalls,
EIO, lost locks, torn writes, suspect reachability, and MIQM_FAULTS parsing."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from lockfs import LockMode, Reachability
from lockfs.errors import LockLostError, VolumeIOError
from lockfs.faults import ENV, Fault, FaultyVolume, faults_from_env, wrap_from_env
from lockfs.lockfile import HolderRecord, LockFile
from lockfs.posix import PosixVolume


def _vol(tmp_path: Path, *faults: Fault) -> FaultyVolume:
    return FaultyVolume(PosixVolume(str(tmp_path)), list(faults))


def test_no_fault_passes_everything_through(tmp_path: Path) -> None:
    vol = _vol(tmp_path)
    vol.makedirs("d")
    with vol.open("d/f", create=True) as f:
        f.pwrite(b"hello", 0)
        f.fdatasync()
        assert f.pread(10, 0) == b"hello" and f.size() == 5
        assert f.try_lock(LockMode.EXCLUSIVE)
        assert not f.lock_lost() and f.reachability() is Reachability.OK
        assert f.lease_age() is None
        f.unlock()
    vol.write_atomic("d/g", b"x")
    vol.rename("d/g", "d/h")
    assert vol.listdir("d") == ["f", "h"] and vol.stat("d/h").size == 1
    assert vol.reachability() is Reachability.OK
    assert vol.lease_seconds is None and vol.describe() == str(tmp_path)


def test_eio_by_op_and_path_glob(tmp_path: Path) -> None:
    vol = _vol(tmp_path, Fault("fdatasync", "S*.LOG", "eio"),
               Fault("rename", "qm.ini", "eio"))
    with vol.open("S0000001.LOG", create=True) as f:
        f.pwrite(b"a", 0)
        with pytest.raises(VolumeIOError) as info:
            f.fdatasync()
        assert info.value.errno == 5 and info.value.path == "S0000001.LOG"
    with vol.open("amqhlctl.lfh", create=True) as g:
        g.fdatasync()  # another name: untouched
    with pytest.raises(VolumeIOError):
        vol.write_atomic("qm.ini", b"x")  # the rename onto qm.ini fails
    assert not (tmp_path / "qm.ini").exists()


def test_times_and_after(tmp_path: Path) -> None:
    once = Fault("pread", "a", "eio", times=1)
    later = Fault("pread", "b", "eio", after=0.3)
    vol = _vol(tmp_path, once, later)
    a, b = vol.open("a", create=True), vol.open("b", create=True)
    with pytest.raises(VolumeIOError):
        a.pread(1, 0)
    a.pread(1, 0)  # fired once only
    assert once.fired == 1
    b.pread(1, 0)  # not yet
    time.sleep(0.35)
    with pytest.raises(VolumeIOError):
        b.pread(1, 0)
    a.close()
    b.close()


def test_armed_by_a_file_fires_only_once_the_file_exists(tmp_path: Path) -> None:
    trigger = tmp_path / "armed"
    fault = Fault("pread", "a", "eio", armed=str(trigger))
    (tmp_path / "vol").mkdir()
    vol = _vol(tmp_path / "vol", fault)
    a = vol.open("a", create=True)
    for _ in range(3):
        a.pread(1, 0)  # not armed yet: passes through
    assert fault.fired == 0
    trigger.touch()  # the event the test waited for
    with pytest.raises(VolumeIOError):
        a.pread(1, 0)
    trigger.unlink()  # once armed, it stays armed
    with pytest.raises(VolumeIOError):
        a.pread(1, 0)
    a.close()


def test_torn_write_leaves_a_prefix(tmp_path: Path) -> None:
    vol = _vol(tmp_path, Fault("pwrite", "log", "tear", keep=4, times=1))
    with vol.open("log", create=True) as f:
        with pytest.raises(VolumeIOError):
            f.pwrite(b"ABCDEFGH", 0)
        assert f.pread(100, 0) == b"ABCD"
        f.pwrite(b"ABCDEFGH", 0)
        assert f.pread(100, 0) == b"ABCDEFGH"


def test_stall_for_seconds_and_until_released(tmp_path: Path) -> None:
    short = Fault("stat", "x", "stall", seconds=0.3, times=1)
    held = Fault("pread", "y", "stall")  # an hour unless released
    vol = _vol(tmp_path, short, held)
    (tmp_path / "x").write_bytes(b"")
    t0 = time.monotonic()
    vol.stat("x")
    assert 0.25 <= time.monotonic() - t0 < 2
    t0 = time.monotonic()
    vol.stat("x")  # times=1: no stall now
    assert time.monotonic() - t0 < 0.2
    f = vol.open("y", create=True)
    done = threading.Event()

    def reader() -> None:
        f.pread(1, 0)
        done.set()

    threading.Thread(target=reader, daemon=True).start()
    assert not done.wait(0.3)  # stalled
    held.release.set()
    assert done.wait(2)
    f.close()


def test_lost_lock_is_lost_for_good(tmp_path: Path) -> None:
    lost = Fault("lock_lost", "master", "lost", after=0.2)
    vol = _vol(tmp_path, lost)
    f = vol.open("master", create=True)
    assert f.try_lock(LockMode.EXCLUSIVE)
    assert not f.lock_lost() and f.reachability() is Reachability.OK
    time.sleep(0.25)
    assert f.lock_lost()
    assert f.reachability() is Reachability.LOST
    for call in (lambda: f.pread(1, 0), lambda: f.pwrite(b"x", 0), f.fdatasync):
        with pytest.raises(LockLostError):
            call()
    f.close()  # closing still works
    other = vol.open("standby", create=True)
    assert other.reachability() is Reachability.OK
    other.close()


def test_lost_fires_from_reachability_too(tmp_path: Path) -> None:
    vol = _vol(tmp_path, Fault("reachability", "master", "lost"))
    g = vol.open("master", create=True)
    assert not g.lock_lost()
    assert g.reachability() is Reachability.LOST
    assert g.lock_lost()  # and it stays lost everywhere
    with pytest.raises(LockLostError):
        g.pread(1, 0)
    g.close()


def test_suspect_until_released_or_timed_out(tmp_path: Path) -> None:
    sus = Fault("reachability", "master", "suspect")
    brief = Fault("reachability", "active", "suspect", seconds=0.2)
    vol = _vol(tmp_path, sus, brief)
    m, a = vol.open("master", create=True), vol.open("active", create=True)
    assert m.reachability() is Reachability.SUSPECT
    m.pwrite(b"x", 0)  # SUSPECT is advice to the caller, not an error
    assert a.reachability() is Reachability.SUSPECT
    time.sleep(0.25)
    assert a.reachability() is Reachability.OK
    assert m.reachability() is Reachability.SUSPECT
    sus.release.set()
    assert m.reachability() is Reachability.OK
    m.close()
    a.close()


def test_lockfile_sees_injected_faults(tmp_path: Path) -> None:
    lost = Fault("lock_lost", "master", "lost", after=0.2)
    vol = _vol(tmp_path, lost)
    lock = LockFile(vol, "master")
    rec = HolderRecord("h", 1, time.time(), 1, generation=1)
    assert lock.acquire(LockMode.EXCLUSIVE, rec)
    assert lock.read_record() == rec and lock.reachability() is Reachability.OK
    time.sleep(0.25)
    assert lock.lost() and lock.reachability() is Reachability.LOST
    lock.release()
    assert lock.reachability() is Reachability.OK


def test_env_parsing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(ENV, raising=False)
    inner = PosixVolume(str(tmp_path))
    assert wrap_from_env(inner, "data") is inner
    monkeypatch.setenv(ENV, '[{"volume": "log", "op": "open", "kind": "eio"}, '
                            '{"op": "pread", "path": "master", "kind": "stall", '
                            '"seconds": 5, "after": 2}]')
    data = faults_from_env("data")
    assert [(f.op, f.kind, f.seconds, f.after) for f in data] == [("pread", "stall", 5, 2)]
    assert [f.op for f in faults_from_env("log")] == ["open", "pread"]
    wrapped = wrap_from_env(inner, "log")
    assert isinstance(wrapped, FaultyVolume)
    with pytest.raises(VolumeIOError):
        wrapped.open("x", create=True)
    monkeypatch.setenv(ENV, '{"op": "fdatasync", "kind": "eio"}')  # one object
    assert [f.op for f in faults_from_env("data")] == ["fdatasync"]


@pytest.mark.parametrize("raw", ["not json", '[{"op": "x", "kind": "explode"}]',
                                 '[{"op": "x", "colour": "red"}]', "[1]", '[{"kind": "eio"}]'])
def test_env_errors_are_loud(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv(ENV, raw)
    with pytest.raises(ValueError, match=ENV):
        faults_from_env("data")


def test_unknown_kind_rejected() -> None:
    with pytest.raises(ValueError, match="kind"):
        Fault("pread", kind="melt")


def test_stop_fault_is_the_backends_pause_point_with_skip_and_contains(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``stop`` is installed as the inner volume's ``before_send`` (the backend calls it
    right before a WRITE goes out); matching sends after ``skip`` write the report and
    stop this thread (here the stop is recorded instead of SIGSTOP)."""
    import json
    import signal

    stops: list[tuple[int, int]] = []
    monkeypatch.setattr(signal, "pthread_kill", lambda tid, sig: stops.append((tid, sig)))
    report = tmp_path / "stopped.json"
    inner = PosixVolume(str(tmp_path))
    vol = FaultyVolume(inner, [Fault("pwrite", "S*.LOG", "stop", skip=1, times=1,
                                     contains="mark", report=str(report))])
    hook = inner.before_send
    assert hook is not None
    hook("pwrite", "S1.LOG", 0, b"nothing")  # not containing it: passes
    hook("pwrite", "other", 0, b"mark")  # another path: passes
    hook("pwrite", "S1.LOG", 0, b"mark 1")  # the skipped one goes out
    assert not stops and not report.exists()
    hook("pwrite", "S1.LOG", 3584, b"mark 2")
    assert stops == [(threading.get_ident(), signal.SIGSTOP)]
    got = json.loads(report.read_text())
    assert got["offset"] == 3584 and bytes.fromhex(got["data"]) == b"mark 2"
    hook("pwrite", "S1.LOG", 7168, b"mark 3")  # times=1: once only
    assert len(stops) == 1
    assert vol.faults[0].fired == 1


def test_lease_anchor_goes_to_the_inner_volume_and_renew_after_checks_the_lock(
        tmp_path: Path) -> None:
    inner = PosixVolume(str(tmp_path))
    vol = FaultyVolume(inner, [Fault("renew_after", "master", "lost")])
    with vol.open("master", create=True) as f:
        vol.lease_anchor = f
        assert inner.lease_anchor is f and vol.lease_anchor is f
        assert f.try_lock(LockMode.EXCLUSIVE)
        with pytest.raises(LockLostError):
            f.renew_after(time.monotonic())  # the injected loss reaches renew_after
    with inner.open("plain", create=True) as g:
        g.renew_after(time.monotonic())  # no lease, no lock lost: nothing to do
