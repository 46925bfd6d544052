"""Child-process measurements for ``miqm bench store`` (fresh interpreter each).

``recovery DIR N``: log N records since the last checkpoint, crash (no close), and time
restart recovery. ``memory DIR N``: resident bytes per message with N persistent 1 KiB
messages on one queue, above an empty queue manager; then how long opening the store
with that queue takes (the store part of a takeover with that backlog).
"""

from __future__ import annotations

import gc
import json
import os
import signal
import sys
import time

import psutil

from miqm.bench.store import _create_store, _open_store
from miqm.store.settings import LogSettings, StoreTuning


def _put_many(store: object, n: int, batch: int = 500, size: int = 1024) -> None:
    body = b"m" * size
    done = 0
    while done < n:
        uow = store.begin()  # type: ignore[attr-defined]
        k = min(batch, n - done)
        for _ in range(k):
            store.put("BENCH.Q", body, persistent=True, uow=uow)  # type: ignore[attr-defined]
        store.commit(uow)  # type: ignore[attr-defined]
        done += k


def recovery(work: str, n: int) -> dict[str, float]:
    """Records replayed per second after ``n`` records since the checkpoint.

    Records are persistent puts of 100-byte messages in units of 500 (so the log, 64 MiB
    extents, holds a million of them without a checkpoint); replay cost is per record.
    """
    settings = LogSettings(file_pages=16384, primary_files=6, secondary_files=4)
    _create_store(work, settings)
    tuning = StoreTuning(checkpoint_log_recd_max=10 * n + 10, checkpoint_wait_len=1e9,
                         max_umsgs=1_000_000)
    pid = os.fork()
    if pid == 0:  # the writer: log n records after a checkpoint, then die by SIGKILL
        try:
            store = _open_store(work, tuning, settings)
            store.define_queue("BENCH.Q", MAXDEPTH=100_000_000)
            store.checkpoint()
            _put_many(store, n, size=100)
        finally:
            os.kill(os.getpid(), signal.SIGKILL)
    os.waitpid(pid, 0)
    t0 = time.perf_counter()
    store = _open_store(work, tuning, settings)
    elapsed = time.perf_counter() - t0
    depth = store.queue_attrs("BENCH.Q").get("CURDEPTH")
    replay = float(store.recovery_stats.get("seconds", elapsed))
    store.close()
    # records_per_s: the restart itself (replay + undo); open_seconds adds the checkpoint
    # that follows it, which writes every replayed message into its queue file
    return {"records": n, "seconds": round(replay, 3),
            "records_per_s": round(n / replay, 1), "open_seconds": round(elapsed, 3),
            "curdepth_after": depth}


def memory(work: str, n: int) -> dict[str, float]:
    """Resident bytes per message with ``n`` 1 KiB persistent messages queued."""
    _create_store(work)
    store = _open_store(work, StoreTuning(max_umsgs=1_000_000))
    store.define_queue("BENCH.Q", MAXDEPTH=100_000_000)
    gc.collect()
    proc = psutil.Process()
    empty = proc.memory_info().rss
    _put_many(store, n)
    store.checkpoint()
    gc.collect()
    full = proc.memory_info().rss
    store.close()
    # what a takeover with this backlog costs: opening the store loads the queue's index
    # by scanning its file (every record's checksum included)
    t0 = time.perf_counter()
    store = _open_store(work, StoreTuning(max_umsgs=1_000_000), generation=2)
    load = time.perf_counter() - t0
    depth = store.queue_attrs("BENCH.Q").get("CURDEPTH")
    store.close()
    return {"messages": n, "rss_empty_mb": round(empty / 2**20, 1),
            "rss_full_mb": round(full / 2**20, 1),
            "bytes_per_message": round((full - empty) / n, 1),
            "open_seconds_with_queue": round(load, 3), "curdepth_after_open": depth}


if __name__ == "__main__":
    kind, work, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    fn = {"recovery": recovery, "memory": memory}[kind]
    print(json.dumps(fn(work, count)))
