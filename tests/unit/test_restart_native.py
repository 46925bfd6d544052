"""Restart and takeover: restart over the log's C reader against its Python twin (the same
log replayed leaves the same queues, index, units of work and messages, and the same
queue files after the checkpoint that ends restart); the queue-file scan (the same
records, space map and garbage for every window size, a damaged record and records of
an unfinished checkpoint left out); a checkpoint's body writes (the same file whatever
the run size)."""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from lockfs.posix import PosixVolume
from miqm.store.logbuffer import native_available
from miqm.store.qmstore import QueueManagerStore
from miqm.store.settings import LogSettings, StoreTuning

SETTINGS = LogSettings(file_pages=256, primary_files=3, secondary_files=2)
TUNING = StoreTuning(checkpoint_log_recd_max=1_000_000, max_umsgs=100_000)



def _open(root: Path, generation: int) -> QueueManagerStore:
    return QueueManagerStore.open(PosixVolume(str(root / "data")), PosixVolume(str(root / "log")),
                                  "QM", SETTINGS, TUNING, generation=generation)


def _workload(root: Path) -> None:
    """Puts of every shape, gets, commits, backouts, a unit left in flight and one left
    in doubt, a queue defined halfway and one altered; then a crash (no close)."""
    (root / "data").mkdir(parents=True)
    (root / "log").mkdir()
    QueueManagerStore.create(PosixVolume(str(root / "data")), PosixVolume(str(root / "log")),
                             "QM", SETTINGS)
    store = _open(root, 1)
    rng = random.Random(11)
    store.define_queue("A", MAXDEPTH=100_000)
    store.checkpoint()
    for i in range(400):
        if i == 150:
            store.define_queue("B.LONGER.NAME", MAXDEPTH=100_000)
        if i == 250:
            store.alter_queue("A", DEFPRTY=7)
        queue = "A" if i < 150 or rng.random() < 0.5 else "B.LONGER.NAME"
        uow = store.begin()
        for _ in range(rng.randrange(1, 5)):
            store.put(queue, rng.randbytes(rng.choice([0, 10, 1024, 5000])), persistent=True,
                      priority=rng.choice([None, 0, 4, 9]), uow=uow,
                      msgid=rng.choice([None, None, b"MIQM" + rng.randbytes(20), b"own id"]),
                      correlid=rng.choice([None, None, b"corr-1", b"corr-2"]))
        if rng.random() < 0.3:
            store.get(queue, uow=uow)
        if rng.random() < 0.1:
            store.backout(uow)
        else:
            store.commit(uow)
        if rng.random() < 0.2:
            store.put(queue, b"outside syncpoint", persistent=True)
        if rng.random() < 0.1:
            store.get("A")
    flight = store.begin()
    store.put("A", b"in flight", persistent=True, uow=flight)
    doubt = store.begin()
    store.put("B.LONGER.NAME", b"in doubt", persistent=True, uow=doubt)
    store.prepare(doubt)
    store.log.force(store.log.end_lsn())  # the crash: nothing closed, everything forced


def _state(store: QueueManagerStore) -> dict[str, Any]:
    st = store.state
    queues = {}
    for name, q in sorted(st.queues.items()):
        ix = q.index
        queues[name] = {
            "keys": [list(a) for a in ix.keys], "blocks": [list(a) for a in ix.blocks],
            "lens": [list(a) for a in ix.lens], "head": list(ix.head), "dead": list(ix.dead),
            "present": q.present, "msgids": dict(q.msgids), "correlids": dict(q.correlids),
            "uncommitted": dict(q.uncommitted), "locked": dict(q.locked),
            "mem": {k: (m.priority, m.persistent, m.put_time, m.msgid, m.correlid, m.body)
                    for k, m in q.mem.items()},
        }
    uows = {t: (u.state, u.xid, u.first_lsn, list(u.ops), sorted(u.undone))
            for t, u in st.uows.units.items()}
    return {"queues": queues, "uows": uows, "next_key": st.next_key,
            "next_txid": st.uows.next_txid, "in_doubt": store.in_doubt(),
            "records": store.recovery_stats.get("records")}


def _browse_all(store: QueueManagerStore) -> list[tuple[Any, ...]]:
    out = []
    for name in ("A", "B.LONGER.NAME"):
        while (m := store.get(name)) is not None:
            out.append((name, m.body, m.msgid, m.correlid, m.priority, m.persistent))
    return out


@pytest.mark.skipif(not native_available(),
                    reason="the C parts are not built (pip install -e .)")
def test_restart_over_the_c_parts_rebuilds_what_the_python_twins_rebuild(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from miqm.store import qmstore

    _workload(tmp_path / "crashed")
    monkeypatch.setattr(qmstore, "_RUN_MAX", 8192)  # many runs, split mid-queue
    results = []
    for switch in ("0", "1"):
        copy = tmp_path / f"restart-{switch}"
        shutil.copytree(tmp_path / "crashed", copy)
        monkeypatch.setenv("MIQM_NATIVE_LOG", switch)
        store = _open(copy, 2)
        state = _state(store)
        # the checkpoint that ends restart wrote every replayed body to its queue file
        files = {str(f.relative_to(copy)): f.read_bytes()
                 for f in (copy / "data" / "queues").glob("*/q*")}
        messages = _browse_all(store)
        store.close()
        results.append((state, messages, files, copy))
    (py_state, py_messages, py_files, _), (c_state, c_messages, c_files, _) = results
    assert py_state["records"] > 1000 and py_state["in_doubt"]
    assert len(py_messages) > 300
    assert c_state == py_state
    assert c_messages == py_messages
    assert py_files and c_files == py_files


def _queue_file_with_history(root: Path) -> tuple[Path, int]:
    """A queue file after several checkpoints: live records of many sizes, deleted ones
    (valid delete marks) and blocks reused; returns its path and the last checkpoint."""
    (root / "data").mkdir(parents=True)
    (root / "log").mkdir()
    QueueManagerStore.create(PosixVolume(str(root / "data")), PosixVolume(str(root / "log")),
                             "QM", SETTINGS)
    store = _open(root, 1)
    store.define_queue("Q", MAXDEPTH=100_000)
    rng = random.Random(3)
    for round_ in range(4):
        for _ in range(300):
            store.put("Q", rng.randbytes(rng.choice([0, 1, 300, 404, 405, 2000, 9000])),
                      persistent=True, priority=rng.randrange(10),
                      correlid=rng.choice([None, b"c"]))
        for _ in range(120 if round_ < 3 else 0):
            store.get("Q")
        store.checkpoint()
    last = store.last_checkpoint.seq  # type: ignore[union-attr]
    store.log.force(store.log.end_lsn())
    return root / "data" / "queues" / "Q" / "q", last


@pytest.mark.parametrize("damage", [False, True])
def test_the_queue_scan_is_the_same_for_every_window_and_leaves_out_what_is_not_live(
        tmp_path: Path, damage: bool) -> None:
    from miqm.store.queues import DATA_START, QueueFile

    path, last = _queue_file_with_history(tmp_path)
    vol = PosixVolume(str(tmp_path / "data"))
    if damage:  # a live record's body no longer matches its checksum
        qf = QueueFile(vol, "Q")
        assert qf.open_existing()
        victim = next(r for r in qf.scan(last) if r.stored >= 300 and r.block > 40)
        fmt = qf.fmt
        qf.close()
        raw = bytearray(path.read_bytes())
        raw[DATA_START + victim.block * fmt.block + fmt.fixed + 100] ^= 0xFF
        path.write_bytes(bytes(raw))
    for completed in (last, last - 1, 1):  # later checkpoints' records are garbage
        seen = []
        for chunk in (4096, 8192, 1 << 20):  # records straddle windows of every size
            qf = QueueFile(vol, "Q")
            assert qf.open_existing()
            records = list(qf.scan(completed, chunk=chunk))
            seen.append((records, bytes(qf.space), list(qf.garbage), qf.max_key,
                         qf.max_cp_seen))
            qf.close()
        assert seen[0] == seen[1] == seen[2], completed
        records, space, garbage = seen[0][:3]
        if completed == last:
            assert len(records) > 500 and space.count(1)
            if damage:  # the damaged record is garbage, not a message
                assert victim.key not in {r.key for r in records} and victim.block in garbage
            else:
                assert garbage == []
        else:
            assert garbage  # records of checkpoints after `completed`



def test_a_checkpoint_writes_the_same_queue_file_in_runs_of_any_size(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same history (puts of every size, gets that free blocks for reuse, several
    checkpoints) leaves byte-identical queue files and indexes written in 8 KiB runs or
    in 4 MiB ones."""
    from miqm.store import qmstore
    from miqm.store.recovery import MSGID_PREFIX

    outcomes = []
    for run_max in (8192, 4 << 20):
        monkeypatch.setattr(qmstore, "_RUN_MAX", run_max)
        root = tmp_path / str(run_max)
        (root / "data").mkdir(parents=True)
        (root / "log").mkdir()
        QueueManagerStore.create(PosixVolume(str(root / "data")),
                                 PosixVolume(str(root / "log")), "QM", SETTINGS)
        ticks = iter(range(1, 1 << 30))
        store = QueueManagerStore.open(
            PosixVolume(str(root / "data")), PosixVolume(str(root / "log")), "QM", SETTINGS,
            TUNING, generation=1, wallclock=lambda t=ticks: float(next(t)))
        store._nonce = b"N" * 8
        store._msgid_head = MSGID_PREFIX + store._nonce
        store.define_queue("Q", MAXDEPTH=100_000)
        rng = random.Random(5)
        for _round in range(5):
            for _ in range(250):
                store.put("Q", rng.randbytes(rng.choice([0, 1, 404, 405, 2000, 9000])),
                          persistent=rng.random() < 0.9, priority=rng.randrange(10),
                          correlid=rng.choice([None, b"c"]))
            for _ in range(rng.randrange(50, 200)):
                store.get("Q")
            store.checkpoint()
        q = store.state.queues["Q"]
        index = [[list(a) for a in q.index.keys], [list(a) for a in q.index.blocks]]
        kept = sorted(q.mem)
        outcomes.append((index, kept, bytes(q.file.space),  # type: ignore[union-attr]
                         (root / "data" / "queues" / "Q" / "q").read_bytes()))
        store.close()
    assert outcomes[0][2].count(0) > 0  # freed blocks were there to reuse
    assert outcomes[0][1]  # non-persistent messages stayed in memory
    assert outcomes[0] == outcomes[1]
