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


@pytest.mark.parametrize("by_content", [False, True])
def test_removed_or_replaced_master_is_noticed(ctl: Controller, tmp_path,
                                               by_content: bool) -> None:
    assert ctl.master is not None and ctl.master.file is not None
    if by_content:  # a backend with no kernel descriptor (nfs4://): the content decides
        ctl.master.file.direct_fd = lambda: None  # type: ignore[method-assign]
    assert ctl._master_at_its_path()
    ctl.verify_master()
    os.unlink(tmp_path / "master")
    assert not ctl._master_at_its_path()
    with pytest.raises(OwnershipLostError, match="removed or replaced"):
        ctl.verify_master()
    (tmp_path / "master").write_bytes(b"\0" * 512)  # a new, empty lock file
    assert not ctl._master_at_its_path()


def test_a_standby_lets_go_of_a_lock_on_a_removed_file(ctl: Controller, tmp_path) -> None:
    os.unlink(tmp_path / "master")
    assert not ctl._stale_master_released()
    assert ctl.master is not None and not ctl.master.held
    fresh = LockFile(ctl.data, "master")  # the next poll opens the path afresh
    assert fresh.acquire(LockMode.EXCLUSIVE)
    ctl.master = fresh
    assert ctl._stale_master_released() and fresh.held
