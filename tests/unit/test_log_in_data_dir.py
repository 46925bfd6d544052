"""A log directory that is its data directory, or lies inside it, is refused (AMQ7017).

Found by reading the controller (2026-11-28): crtmqm -ld <the new data directory> was
accepted (the log went to DataPath/QM1/QM1), and strmqm started a queue manager whose
qm.ini LogPath named its data directory. The log directory's own ``active`` lock
(controller.LOG_ACTIVE), taken so that a data directory replaced under a running active
by a copy cannot make a second active, then guards nothing: a copy of the data directory
carries the log along, and a LogPath that is the data directory written another way
('/d/QM1/') made the instance take the data directory's ``active`` twice, as the log's.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from miqm.cli import crtmqm, setmqini, strmqm
from miqm.errors import ConfigError
from miqm.ha.controller import Controller, Verdict
from miqm.paths import log_within_data
from tests.unit.test_cli_mqadmin import one_line, run


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This host's data root, for a queue manager made here."""
    monkeypatch.setenv("MIQM_DATA_ROOT", str(tmp_path / "root"))
    monkeypatch.setenv("MIQM_HOSTNAME", "hosta")
    monkeypatch.delenv("MIQM_CONNECTION", raising=False)
    return tmp_path


def test_the_overlap_is_seen_however_the_paths_are_written(tmp_path: Path) -> None:
    d = str(tmp_path / "d" / "QM1")
    for same in (d, d + "/", d + "/.", str(tmp_path / "d" / "x" / ".." / "QM1")):
        said = log_within_data(d, same)
        assert said is not None and "is the data directory" in said and d in said
    said = log_within_data(d, d + "/logs/QM1")
    assert said is not None and "is inside the data directory" in said
    assert log_within_data(d, d + "X/QM1") is None  # a sibling whose name starts the same
    assert log_within_data(d, str(tmp_path / "log" / "QM1")) is None
    assert log_within_data("nfs4://srv/d/QM1?lease=10", "nfs4://srv/d/QM1/l") is not None
    assert log_within_data("nfs4://srv/d/QM1", "nfs4://srv/d/QM10") is None


def test_crtmqm_refuses_a_log_inside_the_new_data_directory(
        home: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    rc, _out, err = run(crtmqm.main, ["crtmqm", "-lf", "64", "-md", f"{home}/d", "-ld",
                                      f"{home}/d/QM1", "QM1"], capsys, monkeypatch)
    line = one_line(err)
    assert rc == 71 and line.startswith("AMQ7017: "), line
    assert f"{home}/d/QM1/QM1 is inside the data directory {home}/d/QM1" in line
    assert "leave -ld out" in line
    assert not (home / "d" / "QM1").exists()  # nothing made


def _created_with_log_path(home: Path, capsys: pytest.CaptureFixture[str],
                           monkeypatch: pytest.MonkeyPatch, log_path: str) -> Path:
    """QM1 made as crtmqm makes it, then its qm.ini LogPath set to ``log_path``."""
    rc, _out, err = run(crtmqm.main, ["crtmqm", "-lf", "64", "QM1"], capsys, monkeypatch)
    assert rc == 0, err
    data = home / "root" / "qmgrs" / "QM1"
    rc, _out, err = run(setmqini.main, ["setmqini", "-m", "QM1", "-s", "Log", "-k",
                                        "LogPath", "-v", log_path.format(data=data)],
                        capsys, monkeypatch)
    assert rc == 0, err
    return data


@pytest.mark.parametrize("log_path,says", [
    ("{data}", "is the data directory"),
    ("{data}/", "is the data directory"),
    ("{data}/log", "is inside the data directory"),
])
def test_a_start_refuses_a_log_path_in_the_data_directory_before_any_lock(
        home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        log_path: str, says: str) -> None:
    data = _created_with_log_path(home, capsys, monkeypatch, log_path)
    before = sorted(os.listdir(data))
    with pytest.raises(ConfigError) as info:
        Controller("QM1", False, Verdict(None)).setup()
    line = info.value.user_line()
    assert info.value.amq == "AMQ7017" and "\n" not in line, line
    assert says in line and str(data) in line and "setmqini -m QM1" in line
    assert sorted(os.listdir(data)) == before  # no master, no active written


def test_strmqm_says_so_in_one_line(home: Path, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    data = _created_with_log_path(home, capsys, monkeypatch, "{data}/")
    rc, _out, err = run(strmqm.main, ["strmqm", "QM1"], capsys, monkeypatch)
    line = one_line(err)
    assert rc == 71 and line.startswith("AMQ7017: ") and f"{data}/ is the data" in line
    assert not (data / "master").exists()
