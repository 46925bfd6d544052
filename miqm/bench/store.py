"""``miqm bench store``: persistent put+commit throughput against the raw fdatasync limit.

Everything is measured in one run on the same disk, so the ratios mean something on a
noisy shared machine: the raw rate of 4 KiB write+fdatasync into a pre-formatted file,
then 1 KiB persistent put+commit with 1, 8 and 64 concurrent producers (group commit
should let many producers share one force). Optional extras: restart recovery speed
(records replayed per second) and resident bytes per queued message.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lockfs.posix import PosixVolume
from miqm.store.logbuffer import PyLogBuffer, buffer_class
from miqm.store.settings import GATHER_AUTO, LogSettings, StoreTuning

BLOCK = 4096


def _preformatted(path: str, span: int) -> int:
    """A new file of ``span`` zero bytes, forced to disk (as log extents are formatted),
    open for reading and writing."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    zeros = bytes(1 << 20)
    for off in range(0, span, len(zeros)):
        os.pwrite(fd, zeros, off)
    os.fsync(fd)
    return fd


def _in_threads(producers: int, work: Callable[[], None]) -> float:
    """Run ``work`` in ``producers`` threads at once; seconds until the last one ends."""
    threads = [threading.Thread(target=work, daemon=True) for _ in range(producers)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start


def _commits_in_threads(producers: int, seconds: float,
                        commit: Callable[[], None]) -> tuple[int, float]:
    """(commits, elapsed seconds): ``producers`` threads calling ``commit`` until
    ``seconds`` have passed."""
    stop_at = time.perf_counter() + seconds
    counts: list[int] = []

    def producer() -> None:
        n = 0
        while True:
            commit()
            n += 1
            if time.perf_counter() >= stop_at:
                break
        counts.append(n)  # one append per thread: atomic

    elapsed = _in_threads(producers, producer)
    return sum(counts), elapsed


class RawProbe:
    """4 KiB pwrite + fdatasync into a pre-formatted 64 MiB file, in slices of any length
    (so raw and store measurements can alternate on a noisy disk)."""

    def __init__(self, directory: str, size: int = BLOCK) -> None:
        self.path = os.path.join(directory, "raw-probe.dat")
        self.span = 64 << 20
        self.fd = _preformatted(self.path, self.span)
        self.buf = os.urandom(size)
        self.off = 0
        self.ops = 0
        self.elapsed = 0.0
        self.latencies: list[float] = []

    def run(self, seconds: float) -> None:
        """Write and force for ``seconds``; adds to the totals."""
        start = time.perf_counter()
        deadline = start + seconds
        while True:
            t0 = time.perf_counter()
            os.pwrite(self.fd, self.buf, self.off)
            os.fdatasync(self.fd)
            t1 = time.perf_counter()
            self.latencies.append(t1 - t0)
            self.ops += 1
            self.off = (self.off + len(self.buf)) % self.span
            if t1 >= deadline:
                break
        self.elapsed += time.perf_counter() - start

    def rate(self) -> float:
        """Operations per second over every slice so far."""
        return self.ops / self.elapsed if self.elapsed else 0.0

    def close(self) -> None:
        os.close(self.fd)
        os.unlink(self.path)


class BareGroupCommit:
    """A naive pure-Python group commit, thread per producer, on this disk.

    Producers do nothing but copy a 1 KiB record into a shared page under a
    ``threading.Condition`` and wait until a leader's 4 KiB ``pwrite`` + ``fdatasync``
    covers it (no store, no framing, no checksums; every force wakes every waiter). A
    reference for what plain Python threading reaches here, measured beside the store;
    the store's own log (:class:`LogAlone`), which wakes only the durable waiters and
    forces in C, goes past it with many threads."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, "bare-commit.dat")
        self.span = 64 << 20
        self.fd = _preformatted(self.path, self.span)

    def run(self, producers: int, seconds: float, body: bytes) -> tuple[int, float]:
        """(commits, elapsed seconds) with ``producers`` threads for ``seconds``."""
        cond = threading.Condition()
        page = bytearray(BLOCK)
        state = {"appended": 0, "durable": 0, "leading": False, "page_at": 0, "used": 0}

        def commit() -> None:
            with cond:
                u = state["used"]
                if u + len(body) > BLOCK:
                    state["page_at"] = (state["page_at"] + BLOCK) % self.span
                    u = 0
                page[u:u + len(body)] = body
                state["used"] = u + len(body)
                state["appended"] += 1
                me = state["appended"]
                while state["durable"] < me:
                    if state["leading"]:
                        cond.wait()
                        continue
                    state["leading"] = True
                    target, image, at = state["appended"], bytes(page), state["page_at"]
                    cond.release()
                    try:
                        os.pwrite(self.fd, image, at)
                        os.fdatasync(self.fd)
                    finally:
                        cond.acquire()
                    state["durable"] = max(state["durable"], target)
                    state["leading"] = False
                    cond.notify_all()

        return _commits_in_threads(producers, seconds, commit)

    def close(self) -> None:
        os.close(self.fd)
        os.unlink(self.path)


class LogAlone:
    """The store's recovery log by itself: per commit, a PUT-sized and a COMMIT-sized
    record appended and forced, from N threads (group commit, C force), with none of the
    store's queue or unit-of-work bookkeeping. Measured beside the store, the gap between
    the two is what that bookkeeping costs; this figure bounds what the store could reach
    with it free."""

    def __init__(self, directory: str, gather_cpu: int = GATHER_AUTO) -> None:
        from miqm.store.log import RecoveryLog
        from miqm.store.records import COMMIT, encode_end, encode_put

        path = os.path.join(directory, "log-alone")
        os.makedirs(path)
        volume = PosixVolume(path)
        RecoveryLog.create(volume, _bench_log_settings())
        self.log = RecoveryLog.open(volume, _bench_log_settings(), generation=1,
                                    gather_cpu=gather_cpu)
        self.log.end_lsn()
        self.put = encode_put(1, "BENCH.Q", 1, 0, 0.0, bytes(24), bytes(24), b"x" * 1024)
        self.commit = encode_end(COMMIT, 1)

    def run(self, producers: int, seconds: float) -> tuple[int, float]:
        """(commits, elapsed seconds) with ``producers`` threads for ``seconds``."""
        log, put, commit = self.log, self.put, self.commit

        def put_and_commit() -> None:
            log.append(put)
            log.force(log.append(commit))

        result = _commits_in_threads(producers, seconds, put_and_commit)
        # nothing is kept: the next slice may start from an empty log
        log.set_restart_lsn(log.end_lsn())
        return result

    def close(self) -> None:
        self.log.close()


@dataclass
class _Run:
    producers: int
    commits: int = 0
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _open_store(directory: str, tuning: StoreTuning | None = None,
                settings: LogSettings | None = None, generation: int = 1) -> Any:
    from miqm.store.qmstore import QueueManagerStore

    data = PosixVolume(os.path.join(directory, "data"))
    log = PosixVolume(os.path.join(directory, "log"))
    return QueueManagerStore.open(
        data, log, "BENCH", settings or _bench_log_settings(), tuning or StoreTuning(),
        generation=generation)


def _bench_log_settings() -> LogSettings:
    # 16 MiB extents, 4 primaries + 8 secondaries: room for a few seconds of 64-way load.
    return LogSettings(file_pages=4096, primary_files=4, secondary_files=8)


def _create_store(directory: str, settings: LogSettings | None = None) -> None:
    from miqm.store.qmstore import QueueManagerStore

    os.makedirs(os.path.join(directory, "data"), exist_ok=True)
    os.makedirs(os.path.join(directory, "log"), exist_ok=True)
    QueueManagerStore.create(
        PosixVolume(os.path.join(directory, "data")),
        PosixVolume(os.path.join(directory, "log")),
        "BENCH",
        settings or _bench_log_settings(),
    )


def commit_run(store: Any, producers: int, seconds: float, body: bytes) -> _Run:
    """``producers`` threads each doing begin / persistent put / commit for ``seconds``."""
    run = _Run(producers)
    lock = threading.Lock()
    stop_at = time.perf_counter() + seconds
    barrier = threading.Barrier(producers)

    def producer() -> None:
        lats: list[float] = []
        try:
            barrier.wait()
            while True:
                t0 = time.perf_counter()
                uow = store.begin()
                store.put("BENCH.Q", body, persistent=True, uow=uow)
                store.commit(uow)
                t1 = time.perf_counter()
                lats.append(t1 - t0)
                if t1 >= stop_at:
                    break
        except Exception as exc:  # reported in the figures, not hidden
            with lock:
                run.errors.append(f"{type(exc).__name__}: {exc}")
        with lock:
            run.latencies.extend(lats)
            run.commits += len(lats)

    elapsed = _in_threads(producers, producer)
    run.latencies.append(0.0) if not run.latencies else None
    run.latencies.sort()
    run.commits_per_s = run.commits / elapsed  # type: ignore[attr-defined]
    return run


def _drain(store: Any) -> None:
    while store.get("BENCH.Q") is not None:
        pass
    store.checkpoint()


def bench_store(
    directory: str | None = None,
    producers: tuple[int, ...] = (1, 8, 64),
    seconds: float = 3.0,
    recovery_records: int = 0,
    memory_messages: int = 0,
    echo: Callable[[str], None] = print,
    cpus: tuple[int, ...] = (),
    group_commit_cpu: int = GATHER_AUTO,
) -> dict[str, Any]:
    """Run the store benchmark; returns the contract's JSON object (plus extras).

    ``cpus``: run every thread of it (raw probe, producers, checkpoints, the recovery
    and memory children) on these CPUs only, as ``taskset -c`` would; the figures then
    say what a queue manager started under that affinity does. ``group_commit_cpu``: the
    store's (and the log-alone comparison's) GroupCommitCPU; each row says where the
    threads waiting for forces gathered (``group_commit_cpu``, -1: they did not)."""
    before = os.sched_getaffinity(0)
    if cpus:
        os.sched_setaffinity(0, cpus)  # threads and children made from here inherit it
    try:
        result = _bench_store(directory, producers, seconds, recovery_records,
                              memory_messages, echo, group_commit_cpu)
        result["cpus"] = sorted(os.sched_getaffinity(0))
        return result
    finally:
        if cpus:
            os.sched_setaffinity(0, before)


def _bench_store(directory: str | None, producers: tuple[int, ...], seconds: float,
                 recovery_records: int, memory_messages: int,
                 echo: Callable[[str], None], group_commit_cpu: int) -> dict[str, Any]:
    base = tempfile.mkdtemp(prefix="miqm-bench-", dir=directory)
    try:
        probe = RawProbe(base)
        bare = BareGroupCommit(base)
        alone = LogAlone(base, group_commit_cpu)
        _create_store(base)
        store = _open_store(base, StoreTuning(group_commit_cpu=group_commit_cpu))
        runs = []
        slices = max(1, round(seconds / 0.5))
        slice_s = seconds / slices
        try:
            store.define_queue("BENCH.Q", MAXDEPTH=100_000_000)
            body = b"x" * 1024
            for n in producers:
                # raw and store alternate in short slices: each ratio compares the same
                # moments of the disk (figures on a shared virtual disk drift by 30%)
                raw_before = (probe.ops, probe.elapsed)
                commits, elapsed, lat = 0, 0.0, []
                bare_commits, bare_elapsed = 0, 0.0
                log_commits, log_elapsed = 0, 0.0
                errors: list[str] = []
                for _ in range(slices):
                    probe.run(slice_s / 2)
                    c, e = bare.run(n, slice_s / 2, body)
                    bare_commits, bare_elapsed = bare_commits + c, bare_elapsed + e
                    c, e = alone.run(n, slice_s / 2)
                    log_commits, log_elapsed = log_commits + c, log_elapsed + e
                    r = commit_run(store, n, slice_s, body)
                    commits += r.commits
                    elapsed += r.commits / r.commits_per_s if r.commits else slice_s  # type: ignore[attr-defined]
                    lat += r.latencies
                    errors += r.errors
                raw_rate = (probe.ops - raw_before[0]) / (probe.elapsed - raw_before[1])
                rate = commits / elapsed if elapsed else 0.0
                bare_rate = bare_commits / bare_elapsed if bare_elapsed else 0.0
                log_rate = log_commits / log_elapsed if log_elapsed else 0.0
                lat.sort()
                row = {
                    "producers": n,
                    "commits_per_s": round(rate, 1),
                    "p99_commit_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000,
                                           3),
                    "raw_fdatasync_per_s": round(raw_rate, 1),
                    "ratio_to_raw": round(rate / raw_rate, 2) if raw_rate else 0.0,
                    # the same threads doing nothing but a bare Python group commit
                    "bare_python_commits_per_s": round(bare_rate, 1),
                    "bare_python_ratio_to_raw": round(bare_rate / raw_rate, 2)
                    if raw_rate else 0.0,
                    # the store's recovery log alone, with no queue or unit-of-work work
                    "log_alone_commits_per_s": round(log_rate, 1),
                    "log_alone_ratio_to_raw": round(log_rate / raw_rate, 2)
                    if raw_rate else 0.0,
                }
                # where the store's force waiters gathered (-1: nowhere; the 1-producer
                # run may show -2: its one thread never waited behind another's force)
                row["group_commit_cpu"] = store.log.gather_cpu
                if errors:
                    row["errors"] = errors[:3]
                runs.append(row)
                echo(f"{n:3d} producers: {row['commits_per_s']:.0f} commits/s "
                     f"({row['ratio_to_raw']}x raw {raw_rate:.0f}/s alongside), "
                     f"p99 {row['p99_commit_ms']} ms; the log alone: {log_rate:.0f}/s "
                     f"({row['log_alone_ratio_to_raw']}x); a bare Python group commit: "
                     f"{bare_rate:.0f}/s ({row['bare_python_ratio_to_raw']}x)")
                _drain(store)
        finally:
            store.close()
            lat = sorted(probe.latencies)
            baseline = {
                "fdatasync_per_s": round(probe.rate(), 1),
                "p50_ms": round(lat[len(lat) // 2] * 1000, 3) if lat else 0.0,
                "p99_ms": round(lat[int(len(lat) * 0.99)] * 1000, 3) if lat else 0.0,
            }
            probe.close()
            bare.close()
            alone.close()
        echo(f"raw 4 KiB write+fdatasync: {baseline['fdatasync_per_s']:.0f}/s "
             f"(p50 {baseline['p50_ms']} ms)")
        # which implementation these figures are of (MIQM_NATIVE_LOG=0: the pure-Python one)
        result: dict[str, Any] = {"baseline": baseline, "runs": runs,
                                  "native_log": buffer_class() is not PyLogBuffer}
        if recovery_records:
            result["recovery"] = _in_child("recovery", base, recovery_records)
            echo(f"restart recovery: {result['recovery']}")
        if memory_messages:
            result["memory"] = _in_child("memory", base, memory_messages)
            echo(f"memory: {result['memory']}")
        return result
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _in_child(kind: str, base: str, count: int) -> dict[str, Any]:
    """Run a measurement in a fresh interpreter so RSS and caches are its own."""
    work = os.path.join(base, kind)
    os.makedirs(work)
    proc = subprocess.run(
        [sys.executable, "-m", "miqm.bench.store_child", kind, work, str(count)],
        capture_output=True, text=True, timeout=3600,
    )
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])
