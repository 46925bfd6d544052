"""Authorization in the server: each request of a remote identity checked against the
authority records before the store sees it, and the security MQSC commands.

The queue service (:mod:`miqm.net.service`) owns one :class:`Authorizer`. Its
:meth:`Authorizer.check` runs before every op; the principal is the one the listener
authenticated (``session.principal``, :mod:`miqm.net.auth`). The privileged principal
(``admin``, the credential crtmqm makes, which bindings-mode administrators use) and
in-process callers (no principal) are never checked, as members of MQ's ``mqm`` group.

What each op needs (docs/mqsc.md, "Authorization"): the first request of a connection
needs CONNECT on the queue manager; ``put`` PUT, ``get`` GET (BROWSE to browse),
``consume`` GET on the queue, ``open`` what its options need (INPUT GET, OUTPUT PUT,
BROWSE BROWSE, INQUIRE or none INQ), all checked on the name the request gives (an
alias, not its target); ``status``/``logger_dump`` DSP and
``checkpoint``/``rcdmqimg``/``rcrmqobj`` CHG on the queue manager; MQSC commands by
what they do (:func:`mqsc_needs`). An op this module does not know needs CHG on the
queue manager. A refusal is MQRC 2035 with AMQ8077 (AMQ8245 for display) in the error
log naming principal, object and missing authority, rate-limited per minute.

Lookups go through :class:`miqm.authz.AuthTable`'s cache, reloaded from the store
whenever its records changed (the store's ``authrec_serial``).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from typing import Any

from miqm import amq, authz, mqsc
from miqm.net.auth import RateLimit, loggable
from miqm.net.protocol import MQRC_NOT_AUTHORIZED, error_reply

#: queue-like MQSC object types: a command on them is checked against the QUEUE profile
QUEUE_OBJTYPES = frozenset({"QLOCAL", "QALIAS", "QMODEL", "QREMOTE", "QUEUE", "QSTATUS",
                            "QSTATS"})

#: ops that need no authority beyond CONNECT (they act on the session's own work)
_SESSION_OPS = frozenset({"hello", "ping", "commit", "backout", "prepare", "resolve",
                          "in_doubt", "ack", "cancel", "mqsc", "qclose"})
#: what each MQOPEN option needs on the queue (an open with none: INQ, MQOPEN's check)
_OPEN_OPTIONS = {"INPUT": "GET", "OUTPUT": "PUT", "BROWSE": "BROWSE", "INQUIRE": "INQ"}
_QMGR_OPS = {"status": "DSP", "logger_dump": "DSP", "checkpoint": "CHG",
             "rcdmqimg": "CHG", "rcrmqobj": "CHG"}
#: the MQI ops on one queue (``req["queue"]``)
_QUEUE_OPS = frozenset({"put", "get", "consume", "open"})

Need = tuple[str, str, str]  # (objtype, name, authority)


def mqsc_needs(cmd: mqsc.Command) -> list[Need]:
    """The authorities an MQSC command needs, as (objtype, object name, authority); a
    generic DISPLAY of queues needs none up front (queues without DSP are left out of
    its output). The queue manager is named ``self``."""
    me = authz.SELF
    if cmd.objtype in QUEUE_OBJTYPES:
        name = cmd.name
        if cmd.verb == "DISPLAY":
            return [] if cmd.generic else [(authz.QUEUE, name, "DSP")]
        if cmd.verb == "DEFINE":
            needs = [(authz.QUEUE, name, "CRT")]
            if cmd.like:
                needs.append((authz.QUEUE, cmd.like, "DSP"))
            return needs
        auth = {"ALTER": "CHG", "DELETE": "DLT", "CLEAR": "CLR"}.get(cmd.verb, "CHG")
        return [(authz.QUEUE, name, auth)]
    if cmd.verb in ("DISPLAY", "PING"):
        return [(authz.QMGR, me, "DSP")]
    return [(authz.QMGR, me, "CHG")]


class Authorizer:
    """Checks requests of one queue manager's sessions; executes the security commands.

    ``errlog(number, line)`` receives the refusal lines (the controller's error log);
    ``on_refresh`` callables run on REFRESH SECURITY (the listener re-reads its
    credentials file).
    """

    def __init__(self, store: Any, qmgr: str,
                 errlog: Callable[[str, str], None] | None = None,
                 *, log_per_minute: int = 30, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self.store = store
        self.qmgr = qmgr
        self.table = authz.AuthTable((), serial=-1)  # loaded from the store at first use
        self.on_refresh: list[Callable[[], None]] = []
        self.refusals = 0
        self._errlog = errlog
        self._log_limit = RateLimit(log_per_minute, clock)
        self._lock = threading.Lock()
        self._change = threading.Lock()  # one SET/DELETE AUTHREC's read-modify-write at a time

    # -- lookups -------------------------------------------------------------------
    def _current(self) -> authz.AuthTable:
        serial = getattr(self.store, "authrec_serial", 0)
        table = self.table
        if table.serial != serial:
            with self._lock:
                if self.table.serial != serial:
                    source = getattr(self.store, "authrecs", None)  # a store without
                    raw = source() if source is not None else []   # records: none
                    self.table.load([authz.AuthRec.from_dict(r) for r in raw], serial)
        return self.table

    def allows(self, principal: str, objtype: str, name: str, auth: str) -> bool:
        """True if ``principal`` holds ``auth`` on the object."""
        return auth in self._current().lookup(principal, objtype, name)[0]

    @staticmethod
    def privileged(principal: str | None) -> bool:
        """True for identities that are never checked (admin, in-process callers)."""
        return principal is None or principal == authz.PRIVILEGED

    # -- requests ------------------------------------------------------------------
    def check(self, op: str, req: dict[str, Any], session: Any) -> dict[str, Any] | None:
        """None if ``session`` may run ``op``; else the 2035 reply (refusal logged)."""
        principal = getattr(session, "principal", None)
        if principal is None or principal == authz.PRIVILEGED:
            return None
        state = session.state
        if not state.get("authz_connect"):
            if not self.allows(principal, authz.QMGR, authz.SELF, "CONNECT"):
                return self.refuse(principal, authz.QMGR, self.qmgr, "CONNECT")
            state["authz_connect"] = True
        if op in _SESSION_OPS:
            return None
        if op in _QUEUE_OPS and str(req.get("queue", "")) in (state.get("dynamic") or ()):
            # a dynamic queue this connection made from a model (its reply queue): MQ
            # gives the creator authority to it, whatever name the model's pattern chose
            return None
        if op == "put":
            need = "PUT"
        elif op == "get":
            need = "BROWSE" if req.get("browse") else "GET"
        elif op == "consume":
            need = "GET"
        elif op == "open":
            queue = str(req.get("queue", ""))
            have = self._current().lookup(principal, authz.QUEUE, queue)[0]
            for option in req.get("options") or ("INQUIRE",):
                need = _OPEN_OPTIONS.get(str(option).upper(), "INQ")
                if need not in have:
                    return self.refuse(principal, authz.QUEUE, queue, need)
            return None
        else:
            auth = _QMGR_OPS.get(op, "CHG")
            if self.allows(principal, authz.QMGR, authz.SELF, auth):
                return None
            return self.refuse(principal, authz.QMGR, self.qmgr, auth)
        queue = str(req.get("queue", ""))
        if need in self._current().lookup(principal, authz.QUEUE, queue)[0]:
            return None
        return self.refuse(principal, authz.QUEUE, queue, need)

    def refuse(self, principal: str, objtype: str, name: str, auth: str) -> dict[str, Any]:
        """The 2035 reply for a missing authority; the refusal goes to the error log.
        ``name`` is what the request named, unchecked (a put may name any string): it is
        shown escaped and cut short (:func:`miqm.net.auth.loggable`), as a queue name
        with line breaks wrote whole forged entries into the error log."""
        name = loggable(name)
        self._log(principal, objtype, name, auth)
        target = "" if objtype == authz.QMGR else f" -n {name}"
        grant = (f"setmqaut -m {self.qmgr} -t {objtype.lower()}{target} -p {principal} "
                 f"+{auth.lower()}")
        text = amq.text("AMQ1121", qmgr=self.qmgr, principal=principal, auth=auth,
                        objtype=objtype.lower(), name=name, grant=grant)
        return error_reply(MQRC_NOT_AUTHORIZED, text, amq="AMQ8077")

    def _log(self, principal: str, objtype: str, name: str, auth: str) -> None:
        with self._lock:
            self.refusals += 1
        log, more = self._log_limit.take()
        if not log or self._errlog is None:
            return
        number = "AMQ8245" if auth == "DSP" else "AMQ8077"
        line = amq.line(number, entity=principal, name=name, objtype=objtype.lower(),
                        auths=auth.lower())
        if more:
            line += f" ({more} more refusals in the last minute were not logged.)"
        self._errlog(number, line)

    # -- MQSC ----------------------------------------------------------------------
    def check_mqsc(self, cmd: mqsc.Command, session: Any) -> str | None:
        """None if the session may run ``cmd``; else runmqsc's AMQ8135E line (the
        refusal is logged like any other)."""
        principal = getattr(session, "principal", None)
        if self.privileged(principal):
            return None
        for objtype, name, auth in self._needs(cmd):
            if not self.allows(principal, objtype, name, auth):
                shown = self.qmgr if objtype == authz.QMGR else name
                self._log(principal, objtype, shown, auth)
                return amq.line("AMQ8135", severity=True, detail=(
                    f"Principal '{principal}' lacks the {auth} authority on "
                    f"{objtype.lower()} '{shown}'."))
        return None

    def _needs(self, cmd: mqsc.Command) -> list[Need]:
        """:func:`mqsc_needs`, and what only the queue manager's objects tell:
        DEFINE ... REPLACE of a queue that exists changes it (CHG, as ALTER needs: CRT
        alone must not let a principal rewrite a queue it may not change), and a change
        of many queues by a generic name (RESET QSTATS(APP.*)) needs its authority on
        each queue it reaches, not on the generic name taken as a name."""
        needs = mqsc_needs(cmd)
        if cmd.objtype not in QUEUE_OBJTYPES:
            return needs
        if cmd.verb == "DEFINE" and "REPLACE" in cmd.options and self._queue_exists(cmd.name):
            needs.append((authz.QUEUE, cmd.name, "CHG"))
        names = self._queue_names(cmd.name) if cmd.verb != "DISPLAY" and cmd.generic else []
        if names:  # (none: the generic name is checked as given, and reaches nothing)
            auths = [a for t, _n, a in needs if t == authz.QUEUE]
            needs = [n for n in needs if n[0] != authz.QUEUE]
            needs += [(authz.QUEUE, name, a) for name in names for a in auths]
        return needs

    def _queue_names(self, pattern: str) -> list[str]:
        """The local queues ``pattern`` (a name or ``ABC*``) matches now."""
        listing = getattr(self.store, "list_queues", None)
        if listing is None:
            return []
        names = []
        for q in listing(pattern):
            name = q if isinstance(q, str) else next(
                (str(q[k]) for k in ("QUEUE", "queue", "NAME", "name") if k in q), "")
            if name:
                names.append(name)
        return names

    def _queue_exists(self, name: str) -> bool:
        """True if a local queue, alias or model called ``name`` exists."""
        if name in self._queue_names(name):
            return True
        get = getattr(self.store, "get_object", None)
        return get is not None and any(get(kind, name) is not None
                                       for kind in ("QALIAS", "QMODEL"))

    def filter_display(self, cmd: mqsc.Command, session: Any, lines: list[str]) -> list[str]:
        """A generic DISPLAY's output without the queues the principal may not display."""
        principal = getattr(session, "principal", None)
        if self.privileged(principal) or not (cmd.verb == "DISPLAY" and cmd.generic
                                              and cmd.objtype in QUEUE_OBJTYPES):
            return lines
        out: list[str] = []
        block: list[str] = []

        def flush() -> None:
            m = next((re.search(r"\bQUEUE\(([^)]*)\)", x) for x in block[1:2]), None)
            if m is None and block:  # a damaged queue's one line (AMQ7472) names it
                m = re.match(r"AMQ7472\w?: Object (\S+), type queue damaged", block[0])
            if block and (m is None or self.allows(principal, authz.QUEUE, m.group(1), "DSP")):
                out.extend(block)
            block.clear()

        for line in lines:
            if line.startswith("AMQ"):
                flush()
            block.append(line)
        flush()
        return out or [mqsc.not_found(cmd.name)]

    def execute(self, cmd: mqsc.Command) -> list[str]:
        """SET/DELETE/DISPLAY AUTHREC and REFRESH SECURITY; runmqsc's lines."""
        if cmd.verb == "REFRESH":
            self.table.refresh()
            for hook in self.on_refresh:
                hook()
            return [amq.line("AMQ8560", severity=True)]
        objtype = str(cmd.attrs.get("OBJTYPE", ""))
        principal = str(cmd.attrs.get("PRINCIPAL", ""))
        profile = cmd.name
        if objtype == authz.QMGR or (not objtype and profile.lower() == authz.SELF):
            if profile and profile.lower() != authz.SELF and profile != self.qmgr:
                return [mqsc.not_found(profile)]
            profile = authz.SELF if (profile or cmd.verb != "DISPLAY") else ""
        if cmd.verb == "DISPLAY":
            return self._display(cmd, objtype, principal, profile)
        with self._change:
            return self._change_record(cmd, objtype, profile, principal)

    def _change_record(self, cmd: mqsc.Command, objtype: str, profile: str,
                       principal: str) -> list[str]:
        key = (objtype, profile, principal)
        have = {(r["objtype"], r["profile"], r["principal"]): r["auths"]
                for r in self.store.authrecs()}
        if cmd.verb == "DELETE":
            if key not in have:
                return [amq.line("AMQ1122", severity=True, profile=profile, objtype=objtype,
                                 principal=principal)]
            self.store.set_authrec(objtype, profile, principal, None)
            return [amq.line("AMQ8863", severity=True)]
        add = authz.expand(objtype, cmd.attrs.get("AUTHADD") or ())
        rmv = authz.expand(objtype, cmd.attrs.get("AUTHRMV") or ())
        new = (set(have.get(key) or ()) | add) - rmv
        self.store.set_authrec(objtype, profile, principal, authz.ordered(objtype, new))
        return [amq.line("AMQ8862", severity=True)]

    def _display(self, cmd: mqsc.Command, objtype: str, principal: str,
                 profile: str) -> list[str]:
        match = str(cmd.attrs.get("MATCH", "PROFILE"))
        recs = self._current().select(profile=profile, objtype=objtype,
                                      principal=principal, match=match)
        if not recs:
            return [amq.line("AMQ1120", severity=True)]
        lines: list[str] = []
        for r in recs:
            lines += mqsc.authrec_display(r.as_dict())
        return lines
