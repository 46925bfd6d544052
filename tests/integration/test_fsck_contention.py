"""amqmfsck -c on a local directory: the two writers take turns at the data file's lock.

Where lock calls take microseconds, the writer that had just unlocked relocked at once
and nearly always won: one process wrote all its records, then the other (one hand-off
in 400 records, seen on this machine's ext4), and "concurrent writes under locks" had
tested no contended lock at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import fsckutil as fu

pytestmark = pytest.mark.integration


def test_c_writers_take_turns_at_the_lock(tmp_path: Path) -> None:
    a = fu.start("-c", "--count", "100", "--json", "--wait", "60", str(tmp_path))
    code2, out2, err2 = fu.finish(fu.start("-c", "--count", "100", "--json", "--wait", "60",
                                           str(tmp_path)))
    code1, out1, err1 = fu.finish(a)
    assert (code1, code2) == (0, 0), (err1, err2)
    for out in (out1, out2):
        conc = fu.test_of(fu.result(out), "concurrent writes")
        assert conc["details"]["records"] == 200
        # strict turns give 199; a loaded machine loses some, never most
        assert conc["details"]["handoffs"] >= 20, conc["details"]
        assert not any("hardly tested" in n for n in conc["notes"]), conc["notes"]
    assert sorted(p.name for p in tmp_path.iterdir()) == []
