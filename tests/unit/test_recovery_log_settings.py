"""LogPrimaryFiles/LogSecondaryFiles lowered in qm.ini (MQ lets an administrator do
that; it takes effect at the next start) while the log spans more extents than they now
allow: restart still reads the log and writes its undo, and the log comes back to the new
size once a checkpoint lets it.

Found by exploratory testing (2026-11-28): a circular log of 4+2 extents with a unit of
work in flight across four of them at a crash, started with 2+1: 'the log is full: 3
extents are in use back to the restart point in S0000000.LOG; a long-running unit of work
holds it (commit or back it out) or increase LogSecondaryFiles', and the queue manager
could not start (restart's undo records had nowhere to go).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from miqm.store.settings import LogSettings
from tests.unit.storedirs import create_store, open_store

pytestmark = pytest.mark.usefixtures("c_parts_or_python")

BIG = LogSettings(file_pages=64, primary_files=4, secondary_files=2)
SMALL = LogSettings(file_pages=64, primary_files=2, secondary_files=1)


def test_a_log_spanning_more_extents_than_qm_ini_now_allows_starts(tmp_path: Path) -> None:
    create_store(tmp_path, BIG)
    s = open_store(tmp_path, BIG, 1)
    s.define_queue("Q", DEFPSIST="YES", MAXDEPTH=100_000)
    s.put("Q", b"committed")
    u = s.begin()
    for i in range(400):  # about 800 KB in flight: four extents of 248 KiB
        s.put("Q", b"%05d" % i + bytes(2000), uow=u)
    assert len(s.log.stats()["filenum"]) == 4
    s.log.force(s.log.end_lsn())
    s._closed = True  # killed with the unit in flight
    s._close_files()
    s.log.close()
    s = open_store(tmp_path, SMALL, 2)  # qm.ini now says 2 + 1
    try:
        assert s.get("Q").body == b"committed"  # type: ignore[union-attr]
        assert s.get("Q") is None  # the unit in flight was undone
        for _ in range(300):  # laps of the smaller log
            s.put("Q", bytes(3000))
            s.get("Q")
        assert s.log.max_extents == 3
        assert len(s.log.stats()["filenum"]) <= 3
    finally:
        s.close()
    names = sorted(p.name for p in (tmp_path / "log").glob("S*.LOG"))
    assert len(names) <= 3  # the surplus files were released
