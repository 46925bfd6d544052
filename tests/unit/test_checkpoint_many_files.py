"""A checkpoint that writes many queue files at once (the first one after many queues
got their first message) syncs and renames them in threads on a volume that allows it:
every file is in place and durable before the checkpoint counts as complete, and one
file that cannot be synced fails the checkpoint (the store stops) instead of being
skipped. Queues that hold nothing get no file at all."""

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


def _define_and_crash(store: Store, n: int, put: bool = True) -> None:
    s = store.open()
    for i in range(n):
        s.define_queue(f"MANY.Q{i:03d}", DESCR=f"queue {i}")
        if put:
            s.put(f"MANY.Q{i:03d}", b"m%d" % i, persistent=True)
    crash(s)  # only in the log: the next open writes every file


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
        assert any(t.startswith("store-files") for t in threads), threads
        for i in range(QUEUES):
            d = store.data / "queues" / f"MANY.Q{i:03d}"
            assert (d / "q").is_file() and not (d / "q.new").exists()
        s.put("MANY.Q007", b"after", persistent=True)
    finally:
        s.close()
    s = store.open()  # and from the files the checkpoint wrote
    try:
        attrs = {q["QUEUE"]: q for q in s.list_queues("MANY.*")}
        assert len(attrs) == QUEUES
        assert attrs["MANY.Q042"]["DESCR"] == "queue 42"
        assert s.get("MANY.Q007").body == b"m7"
        assert s.get("MANY.Q007").body == b"after"
        assert s.get("MANY.Q041").body == b"m41"
    finally:
        s.close()


def test_queues_that_hold_nothing_get_no_file(tmp_path: Path) -> None:
    """The first checkpoint after defining many empty queues (a takeover's) writes the
    queue catalog, not a file per queue; they come back from it with their attributes."""
    store = Store(tmp_path)
    _define_and_crash(store, QUEUES, put=False)
    s = store.open()
    s.close()
    assert not (store.data / "queues").exists() or not any((store.data / "queues").iterdir())
    s = store.open()
    try:
        assert s.recovery_stats["catalog_queues"] == QUEUES
        assert s.queue_attrs("MANY.Q042")["DESCR"] == "queue 42"
        s.put("MANY.Q005", b"one", persistent=True)
        s.checkpoint()
        assert (store.data / "queues" / "MANY.Q005" / "q").is_file()
    finally:
        s.close()
    s = store.open()
    try:
        assert s.get("MANY.Q005").body == b"one"
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
