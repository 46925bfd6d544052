"""AMQ7469 in the error log says what the unit it ended did and what to do: the line
said only 'Transactions rolled back to release log space. (unit 5 of queue manager
'QM')', a number no application or command shows (found by exploratory testing,
2026-11-28)."""

from __future__ import annotations

from pathlib import Path

import pytest

from miqm.errors import MessagingError
from miqm.store.settings import StoreTuning
from tests.unit.test_store_units import Harness


def test_amq7469_names_the_units_work_the_log_it_held_and_the_remedy(
        tmp_path: Path) -> None:
    h = Harness(tmp_path, StoreTuning(uow_log_space_limit=0.1))
    s = h.open()
    s.define_queue("Q", DEFPSIST="YES", MAXDEPTH=100000)
    s.define_queue("R", DEFPSIST="YES")
    old = s.begin()
    s.put("Q", b"old", uow=old)
    s.put("R", b"old", uow=old)
    prep = s.begin()
    s.put("R", b"prep", uow=prep)
    s.prepare(prep, owner="app1")
    for _ in range(int(s._capacity * 0.15 / 4000) + 2):
        s.put("Q", b"z" * 4000)
    with pytest.raises(MessagingError):
        s.put("Q", b"more", uow=old)
    back = [t for a, t in h.lines if a == "AMQ7469" and "rolled back" in t]
    forward = [t for a, t in h.lines if a == "AMQ7469" and "rolled forward" in t]
    assert len(back) == 1 and len(forward) == 1
    assert "2 operations on Q, R" in back[0] and "of the log" in back[0]
    assert "MQRC 2003" in back[0] and "LogSecondaryFiles" in back[0]
    assert "1 operation on R" in forward[0]
    assert "\n" not in back[0] + forward[0]
    s.close()
