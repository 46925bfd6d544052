"""dltmqm when qm.ini no longer says where the log is: nothing is deleted half-way."""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Callable

import pytest

from miqm.cli import crtmqm, dltmqm


def _run(main: Callable[[], None], argv: list[str], capsys: pytest.CaptureFixture[str],
         monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    with pytest.raises(SystemExit) as info:
        main()
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return int(info.value.code or 0), out, err


@pytest.fixture()
def created(tmp_path, monkeypatch, capsys) -> tuple[str, str]:
    """QM1 with its data and log under shared/ (crtmqm -md/-ld, as a multi-instance queue
    manager is made): (data directory, log directory)."""
    monkeypatch.setenv("MIQM_DATA_ROOT", str(tmp_path / "hosta"))
    shared = tmp_path / "shared"
    rc, _, err = _run(crtmqm.main, ["crtmqm", "-md", str(shared / "data"), "-ld",
                                    str(shared / "log"), "-lf", "64", "QM1"],
                      capsys, monkeypatch)
    assert rc == 0, err
    return str(shared / "data" / "QM1"), str(shared / "log" / "QM1")


@pytest.mark.parametrize("damage", ["", "garbage without any stanza\n", "QueueManager:\n"])
def test_a_qm_ini_that_names_no_log_path_deletes_nothing(created, capsys, monkeypatch,
                                                         damage: str) -> None:
    data, log = created
    with open(os.path.join(data, "qm.ini"), "w") as f:
        f.write(damage)
    rc, out, err = _run(dltmqm.main, ["dltmqm", "QM1"], capsys, monkeypatch)
    line = err.strip()
    assert rc == 71 and len(line.splitlines()) == 1 and line.startswith("AMQ7017: "), err
    assert "nothing was deleted" in line and "LogPath" in line
    assert os.path.isdir(data) and os.path.isfile(os.path.join(log, "amqhlctl.lfh"))
    # restored: deleted as usual, both directories
    with open(os.path.join(data, "qm.ini"), "w") as f:
        f.write(f"Log:\n   LogPath={log}\n")
    rc, out, err = _run(dltmqm.main, ["dltmqm", "QM1"], capsys, monkeypatch)
    assert rc == 0 and "deleted" in out, err
    assert not os.path.exists(data) and not os.path.exists(log)


def test_the_default_log_location_is_still_used_when_a_log_is_there(
        tmp_path, capsys, monkeypatch) -> None:
    """crtmqm without -ld: the log is at the default place, which dltmqm finds without
    qm.ini's help."""
    root = tmp_path / "hosta"
    monkeypatch.setenv("MIQM_DATA_ROOT", str(root))
    rc, _, err = _run(crtmqm.main, ["crtmqm", "-lf", "64", "QM1"], capsys, monkeypatch)
    assert rc == 0, err
    with open(root / "qmgrs" / "QM1" / "qm.ini", "w") as f:
        f.write("")
    rc, _, err = _run(dltmqm.main, ["dltmqm", "QM1"], capsys, monkeypatch)
    assert rc == 0, err
    assert not (root / "qmgrs" / "QM1").exists() and not (root / "log" / "QM1").exists()
