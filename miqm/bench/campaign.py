"""``miqm bench campaign``: faults at random under load, then an audit of every message.

Two local instances (as ``miqm bench failover``) serve producer threads that put units of
persistent messages under syncpoint and commit them, each through a reconnecting client
in bindings mode. Meanwhile the active instance is hit, again and again, by a fault
drawn at random (``kill``: kill -9 of the active; ``switchover``: ``endmqm -s``; the old
instance then comes back as the standby). Every outcome a producer was told is written
down: committed, backed out, or unknown (a commit cut off in flight, MQRC 2549).

At the end the queue is drained and audited:

* every committed message is there exactly once (``lost``, ``duplicated``);
* no message of a backed-out unit is there (``resurrected``);
* each unit whose outcome was unknown is there whole or not at all (``torn_units``);
* nothing else is there (``phantoms``);
* the recovery log, read from the shared directory, holds the activations' records in
  generation order: no record of an older activation after a newer one began
  (``stale_writes``: the reader refuses such a log).

A short campaign runs in the tests; long ones are benchmarks.
"""

from __future__ import annotations

import os
import random
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from miqm.errors import MiqmError
from miqm.localpair import LocalPair

QUEUE = "CAMPAIGN.Q"
FAULTS = ("kill", "switchover")
MQRC_CALL_INTERRUPTED = 2549
MQRC_NO_MSG_AVAILABLE = 2033


@dataclass
class _Ledger:
    """What the producers were told, unit by unit."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    committed: list[list[str]] = field(default_factory=list)
    backed_out: list[list[str]] = field(default_factory=list)
    unknown: list[list[str]] = field(default_factory=list)
    errors: dict[int, int] = field(default_factory=dict)

    def note(self, outcome: str, unit: list[str], mqrc: int | None = None) -> None:
        with self.lock:
            getattr(self, outcome).append(unit)
            if mqrc is not None:
                self.errors[mqrc] = self.errors.get(mqrc, 0) + 1


def _producer(qmgr: str, index: int, unit_size: int, stop: threading.Event,
              ledger: _Ledger) -> None:
    from miqm.net.client import connect
    from miqm.net.protocol import b64

    conn = None
    n = 0
    while not stop.is_set():
        unit = [f"p{index}-u{n}-m{k}" for k in range(unit_size)]
        n += 1
        stage = "connect"
        try:
            if conn is None:
                conn = connect(qmgr, timeout=1.0, reconnect=True, reconnect_timeout=60)
            stage = "put"
            for body in unit:
                conn.call("put", queue=QUEUE, body=b64(body.encode()), persistent=True,
                          syncpoint=True)
            stage = "commit"
            conn.call("commit")
            ledger.note("committed", unit)
        except MiqmError as exc:
            mqrc = getattr(exc, "mqrc", None)
            if stage == "commit" and mqrc != 2003:
                # cut off in flight (2549) or no answer at all: nobody can know
                ledger.note("unknown", unit, mqrc)
            else:
                ledger.note("backed_out", unit, mqrc)
            if conn is not None:
                try:
                    conn.call("backout")  # clears a lost unit of work's state
                except MiqmError:
                    conn.close()
                    conn = None
            time.sleep(0.01)
    if conn is not None:
        conn.close()


def _drain(qmgr: str) -> list[str]:
    from miqm.net.client import connect
    from miqm.net.protocol import unb64

    got: list[str] = []
    with connect(qmgr, timeout=5.0, reconnect=True, reconnect_timeout=60) as conn:
        while True:
            batch: list[str] = []
            try:
                # under syncpoint, committed every few hundred: one force per batch
                while len(batch) < 500:
                    reply = conn.call("get", queue=QUEUE, wait=0.5, syncpoint=True)
                    batch.append((unb64(reply.get("body")) or b"").decode())
            except MiqmError as exc:
                if getattr(exc, "mqrc", None) != MQRC_NO_MSG_AVAILABLE:
                    raise
            conn.call("commit")
            got += batch
            if len(batch) < 500:
                return got


def _audit(ledger: _Ledger, got: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for body in got:
        counts[body] = counts.get(body, 0) + 1
    committed = {m for u in ledger.committed for m in u}
    backed = {m for u in ledger.backed_out for m in u}
    unknown = {m for u in ledger.unknown for m in u}
    known = committed | backed | unknown
    torn = sum(1 for u in ledger.unknown if len({counts.get(m, 0) > 0 for m in u}) > 1)
    return {
        "lost": sum(1 for m in committed if counts.get(m, 0) == 0),
        "duplicated": sum(1 for c in counts.values() if c > 1),
        "resurrected": sum(1 for m in backed if counts.get(m, 0) > 0),
        "torn_units": torn,
        "phantoms": sum(1 for m in counts if m not in known),
    }


def _log_generations(pair: LocalPair) -> tuple[list[int], str]:
    """Activation generations of the log's records in LSN order, read from the shared
    log directory ('' or the reader's refusal)."""
    from lockfs.posix import PosixVolume
    from miqm.store.log import RecoveryLog
    from miqm.store.settings import LogSettings

    vol = PosixVolume(os.path.join(pair.shared, "log", pair.qmgr))
    gens: list[int] = []
    try:
        gen = RecoveryLog.recorded_generation(vol)
        reader = RecoveryLog.open(vol, LogSettings(file_pages=1024), generation=gen)
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


def bench_campaign(cycles: int, faults: tuple[str, ...] = FAULTS, producers: int = 4,
                   unit_size: int = 3, seed: int | None = None, settle: float = 0.5,
                   echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the campaign; returns the audit and the failover figures."""
    rng = random.Random(seed)
    ledger = _Ledger()
    stop = threading.Event()
    durations: list[float] = []
    drawn: dict[str, int] = {}
    saved = {k: os.environ.get(k) for k in ("MIQM_DATA_ROOT", "MIQM_HOSTNAME",
                                            "MIQM_CONNECTION")}
    with LocalPair(qmgr="QMCAMP") as pair:
        pair.create()
        pair.start(pair.a)
        pair.start(pair.b)
        pair.mqsc(pair.a, f"DEFINE QLOCAL({QUEUE}) MAXDEPTH(10000000)\n")
        # the producers are clients of host B's installation (bindings mode follows the
        # active instance through the shared data directory)
        os.environ.update({"MIQM_DATA_ROOT": pair.b.root, "MIQM_HOSTNAME": "campaign"})
        os.environ.pop("MIQM_CONNECTION", None)
        threads = [threading.Thread(target=_producer, args=(pair.qmgr, i, unit_size, stop,
                                                            ledger), daemon=True)
                   for i in range(producers)]
        try:
            for t in threads:
                t.start()
            for i in range(cycles):
                time.sleep(settle * (0.5 + rng.random()))  # load runs between faults
                fault = rng.choice(faults)
                drawn[fault] = drawn.get(fault, 0) + 1
                before = pair.active() or pair.wait_active()
                old = pair.host(before["host"])
                t0 = time.monotonic()
                if fault == "kill":
                    os.kill(int(before["pid"]), 9)
                else:
                    pair.run(old, "endmqm", "-s", pair.qmgr, timeout=120)
                new = pair.wait_active(not_host=before["host"], timeout=120, poll=0.01)
                durations.append(time.monotonic() - t0)
                echo(f"cycle {i + 1}/{cycles}: {fault} of {before['host']} -> {new['host']} "
                     f"serving after {durations[-1]:.2f}s ({len(ledger.committed)} units "
                     "committed so far)")
                pair.start(old)  # back as the standby
            time.sleep(settle)
        finally:
            stop.set()
            for t in threads:
                t.join(90)
        got = _drain(pair.qmgr)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        pair.run(pair.a, "endmqm", "-i", "-x", pair.qmgr, check=False, timeout=30)
        pair.run(pair.b, "endmqm", "-i", "-x", pair.qmgr, check=False, timeout=30)
        active = pair.active()
        if active:
            pair.run(pair.host(active["host"]), "endmqm", "-i", pair.qmgr, check=False,
                     timeout=30)
        gens, refusal = _log_generations(pair)
    audit = _audit(ledger, got)
    ds = sorted(durations)
    result: dict[str, Any] = {
        "cycles": cycles,
        "faults": drawn,
        "producers": producers,
        "units": {"committed": len(ledger.committed), "backed_out": len(ledger.backed_out),
                  "unknown": len(ledger.unknown)},
        "messages_found": len(got),
        **audit,
        "log_generations": gens,
        "stale_writes": 1 if refusal else 0,
        "failover_seconds": {"p50": round(statistics.median(ds), 3) if ds else None,
                             "max": round(ds[-1], 3) if ds else None},
        "client_errors": {str(k): v for k, v in sorted(ledger.errors.items())},
    }
    if refusal:
        result["log_refusal"] = refusal
    bad = sum(audit.values()) + result["stale_writes"]
    echo(f"campaign: {cycles} faults {drawn}, {len(ledger.committed)} units committed, "
         f"{len(ledger.unknown)} unknown, {len(ledger.backed_out)} backed out; "
         + ("audit clean" if not bad else f"AUDIT FAILED: {audit}"))
    return result
