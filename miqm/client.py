"""The application client library: connect to a queue manager, put, get, browse, commit,
back out, and consume a stream of messages. Documented in docs/client.md.

::

    from miqm.client import connect, MQError
    with connect("QM1", conname="hosta(1414),hostb(1414)", reconnect=True) as qm:
        qm.put("Q1", b"body", persistent=True, syncpoint=True)
        qm.commit()
        msg = qm.get("Q1", wait=5.0)           # Message: body, msgid, correlid, priority, ...
        for msg in qm.consume("Q1", prefetch=100):
            ...

Every failure raises :class:`MQError` (or a subclass) whose ``reason`` is MQ's reason
code (MQRC). Around a failover a reconnecting connection reports only MQ's failover
reasons (2009, 2549, 2003, 2543): see :class:`miqm.net.client.Connection`. While the
queue manager ends, calls raise :class:`QMgrQuiescing` (2161) or :class:`QMgrStopping`
(2162); a switchover (``endmqm -s``) moves a reconnecting connection instead.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
import ssl
import threading
import time
from collections.abc import Iterator
from typing import Any

from miqm.errors import MiqmError, NetError, QMgrNotFound
from miqm.net import client as _net
from miqm.net.protocol import MAX_MESSAGE, PACKED_ENTRY, b64, unb64

__all__ = [
    "BackedOut", "CallInProgress", "CallInterrupted", "ConnectionBroken", "Consumer",
    "HConnError",
    "InvalidArgument", "MQError", "Message", "NoMessageAvailable", "NotAuthorized",
    "QMgrNameError", "QMgrNotAvailable", "QMgrQuiescing", "QMgrStopping", "QueueManager",
    "ReconnectFailed",
    "SSLInitializationError", "StandbyQMgr", "UnknownObjectName", "connect",
]


class MQError(NetError):
    """A failed MQ call; ``reason`` is the MQ reason code (MQRC). Made without ``mqrc``,
    each class has its own reason (:attr:`default_reason`)."""

    #: the reason of an error made without ``mqrc``
    default_reason: int = 2059

    def __init__(self, message: str, *, mqrc: int | None = None,
                 amq: str | None = None) -> None:
        super().__init__(message, mqrc=self.default_reason if mqrc is None else mqrc,
                         amq=amq)

    @property
    def reason(self) -> int:
        """MQ's reason code for the failure."""
        return self.mqrc


class NotAuthorized(MQError):
    """2035 MQRC_NOT_AUTHORIZED: the credential is missing or wrong."""

    default_reason = 2035


class NoMessageAvailable(MQError):
    """2033 MQRC_NO_MSG_AVAILABLE: nothing arrived within the wait."""

    default_reason = 2033


class UnknownObjectName(MQError):
    """2085 MQRC_UNKNOWN_OBJECT_NAME: the queue is not defined."""

    default_reason = 2085


class StandbyQMgr(MQError):
    """2543 MQRC_STANDBY_Q_MGR: only a standby instance answered."""

    default_reason = 2543


class QMgrNotAvailable(MQError):
    """2059 MQRC_Q_MGR_NOT_AVAILABLE: no instance answered."""

    default_reason = 2059


class ConnectionBroken(MQError):
    """2009 MQRC_CONNECTION_BROKEN (inside a unit of work: it was backed out)."""

    default_reason = 2009


class CallInterrupted(MQError):
    """2549 MQRC_CALL_INTERRUPTED: the call may or may not have taken effect."""

    default_reason = 2549


class BackedOut(MQError):
    """2003 MQRC_BACKED_OUT: the unit of work was backed out."""

    default_reason = 2003


class QMgrNameError(MQError):
    """2058 MQRC_Q_MGR_NAME_ERROR: the queue manager is not defined here (bindings mode),
    or the listener reached serves another queue manager."""

    default_reason = 2058


class SSLInitializationError(MQError):
    """2393 MQRC_SSL_INITIALIZATION_ERROR: TLS could not be set up: a plain client on a
    TLS listener or the reverse, a listener certificate the client's CA does not trust,
    or a client certificate the listener requires and did not get."""

    default_reason = 2393


class HConnError(MQError):
    """2018 MQRC_HCONN_ERROR: a call on a connection that was closed (``close()``, or the
    end of its ``with`` block)."""

    default_reason = 2018


class CallInProgress(MQError):
    """2219 MQRC_CALL_IN_PROGRESS: another thread is in a call on this connection. A
    connection serves one thread at a time (MQ's MQCNO_HANDLE_SHARE_NO_BLOCK): give each
    thread its own connection. ``close()`` is the exception: any thread may call it."""

    default_reason = 2219


class InvalidArgument(MQError, ValueError):
    """An argument MQ would refuse before the call reaches the queue manager (also a
    ValueError). ``reason``: 2004 MQRC_BUFFER_ERROR (a body that is not bytes), 2046
    MQRC_OPTIONS_ERROR (a ``consume`` prefetch, a ``connect`` timeout), 2047
    MQRC_PERSISTENCE_ERROR, 2050 MQRC_PRIORITY_ERROR (not an integer), 2058
    MQRC_Q_MGR_NAME_ERROR (a queue manager name that is not a string), 2090
    MQRC_WAIT_INTERVAL_ERROR, 2152 MQRC_OBJECT_NAME_ERROR (a queue name that is not a
    string), 2206 MQRC_MSG_ID_ERROR, 2207 MQRC_CORREL_ID_ERROR."""

    default_reason = 2046


class ReconnectFailed(MQError):
    """2548 MQRC_RECONNECT_FAILED: the connection broke and could not be made again
    within ``reconnect_timeout``; the next call tries again. A unit of work that was open
    is lost (its syncpoint calls and ``commit`` raise :class:`BackedOut` until
    ``backout``); a put or get outside syncpoint, or a commit, in flight may or may not
    have taken effect."""

    default_reason = 2548


class QMgrQuiescing(MQError):
    """2161 MQRC_Q_MGR_QUIESCING: the queue manager is ending (endmqm, ``-c``, ``-w``)
    and refused the call, which was not done. A unit of work open may still be
    committed or backed out for a few seconds; then disconnect."""

    default_reason = 2161


class QMgrStopping(MQError):
    """2162 MQRC_Q_MGR_STOPPING: the queue manager is ending at once (``endmqm -i``,
    ``-p``) and refused the call, which was not done; a unit of work open is backed
    out. With ``reconnect=True`` a switchover (``endmqm -s``) is not reported: the
    connection moves to the new active instance."""

    default_reason = 2162


_BY_REASON: dict[int, type[MQError]] = {
    2035: NotAuthorized, 2033: NoMessageAvailable, 2085: UnknownObjectName,
    2543: StandbyQMgr, 2059: QMgrNotAvailable, 2009: ConnectionBroken,
    2549: CallInterrupted, 2003: BackedOut, 2548: ReconnectFailed, 2058: QMgrNameError,
    2393: SSLInitializationError, 2018: HConnError, 2161: QMgrQuiescing,
    2162: QMgrStopping, 2219: CallInProgress,
}

MQRC_Q_MGR_NAME_ERROR = 2058
MQRC_BUFFER_ERROR = 2004
MQRC_PERSISTENCE_ERROR = 2047
MQRC_PRIORITY_ERROR = 2050
MQRC_WAIT_INTERVAL_ERROR = 2090
MQRC_MSG_ID_ERROR = 2206
MQRC_CORREL_ID_ERROR = 2207
MQRC_OPTIONS_ERROR = 2046
MQRC_OBJECT_NAME_ERROR = 2152
#: MQPRI_PRIORITY_AS_Q_DEF: ``put(priority=-1)`` takes the queue's DEFPRTY, as None does
PRIORITY_AS_Q_DEF = -1
#: the most messages a consumer may have pushed ahead (the queue manager's limit)
PREFETCH_MAX = 10_000
#: MQWI_UNLIMITED: ``get(wait=-1)`` waits without limit
WAIT_UNLIMITED = -1
#: the longest finite wait: MQ's WaitInterval is an MQLONG of milliseconds
WAIT_MAX = (2**31 - 1) / 1000
#: an unlimited get waits in calls of this many seconds each
_WAIT_SLICE = 60.0
#: close() from another thread waits this long for a consumer there to end its stream
#: (it looks every second) before closing the connection under it
_CLOSE_GRACE = 2.5
_BYTES = (bytes, bytearray, memoryview)
#: what a body, msgid or correlid may be given as (each is taken as bytes): annotated
#: ``bytes`` alone, a type checker refused a bytearray or memoryview the calls accept
BytesLike = bytes | bytearray | memoryview


def _body(body: Any) -> bytes:
    if not isinstance(body, _BYTES):
        raise InvalidArgument(f"a message body must be bytes, not {type(body).__name__} "
                              "(MQRC 2004 MQRC_BUFFER_ERROR): encode text first, for "
                              "example body.encode()", mqrc=MQRC_BUFFER_ERROR)
    return bytes(body)


def _ident(value: Any, what: str, mqrc: int) -> bytes | None:
    """A msgid/correlid: bytes of up to 24; ``None``, empty or all zeros (MQMI_NONE,
    MQCI_NONE) is None, which selects nothing on a get."""
    if value is None:
        return None
    if not isinstance(value, _BYTES) or len(value) > 24:
        name = "MQRC_MSG_ID_ERROR" if mqrc == MQRC_MSG_ID_ERROR else "MQRC_CORREL_ID_ERROR"
        raise InvalidArgument(f"{what} must be bytes of at most 24 (MQRC {mqrc} {name})",
                              mqrc=mqrc)
    value = bytes(value)
    return value if value.strip(b"\0") else None


def _wait(wait: Any) -> float:
    """A get's wait in seconds: 0 up to WAIT_MAX, or -1 (MQWI_UNLIMITED)."""
    ok = isinstance(wait, (int, float)) and not isinstance(wait, bool)
    if ok and wait == WAIT_UNLIMITED:
        return float(WAIT_UNLIMITED)
    if not ok or not 0 <= wait <= WAIT_MAX:  # nan fails both comparisons
        raise InvalidArgument(f"wait={wait!r} is not a wait: give seconds from 0 to "
                              f"{WAIT_MAX:g}, or -1 to wait without limit (MQRC 2090 "
                              "MQRC_WAIT_INTERVAL_ERROR)", mqrc=MQRC_WAIT_INTERVAL_ERROR)
    return float(wait)


def _consume_wait(wait: Any) -> float | None:
    """A consumer's wait: None or -1 (MQWI_UNLIMITED) iterate until it is closed; else
    seconds as :func:`_wait` takes them."""
    if wait is None:
        return None
    seconds = _wait(wait)
    return None if seconds < 0 else seconds


def _queue_name(queue: Any) -> str:
    """A queue name must be a string (2152 MQRC_OBJECT_NAME_ERROR): ``None`` or a number
    would be sent as the text of its repr and answered 2085 for a queue named 'None'."""
    if type(queue) is not str:
        raise InvalidArgument(f"queue={queue!r}: a queue name is a string such as 'Q1' "
                              "(MQRC 2152 MQRC_OBJECT_NAME_ERROR)", mqrc=MQRC_OBJECT_NAME_ERROR)
    return queue


def _flag(value: Any, what: str) -> bool:
    """A yes/no argument (``syncpoint``): a bool, or 0/1. A string such as ``"no"`` was
    true and put the call under syncpoint."""
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise InvalidArgument(f"{what}={value!r}: give True or False (MQRC 2046 "
                          "MQRC_OPTIONS_ERROR)", mqrc=MQRC_OPTIONS_ERROR)


def _seconds(value: Any, what: str, zero: bool) -> float:
    """A connect() timeout: a finite number of seconds above 0 (or 0 when ``zero``)."""
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
          and math.isfinite(value) and (value >= 0 if zero else value > 0))
    if not ok:
        low = "0 or more" if zero else "more than 0"
        raise InvalidArgument(f"{what}={value!r}: give a number of seconds, {low} (MQRC "
                              "2046 MQRC_OPTIONS_ERROR)", mqrc=MQRC_OPTIONS_ERROR)
    return float(value)


MQRC_CLIENT_CONN_ERROR = 2278
MQRC_UNKNOWN_OBJECT_NAME = 2085
MQRC_DATA_LENGTH_ERROR = 2010


#: MQ's object names: 1 to 48 of these characters (as runmqsc's DEFINE takes them)
_OBJECT_NAME = re.compile(r"[A-Za-z0-9._/%]{1,48}")


def _unknown_hint(queue: str, tempdyn: bool = False) -> str:
    """What to do about queue ``queue`` that the queue manager does not know (2085):
    a temporary dynamic queue this connection made (``tempdyn``) was deleted; a name
    that can never be defined says so and gives the rules; a lower-case name reminds
    that runmqsc folds unquoted names to upper case. Built only when a call has failed
    with 2085: nothing on the path of a call that succeeds."""
    if tempdyn:
        return (": it was a temporary dynamic queue this connection made, deleted (with "
                "its messages) when it was closed, or at a restart or failover of the "
                "queue manager: open the model queue again for a new one")
    if not _OBJECT_NAME.fullmatch(queue):
        return (f": {queue!r} cannot be a queue name, which is 1 to 48 of A-Z a-z 0-9 "
                ". / _ % (fix the name the application uses)")
    if queue != queue.upper():
        return (f": names are case-sensitive, and runmqsc takes an unquoted name in "
                f"upper case (DEFINE QLOCAL({queue}) defines {queue.upper()!r}): use "
                f"{queue.upper()!r} if that is the queue, or define {queue!r} quoted, "
                f"DEFINE QLOCAL('{queue}')")
    return f": define it (runmqsc: DEFINE QLOCAL({queue})) or fix the name"


def _error(exc: MiqmError, queue: Any = None, tempdyn: bool = False) -> MQError:
    """The MQError for a lower-level error (``queue``: the queue the failed call named,
    for the advice an unknown one gets; ``tempdyn``: it is a temporary dynamic queue)."""
    if isinstance(exc, MQError):
        return exc
    if isinstance(exc, NetError):
        reason = exc.mqrc
    elif isinstance(exc, QMgrNotFound) or exc.amq == "AMQ7048":  # unknown or bad name
        reason = MQRC_Q_MGR_NAME_ERROR
    else:  # a bad CONNAME, credential file or TLS file
        reason = MQRC_CLIENT_CONN_ERROR
    cls = _BY_REASON.get(reason, MQError)
    text = str(exc)
    if reason == MQRC_UNKNOWN_OBJECT_NAME and isinstance(queue, str):
        text += _unknown_hint(queue, tempdyn)
    return cls(text, mqrc=reason, amq=exc.amq)


class Message:
    """A message as an application sees it: ``body``, ``msgid``, ``correlid`` (bytes),
    ``priority``, ``persistent``, ``put_time`` (UTC datetime) and ``backout_count``."""

    __slots__ = (
        "_put_time",
        "backout_count",
        "body",
        "correlid",
        "msgid",
        "persistent",
        "priority",
    )

    def __init__(self, body: bytes, msgid: bytes = b"", correlid: bytes = b"",
                 priority: int = 0, persistent: bool = False,
                 put_time: _dt.datetime | float | str | None = None,
                 backout_count: int = 0) -> None:
        self.body = body
        self.msgid = msgid
        self.correlid = correlid
        self.priority = priority
        self.persistent = persistent
        self._put_time = put_time
        #: MQ's BackoutCount: how often the message was backed out onto its queue (kept
        #: by the active instance in memory; a consumer that reconnects counts its own
        #: redeliveries)
        self.backout_count = backout_count

    @property
    def put_time(self) -> _dt.datetime | None:
        """When the message was put (UTC)."""
        t = self._put_time
        if isinstance(t, (int, float)):
            t = self._put_time = _dt.datetime.fromtimestamp(t, _dt.UTC)
        elif isinstance(t, str):
            try:
                t = _dt.datetime.fromisoformat(t)
            except ValueError:
                t = None
            self._put_time = t
        return t

    @property
    def redelivered(self) -> bool:
        """True if the message may have been handed to an application before."""
        return self.backout_count > 0

    def __repr__(self) -> str:
        return (f"Message(body={self.body[:32]!r}{'...' if len(self.body) > 32 else ''}, "
                f"msgid={self.msgid.hex()}, priority={self.priority}, "
                f"persistent={self.persistent}, backout_count={self.backout_count})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return (self.body, self.msgid, self.correlid, self.priority, self.persistent,
                self.backout_count) == (other.body, other.msgid, other.correlid,
                                        other.priority, other.persistent,
                                        other.backout_count)

    __hash__ = None  # type: ignore[assignment]


def _message(fields: dict[str, Any], body: bytes) -> Message:
    return Message(body, unb64(fields.get("msgid")) or b"",
                   unb64(fields.get("correlid")) or b"",
                   int(fields.get("priority") or 0), bool(fields.get("persistent")),
                   fields.get("put_time"), int(fields.get("bc") or 0))


class QueueManager:
    """A connection to a queue manager (from :func:`connect`); a context manager.

    Closing it (or leaving the ``with`` block) backs out a unit of work that was not
    committed, as MQ does for an application that ends without MQCMIT.

    One thread at a time: a call while another thread is in one on the same connection
    raises :class:`CallInProgress` (2219) instead of mixing the two on the wire, as MQ's
    MQCNO_HANDLE_SHARE_NO_BLOCK does. :meth:`close` may come from any thread (a call in
    progress then raises :class:`HConnError`, a consumer's loop ends).
    """

    def __init__(self, conn: _net.Connection) -> None:
        self._conn = conn
        #: held by the thread in a call (re-entrant: a consumer's next() gets under it)
        self._busy = threading.RLock()
        self._consumers: list[Consumer] = []
        #: the consumers under syncpoint: a commit settles what they handed out
        self._pulling: list[Consumer] = []
        #: the call in progress is a consumer's next(), which looks at its stop flag
        self._consuming = False
        # queues opened with open(), reopened after a reconnect (as MQ's reconnectable
        # clients reopen their objects): {queue: options}
        self._opened: dict[str, tuple[str, ...]] = {}
        #: each queue's browse cursor: the place of the message browsed last (the
        #: server's keys are the log's, so it holds across a failover)
        self._cursors: dict[str, list[int]] = {}
        #: the temporary dynamic queues open() made: a 2085 for one says it was deleted
        self._tempdyn: set[str] = set()
        self._generation = conn.generation

    @property
    def qmgr(self) -> str:
        """The queue manager's name (its own, also when ``connect`` was given a blank
        name, which accepts whichever queue manager answers)."""
        return self._conn.server_qmgr or self._conn.qmgr

    @property
    def host(self) -> str:
        """The host name of the instance connected to now."""
        return self._conn.server_host

    @property
    def reconnects(self) -> int:
        """How many times the connection was re-established (failovers survived)."""
        return self._conn.reconnects

    def _call(self, op: str, **fields: Any) -> dict[str, Any]:
        busy = self._busy
        if not busy.acquire(False):
            raise self._in_progress(op)
        try:
            if self._generation != self._conn.generation:
                self._reopen()
            return self._conn.call(op, **fields)
        except MiqmError as exc:
            queue = fields.get("queue")
            raise _error(exc, queue, queue in self._tempdyn) from None
        finally:
            busy.release()

    def _in_progress(self, op: str) -> CallInProgress:
        return CallInProgress(f"{op} while another thread is in a call on this connection "
                              "(MQRC 2219 MQRC_CALL_IN_PROGRESS): give each thread its own "
                              "connection", mqrc=2219)

    def _reopen(self) -> None:
        """After a reconnect: open again the queues :meth:`open` opened (a queue that is
        gone, such as a temporary dynamic one, is forgotten)."""
        self._generation = self._conn.generation
        for queue, options in list(self._opened.items()):
            try:
                self._conn.call("open", queue=queue, options=list(options))
            except MiqmError:
                self._opened.pop(queue, None)

    def inquire(self, queue: str) -> dict[str, Any]:
        """MQOPEN + MQINQ: the queue's attributes (``MAXDEPTH``, ``DEFPSIST``, ...);
        :class:`UnknownObjectName` (2085) if it is not defined."""
        return dict(self._call("open", queue=_queue_name(queue)).get("attrs") or {})

    def put(self, queue: str, body: BytesLike, *, persistent: bool | None = None,
            priority: int | None = None, msgid: BytesLike | None = None,
            correlid: BytesLike | None = None, syncpoint: bool = False) -> bytes | None:
        """MQPUT. ``persistent=None`` takes the queue's DEFPSIST, ``priority=None`` (or -1,
        MQPRI_PRIORITY_AS_Q_DEF) its DEFPRTY; a priority is 0 to 9. Outside syncpoint a
        persistent message is durable on return, and the message id is returned. Under
        syncpoint the put is pipelined (no wait for the reply): it returns ``msgid`` as
        the message carries it, padded to 24 bytes (or None), and a failure is reported
        by :meth:`commit` (2003, naming the failed call), which backs the unit out."""
        body = _body(body)
        if type(queue) is not str:
            _queue_name(queue)
        if syncpoint is not False and syncpoint is not True:
            syncpoint = _flag(syncpoint, "syncpoint")
        if persistent is not None and not (isinstance(persistent, int)
                                           and persistent in (0, 1)):
            raise InvalidArgument(f"persistent={persistent!r}: give True, False or None "
                                  "(the queue's DEFPSIST) (MQRC 2047 "
                                  "MQRC_PERSISTENCE_ERROR)", mqrc=MQRC_PERSISTENCE_ERROR)
        if priority is not None:
            if priority == PRIORITY_AS_Q_DEF and type(priority) is int:
                priority = None  # MQPRI_PRIORITY_AS_Q_DEF, as MQ's applications pass it
            elif (not isinstance(priority, int) or isinstance(priority, bool)
                  or not 0 <= priority <= 9):
                # checked here: under syncpoint the queue manager's refusal came only
                # with the commit, and backed out the whole unit
                raise InvalidArgument(f"priority={priority!r}: give an integer from 0 to 9, "
                                      "or None or -1 (the queue's DEFPRTY) (MQRC 2050 "
                                      "MQRC_PRIORITY_ERROR)", mqrc=MQRC_PRIORITY_ERROR)
        # empty or all zeros: none (MQMI_NONE: the queue manager makes the message id)
        msgid = _ident(msgid, "msgid", MQRC_MSG_ID_ERROR)
        correlid = _ident(correlid, "correlid", MQRC_CORREL_ID_ERROR)
        if len(body) > MAX_MESSAGE:
            raise MQError(f"a message of {len(body)} bytes is longer than the {MAX_MESSAGE} "
                          "bytes a message may have (MQRC 2010 MQRC_DATA_LENGTH_ERROR)",
                          mqrc=MQRC_DATA_LENGTH_ERROR)
        fields: dict[str, Any] = {"queue": queue, "body": body}
        if persistent is not None:
            fields["persistent"] = bool(persistent)
        if priority is not None:
            fields["priority"] = priority
        if msgid is not None:
            fields["msgid"] = b64(msgid)
        if correlid is not None:
            fields["correlid"] = b64(correlid)
        if syncpoint:
            fields["syncpoint"] = True
        if syncpoint:
            busy = self._busy
            if not busy.acquire(False):
                raise self._in_progress("put")
            try:
                if self._generation != self._conn.generation:
                    self._reopen()
                self._conn.send("put", **fields)
            except MiqmError as exc:
                raise _error(exc) from None
            finally:
                busy.release()
            # the id the message carries, 24 bytes as a put outside syncpoint returns it
            # (a short one came back as given, and never equalled a reply's correlid)
            return None if msgid is None else msgid.ljust(24, b"\0")
        reply = self._call("put", **fields)
        return unb64(reply.get("msgid"))

    def get(self, queue: str, *, wait: float = 0.0, msgid: BytesLike | None = None,
            correlid: BytesLike | None = None, syncpoint: bool = False) -> Message:
        """MQGET: the next message (by priority, then arrival; or the one matching
        ``msgid``/``correlid``; empty or all-zero ids select nothing, as MQMI_NONE and
        MQCI_NONE do), waiting up to ``wait`` seconds (-1: without limit, MQWI_UNLIMITED);
        :class:`NoMessageAvailable` (2033) if none comes; :class:`InvalidArgument` (2090)
        for a wait that is neither."""
        seconds = _wait(wait)
        _queue_name(queue)
        if syncpoint is not False and syncpoint is not True:
            syncpoint = _flag(syncpoint, "syncpoint")
        ids = {"msgid": b64(_ident(msgid, "msgid", MQRC_MSG_ID_ERROR)),
               "correlid": b64(_ident(correlid, "correlid", MQRC_CORREL_ID_ERROR))}
        while True:
            part = _WAIT_SLICE if seconds < 0 else seconds
            try:
                reply = self._call("get", queue=queue, wait=part, syncpoint=syncpoint,
                                   **ids)
            except NoMessageAvailable:
                if seconds < 0:
                    continue  # unlimited: wait on
                raise
            return _message(reply, reply.get("body") or b"")

    def browse(self, queue: str, *, msgid: BytesLike | None = None,
               correlid: BytesLike | None = None, wait: float = 0.0) -> Message:
        """MQGET with MQGMO_BROWSE_FIRST: the message a get would return (by priority,
        then arrival; or the first matching ``msgid``/``correlid``), left on the queue;
        waiting up to ``wait`` seconds (-1: without limit) for one to come, 2033 if none.
        The queue's browse cursor is left on it, for :meth:`browse_next`."""
        return self._browse(queue, msgid, correlid, wait, False)

    def browse_next(self, queue: str, *, msgid: BytesLike | None = None,
                    correlid: BytesLike | None = None, wait: float = 0.0) -> Message:
        """MQGET with MQGMO_BROWSE_NEXT: the message after the queue's browse cursor in
        delivery order (the first if nothing was browsed on this queue yet), matching
        ``msgid``/``correlid`` if given, left on the queue; the cursor moves to it. A
        message of a higher priority than the cursor's that arrives later is not seen,
        as with MQ's cursor. ``wait`` and 2033 as :meth:`browse`. The cursor holds
        across a failover."""
        return self._browse(queue, msgid, correlid, wait, True)

    def browse_all(self, queue: str, *, msgid: BytesLike | None = None,
                   correlid: BytesLike | None = None) -> Iterator[Message]:
        """Every message on the queue now (matching ``msgid``/``correlid`` if given), in
        delivery order, left on it: browse first, then browse next until none is left
        (what MQ's amqsbcg sample does)."""
        try:
            yield self.browse(queue, msgid=msgid, correlid=correlid)
            while True:
                yield self.browse_next(queue, msgid=msgid, correlid=correlid)
        except NoMessageAvailable:
            return

    def _browse(self, queue: str, msgid: BytesLike | None, correlid: BytesLike | None,
                wait: float, after_cursor: bool) -> Message:
        seconds = _wait(wait)
        name = _queue_name(queue)
        fields: dict[str, Any] = {
            "queue": name, "browse": True,
            "msgid": b64(_ident(msgid, "msgid", MQRC_MSG_ID_ERROR)),
            "correlid": b64(_ident(correlid, "correlid", MQRC_CORREL_ID_ERROR))}
        if after_cursor and name in self._cursors:
            fields["after"] = self._cursors[name]
        while True:
            try:
                reply = self._call("get", wait=_WAIT_SLICE if seconds < 0 else seconds,
                                   **fields)
            except NoMessageAvailable:
                if seconds < 0:
                    continue  # unlimited: wait on
                raise
            pos = reply.get("pos")
            if pos is None and after_cursor:
                # a listener without cursors: browsing on would return this message forever
                raise MQError(f"queue manager '{self.qmgr}' does not keep a browse cursor "
                              "(an older miqm): browse_next cannot go past the first "
                              "message (MQRC 2046 MQRC_OPTIONS_ERROR)",
                              mqrc=MQRC_OPTIONS_ERROR)
            if pos is not None:
                self._cursors[name] = pos
            return _message(reply, reply.get("body") or b"")

    def open(self, queue: str, *options: str, dynamic: str = "AMQ.*") -> str:
        """MQOPEN with MQ's open options (``"INPUT"``, ``"OUTPUT"``, ``"BROWSE"``,
        ``"INQUIRE"``): the handle shows in DISPLAY QSTATUS and counts in IPPROCS/OPPROCS
        until :meth:`close_queue` or the end of the connection (a put or get opens one
        by itself). Returns the queue's name: for an alias its target's; for a model
        queue (QMODEL) the name of the dynamic queue made from it, named ``dynamic`` (a
        name, or a prefix ending in ``*``: MQ's DynamicQName). A temporary dynamic queue
        is deleted when it is closed or the connection ends. After a reconnect (a
        failover) the handle is opened again with the next call."""
        for option in options:
            if not isinstance(option, str):
                raise InvalidArgument(f"open option {option!r}: give the options as strings, "
                                      "\"INPUT\", \"OUTPUT\", \"BROWSE\" or \"INQUIRE\" "
                                      "(MQRC 2046 MQRC_OPTIONS_ERROR)", mqrc=MQRC_OPTIONS_ERROR)
        if not isinstance(dynamic, str):
            raise InvalidArgument(f"dynamic={dynamic!r}: give a queue name, or a prefix "
                                  "ending in '*' such as 'APP1.*' (MQRC 2152 "
                                  "MQRC_OBJECT_NAME_ERROR)", mqrc=MQRC_OBJECT_NAME_ERROR)
        opts = tuple(o.upper() for o in options)
        reply = self._call("open", queue=_queue_name(queue), options=list(opts), dynamic=dynamic)
        name = str(reply.get("queue") or queue)
        if (reply.get("attrs") or {}).get("DEFTYPE") == "TEMPDYN":
            if len(self._tempdyn) >= 10_000:  # a long-lived connection does not grow
                self._tempdyn.clear()
            self._tempdyn.add(name)
        if opts:
            self._opened[name] = tuple(sorted({*self._opened.get(name, ()), *opts}))
        return name

    def close_queue(self, queue: str, delete: bool = False) -> None:
        """MQCLOSE: end this connection's handle on ``queue``. A temporary dynamic queue
        is deleted with it; a permanent dynamic one too when ``delete`` (MQCO_DELETE)."""
        queue = _queue_name(queue)
        # a string such as "no" was true and deleted a permanent dynamic queue
        delete = _flag(delete, "delete")
        self._opened.pop(queue, None)
        self._call("qclose", queue=queue, delete=delete)

    def commit(self) -> None:
        """MQCMIT: make this connection's unit of work durable and visible."""
        if self._pulling:
            self._end_unit("commit")
        else:
            self._call("commit")

    def backout(self) -> None:
        """MQBACK: undo this connection's unit of work."""
        if self._pulling:
            self._end_unit("backout")
        else:
            self._call("backout")

    def _end_unit(self, op: str) -> None:
        """Commit or back out with consumers under syncpoint: what they handed out is
        settled by a commit; after a backout or a commit that failed (backed out, or in
        doubt) it may come again, and they mark it when it does."""
        try:
            self._call(op)
        except CallInProgress:
            raise  # nothing was sent: the unit is as it was
        except MQError:
            for consumer in self._pulling:
                consumer._unit_lost()
            raise
        for consumer in self._pulling:
            if op == "commit":
                consumer._unit.clear()
            else:
                consumer._unit_lost()

    def consume(self, queue: str, prefetch: int = 100, syncpoint: bool = False,
                wait: float | None = None) -> Consumer:
        """A stream of messages from ``queue`` (iterate it). Outside syncpoint the
        queue manager pushes up to ``prefetch`` messages ahead (1 to 10,000); under
        syncpoint each message is got into this connection's unit of work as the
        application asks for it (commit with :meth:`commit`). ``wait=None`` (or -1,
        MQWI_UNLIMITED) iterates until the consumer is closed; otherwise iteration ends
        once no message arrives for ``wait`` seconds. The consumer survives a failover
        by itself (with ``reconnect=True``). :class:`InvalidArgument` for a prefetch or
        wait that is neither."""
        _queue_name(queue)
        if (not isinstance(prefetch, int) or isinstance(prefetch, bool)
                or not 1 <= prefetch <= PREFETCH_MAX):
            raise InvalidArgument(f"prefetch={prefetch!r}: give a number of messages from 1 "
                                  f"to {PREFETCH_MAX} (to get each message only when it is "
                                  "asked for, use get() or syncpoint=True) (MQRC 2046 "
                                  "MQRC_OPTIONS_ERROR)", mqrc=MQRC_OPTIONS_ERROR)
        if self._conn.closed:
            raise HConnError(f"consume on a connection to queue manager '{self.qmgr}' that "
                             "the application closed (MQRC 2018 MQRC_HCONN_ERROR): connect "
                             "again", mqrc=2018)
        consumer = Consumer(self, queue, prefetch, _flag(syncpoint, "syncpoint"),
                            _consume_wait(wait))
        self._consumers.append(consumer)
        if consumer.syncpoint:
            self._pulling.append(consumer)
        return consumer

    def _forget(self, consumer: Consumer) -> None:
        """A consumer has ended: no longer kept (an application that makes one consumer
        after another must not grow)."""
        for kept in (self._consumers, self._pulling):
            if consumer in kept:
                kept.remove(consumer)

    def close(self) -> None:
        """Disconnect (MQDISC); uncommitted work is backed out by the queue manager. Any
        thread may call it: a call in progress in another thread then raises
        :class:`HConnError` (2018), and a consumer's loop there ends."""
        busy = self._busy
        for consumer in list(self._consumers):
            consumer._stop = True
        if not busy.acquire(False):
            # another thread is in a call. A consumer's next() there sees its stop within
            # a second and ends its stream as close() does (what it handed out is
            # settled); anything else (a get-wait) is woken, with nothing more sent, as a
            # connection that ends (a consumer's unconfirmed messages come again marked)
            if not (self._consuming and busy.acquire(timeout=_CLOSE_GRACE)):
                self._conn.abort()
                return
        try:
            for consumer in list(self._consumers):
                consumer.close()
            self._conn.close()
        finally:
            busy.release()

    def __enter__(self) -> QueueManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Consumer:
    """A streaming consumer (from :meth:`QueueManager.consume`).

    Messages pushed but not yet handed to the application stay on the queue under an
    uncommitted unit of work; they return to the queue if the connection ends, fails
    over or the consumer is closed. A message handed out whose batch was not yet
    confirmed may come again after a failover: it then has ``backout_count`` >= 1.

    Under syncpoint, a message handed out in a unit of work that was backed out (by
    :meth:`QueueManager.backout`, or lost with a connection) comes again with
    ``backout_count`` >= 1 too, also from a new active instance, which has no counts.

    An error raised while iterating (2009 after a failover inside a unit of work, 2003,
    2548) leaves the consumer open: handle it (``backout()``) and iterate again.
    Leaving a ``for`` loop over it (``break``, the end of its ``wait``, an exception from
    the loop's body) ends its stream as :meth:`close` does; iterating it again resumes it.
    After :meth:`close` it raises 2019.
    """

    def __init__(self, qm: QueueManager, queue: str, prefetch: int, syncpoint: bool,
                 wait: float | None) -> None:
        self._qm = qm
        self._conn = qm._conn
        self.queue = queue
        self.prefetch = max(1, int(prefetch))
        self.syncpoint = syncpoint
        self.wait = wait
        self._sub = 0
        self._generation = -1
        self._batch: tuple[int, list[Message]] | None = None
        self._index = 0
        self._suspect: dict[bytes, int] = {}
        self._acked: dict[int, list[bytes]] = {}
        self._closed = False
        #: closed by leaving a ``for`` loop over it (break, the end of its wait, an
        #: exception from the loop's body), not by close(): iterating again resumes it
        self._left = False
        #: close() asked from another thread while this consumer's next() ran there
        self._stop = False
        self._empty = False
        #: under syncpoint: ids handed out in the unit of work open now, and the
        #: connection (generation) they were got on
        self._unit: list[bytes] = []
        self._unit_generation = -1
        self.delivered = 0

    def __iter__(self) -> Iterator[Message]:
        self._resume()
        ended = True
        try:
            while not self._closed:
                try:
                    msg = self._next(self.wait)
                except HConnError:
                    if self._conn.closed:
                        return  # the application closed the connection: the loop ends
                    ended = False
                    raise
                except MQError:
                    ended = False  # the consumer stays: the application may iterate again
                    raise
                if msg is None:
                    if self.wait is not None:
                        return
                    continue
                yield msg
        finally:
            if ended and not self._closed:
                # a loop cannot tell a break from an exception in its body (a commit()
                # raising 2003 after a failover): both close the generator. Either ends
                # the stream as close() does, and the consumer resumes when iterated again
                self.close()
                self._left = self._closed

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def next(self, timeout: float | None = None) -> Message | None:
        """The next message, waiting up to ``timeout`` seconds (None or -1 = until one
        comes); None if none came in time."""
        return self._next(_consume_wait(timeout))

    def _resume(self) -> None:
        """Open again a consumer that a loop left (:attr:`_left`); one closed by
        :meth:`close` (or with its connection) raises 2019. Iterating a closed consumer
        ended at once, without a word: a ``while True: for msg in consumer`` loop (the
        documented one, after a ``commit()`` that raised in its body) spun for ever."""
        if not self._closed:
            return
        if not self._left or self._conn.closed:
            raise MQError(f"the consumer of queue '{self.queue}' is closed (MQRC 2019 "
                          "MQRC_HOBJ_ERROR): make another with consume()", mqrc=2019)
        self._closed = self._left = self._stop = False
        self._generation = -1  # subscribes again (pushed); its old subscription ended
        self._batch = None
        self._empty = False
        self._qm._consumers.append(self)
        if self.syncpoint:
            self._qm._pulling.append(self)

    def _next(self, timeout: float | None) -> Message | None:
        self._resume()
        busy = self._qm._busy
        if not busy.acquire(False):
            if not self._stop:
                raise self._qm._in_progress("a consumer's next()")
            # close() in another thread (of the consumer or its connection): the loop
            # ends once that is done
            busy.acquire()
            busy.release()
            return None
        qm = self._qm
        qm._consuming = True
        try:
            if self.syncpoint:
                return self._next_pulled(timeout)
            return self._next_pushed(timeout)
        finally:
            qm._consuming = False
            busy.release()

    def _next_pushed(self, timeout: float | None) -> Message | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._stop:
                self.close()  # asked from another thread: ended here, in its own
                return None
            if self._generation >= 0 and self._stale():
                self._resync()
            if self._batch is not None:
                return self._hand()
            remaining = 1.0 if deadline is None else deadline - time.monotonic()
            if remaining <= 0 and self._empty:
                return None  # the queue manager said the queue is empty, and time is up
            try:
                if self._generation < 0 or self._stale():
                    self._subscribe()
                # past the deadline, wait for the queue manager's word (a batch or
                # "empty"), which comes at once
                poll = min(remaining, 1.0) if remaining > 0 else 1.0
                frame = self._conn.next_push(self._sub, poll)
            except MQError:
                raise
            except (OSError, NetError) as exc:
                if (isinstance(exc, NetError) and exc.mqrc not in (2009, 2059)
                        and not self._moves(exc)):
                    raise _error(exc) from None
                self._lost(exc)
                continue
            if frame is None:
                continue
            if frame.get("empty"):
                self._empty = True
                continue
            if "committed" in frame:  # that batch is durable: its messages are settled
                for m in self._acked.pop(int(frame["committed"]), ()):
                    self._suspect.pop(m, None)
                continue
            if frame.get("ok") is False:
                err = NetError(str(frame.get("error")), mqrc=int(frame.get("mqrc") or 2195))
                if frame.get("reconnect") and self._conn.reconnect:
                    self._lost(err)  # a switchover: on to the new active instance
                    continue
                raise _error(self._ended_by(err))
            try:
                self._take(frame)
            except (KeyError, TypeError, ValueError, IndexError) as exc:
                raise MQError(f"the queue manager pushed a malformed batch ({exc!r}): the "
                              "client and queue manager versions differ?", mqrc=2195) from None

    def _ended_by(self, err: NetError) -> NetError:
        """The queue manager ended the stream (``err``: 2161 as it quiesces, 2162 as it
        stops): settle what the application has had, as :meth:`close` does (a quiescing
        queue manager still takes the cancel: the messages handed out are removed and
        the acknowledged batches committed), and say in the error if some of them may
        come again (the cancel was refused: an immediate end)."""
        handed = self._index if self._batch is not None else 0
        settled = self._cancel()
        # counted after the cancel: confirmations read on its way (an instance that
        # ended before the cancel reached it sent them first) settle their batches
        unconfirmed = handed + sum(len(v) for v in self._acked.values())
        if unconfirmed and not settled:
            err = NetError(f"{err}; {unconfirmed} messages handed out were not confirmed "
                           "and may be delivered again", mqrc=err.mqrc, amq=err.amq)
        return err

    def _cancel(self) -> bool:
        """End the subscription as :meth:`close` does; whether the queue manager took the
        cancel (then every message handed out is settled: none comes again)."""
        if self._closed:
            return False
        self._closed = True
        self._qm._forget(self)
        if self.syncpoint or self._generation != self._conn.generation:
            return False
        handed = {}
        if self._batch is not None and self._index:
            handed[str(self._batch[0])] = self._index
        self._batch = None
        ok = False
        try:
            if self._conn.connected:
                # waited for: once answered, every ack before it has been committed, so
                # closing the socket right after cannot lose one
                self._conn.call("cancel", sub=self._sub, handed=handed)
                ok = True
        except (OSError, MiqmError):
            pass
        self._settle_read()
        return ok

    def _settle_read(self) -> None:
        """The subscription ends: confirmations already read for it (on the way to the
        connection's end, or to a cancel's reply) settle their batches, which are
        durable; the rest of what it was pushed is dropped."""
        for frame in self._conn.forget_subscription(self._sub):
            if "committed" in frame:
                for m in self._acked.pop(int(frame["committed"]), ()):
                    self._suspect.pop(m, None)

    def _next_pulled(self, timeout: float | None) -> Message | None:
        slice_ = 1.0 if timeout is None else timeout
        while True:
            if self._stop:
                self.close()
                return None
            try:
                msg = self._qm.get(self.queue, wait=slice_, syncpoint=True)
            except NoMessageAvailable:
                if timeout is not None:
                    return None
                continue
            except MQError as exc:
                if exc.reason in (2003, 2009, 2548):  # the unit of work is lost
                    self._unit_lost()
                raise
            generation = self._conn.generation
            if self._unit and self._unit_generation != generation:
                self._unit_lost()  # its unit went with the connection it was got on
            suspect = self._suspect
            if suspect and suspect.pop(msg.msgid, None) is not None:
                msg.backout_count = max(msg.backout_count, 1)
            self._unit.append(msg.msgid)
            self._unit_generation = generation
            self.delivered += 1
            return msg

    def _unit_lost(self) -> None:
        """Under syncpoint: the unit of work this consumer's messages were got in was
        backed out (or its commit is in doubt): each may come again, marked then (a new
        active instance has no backout counts)."""
        if self._unit:
            self._suspect.update(dict.fromkeys(self._unit, 1))
            self._unit.clear()
            if len(self._suspect) > 100_000:  # bound the memory of old ids
                for m in list(self._suspect)[:50_000]:
                    del self._suspect[m]

    def _subscribe(self) -> None:
        self._batch = None
        self._empty = False
        self._sub = self._conn.new_subscription()
        # the listener's features (of the last connection: a reconnect inside the call
        # may reach another release, which ignores the field; _take reads either format)
        packed = "packed" in self._conn.features
        fields: dict[str, Any] = {"queue": self.queue, "prefetch": self.prefetch,
                                  "sub": self._sub}
        if packed:
            fields["packed"] = 1
        try:
            self._conn.call("consume", **fields)
        except MiqmError as exc:
            raise _error(exc, self.queue, self.queue in self._qm._tempdyn) from None
        self._generation = self._conn.generation

    def _stale(self) -> bool:
        """Whether the connection this consumer subscribed on is gone (reconnected by
        this consumer or by any other call on the connection, or dropped)."""
        return self._generation != self._conn.generation or not self._conn.connected

    def _resync(self) -> None:
        """The subscription went with its connection: its batches not confirmed
        committed were backed out, so every message handed out of them may come again.
        Mark them (``backout_count`` >= 1 when they do) and drop the batch not yet
        handed out; the next loop subscribes again."""
        self._batch = None
        if self._generation >= 0:
            self._settle_read()
        self._acked.clear()
        self._suspect.update({m: 1 for m in self._unconfirmed})
        self._generation = -1

    def _moves(self, exc: NetError) -> bool:
        """Whether ``exc`` is an instance ending that asked a reconnecting client to
        move to another instance (a switchover): the consumer follows it."""
        return bool(getattr(exc, "reconnect", False)) and self._conn.reconnect

    def _lost(self, exc: BaseException) -> None:
        """The connection broke while streaming: reconnect (the next loop resubscribes),
        or raise what MQ reports (2009 when a unit of work was open on it)."""
        self._resync()
        try:
            self._conn._broken("ping", False, exc)
        except MiqmError as err:
            raise _error(err) from None

    @property
    def _unconfirmed(self) -> list[bytes]:
        return [m for m, n in self._suspect.items() if n == 0]

    def _take(self, frame: dict[str, Any]) -> None:
        """Unpack a pushed batch (see :func:`miqm.net.streaming.encode_batch`)."""
        data = frame.get("body") or b""
        bcs = frame.get("bc") or {}
        if "n" in frame:  # packed: a table of per-message fields, then ids and bodies
            count = int(frame["n"])
            size = PACKED_ENTRY.size * count
            if count < 0 or size > len(data):
                raise ValueError("a packed batch shorter than its table")
            table = list(PACKED_ENTRY.iter_unpack(memoryview(data)[:size]))
            lens = [e[0] for e in table]
            prios = [e[1] for e in table]
            pers = [e[2] for e in table]
            ts = [e[3] / 1_000_000 for e in table]
            pos = size
        else:
            lens = frame.get("len") or []
            prios, pers, ts = frame["prio"], frame["pers"], frame["ts"]
            pos = 0
        suspect = self._suspect
        msgs = []
        for i, n in enumerate(lens):
            mid = data[pos:pos + 24]
            end = pos + 48 + n
            msg = Message(data[pos + 48:end], mid, data[pos + 24:pos + 48], prios[i],
                          bool(pers[i]), ts[i], bcs.get(str(i), 0) if bcs else 0)
            pos = end
            if suspect and suspect.pop(mid, None):
                msg.backout_count = max(msg.backout_count, 1)
            msgs.append(msg)
        if msgs:
            self._batch = (int(frame["batch"]), msgs)
            self._index = 0
            self._empty = False

    def _hand(self) -> Message:
        assert self._batch is not None
        bid, msgs = self._batch
        msg = msgs[self._index]
        self._index += 1
        self.delivered += 1
        self._suspect[msg.msgid] = 0  # handed, not yet known committed
        if self._index >= len(msgs):
            self._batch = None
            self._acked[bid] = [m.msgid for m in msgs]
            if not self._stale():  # else the batch went with its connection
                try:
                    # sent at once: the queue manager's next batch waits for this
                    # credit; a "committed" push settles the batch once it is durable
                    self._conn.send("ack", sub=self._sub, batch=bid, flush=True)
                except MiqmError:
                    # the connection broke (and was made again, or not): the next call
                    # of next() sees it, marks this batch's messages and resubscribes
                    pass
        if len(self._suspect) > 100_000:  # bound the memory of long-unconfirmed ids
            for m in list(self._suspect)[:50_000]:
                del self._suspect[m]
            while len(self._acked) > 1000:
                del self._acked[next(iter(self._acked))]
        return msg

    def close(self) -> None:
        """Stop the stream: messages pushed but not handed out return to the queue. From
        another thread while this consumer's ``next()`` runs there, the consumer ends
        there (within a second). Closed, it raises 2019 when used again."""
        self._left = False
        busy = self._qm._busy
        if not busy.acquire(False):
            self._stop = True
            return
        try:
            self._cancel()
        finally:
            busy.release()


def connect(qmgr: str, conname: str | None = None, credential: str | None = None,
            reconnect: bool = True, *, timeout: float = 5.0, reconnect_timeout: float = 60.0,
            call_timeout: float = 60.0, tls: ssl.SSLContext | None = None) -> QueueManager:
    """Connect to the active instance of ``qmgr``.

    ``conname``: MQ's CONNAME list ``"hosta(1414),hostb(1414)"``; None uses
    ``MIQM_CONNECTION``, else bindings mode (this host's mqs.ini and the shared data
    directory). ``credential``: ``principal:secret``, a bare secret (the admin's), or
    ``@path``; None uses ``MIQM_CREDENTIAL``, else (bindings mode) the credentials file.
    ``tls``: a client :class:`ssl.SSLContext`; None uses ``MIQM_TLS_CA`` if set.
    ``reconnect=True`` follows a failover (see :class:`miqm.net.client.Connection`).
    With a ``conname`` (or ``MIQM_CONNECTION``), a blank ``qmgr`` accepts whichever
    queue manager answers, as MQ's client connections do (:attr:`QueueManager.qmgr`
    then names it). The timeouts are seconds: ``timeout`` and ``call_timeout`` more
    than 0, ``reconnect_timeout`` 0 or more (:class:`InvalidArgument` otherwise).
    """
    if not isinstance(qmgr, str):
        raise InvalidArgument(f"qmgr={qmgr!r}: a queue manager name is a string such as "
                              "'QM1' (MQRC 2058 MQRC_Q_MGR_NAME_ERROR)",
                              mqrc=MQRC_Q_MGR_NAME_ERROR)
    # a string such as "no" was true; a credential or tls of the wrong kind failed inside
    # the library (AttributeError)
    reconnect = _flag(reconnect, "reconnect")
    if credential is not None and not isinstance(credential, str):
        raise InvalidArgument(f"credential of type {type(credential).__name__}: give a "
                              "string, 'principal:secret', a bare secret or '@path' (MQRC "
                              "2046 MQRC_OPTIONS_ERROR)", mqrc=MQRC_OPTIONS_ERROR)
    if tls is not None and not isinstance(tls, ssl.SSLContext):
        raise InvalidArgument(f"tls={tls!r}: give an ssl.SSLContext, for example "
                              "miqm.net.client.client_tls_context(ca_file), or None (MQRC "
                              "2046 MQRC_OPTIONS_ERROR)", mqrc=MQRC_OPTIONS_ERROR)
    timeout = _seconds(timeout, "timeout", zero=False)
    reconnect_timeout = _seconds(reconnect_timeout, "reconnect_timeout", zero=True)
    call_timeout = _seconds(call_timeout, "call_timeout", zero=False)
    try:
        endpoints = (_net.parse_conname(conname, "conname") if conname is not None
                     else None)
        conn = _net.connect(qmgr, timeout, reconnect=reconnect,
                            reconnect_timeout=reconnect_timeout, call_timeout=call_timeout,
                            endpoints=endpoints, credential=credential, tls=tls,
                            wait_first=False, strict=True)
    except MiqmError as exc:
        raise _error(exc) from None
    return QueueManager(conn)
