"""The event history: JSON lines, one file per host, ``events/<host>.jsonl`` in the data
directory (format in docs/events.md, version 1). Input to the analysis jobs.

Every event has ``v`` (format version), ``ts`` (UTC ISO-8601), ``qmgr``, ``host``,
``instance_id`` and ``event``, plus its own fields. Lines are written by a background
thread so control threads never wait on the filesystem.
"""

from __future__ import annotations

import datetime as _dt
import json
import queue
import threading
from typing import Any

from lockfs.errors import LockFsError
from lockfs.volume import Volume

VERSION = 1
DIR = "events"


class EventLog:
    """Appends events for one instance."""

    def __init__(self, volume: Volume | None, qmgr: str, host: str, instance_id: str) -> None:
        self.volume = volume
        self.qmgr = qmgr
        self.host = host
        self.instance_id = instance_id
        self._q: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="events", daemon=True)
        self._thread.start()

    def emit(self, event: str, **fields: Any) -> None:
        """Record one event (never blocks on the filesystem)."""
        rec = {"v": VERSION,
               "ts": _dt.datetime.now(_dt.UTC).isoformat(timespec="microseconds"),
               "qmgr": self.qmgr, "host": self.host, "instance_id": self.instance_id,
               "event": event, **fields}
        self._q.put(json.dumps(rec, default=str, separators=(",", ":")) + "\n")

    def close(self, timeout: float = 2.0) -> None:
        """Write what is queued and stop."""
        self._q.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        path = f"{DIR}/{self.host}.jsonl"
        while True:
            line = self._q.get()
            if line is None:
                return
            lines = [line]
            while True:  # batch what is already queued into one write
                try:
                    more = self._q.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._write(path, lines)
                    return
                lines.append(more)
            self._write(path, lines)

    def _write(self, path: str, lines: list[str]) -> None:
        if self.volume is None:
            return
        try:
            self.volume.makedirs(DIR)
            with self.volume.open(path, create=True) as f:
                f.pwrite("".join(lines).encode(), f.size())
        except LockFsError:
            pass  # history is best effort; the error log says what matters
