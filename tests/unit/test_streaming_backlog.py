"""A streaming consumer's pusher takes no more batches while COMMIT_BACKLOG acknowledged
batches wait for their commit: unbounded, it ran ahead of slow commits and kept thousands
of messages locked, which every later batch's pass over the queue stepped over. The store
is a stand-in with an endless queue whose commits wait until the test lets them go."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from miqm.net.streaming import COMMIT_BACKLOG, BackoutCounts, Subscription
from tests.waiting import wait_until


@dataclass
class _Msg:
    msgid: bytes
    body: bytes = b"m"
    correlid: bytes = b""
    priority: int = 0
    persistent: bool = True
    put_epoch: float = 0.0


class _Session:
    id = 1
    streams = 0

    def __init__(self) -> None:
        self.batches: list[int] = []
        self.lock = threading.Lock()

    def push(self, header: dict[str, Any], body: bytes | None = None) -> None:
        if "batch" in header and "committed" not in header:
            with self.lock:
                self.batches.append(int(header["batch"]))


class _Store:
    """An endless queue; each commit waits for ``release``."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.n = 0
        self.committed = 0
        self.lock = threading.Lock()

    def begin(self) -> object:
        return object()

    def get_many(self, queue: str, n: int, uow: object) -> list[_Msg]:
        with self.lock:
            first, self.n = self.n, self.n + n
        return [_Msg(msgid=i.to_bytes(24, "big")) for i in range(first, first + n)]

    def commit(self, uow: object) -> None:
        self.release.wait(10)
        with self.lock:
            self.committed += 1

    def backout(self, uow: object) -> None:
        pass


def test_the_pusher_waits_while_commit_backlog_batches_wait_for_their_commit() -> None:
    store, session = _Store(), _Session()
    sub = Subscription(store, session, 1, "Q", 5, BackoutCounts())  # batches of 5
    sub.start()
    acked: set[int] = set()

    def ack_all() -> int:
        with session.lock:
            pushed = list(session.batches)
        for b in pushed:
            if b not in acked:
                acked.add(b)
                sub.ack(b)
        return len(pushed)

    try:
        # the application acknowledges every batch at once; the commits do not end
        wait_until(lambda: ack_all() >= COMMIT_BACKLOG, "the first batches")
        threading.Event().wait(0.3)  # time for the pusher to run ahead, were it free to
        ack_all()
        threading.Event().wait(0.1)
        # each batch fills the prefetch, so the next is taken only once this one is
        # acknowledged: COMMIT_BACKLOG acknowledged, waiting for their commits, and no more
        assert ack_all() == COMMIT_BACKLOG
        store.release.set()  # commits go through: the stream goes on
        wait_until(lambda: ack_all() > 4 * COMMIT_BACKLOG, "more batches once committed")
    finally:
        store.release.set()
        sub.stop()
    assert store.committed >= 3 * COMMIT_BACKLOG
