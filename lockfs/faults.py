"""A fault-injecting Volume wrapper for tests: stall an operation, fail it with EIO, lose a
lock, tear a write.

``FaultyVolume(inner, [Fault(...), ...])`` passes every call through to ``inner`` unless a
fault matches it. A :class:`Fault` names the operation (``pread``, ``pwrite``,
``fdatasync``, ``open``, ``rename``, ``try_lock``, ``lock_lost``, ``write_atomic``…, or
``*``), a glob for the path (``master``, ``S*.LOG``), what to do, and when:

* ``stall``: sleep ``seconds`` before the call (a hung NFS server), or until released;
* ``eio``: raise :class:`VolumeIOError` (errno EIO) instead of doing the call;
* ``lost``: the file's locks are lost (``lock_lost()`` is True and later I/O through it
  raises :class:`LockLostError`), as after an NFSv4 lease expiry;
* ``tear``: a ``pwrite`` writes only its first ``keep`` bytes, then raises EIO;
* ``suspect``: the file's ``reachability()`` is ``SUSPECT`` (renewals failing, lease may
  still hold) while the fault is in force: until ``release`` is set or ``seconds`` have
  passed since it first fired. Name the op ``reachability`` (or ``*``).

* ``stop``: a test-only pause point for ``pwrite``: the backend calls it just before the
  write goes on the wire, after every check it makes (the nfs4 lease anchor included);
  it writes ``report`` (a JSON object: ``path``, ``offset``, ``data`` in hex, ``pid``) if
  given, then stops the whole process with SIGSTOP, exactly as if it had been paused
  there. The test resumes it with SIGCONT (nfs4 backend only: posix writes may go
  through direct descriptors the wrapper never sees). ``skip`` lets that many matching
  sends go out first (the next piece of the same write then stops with its file's state
  just renewed by the previous piece: the widest window). ``contains`` (text)
  limits it to sends whose bytes contain that text (a write of new data, not a page
  written again unchanged).

``lost`` makes ``reachability()`` ``LOST``. ``after`` (seconds from when the wrapper was
made) delays a fault; ``armed`` (a file path) holds it back until that file exists, so a
test arms a fault from an event it has seen (the instance reports Running, a put was
acknowledged) by creating the file rather than after a guessed number of seconds.
``times`` limits how often a fault fires (0 = always); setting a fault's ``release``
event ends a stall at once and ends a ``suspect`` fault. Integration tests
inject faults into a real execution controller through the environment: ``MIQM_FAULTS``
holds a JSON list of fault objects (or one object), keys as the dataclass fields plus
``volume``: ``data`` or ``log``, e.g.
``MIQM_FAULTS='[{"volume": "data", "op": "pread", "path": "master", "kind": "stall",
"seconds": 30, "after": 5}]'``. A malformed value raises ``ValueError`` naming the
variable, rather than running without the faults a test asked for.
"""

from __future__ import annotations

import errno
import fnmatch
import json
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from lockfs.errors import LockLostError, VolumeIOError
from lockfs.volume import WHOLE_FILE, FileStat, LockMode, Reachability, Volume, VolumeFile

ENV = "MIQM_FAULTS"
KINDS = ("stall", "eio", "lost", "tear", "suspect", "stop")


@dataclass
class Fault:
    """One injected fault (see the module docstring)."""

    op: str
    path: str = "*"
    kind: str = "eio"  # stall | eio | lost | tear | suspect | stop
    seconds: float = 3600.0
    after: float = 0.0
    times: int = 0
    keep: int = 100
    volume: str = "*"
    armed: str = ""
    report: str = ""
    skip: int = 0
    contains: str = ""
    fired: int = 0
    release: threading.Event = field(default_factory=threading.Event, repr=False)
    first_fired: float | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"fault kind {self.kind!r} is not one of {', '.join(KINDS)}")

    def matches(self, op: str, path: str, age: float) -> bool:
        """True if this fault applies to ``op`` on ``path`` ``age`` seconds in."""
        return ((self.op == "*" or self.op == op) and fnmatch.fnmatch(path, self.path)
                and age >= self.after and (self.times == 0 or self.fired < self.times)
                and self.is_armed())

    def is_armed(self) -> bool:
        """True unless ``armed`` names a file that does not exist yet (once armed, always)."""
        if not self.armed:
            return True
        if os.path.exists(self.armed):
            self.armed = ""
            return True
        return False

    def in_force(self, now: float) -> bool:
        """For a ``suspect`` fault that has fired: not yet released nor timed out."""
        return (self.first_fired is not None and not self.release.is_set()
                and now - self.first_fired < self.seconds)


def faults_from_env(volume_tag: str) -> list[Fault]:
    """The faults in ``MIQM_FAULTS`` that apply to volume ``volume_tag``."""
    raw = os.environ.get(ENV)
    if not raw:
        return []
    try:
        items = json.loads(raw)
        if isinstance(items, dict):
            items = [items]
        if not isinstance(items, list) or not all(isinstance(d, dict) for d in items):
            raise ValueError("expected a JSON object or a list of objects")
        settable = set(Fault.__dataclass_fields__) - {"fired", "release", "first_fired"}
        out = []
        for d in items:
            unknown = set(d) - settable
            if unknown:
                raise ValueError(f"unknown keys {sorted(unknown)}")
            f = Fault(**d)
            if f.volume in ("*", volume_tag):
                out.append(f)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{ENV}={raw!r}: {exc}") from None
    return out


class _Injector:
    def __init__(self, faults: list[Fault]) -> None:
        self.faults = faults
        self.born = time.monotonic()
        self.lost_paths: set[str] = set()

    def check(self, op: str, path: str) -> Fault | None:
        age = time.monotonic() - self.born
        for f in self.faults:
            if f.kind != "stop" and f.matches(op, path, age):
                f.fired += 1
                if f.kind == "stall":
                    f.release.wait(f.seconds)
                    continue
                if f.kind == "eio":
                    raise VolumeIOError(f"injected EIO on {op} {path}", errno=errno.EIO,
                                        path=path)
                if f.kind == "lost":
                    self.lost_paths.add(path)
                    continue
                if f.kind == "suspect":
                    if f.first_fired is None:
                        f.first_fired = time.monotonic()
                    continue
                return f  # tear: the caller applies it
        if path in self.lost_paths and op not in ("lock_lost", "close", "unlock",
                                                  "reachability"):
            raise LockLostError(f"injected: the lock on {path} was lost", path=path)
        return None

    def before_send(self, op: str, path: str, offset: int, data: bytes) -> None:
        """The backend's pause point: a matching ``stop`` fault stops the process here."""
        age = time.monotonic() - self.born
        for f in self.faults:
            if f.kind == "stop" and f.matches(op, path, age):
                if f.contains and f.contains.encode() not in data:
                    continue
                if f.skip > 0:
                    f.skip -= 1  # this one goes out: its file's state is renewed now
                    continue
                f.fired += 1
                if f.report:
                    tmp = f"{f.report}.tmp"
                    with open(tmp, "w") as out:
                        json.dump({"op": op, "path": path, "offset": offset,
                                   "data": bytes(data).hex(), "pid": os.getpid()}, out)
                    os.replace(tmp, f.report)
                # directed at this thread: a process-wide SIGSTOP may be taken by another
                # thread, and this one would run on (and send the write) until it stops too
                signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)

    def suspect(self, path: str) -> bool:
        """True while a fired ``suspect`` fault for ``path`` is in force."""
        now = time.monotonic()
        return any(f.kind == "suspect" and fnmatch.fnmatch(path, f.path) and f.in_force(now)
                   for f in self.faults)


class FaultyFile(VolumeFile):
    """A file whose calls go through the injector first."""

    def __init__(self, inner: VolumeFile, inj: _Injector, path: str) -> None:
        self.inner = inner
        self.inj = inj
        self.path = path  # relative to the volume, as faults name it

    def pread(self, size: int, offset: int) -> bytes:
        self.inj.check("pread", self.path)
        return self.inner.pread(size, offset)

    def pwrite(self, data: bytes | bytearray | memoryview, offset: int) -> None:
        tear = self.inj.check("pwrite", self.path)
        if tear is not None:
            self.inner.pwrite(bytes(data)[:tear.keep], offset)
            raise VolumeIOError(f"injected torn write on {self.path}", errno=errno.EIO,
                                path=self.path)
        self.inner.pwrite(data, offset)

    def fdatasync(self) -> None:
        self.inj.check("fdatasync", self.path)
        self.inner.fdatasync()

    def size(self) -> int:
        self.inj.check("size", self.path)
        return self.inner.size()

    def truncate(self, size: int) -> None:
        self.inj.check("truncate", self.path)
        self.inner.truncate(size)

    def try_lock(self, mode: LockMode, start: int = 0, length: int = WHOLE_FILE) -> bool:
        self.inj.check("try_lock", self.path)
        return self.inner.try_lock(mode, start, length)

    def unlock(self, start: int = 0, length: int = WHOLE_FILE) -> None:
        self.inner.unlock(start, length)

    def lock_lost(self) -> bool:
        self.inj.check("lock_lost", self.path)
        return self.path in self.inj.lost_paths or self.inner.lock_lost()

    def lease_age(self) -> float | None:
        return self.inner.lease_age()

    def file_id(self) -> int | None:
        return self.inner.file_id()

    def renew_after(self, since: float) -> None:
        self.inj.check("renew_after", self.path)
        self.inner.renew_after(since)

    def reachability(self) -> Reachability:
        lost = self.lock_lost()  # fires faults named for lock_lost as well
        self.inj.check("reachability", self.path)
        if lost or self.path in self.inj.lost_paths:
            return Reachability.LOST
        inner = self.inner.reachability()
        if inner is Reachability.OK and self.inj.suspect(self.path):
            return Reachability.SUSPECT
        return inner

    def conflicting_lock(self, mode: LockMode, start: int = 0,
                         length: int = WHOLE_FILE) -> bool:
        query = getattr(self.inner, "conflicting_lock", None)
        if query is None:
            raise AttributeError("conflicting_lock")
        return bool(query(mode, start, length))

    def close(self) -> None:
        self.inner.close()


class FaultyVolume(Volume):
    """Wraps a volume and applies ``faults`` to its operations."""

    def __init__(self, inner: Volume, faults: list[Fault]) -> None:
        self.inner = inner
        self.url = inner.url
        self.injector = _Injector(faults)
        if any(f.kind == "stop" for f in faults):
            inner.before_send = self.injector.before_send

    @property  # type: ignore[override]
    def lease_seconds(self) -> float | None:  # type: ignore[override]
        """The wrapped volume's lease (it may learn it from the server later)."""
        return self.inner.lease_seconds

    @lease_seconds.setter
    def lease_seconds(self, value: float | None) -> None:
        self.inner.lease_seconds = value

    @property  # type: ignore[override]
    def write_fence(self) -> Callable[[], None] | None:  # type: ignore[override]
        """The wrapped volume's fence (the backend is what calls it)."""
        return self.inner.write_fence

    @write_fence.setter
    def write_fence(self, value: Callable[[], None] | None) -> None:
        self.inner.write_fence = value

    @property  # type: ignore[override]
    def lease_anchor(self) -> VolumeFile | None:  # type: ignore[override]
        """The wrapped volume's lease anchor (the backend is what uses it)."""
        return self.inner.lease_anchor

    @lease_anchor.setter
    def lease_anchor(self, value: VolumeFile | None) -> None:
        self.inner.lease_anchor = value

    def reachability(self) -> Reachability:
        return self.inner.reachability()

    @property
    def faults(self) -> list[Fault]:
        """The faults (tests add to or release them)."""
        return self.injector.faults

    def open(self, path: str, *, create: bool = False, exclusive: bool = False) -> VolumeFile:
        self.injector.check("open", path)
        return FaultyFile(self.inner.open(path, create=create, exclusive=exclusive),
                          self.injector, path)

    def open_readonly(self, path: str) -> VolumeFile:
        self.injector.check("open", path)
        return FaultyFile(self.inner.open_readonly(path), self.injector, path)

    def stat(self, path: str) -> FileStat:
        self.injector.check("stat", path)
        return self.inner.stat(path)

    def listdir(self, path: str = "") -> list[str]:
        self.injector.check("listdir", path)
        return self.inner.listdir(path)

    def makedirs(self, path: str) -> None:
        self.inner.makedirs(path)

    def rename(self, src: str, dst: str) -> None:
        self.injector.check("rename", dst)
        self.inner.rename(src, dst)

    def unlink(self, path: str) -> None:
        self.injector.check("unlink", path)
        self.inner.unlink(path)

    def rmdir(self, path: str) -> None:
        self.inner.rmdir(path)

    def write_atomic(self, path: str, data: bytes) -> None:
        self.injector.check("write_atomic", path)
        super().write_atomic(path, data)

    def close(self) -> None:
        self.inner.close()

    def describe(self) -> str:
        return self.inner.describe()


def wrap_from_env(volume: Volume, tag: str) -> Volume:
    """``volume`` wrapped with the faults ``MIQM_FAULTS`` sets for ``tag``, if any."""
    faults = faults_from_env(tag)
    return FaultyVolume(volume, faults) if faults else volume
