"""The queue manager error log ``errors/AMQERR01.LOG`` (rotating to 02 and 03).

Both instances append MQ-style entries to the same files on the shared data directory.
Writing happens on a background thread so that the verify, monitor and liveness threads
never block on a slow or hung filesystem just to say something; :meth:`ErrorLog.flush`
waits (with a deadline) for what was queued, for the last words before an instance stops.
"""

from __future__ import annotations

import datetime as _dt
import os
import queue
import threading
import time
from collections.abc import Callable

from lockfs.errors import LockFsError, VolumeNotFound
from lockfs.volume import Volume
from miqm.text import one_line

DIR = "errors"
MAX_BYTES = 2 * 1024 * 1024  # per file before rotation


def format_entry(amq: str, text: str, *, qmgr: str, host: str, pid: int,
                 now: float | None = None) -> str:
    """One entry in MQ's layout: header line, process line, message (on one line: see
    :func:`one_line`), separator."""
    text = one_line(text)
    ts = _dt.datetime.fromtimestamp(time.time() if now is None else now, _dt.UTC)
    return (f"{ts.strftime('%m/%d/%Y %I:%M:%S %p')} - Process({pid}) Host({host}) "
            f"QMgr({qmgr})\n"
            f"{amq}: {text}\n"
            "----- miqm -----------------------------------------------------------------\n")


def make_dir_within(volume: Volume, name: str) -> None:
    """Create ``name`` in the volume's directory, but never the directory itself: the
    queue manager's data directory removed (or a filesystem unmounted under it) was made
    again, empty, by the writers of the error log and the event history, so that the
    entries went into a directory in the way of the one being restored. VolumeNotFound
    when the volume's directory is gone."""
    mkdir = getattr(volume, "mkdir", None)
    if mkdir is not None:  # one level, never the parents: nothing between look and make
        mkdir(name)
        return
    if not volume.exists(""):
        raise VolumeNotFound(f"{volume.describe()} no longer exists")
    volume.makedirs(name)


class ErrorLog:
    """Append-only MQ error log on a volume, written by a daemon thread.

    The constructor first checks (synchronously) that ``errors/AMQERR01.LOG`` can be
    written, and raises ConfigError (AMQ6062) if not: an instance must not start with its
    error log lost, since that log is where MQ administrators look first. Later failures
    to write are dropped (an unwritable error log must not stop a running queue manager).
    """

    def __init__(self, volume: Volume, qmgr: str, host: str, *,
                 echo: Callable[[str, str], None] | None = None,
                 max_bytes: int = MAX_BYTES, local_dir: str | None = None) -> None:
        self.volume = volume
        self.qmgr = qmgr
        self.host = host
        self.pid = os.getpid()
        self.max_bytes = max_bytes
        self.echo = echo
        #: this host's own error directory (``$MIQM_DATA_ROOT/errors``, MQ's system error
        #: log /var/mqm/errors): where an entry goes when the shared log cannot be written
        self.local_dir = local_dir
        self.check()
        self._q: queue.Queue[str | None] = queue.Queue()
        self._done = threading.Condition()
        self._queued = 0
        self._written = 0
        self._thread = threading.Thread(target=self._run, name="errlog", daemon=True)
        self._thread.start()

    def check(self) -> None:
        """ConfigError (AMQ6062, one line saying what to do) unless ``errors/`` is (or can
        be made) a directory holding a writable ``AMQERR01.LOG``: e.g. ``errors`` replaced
        by a plain file, or AMQERR01.LOG by a directory."""
        from miqm import amq as table
        from miqm.errors import ConfigError

        try:
            self.volume.makedirs(DIR)
            with self.volume.open(f"{DIR}/AMQERR01.LOG", create=True):
                pass
        except LockFsError as exc:
            where = self.volume.describe()
            why = str(exc)
            try:
                if not self.volume.stat(DIR).is_dir:
                    why = f"{where}/{DIR} is a file, not a directory"
            except LockFsError:
                pass
            raise ConfigError(table.line("AMQ6062", path=where, detail=(
                f"its error log {DIR}/AMQERR01.LOG cannot be written ({why}). Make "
                f"{where}/{DIR} a directory the queue manager can write (move aside "
                "whatever is in its place) and start the queue manager again."))) from None

    def write(self, amq: str, text: str | None = None, **fields: object) -> None:
        """Queue an entry (never blocks on the filesystem). Without ``text`` the entry is
        the message table's text for ``amq`` (:mod:`miqm.amq`) with ``fields`` filled."""
        if text is None:
            from miqm import amq as table

            fields.setdefault("qmgr", self.qmgr)
            text = table.text(amq, **fields)
        entry = format_entry(amq, text, qmgr=self.qmgr, host=self.host, pid=self.pid)
        if self.echo is not None:  # strmqm --foreground: stdout too
            self.echo(amq, text)
        with self._done:
            self._queued += 1
        self._q.put(entry)

    def flush(self, timeout: float = 2.0) -> bool:
        """Wait until everything queued is written; False if the deadline passed."""
        deadline = time.monotonic() + timeout
        with self._done:
            while self._written < self._queued:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._done.wait(left)
        return True

    def close(self, timeout: float = 2.0) -> None:
        """Flush and stop the writer thread."""
        self.flush(timeout)
        self._q.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            entry = self._q.get()
            if entry is None:
                return
            try:
                self._append(entry)
            except LockFsError:
                # an unwritable error log must not stop the queue manager; the entry goes
                # to this host's own error log instead (the shared directory removed or
                # unmounted: otherwise why both instances ended is written nowhere)
                self._append_local(entry)
            finally:
                with self._done:
                    self._written += 1
                    self._done.notify_all()

    def write_local(self, amq: str, text: str) -> bool:
        """Write an entry to this host's own error log now (synchronously, local disk):
        the last words of an instance whose shared error log did not take them in time
        (a hung filesystem). False if there is none or it cannot be written."""
        return self._append_local(format_entry(amq, text, qmgr=self.qmgr, host=self.host,
                                               pid=self.pid))

    def _append_local(self, entry: str) -> bool:
        if not self.local_dir:
            return False
        where = self.volume.describe()
        head, sep, rest = entry.partition("\n")
        body, sep2, tail = rest.partition("\n")
        entry = (f"{head}{sep}{body} (Written on this host: the queue manager's error log "
                 f"{where}/{DIR}/AMQERR01.LOG could not be written.){sep2}{tail}")
        path = os.path.join(self.local_dir, "AMQERR01.LOG")
        try:
            os.makedirs(self.local_dir, exist_ok=True)
            try:
                size = os.path.getsize(path)
            except FileNotFoundError:
                size = 0
            if size + len(entry) > self.max_bytes and size > 0:
                second = os.path.join(self.local_dir, "AMQERR02.LOG")
                if os.path.exists(second):
                    os.replace(second, os.path.join(self.local_dir, "AMQERR03.LOG"))
                os.replace(path, second)
            with open(path, "a", encoding="utf-8") as f:
                f.write(entry)
            return True
        except OSError:
            return False

    def _append(self, entry: str) -> None:
        path = f"{DIR}/AMQERR01.LOG"
        try:
            size = self.volume.stat(path).size
        except VolumeNotFound:
            make_dir_within(self.volume, DIR)
            size = 0
        if size + len(entry) > self.max_bytes and size > 0:
            self.volume.rename(f"{DIR}/AMQERR02.LOG", f"{DIR}/AMQERR03.LOG") \
                if self.volume.exists(f"{DIR}/AMQERR02.LOG") else None
            self.volume.rename(path, f"{DIR}/AMQERR02.LOG")
            size = 0
        with self.volume.open(path, create=True) as f:
            f.pwrite(entry.encode(), f.size())
