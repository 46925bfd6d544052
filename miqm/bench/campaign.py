"""``miqm bench campaign``: faults at random under load, then an audit of every message.

Two local instances (as ``miqm bench failover``) serve producer threads that put units of
persistent messages under syncpoint and commit them, and consumer threads that get them
(in committed units under syncpoint, or one at a time outside it), each through a
reconnecting client in bindings mode. Meanwhile the active instance is hit, again and
again, by a fault drawn at random (``kill``: kill -9 of the active; ``switchover``:
``endmqm -s``; the old instance then comes back as the standby; on the NFSv4 lab also
``partition`` and ``pause``, and when named the server faults of
:data:`LAB_EXTRA_FAULTS`: the figures then give failover p50/max per fault, and a
failover after a fault in :data:`NO_FAILOVER` counts as spurious). Every outcome a
producer or consumer was told is written down: committed, backed out, or unknown (a
commit cut off in flight, MQRC 2549).

At the end the queue is drained and audited:

* every committed message is there, or was consumed for good, exactly once (``lost``,
  ``duplicated``); a get outside syncpoint cut off in flight may have taken one message
  nobody received (MQ's rule; counted as ``lost_in_flight``, not as lost);
* a unit of gets whose commit was cut off is back on the queue whole or not at all
  (``torn_gets``);
* no commit sent after an instance was seen serving in the other's place was
  acknowledged by the other (``two_owners``);
* no message of a backed-out unit is there (``resurrected``);
* each unit whose outcome was unknown is there whole or not at all (``torn_units``);
* nothing else is there (``phantoms``);
* the recovery log, read from the shared directory, holds the activations' records in
  generation order: no record of an older activation after a newer one began
  (``stale_writes``: the reader refuses such a log).

A short campaign runs in the tests; long ones are benchmarks.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from miqm.bench.clients import client_of
from miqm.errors import MiqmError
from miqm.localpair import LocalPair, command_path

QUEUE = "CAMPAIGN.Q"
FAULTS = ("kill", "switchover")
LAB_FAULTS = ("kill", "switchover", "partition", "pause")
#: lab faults drawn only when named (``--faults``): the NFS server crashing and coming
#: back without and with a grace period (``restart``, ``restart-grace``, both instances
#: running), a slow server whose answers come up to 50-500 ms late for two leases
#: (``slow``: no failover may follow), a server stalled longer than MonitorStall
#: (``stall``: the active stops itself cleanly, the standby takes over), and a pause of
#: the active for a fifth of the lease (``pause-short``: it must carry on; a longer one
#: may pass the monitor's 3/5-of-the-lease limit, and the instance then stops itself)
LAB_EXTRA_FAULTS = ("restart", "restart-grace", "slow", "stall", "pause-short")
#: local faults drawn only when named (``--faults``), each beyond a kill of the active:
#: ``kill-both`` (both instances at once, a host pair's power cut; they start again in a
#: random order), ``pause-standby`` (the standby stopped by SIGSTOP while the active is
#: killed, resumed a moment later), ``kill-checkpoint`` and ``kill-extent`` (the active
#: killed while a checkpoint replaces ``amqalchk.fil``, or while the log puts a new
#: extent in place: an injected stall holds it there), ``kill-switchover`` (killed while
#: ``endmqm -s`` runs), ``kill-takeover`` (the active killed, then the standby killed in
#: its takeover's recovery, before or just after it serves), and ``third`` (a third
#: instance started on a third host with ``strmqm -x`` as the active is killed: it may
#: only ever become the standby)
LOCAL_EXTRA_FAULTS = ("kill-both", "pause-standby", "kill-checkpoint", "kill-extent",
                      "kill-switchover", "kill-takeover", "third")
#: lab faults drawn only when named, each with an outcome the instances decide (the same
#: active carries on, or it stops itself and the standby takes over; never both):
#: ``pause-lease`` (SIGSTOP of the active for 0.5 to 1.3 leases, then SIGCONT),
#: ``partition-short`` and ``partition-lease`` (the active's host cut off the server for
#: 0.2-0.5 or 0.8-1.3 leases, then healed), ``server-pause`` (ganesha stopped for 0.5-1.5
#: leases, then resumed), ``pause-standby`` (the standby stopped while the active is
#: killed, resumed after 1.5 leases), ``partition-standby`` (the standby's host cut off
#: while the active is killed, healed 0.5-2 leases later), ``kill-both`` (both killed,
#: started again in a random order once their leases allow) and ``third`` (strmqm -x of
#: a third host as the active is killed: it may become the standby, never the active)
LAB_CHAOS_FAULTS = ("pause-lease", "partition-short", "partition-lease", "server-pause",
                    "pause-standby", "partition-standby", "kill-both", "third")
#: lab faults after which either the same active carries on or the standby takes over
EITHER_WAY = ("pause-lease", "partition-short", "partition-lease", "server-pause")
#: faults after which the same instance must still be the active one
NO_FAILOVER = ("slow", "pause-short")
MQRC_CALL_INTERRUPTED = 2549
MQRC_NO_MSG_AVAILABLE = 2033


@dataclass
class _Ledger:
    """What the producers were told, unit by unit."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    committed: list[list[str]] = field(default_factory=list)
    #: per committed unit: the host of the instance that acknowledged it, and when
    acked_by: dict[str, tuple[str, float]] = field(default_factory=dict)
    backed_out: list[list[str]] = field(default_factory=list)
    unknown: list[list[str]] = field(default_factory=list)
    errors: dict[int, int] = field(default_factory=dict)
    #: what the consumers were told: messages they got for good (a get outside syncpoint
    #: that answered, or a unit of gets whose commit answered), units of gets whose commit
    #: was cut off (the messages may be back on the queue, all or none), how many gets
    #: under syncpoint were backed out, and gets outside syncpoint cut off in flight (each
    #: may have taken a message nobody received: MQ's rule for gets outside syncpoint)
    delivered: list[str] = field(default_factory=list)
    delivered_unknown: list[list[str]] = field(default_factory=list)
    gets_backed_out: int = 0
    gets_uncertain: int = 0
    #: every acknowledgement (commit of a unit of puts or gets): monotonic times the
    #: commit was sent and its answer came in, and the host that answered
    acks: list[tuple[float, float, str]] = field(default_factory=list)

    def note(self, outcome: str, unit: list[str], mqrc: int | None = None) -> None:
        with self.lock:
            getattr(self, outcome).append(unit)
            if mqrc is not None:
                self.errors[mqrc] = self.errors.get(mqrc, 0) + 1


def _producer(qmgr: str, index: int, unit_size: int, stop: threading.Event,
              ledger: _Ledger) -> None:
    from miqm.net.client import connect

    # even producers pipeline their puts as the client library does (a failed put is
    # reported by the commit), every other unit of theirs a single put, which travels
    # with its commit as one request; odd producers wait for each put's reply
    pipelined = index % 2 == 0
    conn = None
    n = 0
    while not stop.is_set():
        size = 1 if pipelined and n % 2 == 0 else unit_size
        unit = [f"p{index}-u{n}-m{k}" for k in range(size)]
        n += 1
        stage = "connect"
        try:
            if conn is None:
                conn = connect(qmgr, timeout=1.0, reconnect=True, reconnect_timeout=60)
            stage = "put"
            for body in unit:
                if pipelined:
                    conn.send("put", queue=QUEUE, body=body.encode(), persistent=True,
                              syncpoint=True)
                else:
                    conn.call("put", queue=QUEUE, body=body.encode(), persistent=True,
                              syncpoint=True)
            stage = "commit"
            sent = time.monotonic()
            conn.call("commit")
            acked = (conn.server_host, time.monotonic())
            ledger.note("committed", unit)
            with ledger.lock:
                ledger.acked_by[unit[0]] = acked
                ledger.acks.append((sent, acked[1], acked[0]))
        except MiqmError as exc:
            mqrc = getattr(exc, "mqrc", None)
            if stage == "commit" and mqrc != 2003:
                # cut off in flight (2549) or no answer at all: nobody can know
                ledger.note("unknown", unit, mqrc)
            else:
                ledger.note("backed_out", unit, mqrc)
            conn = _after_failure(conn)
    if conn is not None:
        conn.close()


def _after_failure(conn: Any) -> Any:
    """After a failed call: back out what the connection's unit of work still holds (a
    lost unit's state is cleared that way), or drop the connection (None) if even that
    fails; then a short breath before the next try."""
    if conn is not None:
        try:
            conn.call("backout")
        except MiqmError:
            conn.close()
            conn = None
    time.sleep(0.01)
    return conn


def _consumer(qmgr: str, index: int, syncpoint: bool, stop: threading.Event,
              ledger: _Ledger) -> None:
    """Gets messages while the faults go on: in units of up to three under syncpoint
    (committed), or one at a time outside syncpoint; notes what it was told."""
    from miqm.net.client import connect

    conn = None
    while not stop.is_set():
        got: list[str] = []
        stage = "connect"
        try:
            if conn is None:
                conn = connect(qmgr, timeout=1.0, reconnect=True, reconnect_timeout=60)
            for _ in range(3 if syncpoint else 1):
                stage = "get"
                try:
                    reply = conn.call("get", queue=QUEUE, wait=0.2, syncpoint=syncpoint)
                except MiqmError as exc:
                    if getattr(exc, "mqrc", None) == MQRC_NO_MSG_AVAILABLE:
                        break
                    raise
                got.append((reply.get("body") or b"").decode())
            if not got:
                continue
            sent = time.monotonic()
            if syncpoint:
                stage = "commit"
                conn.call("commit")
            with ledger.lock:
                ledger.delivered += got
                if syncpoint:
                    ledger.acks.append((sent, time.monotonic(), conn.server_host))
        except MiqmError as exc:
            mqrc = getattr(exc, "mqrc", None)
            with ledger.lock:
                if mqrc is not None:
                    ledger.errors[mqrc] = ledger.errors.get(mqrc, 0) + 1
                if stage == "commit" and mqrc != 2003:
                    ledger.delivered_unknown.append(got)
                elif syncpoint:
                    ledger.gets_backed_out += len(got)  # back on the queue
                elif stage == "get":
                    ledger.gets_uncertain += 1
            conn = _after_failure(conn)
    if conn is not None:
        conn.close()


def _drain(qmgr: str) -> list[str]:
    from miqm.net.client import connect

    got: list[str] = []
    with connect(qmgr, timeout=5.0, reconnect=True, reconnect_timeout=60) as conn:
        while True:
            batch: list[str] = []
            try:
                # under syncpoint, committed every few hundred: one force per batch
                while len(batch) < 500:
                    reply = conn.call("get", queue=QUEUE, wait=0.5, syncpoint=True)
                    batch.append((reply.get("body") or b"").decode())
            except MiqmError as exc:
                if getattr(exc, "mqrc", None) != MQRC_NO_MSG_AVAILABLE:
                    raise
            conn.call("commit")
            got += batch
            if len(batch) < 500:
                return got


def _audit(ledger: _Ledger, got: list[str]) -> dict[str, int]:
    """Count each kind of damage. ``got``: what was drained from the queue at the end;
    with what the consumers got for good, every committed message must be found exactly
    once. A message whose get was cut off in flight may be missing (``lost_in_flight``, at
    most one per such get outside syncpoint); a unit of gets whose commit was cut off is
    back on the queue whole or not at all (``torn_gets``)."""
    final: dict[str, int] = {}
    for body in [*got, *ledger.delivered]:
        final[body] = final.get(body, 0) + 1
    maybe = {m for u in ledger.delivered_unknown for m in u}
    committed = {m for u in ledger.committed for m in u}
    backed = {m for u in ledger.backed_out for m in u}
    unknown = {m for u in ledger.unknown for m in u}
    known = committed | backed | unknown

    def present(m: str) -> bool:
        return final.get(m, 0) > 0 or m in maybe

    missing = sum(1 for m in committed if not present(m))
    torn = sum(1 for u in ledger.unknown if len({present(m) for m in u}) > 1)
    torn_gets = sum(1 for u in ledger.delivered_unknown
                    if len({final.get(m, 0) > 0 for m in u}) > 1)
    return {
        "lost": max(0, missing - ledger.gets_uncertain),
        "duplicated": sum(1 for c in final.values() if c > 1),
        "resurrected": sum(1 for m in backed if present(m)),
        "torn_units": torn,
        "torn_gets": torn_gets,
        "phantoms": sum(1 for m in set(final) | maybe if m not in known),
        "lost_in_flight": min(missing, ledger.gets_uncertain),
    }


def _deposed_acks(ledger: _Ledger, timeline: list[dict[str, Any]]) -> tuple[int, int]:
    """Acknowledgements from an instance other than the one seen serving since the last
    failover (before the next fault): ``(two_owners, answered_late)``. A commit sent
    after the new owner was seen serving and acknowledged by another instance is an
    instant with two owners. One sent before and answered after is counted apart: the
    old owner may have carried it out before it lost ownership, and its answer was only
    read later (a busy client thread), so it proves nothing either way."""
    epochs = []
    for k, t in enumerate(timeline):
        if t.get("took") is None:
            continue
        start = t["at_monotonic"] + t["took"]
        end = timeline[k + 1]["at_monotonic"] if k + 1 < len(timeline) else float("inf")
        epochs.append((start, end, t["new"]))
    two_owners = late = 0
    for sent, received, host in ledger.acks:
        for start, end, owner in epochs:
            if host == owner or not start < received < end:
                continue
            if sent > start:
                two_owners += 1
            else:
                late += 1
            break
    return two_owners, late


def _lost_units(ledger: _Ledger, got: list[str], limit: int = 10) -> list[dict[str, Any]]:
    """The first committed units with a message missing (neither drained at the end nor
    consumed during the run, as :func:`_audit` counts them), and which instance acked
    them."""
    found = {*got, *ledger.delivered, *(m for u in ledger.delivered_unknown for m in u)}
    out = []
    for unit in ledger.committed:
        missing = [m for m in unit if m not in found]
        if missing:
            host, when = ledger.acked_by.get(unit[0], ("?", 0.0))
            out.append({"unit": unit[0].rsplit("-", 1)[0], "missing": len(missing),
                        "acked_by": host, "acked_at_monotonic": round(when, 3)})
            if len(out) >= limit:
                break
    return out


def _internal_errors(roots: list[str]) -> list[str]:
    """Lines that say an instance met an internal error (a traceback, AMQ6184) in the
    controllers' output files and the error logs under ``roots``."""
    found: list[str] = []
    for root in roots:
        for where, _dirs, files in os.walk(root):
            for name in files:
                if not (name.endswith(".out") or name.startswith("AMQERR")):
                    continue
                path = os.path.join(where, name)
                try:
                    with open(path, encoding="utf-8", errors="replace") as f:
                        for line in f:
                            if "Traceback" in line or "AMQ6184" in line:
                                found.append(f"{path}: {line.strip()[:300]}")
                except OSError:
                    continue
    return found


def _log_generations(directory: str, file_pages: int) -> tuple[list[int], str]:
    """Activation generations of the log's records in LSN order, read from the log
    directory ('' or the reader's refusal)."""
    from lockfs.posix import PosixVolume
    from miqm.store.log import RecoveryLog
    from miqm.store.settings import LogSettings

    vol = PosixVolume(directory)
    gens: list[int] = []
    try:
        gen = RecoveryLog.recorded_generation(vol)
        reader = RecoveryLog.open(vol, LogSettings(file_pages=file_pages), generation=gen)
        try:
            last = None
            for rec in reader.records(reader.first_lsn()):
                if rec.generation != last:
                    gens.append(rec.generation)
                    last = rec.generation
        finally:
            reader.close()
    except MiqmError as exc:
        return gens, str(exc)
    return gens, ""


class _LocalCluster:
    """Two instances on this machine sharing a local directory (and a third host that
    the ``third`` fault starts)."""

    faults = FAULTS

    def __init__(self) -> None:
        from miqm.localpair import Host

        self.pair = LocalPair(qmgr="QMCAMP")
        # checkpoints every few seconds under the campaign's load, so that the faults
        # that kill one in progress meet one soon
        self.pair.tuning["CheckPointLogRecdMax"] = "2000"
        self.qmgr = self.pair.qmgr
        self.keep = False  # set when the audit fails: the evidence stays on disk
        self.rng = random.Random()
        self.third = Host("hostc", os.path.join(self.pair.base, "hostc"))
        os.makedirs(self.third.root, exist_ok=True)
        #: a fault file per host: created, it arms that host's injected stalls
        self._arm = {(h.name, f): os.path.join(self.pair.base, f"arm-{h.name}-{f}")
                     for h in (self.pair.a, self.pair.b)
                     for f in ("kill-checkpoint", "kill-extent")}
        for h in (self.pair.a, self.pair.b):
            h.extra["MIQM_FAULTS"] = json.dumps([
                # the checkpoint's last step (amqalchk.fil replaced), and the log control
                # file's replacement that names a new extent before its first page is
                # written (or ends a checkpoint): held for a minute once armed, so that
                # a kill lands inside them
                {"volume": "data", "op": "write_atomic", "path": "amqalchk.fil",
                 "kind": "stall", "seconds": 60,
                 "armed": self._arm[h.name, "kill-checkpoint"]},
                {"volume": "log", "op": "write_atomic", "path": "amqhlctl.lfh",
                 "kind": "stall", "seconds": 60,
                 "armed": self._arm[h.name, "kill-extent"]}])
        #: what the fault checks found wrong (a third instance active, say)
        self.violations: list[str] = []

    def __enter__(self) -> _LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.pair.keep = self.keep
        with contextlib.suppress(MiqmError):
            self._end_third()
        self.pair.close()

    def kept(self) -> list[str]:
        """Where the evidence is when it is kept."""
        return [self.pair.base]

    def setup(self) -> None:
        pair = self.pair
        pair.create()
        pair.start(pair.a)
        pair.start(pair.b)
        pair.mqsc(pair.a, f"DEFINE QLOCAL({QUEUE}) MAXDEPTH(10000000)\n")
        line = pair.run(pair.a, "dspmqinf", "-o", "command", pair.qmgr).stdout.split()
        pair.run(self.third, *line)

    def client_root(self) -> str:
        return self.pair.b.root

    def _pid(self, host: Any) -> int | None:
        """The pid in ``host``'s run record of the queue manager, if it is alive."""
        from miqm.ha import runfile

        try:
            with open(runfile.path(self.qmgr, host.root), encoding="utf-8") as f:
                pid = int(json.load(f)["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return pid if runfile.alive(pid) else None

    def _run_mode(self, host: Any) -> tuple[str, str]:
        """(mode, status) of ``host``'s run record; ("", "") if none."""
        from miqm.ha import runfile

        try:
            with open(runfile.path(self.qmgr, host.root), encoding="utf-8") as f:
                rec = json.load(f)
            return str(rec.get("mode", "")), str(rec.get("status", ""))
        except (OSError, ValueError, AttributeError):
            return "", ""

    def _kill(self, pid: int | None) -> None:
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            _wait_gone(pid)

    def _end_third(self) -> None:
        """End the third host's instance, whatever it became."""
        pid = self._pid(self.third)
        if pid is None:
            return
        mode, _ = self._run_mode(self.third)
        if mode == "active":
            self.violations.append("the third host's instance ran as the active one")
        self._kill(pid)

    def inject(self, fault: str) -> dict[str, Any]:
        pair = self.pair
        before = pair.active() or pair.wait_active()
        old = pair.host(before["host"])
        other = pair.b if old is pair.a else pair.a
        hit: dict[str, Any] = {"host": before["host"], "pid": int(before["pid"]),
                               "t0": time.monotonic(), "standby_pid": self._pid(other)}
        if fault == "kill":
            os.kill(hit["pid"], 9)
        elif fault == "kill-both":
            _kill_and_wait((hit["pid"], hit["standby_pid"]))
            first, second = (old, other) if self.rng.random() < 0.5 else (other, old)
            hit["order"] = [first.name, second.name]
            pair.start(first)
            pair.start(second)
        elif fault == "pause-standby":
            spid = hit["standby_pid"]
            if spid is not None:
                os.kill(spid, signal.SIGSTOP)
            try:
                os.kill(hit["pid"], signal.SIGKILL)
                time.sleep(0.5 + self.rng.random())
            finally:
                if spid is not None:
                    os.kill(spid, signal.SIGCONT)
        elif fault in ("kill-checkpoint", "kill-extent"):
            arm = self._arm[old.name, fault]
            Path(arm).touch()
            try:
                # a checkpoint comes every few seconds (CheckPointLogRecdMax 2000); an
                # extent switch every few MB of log: either is held once it begins
                time.sleep(2.0 + 3.0 * self.rng.random())
                os.kill(hit["pid"], signal.SIGKILL)
                _wait_gone(hit["pid"])
            finally:
                os.unlink(arm)
        elif fault == "kill-switchover":
            proc = subprocess.Popen([command_path("endmqm"), "-s", self.qmgr],
                                    env=old.env(), stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            time.sleep(0.5 * self.rng.random())
            with contextlib.suppress(ProcessLookupError):
                os.kill(hit["pid"], signal.SIGKILL)
            proc.wait(60)
        elif fault == "kill-takeover":
            os.kill(hit["pid"], signal.SIGKILL)
            spid = hit["standby_pid"]
            deadline = time.monotonic() + 60
            while spid is not None and time.monotonic() < deadline:
                if self._run_mode(other)[0] == "active":  # it holds master: recovering
                    break
                time.sleep(0.001)
            time.sleep(0.2 * self.rng.random())
            self._kill(spid)
            _wait_gone(hit["pid"])
            first, second = (old, other) if self.rng.random() < 0.5 else (other, old)
            hit["order"] = [first.name, second.name]
            pair.start(first)
            pair.start(second)
        elif fault == "third":
            proc = subprocess.Popen([command_path("strmqm"), "-x", self.qmgr],
                                    env=self.third.env(), stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)
            time.sleep(0.05 * self.rng.random())
            os.kill(hit["pid"], signal.SIGKILL)
            out, _ = proc.communicate(timeout=60)
            hit["third"] = (proc.returncode, out.strip().splitlines()[-1:] or [""])
        else:
            pair.run(old, "endmqm", "-s", pair.qmgr, timeout=120)
        return hit

    def await_takeover(self, hit: dict[str, Any]) -> tuple[str, float]:
        restarted = hit.get("fault") in ("kill-both", "kill-takeover")
        new = self.pair.wait_active(not_host=None if restarted else hit["host"],
                                    timeout=120, poll=0.01)
        if str(new["host"]) not in (self.pair.a.name, self.pair.b.name):
            self.violations.append(f"{hit.get('fault')}: {new['host']} became active")
        return str(new["host"]), time.monotonic() - hit["t0"]

    def recover(self, fault: str, hit: dict[str, Any]) -> None:
        if fault == "third":
            self._end_third()
        if fault in ("kill-both", "kill-takeover"):
            return  # both were started again
        self.pair.start(self.pair.host(hit["host"]))  # back as the standby

    def shutdown(self) -> None:
        pair = self.pair
        self._end_third()
        for host in (pair.a, pair.b):
            pair.run(host, "endmqm", "-i", "-x", pair.qmgr, check=False, timeout=30)
        active = pair.active()
        if active:
            pair.run(pair.host(active["host"]), "endmqm", "-i", pair.qmgr, check=False,
                     timeout=30)

    def log_location(self) -> tuple[str, int]:
        return os.path.join(self.pair.shared, "log", self.qmgr), 1024


def _kill_and_wait(pids: tuple[int | None, ...]) -> None:
    """SIGKILL each of ``pids`` (None skipped, one already gone too), then wait until
    every one is gone: both instances at once, as a power cut of both hosts."""
    live = [p for p in pids if p is not None]
    for p in live:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)
    for p in live:
        _wait_gone(p)


def _wait_gone(pid: int, timeout: float = 30.0) -> None:
    """Until process ``pid`` has gone (a killed instance's locks go with it)."""
    from miqm.ha.runfile import alive

    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.005)


class _LabCluster:
    """Two instances on the NFSv4 lab (hosts A and B in network namespaces)."""

    faults = LAB_FAULTS

    def __init__(self, lab_dir: str | None, lease: int) -> None:
        from miqm.bench import failover_lab

        self._fl = failover_lab
        self.qmgr = failover_lab.QMGR
        self._lab_dir, self._lease = lab_dir, lease
        self._stack = contextlib.ExitStack()
        self.lease = lease
        self.keep = False  # set when the audit fails: the evidence stays on disk
        self._kept: list[str] = []
        self.rng = random.Random()
        self.monitor_stall = 2.0  # failover_lab's tuning: 2 * max(0.5, lease / 5)
        #: what the fault checks found wrong (two actives, a third host active)
        self.violations: list[str] = []

    def _remove(self, path: Path) -> None:
        if self.keep:
            self._kept.append(str(path))
        else:
            shutil.rmtree(path, True)

    def kept(self) -> list[str]:
        """Where the evidence is when it is kept."""
        return [str(self.work), str(self.bench.lab.export_dir / self.bench.sub)]

    def __enter__(self) -> _LabCluster:
        from miqm.lab import lab_session, running_lab

        work = self.work = Path(tempfile.mkdtemp(prefix="miqm-campaign-lab-"))
        self._stack.callback(self._remove, work)
        if self._lab_dir:
            lab = running_lab(Path(self._lab_dir))
        else:
            lab = self._stack.enter_context(lab_session(work / "lab", self._lease))
        self.lease = lab.lease
        self.monitor_stall = 2 * max(0.5, lab.lease / 5)
        self.bench = self._fl._Bench(lab, work, lambda _s: None)
        self.third = _ThirdHost("a", work / "hostc")
        self.third.root.mkdir(parents=True)
        self._stack.callback(self._remove, lab.export_dir / self.bench.sub)
        self._stack.callback(self.bench.stop)
        self.active = self.bench.hosts["a"]
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def setup(self) -> None:
        self.bench.create()
        self.bench.run(self.active, "runmqsc", self.qmgr,
                       stdin=f"DEFINE QLOCAL({QUEUE}) MAXDEPTH(10000000)\n")
        _, line = self.bench.run(self.active, "dspmqinf", "-o", "command", self.qmgr)
        self.bench.run(self.third, *line.split())

    def client_root(self) -> str:
        return str(self.bench.hosts["b"].root)

    def inject(self, fault: str) -> dict[str, Any]:
        old = self.active
        pid = self.bench.pid(old)
        if pid is None:
            raise MiqmError(f"the active instance on {old.name} has no pid recorded")
        hit = {"host": old.name, "pid": pid, "old": old, "t0": time.monotonic()}
        lab = self.bench.lab
        if fault == "restart":
            lab.restart_server(0)
        elif fault == "restart-grace":
            lab.restart_server(self.lease)
        elif fault == "slow":
            delay = self.rng.uniform(0.05, 0.5)
            hit["delay"] = round(delay, 3)
            lab.slow_server(delay, 2 * self.lease)
        elif fault == "stall":
            stall = self.monitor_stall + 1.0
            hit["delay"] = stall
            lab.slow_server(stall, stall)
        elif fault == "pause-short":
            os.kill(pid, signal.SIGSTOP)
            # under the monitor's slack: renewed up to lease/3 before, stopped at 3/5
            time.sleep(self.lease * 0.2)
            os.kill(pid, signal.SIGCONT)
        elif fault == "pause-lease":
            os.kill(pid, signal.SIGSTOP)
            hit["delay"] = round(self.lease * self.rng.uniform(0.5, 1.3), 3)
            time.sleep(hit["delay"])
            os.kill(pid, signal.SIGCONT)
        elif fault in ("partition-short", "partition-lease"):
            low, high = (0.2, 0.5) if fault == "partition-short" else (0.8, 1.3)
            hit["delay"] = round(self.lease * self.rng.uniform(low, high), 3)
            lab.cut(old.ns)
            try:
                time.sleep(hit["delay"])
            finally:
                lab.heal(old.ns)
        elif fault == "server-pause":
            hit["delay"] = round(self.lease * self.rng.uniform(0.5, 1.5), 3)
            gpid = lab.server_pid()
            os.kill(gpid, signal.SIGSTOP)
            try:
                time.sleep(hit["delay"])
            finally:
                os.kill(gpid, signal.SIGCONT)
        elif fault in ("pause-standby", "partition-standby"):
            other = self._other(old)
            spid = self.bench.pid(other)
            if fault == "pause-standby" and spid is not None:
                os.kill(spid, signal.SIGSTOP)
            elif fault == "partition-standby":
                lab.cut(other.ns)
            try:
                os.kill(pid, signal.SIGKILL)
                hit["delay"] = round(self.lease * (1.5 if fault == "pause-standby"
                                                   else self.rng.uniform(0.5, 2.0)), 3)
                time.sleep(hit["delay"])
            finally:
                if fault == "pause-standby" and spid is not None:
                    os.kill(spid, signal.SIGCONT)
                elif fault == "partition-standby":
                    lab.heal(other.ns)
        elif fault == "kill-both":
            other = self._other(old)
            _kill_and_wait((pid, self.bench.pid(other)))
            first, second = (old, other) if self.rng.random() < 0.5 else (other, old)
            hit["order"] = [first.name, second.name]
            self._restart(first)
            self._restart(second)
        elif fault == "third":
            proc = lab.run_in(old.ns, [_exe("strmqm"), "-x", self.qmgr],
                              env=self.third.env())
            time.sleep(0.05 * self.rng.random())
            os.kill(pid, signal.SIGKILL)
            out, err = proc.communicate(timeout=120)
            hit["third"] = (proc.returncode, (out + err).strip().splitlines()[-1:])
        elif fault == "partition":
            self.bench.lab.cut(old.ns)
        elif fault == "pause":
            os.kill(pid, signal.SIGSTOP)
        elif fault == "kill":
            os.kill(pid, signal.SIGKILL)
        else:
            self.bench.run(old, "endmqm", "-s", self.qmgr, timeout=120)
        return hit

    def _other(self, host: Any) -> Any:
        return self.bench.hosts["b" if host.ns == "a" else "a"]

    def _mode(self, host: Any) -> str:
        """The mode in ``host``'s run record ('' if none)."""
        try:
            rec = json.loads((host.root / "run" / f"{self.qmgr}.json").read_text())
            return str(rec.get("mode", ""))
        except (OSError, ValueError, AttributeError):
            return ""

    def _restart(self, host: Any) -> None:
        """strmqm -x on ``host`` until it runs: a killed instance's locks last until its
        lease has run out at the server (AMQ1103, exit 47, meanwhile)."""
        deadline = time.monotonic() + 6 * self.lease + 30
        while True:
            code, out = self.bench.run(host, "strmqm", "-x", self.qmgr, timeout=120,
                                       ok=False)
            if code == 0:
                return
            if time.monotonic() > deadline:
                raise MiqmError(f"strmqm -x on {host.name} kept failing: "
                                f"{out.strip().splitlines()[-1:]}")
            time.sleep(0.5)

    def _either_way(self, hit: dict[str, Any]) -> tuple[str, float | None]:
        """After a fault either outcome of which is right: the same active carrying on,
        or its end and a takeover. Never both: an old active alive and serving while
        the other instance runs as the active is a violation."""
        old, pid = hit["old"], hit["pid"]
        new = self._other(old)
        # the old active stops itself by 3/5 of its lease; the standby is granted the
        # lock once the server let the lease go (a few seconds more)
        deadline = time.monotonic() + 2 * self.lease + self.monitor_stall + 3
        both_since: float | None = None
        while time.monotonic() < deadline:
            if not self._fl._alive(pid):
                break
            if self._mode(new) == "active":
                # the old one, resumed, finds its lock gone at its next write or verify;
                # alive well past that beside a new active, it is a second owner
                both_since = both_since or time.monotonic()
                if time.monotonic() - both_since > self.monitor_stall + 2:
                    self.violations.append(
                        f"{hit['fault']}: {new.name} ran as the active while the old "
                        f"active on {old.name} (pid {pid}) stayed alive")
                    break
            time.sleep(0.05)
        if self._fl._alive(pid):
            hit["failover"] = False
            return old.name, None
        return self._served_by(new, old, hit, failover=True)

    def _served_by(self, host: Any, other: Any, hit: dict[str, Any],
                   failover: bool) -> tuple[str, float | None]:
        """``host`` is the active now: how long after the fault it served, noted in
        ``hit`` (and whether that was a failover)."""
        took = self.bench.serving_after(host, other, hit["t0"])
        hit["failover"] = failover
        self.active = host
        return host.name, took

    def await_takeover(self, hit: dict[str, Any]) -> tuple[str, float | None]:
        old = hit["old"]
        new = self.bench.hosts["b" if old.ns == "a" else "a"]
        if hit.get("fault") in EITHER_WAY:
            return self._either_way(hit)
        if hit.get("fault") == "kill-both":
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                for host, other in ((old, new), (new, old)):
                    if self._mode(host) == "active":
                        return self._served_by(host, other, hit, failover=host is new)
                time.sleep(0.05)
            raise MiqmError("no instance runs as the active after both were restarted")
        if hit.get("fault") in NO_FAILOVER:
            # the same instance must carry on: give a wrongful self-stop time to show
            time.sleep(self.monitor_stall + 1.0)
            if self._fl._alive(hit["pid"]):
                hit["failover"] = False
                return old.name, None
        return self._served_by(new, old, hit, failover=True)

    def recover(self, fault: str, hit: dict[str, Any]) -> None:
        old, pid = hit["old"], hit["pid"]
        if fault == "third":
            self._end_third()
        if fault == "kill-both":
            return  # both run again
        if not hit.get("failover", True):
            if self._mode(self._other(old)) != "standby":
                self._restart(self._other(old))  # a standby cut off may have ended
            return
        if fault in ("restart", "restart-grace"):
            other = self.active
            opid = self.bench.pid(other)
            # the new active's former standby lock went with the old server: nothing else
            if opid is None or not self._fl._alive(opid):
                raise MiqmError(f"no instance running on {other.name} after the restart")
        if fault == "partition":
            self.bench.lab.heal(old.ns)
        elif fault == "pause":
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        deadline = time.monotonic() + 60
        while self._fl._alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        if self._fl._alive(pid):
            os.kill(pid, signal.SIGKILL)
            raise MiqmError(f"the old active instance on {old.name} (pid {pid}) did not "
                            "end itself after losing ownership")
        self._restart(old)

    def _end_third(self) -> None:
        """Kill the third host's instance, whatever it became (a violation if active)."""
        pid = self.bench.pid(self.third)
        if pid is None or not self._fl._alive(pid):
            return
        if self._mode(self.third) == "active":
            self.violations.append("the third host's instance ran as the active one")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _wait_gone(pid)

    def shutdown(self) -> None:
        self._end_third()
        self.bench.stop()

    def log_location(self) -> tuple[str, int]:
        lab = self.bench.lab
        return str(lab.export_dir / self.bench.sub / "log" / self.qmgr), 256


class _ThirdHost:
    """A third 'host' of the lab, in host a's network namespace with a host name and a
    data root of its own (strmqm -x there must be refused or become the standby)."""

    def __init__(self, ns: str, root: Path) -> None:
        self.ns, self.root, self.name = ns, root, "hostc"

    def env(self) -> dict[str, str]:
        from miqm.lab import HOST_ADDR

        return {"MIQM_DATA_ROOT": str(self.root), "MIQM_HOSTNAME": self.name,
                "MIQM_LISTENER_HOST": HOST_ADDR[self.ns], "MIQM_LISTENER_PORT": "0",
                "PYTHONUNBUFFERED": "1"}


def _exe(name: str) -> str:
    """The console command ``name`` next to this Python (as the lab's _Bench runs them)."""
    return os.path.join(os.path.dirname(sys.executable), name)


def _run_load(cluster: _LocalCluster | _LabCluster, cycles: int, faults: tuple[str, ...],
              producers: int, unit_size: int, settle: float, rng: random.Random,
              ledger: _Ledger, durations: list[float], drawn: dict[str, int],
              echo: Callable[[str], None],
              timeline: list[dict[str, Any]] | None = None,
              per_fault: dict[str, list[float]] | None = None,
              spurious: dict[str, int] | None = None,
              round_robin: bool = False, consumers: int = 0) -> list[str]:
    """The producers (and consumers) run while the faults are injected; returns the
    messages drained at the end."""
    timeline = [] if timeline is None else timeline
    per_fault = {} if per_fault is None else per_fault
    spurious = {} if spurious is None else spurious
    stop = threading.Event()
    threads = [threading.Thread(target=_producer, args=(cluster.qmgr, i, unit_size, stop,
                                                        ledger), daemon=True)
               for i in range(producers)]
    # consumers alternate: under syncpoint (units of gets, committed), then outside it
    threads += [threading.Thread(target=_consumer, args=(cluster.qmgr, i, i % 2 == 0, stop,
                                                         ledger), daemon=True)
                for i in range(consumers)]
    try:
        for t in threads:
            t.start()
        for i in range(cycles):
            time.sleep(settle * (0.5 + rng.random()))  # load runs between faults
            fault = faults[i % len(faults)] if round_robin else rng.choice(faults)
            drawn[fault] = drawn.get(fault, 0) + 1
            hit = cluster.inject(fault)
            hit["fault"] = fault
            new, took = cluster.await_takeover(hit)
            if took is not None:
                durations.append(took)
                per_fault.setdefault(fault, []).append(took)
            elif fault not in per_fault:
                per_fault[fault] = []
            if fault in NO_FAILOVER and took is not None:
                spurious[fault] = spurious.get(fault, 0) + 1
            timeline.append({"fault": fault, "host": hit["host"], "new": new,
                             "at_monotonic": round(hit["t0"], 3),
                             "took": None if took is None else round(took, 3),
                             **({"delay": hit["delay"]} if "delay" in hit else {})})
            echo(f"cycle {i + 1}/{cycles}: {fault} of {hit['host']} -> "
                 + (f"{new} serving after {took:.2f}s" if took is not None
                    else f"{new} carried on (no failover)")
                 + f" ({len(ledger.committed)} units committed so far)")
            cluster.recover(fault, hit)
        time.sleep(settle)
    finally:
        stop.set()
        for t in threads:
            t.join(90)
    return _drain(cluster.qmgr)


def bench_campaign(cycles: int, faults: tuple[str, ...] = FAULTS, producers: int = 4,
                   unit_size: int = 3, seed: int | None = None, settle: float = 0.5,
                   lab: bool = False, lab_dir: str | None = None, lease: int = 5,
                   echo: Callable[[str], None] = print,
                   round_robin: bool = False, consumers: int = 2) -> dict[str, Any]:
    """Run the campaign (on two local instances, or on the NFSv4 lab when ``lab``);
    returns the audit and the failover figures. ``round_robin`` takes the faults in
    turn instead of at random (a short run that meets each of them)."""
    rng = random.Random(seed)
    ledger = _Ledger()
    durations: list[float] = []
    drawn: dict[str, int] = {}
    timeline: list[dict[str, Any]] = []
    per_fault: dict[str, list[float]] = {}
    spurious: dict[str, int] = {}
    cluster: _LocalCluster | _LabCluster = (_LabCluster(lab_dir, lease) if lab
                                            else _LocalCluster())
    cluster.rng = random.Random(rng.random())
    with cluster:
        cluster.setup()
        # the producers are clients of host B's installation (bindings mode follows the
        # active instance through the shared data directory)
        with client_of(cluster.client_root(), "campaign"):
            got = _run_load(cluster, cycles, faults, producers, unit_size, settle, rng,
                            ledger, durations, drawn, echo, timeline, per_fault, spurious,
                            round_robin, consumers)
        cluster.shutdown()
        gens, refusal = _log_generations(*cluster.log_location())
        audit = _audit(ledger, got)
        in_flight = audit.pop("lost_in_flight")
        audit["two_owners"], answered_late = _deposed_acks(ledger, timeline)
        violations = list(getattr(cluster, "violations", []))
        internal = _internal_errors(cluster.kept())
        audit["violations"] = len(violations)
        cluster.keep = bool(sum(audit.values()) or refusal)
    ds = sorted(durations)
    result: dict[str, Any] = {
        "cycles": cycles,
        "where": (f"NFSv4 lab, lease {cluster.lease}s" if isinstance(cluster, _LabCluster)
                  else "local directory"),
        "faults": drawn,
        "producers": producers,
        "consumers": consumers,
        "units": {"committed": len(ledger.committed), "backed_out": len(ledger.backed_out),
                  "unknown": len(ledger.unknown)},
        "messages_committed": sum(len(u) for u in ledger.committed),
        "gets": {"delivered": len(ledger.delivered),
                 "commit_unknown": sum(len(u) for u in ledger.delivered_unknown),
                 "backed_out": ledger.gets_backed_out,
                 "cut_off_outside_syncpoint": ledger.gets_uncertain,
                 "lost_in_flight": in_flight},
        "acknowledgements": len(ledger.acks),
        "acks_answered_after_a_takeover": answered_late,
        "messages_found": len(got),
        **audit,
        "log_generations": gens,
        "stale_writes": 1 if refusal else 0,
        "failover_seconds": {"p50": round(statistics.median(ds), 3) if ds else None,
                             "max": round(ds[-1], 3) if ds else None},
        "failover_by_fault": {
            f: {"cycles": drawn.get(f, 0), "failovers": len(v),
                "p50": round(statistics.median(v), 3) if v else None,
                "max": round(max(v), 3) if v else None}
            for f, v in sorted(per_fault.items())},
        "spurious_failovers": spurious,
        "client_errors": {str(k): v for k, v in sorted(ledger.errors.items())},
    }
    if violations:
        result["violation_lines"] = violations
    # tracebacks and AMQ6184 in the instances' output and error logs: not a broken
    # promise, but a fault handled badly (reported, never counted in the audit)
    result["internal_errors"] = internal[:20]
    if refusal:
        result["log_refusal"] = refusal
    if cluster.keep:
        result["kept"] = cluster.kept()
        result["timeline"] = timeline
        if audit["lost"]:
            result["lost_units"] = _lost_units(ledger, got)
    bad = sum(audit.values()) + result["stale_writes"]
    echo(f"campaign: {cycles} faults {drawn}, {len(ledger.committed)} units committed, "
         f"{len(ledger.unknown)} unknown, {len(ledger.backed_out)} backed out; "
         f"{len(ledger.delivered)} messages consumed during the faults; "
         + ("audit clean" if not bad else f"AUDIT FAILED: {audit}"))
    return result
