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
import re
import threading
from collections.abc import Callable
from typing import Any

from miqm import mqsc
from miqm.errors import MessagingError, MiqmError, ObjectError
from miqm.net.authorize import Authorizer
from miqm.net.protocol import (
    MQRC_BACKED_OUT,
    MQRC_Q_MGR_NAME_ERROR,
    MQRC_STANDBY_Q_MGR,
    MQRC_UNEXPECTED_ERROR,
    PROTOCOL_VERSION,
    b64,
    error_reply,
    unb64,
)
from miqm.net.server import Session
from miqm.net.streaming import BackoutCounts, Subscription, message_fields

MQRC_NO_MSG_AVAILABLE = 2033
MQRC_UNKNOWN_OBJECT_NAME = 2085
MQRC_RESOURCE_PROBLEM = 2102
MQRC_FUNCTION_NOT_SUPPORTED = 2298
MQRC_OPTIONS_ERROR = 2046

#: Ops whose effect does not depend on being repeated: a reconnecting client may resend
#: them after a failover without changing the outcome (see client.py).
IDEMPOTENT_OPS = frozenset({"hello", "ping", "status", "logger_dump", "in_doubt", "qmgr"})


def standby_reply() -> dict[str, Any]:
    """What a standby instance answers to every request but the control ops."""
    return error_reply(
        MQRC_STANDBY_Q_MGR,
        "this instance is a standby; the queue manager is active on another instance "
        "(MQRC_STANDBY_Q_MGR)",
        amq="AMQ8146",
    )


class QueueService:
    """Executes protocol requests against a QueueManagerStore for queue manager ``qmgr``."""

    def __init__(self, store: Any, qmgr: str, *, host_name: str = "",
                 errlog: Callable[[str, str], None] | None = None) -> None:
        self.store = store
        self.qmgr = qmgr
        self.host_name = host_name
        #: authority checks of remote identities (miqm/net/authorize.py)
        self.authorizer = Authorizer(store, qmgr, errlog)
        #: MQ's BackoutCount per message, held by this (active) instance in memory
        self.backout_counts = BackoutCounts()
        # messages put and got (destructively) through this service: the metrics endpoint
        self.messages_put = 0
        self.messages_got = 0
        self._count_lock = threading.Lock()
        self._ops: dict[str, Callable[[dict[str, Any], Session], dict[str, Any]]] = {
            "hello": self._hello, "ping": self._ping,
            "put": self._put, "get": self._get,
            "commit": self._commit, "backout": self._backout,
            "prepare": self._prepare, "resolve": self._resolve, "in_doubt": self._in_doubt,
            "mqsc": self._mqsc, "status": self._status, "logger_dump": self._logger_dump,
            "checkpoint": self._checkpoint,
            "rcdmqimg": self._rcdmqimg, "rcrmqobj": self._rcrmqobj, "open": self._open,
            "consume": self._consume, "ack": self._ack, "cancel": self._cancel,
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
            refused = self.authorizer.check(op, request, session)
            reply = fn(request, session) if refused is None else refused
        except MessagingError as exc:
            reply = error_reply(exc.mqrc, str(exc), exc.amq)
        except ObjectError as exc:
            reply = error_reply(getattr(exc, "mqrc", MQRC_UNKNOWN_OBJECT_NAME), str(exc),
                                exc.amq)
        except MiqmError as exc:
            reply = error_reply(getattr(exc, "mqrc", MQRC_RESOURCE_PROBLEM), str(exc), exc.amq)
        except (KeyError, TypeError, ValueError) as exc:
            reply = error_reply(MQRC_OPTIONS_ERROR, f"bad {op} request: {exc}")
        except Exception as exc:  # the reply says what broke; the loop goes on
            reply = error_reply(MQRC_UNEXPECTED_ERROR, f"{type(exc).__name__}: {exc}")
        if (not reply.get("ok") and request.get("async") and request.get("syncpoint")
                and op == "put" and "uow" in session.state):
            # a pipelined put of a unit of work failed and nobody has seen the reply yet:
            # the unit's commit must not succeed without it
            session.state["uow_failed"] = f"{op} failed with MQRC {reply.get('mqrc')}"
        return reply

    # -- connection ------------------------------------------------------------------
    def _hello(self, req: dict[str, Any], session: Session) -> dict[str, Any]:
        want = req.get("qmgr")
        if want and want != self.qmgr:
            return error_reply(MQRC_Q_MGR_NAME_ERROR,
                               f"this listener serves queue manager '{self.qmgr}', not '{want}'")
        return {"ok": True, "qmgr": self.qmgr, "host": self.host_name,
                "session": session.id, "version": PROTOCOL_VERSION}

    def _ping(self, req: dict[str, Any], session: Session) -> dict[str, Any]:
        return {"ok": True, "qmgr": self.qmgr}

    # -- messaging -------------------------------------------------------------------
    def _open(self, req: dict[str, Any], session: Session) -> dict[str, Any]:
        """MQOPEN's check: the queue exists (2085 otherwise); returns its attributes."""
        name = str(req["queue"])
        if not self._exists(name):
            return error_reply(MQRC_UNKNOWN_OBJECT_NAME,
                               f"queue '{name}' is not defined (MQRC 2085)")
        return {"ok": True, "attrs": _jsonable(self.store.queue_attrs(name))}

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
        priority = req.get("priority")
        msgid = self.store.put(
            str(req["queue"]), body,
            persistent=req.get("persistent"),
            priority=None if priority is None else int(priority),
            msgid=unb64(req.get("msgid")), correlid=unb64(req.get("correlid")),
            uow=self._uow(session) if req.get("syncpoint") else None,
        )
        with self._count_lock:
            self.messages_put += 1
        return {"ok": True, "msgid": b64(msgid) if isinstance(msgid, bytes) else None}

    def _get(self, req: dict[str, Any], session: Session) -> dict[str, Any]:
        browse = bool(req.get("browse"))
        under = bool(req.get("syncpoint")) and not browse
        msg = self.store.get(
            str(req["queue"]),
            msgid=unb64(req.get("msgid")), correlid=unb64(req.get("correlid")),
            wait=max(0.0, float(req.get("wait") or 0.0)), browse=browse,
            uow=self._uow(session) if under else None,
        )
        if msg is None:
            return error_reply(MQRC_NO_MSG_AVAILABLE, "no message available (MQRC 2033)")
        if under:
            session.state.setdefault("uow_gets", []).append(msg.msgid)
        reply = {"ok": True, **message_fields(msg, self.backout_counts),
                 "body": bytes(msg.body)}
        if not browse and not under:
            self.backout_counts.forget([msg.msgid])
        if not browse:
            self._count_got(1)
        return reply

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
            return error_reply(MQRC_BACKED_OUT, "the unit of work was backed out because "
                               f"one of its calls failed: {failed} (MQRC 2003)")
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
            return error_reply(MQRC_UNKNOWN_OBJECT_NAME,
                               f"queue '{name}' is not defined (MQRC 2085)")
        subs = session.state.setdefault("subs", {})
        sub_id = int(req.get("sub") or len(subs) + 1)
        if sub_id in subs:
            return error_reply(MQRC_OPTIONS_ERROR, f"consumer {sub_id} is already running")
        prefetch = max(1, min(int(req.get("prefetch") or 100), 10_000))
        sub = Subscription(self.store, session, sub_id, name, prefetch, self.backout_counts,
                           on_got=self._count_got)
        subs[sub_id] = sub
        self._hook(session)
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
        return {"ok": True, "xid": self.store.prepare(uow)}

    def _resolve(self, req: dict[str, Any], session: Session) -> dict[str, Any]:
        self.store.resolve(str(req["xid"]), bool(req["commit"]))
        return {"ok": True}

    def _in_doubt(self, req: dict[str, Any], session: Session) -> dict[str, Any]:
        return {"ok": True, "xids": list(self.store.in_doubt())}

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

    def _media_targets(self, req: dict[str, Any]) -> list[str]:
        name = str(req["name"])
        if name.endswith("*"):
            return [_qname(q) for q in self.store.list_queues(name)]
        return [name]

    def _rcdmqimg(self, req: dict[str, Any], session: Session) -> dict[str, Any]:
        lines = []
        for name in self._media_targets(req):
            self.store.record_image(name)
            lines.append(f"AMQ7086I: Media image for object {name}, type queue recorded.")
        return {"ok": True, "lines": lines + self._media_lines()}

    def _rcrmqobj(self, req: dict[str, Any], session: Session) -> dict[str, Any]:
        lines = []
        for name in self._media_targets(req):
            self.store.recreate_object(name)
            lines.append(f"AMQ7107I: Object {name}, type queue recreated.")
        return {"ok": True, "lines": lines}

    # -- MQSC ------------------------------------------------------------------------
    def _mqsc(self, req: dict[str, Any], session: Session) -> dict[str, Any]:
        cmd = mqsc.Command.from_dict(req["command"])
        refused = self.authorizer.check_mqsc(cmd, session)
        if refused is not None:
            return {"ok": True, "failed": True, "lines": [refused]}
        try:
            if cmd.objtype in ("AUTHREC", "SECURITY"):
                lines = self.authorizer.execute(cmd)
            else:
                lines = self.authorizer.filter_display(cmd, session, self._execute(cmd))
        except (ObjectError, MessagingError) as exc:
            return {"ok": True, "failed": True, "lines": [_amq_line(exc, cmd)]}
        except MiqmError as exc:
            return {"ok": True, "failed": True, "lines": [_amq_line(exc, cmd)]}
        failed = bool(lines) and lines[0][7:8] == "E" and lines[0].startswith("AMQ")
        return {"ok": True, "failed": failed, "lines": lines}

    def _exists(self, name: str) -> bool:
        return any(_qname(q) == name for q in self.store.list_queues(name))

    def _execute(self, cmd: mqsc.Command) -> list[str]:
        if cmd.verb == "PING":
            return [mqsc.MSG_PING]
        if cmd.objtype == "QMSTATUS":
            return mqsc.qmstatus_display(self.qmgr, _jsonable(self.store.status()), cmd.show)
        if cmd.objtype == "QMGR":
            if cmd.verb == "ALTER":
                self.store.set_qmgr_attrs(**cmd.attrs)
                return [mqsc.MSG_QMGR_CHANGED]
            return mqsc.qmgr_display(self.qmgr, self.store.qmgr_attrs(), cmd.show)
        if cmd.objtype != "QLOCAL":
            return [f"AMQ8101E: {cmd.verb} {cmd.objtype} is not supported."]
        if cmd.verb == "DISPLAY":
            if cmd.generic:
                queues = self.store.list_queues(cmd.name)
                if not queues:
                    return [mqsc.not_found(cmd.name)]
            else:
                if not self._exists(cmd.name):
                    return [mqsc.not_found(cmd.name)]
                queues = [self.store.queue_attrs(cmd.name)]
            lines: list[str] = []
            for q in queues:
                attrs = dict(q)
                attrs.setdefault("QUEUE", _qname(q) or cmd.name)
                lines += mqsc.queue_display(attrs, cmd.show)
            return lines
        exists = self._exists(cmd.name)
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
            self.store.define_queue(cmd.name, **attrs)
            return [mqsc.MSG_CREATED]
        if not exists:
            return [mqsc.not_found(cmd.name)]
        if cmd.verb == "ALTER":
            self.store.alter_queue(cmd.name, **cmd.attrs)
            return [mqsc.MSG_CHANGED]
        if cmd.verb == "DELETE":
            # the store refuses a non-empty queue without purge (AMQ8143) or one in use
            self.store.delete_queue(cmd.name, purge="PURGE" in cmd.options)
            return [mqsc.MSG_DELETED]
        return [f"AMQ8101E: {cmd.verb} QLOCAL is not supported."]


def _qname(q: Any) -> str:
    if isinstance(q, str):
        return q
    for key in ("QUEUE", "queue", "NAME", "name"):
        if key in q:
            return str(q[key])
    return ""


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
