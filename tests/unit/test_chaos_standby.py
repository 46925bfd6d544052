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
