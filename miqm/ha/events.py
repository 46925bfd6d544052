"""The event history: JSON lines, one file per host, ``events/<host>.jsonl`` in the data
directory (format in docs/events.md, version 1). Input to the analysis jobs
(``miqm analyze``, :mod:`miqm.analysis`).

Every event has ``v`` (format version), ``ts`` (UTC ISO-8601), ``qmgr``, ``host``,
``instance_id``, ``seq`` (per instance, from 1) and ``event``, plus its own fields. Lines
are written by background threads so control threads never wait on a filesystem.

Each instance also appends the same lines to a host-local copy,
``$MIQM_DATA_ROOT/events/<qmgr>/<host>.jsonl``, rotated by size (``.1``, ``.2``): cut off
from the shared directory, an active's last words (the failed verify, the AMQ7279 that
stops it) still reach its own disk. The local copy has its own thread, so a write to the
shared directory that hangs never holds it up.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import json
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

from lockfs.errors import LockFsError, VolumeNotFound
from lockfs.volume import Volume
from miqm.ha.errlog import make_dir_within

VERSION = 1
DIR = "events"
#: size at which the host-local copy is rotated (env MIQM_EVENTS_LOCAL_MAX_BYTES; 0: no copy)
LOCAL_MAX_BYTES = 8 * 1024 * 1024
#: rotated host-local files kept (``<host>.jsonl.1`` .. ``.N``)
LOCAL_KEEP = 2


def local_dir(qmgr: str) -> str:
    """Where this host keeps its copy of ``qmgr``'s events (``$MIQM_DATA_ROOT/events/QM``)."""
    from miqm import paths

    return os.path.join(paths.data_root(), DIR, qmgr)


def _local_max_bytes() -> int:
    try:
        return int(os.environ.get("MIQM_EVENTS_LOCAL_MAX_BYTES", LOCAL_MAX_BYTES))
    except ValueError:
        return LOCAL_MAX_BYTES


class _Writer:
    """One background thread writing batches of lines to one place."""

    def __init__(self, name: str, write: Callable[[list[str]], None]) -> None:
        self._q: queue.Queue[str | None] = queue.Queue()
        self._write = write
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def put(self, line: str | None) -> None:
        self._q.put(line)

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
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
                    self._write(lines)
                    return
                lines.append(more)
            self._write(lines)


class EventLog:
    """Appends events for one instance: to the shared data directory and to this host."""

    def __init__(self, volume: Volume | None, qmgr: str, host: str, instance_id: str,
                 local: str | None = "") -> None:
        """``local``: directory of the host-local copy ("" = :func:`local_dir`, None = none)."""
        self.volume = volume
        self.qmgr = qmgr
        self.host = host
        self.instance_id = instance_id
        self._seq = itertools.count(1)
        self._shared = _Writer("events", self._write)
        max_bytes = _local_max_bytes()
        self.local_path: str | None = None
        self._local: _Writer | None = None
        if local is not None and max_bytes > 0:
            self.local_path = os.path.join(local or local_dir(qmgr), f"{host}.jsonl")
            self._local_max = max_bytes
            self._local = _Writer("events-local", self._write_local)

    def emit(self, event: str, **fields: Any) -> None:
        """Record one event (never blocks on a filesystem)."""
        rec = {"v": VERSION,
               "ts": _dt.datetime.now(_dt.UTC).isoformat(timespec="microseconds"),
               "qmgr": self.qmgr, "host": self.host, "instance_id": self.instance_id,
               "seq": next(self._seq), "event": event, **fields}
        line = json.dumps(rec, default=str, separators=(",", ":")) + "\n"
        if self._local is not None:
            self._local.put(line)
        self._shared.put(line)

    def close(self, timeout: float = 2.0) -> None:
        """Write what is queued and stop (the local copy first: it cannot hang)."""
        if self._local is not None:
            self._local.put(None)
        self._shared.put(None)
        if self._local is not None:
            self._local.join(timeout)
        self._shared.join(timeout)

    def _write(self, lines: list[str]) -> None:
        if self.volume is None:
            return
        path = f"{DIR}/{self.host}.jsonl"
        try:
            try:
                f = self.volume.open(path, create=True)
            except VolumeNotFound:  # events/ missing; never the data directory itself
                make_dir_within(self.volume, DIR)
                f = self.volume.open(path, create=True)
            with f:
                end = f.size()
                data = "".join(lines).encode()
                if end and f.pread(1, end - 1) != b"\n":
                    data = b"\n" + data  # a torn last line (a crash): ours start anew
                f.pwrite(data, end)
        except LockFsError:
            pass  # history is best effort; the error log says what matters

    def _write_local(self, lines: list[str]) -> None:
        path = self.local_path
        assert path is not None
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            try:
                if os.path.getsize(path) >= self._local_max:
                    for i in range(LOCAL_KEEP, 1, -1):
                        if os.path.exists(f"{path}.{i - 1}"):
                            os.replace(f"{path}.{i - 1}", f"{path}.{i}")
                    os.replace(path, f"{path}.1")
            except FileNotFoundError:
                pass
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o640)
            try:
                _append_lines(fd, "".join(lines).encode())
            finally:
                os.close(fd)
        except OSError:
            pass  # best effort, like the shared copy


def _append_lines(fd: int, data: bytes) -> None:
    """``data`` (whole lines) appended to the file open on ``fd`` (O_APPEND): on a new line
    if the file ends in a torn one (a crash mid-write), written whole or not at all. A
    short write on a full disk left half a line, which the next write was glued onto,
    and both lines were lost to the analysis."""
    start = os.fstat(fd).st_size
    if start and os.pread(fd, 1, start - 1) != b"\n":
        data = b"\n" + data
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view):]
    except OSError:
        try:
            os.ftruncate(fd, start)  # take the part that went back out
        except OSError:
            pass
        raise
