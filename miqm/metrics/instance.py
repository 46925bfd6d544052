"""The one Collector of a running instance (active or standby): every sample is built at
scrape time from the execution controller's live objects, with no bookkeeping of its own.

What it reads, and how it keeps off the instance's critical paths:

* the controller's role and status, generation, takeover, lock-attempt histograms;
  the monitors' verify histogram and margins (plain attribute reads, no lock);
* the store: the log's write statistics and force histograms (``stats(list_files=False)``:
  memory only), log space, checkpoint histogram, restart recovery time, and each queue's
  depth and uncommitted messages from a copy of the queue table taken without the store
  lock (a list copy under the interpreter lock; a single attribute read per queue);
* the listener's open sessions and the queue service's put and get counts;
* the shared filesystem (the standby lock file, a linear log's directory): only through
  a :class:`~miqm.metrics.probe.CachedProbe` on volumes of its own, so a hung NFS server
  costs the scrape at most the probe deadline and shows as a growing
  ``miqm_filesystem_probe_age_seconds``.
"""

from __future__ import annotations

import calendar
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client.core import Metric

from miqm.ha.qmstatus import STATUSES
from miqm.metrics.families import Families
from miqm.metrics.probe import CachedProbe
from miqm.metrics.settings import DEFAULT_QUEUE_LIMIT
from miqm.net.server import REFUSAL_REASONS

ROLES = ("starting", "active", "standby")


def log_space_pinned(store: Any) -> int:
    """Log bytes from the first record of the oldest unit of work in flight to the head
    of the log (0 with none): what AMQ7469 weighs against the unit limit. The space in
    use (restart point to head) is not: it climbs to half the log between checkpoints
    with every unit committed at once, so an alert on it paged a healthy queue manager.
    Read without the store lock: the units are copied in one C call, as the queues are."""
    uows = getattr(getattr(store, "state", None), "uows", None)
    head = getattr(store, "_last_lsn", None)
    if uows is None or head is None:
        return 0
    firsts = [u.first_lsn for u in list(uows.units.values()) if u.first_lsn is not None]
    return max(0, int(head) - min(firsts)) if firsts else 0


class InstanceCollector:
    """Samples of one instance (``ctl``: a :class:`miqm.ha.controller.Controller`)."""

    def __init__(self, ctl: Any, *, deadline: float = 0.05,
                 clock: Callable[[], float] = time.monotonic,
                 queue_limit: int = DEFAULT_QUEUE_LIMIT) -> None:
        self.ctl = ctl
        self._clock = clock
        #: queues with series of their own (qm.ini Metrics: QueueLimit); the rest are
        #: counted in miqm_queues_unexported and still seen by miqm_queue_fullest_ratio
        self.queue_limit = queue_limit
        self.errors = 0  # parts of a scrape that failed (the rest is still served)
        self.last_error = ""
        self._reported = ""  # the last failure written to the error log, and when
        self._reported_at: float | None = None
        self._volumes: dict[str, Any] = {}
        self.fs = CachedProbe("shared", self._read_shared, deadline=deadline,
                              min_interval=1.0, clock=clock)

    # ---------------------------------------------------------------- filesystem
    def _volume(self, key: str, url: str) -> Any:
        """A volume of the probe's own (never the controller's: a hung call here must not
        hold a lock the instance's own I/O needs)."""
        vol = self._volumes.get(key)
        if vol is None:
            from lockfs.faults import wrap_from_env
            from lockfs.volume import open_volume

            vol = self._volumes[key] = wrap_from_env(open_volume(url), key)
        return vol

    def _read_shared(self) -> dict[str, Any]:
        """What only the shared filesystem can say (runs on the probe's thread)."""
        from lockfs.lockfile import peek

        ctl = self.ctl
        out: dict[str, Any] = {}
        if ctl.mode == "active":
            # never peek a file this process holds locked: the active holds master and
            # active, not standby
            record, held = peek(self._volume("data", ctl.data.url), "standby")
            if held is not None:
                out["standby_present"] = bool(held)
                out["standby_host"] = record.host if (held and record) else ""
        store = getattr(ctl, "store", None)
        log = getattr(store, "log", None)
        if log is not None and not getattr(log, "circular", True):
            names = [n for n in self._volume("log", log.volume.url).listdir("")
                     if n.startswith("S") and n.endswith(".LOG")]
            active = [k for k, _n in log._ctl.active] if hasattr(log, "_ctl") else []
            first = active[0] if active else 0
            out["log_files"] = len(names)
            out["log_inactive"] = sum(1 for n in names if int(n[1:8]) < first)
        return out

    # ---------------------------------------------------------------- collect
    def describe(self) -> Iterable[Metric]:
        """Nothing up front: the registry must not call collect() to describe."""
        return []

    def collect(self) -> Iterable[Metric]:
        """Every sample of this instance, now."""
        ctl = self.ctl
        f = Families({"qmgr": ctl.qmgr, "instance": ctl.host})
        for part in (self._identity, self._ha, self._store, self._net, self._shared):
            try:
                part(f)
            except Exception as exc:  # one part failing leaves the others served
                self.errors += 1
                self.last_error = f"{part.__name__}: {type(exc).__name__}: {exc}"
                self._report(self.last_error)
        f.counter("miqm_metrics_collect_errors", "Parts of a scrape that failed (the rest "
                  "was served); the error log says which and why (AMQ7880)", self.errors)
        return f.out

    #: seconds between two error-log lines about failed parts of scrapes (a scrape a
    #: second failing the same way writes one line, not 86,400 a day)
    REPORT_INTERVAL = 60.0

    def _report(self, what: str) -> None:
        """Write a failed part of a scrape to the instance's error log: a new failure at
        once, the same one again at most every REPORT_INTERVAL. The count alone said
        nothing of which part or why, and the families of that part were just missing
        (the queue families: no MiqmQueueNearlyFull). The line is written on a thread of
        its own: the error log is on the shared filesystem, which a scrape never waits for."""
        now = self._clock()
        if (what == self._reported and self._reported_at is not None
                and now - self._reported_at < self.REPORT_INTERVAL):
            return
        self._reported, self._reported_at = what, now
        say = getattr(self.ctl, "say", None)
        if say is None:
            return
        line = (f"A part of a metrics scrape failed ({what}); its metrics are missing from "
                "the scrapes until it works again, the rest is served. "
                "miqm_metrics_collect_errors_total counts them.")

        def write() -> None:
            try:
                say("AMQ7880", line)
            except Exception:  # an error log that cannot be written: the count stays
                pass

        threading.Thread(target=write, name="metrics-report", daemon=True).start()

    def _identity(self, f: Families) -> None:
        ctl = self.ctl
        from miqm import amq

        f.gauge("miqm_instance_info", "This instance: process id and version (always 1)",
                samples=[({"pid": str(ctl.pid), "version": amq.VERSION}, 1)])
        mode = str(ctl.mode)
        f.gauge("miqm_instance_role", "1 for this instance's role: starting, active or "
                "standby", samples=[({"role": r}, 1.0 if r == mode else 0.0) for r in ROLES])
        status = str(ctl.status)
        names = STATUSES if status in STATUSES else (*STATUSES, status)
        f.gauge("miqm_instance_status", "1 for this instance's status as dspmq shows it",
                samples=[({"status": s}, 1.0 if s == status else 0.0) for s in names])

    def _ha(self, f: Families) -> None:
        ctl = self.ctl
        cfg = getattr(ctl, "cfg", None)
        ha = getattr(cfg, "ha", None)
        if ha is not None:
            f.gauge("miqm_verify_interval_seconds", "qm.ini VerifyInterval",
                    ha.verify_interval)
            f.gauge("miqm_monitor_stall_seconds", "qm.ini MonitorStall", ha.monitor_stall)
            f.gauge("miqm_liveness_interval_seconds", "qm.ini LivenessInterval",
                    ha.liveness_interval)
        record = getattr(ctl, "record", None)
        if ctl.mode == "active" and record is not None:
            f.gauge("miqm_generation", "Activation generation this active instance holds "
                    "(rises with every activation of the queue manager)", record.generation)
        takeover = getattr(ctl, "takeover", None) or {}
        kind = takeover.get("kind")
        f.counter("miqm_failovers", "Failovers this instance took (it became active after "
                  "the active instance failed)", 1 if kind == "failover" else 0)
        f.counter("miqm_switchovers", "Switchovers this instance took (endmqm -s elsewhere)",
                  1 if kind == "switchover" else 0)
        if kind:
            f.gauge("miqm_takeover_timestamp_seconds", "When this instance took over (Unix "
                    "time)", samples=[({"kind": kind}, takeover["at"])])
            f.gauge("miqm_takeover_duration_seconds", "From the standby getting the master "
                    "lock to running as the active instance",
                    samples=[({"kind": kind}, takeover["seconds"])])
        locks = dict(getattr(ctl, "lock_seconds", {}) or {})
        if locks:
            f.histogram("miqm_lock_attempt_seconds", "Latency of each attempt on a lock file "
                        "(granted or not)", [({"lock": n}, h) for n, h in sorted(locks.items())])
        mon = getattr(ctl, "monitors", None)
        if mon is None:
            return
        f.histogram("miqm_verify_seconds", "Latency of each successful verify of the master "
                    "lock record", [({}, mon.verify_seconds)])
        started = mon.verify_started
        f.gauge("miqm_verify_running_seconds", "How long the verify in progress has run (0: "
                "none running); MonitorStall stops the instance",
                0.0 if started is None else max(0.0, self._clock() - started))
        master = getattr(ctl, "master", None)
        lease = getattr(getattr(ctl, "data", None), "lease_seconds", None)
        age = master.lease_age() if master is not None else None
        m = mon.margins(lease, age)
        f.gauge("miqm_monitor_margin_seconds", "Seconds before the monitor would stop this "
                "instance (verify stalled past MonitorStall, or master lease unrenewed)",
                m["monitor"])
        f.gauge("miqm_liveness_margin_seconds", "Seconds before the liveness check would "
                "stop this instance (below LivenessInterval: callers have waited on the log "
                "since the last check with no force completing)", m["liveness"])
        f.gauge("miqm_ownership_margin_seconds", "Seconds before the ownership belief "
                "expires (then every write verifies first)", m["ownership"])

    def _store(self, f: Families) -> None:
        store = getattr(self.ctl, "store", None)
        if store is None:
            return
        log = store.log
        try:
            st = log.stats(list_files=False)
        except TypeError:  # a log without the keyword
            st = log.stats()
        hist = getattr(log, "force_seconds", None)
        if hist is not None:
            f.histogram("miqm_log_write_seconds", "Time of each log force (write and sync)",
                        [({}, hist)])
            f.histogram("miqm_log_write_bytes", "Log bytes each force made durable",
                        [({}, log.force_bytes)])
        f.counter("miqm_log_forces", "Log forces completed (amqldmpa Forces)",
                  st.get("Forces", 0))
        us = 1e-6
        for key, name, what in (
                ("WriteTimeShort", "short", "moving average over about 8 forces"),
                ("WriteTimeLong", "long", "moving average over about 128 forces"),
                ("WriteTimeShortMax", "short_max", "high-water mark of the short average"),
                ("WriteTimeLongMax", "long_max", "high-water mark of the long average"),
                ("WriteTimeMax", "max", "longest single force since start")):
            if key in st:
                f.gauge(f"miqm_log_write_time_{name}_seconds", f"amqldmpa {key}: {what}",
                        st[key] * us)
        at = st.get("WriteTimeMaxAt")
        if at:
            f.gauge("miqm_log_write_time_max_timestamp_seconds", "When the longest force "
                    "happened (amqldmpa WriteTimeMax at)",
                    calendar.timegm((int(at[0:4]), int(at[5:7]), int(at[8:10]),
                                     int(at[11:13]), int(at[14:16]), int(at[17:19]), 0, 0, 0)))
        files = st.get("WriteTimeMaxFiles") or []
        if files:
            f.gauge("miqm_log_write_time_file_max_seconds", "Longest force on each of the "
                    "last log files written (amqldmpa WriteTimeMax[i], 0 oldest)",
                    samples=[({"file": str(i)}, v * us) for i, v in enumerate(files)])
        for key, name in (("WriteSizeShort", "short"), ("WriteSizeLong", "long"),
                          ("WriteSizeMax", "max")):
            if key in st:
                f.gauge(f"miqm_log_write_size_{name}_bytes", f"amqldmpa {key}", st[key])
        inactive = st.get("loginactive")
        if inactive is None:
            inactive = (self.fs.value or {}).get("log_inactive")
        ext = [({"state": "active"}, st.get("logactive", 0))]
        if inactive is not None:
            ext.append(({"state": "inactive"}, inactive))
        f.gauge("miqm_log_extents", "Log extents (files): active (needed for restart) and "
                "inactive (linear logs: kept for media recovery or archiving)", samples=ext)
        capacity = int(getattr(log, "max_extents", 0)) * int(getattr(log, "extent_bytes", 0))
        if capacity:
            f.gauge("miqm_log_space_capacity_bytes", "Log space of the primary and secondary "
                    "extents", capacity)
            f.gauge("miqm_log_space_used_bytes", "Log space between the restart point and "
                    "the head of the log", float(log.usage()) * capacity)
        limit = getattr(store, "_pin_limit", None)
        if limit:
            f.gauge("miqm_log_space_unit_limit_bytes", "Log space a unit of work may pin "
                    "before it is backed out (AMQ7469)", limit)
            f.gauge("miqm_log_space_pinned_bytes", "Log space the oldest unit of work in "
                    "flight pins (its first record to the head; 0: none): what AMQ7469 "
                    "compares with the unit limit", log_space_pinned(store))
        backouts = getattr(store, "log_space_backouts", None)
        if backouts is not None:
            f.counter("miqm_log_space_backouts", "Units of work backed out (or, if prepared, "
                      "rolled forward) to release log space (AMQ7469) since this instance "
                      "opened the store", backouts)
        cps = getattr(store, "checkpoint_seconds", None)
        if cps is not None:
            f.histogram("miqm_checkpoint_seconds", "Duration of each checkpoint since this "
                        "instance opened the store (its count: checkpoints taken)",
                        [({}, cps)])
        rec = getattr(store, "recovery_stats", None) or {}
        if "seconds" in rec:
            f.gauge("miqm_restart_recovery_seconds", "Restart recovery (log replay) time when "
                    "this instance became active", rec["seconds"])
            f.gauge("miqm_restart_recovery_records", "Log records replayed by restart "
                    "recovery", rec.get("records", 0))
        damaged = set(getattr(store, "_damaged", {}) or {})
        # (depth, uncommitted, attributes) by name; read without the store lock, so
        # without waking a queue the catalog still holds (it has no message)
        table = store.state.queues
        rows: dict[str, tuple[int, int, dict[str, Any]]] = {
            n: (0, 0, a) for n, (_qid, a) in list(table.dormant().items())}
        rows.update((q.name, (q.depth, len(q.uncommitted) + len(q.locked), q.attrs))
                    for q in list(table.live()))
        # committed puts a takeover has not applied yet (until the queue's first use)
        for n, extra in table.deferred_counts().items():
            if n in rows:
                depth, unc, attrs = rows[n]
                rows[n] = (depth + extra, unc, attrs)
        every = sorted((n, r) for n, r in rows.items() if n not in damaged)
        # Per-queue series for the first QueueLimit queues by name (a stable set: no
        # series churn as depths move). With 10,000 queues the three families were 30,000
        # series and 2.5 MB a scrape, which took longer than a 1 s scrape timeout on a
        # busy host: the active then looked dead to Prometheus. The fullest queue of all
        # is still one gauge, so MiqmQueueNearlyFull sees a queue past the limit too.
        queues = every[:max(0, self.queue_limit)]
        f.gauge("miqm_queues", "Local queues of the queue manager (each has per-queue "
                "series up to qm.ini Metrics: QueueLimit)", len(every))
        f.gauge("miqm_queues_unexported", "Local queues without per-queue series (beyond "
                "qm.ini Metrics: QueueLimit, in name order)", len(every) - len(queues))
        fullest = unexported_fullest = 0.0
        for i, (_n, (depth, _unc, attrs)) in enumerate(every):
            maxdepth = float(attrs.get("MAXDEPTH", 0) or 0)
            ratio = depth / maxdepth if maxdepth > 0 else 0.0
            fullest = max(fullest, ratio)
            if i >= len(queues):
                unexported_fullest = max(unexported_fullest, ratio)
        f.gauge("miqm_queue_fullest_ratio", "Highest CURDEPTH/MAXDEPTH of any local queue "
                "(0-1; 1: full, puts fail with MQRC 2053)", fullest)
        # what MiqmQueueNearlyFull reads for the queues without series: with the fullest
        # of all, a nearly full queue past the limit was hidden behind an exported one
        # (one alert, naming the exported queue) and alerted only once that one drained
        f.gauge("miqm_queues_unexported_fullest_ratio", "Highest CURDEPTH/MAXDEPTH of the "
                "local queues without per-queue series (past qm.ini Metrics: QueueLimit; "
                "0 if none)", unexported_fullest)
        # a damaged queue has no depth to show and was left out without a trace: its
        # messages cannot be got (MQRC 2101) until it is recovered (AMQ7472)
        f.gauge("miqm_queues_damaged", "Local queues found damaged (AMQ7472, MQRC 2101: "
                "their messages cannot be got until rcrmqobj or a restore)", len(damaged))
        f.gauge("miqm_queue_depth", "Messages on each local queue (CURDEPTH)",
                samples=[({"queue": n}, r[0]) for n, r in queues])
        f.gauge("miqm_queue_uncommitted_messages", "Uncommitted puts and gets on each "
                "local queue", samples=[({"queue": n}, r[1]) for n, r in queues])
        f.gauge("miqm_queue_max_depth", "MAXDEPTH of each local queue",
                samples=[({"queue": n}, float(r[2].get("MAXDEPTH", 0) or 0))
                         for n, r in queues])

    def _net(self, f: Families) -> None:
        ctl = self.ctl
        listener = getattr(ctl, "listener", None)
        if listener is not None:
            f.gauge("miqm_connections", "Client connections open to this instance",
                    len(listener.sessions()))
            counts = dict.fromkeys(REFUSAL_REASONS, 0)
            counts.update(dict(listener.rejected))
            f.counter("miqm_listener_refused_connections", "Connections the listener "
                      "refused or closed, by reason (malformed frames, TLS mismatches, the "
                      "connection limit, silent or idle clients, ...) since it started",
                      samples=[({"reason": why}, n) for why, n in sorted(counts.items())])
            auth = getattr(listener, "authenticator", None)
            if auth is not None and hasattr(auth, "failures"):
                f.counter("miqm_authentication_failures", "Connection attempts with a "
                          "wrong or missing credential (MQRC 2035, AMQ5534) since the "
                          "listener started", auth.failures)
        service = getattr(ctl, "service", None)
        if service is not None and hasattr(service, "messages_put"):
            f.counter("miqm_messages_put", "Messages put by applications through this "
                      "instance", service.messages_put)
            f.counter("miqm_messages_got", "Messages got (destructively) by applications "
                      "through this instance", service.messages_got)
        authorizer = getattr(service, "authorizer", None)
        if authorizer is not None and hasattr(authorizer, "refusals"):
            f.counter("miqm_authorization_refusals", "Requests refused because the "
                      "principal lacks the authority (MQRC 2035, AMQ8077) since this "
                      "instance started", authorizer.refusals)

    def _shared(self, f: Families) -> None:
        if self.ctl.mode != "active":
            return
        value, age = self.fs.get()
        f.gauge("miqm_filesystem_probe_age_seconds", "Age of the last successful read of "
                "the shared files this instance's metrics need (grows while the shared "
                "filesystem hangs; -1: none yet)", -1.0 if age is None else age)
        f.gauge("miqm_filesystem_probe_in_flight", "1 while a read of the shared files has "
                "not come back", 1.0 if self.fs.in_flight else 0.0)
        f.gauge("miqm_standby_permitted", "1 if this active instance was started with -x "
                "(a standby instance may wait)", 1.0 if self.ctl.permit_standby else 0.0)
        if value and "standby_present" in value:
            f.gauge("miqm_standby_present", "1 if a standby instance holds the standby lock "
                    "(as last read)", 1.0 if value["standby_present"] else 0.0)
