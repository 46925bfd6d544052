"""Child-process measurements for ``miqm bench store`` (fresh interpreter each).

``recovery DIR N``: log N records since the last checkpoint, crash (no close), and time
restart recovery. ``memory DIR N``: resident bytes per message with N persistent 1 KiB
messages on one queue, above an empty queue manager.
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
from miqm.store.settings import StoreTuning


def _put_many(store: object, n: int, batch: int = 500) -> None:
    body = b"m" * 1024
    done = 0
    while done < n:
        uow = store.begin()  # type: ignore[attr-defined]
        k = min(batch, n - done)
        for _ in range(k):
            store.put("BENCH.Q", body, persistent=True, uow=uow)  # type: ignore[attr-defined]
        store.commit(uow)  # type: ignore[attr-defined]
        done += k


def recovery(work: str, n: int) -> dict[str, float]:
    """Records replayed per second after ``n`` records since the checkpoint."""
    _create_store(work)
    tuning = StoreTuning(checkpoint_log_recd_max=10 * n + 10, checkpoint_wait_len=1e9,
                         max_umsgs=1_000_000)
    pid = os.fork()
    if pid == 0:  # the writer: log n records after a checkpoint, then die by SIGKILL
        try:
            store = _open_store(work, tuning)
            store.define_queue("BENCH.Q", MAXDEPTH=100_000_000)
            store.checkpoint()
            _put_many(store, n)
        finally:
            os.kill(os.getpid(), signal.SIGKILL)
    os.waitpid(pid, 0)
    t0 = time.perf_counter()
    store = _open_store(work, tuning)
    elapsed = time.perf_counter() - t0
    depth = store.queue_attrs("BENCH.Q").get("CURDEPTH")
    store.close()
    return {"records": n, "seconds": round(elapsed, 3),
            "records_per_s": round(n / elapsed, 1), "curdepth_after": depth}


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
    return {"messages": n, "rss_empty_mb": round(empty / 2**20, 1),
            "rss_full_mb": round(full / 2**20, 1),
            "bytes_per_message": round((full - empty) / n, 1)}


if __name__ == "__main__":
    kind, work, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    fn = {"recovery": recovery, "memory": memory}[kind]
    print(json.dumps(fn(work, count)))
