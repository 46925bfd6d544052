"""Reads of the shared filesystem a scrape may not wait for.

A :class:`CachedProbe` runs its read on a thread of its own and waits for it at most
``deadline`` seconds. A read that completes in time is the new value; one that does not
leaves the last successful value in place (with its age) and keeps running: no second
read starts while it is in flight, so a hung filesystem costs one stuck thread, never
one per scrape, and the scrape answers within the deadline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class CachedProbe(Generic[T]):
    """The last successful result of ``read``, refreshed at most every ``min_interval``."""

    def __init__(self, name: str, read: Callable[[], T], deadline: float = 0.05,
                 min_interval: float = 0.0, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self.name = name
        self._read = read
        self.deadline = deadline
        self.min_interval = min_interval
        self._clock = clock
        self._lock = threading.Lock()
        self._inflight: threading.Event | None = None
        self.value: T | None = None
        self.at: float | None = None  # monotonic time of the last successful read
        self.error: str = ""  # the last read's failure ("" if it succeeded)
        self.failures = 0  # reads that raised
        self.overdue = 0  # scrapes that found a read still running past the deadline
        self.fresh = False  # the last get() returned a read that succeeded in time

    def _run(self, done: threading.Event) -> None:
        try:
            value = self._read()
        except Exception as exc:  # the value stays the last good one; the error is shown
            with self._lock:
                self.error = f"{type(exc).__name__}: {exc}"
                self.failures += 1
                self._inflight = None
            done.set()
            return
        with self._lock:
            self.value, self.at, self.error = value, self._clock(), ""
            self._inflight = None
        done.set()

    def get(self) -> tuple[T | None, float | None]:
        """(value, age in seconds) after waiting at most ``deadline`` for a fresh read;
        (None, None) if no read has succeeded yet."""
        with self._lock:
            done = self._inflight
            fresh = self.at is not None and self._clock() - self.at < self.min_interval
            if done is None and not fresh:
                done = self._inflight = threading.Event()
                threading.Thread(target=self._run, args=(done,), daemon=True,
                                 name=f"metrics-probe-{self.name}").start()
        came_back = done is None or done.wait(self.deadline)
        with self._lock:
            if not came_back:
                self.overdue += 1
            self.fresh = came_back and (fresh or (not self.error and self.at is not None))
            age = None if self.at is None else max(0.0, self._clock() - self.at)
            return self.value, age

    @property
    def in_flight(self) -> bool:
        """True while a read has not come back."""
        return self._inflight is not None

    def describe(self) -> dict[str, Any]:
        """State for tests and logs."""
        return {"name": self.name, "at": self.at, "error": self.error,
                "failures": self.failures, "overdue": self.overdue,
                "in_flight": self.in_flight}
