"""Server side of a streaming consumer: the active instance pushes messages ahead.

A ``consume`` request starts a :class:`Subscription` on the session. Its thread takes up
to ``prefetch`` messages ahead of the application, in batches, each batch under its own
unit of work, and pushes each batch as one frame (a header listing the messages, then
their bodies back to back). The client acknowledges a batch once the application has
been handed its last message; the acknowledgement commits the batch's unit of work (one
log force per batch at most, not per message; commits run beside the session thread and
share forces), and a ``committed`` push tells the client once it is durable.

So a message pushed but not yet handed to the application is still on the queue, locked
by an uncommitted unit of work: if the connection ends, fails or the consumer is
cancelled, the unit is backed out and the message is available again. Messages the
application already had from a batch that is backed out are counted as backed out
(``backout_count``, MQ's BackoutCount), so a redelivery is never silent: a connection
that breaks counts every message of its unacknowledged batches. A cancel says how many
of the current batch the client handed out; those are got again at once (by message id)
so that they are not delivered a second time.
"""

from __future__ import annotations

import datetime as _dt
import threading
from collections import OrderedDict
from collections.abc import Callable
from queue import SimpleQueue
from typing import Any

from miqm.errors import MiqmError
from miqm.net.protocol import MQRC_UNEXPECTED_ERROR, PACKED_ENTRY, b64
from miqm.store.qmstore import put_micros

#: Messages per pushed batch at most (one frame, one unit of work, one log force).
BATCH_MAX = 64
#: How long one wait for a message lasts before the thread checks for a stop.
WAIT_SLICE = 0.5
#: Threads per stream that commit its acknowledged batches (each commit waits for a log
#: force, which the commits of other batches and streams share).
COMMITTERS = 2
#: Acknowledged batches waiting for their commit at most; past that the pusher takes no
#: more until one is committed (one being committed by each committer, one ready for
#: each). Unbounded, the pusher ran ahead of the commits: thousands of messages stayed
#: locked under acknowledged units, and each batch's pass over the queue's index stepped
#: over all of them (1 ms a batch, 35 µs of the server's CPU per message; docs/benchmarks.md).
COMMIT_BACKLOG = 2 * COMMITTERS
#: how long a stop waits for the commits of batches acknowledged before it (seconds): a
#: log force each, normally milliseconds; bounded so a stuck store cannot hold a cancel
COMMIT_WAIT = 30.0


class BackoutCounts:
    """MQ's BackoutCount per message id, kept by the active instance in memory (bounded:
    the oldest entries are dropped past ``limit``)."""

    def __init__(self, limit: int = 100_000) -> None:
        self._counts: OrderedDict[bytes, int] = OrderedDict()
        self._limit = limit
        self._lock = threading.Lock()

    def get(self, msgid: bytes) -> int:
        """The count for ``msgid`` (0 if never backed out)."""
        return self._counts.get(msgid, 0)

    def __len__(self) -> int:
        """How many messages have a count (so an empty table is false)."""
        return len(self._counts)

    def bump(self, msgids: list[bytes]) -> None:
        """Count one more backout for each of ``msgids``."""
        with self._lock:
            for m in msgids:
                self._counts[m] = self._counts.pop(m, 0) + 1
            while len(self._counts) > self._limit:
                self._counts.popitem(last=False)

    def forget(self, msgids: list[bytes]) -> None:
        """Drop the counts of messages that are gone (committed gets)."""
        if not self._counts:
            return
        with self._lock:
            for m in msgids:
                self._counts.pop(m, None)


def message_fields(msg: Any, counts: BackoutCounts) -> dict[str, Any]:
    """A message's header fields (everything but the body) for a reply or a push."""
    put_time = getattr(msg, "put_time", None)
    if isinstance(put_time, _dt.datetime):
        put_time = put_time.isoformat()
    return {"msgid": b64(msg.msgid), "correlid": b64(msg.correlid),
            "priority": msg.priority, "persistent": bool(msg.persistent),
            "put_time": put_time, "bc": counts.get(msg.msgid)}


_ID_LEN = 24
_NO_ID = bytes(_ID_LEN)


def _id24(value: bytes | None) -> bytes:
    if type(value) is bytes and len(value) == _ID_LEN:
        return value  # the store's ids, as they are
    return _NO_ID if not value else bytes(value).ljust(_ID_LEN, b"\0")[:_ID_LEN]


def _epoch(put_time: Any) -> float:
    if isinstance(put_time, _dt.datetime):
        return put_time.timestamp()
    if isinstance(put_time, (int, float)):
        return float(put_time)
    if isinstance(put_time, str):
        try:
            return _dt.datetime.fromisoformat(put_time).timestamp()
        except ValueError:
            return 0.0
    return 0.0


def encode_batch(sub: int, batch: int, msgs: list[Any], counts: BackoutCounts,
                 packed: bool = False) -> tuple[dict[str, Any], bytes]:
    """A push frame for ``msgs``. The binary part holds, per message, its 24-byte msgid,
    24-byte correlid and body, back to back; non-zero backout counts go in the header by
    position (``bc``).

    The other fields: ``packed`` (a client that asked for it) puts them in a table of
    :data:`PACKED_ENTRY` at the start of the binary part, one entry per message, and the
    header says how many (``n``); otherwise they are per-message lists in the header
    (``len``, ``prio``, ``pers``, ``ts`` as epoch seconds), which an older client reads.
    A JSON list of floats costs more to write and to read than the whole table."""
    parts: list[bytes] = []
    table: list[bytes] = []
    lens: list[int] = []
    prios: list[int] = []
    pers: list[int] = []
    ts: list[float] = []
    bc: dict[str, int] = {}
    counted = counts.get if counts else None  # no backout counted: no lookups
    entry = PACKED_ENTRY.pack
    for i, m in enumerate(msgs):
        mid, cid, body = m.msgid, m.correlid, m.body
        parts.append(_id24(mid))
        parts.append(_id24(cid))
        parts.append(body if type(body) is bytes else bytes(body))
        if counted is not None:
            n = counted(m.msgid)
            if n:
                bc[str(i)] = n
        put_epoch = getattr(m, "put_epoch", None)  # the store's; else what the store gave
        if put_epoch is None:
            put_epoch = _epoch(getattr(m, "put_time", None))
        # the microsecond Message.put_time has, so a get and a batch report the same
        micros = put_micros(put_epoch)
        if packed:
            table.append(entry(len(body), m.priority, 1 if m.persistent else 0, micros))
        else:
            lens.append(len(body))
            prios.append(m.priority)
            pers.append(1 if m.persistent else 0)
            ts.append(micros / 1_000_000)
    header: dict[str, Any] = {"push": sub, "batch": batch}
    if packed:
        header["n"] = len(msgs)
        parts[:0] = table
    else:
        header.update({"len": lens, "prio": prios, "pers": pers, "ts": ts})
    if bc:
        header["bc"] = bc
    return header, b"".join(parts)


class Subscription:
    """One streaming consumer on one session (see the module docstring)."""

    def __init__(self, store: Any, session: Any, sub_id: int, queue: str, prefetch: int,
                 counts: BackoutCounts, on_got: Callable[[int], None] | None = None,
                 packed: bool = False) -> None:
        self.store = store
        #: the client reads packed batches (encode_batch)
        self.packed = packed
        #: told how many messages each committed batch took off the queue (the metrics)
        self._on_got = on_got
        self.session = session
        self.id = sub_id
        self.queue = queue
        self.prefetch = max(1, prefetch)
        self.counts = counts
        self._cond = threading.Condition()
        self._outstanding = 0
        self._batches: dict[int, tuple[Any, list[bytes]]] = {}
        self._next_batch = 1
        self._stopped = False
        self._paused = False  # pause(): no more batches, those pushed stay
        # acknowledged batches waiting to be committed, and the threads committing them
        self._to_commit: SimpleQueue[tuple[int, Any, list[bytes]] | None] = (
            SimpleQueue())
        self._committers: list[threading.Thread] = []
        #: acknowledged batches not yet committed and confirmed: queued or being
        #: committed (a controlled end waits for these, unsettled())
        self._committing = 0
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"miqm-consume-{session.id}-{sub_id}")

    def start(self) -> None:
        """Start pushing."""
        self.session.streams += 1
        self._thread.start()

    def _run(self) -> None:
        said_empty = False
        # the pusher hands the interpreter lock to and from the threads committing its
        # batches: on their CPU (GroupCommitCPU), once the store has chosen it, those
        # hand-overs do not cross CPUs (docs/benchmarks.md)
        gather = getattr(self.store, "gather_here", None)
        try:
            while True:
                if gather is not None and gather():
                    gather = None
                with self._cond:
                    while (not self._stopped and not self._paused
                           and (self._outstanding >= self.prefetch
                                or self._committing >= COMMIT_BACKLOG)):
                        self._cond.wait(WAIT_SLICE)
                    if self._stopped or self._paused:
                        return
                    room = min(self.prefetch - self._outstanding, BATCH_MAX)
                uow = self.store.begin()
                try:
                    msgs = self._take(uow, room)
                    if not msgs and not said_empty:
                        # tell the client the queue is empty now (a consumer with a
                        # short wait ends on it), then wait for a message
                        self.session.push({"push": self.id, "empty": 1})
                        said_empty = True
                    if not msgs:
                        msg = self.store.get(self.queue, uow=uow, wait=WAIT_SLICE)
                        if msg is not None:
                            msgs = [msg, *self._take(uow, room - 1)]
                except Exception:
                    self.store.backout(uow)
                    raise
                if not msgs:
                    self.store.backout(uow)
                    continue
                with self._cond:
                    if self._stopped or self._paused:
                        self.store.backout(uow)
                        return
                    bid = self._next_batch
                    self._next_batch += 1
                    self._batches[bid] = (uow, [m.msgid for m in msgs])
                    self._outstanding += len(msgs)
                said_empty = False
                header, body = encode_batch(self.id, bid, msgs, self.counts, self.packed)
                self.session.push(header, body)
        except OSError:
            return  # the connection is gone; the close hook backs the batches out
        except MiqmError as exc:
            self._fail(getattr(exc, "mqrc", None) or 2102, str(exc))
        except Exception as exc:
            self._fail(MQRC_UNEXPECTED_ERROR, f"{type(exc).__name__}: {exc}")
        finally:
            self.session.streams -= 1

    def _take(self, uow: Any, n: int) -> list[Any]:
        """Up to ``n`` messages available now, under ``uow`` (one pass over the queue
        where the store offers ``get_many``)."""
        if n <= 0:
            return []
        many = getattr(self.store, "get_many", None)
        if many is not None:
            return list(many(self.queue, n, uow))
        msgs = []
        while len(msgs) < n:
            msg = self.store.get(self.queue, uow=uow, wait=0.0)
            if msg is None:
                break
            msgs.append(msg)
        return msgs

    def _fail(self, mqrc: int, text: str) -> None:
        with self._cond:
            self._stopped = True
        try:
            self.session.push({"push": self.id, "ok": False, "mqrc": mqrc, "error": text})
        except OSError:
            pass

    def ack(self, batch: int) -> None:
        """The application has had every message of ``batch``: commit its unit of work."""
        with self._cond:
            entry = self._batches.pop(batch, None)
        if entry is None:
            return
        uow, msgids = entry
        with self._cond:  # the pusher may go on while the commit is forced (up to a point)
            self._outstanding -= len(msgids)
            self._committing += 1
            self._cond.notify_all()
        # the commit waits for a log force: off the session thread, so the next ack is
        # read at once and commits of several batches share forces. A few threads kept
        # for the stream take them in turn (starting a thread per batch cost the server
        # about 1.5 µs of CPU per message)
        self._to_commit.put((batch, uow, msgids))
        with self._cond:
            if len(self._committers) < COMMITTERS and not self._stopped:
                t = threading.Thread(target=self._commit_loop, daemon=True,
                                     name=f"miqm-commit-{self.session.id}-{self.id}")
                self._committers.append(t)
                t.start()

    def _commit_loop(self) -> None:
        """A committer: commit acknowledged batches until stop() says there are no more
        (its None comes after every batch acknowledged before it)."""
        while (item := self._to_commit.get()) is not None:
            try:
                self._commit(*item)
            finally:
                with self._cond:
                    self._committing -= 1
                    self._cond.notify_all()  # a pusher held by COMMIT_BACKLOG

    def _commit(self, batch: int, uow: Any, msgids: list[bytes]) -> None:
        """Commit an acknowledged batch, then tell the client it is durable (until then
        the client treats its messages as possibly redelivered after a failover)."""
        try:
            self.store.commit(uow)
        except MiqmError as exc:
            self._fail(getattr(exc, "mqrc", None) or 2102, str(exc))
            return
        except Exception as exc:
            self._fail(MQRC_UNEXPECTED_ERROR, f"{type(exc).__name__}: {exc}")
            return
        self.counts.forget(msgids)
        if self._on_got is not None:
            self._on_got(len(msgids))
        try:
            self.session.push({"push": self.id, "committed": batch})
        except OSError:
            pass

    def pause(self) -> None:
        """Push no more batches (the queue manager quiesces): the batches pushed stay
        for the client to acknowledge, or to cancel naming what it handed out, as a
        consumer told 2161 does; whatever is left when the session ends is backed out
        (:meth:`stop`)."""
        with self._cond:
            self._paused = True
            self._cond.notify_all()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(WAIT_SLICE * 4)

    def awaiting_client(self) -> bool:
        """Whether batches were pushed that the client has not acknowledged."""
        with self._cond:
            return bool(self._batches)

    def unsettled(self) -> int:
        """Batches pushed and not yet acknowledged or committed."""
        with self._cond:
            # a batch being committed counts until its confirmation is sent: taken off
            # the queue, it no longer showed, and a controlled end could stop the
            # listener before the client was told
            return len(self._batches) + max(0, self._committing)

    def stop(self, handed: dict[int, int] | None = None, broken: bool = False) -> None:
        """End the stream: back out every unacknowledged batch (its messages return to
        the queue). ``handed`` maps batch -> messages the client handed out from it (a
        cancel); a broken connection counts every message of those batches."""
        with self._cond:
            self._stopped = True
            batches, self._batches = self._batches, {}
            self._cond.notify_all()
            committers, self._committers = self._committers, []
            for _ in committers:  # after the batches already acknowledged
                self._to_commit.put(None)
        # every batch acknowledged before the stop is committed before it returns: a
        # cancel's reply says so, and the client closes the socket on it (a crash just
        # after must not bring back messages the application has had, unmarked)
        for t in committers:
            if t is not threading.current_thread():
                t.join(COMMIT_WAIT)
        with self._cond:  # none is left to commit what is still queued
            self._committing = 0
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(WAIT_SLICE * 4)
        with self._cond:  # a batch the thread added while stopping
            batches.update(self._batches)
            self._batches = {}
        for bid, (uow, msgids) in sorted(batches.items()):
            taken = msgids if broken else msgids[:(handed or {}).get(bid, 0)]
            self.counts.bump(taken)  # before they are visible again
            try:
                self.store.backout(uow)
            except Exception:
                continue
            if not broken and taken:
                self._retake(taken)

    def _retake(self, msgids: list[bytes]) -> None:
        """A cancel came after the application had part of a batch: the batch was backed
        out whole, so get those messages again (by id, one unit of work) to remove them.
        One another consumer got first carries the backout count bumped for it."""
        try:
            uow = self.store.begin()
            got = []
            for m in msgids:
                if self.store.get(self.queue, msgid=m, uow=uow) is not None:
                    got.append(m)
            self.store.commit(uow)
            self.counts.forget(got)
            if self._on_got is not None:
                self._on_got(len(got))
        except Exception:
            pass  # the messages stay on the queue, counted as backed out
