"""Chaos (found reading the controller): every instance, a standby or a third instance
about to be refused included, wrote qm.ini back with its AutoConfig IniConfig files
merged in as it started, before it held any lock: a standby started while the active
ran replaced the shared qm.ini, and a ``setmqini`` on the active's host at that moment
was lost. The merge is now in memory at the start and written back only by the active
instance, read afresh, once it holds ``master``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lockfs.posix import PosixVolume
from miqm.ha.controller import Controller, Verdict

QM_INI = "TuningParameters:\n   StandbyPollInterval=2\nAutoConfig:\n   IniConfig={conf}\n"


@pytest.fixture()
def instance(tmp_path: Path, monkeypatch) -> Controller:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("MIQM_HOSTNAME", "hostb")
    monkeypatch.setenv("MIQM_DATA_ROOT", str(tmp_path / "root"))
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "10-tuning.ini").write_text("TuningParameters:\n   StandbyPollInterval=0.5\n")
    data = tmp_path / "data"
    data.mkdir()
    (data / "qm.ini").write_text(QM_INI.format(conf=conf))
    c = Controller("QM1", True, Verdict(None))
    c.data = PosixVolume(str(data))
    return c


def test_a_starting_instance_merges_in_memory_and_writes_nothing(
        instance: Controller, tmp_path: Path) -> None:
    before = (tmp_path / "data" / "qm.ini").read_text()
    merged = instance._auto_ini(before, "qm.ini")
    assert "StandbyPollInterval=0.5" in merged  # the instance runs with the merge
    assert (tmp_path / "data" / "qm.ini").read_text() == before  # the file is the owner's


def test_the_active_writes_the_merge_back_over_what_qm_ini_holds_then(
        instance: Controller, tmp_path: Path) -> None:
    path = tmp_path / "data" / "qm.ini"
    instance._auto_ini(path.read_text(), "qm.ini")
    # meanwhile (a standby's start to its takeover) setmqini changed qm.ini
    path.write_text(path.read_text() + "Log:\n   LogBufferPages=64\n")
    instance._write_back_ini()
    text = path.read_text()
    assert "StandbyPollInterval=0.5" in text and "LogBufferPages=64" in text


def test_a_damaged_qm_ini_at_the_write_back_is_left_alone(
        instance: Controller, tmp_path: Path) -> None:
    path = tmp_path / "data" / "qm.ini"
    path.write_bytes(b"\xff\xfe not an ini")
    instance._write_back_ini()  # no exception: the merge is in memory all the same
    assert path.read_bytes() == b"\xff\xfe not an ini"
