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
