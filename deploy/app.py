"""The compose's ``app`` service: one producer and one consumer through ``miqm.client``.

Puts numbered persistent messages to APP.Q (one per unit of work) and gets them back,
connected to both hosts (``MIQM_CONNECTION``, e.g. ``qm-a(1414),qm-b(1414)``) with
reconnect, and prints a line every few seconds::

    app: sent=1200 received=1198 lost=0 duplicates=0 uncertain=0 errors=3

``sent`` counts committed puts, ``received`` committed gets; ``lost`` counts committed
messages that were skipped (a later one arrived first: the queue is FIFO and there is one
producer); ``uncertain`` counts puts and gets whose commit outcome a failover hid (such a
message may or may not arrive, or may have been consumed). A unit of work a failover broke
is backed out, as MQ applications do. After a failover under load ``lost`` must stay 0.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from typing import Any


def _credential() -> str | None:
    """MIQM_CREDENTIAL, else the admin secret read from the shared data directory."""
    if os.environ.get("MIQM_CREDENTIAL"):
        return None  # the client library reads it itself
    where = os.environ.get("MIQM_CREDENTIAL_FROM")
    if not where:
        return None
    from lockfs.volume import open_volume

    vol = open_volume(where)
    try:
        data = json.loads(vol.read_bytes("credentials"))
        return str(data["principals"]["admin"]["secret"])
    except Exception:  # no credentials file: the listener accepts every client
        return None
    finally:
        vol.close()


class Counts:
    """What the producer and consumer did, under one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sent: set[int] = set()
        self.uncertain: set[int] = set()
        self.received: set[int] = set()
        self.maybe_received: set[int] = set()  # gets whose commit outcome a failover hid
        self.highest = -1
        self.duplicates = 0
        self.errors = 0

    def line(self) -> str:
        with self.lock:
            lost = sum(1 for n in self.sent if n < self.highest and n not in self.received
                       and n not in self.maybe_received)
            uncertain = len(self.uncertain) + len(self.maybe_received - self.received)
            return (f"app: sent={len(self.sent)} received={len(self.received)} lost={lost} "
                    f"duplicates={self.duplicates} uncertain={uncertain} "
                    f"errors={self.errors}")


#: seconds a call waits for its reply beyond its own wait (``connect(call_timeout=)``).
#: The library's default, 60 s, kept the app waiting that long on an active instance that
#: hung (``podman pause``: its host's kernel still holds the TCP connection open) while
#: the standby had taken over after the lease; 10 s, about the compose's lease, lets it
#: give up on the hung one and reconnect to the new active.
CALL_TIMEOUT = 10.0


def _session(qmgr: str, conname: str | None, call_timeout: float = CALL_TIMEOUT) -> Any:
    from miqm.client import connect

    while True:
        try:
            # read at every attempt: on a first start the app may come up before crtmqm
            # has written the credentials file
            return connect(qmgr, conname=conname, credential=_credential(), reconnect=True,
                           call_timeout=call_timeout)
        except Exception as exc:  # not up yet: the queue manager is starting
            print(f"app: waiting for {qmgr}: {exc}", flush=True)
            time.sleep(2)


# 2003 MQRC_BACKED_OUT, 2009 MQRC_CONNECTION_BROKEN in a unit of work: nothing committed
_BACKED_OUT = (2003, 2009)


def _backout(qm: Any) -> None:
    """End a unit of work a failover broke (MQ: the application backs it out; until then
    syncpoint calls on the connection fail with 2003)."""
    try:
        qm.backout()
    except Exception:
        pass  # the connection is still reconnecting: the next call tries again


def produce(counts: Counts, qmgr: str, queue: str, conname: str | None,
            rate: float, call_timeout: float = CALL_TIMEOUT) -> None:
    """Put numbered persistent messages, one per unit of work, ``rate`` a second."""
    qm = _session(qmgr, conname, call_timeout)
    n = 0
    while True:
        body = str(n).encode()
        try:
            qm.put(queue, body, persistent=True, syncpoint=True)
            qm.commit()
        except Exception as exc:
            backed_out = getattr(exc, "reason", None) in _BACKED_OUT
            with counts.lock:
                counts.errors += 1
                if not backed_out:
                    counts.uncertain.add(n)  # the commit may or may not have happened
            _backout(qm)
            time.sleep(0.2)
            if backed_out:
                continue  # nothing committed: the same number again
        else:
            with counts.lock:
                counts.sent.add(n)
        n += 1
        time.sleep(1.0 / rate)


def consume(counts: Counts, qmgr: str, queue: str, conname: str | None,
            call_timeout: float = CALL_TIMEOUT) -> None:
    """Get the messages back, one per unit of work, and count them."""
    qm = _session(qmgr, conname, call_timeout)
    while True:
        try:
            msg = qm.get(queue, wait=1.0, syncpoint=True)
        except Exception as exc:
            if getattr(exc, "reason", None) != 2033:  # 2033: no message yet
                with counts.lock:
                    counts.errors += 1
                _backout(qm)
                time.sleep(0.2)
            continue
        n = int(msg.body)
        try:
            qm.commit()
        except Exception as exc:
            with counts.lock:
                counts.errors += 1
                if getattr(exc, "reason", None) not in _BACKED_OUT:
                    counts.maybe_received.add(n)  # the get's commit may have happened
            _backout(qm)
            continue  # backed out (or its outcome unknown): the message may come again
        with counts.lock:
            if n in counts.received:
                counts.duplicates += 1
            counts.received.add(n)
            counts.highest = max(counts.highest, n)


def main() -> int:
    """Run the producer and the consumer; print the counts every few seconds."""
    qmgr = os.environ.get("MIQM_QMGR", "QM1")
    queue = os.environ.get("MIQM_APP_QUEUE", "APP.Q")
    conname = os.environ.get("MIQM_CONNECTION") or None
    from miqm.cli.common import env_positive
    from miqm.errors import UsageError

    # 0 divided the producer's pause, 'abc' was a traceback, and 'restart: on-failure'
    # showed either over and over
    fix = "Correct it in the compose's environment."
    try:
        rate = env_positive("MIQM_APP_RATE", 20.0, "puts a second", fix)
        every = env_positive("MIQM_APP_REPORT", 2.0, "seconds between two count lines", fix)
        call_timeout = env_positive("MIQM_APP_CALL_TIMEOUT", CALL_TIMEOUT,
                                    "seconds a call waits for its reply", fix)
    except UsageError as exc:
        print(f"app: {exc}", file=sys.stderr, flush=True)
        return 2
    counts = Counts()
    for target, args in ((produce, (counts, qmgr, queue, conname, rate, call_timeout)),
                         (consume, (counts, qmgr, queue, conname, call_timeout))):
        threading.Thread(target=target, args=args, daemon=True).start()

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(0)
    signal.signal(signal.SIGTERM, stop)  # `compose stop app`: the final counts, at once
    try:
        while True:
            time.sleep(every)
            print(counts.line(), flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        print(counts.line(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
