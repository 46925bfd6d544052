"""Crash consistency: every state a power loss could leave must recover correctly.

A deterministic workload (three producers and two consumers interleaved in one thread,
under syncpoint and not, commits, backouts, two-phase prepares, non-persistent puts,
checkpoints, a small circular log that wraps) runs through :mod:`lockfs.recording`.
At ``MIQM_CRASH_POINTS`` (default 1000) random points we build what the disk could hold
(everything fdatasync'ed, plus a random subset of later page writes, one possibly torn),
open the store on it with the real RecoveryLog, and check:

* every message whose committing call returned before the crash, and whose consumer had
  not begun to commit, is there exactly once;
* no message is there whose commit had not begun (uncommitted, backed out), and none
  whose consumption was acknowledged; nothing is duplicated; non-persistent are gone;
* CURDEPTH equals what a drain returns; units prepared before the crash are in doubt.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from lockfs.posix import PosixVolume
from lockfs.recording import Recorder, RecordingVolume
from miqm.store.qmstore import QueueManagerStore
from miqm.store.settings import LogSettings, StoreTuning

try:  # the real log; until it exists the harness runs over a volume-backed stand-in
    import miqm.store.log  # noqa: F401

    REAL_LOG = os.environ.get("MIQM_FAKE_LOG") != "1"
except ImportError:
    REAL_LOG = False

SETTINGS = LogSettings(file_pages=64, primary_files=2, secondary_files=1)
# index_min_records: the queue's index file (qindex) is written whenever the queue holds
# 30 records or more, so crash points fall in its writes and renames and most restarts
# load the queue from it; the others scan (a shallower queue, the index dropped).
# index_delta_records: a checkpoint records up to 40 changes since the index in its delta
# file, beyond that it writes the index again, so restarts meet both
# index_top_min: a delta of 8 records or more is followed by second delta files while the
# changes since it are at most a quarter of it, so restarts meet those too
TUNING = StoreTuning(checkpoint_log_recd_max=150, checkpoint_log_recd_min=1,
                     checkpoint_wait_len=1e9, index_min_records=30, index_delta_records=40,
                     index_top_min=8)
POINTS = int(os.environ.get("MIQM_CRASH_POINTS", "1000"))
INF = 1 << 62


@dataclass
class Life:
    """Operation indexes in the recorder's list at which a message's fate changed."""

    commit_start: int = INF  # from here it may be committed
    commit_ack: int = INF  # from here it must be
    take_start: int = INF  # from here a consumer may have taken it for good
    take_ack: int = INF  # from here it must be gone
    prepare_start: int = INF  # from here it may be in doubt (the checker commits those)
    prepared_ack: int = INF
    persistent: bool = True


@dataclass
class Workload:
    rec: Recorder
    start: int  # crash points before this are inside crtmqm/DEFINE, not of interest
    lives: dict[bytes, Life] = field(default_factory=dict)
    prepared: list[tuple[str, int, int]] = field(default_factory=list)  # xid, ack, resolve
    extents_used: int = 0  # logical log extents the workload went through


def run_workload(base: Path, steps: int, seed: int = 7) -> Workload:
    rec = Recorder()
    (base / "data").mkdir()
    (base / "log").mkdir()
    data = RecordingVolume(PosixVolume(str(base / "data")), rec, "data")
    logv = RecordingVolume(PosixVolume(str(base / "log")), rec, "log")
    s = _open(data, logv, 1, create=True)
    s.define_queue("Q", MAXDEPTH=100000, DEFPSIST="YES")
    # E is empty at most checkpoints (so restarts define it from the queue catalog), now
    # and then holds one message or has its definition altered
    s.define_queue("E", DEFPSIST="YES")
    wl = Workload(rec, start=rec.position())
    e_held: bytes | None = None
    rng = random.Random(seed)
    pos = rec.position
    producers: list[tuple[object, list[bytes]] | None] = [None, None, None]
    consumers: list[tuple[object, list[bytes]] | None] = [None, None]
    n = 0
    for _ in range(steps):
        r = rng.random()
        if r < 0.55:
            p = rng.randrange(3)
            n += 1
            body = b"P%d-%06d-" % (p, n)
            body += bytes(rng.randrange(0, 3200))  # some span log pages
            tag = body[:10]
            if rng.random() < 0.1:  # non-persistent: gone after any restart
                s.put("Q", body, persistent=False)
                wl.lives[tag] = Life(persistent=False)
                continue
            if rng.random() < 0.3 and producers[p] is None:
                life = Life(commit_start=pos())
                s.put("Q", body)
                life.commit_ack = pos()
                wl.lives[tag] = life
                continue
            if producers[p] is None:
                producers[p] = (s.begin(), [])
            u, tags = producers[p]  # type: ignore[misc]
            s.put("Q", body, uow=u)
            wl.lives[tag] = Life()
            tags.append(tag)
            if len(tags) >= rng.randrange(1, 4):
                k = rng.random()
                if k < 0.15:
                    s.backout(u)
                elif k < 0.25:
                    begun = pos()
                    for t in tags:
                        wl.lives[t].prepare_start = begun
                    xid = s.prepare(u)
                    ack = pos()
                    for t in tags:
                        wl.lives[t].prepared_ack = ack
                    start = pos()
                    for t in tags:
                        wl.lives[t].commit_start = start
                    s.resolve(xid, commit=True)
                    done = pos()
                    for t in tags:
                        wl.lives[t].commit_ack = done
                    wl.prepared.append((xid, ack, start))
                else:
                    start = pos()
                    for t in tags:
                        wl.lives[t].commit_start = start
                    s.commit(u)
                    done = pos()
                    for t in tags:
                        wl.lives[t].commit_ack = done
                producers[p] = None
        elif r < 0.95:
            c = rng.randrange(2)
            if rng.random() < 0.3 and consumers[c] is None:
                start = pos()
                m = s.get("Q")
                if m is not None:
                    life = wl.lives[m.body[:10]]
                    life.take_start, life.take_ack = start, pos()
                continue
            if consumers[c] is None:
                consumers[c] = (s.begin(), [])
            u, tags = consumers[c]  # type: ignore[misc]
            m = s.get("Q", uow=u)
            if m is not None:
                tags.append(m.body[:10])
            if len(tags) >= 2 or m is None:
                if rng.random() < 0.2:
                    s.backout(u)
                else:
                    start = pos()
                    for t in tags:
                        wl.lives[t].take_start = start
                    s.commit(u)
                    done = pos()
                    for t in tags:
                        wl.lives[t].take_ack = done
                consumers[c] = None
        else:
            k = rng.random()
            if k < 0.3 and e_held is None:
                n += 1
                e_held = b"E%09d" % n
                life = Life(commit_start=pos())
                s.put("E", e_held)
                life.commit_ack = pos()
                wl.lives[e_held] = life
            elif k < 0.6 and e_held is not None:
                life = wl.lives[e_held]
                life.take_start = pos()
                m = s.get("E")
                assert m is not None and m.body == e_held
                life.take_ack = pos()
                e_held = None
            elif k < 0.7:
                s.alter_queue("E", DESCR=f"altered {n}")
            s.checkpoint()
    if REAL_LOG:
        wl.extents_used = s.log.extent_of_page(s.log.stats()["HeadLSN"] // 4096) + 1
    s.close()
    return wl


def _open(data: object, logv: object, gen: int, create: bool = False) -> QueueManagerStore:
    if REAL_LOG:
        if create:
            QueueManagerStore.create(data, logv, "QM", SETTINGS)  # type: ignore[arg-type]
        return QueueManagerStore.open(data, logv, "QM", SETTINGS, TUNING,  # type: ignore
                                      generation=gen, background=False)
    from miqm.store import checkpoint as ckpt
    from tests.unit.test_store_fakelog import VolumeFakeLog

    if create:
        data.makedirs("queues")  # type: ignore[attr-defined]
        ckpt.write(data, ckpt.CheckpointInfo())  # type: ignore[arg-type]
    return QueueManagerStore.open(data, logv, "QM", SETTINGS, TUNING,  # type: ignore
                                  generation=gen, background=False,
                                  recovery_log=VolumeFakeLog(logv))


def materialize(image: dict[str, bytes], root: Path) -> None:
    for key, content in image.items():
        tag, path = key.split(":", 1)
        p = root / tag / path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content)
    (root / "data").mkdir(exist_ok=True)
    (root / "log").mkdir(exist_ok=True)


def _die(s: QueueManagerStore) -> None:
    """The instance ends without closing (kill -9: no shutdown checkpoint)."""
    s._closed = True
    s.log.close()
    s._close_files()


def check_point(wl: Workload, k: int, root: Path, loads: Counter | None = None,
                twice: bool = False) -> None:
    """Open the store as the crash left it and check what it holds. ``twice``: the
    first open only recovers (its checkpoint included) and dies, and a second open is
    checked, so what the first restart wrote is checked too: a checkpoint taken while
    replayed puts were still left to their queues' first use must hold them."""
    if twice:
        _die(_open(PosixVolume(str(root / "data")), PosixVolume(str(root / "log")), 2))
    s = _open(PosixVolume(str(root / "data")), PosixVolume(str(root / "log")),
              3 if twice else 2)
    if loads is not None:
        loads.update({k: v for k, v in s.recovery_stats.items() if k.endswith("_queues")})
    try:
        assert [q["QUEUE"] for q in s.list_queues()] == ["E", "Q"], \
            f"crash point {k}: queue lost"
        in_doubt = set(s.in_doubt())
        depth = s.queue_attrs("Q")["CURDEPTH"] + s.queue_attrs("E")["CURDEPTH"]
        for xid in sorted(in_doubt):
            s.resolve(xid, commit=True)
        got: list[bytes] = []
        for name in ("Q", "E"):
            while (m := s.get(name)) is not None:
                got.append(m.body[:10])
    finally:
        _die(s)
    counts = Counter(got)
    dups = [t for t, c in counts.items() if c > 1]
    assert not dups, f"crash point {k}: duplicated {dups[:3]}"
    assert depth == len(got), f"crash point {k}: CURDEPTH {depth} but drained {len(got)}"
    for tag, life in wl.lives.items():
        present = tag in counts
        if not life.persistent:
            assert not present, f"crash point {k}: non-persistent {tag!r} survived"
            continue
        if life.commit_ack <= k and life.take_start > k:
            assert present, f"crash point {k}: acknowledged {tag!r} lost"
        if life.commit_start > k and life.prepare_start > k:
            assert not present, f"crash point {k}: uncommitted {tag!r} visible"
        if life.take_ack <= k:
            assert not present, f"crash point {k}: consumed {tag!r} came back"
    for xid, ack, resolve_start in wl.prepared:
        if ack <= k < resolve_start:
            assert xid in in_doubt, f"crash point {k}: prepared {xid} not in doubt"
    for tag in counts:
        assert tag in wl.lives, f"crash point {k}: unknown message {tag!r}"


def test_recovery_at_random_crash_points(tmp_path: Path) -> None:
    t0 = time.monotonic()
    seed = int(os.environ.get("MIQM_CRASH_SEED", "7"))
    wl = run_workload(tmp_path, steps=int(os.environ.get("MIQM_CRASH_STEPS", "1500")),
                      seed=seed)
    n_ops = wl.rec.position()
    if REAL_LOG:  # the circular log wrapped: extents were reused during the workload
        assert wl.extents_used > SETTINGS.primary_files + SETTINGS.secondary_files
    rng = random.Random(seed * 31 + 11)
    points = sorted(rng.randrange(wl.start, n_ops + 1) for _ in range(POINTS))
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    scratch = Path(tempfile.mkdtemp(prefix="miqm-crash-", dir=shm))
    loads: Counter = Counter()
    try:
        checked = 0
        for k, image in wl.rec.crash_images(points, seed=seed):
            root = scratch / str(checked)
            materialize(image, root)
            check_point(wl, k, root, loads, twice=checked % 2 == 1)
            shutil.rmtree(root)
            checked += 1
        assert checked == POINTS
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    # every way of loading a queue was met: from its index file, by a scan, and from the
    # queue catalog (its file held no live record)
    assert loads["indexed_queues"] > POINTS // 4 and loads["scanned_queues"] > 0, loads
    assert POINTS // 10 < loads["delta_queues"] < loads["indexed_queues"], loads
    assert 0 < loads["second_delta_queues"] < loads["delta_queues"], loads
    assert loads["catalog_queues"] > 0, loads
    # and E named by the checkpoint file as holding records, the catalog left as it was
    assert loads["filed_queues"] > 0, loads
    print(f"{POINTS} crash points over {n_ops} recorded operations in "
          f"{time.monotonic() - t0:.1f}s; queues loaded {dict(loads)}")


def test_restart_after_a_crash_during_restart(tmp_path: Path) -> None:
    """A power loss in the middle of restart recovery (replay, CLRs, the checkpoint that
    follows) leaves a state the next restart recovers with the same guarantees."""
    seed = int(os.environ.get("MIQM_CRASH_SEED", "7")) + 1
    (tmp_path / "w").mkdir()
    wl = run_workload(tmp_path / "w", steps=800, seed=seed)
    rng = random.Random(seed)
    points = sorted(rng.randrange(wl.start, wl.rec.position() + 1)
                    for _ in range(max(20, POINTS // 25)))
    scratch = Path(tempfile.mkdtemp(prefix="miqm-crash2-"))
    try:
        for i, (k, image) in enumerate(wl.rec.crash_images(points, seed=seed)):
            first = scratch / f"{i}-a"
            materialize(image, first)
            rec2 = Recorder()
            data = RecordingVolume(PosixVolume(str(first / "data")), rec2, "data")
            logv = RecordingVolume(PosixVolume(str(first / "log")), rec2, "log")
            for vol, sub in ((data, "data"), (logv, "log")):  # what the disk holds now
                for path in sorted((first / sub).rglob("*")):
                    if path.is_file():
                        vol.open(str(path.relative_to(first / sub))).close()
            base = rec2.position()
            s = _open(data, logv, 2)  # the interrupted restart: every write it made is
            s._closed = True          # recorded; then it dies without closing
            for f in list(s.log._files.values()):
                f.close()
            s._close_files()
            j = rng.randrange(base, rec2.position() + 1)
            for _, image2 in rec2.crash_images([j], seed=seed + i):
                second = scratch / f"{i}-b"
                shutil.copytree(first, second)
                materialize(image2, second)
                check_point(wl, k, second)
            shutil.rmtree(scratch / f"{i}-a", ignore_errors=True)
            shutil.rmtree(scratch / f"{i}-b", ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
