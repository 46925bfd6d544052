"""Test results, their likely causes, and the three ways they are printed.

Every test ends as one :class:`TestResult`: passed or not, how long it took, and for a
failure the reason, the likely cause and what to change. Unexpected lockfs errors met in a
test are turned into a failed result by :func:`from_error` (never a traceback).
"""

from __future__ import annotations

import errno as errno_mod
import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from lockfs.errors import (
    LockFsError,
    LockLostError,
    VolumeIOError,
    VolumeNotFound,
    VolumePermissionError,
    VolumeStalled,
)
from miqm.errors import MiqmError

SUCCESS = "The tests on the directory completed successfully."

#: the tests whose notes are printed without -v: what limits a pass (a local filesystem,
#: a partner on the same host), changed what was asked (a reduced test file) or says what
#: to do next (-a stopped: run -i)
SHOWN_NOTES = ("mount options", "format test file", "waiting and releasing locks",
               "concurrent writes", "integrity analysis",
               # -a: why it stopped writing, after how many pages, and that -i is next
               "logger-style writes")

# Likely causes, named as the administrator will look for them.
CAUSE_PERMISSIONS = "permissions"
CAUSE_UIDGID = "uid/gid mismatch"
CAUSE_READONLY = "read-only"
CAUSE_LOCKS = "locks not enforced across hosts"
CAUSE_LEASE = "lease not honoured"
CAUSE_MOUNT = "mount options"
CAUSE_SLOW = "filesystem too slow"
CAUSE_INTEGRITY = "failed writes landed after an outage"
CAUSE_SERVER = "server not answering"
CAUSE_POSIX = "not POSIX locking"
CAUSE_PARTNER = "no second process"
CAUSE_IO = "I/O error"
CAUSE_FULL = "filesystem full"
CAUSE_BUSY = "another amqmfsck at work"
#: this process itself was stopped (SIGSTOP, a frozen VM) or cut off while it waited:
#: nothing it measured meanwhile says anything about the filesystem
CAUSE_STOPPED = "this process was stopped"


class FsckError(MiqmError):
    """amqmfsck cannot run at all (bad directory, bad options, missing test file)."""

    exit_code = 2

    def user_line(self) -> str:
        """The line shown: named as the command, like a failed test's first line."""
        text = super().user_line()
        return text if text.startswith("amqmfsck") else f"amqmfsck: {text}"


def is_full(exc: BaseException) -> bool:
    """True for an error that says the filesystem (or the user's quota) is full."""
    text = str(exc)
    return getattr(exc, "errno", None) in (errno_mod.ENOSPC, errno_mod.EDQUOT) or any(
        s in text for s in ("No space left", "NFS4ERR_NOSPC", "NFS4ERR_DQUOT",
                            "quota exceeded"))


@dataclass
class TestResult:
    """One test: ``ok``, duration, and for a failure ``reason``/``cause``/``advice``."""

    name: str
    ok: bool = True
    seconds: float = 0.0
    reason: str = ""
    cause: str = ""
    advice: str = ""
    steps: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    def fail(self, reason: str, cause: str, advice: str = "") -> TestResult:
        """Mark failed (the first failure's reason is kept)."""
        if self.ok:
            self.ok, self.reason, self.cause, self.advice = False, reason, cause, advice
        return self

    def step(self, text: str) -> None:
        """A step explained with -v."""
        self.steps.append(text)


class Failed(Exception):
    """Raised inside a test body to end it with a failure (see :func:`run_test`)."""

    def __init__(self, reason: str, cause: str, advice: str = "") -> None:
        super().__init__(reason)
        self.reason, self.cause, self.advice = reason, cause, advice


def from_error(exc: BaseException, what: str) -> tuple[str, str, str]:
    """(reason, cause, advice) for an error met while doing ``what``."""
    text = str(exc)
    err = getattr(exc, "errno", None)
    if isinstance(exc, VolumePermissionError) or err in (errno_mod.EACCES, errno_mod.EPERM,
                                                          errno_mod.EROFS):
        if err == errno_mod.EROFS or "ROFS" in text or "Read-only" in text:
            return (f"{what}: the filesystem is read-only ({text})", CAUSE_READONLY,
                    "mount it read-write (and export it rw on the server)")
        return (f"{what}: permission denied ({text})", CAUSE_PERMISSIONS,
                "give the user that runs the queue manager (mqm) write access: same owner, "
                "same uid and gid on every host, mode 2775 on the directory")
    if isinstance(exc, VolumeStalled) or (isinstance(exc, VolumeIOError) and (
            text.startswith("mount ") or ": mount " in text)):
        return (f"{what}: the NFS server did not answer ({text})", CAUSE_SERVER,
                "check that the server runs and is reachable from this host")
    if is_full(exc):
        return (f"{what}: the filesystem is full ({text})", CAUSE_FULL,
                "free space on the filesystem, or raise the user's quota: a queue manager "
                "needs room for its log extents and queue files")
    if isinstance(exc, LockLostError):
        return (f"{what}: a lock this process held was lost under it ({text})", CAUSE_LEASE,
                "the lease ran out while the holder lived: check the server's lease and "
                "that the client renews it")
    if isinstance(exc, VolumeNotFound):
        return (f"{what}: a file vanished ({text})", CAUSE_IO,
                "another program removed the test files: run one test at a time")
    if isinstance(exc, (LockFsError, OSError)):
        return f"{what}: {text}", CAUSE_IO, "check the mount and the server's logs"
    return f"{what}: {type(exc).__name__}: {text}", CAUSE_IO, ""


@contextmanager
def run_test(results: list[TestResult], name: str,
             clock: Callable[[], float] = time.monotonic) -> Iterator[TestResult]:
    """Time a test body; :class:`Failed` and lockfs/OS errors become a failed result."""
    res = TestResult(name)
    results.append(res)
    t0 = clock()
    try:
        yield res
    except Failed as exc:
        res.fail(exc.reason, exc.cause, exc.advice)
    except (LockFsError, OSError) as exc:
        res.fail(*from_error(exc, name))
    finally:
        res.seconds = round(clock() - t0, 4)


@dataclass
class Report:
    """Everything one run found."""

    directory: str
    mode: str
    tests: list[TestResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(t.ok for t in self.tests)

    def first_failure(self) -> TestResult | None:
        return next((t for t in self.tests if not t.ok), None)

    def as_json(self) -> dict[str, Any]:
        """The --json document."""
        return {"directory": self.directory, "mode": self.mode, "ok": self.ok,
                "message": SUCCESS if self.ok else None,
                "tests": [asdict(t) for t in self.tests], "notes": self.notes}

    def render(self, verbose: bool) -> tuple[str, str]:
        """(stdout text, stderr text) for a terminal."""
        out: list[str] = []
        err: list[str] = []
        if verbose:
            for t in self.tests:
                state = "passed" if t.ok else "FAILED"
                out.append(f"Test '{t.name}' {state} ({t.seconds:.3f} s).")
                out += [f"  - {s}" for s in t.steps]
                out += [f"  note: {n}" for n in t.notes]
                if not t.ok:
                    out.append(f"  reason: {t.reason}")
                    out.append(f"  likely cause: {t.cause}")
                    if t.advice:
                        out.append(f"  what to change: {t.advice}")
            out += [f"Note: {n}" for n in self.notes]
        else:
            out += [f"Note: {n}" for t in self.tests if t.name in SHOWN_NOTES
                    for n in t.notes]
        failed = self.first_failure()
        if failed is None:
            out.append(SUCCESS)
        else:
            where = (self.directory if self.directory.isprintable()
                     else repr(self.directory))  # one line, whatever the name holds
            err.append(f"amqmfsck: test '{failed.name}' failed on {where}.")
            err.append(f"Reason: {failed.reason}")
            err.append(f"Likely cause: {failed.cause}"
                       + (f" ({failed.advice})" if failed.advice and not verbose else ""))
        return "\n".join(out), "\n".join(err)

    def emit(self, verbose: bool, as_json: bool) -> int:
        """Print the report; the exit code (0 success, 1 a test failed)."""
        if as_json:
            sys.stdout.write(json.dumps(self.as_json(), indent=2) + "\n")
            if not self.ok:
                _, err = self.render(False)
                sys.stderr.write(err + "\n")
        else:
            out, err = self.render(verbose)
            if out:
                sys.stdout.write(out + "\n")
            if err:
                sys.stderr.write(err + "\n")
        return 0 if self.ok else 1


def percentiles(samples: list[float]) -> dict[str, float]:
    """p50, p99, max (seconds) and the count of ``samples``."""
    if not samples:
        return {"count": 0, "p50": 0.0, "p99": 0.0, "max": 0.0}
    s = sorted(samples)

    def at(q: float) -> float:
        return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]

    return {"count": len(s), "p50": round(at(0.5), 6), "p99": round(at(0.99), 6),
            "max": round(s[-1], 6)}
