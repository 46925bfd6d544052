"""An in-memory stand-in for RecoveryLog (docs/architecture.md API) used by the pure
unit tests of the store until they run over the real log; plus its own sanity tests."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any


@dataclass
class FakeRecord:
    """LogRecord(lsn, generation, payload, next_lsn) as the real log yields it."""

    lsn: int
    generation: int
    payload: bytes
    next_lsn: int


class FakeLog:
    """Records in a list; ``durable`` is the forced prefix (what a crash keeps)."""

    def __init__(self, capacity: int = 1 << 30) -> None:
        self.recs: list[tuple[int, bytes]] = []
        self.next = 16
        self.forced = 16
        self.restart = 16
        self.capacity = capacity
        self.lock = threading.Lock()
        self.forces = 0
        self.fail_after: int | None = None

    def first_lsn(self) -> int:
        return 16

    def records(self, start_lsn: int):
        for lsn, p in list(self.recs):
            if lsn >= start_lsn:
                yield FakeRecord(lsn, 1, p, lsn + len(p) + 8)

    def end_lsn(self) -> int:
        return self.next

    def append(self, payload: bytes) -> int:
        with self.lock:
            if self.fail_after is not None:
                if self.fail_after <= 0:
                    raise OSError("injected log failure")
                self.fail_after -= 1
            lsn = self.next
            self.recs.append((lsn, bytes(payload)))
            self.next += len(payload) + 8
            return lsn

    def force(self, lsn: int) -> None:
        with self.lock:
            self.forces += 1
            self.forced = max(self.forced, self.next)

    def append_and_force(self, payload: bytes) -> int:
        lsn = self.append(payload)
        self.force(lsn)
        return lsn

    def set_restart_lsn(self, lsn: int, media_lsn: int | None = None) -> None:
        self.restart = lsn

    def usage(self) -> float:
        return (self.next - self.restart) / self.capacity

    def oldest_extent_for_restart(self) -> str:
        return "S0000000.LOG"

    def oldest_extent_for_media(self) -> str:
        return "S0000000.LOG"

    def stats(self) -> dict[str, Any]:
        return {"logactive": 3}

    def progress(self) -> tuple[int, int]:
        return (self.forces, 0)

    def close(self) -> None:
        pass

    def crashed(self) -> FakeLog:
        """A log holding only what was forced (what survives a power loss)."""
        new = FakeLog(self.capacity)
        new.recs = [(lsn, p) for lsn, p in self.recs if lsn < self.forced]
        new.next = self.forced
        new.forced = self.forced
        return new


def test_fake_log_keeps_only_forced_records_on_crash() -> None:
    log = FakeLog()
    a = log.append(b"one")
    log.force(a)
    log.append(b"two")
    assert [r.payload for r in log.crashed().records(0)] == [b"one"]
