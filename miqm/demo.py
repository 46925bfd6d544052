"""``miqm demo``: a two-instance queue manager on this machine, an application running
through a failover, and the accounting after it.

Creates QMDEMO with its data and log in a shared directory, starts an active instance
("hosta") and a standby ("hostb"), and runs a producer and a consumer (threads of this
process, clients in bindings mode through the client library in :mod:`miqm.net.client`,
reconnecting by themselves). Each message is one unit of work: a persistent put and a
commit on the producer's side, a get and a commit on the consumer's. While they run, the
active instance is killed with SIGKILL; the standby takes over and the clients reconnect.

On a terminal the counts and rates are one live line; piped, one plain line a second.
At the end: the failover as the application saw it (the longest time each side went
without a successful commit), and the accounting: sent (commits the producer saw
succeed), received, lost (sent but never received: must be 0) and duplicates, each
explained. A duplicate can only come from a commit whose reply was lost in the failover
(MQRC 2549, MQRC_CALL_INTERRUPTED: it may or may not have happened): the producer then
sends the message again (it may arrive twice), and the consumer keeps the message it got
(it may be delivered again) - at-least-once, never lost.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from miqm.cli.common import STOP_SIGNALS, Stopped, unwind_on_stop_signals
from miqm.errors import MiqmError, UsageError
from miqm.localpair import CLIENT_ONLY_VARS, LocalPair

QUEUE = "DEMO.Q"
MQRC_NO_MSG_AVAILABLE = 2033
MQRC_BACKED_OUT = 2003
MQRC_CONNECTION_BROKEN = 2009
MQRC_CALL_INTERRUPTED = 2549


@dataclass
class Side:
    """What one application thread (producer or consumer) saw."""

    name: str
    done: int = 0                                    # units of work committed
    seqs: list[int] = field(default_factory=list)    # message numbers committed, in order
    in_doubt: set[int] = field(default_factory=set)  # commits answered 2549
    reasons: Counter[int] = field(default_factory=Counter)  # MQRC -> times seen
    last_ok: float = 0.0
    gap: float = 0.0           # longest time between two successful commits
    gap_end: float = 0.0       # when that longest gap ended
    host: str = ""             # the instance it last talked to
    error: str = ""            # why it stopped early, if it did
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ok(self, seq: int, now: float, host: str) -> None:
        with self.lock:
            if self.last_ok and now - self.last_ok > self.gap:
                self.gap, self.gap_end = now - self.last_ok, now
            self.last_ok = now
            self.done += 1
            self.seqs.append(seq)
            self.host = host


def _failed(side: Side, exc: BaseException) -> None:
    """Record why an application thread stopped: one line, never a traceback (a thread's
    uncaught exception would print one, e.g. when Ctrl-C ends the instances under it)."""
    side.error = (exc.user_line() if isinstance(exc, MiqmError)
                  else f"{type(exc).__name__}: {exc}")


def _producer(qmgr: str, side: Side, stop: threading.Event, rate: float,
              abort: threading.Event) -> None:
    try:
        _produce(qmgr, side, stop, rate, abort)
    except Exception as exc:  # the thread's end: reported by _drive as one line
        _failed(side, exc)


def _produce(qmgr: str, side: Side, stop: threading.Event, rate: float,
             abort: threading.Event) -> None:
    from miqm.errors import NetError
    from miqm.net.client import connect

    conn = connect(qmgr, reconnect=True, reconnect_timeout=60.0)
    seq, interval = 0, 1.0 / rate if rate > 0 else 0.0
    next_at = time.monotonic()
    with conn:
        while not stop.is_set() and not abort.is_set():
            if interval:
                next_at += interval
                pause = next_at - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                else:
                    next_at = time.monotonic()
            try:
                conn.call("put", queue=QUEUE, body=f"{seq:09d}".encode(),
                          persistent=True, syncpoint=True)
                conn.call("commit")
            except NetError as exc:
                if abort.is_set():
                    return
                side.reasons[exc.mqrc] += 1
                if exc.mqrc == MQRC_CALL_INTERRUPTED:
                    side.in_doubt.add(seq)  # it may be on the queue: sent again below
                else:
                    _backout(conn)  # 2009/2003: the unit of work was backed out
                    time.sleep(0.01)
                continue  # the same message again
            side.ok(seq, time.monotonic(), conn.server_host)
            seq += 1


def _consumer(qmgr: str, side: Side, stop: threading.Event,
              abort: threading.Event) -> None:
    try:
        _consume(qmgr, side, stop, abort)
    except Exception as exc:  # the thread's end: reported by _drive as one line
        _failed(side, exc)


def _consume(qmgr: str, side: Side, stop: threading.Event, abort: threading.Event) -> None:
    from miqm.errors import NetError
    from miqm.net.client import connect

    conn = connect(qmgr, reconnect=True, reconnect_timeout=60.0)
    with conn:
        while not abort.is_set():
            try:
                reply = conn.call("get", queue=QUEUE, wait=0.3, syncpoint=True)
            except NetError as exc:
                if abort.is_set():
                    return
                if exc.mqrc == MQRC_NO_MSG_AVAILABLE:
                    if stop.is_set():
                        return  # the producer has stopped and the queue is empty
                    continue
                side.reasons[exc.mqrc] += 1
                _backout(conn)
                time.sleep(0.01)
                continue
            seq = int((reply.get("body") or b"-1").decode())
            try:
                conn.call("commit")
            except NetError as exc:
                if abort.is_set():
                    return
                side.reasons[exc.mqrc] += 1
                if exc.mqrc != MQRC_CALL_INTERRUPTED:
                    _backout(conn)  # backed out: it will be delivered again
                    continue
                side.in_doubt.add(seq)  # may come again: keep it (never lose it)
            side.ok(seq, time.monotonic(), conn.server_host)


def _backout(conn: object) -> None:
    try:
        conn.call("backout")  # type: ignore[attr-defined]
    except MiqmError:
        pass


class Display:
    """Live counts: one line rewritten in place on a terminal, a plain line a second
    otherwise."""

    def __init__(self, echo: Callable[[str], None], live: bool, t0: float) -> None:
        self.echo, self.live, self.t0 = echo, live, t0
        self.last: tuple[float, int, int] | None = None
        self.printed = 0.0
        self.pending = False

    def line(self, prod: Side, cons: Side) -> str:
        now = time.monotonic()
        sent, got = prod.done, cons.done
        if self.last is None:
            rates = (0.0, 0.0)
        else:
            dt = max(now - self.last[0], 1e-6)
            rates = ((sent - self.last[1]) / dt, (got - self.last[2]) / dt)
        self.last = (now, sent, got)
        return (f"  +{now - self.t0:5.1f}s  sent {sent:6d} ({rates[0]:5.0f}/s)  received "
                f"{got:6d} ({rates[1]:5.0f}/s)  on {prod.host or '-'}")

    def tick(self, prod: Side, cons: Side) -> None:
        now = time.monotonic()
        if self.live:
            if now - self.printed >= 0.2:
                sys.stdout.write("\r" + self.line(prod, cons).ljust(78))
                sys.stdout.flush()
                self.printed, self.pending = now, True
        elif now - self.printed >= 1.0:
            self.echo(self.line(prod, cons))
            self.printed = now

    def say(self, text: str) -> None:
        if self.live and self.pending:
            sys.stdout.write("\n")
            self.pending = False
        self.echo(text)


def pace(rate: float) -> str:
    """The producer's pace in words (``--rate 0`` is no limit, not "up to 0/s")."""
    return f"up to {rate:g}/s" if rate > 0 else "as fast as it goes"


def check_options(seconds: float, rate: float, messages: int) -> None:
    """Refuse options the demo cannot run with (UsageError, exit 2): ``nan`` passes every
    comparison, so it is named here rather than slipping through as no load at all."""
    if not math.isfinite(seconds) or not 0 < seconds <= 600:
        raise UsageError(f"miqm demo: --seconds {seconds:g} is not a number of seconds "
                         "above 0 and at most 600 (try 'miqm demo -h')")
    if math.isnan(rate) or rate < 0:
        raise UsageError(f"miqm demo: --rate {rate:g} is not a rate of 0 or more units of "
                         "work a second (0: as fast as it goes; try 'miqm demo -h')")
    if messages < 0:
        raise UsageError(f"miqm demo: --messages {messages} is negative (0: stop after "
                         "--seconds; try 'miqm demo -h')")


@contextlib.contextmanager
def _without_client_settings() -> Iterator[None]:
    """The demo's own clients connect in bindings mode on this machine: a user's remote
    client settings (a credential or TLS files for a real queue manager, say) would only
    make them fail. They are set aside while the demo runs and put back after."""
    saved = {k: os.environ.pop(k) for k in CLIENT_ONLY_VARS if k in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


@contextlib.contextmanager
def _stop_signals() -> Iterator[None]:
    """While the demo runs, SIGTERM and SIGHUP raise :class:`Stopped` in it (their
    default action killed it at once, leaving both instances running and the temporary
    directory behind)."""
    old = unwind_on_stop_signals()
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP ignored while the demo cleans up after one (a second one
    would leave the instances running and the temporary directory behind)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, *STOP_SIGNALS)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def run_demo(messages: int = 0, keep: bool = False, echo: Callable[[str], None] = print,
             seconds: float = 3.0, rate: float = 200.0, live: bool | None = None) -> int:
    """Run the demo; 0 if no message was lost and every duplicate is explained, 128 + the
    signal's number when interrupted (Ctrl-C, SIGTERM, SIGHUP: the instances are ended and
    the directories removed first).

    ``seconds`` of load before the kill and again after the takeover; ``rate`` units of
    work a second at most from the producer (0: as fast as it goes); ``messages``, if
    given, stops the producer after that many messages once it has run through the
    failover. Bad values raise :class:`~miqm.errors.UsageError`."""
    check_options(seconds, rate, messages)
    live = sys.stdout.isatty() if live is None else live
    pair: LocalPair | None = None
    rc = 1
    try:
        with _stop_signals():
            pair = LocalPair(keep=keep)
            with _without_client_settings():
                rc = _run(pair, echo, live, seconds, rate, messages)
    except (KeyboardInterrupt, Stopped) as exc:
        signum = exc.signum if isinstance(exc, Stopped) else signal.SIGINT
        why = ("interrupted" if signum == signal.SIGINT
               else f"stopped by {signal.Signals(signum).name}")
        where = "" if pair is None else (f"; keeping {pair.base}" if keep
                                         else f" and removing {pair.base}")
        with _signals_held():
            try:
                if live:
                    sys.stdout.write("\n")
                echo(f"== {why}: ending the instances{where}")
            except OSError:
                pass  # the terminal is gone (SIGHUP): clean up all the same
        rc = 128 + signum
    finally:
        if pair is not None:
            with _signals_held():
                pair.close()
    if keep and pair is not None:
        echo(f"== Kept {pair.base}: the data roots hosta/ and hostb/ (MIQM_DATA_ROOT), the "
             f"shared data and log in shared/ (both instances ended); rm -rf it when done")
    return rc


def _run(pair: LocalPair, echo: Callable[[str], None], live: bool, seconds: float,
         rate: float, messages: int) -> int:
    """The demo on ``pair``, which the caller ends and removes."""
    from miqm.bench.clients import client_of

    echo(f"== Shared data and log under {pair.shared}")
    pair.create()
    echo(f"== Created {pair.qmgr} on hosta; registered on hostb with addmqinf")
    for host in (pair.a, pair.b):
        echo(f"$ strmqm -x {pair.qmgr}    # on {host.name}")
        echo(pair.start(host).rstrip())
    echo(f"$ dspmq -x -o standby -m {pair.qmgr}")
    echo(pair.run(pair.a, "dspmq", "-x", "-o", "standby", "-m", pair.qmgr).stdout.rstrip())
    pair.mqsc(pair.a, f"DEFINE QLOCAL({QUEUE}) MAXDEPTH(1000000)\n")

    prod, cons = Side("producer"), Side("consumer")
    stop_prod, stop_cons, abort = threading.Event(), threading.Event(), threading.Event()
    with client_of(pair.b.root, pair.b.name):
        threads = [threading.Thread(target=_producer, args=(pair.qmgr, prod, stop_prod,
                                                            rate, abort), daemon=True),
                   threading.Thread(target=_consumer, args=(pair.qmgr, cons, stop_cons,
                                                            abort), daemon=True)]
        echo(f"== A producer (persistent put + commit, {pace(rate)}) and a consumer "
             f"(get + commit) on {QUEUE}, clients that reconnect by themselves")
        t0 = time.monotonic()
        show = Display(echo, live, t0)
        for t in threads:
            t.start()
        try:
            verdict = _drive(pair, prod, cons, stop_prod, stop_cons, threads, show, seconds,
                             messages)
        finally:
            # interrupted or given up: the threads stop at their next call, before the
            # instances under them are ended
            if not (stop_prod.is_set() and stop_cons.is_set()):
                abort.set()
            for t in threads:
                t.join(5)
    if verdict is None:
        return 1
    victim = verdict[1]
    own = _takeover_record(pair)
    if own:
        echo(f"== The new active's own record: master lock granted to serving in "
             f"{own['duration_s']:.2f}s (restart recovery {own['recovery_s']:.2f}s)")
    echo(f"$ strmqm -x {pair.qmgr}    # restart hosta: it becomes the standby")
    echo(pair.start(pair.a).rstrip())
    echo(pair.run(pair.a, "dspmq", "-x", "-m", pair.qmgr).stdout.rstrip())
    return _account(echo, prod, cons, victim)


def _drive(pair: LocalPair, prod: Side, cons: Side, stop_prod: threading.Event,
           stop_cons: threading.Event, threads: list[threading.Thread], show: Display,
           seconds: float, messages: int) -> tuple[float, str] | None:
    """Load, kill -9 the active, wait for the application to run again, load, drain."""

    def run_for(duration: float, until: Callable[[], bool] = lambda: False) -> bool:
        end = time.monotonic() + duration
        while time.monotonic() < end:
            show.tick(prod, cons)
            if until():
                return True
            if prod.error or cons.error:
                return False
            time.sleep(0.05)
        return False

    if not run_for(30.0, lambda: prod.done > 0 and cons.done > 0):
        show.say("!! the application did not start: "
                 f"{prod.error or cons.error or 'no commit within 30 s'}")
        return None  # the caller stops the threads
    run_for(seconds)
    victim = pair.kill_active()
    killed_at = time.monotonic()
    sent_at_kill = prod.done
    show.say(f"== kill -9 {victim['pid']}  (the active instance, on {victim['host']}) "
             f"after {sent_at_kill} messages")
    back = run_for(60.0, lambda: prod.last_ok > killed_at and cons.last_ok > killed_at)
    if not back:
        show.say("!! the application did not get going again after the kill: "
                 f"{prod.error or cons.error or 'no commit within 60 s'}")
        return None  # the caller stops the threads
    show.say(f"== the application runs again on {prod.host}: producer "
             f"{prod.last_ok - killed_at:.2f}s, consumer {cons.last_ok - killed_at:.2f}s "
             "after the kill")
    if messages > 0:
        run_for(60.0, lambda: prod.done >= messages)
    else:
        run_for(seconds)
    stop_prod.set()
    threads[0].join(10)
    show.say(f"== producer stopped after {prod.done} messages; draining {QUEUE}")
    stop_cons.set()
    deadline = time.monotonic() + 30
    while threads[1].is_alive() and time.monotonic() < deadline:
        show.tick(prod, cons)
        threads[1].join(0.05)
    show.tick(prod, cons)
    show.say(show.line(prod, cons))
    return killed_at, str(victim["host"])


def _takeover_record(pair: LocalPair) -> dict | None:
    """The ``failover_end`` event the standby wrote when it took over (docs/events.md)."""
    import json
    import os

    path = os.path.join(pair.data_dir(), "events", f"{pair.b.name}.jsonl")
    try:
        with open(path, encoding="utf-8") as f:
            ends = [e for e in map(json.loads, filter(str.strip, f))
                    if e.get("event") == "failover_end"]
    except (OSError, ValueError):
        return None
    last = ends[-1] if ends else None
    if last is None or not {"duration_s", "recovery_s"} <= last.keys():
        return None
    return last


def _account(echo: Callable[[str], None], prod: Side, cons: Side, victim: str) -> int:
    """The final accounting; 0 if nothing was lost and every duplicate is explained."""
    sent = set(prod.seqs)
    got = Counter(cons.seqs)
    lost = sorted(sent - set(got))
    dupes = {s: n - 1 for s, n in got.items() if n > 1}
    strays = sorted(set(got) - sent - prod.in_doubt)
    explained = {s for s in dupes if s in prod.in_doubt or s in cons.in_doubt}
    echo(f"== Failover as the application saw it (kill -9 of {victim} to its next commit): "
         f"producer {prod.gap:.2f}s, consumer {cons.gap:.2f}s without a commit")
    for side in (prod, cons):
        if side.reasons:
            seen = ", ".join(f"{rc} x{n}" for rc, n in sorted(side.reasons.items()))
            echo(f"   {side.name} saw MQRC {seen} around the failover")
    echo(f"== Sent {len(sent)} (committed), received {sum(got.values())} "
         f"({len(got)} distinct), lost {len(lost)}, duplicates {sum(dupes.values())}")
    if prod.in_doubt:
        echo(f"   {len(prod.in_doubt)} producer commit(s) answered 2549 (in doubt): sent "
             "again, so they may arrive twice")
    if cons.in_doubt:
        echo(f"   {len(cons.in_doubt)} consumer commit(s) answered 2549 (in doubt): kept, "
             "so they may be delivered again")
    for s in sorted(dupes):
        why = ("its put was committed, then sent again after an in-doubt commit"
               if s in prod.in_doubt else "its get's commit was in doubt; delivered again"
               if s in cons.in_doubt else "UNEXPLAINED")
        echo(f"   duplicate: message {s} x{dupes[s] + 1}: {why}")
    if lost:
        echo(f"!! lost: {lost[:20]}{' ...' if len(lost) > 20 else ''}")
    if strays:
        echo(f"!! received messages never sent: {strays[:20]}")
    ok = not lost and not strays and explained == set(dupes) and len(sent) > 0
    echo("== PASS: nothing lost" + (", every duplicate explained" if dupes else
                                      ", no duplicates") if ok else "== FAIL")
    return 0 if ok else 1
