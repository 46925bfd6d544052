"""strmqm's checks before it starts the execution controller."""

from __future__ import annotations

import errno

import pytest
import typer

import lockfs
from lockfs.errors import VolumePermissionError
from miqm.cli import strmqm


def test_read_only_data_directory_is_a_write_failure_with_what_to_do(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def read_only(location: str) -> None:
        raise VolumePermissionError(f"open {location}/qm.ini: Read-only file system",
                                    errno=errno.EROFS)

    monkeypatch.setattr(lockfs, "open_volume", read_only)
    with pytest.raises(typer.Exit) as exit_:
        strmqm._check_qm_ini("QM1", "/d/QM1")
    assert exit_.value.exit_code == 71
    line = capsys.readouterr().err.strip()
    assert line.startswith("AMQ6062: ") and "read-only" in line and "remount" in line, line
    assert "cannot read" not in line and "AMQ6119" not in line


def test_a_file_in_place_of_the_run_directory_is_one_line(
        tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """It was 'File exists: .../run. Check the path and permissions.' (the generic OSError
    line), naming neither what the directory is for nor what to do."""
    from miqm.cli import crtmqm

    monkeypatch.setenv("MIQM_DATA_ROOT", str(tmp_path / "hosta"))
    monkeypatch.setattr("sys.argv", ["crtmqm", "-lf", "64", "QM1"])
    with pytest.raises(SystemExit):
        crtmqm.main()
    (tmp_path / "hosta" / "run").write_text("")
    monkeypatch.setattr("sys.argv", ["strmqm", "-x", "QM1"])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        strmqm.main()
    assert exit_.value.code == 71
    line = capsys.readouterr().err.strip()
    assert len(line.splitlines()) == 1 and "run directory" in line, line
    assert "Move aside" in line
