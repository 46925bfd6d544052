"""Requests to store calls: what the active instance does for each protocol op.

``QueueService(store, qmgr).handle(request, session)`` takes one decoded request and
returns its reply dict (``{"ok": True, ...}`` or ``{"ok": False, "mqrc": N, "error":
text}``); the listener adds ``id`` and ``v``. The service never raises for a bad request:
a client's mistake is a reply, not a dead connection.

A session's unit of work lives in ``session.state["uow"]``: begun by the first put or get
under syncpoint, ended by ``commit``/``backout``, and backed out by a close hook if the
client goes away first (MQ backs out the work of a disconnected application).

The ops and reply shapes are listed in docs/protocol.md; this module is the reference.
"""

from __future__ import annotations

import datetime as _dt
import functools
import os
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from miqm import amq, authz, mqsc
from miqm.errors import LogFullError, MessagingError, MiqmError, ObjectError
from miqm.net.authorize import QUEUE_OBJTYPES, Authorizer
from miqm.net.protocol import (
    MQRC_BACKED_OUT,
    MQRC_CONNECTION_BROKEN,
    MQRC_Q_MGR_NAME_ERROR,
    MQRC_STANDBY_Q_MGR,
    MQRC_UNEXPECTED_ERROR,
    PROTOCOL_VERSION,
    ProtocolError,
    b64,
    error_reply,
    unb64,
)
from miqm.net.server import MQRC_Q_MGR_QUIESCING, Session, run_as_ordinary
from miqm.net.streaming import BackoutCounts, Subscription, message_fields
from miqm.store.qmstore import unfiled_queue_name, unknown_queue_text
from miqm.store.uow import ROLLED_BACK
from miqm.text import one_line

MQRC_NO_MSG_AVAILABLE = 2033
MQRC_UNKNOWN_OBJECT_NAME = 2085
MQRC_OBJECT_DAMAGED = 2101
MQRC_RESOURCE_PROBLEM = 2102
MQRC_FUNCTION_NOT_SUPPORTED = 2298
MQRC_OPTIONS_ERROR = 2046
MQRC_PUT_INHIBITED = 2051
MQRC_GET_INHIBITED = 2016
MQRC_DYNAMIC_Q_NAME_ERROR = 2011

#: MQRC 2017 MQRC_HANDLE_NOT_AVAILABLE: a connection has as many handles as it may have
MQRC_HANDLE_NOT_AVAILABLE = 2017
#: Streaming consumers, and dynamic queues made, per connection at most (MQ's MAXHANDS
#: default, 256 handles a connection): each consumer is a thread, and 3,000 ``consume``
#: requests on one connection made 3,000 threads in the queue manager (a few more and no
#: new connection could get one); each dynamic queue is a queue in the store.
MAX_HANDLES = 256

#: the listener's name in DISPLAY LSSTATUS (miqm has one TCP listener per instance)
LISTENER_NAME = "SYSTEM.DEFAULT.LISTENER.TCP"
#: CONNAUTH's default: the credentials file is checked (MQ's default AUTHINFO name)
DEFAULT_CONNAUTH = "SYSTEM.DEFAULT.AUTHINFO.IDPWOS"
#: open options a handle may have (DISPLAY QSTATUS TYPE(HANDLE))
_OPEN_MODES = ("INPUT", "OUTPUT", "BROWSE", "INQUIRE")

#: Ops whose effect does not depend on being repeated: a reconnecting client may resend
#: them after a failover without changing the outcome (see client.py).
IDEMPOTENT_OPS = frozenset({"hello", "ping", "status", "logger_dump", "in_doubt", "qmgr"})


#: A get-wait looks at its connection this often (seconds): a client gone ends its wait
#: within this time (service._wait_get).
_WAIT_SLICE = 0.25
#: what _wait_get returns when the client went away while its get waited
_GONE = object()
#: what _wait_get returns when the instance began to end while its get waited
_QUIESCED = object()


#: What a session with a unit of work open may still do during a controlled end (2161):
#: finish that unit (MQ lets an application that is told 2161 commit or back out), and
#: end its consumers' batches. Everything else is refused with the end's reason.
_UNIT_OPS = frozenset({"commit", "backout", "prepare", "resolve", "ack", "cancel",
                       "qclose"})


def _unit_open(state: dict[str, Any]) -> bool:
    """Whether a session's unit of work may still commit or back out (see open_units)."""
    if "uow_failed" in state:
        return True
    uow = state.get("uow")
    return uow is not None and getattr(uow, "state", None) != ROLLED_BACK


def quiesce_reply(mqrc: int, reconnect: bool, *, notice: bool = False) -> dict[str, Any]:
    """The refusal of a call while the instance ends: ``mqrc`` 2161
    (MQRC_Q_MGR_QUIESCING, endmqm / -c / -w) or 2162 (MQRC_Q_MGR_STOPPING, -i / -p);
    ``reconnect`` when clients are asked to reconnect to another instance (-s, -r).
    ``notice``: the last frame of a connection (no ``id``: the answer to a call the
    listener never read)."""
    name = "MQRC_Q_MGR_QUIESCING" if mqrc == MQRC_Q_MGR_QUIESCING else "MQRC_Q_MGR_STOPPING"
    what = ("is ending (controlled)" if mqrc == MQRC_Q_MGR_QUIESCING
            else "is ending immediately")
    then = ("; reconnect to its other instance" if reconnect
            else "; end the unit of work and disconnect")
    reply = error_reply(mqrc, f"the queue manager {what} (MQRC {mqrc} {name}){then}")
    reply["reconnect"] = bool(reconnect)
    if notice:
        reply["quiesce"] = 1
    return reply


def standby_reply() -> dict[str, Any]:
    """What a standby instance answers to every request but the control ops."""
    return error_reply(
        MQRC_STANDBY_Q_MGR,
        "this instance is a standby; the queue manager is active on another instance "
        "(MQRC_STANDBY_Q_MGR)",
        amq="AMQ8146",
    )


def _failure_reply(op: str, exc: Exception) -> dict[str, Any]:
    """The error reply for a request whose handler raised ``exc``: MQ's reason code where
    the error carries one."""
    if isinstance(exc, ProtocolError):
        # a field of the request that cannot be decoded (a message id that is not base64):
        # the request is bad, the connection is not broken (its 2009 said it was, and a
        # reconnecting client would have taken the call for one cut off by a failover)
        return error_reply(MQRC_OPTIONS_ERROR, f"bad {op} request: {exc}")
    if isinstance(exc, MessagingError):
        return error_reply(exc.mqrc, str(exc), exc.amq)
    if isinstance(exc, ObjectError):
        return error_reply(getattr(exc, "mqrc", MQRC_UNKNOWN_OBJECT_NAME), str(exc), exc.amq)
    if isinstance(exc, MiqmError):
        return error_reply(getattr(exc, "mqrc", MQRC_RESOURCE_PROBLEM), str(exc), exc.amq)
    if isinstance(exc, (KeyError, TypeError, ValueError)):
        return error_reply(MQRC_OPTIONS_ERROR, f"bad {op} request: {exc}")
    return error_reply(MQRC_UNEXPECTED_ERROR, f"{type(exc).__name__}: {exc}")


def _failed_call(op: str, reply: dict[str, Any]) -> str:
    """What a unit's commit names of a call of it that failed (``reply``, its error)."""
    return f"{op} failed with MQRC {reply.get('mqrc')}"


def _backed_out(failed: str) -> dict[str, Any]:
    """The commit's reply for a unit one of whose calls failed (``failed``)."""
    return error_reply(MQRC_BACKED_OUT, "the unit of work was backed out because one of its "
                       f"calls failed: {failed} (MQRC 2003)")


def _owes_ack(subs: dict[int, Subscription]) -> bool:
    """Whether a consumer of a session has pushed messages its client has not
    acknowledged (the listener asks when the connection has been silent for its idle
    timeout: such a client is stopped or cut off, not waiting for messages)."""
    try:
        return any(sub.awaiting_client() for sub in tuple(subs.values()))
    except RuntimeError:  # a consumer started or ended meanwhile: it is in use
        return False


class QueueService:
    """Executes protocol requests against a QueueManagerStore for queue manager ``qmgr``."""

    def __init__(self, store: Any, qmgr: str, *, host_name: str = "",
                 errlog: Callable[[str, str], None] | None = None,
                 standby_permitted: bool | None = None) -> None:
        self.store = store
        self.qmgr = qmgr
        self.host_name = host_name
        #: whether this (active) instance was started with -x: DISPLAY QMSTATUS's
        #: STANDBY; None where no HA controller runs it (not shown then)
        self.standby_permitted = standby_permitted
        #: authority checks of remote identities (miqm/net/authorize.py)
        self.authorizer = Authorizer(store, qmgr, errlog)
        self._errlog = errlog or (lambda number, text: None)
        #: MQ's BackoutCount per message, held by this (active) instance in memory
        self.backout_counts = BackoutCounts()
        # messages put and got (destructively) through this service: the metrics endpoint
        self.messages_put = 0
        self.messages_got = 0
        self._count_lock = threading.Lock()
        #: connections known to this service (DISPLAY CONN, QSTATUS TYPE(HANDLE), STOP CONN)
        self._sessions: dict[int, Session] = {}
        self._sessions_lock = threading.Lock()
        # CONN ids are 16 hex digits: this service's random half and the session number
        self._conn_prefix = os.urandom(4).hex().upper()
        self._dyn_seq = 0
        #: xid -> the principal whose session prepared it (units prepared on this instance)
        self._listener: Any = None
        self._auth_possible = False  # the listener has a credentials table to check
        self.started_at = time.time()
        #: (mqrc, reconnect) once the instance is ending (:meth:`quiesce`), else None
        self.quiescing: tuple[int, bool] | None = None
        self._drop_temporary_queues()
        self._ops: dict[str, Callable[[dict[str, Any], Session], dict[str, Any]]] = {
            "hello": self._hello, "ping": self._ping,
            "put": self._put, "get": self._get,
            "commit": self._commit, "backout": self._backout,
            "prepare": self._prepare, "resolve": self._resolve, "in_doubt": self._in_doubt,
            "mqsc": self._mqsc, "status": self._status, "logger_dump": self._logger_dump,
            "checkpoint": self._checkpoint,
            "rcdmqimg": self._rcdmqimg, "rcrmqobj": self._rcrmqobj, "open": self._open,
            "consume": self._consume, "ack": self._ack, "cancel": self._cancel,
            "qclose": self._qclose,
        }

    @property
    def ops(self) -> list[str]:
        """The op names this service answers."""
        return sorted(self._ops)

    def handle(self, request: dict[str, Any], session: Session) -> dict[str, Any]:
        """One request in, one reply out; every failure becomes an error reply."""
        op = request.get("op")
        fn = self._ops.get(op) if isinstance(op, str) else None
        if fn is None:
            return error_reply(MQRC_FUNCTION_NOT_SUPPORTED, f"unknown op {op!r}")
        try:
            # every request passes here: the check is a call only while the instance ends
            refused = (None if self.quiescing is None
                       else self._quiesce_check(op, request, session))
            if refused is None:
                refused = self.authorizer.check(op, request, session)
            if refused is None:
                reply = fn(request, session)
            elif op == "put" and request.get("commit") and request.get("syncpoint"):
                reply = self._unit_failed(request, session, refused)
            else:
                reply = refused
        except Exception as exc:  # the reply says what broke; the loop goes on
            reply = _failure_reply(op, exc)
        if (not reply.get("ok") and request.get("async") and request.get("syncpoint")
                and op == "put" and session is not None):
            # a pipelined put of a unit of work failed and nobody has seen the reply yet:
            # the unit's commit must not succeed without it. Also when the put failed
            # before the unit could be begun here (a stopped store refuses begin): the
            # client's unit holds the put all the same, and a commit answered ok for it
            # would acknowledge a message that was never stored
            if request.get("async") == 2 and "uow_failed" in session.state:
                # the unit failed already and its first failure was answered: the commit
                # says 2003 naming it. Answering every later quiet put too (a full log
                # refuses them all) filled the socket both ways while the client was
                # still sending, and the application got a timeout instead of 2003
                return {"ok": True}
            # with the refusal's own line: the commit that reports it is the first the
            # application hears of it, and "put failed with MQRC 2035" named no queue
            session.state["uow_failed"] = f"{_failed_call(op, reply)} ({reply.get('error')})"
        return reply

    # -- ending ----------------------------------------------------------------------
    def quiesce(self, mqrc: int, reconnect: bool = False) -> None:
        """The instance is ending (endmqm): from now on calls are refused with ``mqrc``
        (2161 controlled, 2162 immediate; see :meth:`_quiesce_check`), get-waits in
        progress end with it within ``_WAIT_SLICE``, and each streaming consumer is told.
        An immediate end stops the consumers (their unacknowledged batches return to the
        queue); a controlled one only pauses them: what they pushed stays for the
        client's ack or cancel, and :meth:`open_units` counts it within the grace."""
        self.quiescing = (mqrc, bool(reconnect))
        frame = quiesce_reply(mqrc, reconnect)
        controlled = mqrc == MQRC_Q_MGR_QUIESCING
        for session in self.sessions():
            subs = session.state.get("subs") or {}
            for sub_id in list(subs):
                sub = subs.get(sub_id) if controlled else subs.pop(sub_id, None)
                if sub is None:
                    continue
                if controlled:
                    # no more batches; those pushed stay for the client's ack or cancel
                    # (it names what it handed out: those are removed, not returned to
                    # come again unmarked after the restart), within the grace
                    sub.pause()
                try:
                    session.push({"push": sub_id, **frame})
                except OSError:
                    pass
                if not controlled:
                    sub.stop(broken=True)

    def sessions(self) -> list[Session]:
        """The connections known to this service now."""
        with self._sessions_lock:
            return list(self._sessions.values())

    def open_units(self) -> int:
        """How many connections have a unit of work open, or a consumer's batches not yet
        settled (the grace of a controlled end waits for these to commit, back out or
        cancel). A unit the store has rolled back already (AMQ7469: it held too much of
        the log) is not open: its outcome is settled, and a switchover waited the whole
        grace for its application to hear so."""
        return sum(1 for s in self.sessions()
                   if _unit_open(s.state)
                   or any(sub.unsettled() for sub in (s.state.get("subs") or {}).values()))

    def _quiesce_check(self, op: str, req: dict[str, Any],
                       session: Session | None) -> dict[str, Any] | None:
        """None, or the refusal of ``op`` while the instance ends (MQ's
        MQGMO/MQPMO_FAIL_IF_QUIESCING for every call): during a controlled end (2161) a
        session with a unit of work open may still finish it (its puts, gets without
        wait, commit, backout) and end its consumers; during an immediate end (2162)
        nothing is done."""
        state = self.quiescing
        if state is None:
            return None
        mqrc, reconnect = state
        if mqrc == MQRC_Q_MGR_QUIESCING and session is not None:
            if op in _UNIT_OPS:
                return None
            in_unit = "uow" in session.state or "uow_failed" in session.state
            if op == "put" and req.get("syncpoint") and (
                    in_unit or req.get("commit") or req.get("async")):
                # a unit's puts; pipelined puts under syncpoint (the client, which hears
                # of them only at the commit, may have issued them before the end); a
                # unit of one put (put and commit in one request: the client held the
                # put back until the commit)
                return None
            if (op == "get" and req.get("syncpoint") and in_unit
                    and not float(req.get("wait") or 0.0)):
                return None
        return quiesce_reply(mqrc, reconnect)

    # -- connection ------------------------------------------------------------------
    def _hello(self, req: dict[str, Any], session: Session) -> dict[str, Any]:
        want = req.get("qmgr")
        if want and want != self.qmgr:
            return error_reply(MQRC_Q_MGR_NAME_ERROR,
                               f"this listener serves queue manager '{self.qmgr}', not '{want}'")
        if session is not None:
            self._register(session, req)
        return {"ok": True, "qmgr": self.qmgr, "host": self.host_name,
                "session": session.id, "version": PROTOCOL_VERSION}

    def _ping(self, req: dict[str, Any], session: Session) -> dict[str, Any]:
        return {"ok": True, "qmgr": self.qmgr}

    # -- messaging -------------------------------------------------------------------
    def _open(self, req: dict[str, Any], session: Session) -> dict[str, Any]:
        """MQOPEN: the queue (a local queue, an alias resolved to its target, or a model
        from which a dynamic queue is made) exists (2085 otherwise); ``options`` (INPUT,
        OUTPUT, BROWSE, INQUIRE) open a handle that stays open until ``qclose`` or the
        end of the connection. Returns the queue's attributes and its ``queue`` name."""
        name = str(req["queue"])
        modes = [str(m).upper() for m in (req.get("options") or ())]
        bad = [m for m in modes if m not in _OPEN_MODES]
        if bad:
            return error_reply(MQRC_OPTIONS_ERROR, f"open option {bad[0]!r} is not one of "
                               f"{', '.join(_OPEN_MODES)} (MQRC 2046)")
        if not self._exists(name):
            model = self._object("QMODEL", name)
            if model is not None:
                name = self._make_dynamic(model, str(req.get("dynamic") or "AMQ.*"), session)
            else:
                target = self._alias_target(name, "")
                if target is None or not self._exists(target):
                    damaged = self._damaged(target or name)
                    if damaged:  # defined, its file damaged: what a put or get says too
                        which = next(iter(damaged))
                        return error_reply(MQRC_OBJECT_DAMAGED,
                                           f"{self._damaged_line(which, damaged[which])} "
                                           "(MQRC 2101 MQRC_OBJECT_DAMAGED)", amq="AMQ7472")
                    return error_reply(MQRC_UNKNOWN_OBJECT_NAME,
                                       unknown_queue_text(name))
                name = target
        for mode in modes:
            self._note_handle(session, name, mode)
        return {"ok": True, "queue": name,
                "attrs": _jsonable(self._with_procs(self.store.queue_attrs(name)))}

    def _qclose(self, req: dict[str, Any], session: Session) -> dict[str, Any]:
        """MQCLOSE: end this connection's handle on ``queue``; a temporary dynamic queue
        it created is deleted with its messages, a permanent one only with ``delete``."""
        name = str(req["queue"])
        if session is None:
            return {"ok": True}
        with self._sessions_lock:
            session.state.get("handles", {}).pop(name, None)
        mine = session.state.get("dynamic", {})
        if name in mine and (mine[name] == "TEMPDYN" or req.get("delete")):
            self.store.delete_queue(name, purge=True)
            del mine[name]
        return {"ok": True}

    def _uow(self, session: Session) -> Any:
        uow = session.state.get("uow")
        if uow is None:
            uow = self.store.begin()
            session.state["uow"] = uow
            session.state["uow_gets"] = []
            self._hook(session)
        return uow

    def _backout_on_close(self, session: Session) -> None:
        for sub in list(session.state.pop("subs", {}).values()):
            sub.stop(broken=True)
        uow = session.state.pop("uow", None)
        if uow is not None:
            self.store.backout(uow)
            self.backout_counts.bump(session.state.pop("uow_gets", []))

    def _hook(self, session: Session) -> None:
        if not session.state.get("close_hook"):
            session.state["close_hook"] = True
            session.on_close(self._backout_on_close)

    def _put(self, req: dict[str, Any], session: Session) -> dict[str, Any]:
        body = req.get("body") or b""
        if isinstance(body, str):
            raise ValueError("the body must travel as the frame's binary part")
        one_put_unit = bool(req.get("commit"))
        if one_put_unit:
            if not req.get("syncpoint"):
                return error_reply(MQRC_OPTIONS_ERROR, "a put with commit must be under "
                                   "syncpoint (MQRC 2046)")
            if session is not None and ("uow" in session.state
                                        or "uow_failed" in session.state):
                return self._put_then_commit(req, session)
        priority = req.get("priority")
        try:
            # a unit of work of one put is committed as that put outside syncpoint: the
            # same record reaches the log and is forced before the reply, the message is
            # visible from then on, and no unit of work is made and ended for it
            msgid, queue = self._on_queue(
                self.store.put, str(req["queue"]), "PUT", body,
                persistent=req.get("persistent"),
                priority=None if priority is None else int(priority),
                msgid=unb64(req.get("msgid")), correlid=unb64(req.get("correlid")),
                uow=self._uow(session) if req.get("syncpoint") and not one_put_unit else None,
            )
        except (MessagingError, ObjectError, LogFullError, KeyError, TypeError,
                ValueError) as exc:
            if not one_put_unit:
                raise
            # refused before anything was logged
            return self._unit_failed(req, session, _failure_reply("put", exc))
        if session is not None:
            handles = session.state.get("handles")
            if handles is None or "OUTPUT" not in handles.get(queue, ()):
                self._note_handle(session, queue, "OUTPUT")
        with self._count_lock:
            self.messages_put += 1
        if req.get("async") == 2 or one_put_unit:
            # a quiet put's reply is not sent (server.py, FEATURES); a one-put unit's is
            # its commit's
            return {"ok": True}
        return {"ok": True, "msgid": b64(msgid) if isinstance(msgid, bytes) else None}

    def _unit_failed(self, req: dict[str, Any], session: Session,
                     failure: dict[str, Any]) -> dict[str, Any]:
        """A put with commit that was refused: what the commit after a refused pipelined
        put answers (2003, naming the put's reason; a unit the session had open is backed
        out with it)."""
        failed = f"{_failed_call('put', failure)} ({failure.get('error')})"
        if session is None:
            return _backed_out(failed)
        session.state["uow_failed"] = failed
        return self._commit(req, session)

    def _put_then_commit(self, req: dict[str, Any], session: Session) -> dict[str, Any]:
        """A put with commit on a session whose unit of work is already open: the put
        joins that unit as a pipelined put does (its failure fails the unit), and the
        unit commits."""
        self.handle({k: v for k, v in req.items() if k != "commit"} | {"async": 2}, session)
        return self._commit(req, session)

    def _get(self, req: dict[str, Any], session: Session) -> dict[str, Any]:
        browse = bool(req.get("browse"))
        under = bool(req.get("syncpoint")) and not browse
        name = str(req["queue"])
        if session is not None:
            # the handle opens before the get: a getter waiting for a message counts
            mode = "BROWSE" if browse else "INPUT"
            handles = session.state.get("handles")
            if handles is None or mode not in handles.get(name, ()):
                target = name if self._exists(name) else self._alias_target(name, "GET")
                if target is not None and self._exists(target):
                    self._note_handle(session, target, mode)
        ids: dict[str, Any] = {"msgid": unb64(req.get("msgid")),
                               "correlid": unb64(req.get("correlid"))}
        if browse and req.get("after") is not None:
            after = _browse_position(req["after"])
            if after is None:
                return error_reply(MQRC_OPTIONS_ERROR, "the browse cursor 'after' is not "
                                   "one a browse returned (a list of priority and key)")
            ids["after"] = after
        wait = max(0.0, float(req.get("wait") or 0.0))
        if wait > 0 and session is not None and session.peer_gone():
            return error_reply(MQRC_CONNECTION_BROKEN, "the connection has ended (MQRC 2009 "
                               "MQRC_CONNECTION_BROKEN)")
        # a message already there is taken at once, as before; only a get that has to
        # wait pays for watching its connection (_wait_get)
        msg, _queue = self._on_queue(
            self.store.get, name, "GET", **ids, wait=0.0, browse=browse,
            uow=self._uow(session) if under else None,
        )
        if msg is None and wait > 0:
            msg = self._wait_get(name, ids, wait, browse, under, session)
            if msg is _GONE:
                return error_reply(MQRC_CONNECTION_BROKEN, "the connection ended while the "
                                   "get waited (MQRC 2009 MQRC_CONNECTION_BROKEN)")
            if msg is _QUIESCED and self.quiescing is not None:
                # MQGMO_FAIL_IF_QUIESCING: the wait ends with the end's reason
                return quiesce_reply(*self.quiescing)
        if msg is None:
            return error_reply(MQRC_NO_MSG_AVAILABLE, "no message available (MQRC 2033)")
        if under:
            session.state.setdefault("uow_gets", []).append(msg.msgid)
        reply = {"ok": True, **message_fields(msg, self.backout_counts),
                 "body": bytes(msg.body)}
        position = getattr(msg, "position", None) if browse else None
        if position is not None:
            reply["pos"] = list(position)  # the cursor for the next browse
        if not browse and not under:
            self.backout_counts.forget([msg.msgid])
        if not browse:
            self._count_got(1)
        return reply

    def _wait_get(self, name: str, ids: dict[str, Any], wait: float, browse: bool,
                  under: bool, session: Session | None) -> Any:
        """The waiting part of a get: the message, None when ``wait`` seconds pass with
        none, or ``_GONE`` when the client went away first (as MQ's get-wait ends with its
        connection).

        It waits in slices of ``_WAIT_SLICE`` seconds and looks at the connection between
        them, and again once a message came. A message got outside syncpoint for a
        client seen gone by then is put back (:meth:`_put_back`) rather than lost with a
        reply that cannot be sent; under syncpoint the session's end backs it out. What
        remains is the window MQ has too: the client going away between that look and
        the reply. The message that came costs what it did before (a put handed to the
        waiting getter is logged only when it has to be put back)."""
        deadline = time.monotonic() + wait
        uow = self._uow(session) if under else None
        while True:
            if session is not None and session.peer_gone():
                return _GONE
            if self.quiescing is not None:
                return _QUIESCED
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            msg, queue = self._on_queue(self.store.get, name, "GET", **ids,
                                        wait=min(remaining, _WAIT_SLICE), browse=browse,
                                        uow=uow)
            if msg is None:
                continue
            if not under and not browse and session is not None and session.peer_gone():
                self._put_back(queue, msg)
                return _GONE
            return msg

    def _put_back(self, queue: str, msg: Any) -> None:
        """A message got outside syncpoint for a client that has gone: on the queue again,
        as it was put (body, persistence, priority, message and correlation ids). If it
        cannot be put back (the queue filled meanwhile, the store stopped) the error log
        says which message was lost and why."""
        correlid = msg.correlid if (msg.correlid or b"").strip(b"\0") else None
        try:
            self.store.put(queue, msg.body, persistent=msg.persistent, priority=msg.priority,
                           msgid=msg.msgid, correlid=correlid)
        except Exception as exc:  # nothing to return it to: say so, loudly
            self._errlog("AMQ6184", f"a message got from queue '{queue}' for a client that "
                         f"had gone (MSGID {msg.msgid.hex()}) could not be put back, and is "
                         f"lost: {exc}")

    def _count_got(self, n: int) -> None:
        with self._count_lock:
            self.messages_got += n

    def _commit(self, req: dict[str, Any], session: Session) -> dict[str, Any]:
        uow = session.state.pop("uow", None)
        gets = session.state.pop("uow_gets", [])
        failed = session.state.pop("uow_failed", None)
        if failed is not None:
            # a pipelined put or get of this unit failed: the unit cannot commit whole
            if uow is not None:
                self.store.backout(uow)
                self.backout_counts.bump(gets)
            return _backed_out(failed)
        if uow is not None:
            self.store.commit(uow)
            self.backout_counts.forget(gets)
        return {"ok": True}

    def _backout(self, req: dict[str, Any], session: Session) -> dict[str, Any]:
        uow = session.state.pop("uow", None)
        gets = session.state.pop("uow_gets", [])
        session.state.pop("uow_failed", None)
        if uow is not None:
            self.store.backout(uow)
            self.backout_counts.bump(gets)
        return {"ok": True}

    # -- streaming consumers ---------------------------------------------------------
    def _consume(self, req: dict[str, Any], session: Session) -> dict[str, Any]:
        """Start pushing messages of ``queue``, up to ``prefetch`` ahead (streaming.py)."""
        name = str(req["queue"])
        if not self._exists(name):
            target = self._alias_target(name, "GET")
            if target is None or not self._exists(target):
                return error_reply(MQRC_UNKNOWN_OBJECT_NAME,
                                   unknown_queue_text(name))
            name = target
        self._note_handle(session, name, "INPUT")
        subs = session.state.setdefault("subs", {})
        sub_id = int(req.get("sub") or len(subs) + 1)
        if sub_id in subs:
            return error_reply(MQRC_OPTIONS_ERROR, f"consumer {sub_id} is already running")
        if len(subs) >= MAX_HANDLES:
            return error_reply(MQRC_HANDLE_NOT_AVAILABLE, f"this connection has {len(subs)} "
                               "consumers, the most it may have: cancel one first (MQRC "
                               "2017 MQRC_HANDLE_NOT_AVAILABLE)")
        prefetch = max(1, min(int(req.get("prefetch") or 100), 10_000))
        sub = Subscription(self.store, session, sub_id, name, prefetch, self.backout_counts,
                           on_got=self._count_got, packed=bool(req.get("packed")))
        subs[sub_id] = sub
        session.owes_ack = functools.partial(_owes_ack, subs)
        self._hook(session)
        run_as_ordinary()  # this session thread, and the stream's threads it starts
        sub.start()
        return {"ok": True, "sub": sub_id}

    def _ack(self, req: dict[str, Any], session: Session) -> dict[str, Any]:
        sub = session.state.get("subs", {}).get(int(req["sub"]))
        if sub is not None:
            sub.ack(int(req["batch"]))
        return {"ok": True}

    def _cancel(self, req: dict[str, Any], session: Session) -> dict[str, Any]:
        sub = session.state.get("subs", {}).pop(int(req["sub"]), None)
        if sub is not None:
            handed = {int(k): int(v) for k, v in (req.get("handed") or {}).items()}
            sub.stop(handed=handed)
        return {"ok": True}

    def _prepare(self, req: dict[str, Any], session: Session) -> dict[str, Any]:
        uow = session.state.pop("uow", None)
        if uow is None:
            return error_reply(MQRC_OPTIONS_ERROR, "there is no unit of work to prepare")
        xid = self.store.prepare(uow, owner=getattr(session, "principal", None))
        return {"ok": True, "xid": xid}

    def _others_unit(self, xid: str, session: Session) -> str | None:
        """The principal that prepared unit ``xid`` when it is not ``session``'s and the
        session may not resolve units of others (CHG on the queue manager, or admin);
        else None. Any principal with CONNECT listed every in-doubt unit and committed
        or backed out another application's. The store keeps who prepared a unit with
        its PREPARE record, so this holds after a restart or failover too."""
        principal = getattr(session, "principal", None)
        owner = self.store.unit_owner(xid)
        if owner is None or principal is None or owner == principal or \
                self.authorizer.allows(principal, authz.QMGR, authz.SELF, "CHG"):
            return None
        return owner

    def _resolve(self, req: dict[str, Any], session: Session) -> dict[str, Any]:
        xid = str(req["xid"])
        if self._others_unit(xid, session) is not None:
            return self.authorizer.refuse(session.principal, authz.QMGR, self.qmgr, "CHG")
        self.store.resolve(xid, bool(req["commit"]))
        return {"ok": True}

    def _in_doubt(self, req: dict[str, Any], session: Session) -> dict[str, Any]:
        return {"ok": True, "xids": [x for x in self.store.in_doubt()
                                     if self._others_unit(str(x), session) is None]}

    # -- administration --------------------------------------------------------------
    def _status(self, req: dict[str, Any], session: Session) -> dict[str, Any]:
        return {"ok": True, "status": _jsonable(self.store.status())}

    def _logger_dump(self, req: dict[str, Any], session: Session) -> dict[str, Any]:
        return {"ok": True, "logger": _jsonable(self.store.logger_dump())}

    def _checkpoint(self, req: dict[str, Any], session: Session) -> dict[str, Any]:
        self.store.checkpoint()
        return {"ok": True}

    def _media_lines(self) -> list[str]:
        """AMQ7467/AMQ7468 after a media operation, as rcdmqimg prints them."""
        st = {k.upper(): v for k, v in (self.store.status() or {}).items()}
        lines = []
        if st.get("RECLOG"):
            lines.append(f"AMQ7467I: The oldest log file required to start queue manager "
                         f"{self.qmgr} is {st['RECLOG']}.")
        if st.get("MEDIALOG"):
            lines.append(f"AMQ7468I: The oldest log file required to perform media recovery "
                         f"of queue manager {self.qmgr} is {st['MEDIALOG']}.")
        return lines

    def _media_targets(self, req: dict[str, Any], damaged: bool = False) -> list[str]:
        """The queues a media op names (``name``, a trailing ``*`` generic); with
        ``damaged``, a generic name matches the damaged queues too (rcrmqobj is how they
        are recreated)."""
        name = str(req["name"])
        if name.endswith("*"):
            names = {_qname(q) for q in self.store.list_queues(name)}
            if damaged:
                names.update(self._damaged(name))
            return sorted(names)
        return [name]

    def _rcdmqimg(self, req: dict[str, Any], session: Session) -> dict[str, Any]:
        lines = []
        for name in self._media_targets(req):
            self.store.record_image(name)
            lines.append(f"AMQ7086I: Media image for object {name}, type queue recorded.")
        return {"ok": True, "lines": lines + self._media_lines()}

    def _rcrmqobj(self, req: dict[str, Any], session: Session) -> dict[str, Any]:
        lines = []
        for name in self._media_targets(req, damaged=True):
            self.store.recreate_object(name)
            lines.append(f"AMQ7107I: Object {name}, type queue recreated.")
        return {"ok": True, "lines": lines}

    # -- MQSC ------------------------------------------------------------------------
    def _mqsc(self, req: dict[str, Any], session: Session) -> dict[str, Any]:
        cmd = mqsc.Command.from_dict(req["command"])
        bad = wire_command_error(cmd)
        if bad is not None:
            return {"ok": True, "failed": True, "lines": [
                mqsc.MSG_SYNTAX, one_line(cmd.text, 80), f"({bad})"]}
        refused = self.authorizer.check_mqsc(cmd, session)
        if refused is not None:
            return {"ok": True, "failed": True, "lines": [refused]}
        try:
            if cmd.objtype in ("AUTHREC", "SECURITY"):
                lines = self.authorizer.execute(cmd)
            else:
                lines = self.authorizer.filter_display(cmd, session,
                                                       self._execute(cmd, session))
        except (ObjectError, MessagingError) as exc:
            return {"ok": True, "failed": True, "lines": [_amq_line(exc, cmd)]}
        except MiqmError as exc:
            return {"ok": True, "failed": True, "lines": [_amq_line(exc, cmd)]}
        failed = bool(lines) and lines[0][7:8] == "E" and lines[0].startswith("AMQ")
        return {"ok": True, "failed": failed, "lines": lines}

    def _instance_status(self) -> dict[str, Any]:
        """DISPLAY QMSTATUS's fields of the instance that answers: which host, since when,
        how many connections, whether a standby may take over (what an administrator
        asks first during a failover)."""
        date, clock = mqsc.mq_date_time(self.started_at)
        with self._sessions_lock:
            conns = len(self._sessions)
        out: dict[str, Any] = {"STARTDA": date, "STARTTI": clock, "CONNS": conns}
        if self.host_name:
            out["INSTANCE"] = self.host_name
        if self.standby_permitted is not None:
            out["STANDBY"] = "PERMITTED" if self.standby_permitted else "NOPERMIT"
        return out

    def _exists(self, name: str) -> bool:
        return any(_qname(q) == name for q in self.store.list_queues(name))

    def _execute(self, cmd: mqsc.Command, session: Session | None = None) -> list[str]:
        """One MQSC command's response lines; ``session`` is the connection that issued it
        (its own handles do not stop its DELETE QLOCAL)."""
        admin = self._admin_ops().get((cmd.verb, cmd.objtype))
        if admin is not None:
            return admin(cmd)
        if cmd.verb == "PING":
            return [mqsc.MSG_PING]
        if cmd.objtype == "QMSTATUS":
            status = {**_jsonable(self.store.status()), **self._instance_status()}
            return mqsc.qmstatus_display(self.qmgr, status, cmd.show)
        if cmd.objtype == "QMGR":
            if cmd.verb == "ALTER":
                self.store.set_qmgr_attrs(**cmd.attrs)
                return [mqsc.MSG_QMGR_CHANGED]
            return mqsc.qmgr_display(self.qmgr, self.store.qmgr_attrs(), cmd.show)
        if cmd.objtype != "QLOCAL":
            return [f"AMQ8101E: {cmd.verb} {cmd.objtype} is not supported."]
        damaged = self._damaged(cmd.name)
        if cmd.verb == "DISPLAY":
            if cmd.generic:
                queues = self.store.list_queues(cmd.name)
                if not queues and not damaged:
                    return [mqsc.not_found(cmd.name)]
            else:
                if cmd.name in damaged:
                    return [self._damaged_line(cmd.name, damaged[cmd.name])]
                if not self._exists(cmd.name):
                    return [mqsc.not_found(cmd.name)]
                queues = [self.store.queue_attrs(cmd.name)]
            lines: list[str] = []
            for q in queues:
                attrs = self._with_procs(dict(q))
                attrs.setdefault("QUEUE", _qname(q) or cmd.name)
                lines += mqsc.queue_display(attrs, cmd.show)
            # a generic DISPLAY shows the queues it can, and a line for each damaged one
            return lines + [self._damaged_line(n, why) for n, why in damaged.items()]
        if cmd.name in damaged and cmd.verb != "DELETE":
            # DEFINE without REPLACE: it exists (AMQ8150), as before; REPLACE, ALTER and
            # the rest cannot change a queue whose file is gone: say what can
            if cmd.verb == "DEFINE" and "REPLACE" not in cmd.options:
                return [mqsc.already_exists()]
            return [self._damaged_line(cmd.name, damaged[cmd.name])]
        exists = self._exists(cmd.name) or cmd.name in damaged
        if cmd.verb == "DEFINE":
            attrs = dict(cmd.attrs)
            if cmd.like:
                if not self._exists(cmd.like):
                    return [mqsc.not_found(cmd.like)]
                base = {k.upper(): v for k, v in self.store.queue_attrs(cmd.like).items()}
                attrs = {**{k: base[k] for k in mqsc.QUEUE_ATTRS if k in base}, **attrs}
            if exists:
                if "REPLACE" not in cmd.options:
                    return [mqsc.already_exists()]
                self.store.alter_queue(cmd.name, **attrs)
                return [mqsc.MSG_CREATED]
            self.store.define_queue(cmd.name, **attrs)  # refuses a name it cannot file
            return [mqsc.MSG_CREATED]
        if not exists:
            return [mqsc.not_found(cmd.name)]
        if cmd.verb == "ALTER":
            self.store.alter_queue(cmd.name, **cmd.attrs)
            return [mqsc.MSG_CHANGED]
        if cmd.verb == "DELETE":
            # another connection has it open: MQ refuses too
            in_use = self._in_use(cmd.name, besides=session)
            if in_use:
                return [in_use]
            # the store refuses a non-empty queue without purge (AMQ8143) or one in use
            self.store.delete_queue(cmd.name, purge="PURGE" in cmd.options)
            if session is not None:  # the issuing connection's own handle ends with it
                with self._sessions_lock:
                    session.state.get("handles", {}).pop(cmd.name, None)
            return [mqsc.MSG_DELETED]
        return [f"AMQ8101E: {cmd.verb} QLOCAL is not supported."]


    # -- connections and open handles ------------------------------------------------
    # A connection is registered by its hello (process id and application tag from the
    # client) or its first use of a queue. A handle is a connection's use of a queue with
    # open options: opened explicitly (op ``open`` with ``options``) or by the first put
    # (OUTPUT), get (INPUT), browse (BROWSE) or consumer (INPUT) on the queue, and open
    # until ``qclose`` or the end of the connection — what IPPROCS/OPPROCS count.

    def conn_id(self, session: Session) -> str:
        """The connection's CONN id as DISPLAY CONN shows it (16 hexadecimal digits)."""
        return f"{self._conn_prefix}{session.id & 0xFFFFFFFF:08X}"

    def _register(self, session: Session, req: dict[str, Any] | None = None) -> None:
        req = req or {}
        with self._sessions_lock:
            info = session.state.get("conn")
            if info is None:
                info = session.state["conn"] = {"pid": 0, "appltag": "",
                                                "conntime": time.time()}
                self._sessions[session.id] = session
                first = True
            else:
                first = False
            if req.get("pid") is not None:
                try:
                    info["pid"] = int(req["pid"])
                except (TypeError, ValueError):
                    pass
            if req.get("appltag"):
                # what the client says it is, shown by DISPLAY CONN and QSTATUS: a line
                # break or control character in it forged lines of runmqsc's output, and
                # parentheses forged attributes ("x) USERID(admin") for a script reading it
                info["appltag"] = "".join(c if c.isprintable() and c not in "()" else "?"
                                          for c in str(req["appltag"])[:28])
        if first:
            session.on_close(self._unregister)

    def _unregister(self, session: Session) -> None:
        self._backout_on_close(session)  # its unit of work first: a queue it used is free
        for name in list(session.state.get("dynamic", {})):
            try:
                if session.state["dynamic"][name] == "TEMPDYN":
                    self.store.delete_queue(name, purge=True)
            except MiqmError:
                pass
        with self._sessions_lock:
            self._sessions.pop(session.id, None)
            session.state.pop("handles", None)

    def _note_handle(self, session: Session | None, queue: str, mode: str) -> None:
        """Record that ``session`` has ``queue`` open with ``mode`` (slow path: first use)."""
        if session is None:
            return
        if "conn" not in session.state:
            self._register(session)
        with self._sessions_lock:
            handles = session.state.setdefault("handles", {})
            handles.setdefault(queue, set()).add(mode)

    def _handles(self, queue_pattern: str = "*") -> list[tuple[Session, str, set[str]]]:
        """(session, queue, open options) of every open handle on a matching queue."""
        import fnmatch

        out = []
        with self._sessions_lock:
            for session in self._sessions.values():
                for q, modes in session.state.get("handles", {}).items():
                    if fnmatch.fnmatchcase(q, queue_pattern):
                        out.append((session, q, set(modes)))
        return out

    def _procs(self, queue: str) -> tuple[int, int]:
        """(IPPROCS, OPPROCS): handles open on ``queue`` for input and for output."""
        ip = op = 0
        with self._sessions_lock:
            for session in self._sessions.values():
                modes = session.state.get("handles", {}).get(queue)
                if modes:
                    ip += "INPUT" in modes
                    op += "OUTPUT" in modes
        return ip, op

    def _with_procs(self, attrs: dict[str, Any]) -> dict[str, Any]:
        name = _qname(attrs)
        if name:
            attrs["IPPROCS"], attrs["OPPROCS"] = self._procs(name)
        return attrs

    # -- aliases and dynamic queues --------------------------------------------------
    def _object(self, kind: str, name: str) -> dict[str, Any] | None:
        """A QALIAS/QMODEL definition (None if none, or the store keeps no such objects)."""
        get = getattr(self.store, "get_object", None)
        return None if get is None else get(kind, name)

    def _alias_target(self, name: str, what: str) -> str | None:
        """The queue alias ``name`` resolves to (None if it is no alias); a put or get
        through a disabled alias is refused as MQ refuses it (2051, 2016)."""
        alias = self._object("QALIAS", name)
        if alias is None:
            return None
        if what == "PUT" and alias.get("PUT", "ENABLED") != "ENABLED":
            raise MessagingError(f"puts are inhibited on queue alias '{name}' (MQRC 2051)",
                                 mqrc=MQRC_PUT_INHIBITED)
        if what == "GET" and alias.get("GET", "ENABLED") != "ENABLED":
            raise MessagingError(f"gets are inhibited on queue alias '{name}' (MQRC 2016)",
                                 mqrc=MQRC_GET_INHIBITED)
        return str(alias["TARGET"])

    def _on_queue(self, fn: Callable[..., Any], queue: str, what: str, *args: Any,
                  **kwargs: Any) -> tuple[Any, str]:
        """``fn(queue, ...)``; if ``queue`` is no local queue but an alias, again on its
        target (so a local queue's put or get pays nothing for aliases)."""
        try:
            return fn(queue, *args, **kwargs), queue
        except MessagingError as exc:
            if exc.mqrc != MQRC_UNKNOWN_OBJECT_NAME:
                raise
            target = self._alias_target(queue, what)
            if target is None:
                raise
            return fn(target, *args, **kwargs), target

    def _make_dynamic(self, model: dict[str, Any], pattern: str,
                      session: Session | None) -> str:
        """MQOPEN of a model queue: a new local queue with the model's attributes, named
        from ``pattern`` (MQ's DynamicQName: a name, or a prefix ending in ``*``)."""
        pattern = pattern.strip()
        if not re.fullmatch(r"[A-Za-z0-9._/%]{1,48}|[A-Za-z0-9._/%]{0,32}\*", pattern):
            raise MessagingError(f"dynamic queue name {pattern!r} is not valid: a name of up "
                                 "to 48 characters, or a prefix of up to 32 ending in * "
                                 "(MQRC 2011 MQRC_DYNAMIC_Q_NAME_ERROR)",
                                 mqrc=MQRC_DYNAMIC_Q_NAME_ERROR)
        if pattern.endswith("*"):
            with self._count_lock:
                self._dyn_seq += 1
                seq = self._dyn_seq
            name = f"{pattern[:-1]}{int(time.time()):08X}{self._conn_prefix}{seq:04X}"[:48]
        else:
            name = pattern
        made = (session.state.get("dynamic") or {}) if session is not None else {}
        if len(made) >= MAX_HANDLES:
            raise MessagingError(f"this connection has made {len(made)} dynamic queues, the "
                                 "most one connection may make: close (delete) one first "
                                 "(MQRC 2017 MQRC_HANDLE_NOT_AVAILABLE)",
                                 mqrc=MQRC_HANDLE_NOT_AVAILABLE)
        unsafe = unfiled_queue_name(name)
        if unsafe is not None:
            raise MessagingError(f"dynamic queue name {pattern!r} is not valid: {unsafe} "
                                 "(MQRC 2011 MQRC_DYNAMIC_Q_NAME_ERROR)",
                                 mqrc=MQRC_DYNAMIC_Q_NAME_ERROR)
        deftype = str(model.get("DEFTYPE", "TEMPDYN"))
        attrs = {k: v for k, v in model.items() if k in mqsc.QUEUE_ATTRS}
        self.store.define_queue(name, DEFTYPE=deftype, **attrs)
        if session is not None:
            if "conn" not in session.state:
                self._register(session)
            session.state.setdefault("dynamic", {})[name] = deftype
        return name

    def _drop_temporary_queues(self) -> None:
        """Temporary dynamic queues die with their connection; at a restart or failover
        none of those connections is left, so none of the queues is (as in MQ)."""
        try:
            # not list_queues: copying every definition cost 15 ms of a takeover at
            # 5,000 queues (issue 22)
            names = self.store.queues_with("DEFTYPE", "TEMPDYN")
        except (MiqmError, AttributeError):
            return
        for name in names:
            try:
                self.store.delete_queue(name, purge=True)
            except MiqmError:
                pass

    # -- connection authentication (ALTER QMGR CONNAUTH) ----------------------------
    @property
    def listener(self) -> Any:
        """The listener serving this service (set by the controller): DISPLAY LSSTATUS,
        and whose credential check ALTER QMGR CONNAUTH turns on and off."""
        return self._listener

    @listener.setter
    def listener(self, listener: Any) -> None:
        self._listener = listener
        auth = getattr(listener, "authenticator", None)
        self._auth_possible = bool(getattr(auth, "required", False))
        self._apply_connauth()

    def _connauth(self) -> str:
        """The CONNAUTH value: the queue manager's (ALTER QMGR), else the default
        authentication object when the listener has credentials to check, else blank."""
        attrs = self.store.qmgr_attrs() if hasattr(self.store, "qmgr_attrs") else {}
        if "CONNAUTH" in attrs:
            return str(attrs["CONNAUTH"]).strip()
        return DEFAULT_CONNAUTH if self._auth_possible else ""

    def _apply_connauth(self) -> None:
        """Make the listener's credential check follow CONNAUTH (new connections)."""
        auth = getattr(self._listener, "authenticator", None)
        if auth is not None and self._auth_possible:
            auth.required = bool(self._connauth())

    def _alter_qmgr(self, cmd: mqsc.Command) -> list[str]:
        """ALTER QMGR; CONNAUTH is refused where there are no credentials to check."""
        if cmd.attrs.get("CONNAUTH", "").strip() and not self._auth_possible:
            return [amq.line("AMQ1110", severity=True, qmgr=self.qmgr)]
        self.store.set_qmgr_attrs(**cmd.attrs)
        if "CONNAUTH" in cmd.attrs:
            self._apply_connauth()
        return [mqsc.MSG_QMGR_CHANGED]

    def _display_qmgr(self, cmd: mqsc.Command) -> list[str]:
        attrs = dict(self.store.qmgr_attrs())
        attrs["CONNAUTH"] = self._connauth()
        return mqsc.qmgr_display(self.qmgr, attrs, cmd.show)

    # -- MQSC for daily administration -----------------------------------------------
    def _admin_ops(self) -> dict[tuple[str, str], Callable[[mqsc.Command], list[str]]]:
        return {
            ("CLEAR", "QLOCAL"): self._mqsc_clear,
            ("DISPLAY", "QSTATUS"): self._mqsc_qstatus,
            ("DISPLAY", "CONN"): self._mqsc_conn,
            ("STOP", "CONN"): self._mqsc_stop_conn,
            ("RESET", "QSTATS"): self._mqsc_reset_qstats,
            ("DISPLAY", "LSSTATUS"): self._mqsc_lsstatus,
            ("DISPLAY", "LOG"): self._mqsc_log,
            ("DISPLAY", "QUEUE"): self._mqsc_any_queue,
            ("ALTER", "QMGR"): self._alter_qmgr,
            ("DISPLAY", "QMGR"): self._display_qmgr,
            **{(v, k): self._mqsc_object for v in ("DEFINE", "ALTER", "DELETE", "DISPLAY")
               for k in ("QALIAS", "QMODEL")},
        }

    def _mqsc_clear(self, cmd: mqsc.Command) -> list[str]:
        if not self._exists(cmd.name):
            damaged = self._damaged(cmd.name)
            if cmd.name in damaged:
                return [self._damaged_line(cmd.name, damaged[cmd.name])]
            return [mqsc.not_found(cmd.name)]
        in_use = self._in_use(cmd.name)
        if in_use:
            return [in_use]
        self.store.clear_queue(cmd.name)
        return [mqsc.MSG_CLEARED]

    def _damaged(self, pattern: str) -> dict[str, str]:
        """The damaged queues matching ``pattern``, with why (none from a store that does
        not say)."""
        fn = getattr(self.store, "damaged", None)
        return dict(fn(pattern)) if fn is not None else {}

    def _damaged_line(self, name: str, why: str) -> str:
        """MQ's AMQ7472 for a damaged queue, with what the administrator can do."""
        return (f"{amq.line('AMQ7472', severity=True, name=name)[:-1]}: {why}. Delete it "
                f"with DELETE QLOCAL({name}) and define it again, or, with linear logging, "
                f"recreate it from its media image with 'rcrmqobj -m {self.qmgr} -t queue "
                f"{name}'.")

    def _in_use(self, name: str, besides: Session | None = None) -> str | None:
        """AMQ8148 naming the connections (other than ``besides``) that have queue
        ``name`` open (CLEAR and DELETE QLOCAL are refused while any has, as MQ refuses
        them), or None."""
        held = [h for h in self._handles(name) if h[1] == name and h[0] is not besides]
        if not held:
            return None
        who = ", ".join(sorted({self.conn_id(s) for s, _q, _m in held}))
        return (f"{amq.line('AMQ8148', severity=True, name=name)} The queue is open "
                f"(MQRC 2042 MQRC_OBJECT_IN_USE) by connection {who}: see DISPLAY "
                f"QSTATUS({name}) TYPE(HANDLE).")

    def _queue_names(self, pattern: str) -> list[str]:
        return [_qname(q) for q in self.store.list_queues(pattern)]

    def _mqsc_qstatus(self, cmd: mqsc.Command) -> list[str]:
        names = self._queue_names(cmd.name)
        if not names:
            return [mqsc.not_found(cmd.name)]
        lines: list[str] = []
        if cmd.attrs.get("TYPE") == "HANDLE":
            for session, q, modes in sorted(self._handles(cmd.name),
                                            key=lambda h: (h[1], h[0].id)):
                if q not in names:  # a handle on a queue deleted since
                    continue
                info = session.state.get("conn", {})
                inq = "INQUIRE" in modes
                fields = {
                    "APPLTAG": info.get("appltag", ""), "APPLTYPE": "USER",
                    "BROWSE": "YES" if "BROWSE" in modes else "NO", "CHANNEL": "",
                    "CONN": self.conn_id(session), "CONNAME": _address(session.peer),
                    "HSTATE": "ACTIVE" if session.state.get("subs") else "INACTIVE",
                    "INPUT": "SHARED" if "INPUT" in modes else "NO",
                    "INQUIRE": "YES" if inq else "NO",
                    "OUTPUT": "YES" if "OUTPUT" in modes else "NO",
                    "PID": info.get("pid", 0), "USERID": session.principal or "",
                }
                lines += mqsc.status_display(
                    mqsc.MSG_DISPLAY_QSTATUS, [("QUEUE", q), ("TYPE", "HANDLE")], fields,
                    mqsc.QSTATUS_HANDLE_ATTRS, cmd.show)
            return lines
        monq = str(self.store.qmgr_attrs().get("MONQ", "MEDIUM"))
        for name in names:
            st = self.store.queue_status(name)
            ip, op = self._procs(name)
            fields: dict[str, Any] = {"CURDEPTH": st["CURDEPTH"], "IPPROCS": ip,
                                      "OPPROCS": op, "UNCOM": st["UNCOM"], "MONQ": monq}
            on = monq != "OFF"
            fields["LPUTDATE"], fields["LPUTTIME"] = mqsc.mq_date_time(st["LPUT"] if on else 0)
            fields["LGETDATE"], fields["LGETTIME"] = mqsc.mq_date_time(st["LGET"] if on else 0)
            fields["MSGAGE"] = st["MSGAGE"] if on and st["MSGAGE"] is not None else ""
            short, long_ = st["QTIME"]
            fields["QTIME"] = (f"{int(short)}, {int(long_)}" if on and short is not None
                               else " , ")
            lines += mqsc.status_display(
                mqsc.MSG_DISPLAY_QSTATUS, [("QUEUE", name), ("TYPE", "QUEUE")], fields,
                mqsc.QSTATUS_QUEUE_ATTRS, cmd.show)
        return lines

    def _sessions_matching(self, conn: str) -> list[Session]:
        with self._sessions_lock:
            sessions = sorted(self._sessions.values(), key=lambda s: s.id)
        return [s for s in sessions if conn == "*" or self.conn_id(s) == conn]

    def _uow_log(self, uow: Any) -> str:
        """MQ's UOWLOG: the log extent holding the first record of the connection's unit
        of work, blank if it has written none. The unit whose UOWLOG is DISPLAY QMSTATUS's
        RECLOG is the one holding the log (MiqmLogSpaceNearlyFull, AMQ7469); UOWSTATE alone
        showed every connection waiting in a get under syncpoint as ACTIVE too."""
        lsn = getattr(uow, "first_lsn", None)
        if lsn is None:
            return ""
        try:
            name = str(self.store.log.extent_for_lsn(lsn))
        except Exception:  # the extent already reused (a unit AMQ7469 backed out)
            return ""
        return "" if name == "?" else name

    def _mqsc_conn(self, cmd: mqsc.Command) -> list[str]:
        sessions = self._sessions_matching(cmd.name)
        if not sessions and cmd.name != "*":
            return [mqsc.not_found(cmd.name)]
        ctype = cmd.attrs.get("TYPE", "CONN")
        lines: list[str] = []
        for s in sessions:
            info = s.state.get("conn", {})
            date, tod = mqsc.mq_date_time(info.get("conntime"))
            fields: dict[str, Any] = {
                "EXTCONN": f"414D5143{self.qmgr.encode().hex().upper()}"[:32].ljust(32, "0"),
                "TYPE": "CONN", "PID": info.get("pid", 0),
                "APPLTAG": info.get("appltag", ""), "APPLTYPE": "USER", "CHANNEL": "",
                "CONNAME": _address(s.peer), "CONNDATE": date, "CONNTIME": tod,
                "UOWLOG": self._uow_log(s.state.get("uow")),
                "UOWSTATE": "ACTIVE" if s.state.get("uow") is not None else "NONE",
                "USERID": s.principal or "",
            }
            if ctype in ("CONN", "ALL"):
                lines += mqsc.status_display(mqsc.MSG_DISPLAY_CONN,
                                             [("CONN", self.conn_id(s))], fields,
                                             mqsc.CONN_ATTRS, cmd.show)
            if ctype in ("HANDLE", "ALL"):
                for q, modes in sorted(s.state.get("handles", {}).items()):
                    opts = ",".join(f"MQOO_{m}" if m != "INPUT" else "MQOO_INPUT_SHARED"
                                    for m in _OPEN_MODES if m in modes)
                    lines += [mqsc.MSG_DISPLAY_CONN, *mqsc.attr_columns([
                        ("CONN", self.conn_id(s)), ("TYPE", "HANDLE"), ("OBJNAME", q),
                        ("OBJTYPE", "QUEUE"), ("OPENOPTS", opts),
                        ("HSTATE", "ACTIVE" if s.state.get("subs") else "INACTIVE")])]
        return lines

    def _mqsc_stop_conn(self, cmd: mqsc.Command) -> list[str]:
        sessions = self._sessions_matching(cmd.name)
        if not sessions:
            return [mqsc.not_found(cmd.name)]
        for s in sessions:
            s.abort()  # the session's thread ends it: unit of work backed out, handles closed
        return [mqsc.MSG_CONN_STOPPED]

    def _mqsc_reset_qstats(self, cmd: mqsc.Command) -> list[str]:
        names = self._queue_names(cmd.name)
        if not names:
            return [mqsc.not_found(cmd.name)]
        lines: list[str] = []
        for name in names:
            st = self.store.reset_queue_stats(name)
            lines += mqsc.status_display(mqsc.MSG_DISPLAY_QSTATUS, [("QUEUE", name)], st,
                                         ("RESETINT", "HIGHQDPT", "MSGSIN", "MSGSOUT"),
                                         ("ALL",))
        return lines

    def _mqsc_lsstatus(self, cmd: mqsc.Command) -> list[str]:
        import fnmatch

        lst = self.listener
        if lst is None or not fnmatch.fnmatchcase(LISTENER_NAME, cmd.name):
            return [mqsc.not_found(cmd.name)]
        date, tod = mqsc.mq_date_time(self.started_at)
        host, port = lst.address
        fields = {"STATUS": "RUNNING", "PID": os.getpid(), "STARTDA": date, "STARTTI": tod,
                  "TRPTYPE": "TCP", "IPADDR": host, "PORT": port,
                  "SESSIONS": len(lst.sessions()), "SSL": "YES" if lst.tls is not None else "NO"}
        return mqsc.status_display(mqsc.MSG_DISPLAY_LSSTATUS, [("LISTENER", LISTENER_NAME)],
                                   fields, mqsc.LSSTATUS_ATTRS, cmd.show)

    def _mqsc_log(self, cmd: mqsc.Command) -> list[str]:
        st = {k.upper(): v for k, v in (self.store.status() or {}).items()
              if not k.upper().startswith("AMQ")}
        fields = {k: st[k] for k in ("CURRLOG", "RECLOG", "MEDIALOG", "LOGTYPE", "LOGPATH",
                                     "LOGUTIL", "CHECKPOINT") if k in st}
        settings = getattr(self.store, "settings", None)
        if settings is not None:
            fields["LOGPRIM"] = settings.primary_files
            fields["LOGSEC"] = settings.secondary_files
            fields["LOGFSIZE"] = int(settings.file_size) // 4096
        return mqsc.status_display(mqsc.MSG_DISPLAY_LOG, [], fields, mqsc.LOG_ATTRS,
                                   cmd.show)

    def _mqsc_any_queue(self, cmd: mqsc.Command) -> list[str]:
        """DISPLAY QUEUE / Q: local queues, aliases and models (or the TYPE asked for)."""
        qtype = cmd.attrs.get("TYPE", "ALL")
        lines: list[str] = []
        if qtype in ("ALL", "QLOCAL"):
            local = mqsc.Command("DISPLAY", "QLOCAL", cmd.name, show=cmd.show, text=cmd.text)
            if cmd.generic or self._exists(cmd.name) or self._damaged(cmd.name):
                found = self._execute(local)
                if not found[0].startswith("AMQ8147"):
                    lines += found
        for kind in ("QALIAS", "QMODEL"):
            if qtype in ("ALL", kind) and (get := getattr(self.store, "list_objects", None)):
                for name, attrs in get(kind, cmd.name):
                    lines += mqsc.object_display(kind, {"QUEUE": name, **attrs}, cmd.show)
        return lines or [mqsc.not_found(cmd.name)]

    def _mqsc_object(self, cmd: mqsc.Command) -> list[str]:
        """DEFINE/ALTER/DELETE/DISPLAY QALIAS and QMODEL (queue manager objects kept by
        the store: logged, checkpointed, recovered)."""
        kind = cmd.objtype
        if cmd.verb == "DISPLAY":
            found = self.store.list_objects(kind, cmd.name)
            if not found:
                return [mqsc.not_found(cmd.name)]
            lines: list[str] = []
            for name, attrs in found:
                lines += mqsc.object_display(kind, {"QUEUE": name, **attrs}, cmd.show)
            return lines
        old = self._object(kind, cmd.name)
        if cmd.verb == "DELETE":
            if old is None:
                return [mqsc.not_found(cmd.name)]
            self.store.set_object(kind, cmd.name, None)
            return [mqsc.MSG_DELETED]
        now = _dt.datetime.now(_dt.UTC)
        stamp = {"ALTDATE": now.strftime("%Y-%m-%d"), "ALTTIME": now.strftime("%H.%M.%S")}
        if cmd.verb == "ALTER":
            if old is None:
                return [mqsc.not_found(cmd.name)]
            self.store.set_object(kind, cmd.name, {**old, **cmd.attrs, **stamp})
            return [mqsc.MSG_CHANGED]
        if old is not None and "REPLACE" not in cmd.options:
            return [mqsc.already_exists()]
        if self._exists(cmd.name):
            return [mqsc.already_exists()]
        base = old or {"CRDATE": stamp["ALTDATE"], "CRTIME": stamp["ALTTIME"]}
        if cmd.like:
            # LIKE(another object of this type): its attributes, then the command's
            like = self._object(kind, cmd.like)
            if like is None:
                return [mqsc.not_found(cmd.like)]
            base = {**base, **{k: v for k, v in like.items()
                               if k not in ("CRDATE", "CRTIME", "ALTDATE", "ALTTIME")}}
        if kind == "QALIAS":
            defaults = {"PUT": "ENABLED", "GET": "ENABLED", "DESCR": "", "TARGTYPE": "QUEUE"}
        else:
            defaults = dict(mqsc.REPLACE_DEFAULTS["QMODEL"])
        self.store.set_object(kind, cmd.name, {**defaults, **base, **cmd.attrs, **stamp})
        return [mqsc.MSG_CREATED]


def _address(peer: str) -> str:
    """A peer ``host(port)`` as MQ's CONNAME of an inbound connection shows it: the
    address alone; blank for a connection on this host's local socket or in process, as
    MQ shows a bindings-mode connection's."""
    if peer.startswith("local"):
        return ""
    return re.sub(r"\(\d+\)$", "", peer)


def _qname(q: Any) -> str:
    if isinstance(q, str):
        return q
    for key in ("QUEUE", "queue", "NAME", "name"):
        if key in q:
            return str(q[key])
    return ""


#: verbs whose queue name may be generic (DISPLAY, RESET QSTATS)
_GENERIC_VERBS = frozenset({"DISPLAY", "RESET"})
_CONN_NAME = re.compile(r"[0-9A-Fa-f]{1,48}\Z|\*\Z")
_ATTR_NAME = re.compile(r"[A-Z][A-Z0-9]{0,31}\Z")


def _browse_position(value: Any) -> tuple[int, int] | None:
    """A browse cursor from a request ((priority, key), as a browse's reply gave it), or
    None if it is not one."""
    if (isinstance(value, list) and len(value) == 2
            and all(type(v) is int for v in value) and 0 <= value[0] <= 9 and value[1] >= 0):
        return value[0], value[1]
    return None


def wire_command_error(cmd: mqsc.Command) -> str | None:
    """Why an MQSC command that came over the wire is not one the MQSC parser could have
    made, or None. The ``mqsc`` request carries the command parsed (a dict), so a client
    that writes the dict itself passed none of the parser's checks: queues named
    ``../x``, ``/etc/passwd``, with a NUL or a line break, empty or 300 characters long
    were defined, and an authority record for principal ``bad principal\\n`` was set."""
    for text in (cmd.verb, cmd.objtype, cmd.name, cmd.like, *cmd.options, *cmd.show):
        if not isinstance(text, str) or not text.isprintable():
            return "a name or keyword holds a character that is not printable"
    for key, value in cmd.attrs.items():
        if not _ATTR_NAME.match(key):
            return f"'{one_line(key, 40)}' is not an attribute name"
        values = value if isinstance(value, (list, tuple)) else (value,)
        if any(isinstance(v, str) and not v.isprintable() for v in values):
            return f"the value of {key} holds a character that is not printable"
    if cmd.objtype == "AUTHREC":
        try:
            if cmd.name:
                authz.check_profile(cmd.name)
            if cmd.attrs.get("PRINCIPAL"):
                authz.check_principal(str(cmd.attrs["PRINCIPAL"]))
        except authz.AuthzError as exc:
            return str(exc)
        return None
    if cmd.objtype == "CONN":
        return None if _CONN_NAME.match(cmd.name) else f"'{cmd.name}' is not a connection id"
    if cmd.objtype not in QUEUE_OBJTYPES:
        return None
    generic = cmd.verb in _GENERIC_VERBS
    for what, name in (("object", cmd.name), ("LIKE", cmd.like)):
        if (what == "LIKE" and not name) or mqsc.is_object_name(
                name, generic=generic and what == "object"):
            continue
        return (f"'{name[:60]}' is not a valid {what} name (1 to 48 characters of A-Z a-z "
                "0-9 . _ / %)")
    return unfiled_queue_name(cmd.name) if cmd.verb == "DEFINE" else None


def _amq_line(exc: MiqmError, cmd: mqsc.Command) -> str:
    """A store failure inside an MQSC command as one runmqsc line."""
    mqrc = getattr(exc, "mqrc", None)
    if mqrc == MQRC_UNKNOWN_OBJECT_NAME:
        return mqsc.not_found(cmd.name)
    text = str(exc)
    m = re.match(r"^(AMQ\d{4})[A-Z]?:\s*(.*)$", text)
    if m:  # runmqsc shows a severity letter: AMQ8143E
        return f"{m.group(1)}E: {m.group(2)}"
    if exc.amq:
        return f"{exc.amq}E: {text}"
    return f"AMQ8101E: miqm error ({mqrc if mqrc else type(exc).__name__}): {text}"


def _jsonable(value: Any) -> Any:
    """Store results with datetimes, bytes and tuples made JSON-safe."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (_dt.datetime, _dt.date)):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return value
