"""The NFSv4 lab for tests: ``tests/nfslab/lab.sh`` (nfs-ganesha + namespaces miqm-a/miqm-b).

The session fixture ``nfs_lab`` is registered once for all modules in
``tests/conftest.py``. It skips, with the reason, unless running as root with
nfs-ganesha, iproute2 and libnfs installed (``make install-system``); it brings the lab up
in a temporary directory with a 5 s lease (``MIQM_LAB_LEASE`` overrides) and always
tears it down.

:data:`HOLDER` is a small lock-holder program for ``python -c``: run it in a namespace
with :meth:`NfsLab.holder` and drive it through :class:`LabProcess`.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from miqm import lab as mlab
from miqm.lab import LAB_LOCK, SERVER, lab_leftovers, lab_missing

__all__ = ["HOLDER", "LAB_LOCK", "LEASE", "SERVER", "LabProcess", "NfsLab", "lab_leftovers",
           "lab_missing", "last_words", "nfs_lab"]

LEASE = int(os.environ.get("MIQM_LAB_LEASE", "5"))  # seconds; 5 keeps the tests short
LAB_LOCK_WAIT = 90.0

# A lock holder: argv = url path mode(exclusive|shared) wait_seconds poll_seconds.
# Prints one JSON object per line: {"event": ..., "t": time.time(), ...}. Tries the lock
# until granted or wait_seconds pass ("refused"); once "locked", prints "suspect" when
# reachability() turns SUSPECT (also "ok" when it recovers) and "lost" when it turns LOST.
# Commands on stdin: "write" (pwrite+fdatasync through the locked file: "wrote" or
# "write_failed"), "renew" (renew_now(): ask the server whatever this side believes:
# "renewed" or "renew_failed"), "status", "quit" (unlock, close, exit).
HOLDER = r'''
import json, sys, threading, time
from lockfs import LockMode, Reachability, open_volume
from lockfs.errors import LockFsError
url, path, mode = sys.argv[1:4]
wait, poll = float(sys.argv[4]), float(sys.argv[5])
out = threading.Lock()
def say(event, **kw):
    with out:
        print(json.dumps(dict(event=event, t=time.time(), **kw)), flush=True)
vol = open_volume(url)
try:
    f = vol.open(path)
except LockFsError:
    f = vol.open(path, create=True)
say("opened")
lm = LockMode.EXCLUSIVE if mode == "exclusive" else LockMode.SHARED
deadline = time.monotonic() + wait
attempts = 0
while True:
    attempts += 1
    if f.try_lock(lm):
        break
    if time.monotonic() >= deadline:
        say("refused", attempts=attempts)
        sys.exit(3)
    time.sleep(poll)
say("locked", attempts=attempts, lease=vol.lease_seconds)
def watch():
    state = Reachability.OK
    while state is not Reachability.LOST:
        now = f.reachability()
        if now is not state:
            state = now
            say(now.value, lease_age=f.lease_age())
        time.sleep(0.02)
threading.Thread(target=watch, daemon=True).start()
for line in sys.stdin:
    cmd = line.strip()
    if cmd == "write":
        try:
            f.pwrite(b"holder-was-here", 0)
            f.fdatasync()
            say("wrote")
        except LockFsError as exc:
            say("write_failed", error=type(exc).__name__, message=str(exc))
    elif cmd == "renew":
        try:
            say("renewed", answered=f.renew_now())
        except LockFsError as exc:
            say("renew_failed", error=type(exc).__name__, message=str(exc))
    elif cmd == "status":
        say("status", lost=f.lock_lost(), reachability=f.reachability().value)
    elif cmd == "quit":
        break
try:
    f.close()
finally:
    vol.close()
say("closed")
'''


def last_words(*dirs: Path, host: str) -> list[dict[str, Any]]:
    """The ``fatal`` events of ``host``'s instances in the event files (``*.jsonl*``) under
    ``dirs`` (a shared events/ directory, a host's own copy), torn lines skipped."""
    found = []
    for d in dirs:
        for f in sorted(d.rglob("*.jsonl*")) if d.is_dir() else []:
            for raw in f.read_text(errors="replace").splitlines():
                try:
                    ev = json.loads(raw)
                except ValueError:
                    continue  # a torn last line
                if ev.get("event") == "fatal" and ev.get("host") == host:
                    found.append(ev)
    return found


class LabProcess:
    """A process started in a lab namespace whose stdout is JSON lines (see HOLDER)."""

    def __init__(self, proc: subprocess.Popen[str], name: str) -> None:
        self.proc = proc
        self.name = name
        self.events: list[dict[str, Any]] = []
        self._q: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._stderr: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                ev = {"event": "output", "text": line.rstrip(), "t": time.time()}
            self._q.put(ev)
        self._q.put(None)

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._stderr.append(line)

    def expect(self, *events: str, timeout: float = 30.0) -> dict[str, Any]:
        """The next event among ``events`` (others are kept in ``events``); fails on
        timeout or exit."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{self.name}: none of {events} within {timeout}s; "
                                     f"seen {self.events}; stderr: {self.stderr()}")
            try:
                ev = self._q.get(timeout=left)
            except queue.Empty:
                continue
            if ev is None:
                self._q.put(None)
                raise AssertionError(f"{self.name} exited ({self.proc.poll()}) before "
                                     f"{events}; seen {self.events}; stderr: {self.stderr()}")
            self.events.append(ev)
            if ev["event"] in events:
                return ev

    def saw(self, event: str) -> dict[str, Any] | None:
        """The first ``event`` already read, if any (drains what is queued first)."""
        while True:
            try:
                ev = self._q.get_nowait()
            except queue.Empty:
                break
            if ev is None:
                self._q.put(None)
                break
            self.events.append(ev)
        return next((e for e in self.events if e["event"] == event), None)

    def send(self, command: str) -> None:
        """Write one command line to its stdin."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def stderr(self) -> str:
        return "".join(self._stderr)[-2000:]

    def stop(self) -> None:
        """Kill it (if still running) and reap it."""
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass


class NfsLab(mlab.NfsLab):
    """:class:`miqm.lab.NfsLab` plus the lock-holder program the lockfs tests drive."""

    def holder(self, ns: str, url: str, path: str, *, mode: str = "exclusive",
               wait: float = 0.0, poll: float = 0.2) -> LabProcess:
        """Start :data:`HOLDER` in namespace ``ns``."""
        argv = [sys.executable, "-c", HOLDER, url, path, mode, str(wait), str(poll)]
        return LabProcess(self.run_in(ns, argv), f"holder@{ns}")


@pytest.fixture(scope="session")
def nfs_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NfsLab]:
    """The NFSv4 lab, up for the whole session (lease 5 s), always torn down."""
    reason = lab_missing()
    if reason:
        pytest.skip(f"NFSv4 lab: {reason}")
    entered = False
    try:
        with mlab.lab_session(tmp_path_factory.mktemp("nfslab"), LEASE,
                              LAB_LOCK_WAIT) as base:
            entered = True
            yield NfsLab(base.dir, base.server, base.lease)
    except mlab.LabError as exc:
        if entered:
            raise  # the teardown left something behind: that fails the run
        pytest.skip(f"NFSv4 lab: {exc}")
