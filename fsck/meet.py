"""Two processes meeting through the directory: the ``-w`` and ``--lease`` tests.

Processes started independently (on two hosts, or in two network namespaces of the lab)
find each other through *state files*: each writes ``amqmfsck.<test>.<token>.state`` (a
JSON record: its state and a heartbeat counter, rewritten and synced every
:data:`PERIOD`), and reads the others'. A party counts as alive only while its heartbeat
is seen to advance, so files left by an earlier, killed run are ignored. No clocks are
compared between hosts: every time is this process's monotonic clock.

``-w``: the party granted ``amqmfsck.lkw`` first holds it; the other waits, polling with
non-blocking attempts (blocking NFS lock waits can miss a release, APAR IT43349). The
holder releases it ``--hold`` seconds after the waiter arrived (or is killed, or cut off);
the waiter measures the hand-off (from the release it saw, or from the holder's last
heartbeat) and then watches the holder for :data:`SETTLE` seconds. Failures:

* a party is granted the lock while the other is alive and says it holds it: *the
  filesystem does not enforce locks across hosts*;
* the holder, alive, finds its lock lost (NFSv4 lease ran out while it was stopped or
  cut off): *lease expired under a live holder*;
* the hand-off takes longer than ``--handoff-limit`` (default the lease + half of it, or
  100 s where the lease is unknown).

``--lease``: the holder keeps the lock until it is killed, cut off or stopped; the waiter
measures how long the lock stays held after the holder went silent, and checks it against
``VerifyInterval + MonitorStall``: the old instance must have stopped itself first.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fsck.report import (
    CAUSE_LEASE,
    CAUSE_LOCKS,
    CAUSE_PARTNER,
    CAUSE_STOPPED,
    Failed,
    TestResult,
    run_test,
)
from lockfs.errors import LockFsError, VolumeIOError, VolumeNotFound, VolumeStalled
from lockfs.volume import LockMode, Volume, VolumeFile

PERIOD = 0.1  # heartbeat period, seconds
POLL = 0.05  # lock polling while waiting
SETTLE = 3.0  # how long the new holder watches the old one after the hand-off
RECORD = 1024
PREFIX = "amqmfsck"
NOT_ENFORCED = "the filesystem does not enforce locks across hosts"
HOLDING_TICKS = 3  # heartbeats in "holding" that make another party a live holder
#: a sleep that overran by more than this (seconds) means this process was stopped
STOPPED_GAP = 1.0

#: monotonic times at which this process was continued after a stop (SIGCONT), while
#: :func:`note_resumes` is in force
_resumed_at: list[float] = []


def note_resumes() -> Any:
    """From now on note each time this process is continued after a stop (SIGCONT);
    returns the handler SIGCONT had (for ``signal.signal``), or None outside the main
    thread. A stop that falls inside a lock or write call overruns no sleep: without this
    it looks like a slow call, and the partner that gave up meanwhile like one that
    stopped."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGCONT, lambda *_: _resumed_at.append(time.monotonic()))


def progress(text: str, quiet: bool) -> None:
    """A progress line for a person at a terminal (nothing when piped or --json)."""
    if not quiet and sys.stderr.isatty():
        sys.stderr.write(text + "\n")
        sys.stderr.flush()


def parse_record(raw: bytes) -> dict[str, Any] | None:
    """A party's record from a state file's bytes, or None when they are not one.

    A record is a JSON object with a string ``token``, a string ``state`` and an integer
    heartbeat ``hb``; anything else (garbage, a torn write, a file left by another
    program) is no party. ``partners`` is always a list of strings."""
    try:
        rec = json.loads(raw.decode("utf-8", "replace").strip() or "null")
    except (ValueError, RecursionError):
        return None
    if not isinstance(rec, dict):
        return None
    hb, tok, st = rec.get("hb"), rec.get("token"), rec.get("state")
    if type(hb) is not int or not isinstance(tok, str) or not isinstance(st, str) or not tok:
        return None
    partners = rec.get("partners", [])
    rec["partners"] = ([p for p in partners if isinstance(p, str)]
                       if isinstance(partners, list) else [])
    return rec


@dataclass
class Seen:
    """What this process knows of another party."""

    record: dict[str, Any]
    hb: int
    first_seen: float
    changed: float | None = None  # monotonic time the heartbeat was last seen to advance
    state_since: dict[str, float] = field(default_factory=dict)
    #: heartbeat advances seen per state, with the time of the last one
    ticks: dict[str, list[float]] = field(default_factory=dict)
    #: its state file was no longer there at the last look (the party ended)
    gone: bool = False

    def ticks_since(self, state: str, since: float) -> int:
        """Heartbeat advances seen in ``state`` after monotonic time ``since``."""
        return sum(1 for t in self.ticks.get(state, []) if t > since)


class Party:
    """This process's presence in the directory for one test, and its view of others."""

    def __init__(self, vol: Volume, test: str, *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.vol, self.test = vol, test
        self.clock, self._sleep = clock, sleep
        #: the longest a sleep of this process overran (seconds): it was stopped
        #: (SIGSTOP, a frozen VM) or starved for that long
        self.longest_pause = 0.0
        #: the longest time between two heartbeats of this process (seconds): what its
        #: partners saw as silence, whatever this process was doing meanwhile
        self.longest_silence = 0.0
        self._last_beat: float | None = None
        self._since = time.monotonic()
        self.token = f"{socket.gethostname()}.{os.getpid()}.{secrets.token_hex(3)}"
        self.name = f"{PREFIX}.{test}.{self.token}.state"
        self.hb = 0
        self.state = "arrived"
        self.extra: dict[str, Any] = {}
        self.seen: dict[str, Seen] = {}
        self._readers: dict[str, VolumeFile] = {}
        self._nfs4 = vol.url.startswith("nfs4://")
        self.file = vol.open(self.name, create=True, exclusive=True)
        self.publish()

    def sleep(self, seconds: float) -> None:
        """Sleep, noting by how much the sleep overran (:attr:`longest_pause`)."""
        t0 = self.clock()
        self._sleep(seconds)
        self.longest_pause = max(self.longest_pause, self.clock() - t0 - seconds)

    def stopped_for(self) -> float:
        """Seconds this process stood still during the test, as well as it can tell: the
        longest overrun of its sleeps, or, once it has been continued after a stop
        (SIGCONT, see :func:`note_resumes`), the longest silence of its heartbeat."""
        if any(t >= self._since for t in _resumed_at):
            return max(self.longest_pause, self.longest_silence)
        return self.longest_pause

    def publish(self, state: str | None = None, **extra: Any) -> None:
        """Rewrite this party's record (state, heartbeat, extras) and sync it."""
        if state is not None:
            self.state = state
        self.extra.update(extra)
        now = self.clock()
        if self._last_beat is not None:
            self.longest_silence = max(self.longest_silence, now - self._last_beat)
        self._last_beat = now
        self.hb += 1
        body = json.dumps({"token": self.token, "host": socket.gethostname(),
                           "pid": os.getpid(), "test": self.test, "state": self.state,
                           "hb": self.hb,
                           **self.extra}).encode()
        self.file.pwrite(body.ljust(RECORD, b" ")[:RECORD], 0)
        self.file.fdatasync()

    def _read(self, name: str) -> dict[str, Any] | None:
        try:
            if self._nfs4:  # no client cache: keep one open file per record
                f = self._readers.get(name)
                if f is None:
                    f = self._readers[name] = self.vol.open(name)
                raw = f.pread(RECORD, 0)
            else:  # a kernel mount revalidates on open (close-to-open consistency)
                with self.vol.open(name) as f:
                    raw = f.pread(RECORD, 0)
            return parse_record(raw)
        except VolumeNotFound:
            return None
        except VolumeIOError as exc:
            if exc.errno != errno.EISDIR:
                raise
            return None  # a directory named like a record

    def look(self) -> dict[str, Seen]:
        """Read every other party's record; returns the view."""
        now = self.clock()
        mine = f"{PREFIX}.{self.test}."
        present: set[str] = set()
        for name in self.vol.listdir(""):
            if not (name.startswith(mine) and name.endswith(".state")) or name == self.name:
                continue
            rec = self._read(name)
            if rec is None:
                continue
            tok, st, hb = rec["token"], rec["state"], rec["hb"]
            present.add(tok)
            s = self.seen.get(tok)
            if s is None:
                self.seen[tok] = Seen(rec, hb, now, None, {st: now})
                continue
            if hb != s.hb:
                s.hb, s.changed = hb, now
                s.ticks.setdefault(st, []).append(now)
            s.state_since.setdefault(st, now)
            s.record = rec
            s.gone = False
        for tok, s in self.seen.items():
            if tok not in present:
                s.gone = True  # its process ended (and removed its record)
        return self.seen

    def alive(self, s: Seen, within: float = 1.0 + 5 * PERIOD) -> bool:
        """True if the party's heartbeat advanced recently."""
        return s.changed is not None and self.clock() - s.changed <= within

    def silent(self, s: Seen, within: float) -> bool:
        """True if the party's heartbeat has not moved for ``within`` seconds (since it was
        first seen, for one not yet seen to move)."""
        return self.clock() - (s.changed if s.changed is not None else s.first_seen) > within

    def close(self, remove: bool = True) -> None:
        """Close the files and (unless ``remove`` is False) remove this party's record."""
        for f in self._readers.values():
            f.close()
        self._readers.clear()
        self.file.close()
        if not remove:
            return
        try:
            self.vol.unlink(self.name)
        except LockFsError:
            pass


def live_parties(vol: Volume, tests: tuple[str, ...] = ("w", "c", "a", "lease"), *,
                 states: tuple[str, ...] | None = None, watch: float = 1.0,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> list[dict[str, Any]]:
    """The records of the other amqmfsck processes running ``tests`` in the directory now
    (in one of ``states``, if given): those whose heartbeat is seen to move within
    ``watch`` seconds (files left by killed runs stand still and are not counted)."""
    names = [n for n in vol.listdir("") if n.endswith(".state")
             and any(n.startswith(f"{PREFIX}.{t}.") for t in tests)]

    def read(name: str) -> dict[str, Any] | None:
        try:
            return parse_record(vol.read_head(name, RECORD))
        except VolumeNotFound:
            return None
        except VolumeIOError as exc:
            if exc.errno != errno.EISDIR:
                raise
            return None

    first = {n: r for n, r in ((n, read(n)) for n in names)
             if r is not None and (states is None or r["state"] in states)}
    live: dict[str, dict[str, Any]] = {}
    end = clock() + watch
    while True:
        for n, rec in first.items():
            if n in live:
                continue
            now = read(n)
            if now is not None and now["hb"] != rec["hb"]:
                live[n] = now
        if not first or clock() >= end or len(live) == len(first):
            return list(live.values())
        sleep(PERIOD)


def same_host_note(vol: Volume, records: list[dict[str, Any]]) -> str | None:
    """A warning when a partner ran on this host through a kernel mount: its locks were
    then arbitrated by this host's kernel and NFS client, so a pass says nothing about
    locks across hosts (a mount whose locks never reach the server passes). Through an
    ``nfs4://`` URL each process is a client of its own and the server decides."""
    if vol.url.startswith("nfs4://"):
        return None
    here = socket.gethostname()
    if not any(rec.get("host") == here for rec in records):
        return None
    return (f"the other process ran on this host ({here}) too: their locks were decided "
            "by this host's kernel, not across hosts, so this pass says nothing about a "
            "shared filesystem; run the second process on the other host")


def describe_party(rec: dict[str, Any]) -> str:
    """``amqmfsck -w of host (pid 123), waiting``: one party for a person."""
    flag = {"w": " -w", "c": " -c", "a": " -a", "lease": " --lease"}.get(
        str(rec.get("test", "")), "")
    return (f"amqmfsck{flag} of {rec.get('host', '?')} (pid {rec.get('pid', '?')}), "
            f"{rec['state']}")


@dataclass
class MeetOptions:
    """Parameters of -w and --lease (seconds)."""

    wait: float = 120.0  # for the other process to arrive, and for the lock
    hold: float = 3.0  # the first holds this long after the second arrived
    handoff_limit: float | None = None
    lease_mode: bool = False
    stall_budget: float | None = None  # VerifyInterval + MonitorStall (--lease)
    quiet: bool = False


def _limit(vol: Volume, opts: MeetOptions) -> float:
    if opts.handoff_limit is not None:
        return opts.handoff_limit
    lease = vol.lease_seconds
    return lease + max(5.0, lease / 2) if lease else 100.0


def run_meet(vol: Volume, results: list[TestResult], opts: MeetOptions) -> None:
    """Run -w (or --lease) as one of the two parties."""
    test = "lease" if opts.lease_mode else "w"
    name = "lease hand-off" if opts.lease_mode else "waiting and releasing locks"
    with run_test(results, name) as res:
        party = Party(vol, test)
        lockname = f"{PREFIX}.{'lkl' if opts.lease_mode else 'lkw'}"
        try:
            try:
                lf = vol.open(lockname)
            except VolumeNotFound:
                lf = vol.open(lockname, create=True)
            try:
                if lf.try_lock(LockMode.EXCLUSIVE):
                    res.details["role"] = "first"
                    _first(vol, party, lf, res, opts)
                else:
                    res.details["role"] = "second"
                    _second(vol, party, lf, res, opts)
            finally:
                lf.close()
        finally:
            party.close()


def _stopped_waiter(vol: Volume, silent: float, overran: float, exc: LockFsError) -> None:
    """Raise the failure for a call that failed after this waiting process was itself
    stopped or cut off (no call answered for longer than the lease, or its last sleep
    overran by seconds): its NFSv4 state ran out, which is the lease doing its job -
    not a server that does not answer. Returns when that is not what happened."""
    lease = vol.lease_seconds
    if not ((lease and silent > lease) or overran > STOPPED_GAP):
        return
    raise Failed(f"this process was stopped or cut off while it waited (no call answered "
                 f"for {silent:.1f} s"
                 + (f", longer than the lease of {lease:g} s" if lease and silent > lease
                    else "") + f"), and then a call failed: {exc}", CAUSE_STOPPED,
                 "let both processes run to the end (do not stop the waiting one), then "
                 "run the test again") from None


def _linger(party: Party, state: str, seconds: float = 1.5) -> None:
    """Publish ``state`` for a while, so that the other party sees it before we go."""
    end = party.clock() + seconds
    while True:
        try:
            party.publish(state)
        except LockFsError:
            return  # cannot say it: the other side decides on its own
        if party.clock() >= end:
            return
        party.sleep(PERIOD)


def _others(party: Party) -> list[Seen]:
    return [s for s in party.look().values() if party.alive(s)]


def _first(vol: Volume, party: Party, lf: VolumeFile, res: TestResult,
           opts: MeetOptions) -> None:
    clock = party.clock
    granted = clock()
    party.publish("holding")
    res.step(f"granted {vol.url}'s lock file first: holding it")
    progress("File lock acquired. Start a second copy of this program with the same "
             "parameters on another host.", opts.quiet)
    waiter_at: float | None = None
    waiters: set[str] = set()
    # records already there: files of killed earlier runs unless their heartbeat moves
    initial = set(party.look())
    last_tick = clock()
    longest_gap = 0.0
    stalls = 0
    while True:
        now = clock()
        longest_gap = max(longest_gap, now - last_tick)
        last_tick = now
        if lf.lock_lost():
            _linger(party, "lost")
            why = (f"this process, alive, lost the lock it held (its longest pause "
                   f"{longest_gap:.1f} s; lease {vol.lease_seconds or 0:g} s)")
            if opts.lease_mode:
                res.notes.append(why + ": the lease ran out as it should")
                res.details["lost_after_pause"] = round(longest_gap, 3)
                return
            raise Failed(f"lease expired under a live holder: {why}; the lock passed to "
                         "the other process while this one still ran", CAUSE_LEASE,
                         "a holder stopped or cut off longer than the lease loses its lock: "
                         "the queue manager must stop itself within VerifyInterval + "
                         "MonitorStall, which must be shorter than the lease")
        try:
            party.publish()
            others = _others(party)
        except VolumeStalled:
            # a call cut short (this process was stopped in it, or the link is down):
            # the lock's own state decides, at the top of the loop
            stalls += 1
            if stalls * PERIOD > opts.wait:
                raise
            party.sleep(PERIOD)
            continue
        stalls = 0
        for s in others:
            st = s.record.get("state")
            if st in ("holding", "granted", "violation") and (
                    st == "violation" or s.ticks_since(st, granted) >= HOLDING_TICKS):
                _linger(party, "violation")
                raise Failed(f"{NOT_ENFORCED}: the process {s.record.get('token')} was "
                             "granted the lock that this process holds", CAUSE_LOCKS,
                             "use a filesystem whose byte-range locks reach the server "
                             "(NFSv4 with local_lock=none; a FUSE filesystem must forward "
                             "locks)")
            if st == "waiting":
                waiters.add(str(s.record.get("token")))
            if st == "waiting" and waiter_at is None:
                waiter_at = clock()
                res.step(f"the second process {s.record.get('token')} is waiting")
                progress("A second process is waiting for the lock.", opts.quiet)
        if waiter_at is None and clock() - granted > opts.wait:
            came = sorted(tok for tok, s in party.seen.items()
                          if s.record.get("state") in ("waiting", "done")
                          and (tok not in initial or s.changed is not None))
            if came:  # it came while this process was stopped, and gave up
                raise Failed(f"the second process ({', '.join(came)}) came and ended before "
                             "this one saw it waiting (this process was stopped or stalled "
                             f"for {longest_gap:.1f} s; see the other's own output)",
                             CAUSE_PARTNER, "run the test again on both hosts and let "
                             "both run to the end")
            paused = (f" (this process was stopped or stalled for {longest_gap:.1f} s of "
                      "them: one that came meanwhile may have given up)"
                      if longest_gap > 2.0 else "")
            raise Failed(f"no second process arrived within {opts.wait:g} s{paused}",
                         CAUSE_PARTNER, "run the same command on another host at the same "
                         "time (-w and -c need two processes)")
        if waiter_at is not None and not opts.lease_mode and clock() - waiter_at >= opts.hold:
            break
        if opts.lease_mode and waiter_at is not None and clock() - waiter_at > opts.wait:
            res.notes.append("the holder was neither killed nor cut off: nothing measured")
            return
        party.sleep(PERIOD)
    party.publish("released")
    lf.unlock()
    res.step(f"released the lock after holding it {clock() - granted:.2f} s")
    progress("Lock released.", opts.quiet)
    # the second reports what it measured; wait for its verdict
    deadline = clock() + opts.wait
    while clock() < deadline:
        for tok, s in party.look().items():
            if s.record.get("state") == "done" and tok in waiters:
                verdict = s.record.get("verdict")
                verdict = verdict if isinstance(verdict, dict) else {}
                res.details["other"] = verdict
                if verdict.get("ok", True) is not True:
                    raise Failed(str(verdict.get("reason", "the other process failed")),
                                 str(verdict.get("cause", CAUSE_LOCKS)),
                                 str(verdict.get("advice", "")))
                res.step("the second process was granted the lock and reported success")
                note = same_host_note(vol, [s.record])
                if note:
                    res.notes.append(note)
                if "handoff" in verdict:
                    res.details["handoff"] = verdict["handoff"]
                return
        # a waiter that ended without a verdict gave up before the release (its own
        # output says why: typically this process was stopped longer than its --wait):
        # that says nothing against the filesystem's locks
        seen = [party.seen[t] for t in waiters if t in party.seen]
        if seen and all(s.gone for s in seen):
            raise Failed("the second process ended before it reported being granted the "
                         "lock (it gave up waiting"
                         + (f": this process was stopped or stalled for {longest_gap:.1f} s"
                            if longest_gap > 2.0 else "") + "; see its own output)",
                         CAUSE_PARTNER, "run the test again on both hosts and let both "
                         "run to the end")
        party.publish()
        party.sleep(PERIOD)
    silent = [t for t in waiters if t in party.seen and not party.alive(party.seen[t])]
    if silent and len(silent) == len(waiters):
        raise Failed(f"the second process ({', '.join(sorted(silent))}) went silent and did "
                     f"not report within {opts.wait:g} s after the release (killed, "
                     "stopped, or its host cut off)", CAUSE_PARTNER,
                     "run the test again on both hosts and let both run to the end")
    raise Failed(f"the second process did not report within {opts.wait:g} s after the "
                 "release", CAUSE_LOCKS, "it may not have been granted the lock: run -w -v "
                 "there to see why")


def _second(vol: Volume, party: Party, lf: VolumeFile, res: TestResult,
            opts: MeetOptions) -> None:
    clock = party.clock
    party.publish("waiting")
    res.step("the lock is held elsewhere: waiting for it (non-blocking attempts)")
    progress("Waiting for the lock...", opts.quiet)
    start = clock()
    released_seen: float | None = None
    holder_tok: str | None = None
    last_pub = clock()
    # this process's own pauses: a sleep that overran by seconds (SIGSTOP, a frozen VM),
    # and when a call last completed (a stop inside a call shows as a call that failed
    # long after the one before it)
    paused = last_over = 0.0
    answered = clock()
    while True:
        try:
            for s in party.look().values():
                st = s.record.get("state")
                if st == "released" and released_seen is None and s.changed is not None:
                    released_seen = s.state_since.get("released", clock())
                    holder_tok = str(s.record.get("token"))
            got_it = lf.try_lock(LockMode.EXCLUSIVE)
        except LockFsError as exc:
            _stopped_waiter(vol, clock() - answered, last_over, exc)
            raise
        answered = clock()
        if got_it:
            break
        if clock() - start > opts.wait + (opts.hold if not opts.lease_mode else 0):
            reason = f"the lock was not handed over within {clock() - start:.1f} s"
            # a holder seen alive, then silent (a file left by a killed earlier run never
            # moves: it is no holder)
            silent = [s for s in party.seen.values() if s.record.get("state") == "holding"
                      and s.changed is not None and not s.gone and not party.alive(s)]
            if silent and not released_seen:
                s = silent[0]
                reason += (f": its holder {s.record.get('token')} has been silent for "
                           f"{clock() - (s.changed or s.first_seen):.1f} s (killed, stopped "
                           "or cut off) and its lock is still held")
            verdict = {"ok": False, "reason": reason,
                       "cause": CAUSE_LEASE if not released_seen else CAUSE_LOCKS,
                       "advice": "a lock held by a process that failed must be released "
                                 "(NFSv4: when its lease ends; a stopped process on a local "
                                 "disk keeps its lock): check the server's lease, or give "
                                 "a longer --wait"}
            # say it to the holder too, should it be looking: it reports the same reason
            try:
                party.publish("done", verdict=verdict)
            except LockFsError:
                pass  # cannot say it (cut off): this process's own report stands
            raise Failed(verdict["reason"], verdict["cause"], verdict["advice"])
        if clock() - last_pub >= PERIOD:
            try:
                party.publish()
            except LockFsError as exc:
                _stopped_waiter(vol, clock() - answered, last_over, exc)
                raise
            last_pub = answered = clock()
        t_sleep = clock()
        party.sleep(POLL)
        last_over = clock() - t_sleep - POLL
        paused = max(paused, last_over)
    got = clock()
    party.publish("granted")
    progress("Lock acquired.", opts.quiet)
    # who held it, and when did it go quiet?
    holders = [s for s in party.seen.values() if s.record.get("state") in
               ("holding", "released", "lost", "violation")]
    if holder_tok is None and holders:
        holder = max(holders, key=lambda s: s.changed or 0.0)
        holder_tok = str(holder.record.get("token"))
    holder = party.seen.get(holder_tok) if holder_tok else None
    if released_seen is not None:
        kind, since = "release", released_seen
    elif holder is not None and holder.changed is not None:
        kind, since = "silent", holder.changed
    else:
        kind, since = "unknown", start
    handoff = round(got - since, 3)
    res.details["handoff"] = {"seconds": handoff, "after": kind, "lease": vol.lease_seconds}
    res.step(f"granted the lock {handoff:.3f} s after the holder "
             + {"release": "released it", "silent": "went silent (ended, killed or cut "
                "off)", "unknown": "was last seen"}[kind])
    # watch the old holder: alive and still holding means the lock was not enforced
    watch_end = clock() + (min(1.0, SETTLE) if kind == "release" else SETTLE)
    verdict: dict[str, Any] = {"ok": True}
    while clock() < watch_end:
        party.publish()
        for s in _others(party):
            st = s.record.get("state")
            changed_after = s.changed is not None and s.changed > got
            # a holder resumed after a pause may publish once more before it checks its
            # lock: it must go on saying "holding" to count as holding
            if st in ("holding", "granted", "violation") and changed_after and (
                    st == "violation" or s.ticks_since(st, got) >= HOLDING_TICKS):
                verdict = {"ok": False, "cause": CAUSE_LOCKS,
                           "reason": f"{NOT_ENFORCED}: this process was granted the lock "
                                     f"while {s.record.get('token')} still holds it",
                           "advice": "use a filesystem whose byte-range locks reach the "
                                     "server (NFSv4 with local_lock=none; a FUSE filesystem "
                                     "must forward locks)"}
            elif st == "lost" and changed_after:
                verdict = {"ok": False, "cause": CAUSE_LEASE,
                           "reason": "lease expired under a live holder: the lock passed to "
                                     f"this process while {s.record.get('token')} was alive "
                                     "(stopped or cut off longer than the lease)",
                           "advice": "the queue manager must stop itself within "
                                     "VerifyInterval + MonitorStall, shorter than the lease"}
        if not verdict["ok"]:
            break
        party.sleep(PERIOD)
    if verdict["ok"] and paused > STOPPED_GAP:
        # the time measured includes this process's own stop: it says nothing about the
        # filesystem's hand-off (judged, it failed a good one as 'lease not honoured')
        res.notes.append(f"this process was stopped or stalled for {paused:.1f} s while "
                         f"it waited: the hand-off ({handoff:.1f} s) was not judged")
        res.details["handoff"]["paused"] = round(paused, 3)
    elif verdict["ok"]:
        limit = _limit(vol, opts)
        if opts.lease_mode:
            budget = opts.stall_budget
            res.details["handoff"]["budget"] = budget
            if kind == "release":
                res.notes.append("the holder released the lock itself: kill it, stop it or "
                                 "cut its link to measure the lease")
            elif budget is not None and handoff <= budget:
                verdict = {"ok": False, "cause": CAUSE_LEASE,
                           "reason": f"the lock passed {handoff:.1f} s after its holder went "
                                     "silent, sooner than VerifyInterval + MonitorStall "
                                     f"({budget:g} s): a holder cut off (not killed) would "
                                     "still be writing when the other instance takes over",
                           "advice": "lower VerifyInterval/MonitorStall in qm.ini or raise "
                                     "the server's lease (a killed holder's lock may pass at "
                                     "once: measure with a cut link or SIGSTOP)"}
        elif kind == "release" and handoff > max(2.0, 20 * POLL):
            verdict = {"ok": False, "cause": CAUSE_LOCKS,
                       "reason": f"the lock was granted {handoff:.1f} s after the holder "
                                 "released it", "advice": "the server is slow to hand over "
                                 "released locks: check its lock handling"}
        elif kind == "silent" and handoff > limit:
            verdict = {"ok": False, "cause": CAUSE_LEASE,
                       "reason": f"the lock of a process that ended was granted only "
                                 f"{handoff:.1f} s later (limit {limit:g} s)",
                       "advice": "shorten the server's lease, or check that locks are "
                                 "released when a client fails"}
    verdict["handoff"] = res.details["handoff"]
    note = same_host_note(vol, [holder.record] if holder is not None else [])
    if note and verdict["ok"]:
        res.notes.append(note)
    lost = lf.lock_lost()
    lf.unlock()
    party.publish("done", verdict=verdict)
    if lost:
        raise Failed("the lock this process was granted was lost while it held it",
                     CAUSE_LEASE, "check the server's lease renewal")
    if not verdict["ok"]:
        raise Failed(verdict["reason"], verdict["cause"], verdict.get("advice", ""))
    # give the first a moment to read the verdict before the record is removed
    end = clock() + min(2.0, 10 * PERIOD)
    while clock() < end:
        party.sleep(PERIOD)
