"""Client side: find the active instance of a queue manager and talk to it.

Resolution (:func:`candidates`):

* ``MIQM_CONNECTION="host(port),host(port)"`` (MQ's CONNAME form): try each in order;
* otherwise bindings mode: look the queue manager up in this host's mqs.ini, open its
  data directory (a local path or ``nfs4://`` URL) and read ``listener``, the address the
  active instance recorded there, with its local socket, tried first (no TLS on this
  host; the TCP address where it does not answer).

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
import select
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from miqm.errors import ConfigError, NetError
from miqm.net.protocol import (
    MQRC_BACKED_OUT,
    MQRC_CALL_INTERRUPTED,
    MQRC_CONNECTION_BROKEN,
    MQRC_NOT_AUTHORIZED,
    MQRC_Q_MGR_NAME_ERROR,
    MQRC_Q_MGR_NOT_AVAILABLE,
    MQRC_SSL_INITIALIZATION_ERROR,
    MQRC_STANDBY_Q_MGR,
    PROTOCOL_VERSION,
    READ_TIMEOUT,
    FrameReader,
    OldProtocol,
    PeerClosed,
    ProtocolError,
    encode,
    set_deadlines,
)

#: Ops a reconnecting client resends after a failover: they read state and change
#: nothing, so a second execution cannot differ from the first.
RETRY_SAFE_OPS = frozenset({"hello", "ping", "status", "logger_dump", "in_doubt"})
#: ops that read and change nothing when their fields say so (``open`` with no options
#: is MQOPEN + MQINQ, ``get`` with ``browse``): resent after a reconnect like the above
_READ_WHEN = {"open": lambda f: "options" not in f and "dynamic" not in f,
              "get": lambda f: bool(f.get("browse")) and not f.get("syncpoint")}
#: a connection quiet for this long (seconds) is looked at before a call is sent on it:
#: the listener may have closed it (qm.ini IdleTimeout)
IDLE_PROBE_AFTER = 0.2
#: MQRC 2018 MQRC_HCONN_ERROR: a call on a connection the application closed
MQRC_HCONN_ERROR = 2018
#: MQRC 2548 MQRC_RECONNECT_FAILED: a connection that had been made could not be made
#: again within ``reconnect_timeout``
MQRC_RECONNECT_FAILED = 2548
#: MQRC 2161 MQRC_Q_MGR_QUIESCING: the instance is ending (endmqm, -c, -w)
MQRC_Q_MGR_QUIESCING = 2161
#: MQRC 2162 MQRC_Q_MGR_STOPPING: the instance is ending at once (-i, -p) or switching over
MQRC_Q_MGR_STOPPING = 2162
#: the reasons of an instance that is ending (docs/protocol.md, "Ending")
_ENDING = frozenset({MQRC_Q_MGR_QUIESCING, MQRC_Q_MGR_STOPPING})
#: what a failed connection attempt may be retried for (nothing answered, a standby, an
#: instance that is ending): anything else (2035, 2058, 2393) is a permanent answer
_TRANSIENT = frozenset({MQRC_Q_MGR_NOT_AVAILABLE, MQRC_STANDBY_Q_MGR, *_ENDING})
#: answers to hello that are final, not retried while reconnecting (2035 is raised at
#: once by itself)
_PERMANENT = {MQRC_Q_MGR_NAME_ERROR: "MQRC_Q_MGR_NAME_ERROR",
              MQRC_SSL_INITIALIZATION_ERROR: "MQRC_SSL_INITIALIZATION_ERROR"}
#: the ops a ``syncpoint`` field puts under a unit of work
_UOW_OPS = frozenset({"put", "get"})
#: what _read_one returns for a frame it queued (a push) or settled (a pipelined reply)
_PUSHED: dict[str, Any] = {"_push": True}
_SETTLED: dict[str, Any] = {"_settled": True}

_CONNAME_RE = re.compile(r"^\s*([^()\s,]+)\s*\(\s*(\d{1,5})\s*\)\s*$")


class QMgrEnding(NetError):
    """2161 (MQRC_Q_MGR_QUIESCING) or 2162 (MQRC_Q_MGR_STOPPING): the instance is ending
    and refused the call, which was not done. ``reconnect``: it asked clients to
    reconnect to another instance (endmqm -s, -r)."""

    def __init__(self, message: str, *, mqrc: int, reconnect: bool = False) -> None:
        super().__init__(message, mqrc=mqrc)
        self.reconnect = reconnect


def _ending_error(reply: dict[str, Any]) -> QMgrEnding:
    return QMgrEnding(str(reply.get("error") or "the queue manager is ending"),
                      mqrc=int(reply["mqrc"]), reconnect=bool(reply.get("reconnect")))


@dataclass(frozen=True)
class Endpoint:
    """One address to try; ``ipc``: the instance's local socket (its listener record
    names it), tried first, the TCP address if it does not answer here (another host,
    another network namespace)."""

    host: str
    port: int
    ipc: str | None = None

    def __str__(self) -> str:
        return f"{self.host}({self.port})"


def appltag() -> str:
    """The application tag a connection reports (DISPLAY CONN APPLTAG): ``MIQM_APPLTAG``,
    else the program's name, as MQ takes it from the program's path (28 characters)."""
    import sys

    tag = os.environ.get("MIQM_APPLTAG") or os.path.basename(sys.argv[0] if sys.argv else "")
    if not tag or tag.startswith("-"):  # python -c, python -m
        tag = "python"
    return tag[-28:]


def parse_conname(text: str, source: str = "MIQM_CONNECTION") -> list[Endpoint]:
    """Parse MQ's CONNAME list ``host(port),host(port)``; ConfigError naming the bad entry
    and where it came from (``source``: the environment variable, or ``"conname"`` for
    the argument of :func:`miqm.client.connect`)."""
    if not isinstance(text, str):
        raise ConfigError(f"{source} must be a string such as 'hosta(1414),hostb(1414)', "
                          f"not {type(text).__name__}.", amq="AMQ9204")
    endpoints = []
    for part in text.split(","):
        if not part.strip():
            continue
        m = _CONNAME_RE.match(part)
        if not m or not 0 < int(m.group(2)) < 65536:
            raise ConfigError(
                f"{source} entry {part.strip()!r} is not valid: use host(port), "
                f"for example {source}='hosta(1414),hostb(1414)'.", amq="AMQ9204")
        host = m.group(1).strip()
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]  # an IPv6 address as URLs write it: [::1](1414)
        endpoints.append(Endpoint(host, int(m.group(2))))
    if not endpoints:
        unset = ("unset it" if source == "MIQM_CONNECTION" else "pass None")
        raise ConfigError(f"{source} is empty: use host(port),host(port) or {unset} to "
                          "connect in bindings mode.", amq="AMQ9204")
    return endpoints


def _first_bytes(reader: FrameReader) -> str:
    """What a peer that does not speak the protocol sent first, shown safely (at most 24
    bytes, as Python shows bytes)."""
    data = bytes(reader._buf[reader._pos:reader._pos + 24])
    return repr(data) if data else "nothing readable"


def not_available(qmgr: str, detail: str = "", advice: str = "") -> NetError:
    """MQ's AMQ8146 / MQRC 2059 error; ``advice`` instead of "Start it with strmqm"."""
    tail = f" ({detail})" if detail else ""
    advice = advice or f"Start it with 'strmqm {qmgr}'."
    return NetError(f"AMQ8146: miqm queue manager '{qmgr}' not available{tail}. {advice}",
                    mqrc=MQRC_Q_MGR_NOT_AVAILABLE)


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
    from lockfs import open_volume
    from lockfs.errors import LockFsError, VolumeNotFound
    from miqm.paths import find

    entry = find(qmgr)
    try:
        volume = open_volume(entry.data_path)
        try:
            # read-only where the backend can: a shared filesystem remounted read-only
            # under a running instance still tells where it listens
            with volume.open_readonly("listener") as f:
                raw = f.pread(f.size(), 0)
        finally:
            volume.close()
    except VolumeNotFound:
        raise not_available(qmgr, "no active instance has recorded its listener") from None
    except LockFsError as exc:
        raise not_available(qmgr, f"cannot read its data directory {entry.data_path}: "
                                  f"{exc}") from None
    try:
        rec = json.loads(raw.decode("utf-8"))
        return Endpoint(str(rec["host"]), int(rec["port"]), local_socket(rec.get("ipc")))
    except (UnicodeDecodeError, ValueError, KeyError, TypeError):
        raise not_available(qmgr, f"the listener record in {entry.data_path} is unreadable; "
                                  "restart the queue manager to rewrite it") from None


def local_socket(name: Any) -> str | None:
    """A listener record's local socket name, or None (none recorded, or not a name)."""
    return name if isinstance(name, str) and 0 < len(name) < 100 else None


def connect_local(name: str, timeout: float) -> socket.socket:
    """A connection to the local socket ``name`` (Linux's abstract namespace); OSError
    if nothing listens there from this host (ECONNREFUSED at once)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect("\0" + name)
    except OSError:
        sock.close()
        raise
    return sock


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
    from lockfs import open_volume
    from lockfs.errors import LockFsError
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
    through: 2033, 2085, 2053, 2024, ...). A bytes ``body`` field travels raw.

    ``send(op, **fields)`` pipelines a request without waiting for its reply (used for
    puts under syncpoint): a failure is remembered, the server refuses to commit the
    unit of work it belonged to (2003), and :attr:`async_error` says which call failed.
    Frames the server pushes for a streaming consumer are queued per subscription and
    read with :meth:`next_push`.

    With ``reconnect=True`` a broken connection (the active instance died or switched
    over) is re-resolved and reconnected for up to ``reconnect_timeout`` seconds, then:

    * the call in flight is resent only if it is in :data:`RETRY_SAFE_OPS`, or a read
      by its fields (:data:`_READ_WHEN`: an ``open`` without options, which is an
      inquire; a browse);
    * before a call on a connection quiet for :data:`IDLE_PROBE_AFTER` seconds, a look
      at the socket (:meth:`peer_closed`) finds a connection the listener closed (its
      IdleTimeout) and reconnects before anything is sent, so nothing is in doubt;
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
      failing it. That holds when reconnecting fails too: the unit is marked lost first;
    * if no active instance answers within ``reconnect_timeout``, the call raises 2548
      (MQRC_RECONNECT_FAILED) instead, saying whether the call in flight may have taken
      effect; the next call tries to reconnect again. After :meth:`close` every call
      raises 2018 (MQRC_HCONN_ERROR).
    """

    def __init__(self, qmgr: str, *, timeout: float = 5.0, reconnect: bool = False,
                 reconnect_timeout: float = 60.0, call_timeout: float = 60.0,
                 endpoints: list[Endpoint] | None = None,
                 allow_standby: bool = False, credential: str | None = None,
                 tls: ssl.SSLContext | None = None, strict: bool = True) -> None:
        self.qmgr = qmgr
        #: report a refusal that waiting cannot change (2058 another queue manager, 2393
        #: TLS) as such, at once (the default: a command told 2059 "not available" about
        #: a running queue manager whose TLS listener it could not use advised starting
        #: it); False reports them as 2059
        self.strict = strict
        self.endpoints = endpoints
        self.allow_standby = allow_standby
        #: True when connected to an instance that answered hello as a standby
        self.standby = False
        self.timeout = timeout
        self.reconnect = reconnect
        self.reconnect_timeout = reconnect_timeout
        self.call_timeout = call_timeout
        self.credential = credential
        self.tls = tls if tls is not None else tls_from_env()
        self.endpoint: Endpoint | None = None
        #: while reconnecting: the endpoint whose connection broke (tried last)
        self._broke_at: Endpoint | None = None
        self.server_host = ""
        self.server_qmgr = qmgr
        self._sock: socket.socket | None = None
        self._deadline_now: float | None = None  # the socket's read deadline, seconds
        self._quiet = False
        self._putcommit = False
        self.features: frozenset[str] = frozenset()
        self._reader: FrameReader | None = None
        self._wbuf: list[bytes] = []
        self._wsize = 0
        self._pending: dict[int, tuple[str, Callable[[dict[str, Any]], None] | None]] = {}
        self._pushes: dict[int, deque[dict[str, Any]]] = {}
        #: (op, reply) of the first pipelined call that failed since the last commit/backout
        self.async_error: tuple[str, dict[str, Any]] | None = None
        self._ids = itertools.count(1)
        self._sub_ids = itertools.count(1)
        self._in_uow = False
        self._uow_lost = False
        #: a unit of work's first put under syncpoint, not written yet: (request, body)
        self._lone_put: tuple[dict[str, Any], bytes | None] | None = None
        self.reconnects = 0
        #: bumped on every new connection: a consumer resubscribes when it changes
        self.generation = 0
        #: when a request last went out (time.monotonic)
        self._last_sent = 0.0
        #: since when a consumer's waits heard nothing (None: it heard something since),
        #: and the liveness ping sent meanwhile (:meth:`_silent_for`)
        self._silent_since: float | None = None
        self._probe: int | None = None
        self._probe_sent = 0.0
        #: close() was called: every later call is refused with 2018 (MQRC_HCONN_ERROR)
        self.closed = False
        #: a controlled end closed this connection without asking clients to reconnect:
        #: the 2161 it sent, raised again by later calls (:meth:`_after_end`)
        self.ended: QMgrEnding | None = None

    # -- connecting ------------------------------------------------------------------
    def open(self) -> Connection:
        """Resolve and connect; NetError 2059/2543/2035 (or AMQ7048) if nothing usable
        answers."""
        self.closed = False
        return self._resolve()

    def _resolve(self) -> Connection:
        """:meth:`open` without reopening a connection the application closed (the
        reconnect paths use it: a ``close()`` from another thread must stay closed)."""
        try:
            return self._open()
        except NetError as exc:
            # bindings mode has no standby address to ask; the lock files tell instead
            if (exc.mqrc == MQRC_Q_MGR_NOT_AVAILABLE and "MIQM_CONNECTION" not in os.environ
                    and self.endpoints is None and standby_running(self.qmgr)):
                raise standby_only(self.qmgr) from None
            raise

    def _hello_credential(self) -> str | None:
        from miqm.net.auth import client_credential

        # a host that knows the queue manager and may read its data directory uses the
        # credentials file there, whichever way it finds the listener
        return client_credential(self.qmgr, self.credential, bindings=True)

    def _open(self) -> Connection:
        saw_standby = False
        ending: dict[str, Any] | None = None  # an instance that is ending refused hello
        errors: list[str] = []
        #: permanent answers (2058 another queue manager, 2393 TLS): reason -> why
        refused: dict[int, str] = {}
        endpoints = self.endpoints or candidates(self.qmgr)
        broke = self._broke_at
        if broke is not None and len(endpoints) > 1 and broke in endpoints:
            # a reconnect: the entry whose connection broke is tried last. After a
            # failover the instance that serves is elsewhere, and a host that went down
            # may drop every packet, which cost a connect timeout at every attempt
            endpoints = [ep for ep in endpoints if ep != broke] + [broke]
        credential = self._hello_credential()
        todo = list(endpoints)
        eof_once: set[Endpoint] = set()
        while todo:
            ep = todo.pop(0)
            local = False
            try:
                if ep.ipc:
                    try:
                        # the instance on this host: no TLS, as MQ's local bindings
                        sock, local = connect_local(ep.ipc, self.timeout), True
                    except OSError:
                        ep = Endpoint(ep.host, ep.port)  # elsewhere: its TCP address
                if not local:
                    sock = socket.create_connection((ep.host, ep.port), timeout=self.timeout)
            except OSError as exc:
                errors.append(f"{ep}: {exc.strerror or exc}")
                continue
            try:
                if not local:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.settimeout(self.timeout)
                if self.tls is not None and not local:
                    sock = self.tls.wrap_socket(sock, server_hostname=ep.host)
                hello: dict[str, Any] = {"v": PROTOCOL_VERSION, "id": 0, "op": "hello",
                                         "qmgr": self.qmgr, "pid": os.getpid(),
                                         "appltag": appltag()}
                if credential:
                    hello["credential"] = credential
                sock.sendall(encode(hello))
                reader = FrameReader(sock)
                reply = reader.read()
            except ssl.SSLError as exc:
                sock.close()
                if isinstance(exc, ssl.SSLEOFError) and ep not in eof_once:
                    # closed in the handshake: a plain listener does that to a TLS client
                    # every time, a listener going away (a failover) once, refusing the
                    # next connection. Once more tells them apart.
                    eof_once.add(ep)
                    todo.insert(0, ep)
                    continue
                verify = getattr(exc, "verify_message", None)
                if isinstance(exc, ssl.SSLCertVerificationError) and verify:
                    # say which check failed: an untrusted, expired or misnamed listener
                    # certificate all read CERTIFICATE_VERIFY_FAILED, and the client
                    # certificate questions do not apply
                    errors.append(f"{ep}: the listener's certificate was not accepted "
                                  f"({verify.rstrip('.')}): MIQM_TLS_CA must hold the CA "
                                  "that signed it, and it must be valid now and name the "
                                  f"host the CONNAME gives ({ep.host})")
                else:
                    errors.append(f"{ep}: the TLS handshake failed ({exc.reason or exc}): is "
                                  "the listener configured for TLS, does MIQM_TLS_CA trust "
                                  "its certificate, and does it need a client certificate "
                                  "(MIQM_TLS_CERT, MIQM_TLS_KEY)?")
                refused.setdefault(MQRC_SSL_INITIALIZATION_ERROR, errors[-1])
                continue
            except (OSError, NetError) as exc:  # PeerClosed, a reset, a timeout among them
                sock.close()
                if local and not isinstance(exc, READ_TIMEOUT):
                    # closed on this process (another user's: the listener refuses it
                    # before reading its hello): its TCP address
                    todo.insert(0, Endpoint(ep.host, ep.port))
                    continue
                if isinstance(exc, ProtocolError) and not isinstance(exc, OldProtocol):
                    # something else listens there (a web server, another product): say
                    # so with what it sent, not "a frame of 1213486160 bytes" ("HTTP")
                    errors.append(f"{ep}: what answered there is not a miqm listener (it "
                                  f"sent {_first_bytes(reader)}): is {ep} the queue "
                                  "manager's listener address and port?")
                    continue
                # a local socket that accepted and answered nothing (a paused instance):
                # its TCP address is the same process, not worth a second timeout
                if local or not isinstance(exc, (PeerClosed, ConnectionResetError)):
                    errors.append(f"{ep}: {exc}")
                    continue
                hint = (" (a TLS listener? set MIQM_TLS_CA to connect with TLS)"
                        if self.tls is None else "")
                errors.append(f"{ep}: the listener closed the connection during hello{hint}")
                continue
            if local and reply.get("local") == "refused":  # another user's process
                sock.close()
                todo.insert(0, Endpoint(ep.host, ep.port))
                continue
            is_standby = reply.get("mqrc") == MQRC_STANDBY_Q_MGR
            is_ending = reply.get("mqrc") in _ENDING
            # a control command (endmqm -i after endmqm -c) reaches an ending instance
            if reply.get("ok") or ((is_standby or is_ending) and self.allow_standby):
                self._sock, self._reader, self.endpoint = sock, reader, ep
                self._deadline_now = None
                #: what this listener does beyond protocol version 2 (server.FEATURES)
                self.features = frozenset(str(f) for f in reply.get("features") or ())
                # a listener that says so answers a pipelined request only if it fails
                self._quiet = "quiet" in self.features
                self._putcommit = "putcommit" in self.features
                self.server_host = str(reply.get("host", ""))
                #: the queue manager's own name (a blank ``qmgr`` accepts any, as MQ's
                #: client connections do)
                self.server_qmgr = str(reply.get("qmgr") or self.qmgr)
                self.standby = is_standby
                self.generation += 1
                self._last_sent = time.monotonic()
                return self
            sock.close()
            if reply.get("mqrc") == MQRC_NOT_AUTHORIZED:
                if reply.get("amq") == "AMQ8077":  # authenticated, without CONNECT
                    raise NetError(f"AMQ8077: {reply.get('error')}", mqrc=MQRC_NOT_AUTHORIZED,
                                   amq="AMQ8077")
                raise NetError(f"AMQ5534: queue manager '{self.qmgr}' at {ep} refused the "
                               f"connection: {reply.get('error')}", mqrc=MQRC_NOT_AUTHORIZED,
                               amq="AMQ5534")
            if is_standby:
                saw_standby = True
            elif is_ending:
                ending = reply
                errors.append(f"{ep}: {reply.get('error')}")
            else:
                errors.append(f"{ep}: {reply.get('error')}")
                mqrc = reply.get("mqrc")
                if mqrc in _PERMANENT:
                    refused.setdefault(int(mqrc), errors[-1])
        if saw_standby:
            raise standby_only(self.qmgr)
        if ending is not None:
            raise _ending_error(ending)
        if refused and self.strict:
            # an answer that waiting will not change: say it now, not 2059 after the
            # reconnect timeout with advice to start a queue manager that is running
            mqrc, why = next(iter(refused.items()))
            raise NetError(f"AMQ9204: the connection to queue manager '{self.qmgr}' was "
                           f"refused: {why} (MQRC {mqrc} {_PERMANENT[mqrc]})", mqrc=mqrc,
                           amq="AMQ9204")
        advice = ""
        if self.endpoints is not None or "MIQM_CONNECTION" in os.environ:
            # a client given addresses (a CONNAME list) is often on another host, where
            # "start it" is not the likely fix: a wrong address or port, or a host down
            advice = ("Check that an instance of it runs there (dspmq -x on its hosts) and "
                      "that the CONNAME names its listeners' addresses and ports.")
        raise not_available(self.qmgr, "; ".join(errors) if errors else "", advice)

    def _reopen(self, established: bool = True) -> None:
        """Keep resolving until an active instance answers or reconnect_timeout passes.

        Only "nothing answered" (2059) and "only a standby answered" (2543) are retried;
        any other answer (2035; 2058 and 2393 with :attr:`strict`) is raised at once.
        When time runs out, a connection that had been ``established`` raises 2548
        (MQRC_RECONNECT_FAILED), as MQ reports for a reconnectable client; a first
        connection raises what the last attempt found."""
        self._broke_at = self.endpoint
        try:
            self._reconnect_loop(established)
        finally:
            self._broke_at = None

    def _reconnect_loop(self, established: bool) -> None:
        """:meth:`_reopen`'s attempts, with backoff, until one succeeds or time is up."""
        self._drop()
        deadline = time.monotonic() + self.reconnect_timeout
        delay = 0.05
        while True:
            if self.closed:  # closed meanwhile (another thread): not made again
                raise self._closed_error("a reconnect")
            try:
                self._resolve()
                if self.closed:
                    self._drop()
                    raise self._closed_error("a reconnect")
                self.reconnects += 1
                return
            except NetError as exc:
                if exc.mqrc not in _TRANSIENT:
                    raise
                if time.monotonic() >= deadline:
                    if not established:
                        raise
                    raise NetError(
                        f"reconnecting to queue manager '{self.qmgr}' failed within "
                        f"{self.reconnect_timeout:g} seconds (MQRC 2548 "
                        f"MQRC_RECONNECT_FAILED): {exc}", mqrc=MQRC_RECONNECT_FAILED,
                        amq=exc.amq) from None
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _drop(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
            self._sock = None
        self._reader = None
        self._wbuf.clear()
        self._wsize = 0
        self._lone_put = None
        self._pending.clear()
        self._silent_since = None
        self._probe = None
        # pushes already read stay for their consumers (a confirmation read before the
        # connection ended still settles a batch); subscription ids are never reused

    @property
    def connected(self) -> bool:
        """Whether a connection is open now."""
        return self._sock is not None

    # -- frames ----------------------------------------------------------------------
    def _flush(self) -> None:
        if self._lone_put is not None:
            self._release_lone_put()
        if self._wbuf:
            data = b"".join(self._wbuf) if len(self._wbuf) > 1 else self._wbuf[0]
            self._wbuf.clear()
            self._wsize = 0
            assert self._sock is not None
            self._sock.sendall(data)
            self._last_sent = time.monotonic()

    def _release_lone_put(self) -> None:
        """Something other than its commit follows a unit's first put: it goes as it is."""
        assert self._lone_put is not None
        request, body = self._lone_put
        self._lone_put = None
        self._write(request, False, body)
        self._pending[request["id"]] = ("put", None)

    def _write(self, request: dict[str, Any], flush: bool, body: bytes | None = None) -> None:
        if self._lone_put is not None:
            self._release_lone_put()
        data = encode(request, body)
        self._wbuf.append(data)
        self._wsize += len(data)
        if flush or self._wsize >= 64 * 1024:
            self._flush()

    def _read_one(self) -> dict[str, Any]:
        """Read one frame; queue pushes and settle pipelined replies; return a reply that
        is none of those (or a push/None marker)."""
        assert self._reader is not None
        frame = self._reader.read()
        sub = frame.get("push")
        if sub is not None:
            self._pushes.setdefault(int(sub), deque()).append(frame)
            return _PUSHED
        rid = frame.get("id")
        if not isinstance(rid, int):
            return frame
        waiting = self._pending
        while waiting:
            # replies come in request order: a quiet request older than this reply
            # succeeded (a quiet request is answered only when it fails)
            first = next(iter(waiting))
            if first >= rid:
                break
            del waiting[first]
        pending = waiting.pop(rid, None)
        if pending is not None:
            op, callback = pending
            if not frame.get("ok") and self.async_error is None and op != "ping":
                self.async_error = (op, frame)
            if callback is not None:
                callback(frame)
            return _SETTLED
        return frame

    def _await(self, rid: int) -> dict[str, Any]:
        while True:
            frame = self._read_one()
            if frame is _PUSHED or frame is _SETTLED:
                continue
            if frame.get("id") not in (None, rid):
                raise NetError("a reply did not match its request",
                               mqrc=MQRC_CONNECTION_BROKEN)
            return frame

    def _deadline(self, seconds: float) -> None:
        """Reads (and sends) on the socket give up after ``seconds``; a system call only
        when that changes (a plain socket gets SO_RCVTIMEO, not a poll per read)."""
        if seconds == self._deadline_now:
            return
        assert self._sock is not None
        if not isinstance(self._sock, ssl.SSLSocket):  # a local socket is never TLS
            set_deadlines(self._sock, seconds)
        else:
            self._sock.settimeout(seconds)
        self._deadline_now = seconds

    def _roundtrip(self, request: dict[str, Any], wait: float,
                   body: bytes | None = None) -> dict[str, Any]:
        assert self._sock is not None
        self._deadline(self.call_timeout + wait)
        try:
            self._write(request, True, body)
        except (BrokenPipeError, ConnectionResetError):
            # an instance that stopped reading this connection (it ends) refuses the send
            # at once on a local socket, where TCP takes it: the last frame it sends,
            # read within the listener's second to send it, says why (the call was not
            # done); without one the connection is broken, as the error says
            frame = self._last_frame()
            if frame is None:
                raise
            return frame
        return self._await(request["id"])

    def _frame_waits(self) -> bool:
        """After a refused send: whether the instance sent something to read before it
        stopped reading (its last frame), within a second."""
        sock, reader = self._sock, self._reader
        if sock is None:
            return False
        if reader is not None and reader.unread():
            return True
        try:
            readable, _w, _x = select.select([sock], [], [], 1.0)
            return bool(readable) and bool(sock.recv(1, socket.MSG_PEEK))
        except (OSError, ValueError):  # ValueError: a TLS socket takes no flags
            return False

    def _last_frame(self) -> dict[str, Any] | None:
        """After a refused send: the frame without an id the instance sent as its last
        (2161/2162 and ``quiesce``), if one comes within a second, else None."""
        try:
            self._deadline(1.0)
            while True:
                frame = self._read_one()
                if frame is _PUSHED or frame is _SETTLED:
                    continue
                return frame if frame.get("id") is None else None
        except (OSError, NetError):
            return None

    # -- calls -----------------------------------------------------------------------
    def peer_closed(self) -> bool:
        """Whether the queue manager has closed this connection (the listener's idle
        timeout, an instance that ended): a look at the socket that waits for nothing
        and reads nothing. If so the connection is dropped, and a unit of work open on
        it is lost (as when a call finds it broken): the next call reconnects, or reports
        2009 without reconnect, before anything is sent, so nothing is in doubt."""
        sock = self._sock
        if sock is None:
            return False
        try:
            reader = self._reader
            if reader is not None and reader.unread():
                return False  # bytes already read wait to be taken
            if isinstance(sock, ssl.SSLSocket) and sock.pending():
                return False
            # nothing to read and no end: open (a look that cannot wait, whatever the
            # socket's timeout mode: a socket that never made a call is still in the
            # connect timeout's, where Python would wait before the recv below)
            poller = select.poll()
            poller.register(sock.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
            if not poller.poll(0):
                return False
            # the TCP stream itself (for TLS too: its records are read by the next call)
            data = socket.socket.recv(sock, 1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return False  # open, nothing to read
        except OSError:
            data = b""  # reset
        if data:
            return False  # something to read: the call's own read handles it
        if self._in_uow or self._lone_put is not None:
            self._uow_lost = True
        self._in_uow = False
        self._drop()
        return True

    def _broken_earlier(self, op: str) -> str:
        """The line for a call on a connection that broke before, without reconnect."""
        return (f"{op} on a connection to queue manager '{self.qmgr}' that broke earlier "
                "(MQRC 2009 MQRC_CONNECTION_BROKEN): connect again")

    def _closed_error(self, op: str) -> NetError:
        return NetError(f"{op} on a connection to queue manager '{self.qmgr}' that the "
                        "application closed (MQRC 2018 MQRC_HCONN_ERROR): connect again",
                        mqrc=MQRC_HCONN_ERROR)

    def _before(self, op: str, syncpoint: bool) -> None:
        """Before a request: a unit of work lost with a broken connection fails the
        operations under it, and a closed connection is opened again."""
        if not (self._uow_lost or self._sock is None or op == "backout"):
            return  # the usual case, on every request
        if self.closed:
            raise self._closed_error(op)
        if op == "backout":
            self._uow_lost = False  # the application has ended the lost unit of work
        if self._uow_lost and (syncpoint or op == "commit"):
            if op == "commit":
                self._uow_lost = False
            raise NetError("the unit of work was backed out when the connection to the "
                           "queue manager broke (MQRC 2003 MQRC_BACKED_OUT)",
                           mqrc=MQRC_BACKED_OUT)
        if self._sock is None:
            if self.ended is not None:
                self._after_end()
                return
            if not self.reconnect and self.endpoint is not None:
                raise NetError(self._broken_earlier(op), mqrc=MQRC_CONNECTION_BROKEN)
            self._reopen() if self.endpoint is not None else self._resolve()

    def _after_end(self) -> None:
        """A call after a controlled end closed this connection (2161, no reconnect
        asked): a reconnectable connection tries once, at once (the queue manager may
        have been started again); otherwise the end's reason is raised again, not 2548
        after ``reconnect_timeout`` for a queue manager that was ended on purpose."""
        ended = self.ended
        assert ended is not None
        if self.reconnect:
            try:
                self._resolve()
            except NetError as exc:
                if exc.mqrc not in _TRANSIENT:
                    raise
            else:
                self.ended = None
                self.reconnects += 1
                return
        raise QMgrEnding(f"the queue manager ended this connection: {ended}",
                         mqrc=ended.mqrc)

    def _ending(self, op: str, syncpoint: bool, reply: dict[str, Any]
                ) -> dict[str, Any] | None:
        """The instance refused ``op`` because it is ending (2161/2162; the call was not
        done). Returns None to send the call again on a new connection, a reply to
        return, or raises. ``quiesce`` in the reply: the connection's last frame.

        Asked to reconnect (a switchover, endmqm -s or -r) a reconnectable connection
        treats it as a broken connection whose call is known not done: it reconnects to
        the new active instance and sends a call outside a unit of work again; inside a
        unit (backed out with the old connection) the call raises 2009, a commit 2003,
        later syncpoint calls 2003 until commit or backout. Otherwise the application is
        told the reason at once (:class:`QMgrEnding`); when the connection's last frame
        finds a unit of work open, a syncpoint call or commit raises 2003 (the unit was
        backed out), a backout succeeds."""
        err = _ending_error(reply)
        was_open = self._in_uow or self._lone_put is not None  # before this call
        in_uow = was_open or syncpoint
        if in_uow and op in ("commit", "prepare"):
            err = QMgrEnding(f"the {op} was not done and the unit of work is backed out: "
                             f"{err}", mqrc=err.mqrc, reconnect=err.reconnect)
        if not (err.reconnect and self.reconnect):
            if not reply.get("quiesce"):
                raise err  # refused; the connection stays for the unit to end
            # the connection's last frame: the instance closes it, and backs out the
            # unit of work open on it, as a broken connection's (the call was not done)
            self._drop()
            self._in_uow = False
            if err.mqrc == MQRC_Q_MGR_QUIESCING:
                # a controlled end: later calls are told at once (_after_end); after an
                # immediate one they reconnect as after a failure
                self.ended = err
            if was_open:
                if op == "backout":
                    return {"ok": True}
                if op not in ("commit", "prepare"):
                    self._uow_lost = True
                if op in ("commit", "prepare") or syncpoint:
                    raise NetError(f"the unit of work was backed out when the queue "
                                   f"manager ended (MQRC 2003 MQRC_BACKED_OUT): {err}",
                                   mqrc=MQRC_BACKED_OUT)
            raise err
        # a syncpoint call that would have begun a unit was not done: nothing is lost
        self._drop()
        self._in_uow = False
        if was_open and op not in ("commit", "backout", "prepare"):
            self._uow_lost = True
        try:
            self._reopen()
        except NetError as exc:
            if exc.mqrc != MQRC_RECONNECT_FAILED:
                raise
            lost = "; the unit of work was backed out" if was_open else ""
            raise NetError(f"the queue manager ended during {op} (not done) and {exc}"
                           f"{lost}", mqrc=MQRC_RECONNECT_FAILED, amq=exc.amq) from None
        if not was_open:
            return None
        if op == "backout":
            return {"ok": True}
        if op in ("commit", "prepare"):
            raise NetError(f"the queue manager ended before the {op}, which was not done: "
                           "the unit of work was backed out (MQRC 2003 MQRC_BACKED_OUT)",
                           mqrc=MQRC_BACKED_OUT)
        raise NetError("the queue manager switched over inside a unit of work, which was "
                       "backed out (MQRC 2009 MQRC_CONNECTION_BROKEN)",
                       mqrc=MQRC_CONNECTION_BROKEN)

    def send(self, op: str, *, on_reply: Callable[[dict[str, Any]], None] | None = None,
             flush: bool = False, **fields: Any) -> None:
        """Pipeline ``op`` (no wait for its reply; see the class docstring);
        ``on_reply(reply)`` runs when its reply is read. Unless ``flush``, the request
        may wait in the send buffer until the next call that needs a reply."""
        syncpoint = op in _UOW_OPS and bool(fields.get("syncpoint"))
        self._before(op, syncpoint)
        rid = next(self._ids)
        # a put under syncpoint is answered only if it fails (where the listener can):
        # the unit's commit or backout, which always has a reply, settles it. Not an ack,
        # which a consumer may send for hours with no other call to settle it.
        quiet = 2 if self._quiet and syncpoint and on_reply is None else 1
        body = fields.get("body")
        if isinstance(body, (bytes, bytearray, memoryview)):
            del fields["body"]  # it travels raw after the header, not copied into it
        else:
            body = None
        request = {"id": rid, "op": op, "async": quiet, **fields}
        if body is not None:
            request["_b"] = 1
        if quiet == 2 and op == "put" and not self._in_uow and self._putcommit:
            # a unit's first put waits here: if the commit comes next, both go as one
            # request (server.FEATURES "putcommit"); anything else sends it first
            self._lone_put = (request, body)
            self._in_uow = True
            return
        try:
            self._write(request, flush, body)
        except (BrokenPipeError, ConnectionResetError) as exc:
            if not self._frame_waits():
                self._broken(op, syncpoint, exc)
            # else not sent, and the instance's last frame, read by the next call or
            # push, says so (it ends: the frame names the reason; a unit of work this
            # call was in is backed out with the connection)
            if syncpoint:
                self._in_uow = True
            return
        except OSError as exc:
            self._broken(op, syncpoint, exc)
        except BaseException:
            self._abandon(syncpoint)  # part of a frame may be on the wire
            raise
        self._pending[rid] = (op, on_reply)
        if syncpoint:
            self._in_uow = True

    def _broken(self, op: str, syncpoint: bool, exc: BaseException,
                safe: bool = False) -> dict[str, Any]:
        """The connection broke during ``op``: reconnect (or not) and raise what MQ's
        reconnectable clients report (see the class docstring); returns a reply only for a
        backout, which the broken connection already did, and an empty dict when ``op``
        is to be resent (in :data:`RETRY_SAFE_OPS`, or ``safe``: a read by its fields)."""
        safe = safe or op in RETRY_SAFE_OPS
        if syncpoint and op == "get" and not self._in_uow:
            # a get under syncpoint that would begin the unit: the unit is that get
            # alone, which the queue manager backs out with the connection (restart
            # recovery on a new active), so the message, if one was got, is back on the
            # queue and the get is sent again (an idle consumer under syncpoint is not
            # told of a failover that cost it nothing)
            syncpoint, safe = False, True
        self._drop()
        if self.closed:  # the application closed it (another thread): stays closed
            raise self._closed_error(op)
        was_in_uow = self._in_uow or syncpoint
        self._in_uow = False
        if was_in_uow and op not in ("commit", "backout", "prepare"):
            # before reconnecting, which may fail: the unit is lost whatever comes next,
            # and nothing of it may be committed later
            self._uow_lost = True
        if not self.reconnect:
            # what the application should do: whether the call happened, and that this
            # connection is over (every later call raises 2009 too)
            if op in ("commit", "prepare") or (not was_in_uow and op != "ping"
                                               and not safe):
                doubt = f"; the {op} may or may not have taken effect"
            elif was_in_uow:
                doubt = "; the unit of work was backed out"
            else:
                doubt = ""
            raise NetError(f"the connection to queue manager '{self.qmgr}' broke ({exc}) "
                           f"(MQRC 2009 MQRC_CONNECTION_BROKEN){doubt}: connect again",
                           mqrc=MQRC_CONNECTION_BROKEN) from None
        try:
            self._reopen()
        except NetError as err:
            doubt = (f"; the {op} may or may not have taken effect"
                     if op in ("commit", "prepare") or (not was_in_uow and not safe)
                     else "")
            lost = ("; the unit of work was backed out" if self._uow_lost else "")
            if err.mqrc != MQRC_RECONNECT_FAILED:
                # refused for good (2035: the credential was revoked or rotated meanwhile;
                # 2058, 2393): that reason, but saying what became of the call in flight,
                # which the refusal alone made read as not done
                if not (doubt or lost):
                    raise
                raise NetError(f"the connection broke during {op} and reconnecting was "
                               f"refused{lost}{doubt}: {err}", mqrc=err.mqrc,
                               amq=err.amq) from None
            raise NetError(f"the connection broke during {op} and {err}{lost}{doubt}",
                           mqrc=MQRC_RECONNECT_FAILED, amq=err.amq) from None
        if was_in_uow and not safe:
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
        if not safe:
            raise NetError(f"the connection broke during {op}; it may or may not have "
                           "taken effect (MQRC 2549 MQRC_CALL_INTERRUPTED)",
                           mqrc=MQRC_CALL_INTERRUPTED) from None
        return {}

    def call(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send ``op`` with ``fields``; the reply when ok, else NetError(mqrc)."""
        syncpoint = op in _UOW_OPS and bool(fields.get("syncpoint"))
        if self._sock is not None and time.monotonic() - self._last_sent > IDLE_PROBE_AFTER:
            self.peer_closed()  # then _before reconnects, sending nothing in doubt
        self._before(op, syncpoint)
        lone = self._lone_put
        body = None
        if op == "commit" and lone is not None and not fields:
            # the unit is one put: the put and its commit as one request, answered once
            # the put is durable (or 2003 if it failed, as the commit would be)
            self._lone_put = None
            request, body = lone  # the put's own request, never sent: changed in place
            del request["async"]
            request["v"] = PROTOCOL_VERSION
            request["commit"] = True
        else:
            request = {"v": PROTOCOL_VERSION, "id": next(self._ids), "op": op, **fields}
        wait = float(fields.get("wait") or 0.0) if op == "get" else 0.0
        started = time.monotonic()
        try:
            reply = self._roundtrip(request, wait, body)
        except BaseException as exc:
            if not isinstance(exc, (OSError, NetError)):
                # a get under syncpoint holds nothing of its own: the queue manager backs
                # out what it got with the connection
                self._abandon(syncpoint and op != "get")
                raise
            read = _READ_WHEN.get(op)
            reply = self._broken(op, syncpoint, exc,
                                 safe=read is not None and read(fields))
            if not reply:
                request["id"] = next(self._ids)
                if wait > 0:  # a get-wait goes on for what is left of its wait
                    wait = request["wait"] = max(0.0, wait - (time.monotonic() - started))
                reply = self._roundtrip(request, wait, body)
        if not reply.get("ok") and reply.get("mqrc") in _ENDING:
            if op in ("commit", "backout", "prepare"):
                self.async_error = None
            again = self._ending(op, syncpoint, reply)
            if again is None:
                if wait > 0:
                    # a get-wait ended by the end goes on for what is left of its wait
                    # (MQ's WaitInterval is the whole call's), not for all of it again
                    fields = {**fields, "wait": max(0.0, wait - (time.monotonic() - started))}
                return self.call(op, **fields)  # not done: again on the new connection
            return again
        if syncpoint and (op != "get" or reply.get("ok")):
            # a get that got nothing (2033) holds nothing: a failover then costs nothing
            self._in_uow = True
        if op in ("commit", "backout", "prepare"):
            self._in_uow = False
            self.async_error = None
        if not reply.get("ok"):
            error = str(reply.get("error") or f"{op} failed")
            if op == "commit" and reply.get("mqrc") != MQRC_BACKED_OUT:
                # refused without being done: the unit would stay open on the server and
                # the application's next unit would join it (and commit both). Ended here.
                error += self._back_out_refused_unit()
            raise NetError(error, mqrc=int(reply.get("mqrc") or 2195), amq=reply.get("amq"))
        return reply

    def _abandon(self, syncpoint: bool) -> None:
        """A call interrupted in the middle (KeyboardInterrupt, a signal handler's
        exception): its reply, or the rest of its request, would reach the next call
        ("a reply did not match its request", 2549). The connection is dropped instead:
        the next call connects again first (a unit of work open is lost with it, 2003),
        and the queue manager ends what it was doing for this one (a get-wait)."""
        if self._in_uow or syncpoint or self._lone_put is not None:
            self._uow_lost = True
        self._in_uow = False
        self._drop()

    def _back_out_refused_unit(self) -> str:
        """A commit was refused: back the unit out on the server; what to add to the
        refusal's text."""
        try:
            request = {"v": PROTOCOL_VERSION, "id": next(self._ids), "op": "backout"}
            ok = bool(self._roundtrip(request, 0.0, None).get("ok"))
        except (OSError, NetError):
            ok = False  # a broken connection backs it out on the server as it ends
        return ("; the unit of work was backed out" if ok else
                "; the unit of work could not be backed out here: call backout")

    def new_subscription(self) -> int:
        """A subscription id (the ``sub`` of ``consume``) no other consumer on this
        connection has had: several consumers may stream on one connection."""
        return next(self._sub_ids)

    def forget_subscription(self, sub: int) -> list[dict[str, Any]]:
        """Drop what was pushed for ``sub`` and not read (its consumer has ended); returns
        it (a ``committed`` among it still settles a batch)."""
        return list(self._pushes.pop(sub, None) or ())

    def next_push(self, sub: int, timeout: float) -> dict[str, Any] | None:
        """The next frame pushed for subscription ``sub``, waiting up to ``timeout``
        seconds (None if none came). OSError/NetError if the connection breaks."""
        queue = self._pushes.get(sub)
        if queue:
            return queue.popleft()
        if self._sock is None:
            if self.closed:
                raise self._closed_error("a consumer's read")
            raise NetError(self._broken_earlier("a consumer's read"),
                           mqrc=MQRC_CONNECTION_BROKEN)
        try:
            self._flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # an instance that stopped reading (it ends): its last frame tells, below
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._silent_for()
                return None
            self._deadline(remaining)
            try:
                frame = self._read_one()
            except READ_TIMEOUT:
                self._silent_for()
                return None
            self._silent_since = None  # heard from: once a frame (a batch), not a message
            if frame is _PUSHED:
                queue = self._pushes.get(sub)
                if queue:
                    return queue.popleft()
            elif frame is not _SETTLED:
                if frame.get("mqrc") in _ENDING:  # the instance ends this connection
                    err = _ending_error(frame)
                    if frame.get("quiesce"):
                        self._drop()
                        if (not (err.reconnect and self.reconnect)
                                and err.mqrc == MQRC_Q_MGR_QUIESCING):
                            self.ended = err
                    raise err
                raise NetError("an unexpected reply arrived", mqrc=MQRC_CONNECTION_BROKEN)

    def _silent_for(self) -> None:
        """A consumer's wait went by with nothing from the queue manager. A consumer sends
        nothing while it waits, so an instance gone silent (its host cut off, or fenced
        while the network dropped its FIN) would leave it waiting on the dead connection
        for ever, never following the failover: after ``call_timeout`` seconds of silence
        a ``ping`` goes out, and if ``call_timeout`` more pass without a word the
        connection is taken as broken (MQ's channel heartbeat, HBINT, does this for its
        clients). Only the idle path pays for it, never a message."""
        now = time.monotonic()
        since = self._silent_since
        if since is None:
            self._silent_since = now
            return
        probe = self._probe
        if probe is not None and probe in self._pending:
            if now - self._probe_sent >= self.call_timeout:
                raise NetError(f"the queue manager did not answer for "
                               f"{now - since:.0f} seconds (call_timeout "
                               f"{self.call_timeout:g}): the connection is taken as broken "
                               "(MQRC 2009 MQRC_CONNECTION_BROKEN)",
                               mqrc=MQRC_CONNECTION_BROKEN)
            return
        if now - since < self.call_timeout or self._sock is None:
            return
        rid = next(self._ids)
        try:
            self._write({"id": rid, "op": "ping"}, True)
        except OSError as exc:
            raise NetError(f"the connection to the queue manager broke ({exc})",
                           mqrc=MQRC_CONNECTION_BROKEN) from None
        self._pending[rid] = ("ping", self._heard)
        self._probe, self._probe_sent = rid, now

    def _heard(self, _reply: dict[str, Any]) -> None:
        """The liveness ping of :meth:`_silent_for` was answered (whatever it says)."""
        self._silent_since = None
        self._probe = None

    def close(self) -> None:
        """Close the connection (the server backs out any open unit of work); later
        calls raise 2018 (MQRC_HCONN_ERROR) until :meth:`open`."""
        self.closed = True
        try:
            self._flush()
        except OSError:
            pass
        self._drop()

    def abort(self) -> None:
        """Close from another thread while a call is in progress on this connection:
        nothing pipelined is sent (a unit of work not committed is backed out by the
        queue manager all the same), and the call in progress is woken (shutdown) and
        raises 2018 (MQRC_HCONN_ERROR)."""
        self.closed = True
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def tls_from_env() -> ssl.SSLContext | None:
    """A client TLS context from ``MIQM_TLS_CA`` (the CA file that signed the listener's
    certificate) and, for listeners that require client certificates, ``MIQM_TLS_CERT``
    and ``MIQM_TLS_KEY``; None when ``MIQM_TLS_CA`` is unset."""
    ca = os.environ.get("MIQM_TLS_CA", "").strip()
    if not ca:
        return None
    return client_tls_context(ca, os.environ.get("MIQM_TLS_CERT", "").strip(),
                              os.environ.get("MIQM_TLS_KEY", "").strip())


def client_tls_context(ca_file: str, cert_file: str = "", key_file: str = "",
                       check_hostname: bool = True) -> ssl.SSLContext:
    """A client-side TLS context trusting ``ca_file``; ConfigError if a file is unusable."""
    from miqm.net.auth import warn_exposed

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = check_hostname
    # each file named with its variable: "[Errno 2] No such file or directory" alone left
    # the application team guessing which of three
    what = f"the CA file {ca_file!r} (MIQM_TLS_CA)"
    try:
        ctx.load_verify_locations(ca_file)
        if cert_file:
            what = (f"the certificate {cert_file!r} (MIQM_TLS_CERT) and its key "
                    f"{(key_file or cert_file)!r} (MIQM_TLS_KEY)")
            ctx.load_cert_chain(cert_file, key_file or None)
    except (OSError, ssl.SSLError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise ConfigError(f"the client's TLS files cannot be used: {what}: {why}; check "
                          "MIQM_TLS_CA, MIQM_TLS_CERT and MIQM_TLS_KEY.",
                          amq="AMQ9637") from None
    if cert_file:
        warn_exposed(key_file or cert_file, "AMQ1133W: the client's TLS key file "
                                            "(MIQM_TLS_KEY)")
    return ctx


def connect(qmgr: str, timeout: float = 5.0, *, reconnect: bool = False,
            reconnect_timeout: float = 60.0, call_timeout: float = 60.0,
            endpoints: list[Endpoint] | None = None,
            allow_standby: bool = False, credential: str | None = None,
            tls: ssl.SSLContext | None = None, wait_first: bool = True,
            strict: bool = True) -> Connection:
    """Connect to the active instance of ``qmgr`` (see the module docstring).

    ``endpoints`` replaces resolution (a control command that knows the address of a
    particular instance); ``allow_standby`` accepts an instance that answers as a standby
    (for control ops such as ``end`` and ``instance``, which a standby serves).
    With ``reconnect`` and ``wait_first`` (tools that start beside a queue manager that
    is starting or failing over) the first connection is waited for too, up to
    ``reconnect_timeout``; ``wait_first=False`` fails at once, as MQ's MQCONNX does
    (reconnection applies once a connection has been made). ``strict`` reports a
    refusal that waiting cannot change as itself (2058, 2393; 2035 always is), at once,
    instead of as 2059 (see :attr:`Connection.strict`).
    """
    conn = Connection(qmgr, timeout=timeout, reconnect=reconnect,
                      reconnect_timeout=reconnect_timeout, call_timeout=call_timeout,
                      endpoints=endpoints, allow_standby=allow_standby,
                      credential=credential, tls=tls, strict=strict)
    if reconnect and wait_first:
        conn._reopen(established=False)
        conn.reconnects = 0
        return conn
    return conn.open()
