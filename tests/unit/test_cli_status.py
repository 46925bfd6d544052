"""dspmq on a queue manager whose data directory or qm.ini cannot be read: MQ shows
``Status not available`` (never ``Ended normally``) in every output form."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from miqm.cli import crtmqm, dspmq
from tests.unit.test_cli_mqadmin import root, run  # noqa: F401 - root is a fixture

NOT_AVAILABLE = "STATUS(Status not available)"


@pytest.fixture()
def qm1(root, capsys, monkeypatch) -> str:  # noqa: F811 - the imported fixture
    """QM1 created (with the store stubbed); its data directory's path."""
    monkeypatch.setenv("MIQM_HOSTNAME", "hosta")
    rc, _, err = run(crtmqm.main, ["crtmqm", "QM1"], capsys, monkeypatch)
    assert rc == 0, err
    return os.path.join(root, "qmgrs", "QM1")


def _dspmq(argv: list[str], capsys, monkeypatch) -> str:
    rc, out, err = run(dspmq.main, ["dspmq", *argv], capsys, monkeypatch)
    assert rc == 0 and not err, err
    return out


def test_a_readable_data_directory_shows_ended_normally(qm1, capsys, monkeypatch) -> None:
    assert "STATUS(Ended normally)" in _dspmq([], capsys, monkeypatch)


@pytest.mark.parametrize("damage", ["removed", "emptied", "no-qm.ini"])
def test_an_unreadable_data_directory_shows_status_not_available(
        qm1, damage, capsys, monkeypatch) -> None:
    if damage == "removed":
        shutil.rmtree(qm1)
    elif damage == "emptied":  # as a filesystem unmounted under the directory leaves it
        shutil.rmtree(qm1)
        os.mkdir(qm1)
    else:
        os.unlink(os.path.join(qm1, "qm.ini"))
    for argv in ([], ["-x"], ["-m", "QM1", "-o", "all"], ["-o", "standby"]):
        out = _dspmq(argv, capsys, monkeypatch)
        assert "Ended" not in out, (argv, out)
        if argv != ["-o", "standby"]:
            assert NOT_AVAILABLE in out, (argv, out)
    info = json.loads(_dspmq(["--json"], capsys, monkeypatch))
    assert info["status"] == "Status not available" and info["instances"] == []
