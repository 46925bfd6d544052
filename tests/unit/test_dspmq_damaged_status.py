"""A qmstatus.ini written over with garbage, no instance running: dspmq (and the exporter,
which describes the same probe) said "Ended normally", the status of a queue manager
whose status file was never written. Nothing says how it ended, so it is "Status not
available" with one line naming the damaged file."""

from __future__ import annotations

import os
from pathlib import Path

from miqm.cli.dspmq import describe, format_text, probe


def _data_dir(tmp_path: Path, status: bytes | None) -> str:
    d = tmp_path / "QM1"
    d.mkdir()
    (d / "qm.ini").write_text("QueueManager:\n   Name=QM1\n")
    if status is not None:
        (d / "qmstatus.ini").write_bytes(status)
    return str(d)


def test_garbage_in_the_status_file_is_status_not_available(tmp_path: Path) -> None:
    path = _data_dir(tmp_path, os.urandom(300) + b"\n\x00junk")
    info = describe("QM1", probe("QM1", path), None)
    assert info["status"] == "Status not available"
    lines = format_text(info, instances=True, fields=["status"], locks=False)
    assert lines[0].endswith("STATUS(Status not available)")
    assert len(lines) == 2 and "qmstatus.ini is damaged" in lines[1]


def test_no_status_file_yet_and_a_good_one_are_read_as_before(tmp_path: Path) -> None:
    fresh = describe("QM1", probe("QM1", _data_dir(tmp_path, None)), None)
    assert fresh["status"] == "Ended normally" and "status_damaged" not in fresh
    (tmp_path / "QM1" / "qmstatus.ini").write_text(
        "QueueManagerStatus:\n   CurrentStatus=Ended immediately\n")
    ended = describe("QM1", probe("QM1", str(tmp_path / "QM1")), None)
    assert ended["status"] == "Ended immediately"


def test_a_malformed_miqm_faults_is_said_and_a_probe_bug_is_not_hidden(
        tmp_path: Path, capsys, monkeypatch) -> None:
    """dspmq took every exception of its probe for an unreadable filesystem: a malformed
    MIQM_FAULTS (the user's own input) and a bug in the probe both showed as 'Status not
    available', exit 0, without a word."""
    from miqm import paths
    from miqm.cli import dspmq
    from tests.unit.test_cli_mqadmin import run

    root = tmp_path / "root"
    monkeypatch.setenv("MIQM_DATA_ROOT", str(root))
    monkeypatch.setenv("MIQM_HOSTNAME", "hosta")
    root.mkdir()
    data = _data_dir(tmp_path, None)
    paths.register(paths.QMgrEntry("QM1", "QM1", str(root), data))
    monkeypatch.setenv("MIQM_FAULTS", "{not json")
    rc, out, err = run(dspmq.main, ["dspmq"], capsys, monkeypatch)
    assert rc == 2 and "MIQM_FAULTS" in err and len(err.strip().splitlines()) == 1, err
    monkeypatch.delenv("MIQM_FAULTS")

    def broken(name: str, data_path: str) -> dict:
        raise KeyError("holder")

    monkeypatch.setattr(dspmq, "probe", broken)
    rc, out, err = run(dspmq.main, ["dspmq"], capsys, monkeypatch)
    assert rc == 0 and "STATUS(Status not available)" in out
    assert "internal error" in err and "KeyError" in err and "QM1" in err, err
