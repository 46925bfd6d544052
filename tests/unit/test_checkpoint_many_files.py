"""A checkpoint that writes many queue files at once (the first one after defining many
queues) syncs and renames them in threads on a volume that allows it: every file is in
place and durable before the checkpoint counts as complete, and one file that cannot be
synced fails the checkpoint (the store stops) instead of being skipped."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from lockfs.posix import PosixFile, _wrap_oserror
from miqm.errors import StoreError
from miqm.store import qmstore
from tests.unit.test_qindex import Store, crash

QUEUES = 3 * qmstore._PARALLEL_MIN


def _define_and_crash(store: Store, n: int) -> None:
    s = store.open()
    for i in range(n):
        s.define_queue(f"MANY.Q{i:03d}", DESCR=f"queue {i}")
    crash(s)  # the definitions are only in the log: the next open writes every file


def test_the_first_checkpoint_after_many_defines_puts_every_file_in_place(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(tmp_path)
    _define_and_crash(store, QUEUES)
    threads: set[str] = set()
    real = PosixFile.fdatasync

    def noting(self: PosixFile) -> None:
        threads.add(threading.current_thread().name)
        real(self)

    monkeypatch.setattr(PosixFile, "fdatasync", noting)
    s = store.open()
    try:
        assert any(t.startswith("checkpoint-files") for t in threads), threads
        for i in range(QUEUES):
            d = store.data / "queues" / f"MANY.Q{i:03d}"
            assert (d / "q").is_file() and not (d / "q.new").exists()
        s.put("MANY.Q007", b"after", persistent=True)
    finally:
        s.close()
    s = store.open()  # and from the files and catalog the checkpoint wrote
    try:
        attrs = {q["QUEUE"]: q for q in s.list_queues("MANY.*")}
        assert len(attrs) == QUEUES
        assert attrs["MANY.Q042"]["DESCR"] == "queue 42"
        assert s.get("MANY.Q007").body == b"after"
    finally:
        s.close()


def test_one_file_that_cannot_be_synced_fails_the_checkpoint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(tmp_path)
    _define_and_crash(store, QUEUES)
    real = PosixFile.fdatasync

    def failing(self: PosixFile) -> None:
        if self.path.endswith("MANY.Q013/q.new"):
            raise _wrap_oserror(OSError(5, os.strerror(5)), "fdatasync", self.path)
        real(self)

    monkeypatch.setattr(PosixFile, "fdatasync", failing)
    with pytest.raises(StoreError, match=r"checkpoint .* failed"):
        store.open()
    monkeypatch.setattr(PosixFile, "fdatasync", real)
    s = store.open()  # nothing was lost: the definitions are replayed from the log
    try:
        assert len(s.list_queues("MANY.*")) == QUEUES
    finally:
        s.close()
