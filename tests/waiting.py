"""Wait on a condition, not a guessed number of seconds (tests run on a busy machine)."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(condition: Callable[[], object], what: str, timeout: float = 30.0,
               poll: float = 0.005) -> None:
    """Return as soon as ``condition()`` is true; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout:g}s")
        time.sleep(poll)
