"""``miqm exporter -m QMgr [--port N] [--bind ADDR]``: a queue manager's metrics as the
shared files show it, with or without an instance on this host.

It serves what ``dspmq -m QMgr -x`` sees (:func:`miqm.cli.dspmq.probe` and
:func:`~miqm.cli.dspmq.describe`): the status (Running, Running elsewhere, Running as
standby, Ended unexpectedly, Status not available, ...), which instances hold the master
and standby locks and where, and the activation generation in the master record. So "no
active instance anywhere" can be alerted on when every instance is dead. The probe of
the shared files runs on a thread of its own with a deadline (dspmq's 0.9 s is too long
for a scrape: 0.08 s); past it the status is ``Status not available`` and the rest keeps
the last values read, with their age.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client.core import Metric

from miqm.ha.qmstatus import STATUSES
from miqm.metrics.families import Families
from miqm.metrics.probe import CachedProbe

DEFAULT_PORT = 9465
DEADLINE = 0.08


class QMgrCollector:
    """Samples of queue manager ``qmgr`` from its shared files, as seen from this host."""

    def __init__(self, qmgr: str, data_path: str, host: str, *, deadline: float = DEADLINE,
                 local: Callable[[], dict[str, Any] | None] | None = None,
                 warn: Callable[[str], None] | None = None) -> None:
        from miqm.cli.dspmq import probe
        from miqm.ha import runfile

        self.qmgr = qmgr
        self.host = host
        self.data_path = data_path
        #: where a read of the shared files that fails (or recovers) is said, once per
        #: change: a removed, unmounted or unreadable data directory showed only as
        #: "Status not available", the same as a slow one, and the exporter said nothing
        self._warn = warn or (lambda line: None)
        self._said = ""
        #: the damaged qmstatus.ini last said (dspmq's line), "" if none: its "Status not
        #: available" was served with the reads working, and the alert sent the operator
        #: to the mount and the NFS server while dspmq named the file and the remedy
        self._said_damaged = ""
        self._local = local or (lambda: runfile.read(qmgr))
        self.probe = CachedProbe("dspmq", lambda: probe(qmgr, data_path), deadline=deadline)
        self.scrapes = 0

    def describe(self) -> Iterable[Metric]:
        """Nothing up front (the registry must not probe the filesystem to describe)."""
        return []

    def collect(self) -> Iterable[Metric]:
        """The queue manager as dspmq -x sees it now."""
        from miqm.cli.dspmq import describe

        self.scrapes += 1
        probed, age = self.probe.get()
        fresh = self.probe.fresh
        self._say_read_error()
        local = self._local()
        info = describe(self.qmgr, probed if fresh else None, local)
        f = Families({"qmgr": self.qmgr, "instance": self.host})
        status = info["status"]
        names = STATUSES if status in STATUSES else (*STATUSES, status)
        f.gauge("miqm_qmgr_status", "1 for the queue manager's status as dspmq on this host "
                "shows it", samples=[({"status": s}, 1.0 if s == status else 0.0)
                                     for s in names])
        f.gauge("miqm_qmgr_status_available", "1 if the shared files answered within the "
                "deadline at this scrape", 1.0 if fresh else 0.0)
        f.gauge("miqm_qmgr_probe_age_seconds", "Age of the last successful read of the lock "
                "files and qmstatus.ini (-1: none yet)", -1.0 if age is None else age)
        f.counter("miqm_qmgr_probe_errors", "Reads of the shared files that failed (data "
                  "directory missing, unmounted or unreadable; not the ones that were only "
                  "slow); the exporter's output says why", self.probe.failures)
        last = describe(self.qmgr, probed, local) if probed is not None else None
        if last is not None:
            # the last successful read (see miqm_qmgr_probe_age_seconds for its age)
            actives = [i for i in last["instances"] if i["mode"] == "Active"]
            standbys = [i for i in last["instances"] if i["mode"] == "Standby"]
            f.gauge("miqm_qmgr_active", "1 if an instance holds the master lock (as last "
                    "read)", 1.0 if actives else 0.0)
            f.gauge("miqm_standby_present", "1 if a standby instance holds the standby lock "
                    "(as last read)", 1.0 if standbys else 0.0)
            f.gauge("miqm_standby_permitted", "1 if the active instance was started with -x "
                    "(dspmq STANDBY(Permitted), as last read)",
                    1.0 if last["standby"] == "Permitted" else 0.0)
            damaged = str(last.get("status_damaged") or "")
            f.gauge("miqm_qmgr_status_damaged", "1 if qmstatus.ini (the queue manager's "
                    "last status) is damaged, as last read: dspmq -x names it and the "
                    "remedy; the exporter's output says it once", 1.0 if damaged else 0.0)
            self._say_damaged(damaged)
            f.gauge("miqm_qmgr_instance", "1 for each instance holding a lock, with its host "
                    "and mode (dspmq -x)",
                    samples=[({"host": str(i["host"]), "mode": str(i["mode"])}, 1.0)
                             for i in (*actives, *standbys)])
            master = (probed or {}).get("locks", {}).get("master") or {}
            if master.get("generation") is not None:
                f.gauge("miqm_qmgr_generation", "Activation generation in the master lock "
                        "record (rises with every activation)", float(master["generation"]))
        return f.out

    def _say_damaged(self, damaged: str) -> None:
        """One line when qmstatus.ini is found damaged (dspmq's own words: which file and
        what to do), one when it is sound again; nothing for every scrape in between."""
        if damaged == self._said_damaged:
            return
        if damaged:
            self._warn(f"miqm exporter: '{self.qmgr}': {' '.join(damaged.split())}")
        else:
            self._warn(f"miqm exporter: '{self.qmgr}': qmstatus.ini in {self.data_path} "
                       "can be read again")
        self._said_damaged = damaged

    def _say_read_error(self) -> None:
        """One line when the reads of the shared files start failing (or fail otherwise),
        one when they work again; nothing for every scrape in between."""
        error = self.probe.error
        if error == self._said:
            return
        if error:
            self._warn(f"miqm exporter: cannot read the shared files of '{self.qmgr}' in "
                       f"{self.data_path} ({error}): serving 'Status not available' until "
                       "they can be read; check the mount and the directory's permissions "
                       "on this host")
        else:
            self._warn(f"miqm exporter: the shared files of '{self.qmgr}' in "
                       f"{self.data_path} can be read again")
        self._said = error


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run_exporter(qmgr: str, port: int, bind: str, *, echo: Callable[[str], None] = print,
                 stop: threading.Event | None = None) -> int:
    """Serve until SIGTERM/SIGINT (or ``stop``); returns the exit code."""
    from miqm.metrics.server import serve
    from miqm.paths import find, hostname

    entry = find(qmgr)
    collector = QMgrCollector(qmgr, entry.data_path, hostname(), warn=_stderr)
    # --port 0 is refused on the command line: no "0: no endpoint" advice here
    server = serve(collector, port, bind, "--port", advice="choose another with --port",
                   bind_what="--bind")
    host, bound = server.address
    # an IPv6 address in a URL is in brackets (http://::1:9465/ is not a URL a browser,
    # curl or a scrape config takes)
    where = f"[{host}]" if ":" in host else host
    echo(f"miqm exporter: serving queue manager '{qmgr}' as seen from {hostname()} on "
         f"http://{where}:{bound}/metrics (Ctrl-C or SIGTERM ends it)")
    stop = stop or threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    try:
        while not stop.wait(1.0):
            pass
    finally:
        server.stop()
    return 0
