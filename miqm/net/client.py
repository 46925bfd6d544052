"""Client side: find the active instance of a queue manager and talk to it.

Resolution (:func:`candidates`):

* ``MIQM_CONNECTION="host(port),host(port)"`` (MQ's CONNAME form): try each in order;
* otherwise bindings mode: look the queue manager up in this host's mqs.ini, open its
  data directory (a local path or ``nfs4://`` URL) and read ``listener``, the address the
  active instance recorded there.

:func:`connect` sends ``hello`` to each candidate. The first that answers as the active
instance of the right queue manager wins. If none answers: MQRC 2059
(MQRC_Q_MGR_NOT_AVAILABLE); if only standbys answer: MQRC 2543 (MQRC_STANDBY_Q_MGR).

Reconnect (``reconnect=True``) and what is retried after a failover is described on
:class:`Connection` and in docs/protocol.md.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import socket
import time
from dataclasses import dataclass
from typing import Any

from miqm.errors import ConfigError, NetError
from miqm.net.protocol import (
    MQRC_BACKED_OUT,
    MQRC_CALL_INTERRUPTED,
    MQRC_CONNECTION_BROKEN,
    MQRC_Q_MGR_NAME_ERROR,
    MQRC_Q_MGR_NOT_AVAILABLE,
    MQRC_STANDBY_Q_MGR,
    PROTOCOL_VERSION,
    read_frame,
    write_frame,
)

#: Ops a reconnecting client resends after a failover: they read state and change
#: nothing, so a second execution cannot differ from the first.
RETRY_SAFE_OPS = frozenset({"hello", "ping", "status", "logger_dump", "in_doubt"})

_CONNAME_RE = re.compile(r"^\s*([^()\s,]+)\s*\(\s*(\d{1,5})\s*\)\s*$")


@dataclass(frozen=True)
class Endpoint:
    """One address to try."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}({self.port})"


def parse_conname(text: str) -> list[Endpoint]:
    """Parse MQ's CONNAME list ``host(port),host(port)``; ConfigError naming the bad entry."""
    endpoints = []
    for part in text.split(","):
        if not part.strip():
            continue
        m = _CONNAME_RE.match(part)
        if not m or not 0 < int(m.group(2)) < 65536:
            raise ConfigError(
                f"MIQM_CONNECTION entry {part.strip()!r} is not valid: use host(port), "
                "for example MIQM_CONNECTION='hosta(1414),hostb(1414)'.", amq="AMQ9204")
        endpoints.append(Endpoint(m.group(1), int(m.group(2))))
    if not endpoints:
        raise ConfigError("MIQM_CONNECTION is set but empty: use host(port),host(port) or "
                          "unset it to connect in bindings mode.", amq="AMQ9204")
    return endpoints


def not_available(qmgr: str, detail: str = "") -> NetError:
    """MQ's AMQ8146 / MQRC 2059 error."""
    tail = f" ({detail})" if detail else ""
    return NetError(f"AMQ8146: miqm queue manager '{qmgr}' not available{tail}. "
                    f"Start it with 'strmqm {qmgr}'.", mqrc=MQRC_Q_MGR_NOT_AVAILABLE)


def standby_only(qmgr: str) -> NetError:
    """MQRC 2543: only a standby instance answered."""
    return NetError(f"AMQ8146: miqm queue manager '{qmgr}' is running as a standby "
                    "instance here and no active instance answered (MQRC 2543 "
                    "MQRC_STANDBY_Q_MGR). Connect to the active instance.",
                    mqrc=MQRC_STANDBY_Q_MGR)


def bindings_endpoint(qmgr: str) -> Endpoint:
    """The active instance's address from ``<datadir>/listener`` (bindings mode).

    QMgrNotFound (AMQ7048) if the queue manager is not defined here; NetError 2059 if
    there is no usable listener record (the queue manager is not running).
    """
    from lockfs.errors import LockFsError, VolumeNotFound
    from lockfs.volume import open_volume
    from miqm.paths import find

    entry = find(qmgr)
    try:
        volume = open_volume(entry.data_path)
        try:
            raw = volume.read_bytes("listener")
        finally:
            volume.close()
    except VolumeNotFound:
        raise not_available(qmgr, "no active instance has recorded its listener") from None
    except LockFsError as exc:
        raise not_available(qmgr, f"cannot read its data directory {entry.data_path}: "
                                  f"{exc}") from None
    try:
        rec = json.loads(raw.decode("utf-8"))
        return Endpoint(str(rec["host"]), int(rec["port"]))
    except (UnicodeDecodeError, ValueError, KeyError, TypeError):
        raise not_available(qmgr, f"the listener record in {entry.data_path} is unreadable; "
                                  "restart the queue manager to rewrite it") from None


def lock_held(volume: Any, name: str, *, probe: bool = False) -> bool | None:
    """Whether some instance holds lock file ``name`` on ``volume``; None if unknown.

    Asks without taking a lock where the backend can (posix ``F_OFD_GETLK``): a client
    must never hold ``master`` even briefly, or a standby polling at that instant, or a
    starting instance, would be refused. With ``probe=True`` (dltmqm, where nothing
    should be running) a backend without that query is asked with a non-blocking
    exclusive lock that is released at once.
    """
    from lockfs.errors import LockFsError, VolumeNotFound
    from lockfs.volume import LockMode

    try:
        f = volume.open(name)
    except VolumeNotFound:
        return False
    except LockFsError:
        return None
    try:
        query = getattr(f, "conflicting_lock", None)
        if query is not None:
            return bool(query(LockMode.EXCLUSIVE))
        if not probe:
            return None
        if f.try_lock(LockMode.EXCLUSIVE):
            f.unlock()
            return False
        return True
    except LockFsError:
        return None
    finally:
        f.close()


def standby_running(qmgr: str) -> bool:
    """Bindings mode: True if a standby instance holds ``standby`` and nobody ``master``."""
    from lockfs.errors import LockFsError
    from lockfs.volume import open_volume
    from miqm.paths import find

    try:
        volume = open_volume(find(qmgr).data_path)
    except (LockFsError, ConfigError):
        return False
    try:
        return (lock_held(volume, "standby") is True
                and lock_held(volume, "master") is False)
    finally:
        volume.close()


def candidates(qmgr: str) -> list[Endpoint]:
    """Where to look for ``qmgr``, in order (MIQM_CONNECTION, else bindings mode)."""
    conname = os.environ.get("MIQM_CONNECTION")
    if conname is not None:
        return parse_conname(conname)
    return [bindings_endpoint(qmgr)]


class Connection:
    """A connection to the active instance of one queue manager.

    ``call(op, **fields)`` sends one request and returns the reply dict when ``ok``;
    otherwise raises NetError with the reply's ``mqrc`` (the store's reason codes pass
    through: 2033, 2085, 2053, 2024, ...).

    With ``reconnect=True`` a broken connection (the active instance died or switched
    over) is re-resolved and reconnected for up to ``reconnect_timeout`` seconds, then:

    * the call in flight is resent only if it is in :data:`RETRY_SAFE_OPS` (reads);
    * a ``commit`` or ``prepare`` in flight raises 2549 (MQRC_CALL_INTERRUPTED): the
      instance may have forced its record and died before replying, so the outcome is
      unknown (as MQ reports for a reconnectable client);
    * any other call in flight raises 2009 (MQRC_CONNECTION_BROKEN) inside a unit of work
      — the server backed that work out when the session died — or 2549 outside one,
      because a put or get may or may not have happened and resending it could duplicate
      or lose a message;
    * after a unit of work was lost, further syncpoint puts/gets and ``commit`` raise 2003
      (MQRC_BACKED_OUT) until the application calls ``commit`` (which reports 2003 once) or
      ``backout``: committing only the second half of a transaction would be worse than
      failing it.
    """

    def __init__(self, qmgr: str, *, timeout: float = 5.0, reconnect: bool = False,
                 reconnect_timeout: float = 60.0, call_timeout: float = 60.0,
                 endpoints: list[Endpoint] | None = None,
                 allow_standby: bool = False) -> None:
        self.qmgr = qmgr
        self.endpoints = endpoints
        self.allow_standby = allow_standby
        #: True when connected to an instance that answered hello as a standby
        self.standby = False
        self.timeout = timeout
        self.reconnect = reconnect
        self.reconnect_timeout = reconnect_timeout
        self.call_timeout = call_timeout
        self.endpoint: Endpoint | None = None
        self.server_host = ""
        self._sock: socket.socket | None = None
        self._ids = itertools.count(1)
        self._in_uow = False
        self._uow_lost = False
        self.reconnects = 0

    # -- connecting ------------------------------------------------------------------
    def open(self) -> Connection:
        """Resolve and connect; NetError 2059/2543 (or AMQ7048) if nothing usable answers."""
        try:
            return self._open()
        except NetError as exc:
            # bindings mode has no standby address to ask; the lock files tell instead
            if (exc.mqrc == MQRC_Q_MGR_NOT_AVAILABLE and "MIQM_CONNECTION" not in os.environ
                    and standby_running(self.qmgr)):
                raise standby_only(self.qmgr) from None
            raise

    def _open(self) -> Connection:
        saw_standby = False
        errors: list[str] = []
        for ep in self.endpoints or candidates(self.qmgr):
            try:
                sock = socket.create_connection((ep.host, ep.port), timeout=self.timeout)
            except OSError as exc:
                errors.append(f"{ep}: {exc.strerror or exc}")
                continue
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.settimeout(self.timeout)
                write_frame(sock, {"v": PROTOCOL_VERSION, "id": 0, "op": "hello",
                                   "qmgr": self.qmgr})
                reply = read_frame(sock)
            except (OSError, NetError) as exc:
                sock.close()
                errors.append(f"{ep}: {exc}")
                continue
            is_standby = reply.get("mqrc") == MQRC_STANDBY_Q_MGR
            if reply.get("ok") or (is_standby and self.allow_standby):
                self._sock, self.endpoint = sock, ep
                self.server_host = str(reply.get("host", ""))
                self.standby = is_standby
                return self
            sock.close()
            if is_standby:
                saw_standby = True
            elif reply.get("mqrc") == MQRC_Q_MGR_NAME_ERROR:
                errors.append(f"{ep}: {reply.get('error')}")
            else:
                errors.append(f"{ep}: {reply.get('error')}")
        if saw_standby:
            raise standby_only(self.qmgr)
        raise not_available(self.qmgr, "; ".join(errors) if errors else "")

    def _reopen(self) -> None:
        """Keep resolving until an active instance answers or reconnect_timeout passes."""
        self._drop()
        deadline = time.monotonic() + self.reconnect_timeout
        delay = 0.05
        while True:
            try:
                self.open()
                self.reconnects += 1
                return
            except NetError:
                if time.monotonic() >= deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _drop(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
            self._sock = None

    # -- calls -----------------------------------------------------------------------
    def _roundtrip(self, request: dict[str, Any], wait: float) -> dict[str, Any]:
        assert self._sock is not None
        self._sock.settimeout(self.call_timeout + wait)
        write_frame(self._sock, request)
        reply = read_frame(self._sock)
        if reply.get("id") not in (None, request["id"]):
            raise NetError("a reply did not match its request", mqrc=MQRC_CONNECTION_BROKEN)
        return reply

    def call(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send ``op`` with ``fields``; the reply when ok, else NetError(mqrc)."""
        syncpoint = bool(fields.get("syncpoint")) and op in ("put", "get")
        if op == "backout":
            self._uow_lost = False  # the application has ended the lost unit of work
        if self._uow_lost and (syncpoint or op == "commit"):
            if op == "commit":
                self._uow_lost = False
            raise NetError("the unit of work was backed out when the connection to the "
                           "queue manager broke (MQRC 2003 MQRC_BACKED_OUT)",
                           mqrc=MQRC_BACKED_OUT)
        if self._sock is None:
            if not self.reconnect and self.endpoint is not None:
                raise NetError("the connection is closed", mqrc=MQRC_CONNECTION_BROKEN)
            self._reopen() if self.endpoint is not None else self.open()
        request = {"v": PROTOCOL_VERSION, "id": next(self._ids), "op": op, **fields}
        wait = float(fields.get("wait") or 0.0) if op == "get" else 0.0
        try:
            reply = self._roundtrip(request, wait)
        except (OSError, NetError) as exc:
            self._drop()
            was_in_uow = self._in_uow or syncpoint
            self._in_uow = False
            if not self.reconnect:
                raise NetError(f"the connection to queue manager '{self.qmgr}' broke: {exc}",
                               mqrc=MQRC_CONNECTION_BROKEN) from None
            self._reopen()
            if was_in_uow:
                self._uow_lost = op not in ("commit", "backout", "prepare")
                if op in ("commit", "prepare"):
                    # the instance may have forced the COMMIT (or PREPARE) record and died
                    # before replying: restart then keeps it. Nobody here can know.
                    raise NetError(f"the connection broke during {op}: it may or may not "
                                   "have taken effect; check before repeating the unit of "
                                   "work (MQRC 2549 MQRC_CALL_INTERRUPTED)",
                                   mqrc=MQRC_CALL_INTERRUPTED) from None
                if op == "backout":
                    return {"ok": True}
                raise NetError("the connection broke inside a unit of work, which was "
                               "backed out (MQRC 2009 MQRC_CONNECTION_BROKEN)",
                               mqrc=MQRC_CONNECTION_BROKEN) from None
            if op not in RETRY_SAFE_OPS:
                raise NetError(f"the connection broke during {op}; it may or may not have "
                               "taken effect (MQRC 2549 MQRC_CALL_INTERRUPTED)",
                               mqrc=MQRC_CALL_INTERRUPTED) from None
            request["id"] = next(self._ids)
            reply = self._roundtrip(request, wait)
        if syncpoint:
            self._in_uow = True
        if op in ("commit", "backout", "prepare"):
            self._in_uow = False
        if not reply.get("ok"):
            raise NetError(str(reply.get("error") or f"{op} failed"),
                           mqrc=int(reply.get("mqrc") or 2195), amq=reply.get("amq"))
        return reply

    def close(self) -> None:
        """Close the connection (the server backs out any open unit of work)."""
        self._drop()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(qmgr: str, timeout: float = 5.0, *, reconnect: bool = False,
            reconnect_timeout: float = 60.0, call_timeout: float = 60.0,
            endpoints: list[Endpoint] | None = None,
            allow_standby: bool = False) -> Connection:
    """Connect to the active instance of ``qmgr`` (see the module docstring).

    ``endpoints`` replaces resolution (a control command that knows the address of a
    particular instance); ``allow_standby`` accepts an instance that answers as a standby
    (for control ops such as ``end`` and ``instance``, which a standby serves).
    """
    conn = Connection(qmgr, timeout=timeout, reconnect=reconnect,
                      reconnect_timeout=reconnect_timeout, call_timeout=call_timeout,
                      endpoints=endpoints, allow_standby=allow_standby)
    if reconnect:
        # a reconnecting client also waits for the first connection, as MQ's does
        conn._reopen()
        conn.reconnects = 0
        return conn
    return conn.open()
