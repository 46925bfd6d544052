"""Self-fencing: the ownership belief and the verify, monitor and liveness threads.

* :class:`Ownership` is this instance's belief that it still owns the queue manager's
  data, with an expiry on the monotonic clock. Only a successful verify renews it. The
  store's ``write_guard`` is :meth:`Ownership.guard`: while the belief is current it costs
  a clock read; once expired (the process was paused, or verify is stuck) the guard
  verifies *synchronously* before letting any write through, and a failed verify stops
  the instance. So nothing is written on an expired belief.
* The **verify** loop rereads the master lock record every VerifyInterval through the
  locked file's own descriptor; a changed owner, a lost lock or a failed read is fatal
  (AMQ7279).
* The **monitor** loop watches verify: a verify in progress for longer than MonitorStall
  (a read hung on a partitioned NFS mount) is fatal (AMQ7280).
* The **liveness** loop asks the log for (forces completed, callers waiting): callers
  waiting at two checks LivenessInterval apart with no force completed between them is
  fatal (AMQ7280). A busy logger completes forces, so it never trips.

``fatal(amq, text)`` is the controller's: it must stop the process without writing.
Clocks and sleeps are injected so the timing logic is tested in milliseconds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from miqm.errors import OwnershipLostError
from miqm.histogram import Histogram

Clock = Callable[[], float]


def belief_validity(verify_interval: float, monitor_stall: float,
                    leases: tuple[float | None, ...]) -> float:
    """How long a successful verify makes the ownership belief last: VerifyInterval +
    MonitorStall, and no more than 2/3 of the shortest lease known (``None``: a volume
    that cannot tell its lease). A kernel NFSv4 mount is a posix volume with no lease of
    its own, and its lease is qm.ini's FilesystemLease: left out, a belief of
    VerifyInterval + MonitorStall could run to within a second of the lease (the load
    check only asks for less than the lease), and a write started unverified late in it
    (a partition began just after the last verify) went out with the lease all but gone,
    without the margin the nfs4:// path keeps for a server that ends a lease early."""
    validity = verify_interval + monitor_stall
    known = [lease for lease in leases if lease is not None]
    if known:
        validity = min(validity, min(known) * 2 / 3)
    return validity


class Ownership:
    """The belief that this instance owns the data, valid until ``expires``."""

    def __init__(self, validity: float, verify: Callable[[], None],
                 clock: Clock = time.monotonic,
                 suspect: Callable[[], bool] = lambda: False) -> None:
        self.validity = validity
        self._verify = verify
        self._clock = clock
        self._suspect = suspect  # the filesystem says SUSPECT: verify before any write
        self._lock = threading.Lock()
        self.expires = float("-inf")
        self.revoked = False

    def renew(self, verified_at: float | None = None) -> None:
        """A verify that started at ``verified_at`` succeeded."""
        at = self._clock() if verified_at is None else verified_at
        if not self.revoked:
            self.expires = max(self.expires, at + self.validity)

    def current(self) -> bool:
        """True while the belief has not expired."""
        return not self.revoked and self._clock() < self.expires

    def revoke(self) -> None:
        """Never write again (the instance is stopping)."""
        self.revoked = True
        self.expires = float("-inf")

    def guard(self) -> None:
        """The store's write guard: raise rather than let a write through unowned."""
        if self.revoked:
            raise OwnershipLostError("this instance no longer owns the queue manager data",
                                     amq="AMQ7279")
        if self._clock() < self.expires and not self._suspect():
            return
        with self._lock:  # one synchronous re-verify for all writers that found it expired
            if self._clock() < self.expires and not self._suspect():
                return
            started = self._clock()
            self._verify()  # raises OwnershipLostError when the lock is not ours
            self.renew(started)


class Monitors:
    """The verify, monitor and liveness threads of an active instance."""

    def __init__(self, ownership: Ownership, verify: Callable[[], float],
                 progress: Callable[[], tuple[int, int]], fatal: Callable[[str, str], None],
                 *, verify_interval: float, monitor_stall: float, liveness_interval: float,
                 event: Callable[..., None] | None = None,
                 health: Callable[[], tuple[str, str] | None] | None = None,
                 clock: Clock = time.monotonic) -> None:
        self.ownership = ownership
        self._health = health or (lambda: None)
        self._verify = verify  # returns its latency in seconds; raises when not ours
        self._progress = progress
        self._fatal = fatal
        self.verify_interval = verify_interval
        self.monitor_stall = monitor_stall
        self.liveness_interval = liveness_interval
        self._event = event or (lambda *a, **k: None)
        self._clock = clock
        self._stop = threading.Event()
        self.verify_started: float | None = None  # set while a verify is in progress
        self.verifies = 0
        self.verify_seconds = Histogram()  # each successful verify's latency (metrics)
        self.liveness_at: float | None = None  # when the last liveness check ran
        self._last_progress: tuple[int, int] | None = None
        self._last_monitor_event = float("-inf")
        self._threads: list[threading.Thread] = []

    # -- one step each (called by the threads; tests call them directly) ---------------
    def verify_once(self) -> bool:
        """One verify; renews the belief on success, else reports AMQ7279."""
        started = self._clock()
        self.verify_started = started
        try:
            latency = self._verify()
        except Exception as exc:  # a failed read is as fatal as a changed owner
            self.verify_started = None
            self._event("verify", ok=False, error=str(exc))
            self._fatal("AMQ7279", f"verify of the master lock failed: {exc}")
            return False
        self.verify_started = None
        self.verifies += 1
        self.verify_seconds.observe(latency)
        self.ownership.renew(started)
        self._event("verify", ok=True, latency_s=round(latency, 6))
        return True

    def monitor_once(self) -> bool:
        """False (and AMQ7280) if a verify has been in progress longer than MonitorStall;
        False (and the reported AMQ message) if the health check reports a failure (the
        store stopped after a failed log write, say)."""
        problem = self._health()
        if problem is not None:
            self._event("health", ok=False, amq=problem[0], detail=problem[1])
            self._fatal(*problem)
            return False
        started = self.verify_started
        now = self._clock()
        if now - self._last_monitor_event >= self.verify_interval:
            # one record per verify interval, not per tick: the history shows the monitor ran
            self._last_monitor_event = now
            self._event("monitor", ok=True,
                        verify_running_s=None if started is None else round(now - started, 3))
        if started is not None and now - started > self.monitor_stall:
            stalled = now - started
            self._event("monitor_stall", stalled_s=round(stalled, 3))
            self._fatal("AMQ7280", f"the verify of the master lock has been stalled for "
                                   f"{stalled:.1f}s (MonitorStall {self.monitor_stall:g}s)")
            return False
        return True

    def liveness_once(self) -> bool:
        """False (and AMQ7280) if callers waited on the log across a whole interval with no
        force completing."""
        now = self._progress()
        before, self._last_progress = self._last_progress, now
        self.liveness_at = self._clock()
        stuck = before is not None and now[1] > 0 and before[1] > 0 and now[0] == before[0]
        self._event("liveness", forces=now[0], waiting=now[1], ok=not stuck)
        if stuck:
            self._fatal("AMQ7280", f"the logger made no progress for "
                                   f"{self.liveness_interval:g}s with {now[1]} callers waiting")
            return False
        return True

    # -- threads -------------------------------------------------------------------
    def start(self) -> None:
        """Start the three daemon threads."""
        tick = max(0.01, min(1.0, self.monitor_stall / 8))
        for name, step, every in (("verify", self.verify_once, self.verify_interval),
                                  ("monitor", self.monitor_once, tick),
                                  ("liveness", self.liveness_once, self.liveness_interval)):
            t = threading.Thread(target=self._loop, args=(step, every), name=name,
                                 daemon=True)
            t.start()
            self._threads.append(t)

    def _loop(self, step: Callable[[], bool], every: float) -> None:
        while not self._stop.wait(every):
            if not step():
                return

    def stop(self) -> None:
        """Stop the threads (clean shutdown)."""
        self._stop.set()

    def margins(self, lease: float | None = None, lease_age: float | None = None
                ) -> dict[str, float]:
        """Seconds left before each check would stop the instance, read without waiting
        on anything (the metrics scrape): ``monitor`` (MonitorStall less the time the
        verify in progress has run; with an NFSv4 ``lease``, no more than 3/5 of it less
        ``lease_age``), ``liveness`` (callers waiting at the last check and no force since:
        the time until the next check; otherwise that plus a whole interval), and
        ``ownership`` (until the belief expires and writes verify first; negative once
        expired)."""
        now = self._clock()
        started = self.verify_started
        monitor = self.monitor_stall - (0.0 if started is None else now - started)
        if lease is not None and lease_age is not None:
            monitor = min(monitor, 0.6 * lease - lease_age)
        last = self._last_progress
        at = self.liveness_at
        next_check = self.liveness_interval if at is None else max(
            0.0, at + self.liveness_interval - now)
        liveness = next_check + self.liveness_interval
        if last is not None and last[1] > 0:
            try:
                forces, waiting = self._progress()
            except Exception:  # a log being closed: no verdict from it
                forces, waiting = last[0] + 1, 0
            if forces == last[0] and waiting > 0:
                liveness = next_check
        return {"monitor": monitor, "liveness": liveness,
                "ownership": self.ownership.expires - now}
