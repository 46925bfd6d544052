"""The master lock file must still be the one its path names (verify and the standby's
takeover): lock files removed or replaced by hand under a running pair."""

from __future__ import annotations

import os

import pytest

from lockfs.lockfile import LockFile
from lockfs.posix import PosixVolume
from lockfs.volume import LockMode
from miqm.errors import OwnershipLostError
from miqm.ha.controller import Controller, Verdict


@pytest.fixture()
def ctl(tmp_path, monkeypatch) -> Controller:
    monkeypatch.setenv("MIQM_HOSTNAME", "hosta")
    c = Controller("QM1", True, Verdict(None))
    c.data = PosixVolume(str(tmp_path))
    c.master = LockFile(c.data, "master")
    assert c.master.acquire(LockMode.EXCLUSIVE, c.holder(1))
    c.record = c.holder(1)
    c.master.write_record(c.record)
    yield c
    c.master.release()


def _identify_by(ctl: Controller, how: str) -> None:
    """Make the held master file tell who it is as a backend does: a kernel descriptor
    (a local filesystem, a kernel mount), only an id (nfs4://: the server's fileid), or
    neither (the content decides)."""
    assert ctl.master is not None and ctl.master.file is not None
    f = ctl.master.file
    if how != "fd":
        f.direct_fd = lambda: None  # type: ignore[method-assign]
    if how == "content":
        f.file_id = lambda: None  # type: ignore[method-assign]


@pytest.mark.parametrize("how", ["fd", "file_id", "content"])
def test_removed_or_replaced_master_is_noticed(ctl: Controller, tmp_path, how: str) -> None:
    _identify_by(ctl, how)
    assert ctl._master_at_its_path()
    ctl.verify_master()
    os.unlink(tmp_path / "master")
    assert not ctl._master_at_its_path()
    with pytest.raises(OwnershipLostError, match="removed or replaced"):
        ctl.verify_master()
    (tmp_path / "master").write_bytes(b"\0" * 512)  # a new, empty lock file
    assert not ctl._master_at_its_path()


@pytest.mark.parametrize("how", ["fd", "file_id"])
def test_a_master_copied_back_byte_for_byte_is_another_file(ctl: Controller, tmp_path,
                                                            how: str) -> None:
    """A 'stale lock' clean-up that saves master, removes it and puts the same bytes
    back: the record reads the same, but the lock is on a file nobody else opens."""
    _identify_by(ctl, how)
    saved = (tmp_path / "master").read_bytes()
    os.unlink(tmp_path / "master")
    (tmp_path / "master").write_bytes(saved)
    assert not ctl._master_at_its_path()
    with pytest.raises(OwnershipLostError, match="removed or replaced"):
        ctl.verify_master()


def test_only_the_content_cannot_tell_a_byte_for_byte_copy(ctl: Controller,
                                                           tmp_path) -> None:
    """A backend that knows neither a descriptor nor an id is left with the content
    (docs/ha.md says so): the same bytes pass."""
    _identify_by(ctl, "content")
    saved = (tmp_path / "master").read_bytes()
    os.unlink(tmp_path / "master")
    (tmp_path / "master").write_bytes(saved)
    assert ctl._master_at_its_path()


def test_a_standby_lets_go_of_a_lock_on_a_removed_file(ctl: Controller, tmp_path) -> None:
    os.unlink(tmp_path / "master")
    assert not ctl._stale_master_released()
    assert ctl.master is not None and not ctl.master.held
    fresh = LockFile(ctl.data, "master")  # the next poll opens the path afresh
    assert fresh.acquire(LockMode.EXCLUSIVE)
    ctl.master = fresh
    assert ctl._stale_master_released() and fresh.held
