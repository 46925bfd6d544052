"""Checkpoints that hold the store lock only for their first and last steps: what runs
while a checkpoint's writes reach the disk (gets of bodies not yet in the file, commits,
a queue deletion waiting its turn), what survives a crash right after, and who takes a
triggered checkpoint. Real log and data directories; the C and the Python body writers
both."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from lockfs.posix import PosixVolume
from miqm.store.qmstore import QueueManagerStore
from miqm.store.settings import LogSettings, StoreTuning

SETTINGS = LogSettings(file_pages=256, primary_files=3, secondary_files=2)


def _create(root: Path) -> None:
    (root / "data").mkdir(parents=True)
    (root / "log").mkdir()
    QueueManagerStore.create(PosixVolume(str(root / "data")), PosixVolume(str(root / "log")),
                             "QM", SETTINGS)


def _open(root: Path, generation: int, *, background: bool = False,
          tuning: StoreTuning | None = None) -> QueueManagerStore:
    return QueueManagerStore.open(
        PosixVolume(str(root / "data")), PosixVolume(str(root / "log")), "QM", SETTINGS,
        tuning or StoreTuning(checkpoint_log_recd_max=1_000_000), generation=generation,
        background=background)


def _put_committed(store: QueueManagerStore, queue: str, bodies: list[bytes]) -> None:
    for body in bodies:
        uow = store.begin()
        store.put(queue, body, persistent=True, uow=uow)
        store.commit(uow)


def _drain(store: QueueManagerStore, queue: str) -> list[bytes]:
    out = []
    while (m := store.get(queue)) is not None:
        out.append(m.body)
    return out


@pytest.mark.parametrize("native", ["1", "0"])
def test_work_done_while_a_checkpoint_writes_is_all_there_after_a_crash(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, native: str) -> None:
    monkeypatch.setenv("MIQM_NATIVE_LOG", native)
    _create(tmp_path)
    store = _open(tmp_path, 1)
    store.define_queue("Q", MAXDEPTH=10_000)
    first = [f"first {i} ".encode() * (1 + i % 40) for i in range(60)]
    _put_committed(store, "Q", first)
    later = [f"later {i}".encode() * 30 for i in range(7)]
    seen: dict[str, object] = {}

    def meanwhile() -> None:
        # the checkpoint has chosen the blocks of `first` and not yet written them: the
        # bodies come from memory, not from the file
        seen["browsed"] = store.get("Q", browse=True).body  # type: ignore[union-attr]
        uow = store.begin()
        seen["got"] = [store.get("Q", uow=uow).body for _ in range(10)]  # type: ignore[union-attr]
        store.commit(uow)
        _put_committed(store, "Q", later)
        held = store.begin()
        seen["held"] = store.get("Q", uow=held).body  # type: ignore[union-attr]
        # left in flight: restart backs it out and the message is there again

    store._cp_between = meanwhile
    store.checkpoint()
    assert seen["browsed"] == first[0] and seen["got"] == first[:10]
    assert seen["held"] == first[10]
    store.log.force(store.log.end_lsn())  # the crash: nothing closed, everything forced

    again = _open(tmp_path, 2)
    try:
        assert _drain(again, "Q") == first[10:] + later
    finally:
        again.close()


def test_commits_go_on_while_a_checkpoint_makes_its_writes_durable(tmp_path: Path) -> None:
    _create(tmp_path)
    store = _open(tmp_path, 1)
    store.define_queue("Q", MAXDEPTH=10_000)
    _put_committed(store, "Q", [b"x" * 1000] * 200)
    done = threading.Event()

    def meanwhile() -> None:
        # another thread commits while the checkpoint is between its steps: it must not
        # wait for the checkpoint (the store lock is free)
        t = threading.Thread(target=lambda: (_put_committed(store, "Q", [b"during"]),
                                             done.set()))
        t.start()
        t.join(10)
        assert done.is_set(), "a commit waited for the checkpoint's writes"

    store._cp_between = meanwhile
    store.checkpoint()
    assert done.is_set()
    assert len(_drain(store, "Q")) == 201
    store.close()


def test_a_queue_deletion_waits_until_the_checkpoint_is_done_with_its_file(
        tmp_path: Path) -> None:
    _create(tmp_path)
    store = _open(tmp_path, 1)
    store.define_queue("Q", MAXDEPTH=10_000)
    store.define_queue("GONE", MAXDEPTH=10_000)
    _put_committed(store, "GONE", [b"y" * 3000] * 50)
    errors: list[BaseException] = []

    def delete() -> None:
        try:
            store.delete_queue("GONE", purge=True)
        except BaseException as exc:  # reported below
            errors.append(exc)

    deleter = threading.Thread(target=delete)

    def meanwhile() -> None:
        deleter.start()
        time.sleep(0.3)
        assert deleter.is_alive(), "the queue was deleted while its file was being synced"

    store._cp_between = meanwhile
    store.checkpoint()
    deleter.join(10)
    assert not deleter.is_alive() and errors == []
    assert "GONE" not in store.state.queues
    store.close()
    again = _open(tmp_path, 2)
    try:
        assert "GONE" not in again.state.queues
    finally:
        again.close()


def test_a_triggered_checkpoint_is_taken_by_the_checkpoint_thread(tmp_path: Path) -> None:
    _create(tmp_path)
    store = _open(tmp_path, 1, background=True,
                  tuning=StoreTuning(checkpoint_log_recd_max=20))
    takers: list[str] = []
    plan = store._checkpoint_plan

    def recording_plan():  # type: ignore[no-untyped-def]
        takers.append(threading.current_thread().name)
        return plan()

    store._checkpoint_plan = recording_plan  # type: ignore[method-assign]
    store.define_queue("Q", MAXDEPTH=10_000)
    before = store._completed_cp
    _put_committed(store, "Q", [b"z" * 100] * 30)  # 60 records: the trigger fires
    deadline = time.monotonic() + 10
    while store._completed_cp == before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert store._completed_cp > before
    assert takers and set(takers) == {"checkpoint"}
    assert len(_drain(store, "Q")) == 30
    store.close()


def test_write_back_pushes_a_range_and_reports_errors_as_the_volume_does(
        tmp_path: Path) -> None:
    from lockfs.errors import LockFsError
    from lockfs.posix import _sync_file_range

    vol = PosixVolume(str(tmp_path))
    f = vol.open("f", create=True)
    f.pwrite(b"w" * (3 << 20), 0)
    f.write_back(0, 3 << 20)
    f.write_back(0, 0)  # nothing to do
    f.fdatasync()
    assert f.pread(10, (3 << 20) - 10) == b"w" * 10
    f.close()
    if _sync_file_range is not None:  # Linux: a bad descriptor is the volume's error
        bad = type(f)(1 << 20, "f")  # far above any open descriptor: EBADF
        with pytest.raises(LockFsError, match="write-back f"):
            bad.write_back(0, 4096)
