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
