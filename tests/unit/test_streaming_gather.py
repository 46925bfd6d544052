"""A streaming consumer's pusher joins the CPU where the store's committing threads
gather (GroupCommitCPU) as soon as the store has chosen it, and asks no more after.
The store here is a stand-in that only counts: placement itself is tested on the real
log in test_gather.py."""

from __future__ import annotations

import threading
from typing import Any

from miqm.net.streaming import BackoutCounts, Subscription
from tests.waiting import wait_until


class _Session:
    id = 1
    streams = 0

    def __init__(self) -> None:
        self.pushed: list[dict[str, Any]] = []

    def push(self, header: dict[str, Any], body: bytes | None = None) -> None:
        self.pushed.append(header)


class _Store:
    """Empty queue; ``gather_here`` says 'not chosen yet' twice, then 'placed'."""

    def __init__(self) -> None:
        self.asked = 0
        self.threads: set[int] = set()
        self.lock = threading.Lock()

    def gather_here(self) -> bool:
        with self.lock:
            self.asked += 1
            self.threads.add(threading.get_ident())
            return self.asked >= 3

    def begin(self) -> object:
        return object()

    def get_many(self, queue: str, n: int, uow: object) -> list[Any]:
        return []

    def get(self, queue: str, *, uow: object, wait: float) -> None:
        threading.Event().wait(0.01)  # an empty queue's short wait
        return None

    def backout(self, uow: object) -> None:
        pass


def test_the_pusher_asks_to_join_the_gather_cpu_until_placed() -> None:
    store, session = _Store(), _Session()
    sub = Subscription(store, session, 1, "Q", 10, BackoutCounts())
    sub.start()
    try:
        wait_until(lambda: store.asked >= 3, "the pusher was placed")
        asked = store.asked
        threading.Event().wait(0.1)  # several more turns of its loop
        assert store.asked == asked == 3
        assert store.threads == {sub._thread.ident}  # the pusher's own thread
    finally:
        sub.stop()
    assert {"push": 1, "empty": 1} in session.pushed
