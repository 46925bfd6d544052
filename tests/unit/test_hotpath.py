"""The C common case of begin/put/commit (``_hotpath.c``) against the Python bodies it
mirrors: one workload of every shape, run once with each, must give the same answers
(messages, errors and their MQRCs), the same queues and units of work, and a recovery
log that is byte for byte the same."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from lockfs.posix import PosixVolume
from miqm.errors import LogWriteError, MiqmError, OwnershipLostError, StoreError
from miqm.store.logbuffer import native_hot_path, native_store_method
from miqm.store.qmstore import QueueManagerStore
from miqm.store.recovery import MSGID_PREFIX
from miqm.store.settings import LogSettings, StoreTuning
from tests.skips import c_part_missing

# a small log: checkpoints come from log space running low, found by the check every 64
# records that the commit path makes
SETTINGS = LogSettings(file_pages=64, primary_files=2, secondary_files=1)
TUNING = StoreTuning(checkpoint_log_recd_max=1_000_000)

pytestmark = pytest.mark.skipif(native_hot_path() is None,
                                reason=c_part_missing("the C hot path"))


class _CountingHotPath:
    """Forwards to the C hot path and counts which calls it took and which it declined."""

    def __init__(self, hot: Any) -> None:
        self.hot = hot
        self.taken = {"begin": 0, "put": 0, "commit": 0}
        self.declined = {"begin": 0, "put": 0, "commit": 0}

    def _count(self, name: str, result: Any) -> Any:
        (self.declined if result is None else self.taken)[name] += 1
        return result

    def begin(self, store: Any) -> Any:
        return self._count("begin", self.hot.begin(store))

    def put(self, *args: Any) -> Any:
        return self._count("put", self.hot.put(*args))

    def commit(self, *args: Any) -> Any:
        return self._count("commit", self.hot.commit(*args))


def _new_store(root: Path, **clocks: Any) -> QueueManagerStore:
    """A new store in root/data and root/log, opened without the checkpoint thread."""
    (root / "data").mkdir(parents=True)
    (root / "log").mkdir()
    data, log = PosixVolume(str(root / "data")), PosixVolume(str(root / "log"))
    QueueManagerStore.create(data, log, "QM", SETTINGS)
    return QueueManagerStore.open(data, log, "QM", SETTINGS, TUNING, generation=1,
                                  background=False, **clocks)


def _run(root: Path, native: bool) -> tuple[list[Any], _CountingHotPath | None]:
    ticks = iter(range(10**9))
    store = _new_store(root, clock=lambda: 0.0, wallclock=lambda: 1.7e9 + next(ticks) / 8)
    store._nonce = b"fixednon"
    store._msgid_head = MSGID_PREFIX + store._nonce
    counting = _CountingHotPath(store._hot) if native else None
    store._hot = counting
    seen: list[Any] = []

    def call(fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            result = fn(*args, **kwargs)
        except MiqmError as exc:
            result = (type(exc).__name__, getattr(exc, "mqrc", None), str(exc))
        seen.append(("call", result, store._records_since_cp, store._completed_cp,
                     store._pin_threshold, store._last_lsn, store._next_space_check))
        return result

    store.set_qmgr_attrs(MAXUMSGS=4)
    store.define_queue("A", MAXDEPTH=120, DEFPSIST="YES")
    store.define_queue("B", MAXDEPTH=1000, DEFPSIST="NO", DEFPRTY=3, MAXMSGL=3000)
    store.define_queue("C.LONGER.NAME", MAXDEPTH=1000)
    rng = random.Random(5)
    active: list[Any] = []
    ended: list[Any] = []
    long_unit = call(store.begin)  # pins the log until AMQ7469 rolls it back
    call(store.put, "B", b"pinned", persistent=True, uow=long_unit)
    for step in range(2500):
        if step == 600:
            store.alter_queue("C.LONGER.NAME", PUT="DISABLED")
        if step == 700:
            store.alter_queue("C.LONGER.NAME", PUT="ENABLED", DEFPRTY=8)
        action = rng.random()
        if (action < 0.1 and len(active) < 3) or not active:
            active.append(call(store.begin))
        elif action < 0.7:
            r = rng.random()
            uow = (rng.choice(active) if r < 0.85 else
                   rng.choice(ended) if r < 0.9 and ended else None)
            call(store.put, rng.choices(["A", "B", "C.LONGER.NAME", "NOPE"], [8, 5, 5, 1])[0],
                 rng.randbytes(rng.choice([0, 10, 1024, 1024, 1024, 2999, 3001, 5000])),
                 persistent=rng.choice([None, True, True, True, False]),
                 priority=rng.choice([None, None, 0, 5, 9, 9, 12]),
                 msgid=rng.choice([None] * 9 + [b"chosen"]),
                 correlid=rng.choice([None] * 9 + [b"corr"]), uow=uow)
        elif action < 0.8:
            call(store.get, rng.choice(["A", "B", "C.LONGER.NAME"]),
                 uow=rng.choice([*active, None]))
        else:
            u = active.pop(rng.randrange(len(active)))
            ended.append(u)
            if action < 0.93:
                call(store.commit, u)
            elif action < 0.97:
                call(store.backout, u)
            else:
                xid = call(store.prepare, u)
                if isinstance(xid, str) and rng.random() < 0.5:
                    call(store.resolve, xid, rng.random() < 0.5)
            if rng.random() < 0.05:
                call(store.commit, rng.choice(ended))  # an ended unit: an error
    call(store.commit, long_unit)  # MQRC 2003: backed out to release log space
    for name in ("A", "B", "C.LONGER.NAME"):
        seen.append(("depth", name, store.queue_attrs(name)["CURDEPTH"]))
    seen.append(("units", store.state.next_key, sorted(store.state.uows.units),
                 store.state.uows.next_txid))
    for name in ("A", "B", "C.LONGER.NAME"):
        while (m := store.get(name)) is not None:
            seen.append(("message", name, m.msgid, m.correlid, m.priority, m.persistent,
                         m.put_time, m.body))
    store.close()
    seen.append(("log", {p.name: p.read_bytes() for p in sorted((root / "log").glob("*.LOG"))}))
    return seen, counting


def _described(entry: Any) -> Any:
    # units of work are compared by what they are, not by identity
    if entry[0] == "call" and type(entry[1]).__name__ == "UnitOfWork":
        u = entry[1]
        return ("call", ("unit", u.txid, u.state, len(u.ops)), *entry[2:])
    return entry


def test_the_c_hot_path_does_what_the_python_bodies_do(tmp_path: Path) -> None:
    native, counting = _run(tmp_path / "c", native=True)
    python, _ = _run(tmp_path / "python", native=False)
    assert len(native) == len(python)
    for i, (a, b) in enumerate(zip(native, python, strict=True)):
        assert _described(a) == _described(b), i
    assert counting is not None
    # both paths were exercised: the common case in C, everything else declined to Python
    for name in ("begin", "put", "commit"):
        assert counting.taken[name] > 100, (name, counting.taken)
    assert counting.declined["put"] > 100 and counting.declined["commit"] > 5
    calls = [entry[1:] for entry in native if entry[0] == "call"]
    errors = {result[1] for result, *_ in calls
              if isinstance(result, tuple) and str(result[0]).endswith("Error")}
    assert calls[-1][2] >= 3  # checkpoints were taken for log space along the way
    assert {2085, 2051, 2030, 2053, 2024, 2050, 2003} <= errors, errors


def test_a_c_commit_wakes_waiting_getters_and_only_them(tmp_path: Path) -> None:
    store = _new_store(tmp_path)
    store.define_queue("A")
    counting = store._hot = _CountingHotPath(store._hot)
    notified: list[int] = []

    class _Cond:
        def notify_all(self) -> None:
            notified.append(store._sleepers)

    store._cond = _Cond()  # type: ignore[assignment]
    for sleepers in (1, 0, 2):
        store._sleepers = sleepers  # getters waiting in get(wait=...)
        u = store.begin()
        store.put("A", b"x", persistent=True, uow=u)
        store.commit(u)
    store._sleepers = 0
    assert notified == [1, 2] and counting.taken["commit"] == 3
    store.close()


def test_the_c_hot_path_takes_the_store_lock_itself(tmp_path: Path) -> None:
    """begin, put and commit in C run under the store lock (taken and released in C):
    while another thread holds it, none of them completes."""
    import threading

    store = _new_store(tmp_path)
    store.define_queue("A")
    counting = store._hot = _CountingHotPath(store._hot)
    unit = store.begin()
    steps = [lambda: store.begin(), lambda: store.put("A", b"x", persistent=True, uow=unit),
             lambda: store.commit(unit)]
    for step in steps:
        done = threading.Event()
        worker = threading.Thread(target=lambda s=step, d=done: (s(), d.set()))
        with store._lock:
            worker.start()
            assert not done.wait(0.2)  # blocked on the lock this thread holds
        worker.join(10)
        assert done.is_set()
    assert counting.taken == {"begin": 2, "put": 1, "commit": 1}
    assert store.get("A").body == b"x"
    store.close()


def test_begin_put_and_commit_are_the_c_methods_and_hand_the_rest_to_python(
        tmp_path: Path) -> None:
    """With the C part the class's begin/put/commit are StoreMethods: the common case
    through the store's hot path, any other call (a keyword queue, a msgid, no unit, a
    wrong call) handed unchanged to the Python body, which answers it as it would."""
    method = native_store_method()
    assert method is not None
    for name in ("begin", "put", "commit"):
        assert isinstance(getattr(QueueManagerStore, name), method)
    store = _new_store(tmp_path)
    store.define_queue("A")
    counting = store._hot = _CountingHotPath(store._hot)
    u = store.begin()
    store.put("A", b"hot", persistent=True, uow=u)
    store.put(queue="A", body=b"keywords", persistent=True, uow=u)  # Python's put
    store.put("A", b"chosen id", msgid=b"mine", uow=u)  # Python's put
    store.put("A", b"outside syncpoint", persistent=True)  # Python's put
    store.commit(uow=u)  # Python's commit
    assert counting.taken == {"begin": 1, "put": 1, "commit": 0}
    assert sum(counting.declined.values()) == 0  # handed over before the hot path
    with pytest.raises(TypeError):
        store.put("A", b"x", colour="blue", uow=u)
    with pytest.raises(TypeError):
        store.begin(1)
    bodies = [m.body for m in iter(lambda: store.get("A"), None)]
    assert bodies == [b"hot", b"keywords", b"chosen id", b"outside syncpoint"]
    assert store.get("A") is None
    store.close()


def test_a_c_commit_whose_force_fails_stops_the_store(tmp_path: Path) -> None:
    """The C commit waits for its force itself; a force that fails raises to the
    committer and stops the store, as QueueManagerStore._force does."""
    store = _new_store(tmp_path)
    store.define_queue("A")
    u = store.begin()
    store.put("A", b"x", persistent=True, uow=u)

    def broken() -> None:
        raise LogWriteError("the disk went away", amq="AMQ6708")

    store.log._flush = broken  # type: ignore[method-assign]
    with pytest.raises(LogWriteError):
        store.commit(u)
    assert isinstance(store._failed, LogWriteError)
    with pytest.raises(StoreError):
        store.put("A", b"y", persistent=True)


def test_a_c_commit_checks_the_write_guard_after_its_force(tmp_path: Path) -> None:
    """With a write guard (the HA ownership belief), a commit is acknowledged only if the
    guard still holds after the force; a guard refusing then stops the store."""
    store = _new_store(tmp_path)
    store.define_queue("A")
    checks: list[int] = []
    refuse = False

    def guard() -> None:
        checks.append(1)
        if refuse:
            raise OwnershipLostError("another instance owns the data now")

    store._guard = guard
    u = store.begin()
    store.put("A", b"x", persistent=True, uow=u)
    store.commit(u)
    assert checks  # checked after the force
    refuse = True
    u = store.begin()
    store.put("A", b"y", persistent=True, uow=u)
    with pytest.raises(OwnershipLostError):
        store.commit(u)
    assert isinstance(store._failed, OwnershipLostError)

