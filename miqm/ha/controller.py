"""The execution controller: one process per instance (``python -m miqm.ha.controller``).

``strmqm [-x] QM`` starts it detached and waits on a pipe for its first verdict. It then:

1. tries ``master`` (exclusive, non-blocking). Got it: **active**. Not got it: without
   ``-x`` the start fails (the queue manager runs elsewhere); with ``-x`` it takes
   ``standby`` (exclusive, non-blocking; held already: a third instance, refused) and
   becomes the **standby**.
2. A standby keeps a control listener (it answers ``end`` and ``instance``; every other
   request gets MQRC 2543) and retries ``master`` every StandbyPollInterval, woken early
   by a watch on the lock files where the filesystem can tell. Never a blocking lock wait.
3. On getting ``master`` it checks ``qmstatus.ini``: data from another platform, a
   queue manager that crashed while starting (``PermitFailover=No``), or an active that
   ended without permitting switchover: the standby ends instead of taking over.
4. Active: a new activation generation above every one recorded (master record, log
   control file), the holder record in ``master`` and ``active``, status Starting, restart
   recovery with the store's writes guarded by the ownership belief, the listener and its
   address in ``<datadir>/listener``, status Running, then the verify / monitor /
   liveness threads.

A fatal condition (lost lock, stalled verify, stuck logger) stops the process at once
with ``os._exit`` after the belief is revoked and the error log line is queued: nothing
is written after ownership is in doubt.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import secrets
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from lockfs import open_volume
from lockfs.errors import (
    LockFsError,
    LockLostError,
    VolumeIOError,
    VolumeNotFound,
    VolumePermissionError,
    VolumeStalled,
)
from lockfs.lockfile import RECORD_SIZE, HolderRecord, LockFile, peek
from lockfs.volume import LockMode, Reachability, Volume, VolumeFile
from miqm import amq, paths
from miqm.config import QMConfig, decode_ini, read_qm_ini
from miqm.errors import ConfigError, HAError, MiqmError, OwnershipLostError
from miqm.ha import decide, qmstatus, runfile
from miqm.ha.decide import Action, State
from miqm.ha.errlog import ErrorLog
from miqm.ha.events import EventLog
from miqm.ha.monitors import Monitors, Ownership, belief_validity
from miqm.ha.qmstatus import QMStatus
from miqm.histogram import Histogram

EXIT_OK = 0
#: why an active instance stops when its master lock file is no longer at its path
MASTER_REPLACED = ("the master lock file was removed or replaced while this instance held "
                   "it (lock files must never be removed or copied by hand while an "
                   "instance runs): another instance could lock a new one, so this one "
                   "stops; restart it with strmqm -x")
EXIT_RUNNING_ELSEWHERE = 5  # MQ: queue manager running
EXIT_STANDBY_REFUSED = 69
EXIT_FATAL = 71
FATAL_EXIT = 70  # self-termination after losing ownership / unresponsive


def filesystem_failure(qmgr: str, exc: LockFsError) -> tuple[str, str]:
    """The AMQ number and line for a start that the data directory's filesystem failed:
    one that cannot be written (read-only, permissions) or is full is the
    administrator's to fix, said so (AMQ6062); anything else is AMQ6119."""
    code = exc.errno
    if code in (errno.EROFS, errno.EACCES, errno.EPERM):
        return "AMQ6062", (f"the data directory of '{qmgr}' cannot be written ({exc}): "
                           "mount it read-write and give the queue manager's user write "
                           "access to it, then start it again")
    if code in (errno.EISDIR, errno.ENOTDIR):
        return "AMQ6062", (f"a file of the data directory of '{qmgr}' is not what it "
                           f"should be ({exc}): a directory where a file belongs, or a file "
                           "where a directory belongs. With no instance running, move it "
                           "aside, then start the queue manager again")
    if code in (errno.ENOSPC, errno.EDQUOT):
        return "AMQ6062", (f"the data directory of '{qmgr}' is full ({exc}): free space "
                           "on its filesystem, then start it again")
    return "AMQ6119", f"the shared filesystem failed for '{qmgr}': {exc}"


#: an active instance's statuses in which its service answers: running, and ending until
#: the service refuses with 2161/2162 itself (_quiesce). Answering 2543 "a standby" in the
#: moment between the two misled clients, and a refused commit left its unit open.
_SERVING = frozenset({"Running", "Quiescing", "Ending immediately", "Ending pre-emptively"})

#: damaged objects named one by one on the console at a start; past it, a count (the
#: error log names every one)
CONSOLE_DAMAGE = 10
#: A controlled end (endmqm, -c, -w) waits this many seconds at most for the units of
#: work open when it began to commit or back out; those still open then are backed out
#: with their connections (docs/runbook.md, "Ending a queue manager")
QUIESCE_GRACE = 10.0


def console_damage(lines: list[str]) -> list[str]:
    """The AMQ7472 lines of a start, for the console: every one up to
    :data:`CONSOLE_DAMAGE`, else the first ones and how many more the error log names
    (a queue catalog lost in both copies names thousands)."""
    if len(lines) <= CONSOLE_DAMAGE:
        return list(lines)
    keep = CONSOLE_DAMAGE - 1
    return [*lines[:keep], f"... and {len(lines) - keep} more objects damaged: the error "
            "log (AMQERR01.LOG) names every one"]


#: the line for ``active`` held by an instance that does not hold ``master``
ACTIVE_HELD = ("the active lock of '{qmgr}' is held by {who}, which does not hold the "
               "master lock this instance was just granted: lock files were removed or "
               "replaced by hand while that instance ran, and two instances would write "
               "the queue manager's data at once.")
#: the lock file an active instance holds shared in its *log* directory beside ``active``
#: in the data directory: a data directory replaced under a running active (a copy or a
#: backup restored in its place, another export mounted there) leaves that active
#: holding locks on files no path names any more, and a new instance could lock the
#: copy's ``master`` and ``active`` and write the same log (seen: two actives, both
#: Running, until the first one's next verify). The log directory is not the copy's.
LOG_ACTIVE = "active"
#: the line for the log directory's ``active`` held by a live instance
LOG_ACTIVE_HELD = ("the log directory of '{qmgr}' is in use by {who}, which still runs as "
                   "the active instance though this instance was just granted the master "
                   "lock: the data directory or its lock files were replaced (a copy or a "
                   "backup put in its place, another filesystem mounted there, lock files "
                   "removed or made links) while that instance ran, and two instances "
                   "would write the same log.")
#: seconds a lock in the log directory held by the previous master holder is given to
#: go when no lease is known (posix: a dead process's locks go with it at once)
LOG_ACTIVE_GRACE = 2.0


class _ActiveHeld(Exception):
    """A takeover found ``active`` held by an instance other than master's last holder,
    or the log directory's ``active`` held by a live one (``line``: which)."""

    def __init__(self, who: str, line: str = ACTIVE_HELD) -> None:
        super().__init__(who)
        self.who = who
        self.line = line


class _NoSpace(Exception):
    """A takeover's store could not open because the shared filesystem is full."""

    def __init__(self, error: MiqmError) -> None:
        super().__init__(str(error))
        self.error = error


def _no_space(exc: BaseException | None) -> bool:
    """True if ``exc`` or an exception behind it is ENOSPC (no space left on device)."""
    seen = 0
    while exc is not None and seen < 10:
        if getattr(exc, "errno", None) == errno.ENOSPC:
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


class Verdict:
    """The one-line JSON answer to strmqm on its pipe (once)."""

    def __init__(self, fd: int | None) -> None:
        self.fd = fd
        self.sent = False

    def send(self, ok: bool, lines: list[str], code: int = 0, mode: str = "") -> None:
        if self.sent or self.fd is None:
            self.sent = True
            return
        self.sent = True
        data = json.dumps({"ok": ok, "lines": lines, "exit": code, "mode": mode}) + "\n"
        try:
            os.write(self.fd, data.encode())
            os.close(self.fd)
        except OSError:
            pass  # strmqm gave up waiting; the error log has it


class Controller:
    """One instance of one queue manager."""

    def __init__(self, qmgr: str, permit_standby: bool, verdict: Verdict) -> None:
        self.qmgr = qmgr
        self.permit_standby = permit_standby
        self.verdict = verdict
        self.pid = os.getpid()
        self.host = paths.hostname()
        self.lock_id = (int(time.time() * 1000) + secrets.randbelow(1000)) % 10**10
        self.instance_id = f"{self.host}-{self.pid}-{self.lock_id}"
        self.mode = "starting"
        self.status = "Starting"
        self.data: Volume
        self.log_volume: Volume
        self.cfg: QMConfig
        self.errlog: ErrorLog | None = None
        self.events: EventLog | None = None
        self.master: LockFile | None = None
        self.active_lock: LockFile | None = None
        #: the active's shared lock in the log directory (:data:`LOG_ACTIVE`)
        self.log_active_lock: LockFile | None = None
        self.standby_lock: LockFile | None = None
        self.record: HolderRecord | None = None
        self.ownership: Ownership | None = None
        self.monitors: Monitors | None = None
        self.store: Any = None
        self.service: Any = None
        self.listener: Any = None
        self.address: tuple[str, int] | None = None
        self._ended = threading.Event()
        self._end_request: dict[str, Any] | None = None
        #: set (under _lock) once this standby decided to take over: from then on it is
        #: the active instance to endmqm, though its mode says standby until it holds
        #: the locks (request_end)
        self._taking_over = False
        self._wake = threading.Event()
        self._watch: Any = None
        # the standby's read-ahead of deep queues' index files (miqm.store.qindex)
        self._index_cache: Any = None
        self._prefetch_stop = threading.Event()
        self._lock = threading.Lock()
        #: strmqm --foreground: every error-log entry is echoed here too
        self.echo: Any = None
        #: strmqm --foreground: a verdict line printed as it happens (AMQ1001 'starting.'
        #: came after the recovery entries echoed meanwhile)
        self.announce: Any = None
        self._no_space_said = False
        self._active_held_said = False
        #: the standby's attempts on master fail (AMQ1300 said, AMQ1301 not yet)
        self._unreachable = False
        # read by the metrics endpoint (miqm.metrics.instance) at scrape time
        self.lock_seconds: dict[str, Histogram] = {}  # lock file -> attempt latencies
        self.takeover: dict[str, Any] | None = None  # kind, at (epoch s), seconds
        self.metrics: Any = None  # the /metrics endpoint, if qm.ini asks for one

    # ------------------------------------------------------------------ plumbing
    def say(self, number: str, text: str | None = None, **fields: object) -> str:
        """Write an AMQ message to the error log and the event history."""
        fields.setdefault("qmgr", self.qmgr)
        line = text if text is not None else amq.text(number, **fields)
        if line.startswith(f"{number}: "):  # an error's user line already carries it
            line = line[len(number) + 2:]
        if self.errlog is not None:
            self.errlog.write(number, line)
        self.event("amq_message", amq=number, text=line)
        return line

    def event(self, name: str, **fields: Any) -> None:
        if self.events is not None:
            self.events.emit(name, **fields)

    def _run_record(self) -> None:
        runfile.write(self.qmgr, {
            "pid": self.pid, "qmgr": self.qmgr, "host": self.host, "mode": self.mode,
            "status": self.status, "address": list(self.address) if self.address else None,
            "ipc": self._ipc(), "started": time.time(), "lock_id": self.lock_id,
        })

    def _lease_overdue(self) -> dict[str, float]:
        """For a fatal event: how long ago the master lock's lease was last renewed, and
        the lease. An instance that runs stops itself by 3/5 of the lease; an age past
        the lease says it could not run (paused, a frozen VM) while the lease ran out,
        which the analysis tells apart from a stop it chose (miqm.analysis, "paused").
        Never raises: the stop goes on whatever this finds (before setup, no volume)."""
        try:
            lease = getattr(getattr(self, "data", None), "lease_seconds", None)
            age = self.master.lease_age() if self.master is not None else None
            if lease is None or age is None:
                return {}
            return {"lease_age_s": round(float(age), 3), "lease_s": float(lease)}
        except Exception:  # last words matter more than this detail of them
            return {}

    def _ipc(self) -> str | None:
        """The listener's local socket name (for commands on this host), if it has one."""
        return getattr(self.listener, "ipc", None) if self.listener is not None else None

    def fatal(self, number: str, detail: str) -> None:
        """Stop now, writing nothing more to the queue manager's data."""
        if self.ownership is not None:
            self.ownership.revoke()
        self.event("fatal", amq=number, detail=detail, **self._lease_overdue())
        text = amq.text(number, qmgr=self.qmgr, detail=detail)
        if amq.fields(number) - {"qmgr", "detail", "product", "version"}:
            # a message whose other fields this stop cannot fill ('Log file ? could not
            # be opened'): the detail says it all
            text = detail
        elif detail not in text:
            text = f"{text} {detail}"
        # the last words get a short deadline: cut off from the shared filesystem they
        # cannot be written, and stopping before the lease runs out matters more
        if self.errlog is not None:
            self.errlog.write(number, text)
            if not self.errlog.flush(0.2):  # the shared filesystem hangs: this host's own
                self.errlog.write_local(number, text)
        if self.events is not None:
            self.events.close(0.05)
        self.verdict.send(False, [f"{number}: {text}"], FATAL_EXIT)
        runfile.remove(self.qmgr, self.pid)
        os._exit(FATAL_EXIT)

    # ------------------------------------------------------------------ setup
    def setup(self) -> None:
        """Find the queue manager, read qm.ini, open the volumes and the logs."""
        from lockfs.faults import wrap_from_env

        entry = paths.find(self.qmgr)
        try:
            self.data = wrap_from_env(open_volume(entry.data_path), "data")
        except LockFsError as exc:
            raise ConfigError(f"cannot read the data directory of '{self.qmgr}' "
                              f"({entry.data_path}): {exc}", amq="AMQ6119") from None
        self.cfg = read_qm_ini(self.data, entry.data_path, self.qmgr, edit=self._auto_ini)
        lease = self.data.lease_seconds
        ha = self.cfg.ha
        if lease is not None and ha.verify_interval + ha.monitor_stall >= lease:
            raise ConfigError(
                f"VerifyInterval ({ha.verify_interval:g}s) + MonitorStall "
                f"({ha.monitor_stall:g}s) must be less than the filesystem lease "
                f"({lease:g}s) of {entry.data_path}: an instance cut off from it must stop "
                "before another can take its lock; lower them in qm.ini", amq="AMQ7880")
        log_location = self.cfg.log_path or paths.default_log_location(self.qmgr)
        overlap = paths.log_within_data(entry.data_path, log_location)
        if overlap is not None:  # before any lock is taken: neither lock file is touched
            raise ConfigError(amq.line(
                "AMQ7017", qmgr=self.qmgr, detail=f"{overlap}. Move the log (amqhlctl.lfh "
                "and the S*.LOG files) to a directory of its own outside the data "
                f"directory, set LogPath to it (setmqini -m {self.qmgr} -s Log -k LogPath "
                "-v DIR), then start the queue manager again."), amq="AMQ7017")
        try:
            self.log_volume = wrap_from_env(open_volume(log_location), "log")
        except LockFsError as exc:
            raise ConfigError(f"cannot open the log directory {log_location}: {exc}",
                              amq="AMQ7017") from None
        # the error and event logs go through a volume of their own, outside the lease
        # anchor (_anchor_leases): a fenced instance's last words (AMQ7279) are meant to
        # reach them; they are appended diagnostics, never the queue manager's data
        diag = self.data if self.data.lease_seconds is None else \
            wrap_from_env(open_volume(entry.data_path), "diag")
        self.errlog = ErrorLog(diag, self.qmgr, self.host, echo=self.echo,
                               local_dir=os.path.join(paths.data_root(), "errors"))
        self.events = EventLog(diag, self.qmgr, self.host, self.instance_id)
        self._run_record()

    def _auto_ini(self, text: str, source: str) -> str:
        """qm.ini with its AutoConfig IniConfig files merged in. Only applied in memory
        here: written back by :meth:`_write_back_ini` once this instance is the active
        one. Written at every start, a standby (or a third instance about to be refused)
        replaced the shared qm.ini while the active ran: a setmqini of the active's host
        at that moment was lost, and every instance, owner or not, wrote the data
        directory."""
        from miqm import autoconfig

        merged, _changed = autoconfig.apply_ini(text, source)
        return merged

    def _write_back_ini(self) -> None:
        """Holding master: qm.ini with the AutoConfig IniConfig files merged in, written
        back if that changes it. Read afresh (a standby's takeover may come long after it
        read qm.ini, and the active meanwhile may have changed it); the merge is in
        memory all the same if it cannot be done."""
        from miqm import autoconfig

        source = f"{self.data.describe()}/qm.ini"
        try:
            text = decode_ini(self.data.read_bytes("qm.ini"), source)
            merged, changed = autoconfig.apply_ini(text, source)
            if changed:
                self.data.write_atomic("qm.ini", merged.encode())
        except (LockFsError, ConfigError):
            pass

    def _auto_mqsc(self) -> None:
        """Run the AutoConfig MQSCConfig scripts (runmqsc's MQSC, in process)."""
        from miqm import autoconfig

        location = autoconfig.autoconfig(list(self.cfg.stanzas)).get(autoconfig.MQSC_KEY)
        if not location:
            return
        service = self.service
        try:
            count, failures = autoconfig.run_mqsc(
                location, lambda cmd: service.handle({"op": "mqsc", "command": cmd}, None))
        except ConfigError as exc:
            failures, count = [exc.user_line()], 0
        for line in failures:
            self.say("AMQ8101", f"MQSCConfig: {line}")
        self.say("AMQ5051", f"The queue manager task 'AUTOCONFIG' has started: {count} MQSC "
                            f"commands from {location}, {len(failures)} failed.")

    def holder(self, generation: int = 0) -> HolderRecord:
        return HolderRecord(self.host, self.lock_id, time.time(), self.pid, generation)

    def try_lock(self, lock: LockFile, mode: LockMode,
                 record: HolderRecord | None = None, keep_open: bool = False) -> bool:
        t0 = time.perf_counter()
        got = lock.acquire(mode, record, keep_open=keep_open)
        latency = time.perf_counter() - t0
        self.lock_seconds.setdefault(lock.name, Histogram()).observe(latency)
        self.event("lock_attempt", file=lock.name, mode=mode.value, granted=got,
                   latency_s=round(latency, 6))
        return got

    # ------------------------------------------------------------------ main
    def run(self) -> int:
        """The instance's life; returns the process exit code."""
        try:
            self.setup()
        except MiqmError as exc:
            self.verdict.send(False, [exc.user_line()], exc.exit_code or EXIT_FATAL)
            return exc.exit_code or EXIT_FATAL
        try:  # /metrics as qm.ini's Metrics: stanza or MIQM_METRICS_PORT says (docs/metrics.md)
            from miqm.metrics import start_for_controller

            self.metrics = start_for_controller(self)
        except MiqmError as exc:
            self.say(exc.amq or "AMQ7880", exc.user_line())
            self.verdict.send(False, [exc.user_line()], exc.exit_code or EXIT_FATAL)
            self.shutdown_logs()
            return exc.exit_code or EXIT_FATAL
        self.master = master = LockFile(self.data, "master")
        try:
            if self.try_lock(master, LockMode.EXCLUSIVE):
                status = qmstatus.read(self.data)
                decided = decide.step(State.START, self.facts(master=True, status=status),
                                      qmstatus.platform_string())
                if decided.action is Action.REFUSE:
                    master.release()
                    return self.refuse(decided)
                try:
                    self._start_listener()  # a port in use ends strmqm here, half nothing
                except MiqmError:
                    master.release()
                    raise
                return self.become_active(failover_from=None, status=status)
            decided = decide.step(State.START, self.facts(
                master=False, status=qmstatus.try_read(self.data),
                master_here_pid=self._master_holder_here(),
                standby_host=None if self.permit_standby else self._standby_host()))
            if decided.action is Action.REFUSE:
                return self.refuse(decided)
            return self.become_standby()
        except MiqmError as exc:
            self.say(exc.amq or "AMQ6184", exc.user_line())
            self.verdict.send(False, [exc.user_line()], exc.exit_code or EXIT_FATAL)
            return exc.exit_code or EXIT_FATAL
        except LockFsError as exc:
            number, text = filesystem_failure(self.qmgr, exc)
            self.say(number, text)  # the error log puts the number in front
            self.verdict.send(False, [f"{number}: {text}"], EXIT_FATAL)
            return EXIT_FATAL
        finally:
            self.shutdown_logs()

    def shutdown_logs(self) -> None:
        runfile.remove(self.qmgr, self.pid)
        if self.errlog is not None:
            self.errlog.close()
        if self.events is not None:
            self.events.close()

    # ------------------------------------------------------------------ standby
    def _master_holder_here(self) -> int | None:
        """The pid of a live instance of this host holding ``master``, by its holder
        record; None if the holder is elsewhere, gone, or cannot be told. strmqm checks
        the run record first, but a run record removed or damaged, or two strmqm at
        once, would otherwise give the active a standby on its own host."""
        try:
            record, held = peek(self.data, "master")
        except LockFsError:
            return None
        if record is None or held is False or record.host != self.host or not record.pid:
            return None
        return int(record.pid) if runfile.instance_alive(int(record.pid)) else None

    def _standby_host(self) -> str | None:
        """The host of a running standby instance (its lock held), for strmqm's refusal
        without -x; None if none runs or it cannot be told."""
        try:
            record, held = peek(self.data, "standby")
        except LockFsError:
            return None
        return record.host if held and record is not None and record.host else None

    def facts(self, **observed: Any) -> decide.Facts:
        """What this instance observed, for :func:`miqm.ha.decide.step`."""
        return decide.Facts(self.qmgr, self.permit_standby, qmstatus.platform_signature(),
                            **observed)

    def refuse(self, decided: decide.Step) -> int:
        """strmqm fails with the step's line (the error log has it too)."""
        number = decided.amq or "AMQ6184"
        self.say(number, decided.line)
        # the terminal line carries the number the error log has for the same event
        self.verdict.send(False, [f"{number}: {decided.line}"], decided.exit_code)
        return decided.exit_code

    def become_standby(self) -> int:
        self.standby_lock = LockFile(self.data, "standby")
        got = self.try_lock(self.standby_lock, LockMode.EXCLUSIVE, self.holder())
        decided = decide.step(State.SEEKING_STANDBY, self.facts(standby=got))
        if decided.action is Action.REFUSE:
            return self.refuse(decided)
        if self.listener is None:
            try:
                self._start_listener()
            except MiqmError:
                self.standby_lock.release()
                raise
        self.mode, self.status = "standby", "Running as standby"
        self._prepare_for_takeover()
        if self.cfg.ha.read_ahead:  # StandbyReadAhead=No: the standby's memory stays small
            self._start_prefetch()
        self._write_standby_address()
        self._run_record()
        self.event("role", role="standby")
        self.say("AMQ1002")
        self.verdict.send(True, [decided.line, *self._listener_warnings()], EXIT_OK,
                          "standby")
        from lockfs.watch import watch_local

        self._watch = watch_local(self.data.url, {"master", "active", "qmstatus.ini"},
                                  self._wake)
        poll = self.cfg.ha.standby_poll
        try:
            while True:
                self._wake.wait(poll)
                self._wake.clear()
                assert self.master is not None
                if self._end_request is None and not self._standby_lock_kept():
                    return self._end_standby(
                        "its standby lock was lost (the instance was paused or cut off "
                        "from the shared filesystem past the lease) and another standby "
                        "instance holds it now")
                if self._end_request is not None:
                    got = False
                else:
                    attempt = self._standby_attempt()
                    if attempt is None:
                        continue
                    got = attempt
                    if got and not self._stale_master_released():
                        got = False
                seen = time.monotonic()
                status: QMStatus | None = None
                error: str | None = None
                if got:
                    try:
                        status = qmstatus.read(self.data)
                    except ConfigError as exc:
                        error = exc.user_line()
                decided = decide.step(State.STANDBY, self.facts(
                    master=got, status=status, status_error=error,
                    end_requested=self._end_request is not None), qmstatus.platform_string())
                if decided.action is Action.KEEP_POLLING:
                    continue
                if decided.action is Action.END_STANDBY:
                    if got:
                        self.master.release()
                    if decided.amq is not None:
                        self.say(decided.amq, decided.line)
                    return self._end_standby(decided.line)
                assert status is not None
                if not self._begin_takeover():  # endmqm -x came after the decision
                    self.master.release()
                    return self._end_standby("ended by endmqm -x")
                code = self._take_over(seen, status)
                if code is None:  # the shared filesystem is full: still the standby
                    with self._lock:
                        self._taking_over = False
                    self._wake.wait(max(poll, 1.0))
                    continue
                return code
        finally:
            if self._watch is not None:
                self._watch.stop()

    def _begin_takeover(self) -> bool:
        """Mark this standby as taking over, unless an end request came first (False):
        checked and set under the lock :meth:`request_end` takes, so that an
        ``endmqm -x`` is either seen here (the standby ends as asked) or refused as
        meant for a standby that no longer is. Accepted during the takeover, it ended the
        new active instance with a controlled end that permits no switchover: the queue
        manager that had just failed over was down, with nobody to take over."""
        with self._lock:
            if self._end_request is not None:
                return False
            self._taking_over = True
            return True

    def _standby_lock_kept(self) -> bool:
        """False if this standby's ``standby`` lock is gone and another instance holds
        it now. A standby paused or cut off past the NFSv4 lease loses the lock at the
        server: a third instance started meanwhile became the standby, and both then
        polled for master as standbys (a restarted active was refused as a third
        instance, AMQ1103). A lost lock is taken again when it is free; True also when
        the attempt cannot reach the filesystem (the next poll asks again)."""
        lock = self.standby_lock
        if lock is None or not (lock.lost() or not lock.held):
            return True
        lock.release()
        fresh = LockFile(self.data, "standby")
        self.standby_lock = fresh  # not held until granted: the next poll tries again
        try:
            got = self.try_lock(fresh, LockMode.EXCLUSIVE, self.holder())
        except LockFsError:
            return True
        if got:
            self.event("standby_lock_retaken")
            return True
        try:
            record, _held = peek(self.data, "standby")
        except LockFsError:
            return True
        if record is None or (record.host, record.lock_id, record.pid) == (
                self.host, self.lock_id, self.pid):
            # still this instance's own lock at the server (this side gave it up on its
            # own count of the lease; the server, paused itself, has not yet): it goes
            # when the server ends that lease, and a later poll takes it again
            return True
        self.standby_lock = None
        return False

    def _standby_attempt(self) -> bool | None:
        """A standby's attempt on ``master``: granted, refused, or None when the attempt
        itself failed and is tried again at the next poll (with a fresh file: a failed
        acquire closes its own), said once (AMQ1300) and its end said too (AMQ1301).

        The server restarted or unreachable for a while (its state and this standby's may
        be gone), a filesystem remounted read-only, a directory gone (a mount dropped) or
        left empty (the mount point of a dropped mount: no qm.ini there), or
        the file's own NFSv4 state expired (LockLostError: this standby was paused past
        the lease, and the file it keeps open between attempts has no state left at the
        server, though it held no lock there): a standby that gave up would leave nobody
        to take over, and its active may be the one that died. An attempt writes nothing
        unless the lock is granted, and a takeover makes every check then."""
        assert self.master is not None
        try:
            if not self.data.exists("qm.ini"):
                # the data directory is not the queue manager's: this host's mount of it
                # dropped, leaving the empty mount point (a lock attempt would create a
                # ``master`` there and be granted it; the missing qmstatus.ini then read
                # as 'Ended normally' and the standby ended, blaming its active)
                raise VolumeNotFound(f"{self.data.describe()} holds no qm.ini: the data "
                                     "directory is not mounted on this host, or not this "
                                     "queue manager's", path="qm.ini")
            got = self.try_lock(self.master, LockMode.EXCLUSIVE, keep_open=True)
        except (VolumeStalled, VolumeIOError, VolumePermissionError, VolumeNotFound,
                LockLostError) as exc:
            if not self._unreachable:
                if exc.errno in (errno.EISDIR, errno.ENOTDIR):
                    # reached, but master is a directory (or its parent a file): the
                    # administrator's to put right, which 'cannot reach' would hide
                    number, text = filesystem_failure(self.qmgr, exc)
                    self.say(number, f"{text}. The standby instance keeps polling for "
                                     "the master lock meanwhile.")
                else:
                    self.say("AMQ1300", qmgr=self.qmgr, detail=str(exc))
            self._unreachable = True
            return None
        if self._unreachable:
            self._unreachable = False
            self.say("AMQ1301", qmgr=self.qmgr)
        return got

    def _stale_master_released(self) -> bool:
        """After a granted attempt on master: True if the locked file is still the one
        the path names; otherwise the lock (on a file removed or replaced under the
        polling standby's open descriptor) is let go and False: the next poll opens the
        path afresh, and takes over only through the file every instance locks."""
        try:
            if self._master_at_its_path():
                return True
        except LockFsError:
            pass  # cannot tell: not a takeover on this attempt
        assert self.master is not None
        self.master.release()
        self.event("master_replaced")
        return False

    def _take_over(self, seen: float, status: QMStatus) -> int | None:
        """become_active; but if the shared filesystem is full (ENOSPC) before the store
        opened, give the locks back and stay the standby (None): it retries at its polls
        and takes over once space returns, instead of ending with nobody active."""
        try:
            return self.become_active(failover_from=seen, status=status)
        except _ActiveHeld as exc:
            # another instance still runs as the active one on a master file that is no
            # longer the path's: it stops at its next verify, and a later poll takes over
            if not self._active_held_said:
                self._active_held_said = True
                self.say("AMQ7279", f"{exc.line.format(qmgr=self.qmgr, who=exc.who)} "
                                    "The standby instance does not take over while it "
                                    "runs, and tries again at its next poll.")
            self.event("takeover_deferred", reason="active held", holder=exc.who)
            return None
        except (LockFsError, _NoSpace) as exc:
            if not _no_space(exc) or self.store is not None:
                raise
            if self._resume_standby(exc, status):
                return None
            if isinstance(exc, _NoSpace):  # what become_active does with a failed open
                self.say(exc.error.amq or "AMQ7880", exc.error.user_line())
                self.release_locks()
                return exc.error.exit_code or EXIT_FATAL
            raise

    def _resume_standby(self, exc: BaseException, status: QMStatus) -> bool:
        """Undo a takeover that found no space: qmstatus.ini back to what the last active
        left (else its PermitFailover=No would refuse every later takeover), the locks
        given back, the standby lock again. False if that cannot be done."""
        try:
            qmstatus.write(self.data, status)
        except LockFsError:
            try:  # no room for the temporary file: over the file's own blocks
                qmstatus.write_in_place(self.data, status)
            except LockFsError:
                return False
        self._anchor_leases(None)
        for lock in (self.log_active_lock, self.active_lock, self.master):
            if lock is not None:
                lock.release()
        self.active_lock, self.ownership, self.record = None, None, None
        self.log_active_lock = None
        self.standby_lock = LockFile(self.data, "standby")
        if not self.try_lock(self.standby_lock, LockMode.EXCLUSIVE, self.holder()):
            return False
        self.mode, self.status = "standby", "Running as standby"
        self._write_standby_address()
        self._run_record()
        if not self._no_space_said:
            self._no_space_said = True
            self.say("AMQ6119", f"The standby instance of queue manager '{self.qmgr}' on "
                                f"{self.host} could not take over: the shared filesystem is "
                                f"full ({exc}); it stays the standby and takes over once "
                                "space is freed.")
        self.event("takeover_deferred", reason="no space", error=str(exc))
        return True

    def _prepare_for_takeover(self) -> None:
        """Load what the active role needs before it is needed (failover speed): every
        module ``become_active`` would otherwise import (and maybe compile) after it took
        the lock, the log with its C parts included."""
        import miqm.net.listen
        import miqm.net.server
        import miqm.net.service
        import miqm.store.checkpoint
        import miqm.store.log
        import miqm.store.qindex
        import miqm.store.qmstore  # noqa: F401

    def _start_prefetch(self) -> None:
        """A thread that keeps the deep queues' index files read and decoded while this
        instance is the standby, so that a takeover finds them in memory (re-checked by
        their header) instead of reading tens of MB after it took the lock; and the
        checkpoint file and queue catalog decoded (re-checked byte for byte): with
        thousands of queues they are milliseconds of JSON."""
        from miqm.store import checkpoint as ckpt
        from miqm.store.qindex import IndexCache

        cache = self._index_cache = IndexCache()
        stop = self._prefetch_stop
        stop.clear()
        every = max(1.0, 5 * self.cfg.ha.standby_poll)

        def loop() -> None:
            first = True
            while not stop.is_set():
                t0 = time.monotonic()
                try:
                    info = ckpt.read_ahead(self.data, cache)
                    read = cache.refresh(self.data, info.indexed(), stop.is_set)
                except Exception:  # a read-ahead: the takeover reads what it must itself
                    read = None
                if read is not None and (first or read) and not stop.is_set():
                    # what it has read so far (a benchmark waits for the first one: a
                    # standby up for a while has read everything)
                    self.event("readahead", files=read,
                               seconds=round(time.monotonic() - t0, 4))
                    first = False
                stop.wait(every)

        threading.Thread(target=loop, name="index-prefetch", daemon=True).start()

    def _end_standby(self, why: str) -> int:
        self._prefetch_stop.set()
        self.say("AMQ1008", host=self.host, detail=why)
        self.event("role", role="ended", reason=why)
        if self.listener is not None:
            self.listener.stop(1.0)
        self._clear_standby_address()
        if self.standby_lock is not None:
            self.standby_lock.release()
        return EXIT_OK

    def _write_standby_address(self) -> None:
        if self.address is None:
            return
        try:
            self.data.write_atomic("standby-listener", json.dumps({
                "host": self.address[0], "port": self.address[1], "host_name": self.host,
                "pid": self.pid, "ipc": self._ipc()}).encode())
        except LockFsError:
            pass  # endmqm -x from this host still finds it through the run file

    def _clear_standby_address(self) -> None:
        try:
            raw = self.data.read_bytes("standby-listener")
            if json.loads(raw).get("pid") == self.pid:
                self.data.unlink("standby-listener")
        except (LockFsError, ValueError, AttributeError):
            pass

    # ------------------------------------------------------------------ active
    def next_generation(self) -> int:
        from miqm.store.log import RecoveryLog

        assert self.master is not None
        prev = self.master.previous.generation if self.master.previous else 0
        return max(prev, RecoveryLog.recorded_generation(self.log_volume)) + 1

    def verify_master(self) -> float:
        """Reread the master record through the locked file; raise unless it is ours, or
        unless the path ``master`` no longer names the locked file."""
        t0 = time.perf_counter()
        assert self.master is not None
        if self.master.lost():
            raise OwnershipLostError("the filesystem reports the master lock lost",
                                     amq="AMQ7279")
        found = self.master.read_record()
        if self.record is None or not self.record.same_holder(found):
            who = f"{found.host} (pid {found.pid}, generation {found.generation})" \
                if found else "an unreadable record"
            raise OwnershipLostError(f"the master lock record now names {who}",
                                     amq="AMQ7279")
        if not self._master_at_its_path():
            raise OwnershipLostError(MASTER_REPLACED, amq="AMQ7279")
        return time.perf_counter() - t0

    def _master_at_its_path(self) -> bool:
        """True if the file this instance holds the master lock on is still the one the
        path ``master`` names: the same inode where this host can tell (a local
        filesystem, a kernel mount), the same server fileid over nfs4://, else (a backend
        that knows neither) the same content. Lock files removed or replaced by hand (a
        'stale lock' clean-up) leave the lock on a file nobody else opens: another
        instance then locks a new ``master`` and two would write, the old one's verify
        still reading its own record through its own descriptor. The content alone would
        miss a copy put back byte for byte. LockFsError when the path cannot be read."""
        assert self.master is not None
        f = self.master.file
        if f is None:
            return False
        fd = f.direct_fd()
        root = getattr(self.data, "root", None)
        if fd is not None and isinstance(root, str):
            try:
                held, named = os.fstat(fd), os.stat(os.path.join(root, "master"))
            except FileNotFoundError:
                return False
            except OSError as exc:
                raise VolumeIOError(f"stat {root}/master: {exc.strerror or exc}",
                                    errno=exc.errno, path="master") from exc
            return (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino)
        held_id = f.file_id()
        if held_id is not None:
            try:
                named_id = self.data.stat("master").file_id
            except VolumeNotFound:
                return False
            if named_id is not None:
                return named_id == held_id
        head = self.data.read_heads([("master", RECORD_SIZE)])[0]
        return head is not None and head.data == f.pread(RECORD_SIZE, 0)

    def become_active(self, failover_from: float | None, status: QMStatus) -> int:
        """Holding master, with ``status`` already judged by :mod:`miqm.ha.decide`."""
        started = time.monotonic()
        assert self.master is not None
        if failover_from is not None:
            self.event("failover_start", from_status=status.status)
        generation = self.next_generation()
        self.record = self.holder(generation)
        other = self._active_held_elsewhere(wait=failover_from is None)
        if other is not None:  # before anything is written, master's record included
            self.master.release()
            if failover_from is not None:
                raise _ActiveHeld(other)  # the standby polls on (_take_over)
            raise HAError(f"{ACTIVE_HELD.format(qmgr=self.qmgr, who=other)} End that "
                          "instance (endmqm, or kill it on its host), then start this one "
                          "again.", amq="AMQ7279", exit_code=EXIT_FATAL)
        other = self._log_active_held()
        if other is not None:  # before anything is written, master's record included
            self.master.release()
            if failover_from is not None:
                raise _ActiveHeld(other, LOG_ACTIVE_HELD)
            raise HAError(f"{LOG_ACTIVE_HELD.format(qmgr=self.qmgr, who=other)} End that "
                          "instance (endmqm, or kill it on its host), then start this one "
                          "again.", amq="AMQ7279", exit_code=EXIT_FATAL)
        self.master.write_record(self.record)
        if not self._master_at_its_path():  # before anything else is written
            self.master.release()
            raise HAError(f"the master lock file of '{self.qmgr}' was removed or replaced "
                          "as this instance took it; start it again", amq="AMQ7279",
                          exit_code=EXIT_FATAL)
        self._anchor_leases(self.master.file)
        self.active_lock = LockFile(self.data, "active")
        if not self.try_lock(self.active_lock, LockMode.SHARED, self.record):
            self.master.release()
            raise HAError(f"the active lock of '{self.qmgr}' is held exclusively elsewhere",
                          amq="AMQ7279", exit_code=EXIT_FATAL)
        if not self._log_shares_data():
            self.log_active_lock = LockFile(self.log_volume, LOG_ACTIVE)
            try:
                got = self.try_lock(self.log_active_lock, LockMode.SHARED, self.record)
            except VolumeNotFound:
                self.log_active_lock = None
                self.active_lock.release()
                self.master.release()
                raise HAError(f"the log directory of '{self.qmgr}', "
                              f"{self.log_volume.describe()}, is missing: mount it, or "
                              "restore it from the same backup as the data directory, then "
                              "start the queue manager again", amq="AMQ7017",
                              exit_code=EXIT_FATAL) from None
            if not got:
                self.log_active_lock = None
                self.active_lock.release()
                self.master.release()
                raise HAError(f"the active lock in the log directory of '{self.qmgr}' is "
                              "held exclusively elsewhere", amq="AMQ7279",
                              exit_code=EXIT_FATAL)
        if self.standby_lock is not None:
            self.standby_lock.release()
            self._clear_standby_address()
            self.standby_lock = None
        self._write_back_ini()  # holding master and active, before the store opens
        ha = self.cfg.ha
        validity = belief_validity(ha.verify_interval, ha.monitor_stall,
                                   (self.data.lease_seconds, ha.lease))
        master = self.master
        self.ownership = Ownership(
            validity, lambda: (self.verify_master(), None)[1],
            suspect=lambda: master.reachability() is not Reachability.OK)
        self.ownership.renew()
        self.mode, self.status = "active", "Starting"
        self._run_record()
        self.event("role", role="active", generation=generation,
                   failover=failover_from is not None)
        qmstatus.write(self.data, QMStatus("Starting", self.permit_standby, False,
                                           qmstatus.platform_signature(),
                                           qmstatus.platform_string()))
        lines = [amq.text("AMQ1001", qmgr=self.qmgr)]
        if self.announce is not None:
            self.announce(lines[0])
        recovery: list[str] = []

        def errlog(number: str, text: str) -> None:
            if number == "AMQ7472":
                damaged.append(text)
            else:
                recovery.append(text)
            self.say(number, text)

        damaged: list[str] = []

        from miqm.net.service import QueueService
        from miqm.store.qmstore import QueueManagerStore

        self._prefetch_stop.set()  # it reads nothing more; what it read is used below
        cache, self._index_cache = self._index_cache, None
        opening = time.monotonic()
        try:
            self.store = QueueManagerStore.open(
                self.data, self.log_volume, self.qmgr, self.cfg.log, self.cfg.tuning,
                generation=generation, write_guard=self.ownership.guard, errlog=errlog,
                on_event=lambda name, **f: self.event(name, **f), index_cache=cache,
                # a takeover serves first; its checkpoint follows a moment later
                defer_checkpoint=failover_from is not None)
        except MiqmError as exc:
            if failover_from is not None and _no_space(exc):
                raise _NoSpace(exc) from exc  # the standby waits for space (_take_over)
            # PermitFailover stays No: the standby will not take over to fail the same way
            self.say(exc.amq or "AMQ7880", exc.user_line())
            self.release_locks()
            self.verdict.send(False, [exc.user_line()], exc.exit_code or EXIT_FATAL)
            return exc.exit_code or EXIT_FATAL
        opened = time.monotonic()
        self.service = QueueService(self.store, self.qmgr, host_name=self.host,
                                    errlog=self.say, standby_permitted=self.permit_standby)
        self._auto_mqsc()
        if self.listener is None:
            self._start_listener()
        self.service.listener = self.listener  # DISPLAY LSSTATUS
        reload = getattr(self.listener.authenticator, "reload", None) if self.listener else None
        if reload is not None:  # REFRESH SECURITY re-reads the credentials file
            self.service.authorizer.on_refresh.append(reload)
        assert self.address is not None
        self.data.write_atomic("listener", json.dumps({
            "host": self.address[0], "port": self.address[1], "host_name": self.host,
            "pid": self.pid, "ipc": self._ipc()}).encode())
        self.status = "Running"
        qmstatus.write(self.data, QMStatus("Running", self.permit_standby, True,
                                           qmstatus.platform_signature(),
                                           qmstatus.platform_string()))
        self._run_record()
        self.monitors = Monitors(
            self.ownership, self.verify_master, self.store.log.progress, self.fatal,
            verify_interval=ha.verify_interval, monitor_stall=ha.monitor_stall,
            liveness_interval=ha.liveness_interval,
            event=self._monitor_event, health=self.store_health)
        self.monitors.start()
        self.say("AMQ8003")
        lines += recovery + console_damage(damaged) + self._listener_warnings()
        lines.append(amq.text("AMQ8003", qmgr=self.qmgr))
        if failover_from is not None:
            took = time.monotonic() - failover_from
            self.takeover = {"kind": "switchover" if status.switchover else "failover",
                             "at": time.time(), "seconds": took}
            self.say("AMQ5975", f"{amq.text('AMQ5975', qmgr=self.qmgr, host=self.host)} "
                                f"{self._takeover_cause(status)}")
            rs = self.store.recovery_stats if self.store is not None else {}
            now = time.monotonic()
            self.event("failover_end", duration_s=round(took, 4),
                       recovery_s=round(now - started, 4),
                       # where lock-to-serving went: before the store's open, the open,
                       # and starting the service, listener and monitors after it
                       phases={"lock": round(opening - started, 4),
                               "open": round(opened - opening, 4),
                               "serve": round(now - opened, 4)},
                       # of the open: loading the queues, then replaying the log
                       open_phases={"load": round(rs.get("load_seconds", 0.0), 4),
                                    "replay": round(rs.get("seconds", 0.0), 4)},
                       # the open's checkpoint: "taken" within it, or "deferred" to the
                       # checkpoint thread a moment after serving began
                       checkpoint=rs.get("checkpoint"),
                       # committed puts replayed but left to their queue's first use
                       deferred_puts=rs.get("deferred_puts", 0),
                       queues={k: rs[k] for k in ("indexed_queues", "prefetched_queues",
                                                  "delta_queues", "second_delta_queues",
                                                  "scanned_queues", "catalog_queues",
                                                  "filed_queues")
                               if k in rs})
        self.verdict.send(True, lines, EXIT_OK, "active")
        self._ended.wait()
        return self._end_active()

    def _active_held_elsewhere(self, wait: bool) -> str | None:
        """With ``master`` just granted: who holds ``active`` if it is not the instance
        that held ``master`` before (its record in ``active`` is not the master file's
        previous record), else None. The lock files removed by hand while an active
        instance ran (a 'stale lock' clean-up) let another instance lock a new
        ``master`` and run as a second active on the same log until the first one's next
        verify (up to VerifyInterval); that first one still holds ``active``, which
        tells. The previous master holder's own ``active`` lock may outlive its master
        lock by a little on NFSv4 (each file its own lease): that one is the expected
        holder. With ``wait`` (a start, not a takeover), an unexpected holder is given
        the volume's lease and 5 s more to go (a dead instance's lock that outlives its
        lease); None also when the file cannot be looked at (the lock attempt that
        follows meets what is wrong)."""
        assert self.master is not None
        previous = self.master.previous
        lease = self.data.lease_seconds
        grace = lease + 5.0 if wait and lease is not None else 0.0
        return self._lock_held_by(
            self.data, "active", grace, 0.2,
            accept=lambda record: record is not None and record.same_holder(previous),
            clock=time.monotonic, sleep=time.sleep)

    def _log_shares_data(self) -> bool:
        """True if the log directory is the data directory itself (its ``active`` is the
        data directory's: one lock file, checked already)."""
        log = getattr(self, "log_volume", None)
        return log is None or getattr(log, "url", None) == getattr(self.data, "url", object())

    def _log_active_grace(self) -> float:
        """How long a lock in the log directory may outlive the master lock of an
        instance that is gone: a lease and 5 s where a lease is known (on NFSv4 each file
        may be its own lease, or the log another server's), else :data:`LOG_ACTIVE_GRACE`."""
        leases = [x for x in (getattr(self.log_volume, "lease_seconds", None),
                              self.data.lease_seconds) if x is not None]
        return max(leases) + 5.0 if leases else LOG_ACTIVE_GRACE

    def _log_active_held(self, clock: Callable[[], float] = time.monotonic,
                         sleep: Callable[[float], None] = time.sleep) -> str | None:
        """With ``master`` just granted: who holds the log directory's ``active``
        (:data:`LOG_ACTIVE`) if it stays held, else None. Unlike ``active`` in the data
        directory, even master's previous holder is not let through: its master lock is
        the one just granted here, so if it still holds the log's lock it either is on
        its way out (given :meth:`_log_active_grace` to go) or still runs on a data
        directory replaced under it, and writes this very log. None too when the file is
        absent (an active of an older release) or cannot be looked at."""
        if self._log_shares_data():
            return None
        return self._lock_held_by(self.log_volume, LOG_ACTIVE, self._log_active_grace(), 0.05,
                                  accept=lambda record: False, clock=clock, sleep=sleep)

    @staticmethod
    def _lock_held_by(volume: Volume, name: str, grace: float, poll: float,
                      accept: Callable[[HolderRecord | None], bool],
                      clock: Callable[[], float],
                      sleep: Callable[[float], None]) -> str | None:
        """Who holds lock file ``name`` on ``volume`` if it stays held for ``grace``
        seconds (looked at every ``poll`` seconds), else None. A holder whose record
        ``accept`` lets through is no holder; None too when the file is absent or cannot
        be looked at (the lock attempt that follows meets what is wrong)."""
        deadline = clock() + grace
        while True:
            try:
                record, held = peek(volume, name)
            except LockFsError:
                return None
            if held is not True or accept(record):
                return None
            if clock() >= deadline:
                break
            sleep(poll)
        if record is None:
            return "an instance whose record cannot be read"
        return f"the instance on {record.host} (pid {record.pid}, generation " \
               f"{record.generation})"

    def _takeover_cause(self, status: QMStatus) -> str:
        """Why this standby took over, for the error log: what an administrator reading
        AMQERR01.LOG after a failover asks first (the old active could write nothing)."""
        prev = self.master.previous if self.master is not None else None
        who = (f"the active instance on {prev.host} (pid {prev.pid})" if prev and prev.host
               else "the active instance")
        if status.switchover:
            return f"It took over from {who}, which ended permitting switchover (endmqm -s)."
        return (f"It took over from {who}, which ended unexpectedly (status "
                f"{status.status}): a failover. Look for why on that host; start it again "
                "with strmqm -x to have a standby.")

    def _listener_warnings(self) -> list[str]:
        """What the listener found to warn of at its start (a credentials file others can
        read), for the console of the strmqm that starts this instance."""
        return list(getattr(self.listener, "warnings", None) or [])

    def _monitor_event(self, name: str, **fields: Any) -> None:
        """A monitor thread's event; liveness checks also carry the log's write times (the
        analysis draws their high-water marks over time from them)."""
        if name == "liveness" and self.store is not None:
            try:
                short, longest = self.store.log.write_times()
                fields.update(write_time_us=round(short, 1), write_time_max_us=round(longest, 1))
            except Exception:
                pass
        self.event(name, **fields)

    def store_health(self) -> tuple[str, str] | None:
        """Reasons to stop found by the monitor thread: the master lock's lease not renewed
        for 3/5 of its length (stop well before the server can give the lock away, even
        while a verify read hangs), or a store that stopped after a failed log write."""
        if self.master is not None and self.master.reachability() is Reachability.LOST:
            return "AMQ7279", "the filesystem reports the master lock lost"
        lease = self.data.lease_seconds
        age = self.master.lease_age() if self.master is not None else None
        if lease is not None and age is not None and age > 0.6 * lease:
            return "AMQ7279", (f"the lease on the master lock has not been renewed for "
                               f"{age:.1f}s of {lease:g}s; stopping before it can expire")
        failed = None if self.store is None else self.store.failure
        if failed is None:
            return None
        number = getattr(failed, "amq", None) or "AMQ6708"
        return number, f"the queue manager's store stopped: {failed}"

    def _anchor_leases(self, anchor: VolumeFile | None) -> None:
        """Tie every write through the data and log volumes to the master lock's lease
        (``Volume.lease_anchor``, docs/lockfs.md): on nfs4 the server then refuses a
        write this instance sends after the lock has passed to another; None unties."""
        for vol in (getattr(self, "data", None), getattr(self, "log_volume", None)):
            if vol is not None:
                vol.lease_anchor = anchor

    def release_locks(self) -> None:
        self._anchor_leases(None)
        # the log directory's lock before master: whoever is granted master next must
        # find it free, or it takes this instance for one still running (LOG_ACTIVE)
        for lock in (self.log_active_lock, self.active_lock, self.master, self.standby_lock):
            if lock is not None:
                lock.release()

    def _end_active(self) -> int:
        req = self._end_request or {}
        mode = str(req.get("mode", "controlled"))
        switchover = bool(req.get("switchover"))
        final = {"controlled": "Ended normally", "wait": "Ended normally",
                 "immediate": "Ended immediately", "preemptive": "Ended pre-emptively"}
        self.status = {"controlled": "Quiescing", "wait": "Quiescing",
                       "immediate": "Ending immediately",
                       "preemptive": "Ending pre-emptively"}.get(mode, "Quiescing")
        self._run_record()
        mode = self._quiesce(mode, switchover or bool(req.get("reconnect")))
        if self.monitors is not None:
            self.monitors.stop()
        if self.listener is not None:
            self.listener.stop(5.0 if mode in ("controlled", "wait") else 1.0)
        try:
            if mode != "preemptive":
                self.store.close()
        except MiqmError as exc:
            self.say(exc.amq or "AMQ6184", f"shutdown checkpoint failed: {exc.user_line()}")
        try:
            self.data.unlink("listener")
            qmstatus.write(self.data, QMStatus(final.get(mode, "Ended normally"),
                                               self.permit_standby, True,
                                               qmstatus.platform_signature(),
                                               qmstatus.platform_string(),
                                               switchover=switchover))
        except LockFsError:
            pass
        # how it was ended, for whoever reads the error log afterwards (the status line
        # of dspmq says it only until the next start)
        how = {"controlled": "a controlled end (endmqm, -c)", "wait": "a controlled end "
               "(endmqm -w)", "immediate": "an immediate end (endmqm -i, or SIGTERM)",
               "preemptive": "a pre-emptive end (endmqm -p)"}.get(mode, mode)
        number = "AMQ1005" if switchover else "AMQ8004"
        self.say(number, f"{amq.text(number, qmgr=self.qmgr)} It was {how}"
                         f"{' with -s' if switchover else ''}; status {final.get(mode, '')}.")
        self.event("role", role="ended", mode=mode, switchover=switchover)
        self.release_locks()
        return EXIT_OK

    def _quiesce(self, mode: str, reconnect: bool) -> str:
        """Before the listener stops: refuse new work with 2161 (controlled) or 2162
        (immediate, pre-emptive), and in a controlled end give the units of work already
        open up to :data:`QUIESCE_GRACE` seconds to commit or back out (an ``endmqm -i``
        meanwhile cuts it short). Every connection then gets the end's reason as its last
        frame. Returns the mode the end finished in."""
        from miqm.net.server import MQRC_Q_MGR_QUIESCING, MQRC_Q_MGR_STOPPING
        from miqm.net.service import quiesce_reply

        service = self.service
        if service is None or not hasattr(service, "quiesce"):
            return mode
        controlled = mode in ("controlled", "wait")
        mqrc = MQRC_Q_MGR_QUIESCING if controlled else MQRC_Q_MGR_STOPPING
        service.quiesce(mqrc, reconnect)
        if controlled:
            deadline = time.monotonic() + QUIESCE_GRACE
            while service.open_units() and time.monotonic() < deadline:
                now = str((self._end_request or {}).get("mode", mode))
                if now not in ("controlled", "wait"):  # endmqm -i or -p meanwhile
                    mode, mqrc = now, MQRC_Q_MGR_STOPPING
                    self.status = ("Ending pre-emptively" if now == "preemptive"
                                   else "Ending immediately")
                    self._run_record()
                    service.quiesce(mqrc, reconnect)
                    break
                time.sleep(0.05)
            left = service.open_units()
            if left and mqrc == MQRC_Q_MGR_QUIESCING:
                self.event("quiesce_grace_expired", units=left)
        if self.listener is not None and hasattr(self.listener, "quiesce"):
            self.listener.quiesce(quiesce_reply(mqrc, reconnect, notice=True))
        return mode

    # ------------------------------------------------------------------ listener
    def _start_listener(self) -> None:
        """Bind the listener (qm.ini's Listener/TCP stanza, MIQM_LISTENER_HOST/PORT over
        it) with its authentication and TLS. NetError/ConfigError (one line) if it
        cannot: the caller releases the lock it took and writes nothing more."""
        from miqm.net.listen import make_listener

        self.listener = make_listener(self, self.handle)
        self.address = self.listener.start()

    def handle(self, request: dict[str, Any], session: Any) -> dict[str, Any]:
        """Control ops here; the rest to the queue service when active."""
        from miqm.net.protocol import error_reply
        from miqm.net.service import standby_reply

        op = request.get("op")
        if op == "instance":
            reply = {"ok": True, "qmgr": self.qmgr, "host": self.host, "mode": self.mode,
                     "status": self.status, "pid": self.pid}
            if self.listener is not None:
                from miqm.net.listen import listener_stats

                reply["listener"] = listener_stats(self.listener)
            return reply
        if op == "end":
            return self.request_end(request)
        # an ending instance's service refuses with 2161 or 2162 by itself (_SERVING)
        if self.mode != "active" or self.service is None or self.status not in _SERVING:
            want = request.get("qmgr") if op == "hello" else None
            if want and want != self.qmgr:
                # another queue manager's client walking a CONNAME list: 2058, as the
                # active says (2543 told it that its queue manager was on standby here)
                return error_reply(2058, f"this listener serves queue manager "
                                         f"'{self.qmgr}', not '{want}' (MQRC 2058 "
                                         "MQRC_Q_MGR_NAME_ERROR)")
            reply = standby_reply()
            reply["host"] = self.host
            return reply
        return self.service.handle(request, session)

    def request_end(self, request: dict[str, Any]) -> dict[str, Any]:
        """endmqm: remember the request and wake the main thread. ``standby_only``
        (endmqm -x) is refused by an instance that is not the standby, a standby taking
        over included; the others by a standby. ``signal`` (SIGTERM) ends whatever it is."""
        standby_only = bool(request.get("standby_only"))
        any_role = bool(request.get("signal"))
        with self._lock:
            standby = self.mode == "standby" and not self._taking_over
            if standby_only and not standby and not any_role:
                return {"ok": False, "mqrc": 2543, "amq": "AMQ1109",
                        "error": amq.text("AMQ1109", qmgr=self.qmgr, host=self.host)}
            if not standby_only and standby and not any_role:
                return {"ok": False, "mqrc": 2543, "amq": "AMQ1105",
                        "error": amq.text("AMQ1105", qmgr=self.qmgr, host=self.host)}
            if self._end_request is None:
                self._end_request = dict(request)
            elif (request.get("mode") in ("immediate", "preemptive")
                  and self._end_request.get("mode") in ("controlled", "wait", None)):
                # endmqm -i (or -p) while a controlled end waits for units of work
                self._end_request["mode"] = request.get("mode")
        self._wake.set()
        self._ended.set()
        return {"ok": True, "pid": self.pid, "host": self.host, "mode": self.mode}


def main(argv: list[str] | None = None) -> int:
    """Process entry point."""
    parser = argparse.ArgumentParser(prog="miqm.ha.controller")
    parser.add_argument("qmgr")
    parser.add_argument("-x", action="store_true", dest="standby")
    parser.add_argument("--verdict-fd", type=int, default=None)
    parser.add_argument("--foreground", action="store_true")
    args = parser.parse_args(argv)
    verdict: Any = Verdict(args.verdict_fd)
    if args.foreground:  # strmqm --foreground (miqm.ha.foreground)
        from miqm.ha import foreground

        console = foreground.Console()
        verdict = foreground.ConsoleVerdict(console)
    ctl = Controller(args.qmgr, args.standby, verdict)
    if args.foreground:
        ctl.echo = console.echo
        ctl.announce = console.announce

    def on_term(signum: int, frame: Any) -> None:
        # whatever the instance is by then (a standby may be taking over)
        ctl.request_end({"mode": "immediate", "standby_only": ctl.mode == "standby",
                         "signal": True})

    signal.signal(signal.SIGTERM, on_term)
    if args.foreground:
        signal.signal(signal.SIGINT, on_term)
    try:
        code = ctl.run()
    except BaseException as exc:  # the last resort: say it, never hang strmqm
        detail = "".join(traceback.format_exception(exc))
        sys.stderr.write(detail)
        line = amq.line("AMQ6184", detail=f"in the execution controller "
                        f"({type(exc).__name__}: {exc}); details in the controller output file.")
        verdict.send(False, [line], EXIT_FATAL)
        code = EXIT_FATAL
    verdict.send(code == 0, [], code)
    if args.foreground:
        foreground.notify("STOPPING=1")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
