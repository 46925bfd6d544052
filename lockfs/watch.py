"""Early wake-up for a standby polling lock files, where the filesystem can tell.

On a local filesystem a ``watchdog`` (inotify) observer on the data directory reports
when a lock file is written or *closed*: when the active instance dies, the kernel closes
its descriptors, and the close of ``master`` wakes the standby at once instead of at its
next poll. Polling stays the rule (remote filesystems report nothing reliable); this only
shortens the wait. Spurious wake-ups (dspmq opening the file) cost one non-blocking lock
attempt.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer


class _Handler(FileSystemEventHandler):
    def __init__(self, names: set[str], wake: threading.Event) -> None:
        self.names = names
        self.wake = wake

    def on_any_event(self, event: FileSystemEvent) -> None:
        path = event.src_path if isinstance(event.src_path, str) else event.src_path.decode()
        if os.path.basename(path) in self.names:
            self.wake.set()


class LockWatch:
    """Sets ``wake`` whenever one of ``names`` in ``directory`` changes or is closed."""

    def __init__(self, directory: str, names: set[str], wake: threading.Event) -> None:
        self.directory = directory
        self._handler = _Handler(names, wake)
        self._observer: Any = None

    def start(self) -> bool:
        """Start watching; False (and polling only) if the directory cannot be watched."""
        try:
            observer = Observer()
            observer.schedule(self._handler, self.directory, recursive=False)
            observer.daemon = True
            observer.start()
        except Exception:  # no inotify, too many watches, not a local path: poll only
            return False
        self._observer = observer
        return True

    def stop(self) -> None:
        """Stop watching."""
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(2.0)
            self._observer = None


def watch_local(location: str, names: set[str], wake: threading.Event) -> LockWatch | None:
    """A started watch for a local directory ``location``; None for URLs or on failure."""
    if "://" in location or not os.path.isdir(location):
        return None
    w = LockWatch(location, names, wake)
    return w if w.start() else None
