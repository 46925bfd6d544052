"""The data directory and the log directory must come from the same time: an
amqalchk.fil older than the log, or a log older than amqalchk.fil, stops the start with
one AMQ6118 line saying to restore both from the same backup, and changes nothing.

Found by exploratory testing (2026-11-28): an old amqalchk.fil put back over a linear
queue manager's data started it, replayed from the old restart point and reported a
queue damaged (its file newer than the checkpoint); on a circular log it was a bare
'AMQ7017: the log record at LSN 1304 is in an extent that is no longer available'. A log
directory put back from an earlier copy was 'AMQ6118: the recovery log is damaged at log
file S0000004.LOG offset 151552: fragments end at 3466, page holds 1498', or, where the
old log's pages ended cleanly, a start that appended below the checkpoint's LSN: records
the next restart would skip as already in the queue files.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from miqm.errors import StoreError
from miqm.store import checkpoint as ckpt
from miqm.store.settings import LogSettings
from tests.unit.storedirs import create_store, open_store

pytestmark = pytest.mark.usefixtures("c_parts_or_python")

CIRCULAR = LogSettings(file_pages=64, primary_files=3, secondary_files=1)
LINEAR = LogSettings(log_type="LINEAR", file_pages=64, primary_files=3, secondary_files=1)
BODY = b"x" * 3000


def _created(tmp: Path, settings: LogSettings, extra: int = 0) -> None:
    """A queue manager with ten messages on Q (then ``extra`` more), closed (its
    checkpoint taken)."""
    create_store(tmp, settings)
    s = open_store(tmp, settings, 1)
    s.define_queue("Q", DEFPSIST="YES", MAXDEPTH=100_000)
    for i in range(10):
        s.put("Q", b"early-%d" % i)
    for i in range(extra):
        s.put("Q", b"other-%d" % i)
    s.close()


def _more(tmp: Path, settings: LogSettings, gen: int) -> None:
    """Enough puts and gets to move the restart point three extents on, then close."""
    s = open_store(tmp, settings, gen)
    for i in range(300):
        s.put("Q", b"%06d" % i + BODY)
        if i % 2:
            s.get("Q")
        if i % 50 == 0:
            s.checkpoint()
    s.close()


def _refused(tmp: Path, settings: LogSettings, gen: int) -> str:
    with pytest.raises(StoreError) as info:
        open_store(tmp, settings, gen)
    line = str(info.value)
    assert info.value.amq == "AMQ6118" and "\n" not in line
    assert "restore the data and log directories together from the same backup" in line
    return line


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("settings", [CIRCULAR, LINEAR], ids=["circular", "linear"])
def test_an_old_checkpoint_file_left_in_the_data_directory_is_refused(
        tmp_path: Path, settings: LogSettings) -> None:
    _created(tmp_path, settings)
    old = (tmp_path / "data" / ckpt.NAME).read_bytes()
    _more(tmp_path, settings, 2)
    (tmp_path / "data" / ckpt.NAME).write_bytes(old)
    before = _snapshot(tmp_path)
    line = _refused(tmp_path, settings, 3)
    assert "amqalchk.fil is older than the recovery log" in line
    assert _snapshot(tmp_path) == before  # nothing zeroed, rewritten or released


@pytest.mark.parametrize("settings", [CIRCULAR, LINEAR], ids=["circular", "linear"])
def test_a_log_directory_older_than_the_data_directory_is_refused(
        tmp_path: Path, settings: LogSettings) -> None:
    _created(tmp_path, settings)
    shutil.copytree(tmp_path / "log", tmp_path / "old-log")
    _more(tmp_path, settings, 2)
    shutil.rmtree(tmp_path / "log")
    shutil.copytree(tmp_path / "old-log", tmp_path / "log")
    before = _snapshot(tmp_path)
    line = _refused(tmp_path, settings, 3)
    assert "the log directory is older than the data directory" in line
    assert _snapshot(tmp_path) == before


def test_a_log_that_ends_cleanly_before_the_checkpoint_is_refused(tmp_path: Path) -> None:
    """The old log's pages end where a checkpoint left them (nothing torn to trip the
    reader): the start must still refuse, not append below the checkpoint's LSN."""
    _created(tmp_path, LINEAR)
    shutil.copytree(tmp_path / "log", tmp_path / "old-log")
    s = open_store(tmp_path, LINEAR, 2)
    s.put("Q", b"late")
    s.close()  # one more checkpoint: its record is after the old log's end
    shutil.rmtree(tmp_path / "log")
    shutil.copytree(tmp_path / "old-log", tmp_path / "log")
    line = _refused(tmp_path, LINEAR, 3)
    assert "the log directory is older than the data directory" in line


@pytest.mark.parametrize("settings", [CIRCULAR, LINEAR], ids=["circular", "linear"])
def test_both_directories_from_the_same_copy_start_and_keep_every_message(
        tmp_path: Path, settings: LogSettings) -> None:
    """What the runbook says to do, and a crash between a checkpoint's new amqalchk.fil
    and its move of the log's restart point (the checkpoint file is then newer than the
    log's restart point, which is allowed), both start."""
    _created(tmp_path, settings)
    shutil.copytree(tmp_path / "data", tmp_path / "copy-data")
    shutil.copytree(tmp_path / "log", tmp_path / "copy-log")
    _more(tmp_path, settings, 2)
    for d in ("data", "log"):
        shutil.rmtree(tmp_path / d)
        shutil.copytree(tmp_path / f"copy-{d}", tmp_path / d)
    s = open_store(tmp_path, settings, 3)
    try:
        s.put("Q", b"after")
        s.checkpoint()
        # the log keeps its restart point: as if the checkpoint stopped after step 2
        s.log.set_restart_lsn = lambda *a, **k: None  # type: ignore[method-assign]
        s.put("Q", b"after-2")
        s.checkpoint()
    finally:
        s._closed = True
        s._close_files()
        s.log.close()
    s = open_store(tmp_path, settings, 4)
    try:
        got = [m.body for m in iter(lambda: s.get("Q"), None)]
    finally:
        s.close()
    assert got == [b"early-%d" % i for i in range(10)] + [b"after", b"after-2"]


def test_a_log_file_of_another_queue_manager_whose_records_line_up_is_refused(
        tmp_path: Path) -> None:
    """The other queue manager's log has a record boundary exactly where this one's
    checkpoint record was (both did the same things until then): its records read as
    well-formed, and the start replayed them as this queue manager's (its puts came
    back as messages nobody put here). The record at the checkpoint's LSN must be that
    checkpoint."""
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    # the same record sizes up to the checkpoint, so the same record boundaries
    _created(ours, CIRCULAR)
    _created(theirs, CIRCULAR, extra=3)
    shutil.copy(theirs / "log" / "S0000000.LOG", ours / "log" / "S0000000.LOG")
    before = _snapshot(ours)
    line = _refused(ours, CIRCULAR, 2)
    assert "not the checkpoint" in line and "another queue manager" in line
    assert _snapshot(ours) == before


@pytest.mark.parametrize("made,said", [(CIRCULAR, LINEAR), (LINEAR, CIRCULAR)],
                         ids=["circular-said-linear", "linear-said-circular"])
def test_qm_ini_log_type_other_than_the_logs_is_refused(
        tmp_path: Path, made: LogSettings, said: LogSettings) -> None:
    """setmqini -s Log -k LogType changed after crtmqm: the queue manager started, said
    LOGTYPE(LINEAR) over a circular log and took media images (rcdmqimg) that its reused
    extents could never replay. The log's type is fixed at crtmqm: one line saying so."""
    _created(tmp_path, made)
    before = _snapshot(tmp_path)
    with pytest.raises(StoreError) as info:
        open_store(tmp_path, said, 2)
    line = str(info.value)
    assert info.value.amq == "AMQ7017" and "\n" not in line
    assert f"LogType={said.log_type}" in line and f"created {made.log_type}" in line
    assert f"-k LogType -v {made.log_type}" in line
    assert _snapshot(tmp_path) == before
    open_store(tmp_path, made, 2).close()  # and as created, it starts
