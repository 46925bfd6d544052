"""What the liveness check reads: ``RecoveryLog.progress()`` (forces completed, callers
waiting) while a real force is stalled (the log's extent stalls in ``fdatasync`` through
the fault-injecting volume), over the C force queue and its Python twin. A progress that
never reports the waiting caller would keep AMQ7280 from ever firing."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from lockfs.faults import Fault, FaultyVolume
from lockfs.posix import PosixVolume
from miqm.store.log import RecoveryLog
from miqm.store.settings import LogSettings
from tests.waiting import wait_until

pytestmark = pytest.mark.usefixtures("c_parts_or_python")

SMALL = LogSettings(file_pages=64, primary_files=2, secondary_files=2)


def test_a_stalled_force_shows_a_waiting_caller_and_no_completed_force(tmp_path: Path
                                                                       ) -> None:
    plain = PosixVolume(str(tmp_path / "log"))
    RecoveryLog.create(plain, SMALL)
    stall = Fault("fdatasync", "S*.LOG", "stall", seconds=60, armed=str(tmp_path / "arm"))
    vol = FaultyVolume(PosixVolume(str(tmp_path / "log")), [stall])
    log = RecoveryLog.open(vol, SMALL, generation=1)
    list(log.records(log.first_lsn()))
    log.append_and_force(b"first")  # not armed yet: completes
    forces, waiting = log.progress()
    assert waiting == 0
    (tmp_path / "arm").touch()
    done = threading.Event()

    def commit() -> None:
        log.append_and_force(b"stalled")
        done.set()

    t = threading.Thread(target=commit, daemon=True)
    t.start()
    try:
        wait_until(lambda: stall.fired > 0, "the force reaching fdatasync", timeout=10)
        wait_until(lambda: log.progress()[1] > 0, "progress() reporting the waiting caller",
                   timeout=5)
        stuck = log.progress()
        assert stuck[0] == forces and stuck[1] >= 1, stuck  # waiting, and no force done
        assert not done.is_set()
    finally:
        stall.release.set()
    assert done.wait(10)
    after = log.progress()
    assert after[0] > forces and after[1] == 0, after
    log.close()
