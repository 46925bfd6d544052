"""Chaos: a standby paused (SIGSTOP) past the NFSv4 lease while its active dies.

Found by the lab campaign's ``pause-standby`` fault: resumed, the standby's next attempt
on ``master`` went through the file it keeps open between attempts, whose client state
the server had expired meanwhile; the attempt raised LockLostError (NFS4ERR_EXPIRED on
the LOCKT), which the poll loop did not expect, and the standby ended with AMQ6119
(exit 71) while its active was dead: nobody took over. An attempt that fails that way
holds nothing and writes nothing; it is tried again at the next poll with a fresh file.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lockfs.errors import LockLostError, VolumeStalled
from lockfs.lockfile import LockFile
from lockfs.posix import PosixVolume
from lockfs.volume import LockMode
from miqm.ha.controller import Controller, Verdict


@pytest.fixture()
def standby(tmp_path, monkeypatch) -> Iterator[Controller]:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("MIQM_HOSTNAME", "hostb")
    monkeypatch.setenv("MIQM_DATA_ROOT", str(tmp_path / "root"))
    c = Controller("QM1", True, Verdict(None))
    (tmp_path / "qm.ini").write_text("")  # the queue manager's data directory
    c.data = PosixVolume(str(tmp_path))
    c.master = LockFile(c.data, "master")
    said: list[str] = []
    c.say = lambda number, text=None, **f: said.append(number) or ""  # type: ignore[method-assign]
    c.said = said  # type: ignore[attr-defined]
    yield c
    c.master.release()


@pytest.mark.parametrize("error", [
    LockLostError('lock test master: NFS4ERR_EXPIRED(-5)', path="master"),
    VolumeStalled("lock test master: no answer", path="master"),
])
def test_a_failed_attempt_on_master_leaves_the_standby_polling(
        standby: Controller, monkeypatch, error: Exception) -> None:  # type: ignore[no-untyped-def]
    assert standby.master is not None
    holder = LockFile(standby.data, "master")  # the active elsewhere
    assert holder.acquire(LockMode.EXCLUSIVE)
    calls = {"n": 0}
    real = standby.master.acquire

    def acquire(*a, **k):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] <= 2:
            raise error
        return real(*a, **k)

    monkeypatch.setattr(standby.master, "acquire", acquire)
    assert standby._standby_attempt() is None
    assert standby._standby_attempt() is None
    assert standby.said == ["AMQ1300"]  # said once
    assert standby._standby_attempt() is False  # reached again: the active still holds it
    assert standby.said == ["AMQ1300", "AMQ1301"]
    holder.release()  # the active died
    assert standby._standby_attempt() is True
    assert standby.master.held


def test_an_unexpected_error_still_ends_the_standby(standby: Controller,
                                                    monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Only the failures of the filesystem are retried; a bug is not swallowed."""
    assert standby.master is not None

    def acquire(*a, **k):  # type: ignore[no-untyped-def]
        raise RuntimeError("bug")

    monkeypatch.setattr(standby.master, "acquire", acquire)
    with pytest.raises(RuntimeError):
        standby._standby_attempt()


def _lost_standby_lock(standby: Controller, monkeypatch) -> LockFile:  # type: ignore[no-untyped-def]
    """A standby lock as the nfs4 backend leaves it after the lease passed at the server
    (the instance was paused past it): the lock is gone there, and lost() says so."""
    lock = LockFile(standby.data, "standby")
    assert lock.acquire(LockMode.EXCLUSIVE, standby.holder())
    lock.release()  # gone at the server
    lock._file = object()  # type: ignore[assignment]  # ...though this side kept it
    monkeypatch.setattr(lock, "lost", lambda: True)
    monkeypatch.setattr(lock, "release", lambda: setattr(lock, "_file", None))
    standby.standby_lock = lock
    return lock


def test_a_lost_standby_lock_is_taken_again_when_free(standby: Controller,
                                                      monkeypatch) -> None:  # type: ignore[no-untyped-def]
    old = _lost_standby_lock(standby, monkeypatch)
    assert standby._standby_lock_kept()
    assert standby.standby_lock is not None and standby.standby_lock is not old
    assert standby.standby_lock.held
    assert standby._standby_lock_kept()  # held: nothing more to do
    standby.standby_lock.release()


def test_a_lost_standby_lock_another_standby_holds_ends_this_one(standby: Controller,
                                                                 monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Found with a third instance started while the standby was paused past the lease:
    both ran as standbys, polling for master, and a restarted active was refused as a
    third instance (AMQ1103)."""
    _lost_standby_lock(standby, monkeypatch)
    from lockfs.lockfile import HolderRecord

    third = LockFile(standby.data, "standby")
    assert third.acquire(LockMode.EXCLUSIVE, HolderRecord("hostc", 99, 1.0, 4242))
    try:
        assert not standby._standby_lock_kept()
        assert standby.standby_lock is None
    finally:
        third.release()


def test_a_standby_lock_attempt_that_fails_is_tried_at_the_next_poll(
        standby: Controller, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    _lost_standby_lock(standby, monkeypatch)
    real = LockFile.acquire
    calls = {"n": 0}

    def acquire(self, *a, **k):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 1:
            raise VolumeStalled("lock standby: no answer", path="standby")
        return real(self, *a, **k)

    monkeypatch.setattr(LockFile, "acquire", acquire)
    assert standby._standby_lock_kept()  # cannot tell: polls on
    assert standby.standby_lock is not None and not standby.standby_lock.held
    assert standby._standby_lock_kept()  # the next poll takes it
    assert standby.standby_lock.held
    standby.standby_lock.release()


def test_its_own_lock_still_held_at_the_server_does_not_end_the_standby(
        standby: Controller, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The NFS server paused past the lease: this side counts the lock lost while the
    server, once resumed, still holds it for this instance's old client. The fresh
    attempt is refused by the instance's own lock: not another standby."""
    _lost_standby_lock(standby, monkeypatch)
    own = LockFile(standby.data, "standby")  # stands in for the old client's lock
    assert own.acquire(LockMode.EXCLUSIVE, standby.holder())
    try:
        assert standby._standby_lock_kept()
        assert standby.standby_lock is not None and not standby.standby_lock.held
    finally:
        own.release()
    assert standby._standby_lock_kept()  # its lease ended: taken again
    assert standby.standby_lock.held
    standby.standby_lock.release()


def test_an_empty_mount_point_is_unreachable_not_a_master_to_take(
        standby: Controller, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Found with the data directory's mount dropped under the standby (an empty tmpfs
    mounted over it in the standby's mount namespace) as its active was killed: the
    attempt created ``master`` in the empty mount point and was granted it; the missing
    qmstatus.ini read as 'Ended normally' and the standby ended, saying its active had
    ended without permitting switchover. Now it is a filesystem it cannot reach (AMQ1300):
    nothing created, and it takes over once the directory is back."""
    assert standby.master is not None
    empty = tmp_path / "mountpoint"
    empty.mkdir()
    real = standby.data
    standby.data = PosixVolume(str(empty))
    standby.master = LockFile(standby.data, "master")
    assert standby._standby_attempt() is None
    assert standby._standby_attempt() is None
    assert sorted(p.name for p in empty.iterdir()) == []  # no master made there
    assert standby.said == ["AMQ1300"]
    standby.data = real  # mounted again
    standby.master = LockFile(real, "master")
    assert standby._standby_attempt() is True
    assert standby.said == ["AMQ1300", "AMQ1301"]


def test_master_made_a_directory_is_said_as_such_and_polled_on(
        standby: Controller, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``master`` replaced by a directory (seen on real processes: the active stopped at
    its verify, and the standby said it 'cannot reach the shared filesystem', which sent
    the administrator to the network): AMQ6062 names the file that is a directory; the
    standby polls on and takes over once it is a file again."""
    assert standby.master is not None
    (tmp_path / "master").mkdir()
    assert standby._standby_attempt() is None
    assert standby._standby_attempt() is None
    assert standby.said == ["AMQ6062"]  # said once
    (tmp_path / "master").rmdir()
    assert standby._standby_attempt() is True
    assert standby.said == ["AMQ6062", "AMQ1301"]
