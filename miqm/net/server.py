"""The listener: accepts client connections and hands each request to a handler.

One thread per connection: requests on a connection are answered in order, and a
get-with-wait blocks only its own connection. A client may pipeline requests; the
session thread reads them through one buffer and holds its replies back while more
requests are already buffered, so a burst of requests costs one send for its replies.
A streaming consumer's messages are pushed by the service through
:meth:`Session.push`, under the same write lock as the replies.

With ``ipc`` the listener also accepts on a local socket (Linux's abstract namespace)
for commands on the same host, as MQ's local commands use IPC rather than a channel: no
TLS there, only the listener's own user (or root), hello and its credential as on TCP.

The execution controller creates a :class:`Listener` with a handler (the
:class:`~miqm.net.service.QueueService`, wrapped for its control ops), calls
:meth:`Listener.start` (which binds, so a port in use fails there, before the
instance writes anything), and calls :meth:`Listener.stop` when the instance ends. Closing a
session runs its ``on_close`` callbacks exactly once, which is how the service backs out
a unit of work left open by a client that went away.

Defences, each answered with MQ's reason code or a logged line, never a dead listener:
a client that has not passed hello within ``handshake_timeout`` of connecting, whatever it
sends meanwhile, or sends a frame longer than ``preauth_max_frame`` before it (2010); a
client that goes silent (``idle_timeout``),
a frame longer than ``max_frame`` (2010), a malformed frame (2195, then closed), a
version 1 client (a version 1 refusal it can print), a TLS client on a plain listener
and the reverse (logged, closed), more than ``max_connections`` (2025; of which at most
``max_pending`` before hello, the oldest dropped for a new one), and a wrong or
missing credential (2035, counted and logged with the peer address by the
:class:`~miqm.net.auth.Authenticator`).
"""

from __future__ import annotations

import errno
import itertools
import os
import select
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from miqm.net.auth import ADMIN, RateLimit, loggable, split
from miqm.net.protocol import (
    MAX_FRAME,
    MQRC_DATA_LENGTH_ERROR,
    MQRC_MAX_CONNS_LIMIT_REACHED,
    MQRC_NOT_AUTHORIZED,
    MQRC_SSL_INITIALIZATION_ERROR,
    MQRC_UNEXPECTED_ERROR,
    PROTOCOL_VERSION,
    READ_TIMEOUT,
    FrameReader,
    NetError,
    OldProtocol,
    ProtocolError,
    encode,
    encode_v1,
    error_reply,
    is_tls_hello,
    ok_frame,
    set_deadlines,
)

Handler = Callable[[dict[str, Any], "Session"], dict[str, Any]]

_session_ids = itertools.count(1)

#: Largest frame a client may send before its hello has passed: a hello with a credential
#: is a few hundred bytes. A client that has not authenticated cannot make the listener
#: buffer a 100 MiB frame.
PREAUTH_MAX_FRAME = 8 * 1024

#: A JSON header this long or longer is refused from a connection not known as the
#: administrator (an application principal's, and before every hello): a request's
#: header is a few hundred bytes (an MQSC command is at most MQ's 32,762 characters).
#: Each of its JSON values costs 30 to 60 bytes once decoded: 23 MiB of ``[],`` took
#: 600 MiB of the queue manager's memory, kept after the request; this limit holds it
#: to a few MiB.
MAX_REQUEST_HEADER = 256 * 1024

#: Replies held back while more pipelined requests are buffered, at most this many bytes.
_COALESCE = 256 * 1024

#: SO_PEERCRED's answer: the peer process's pid, uid and gid (Linux ``struct ucred``)
_UCRED = struct.Struct("3i")

#: What this listener does beyond protocol version 2, named in its hello reply so that a
#: client uses it only where it is there (the instances of a queue manager may run
#: different miqm releases during an upgrade). ``quiet``: a request with ``"async": 2``
#: is answered only if it fails. ``packed``: a consumer may ask for batches whose
#: per-message fields are a binary table (miqm/net/streaming.py, encode_batch).
#: ``putcommit``: a put under syncpoint with ``"commit": true`` is a unit of work of that
#: one put, committed (the service's ``_put``).
FEATURES = ("quiet", "packed", "putcommit")

#: Why the listener refuses or closes a connection (``Listener.rejected``'s keys; the
#: metrics list each, 0 until it happens, so that a rate over them starts at once)
REFUSAL_REASONS = ("handshake_timeout", "idle", "local_user", "malformed", "max_connections",
                   "no_thread", "old_protocol", "plain_on_tls", "preauth_evicted", "silent",
                   "tls_handshake", "tls_on_plain")

#: A hello refused with one of these ends its connection (2058: another queue manager's
#: name; 2035: no CONNECT authority). A standby's 2543 and an ending instance's 2161/2162
#: keep it: control commands (endmqm -x) go on over it.
_HELLO_ENDS = frozenset({2035, 2058})

#: MQRC 2161 MQRC_Q_MGR_QUIESCING: a controlled end (endmqm, -c, -w) is under way
MQRC_Q_MGR_QUIESCING = 2161
#: MQRC 2162 MQRC_Q_MGR_STOPPING: an immediate or pre-emptive end, or a switchover
MQRC_Q_MGR_STOPPING = 2162

#: What poll reports for a connection whose client has gone (POLLRDHUP: the peer closed
#: its end, even with unread data before the end; Linux). POLLIN is asked for only so that
#: poll answers at once; it alone means "a request is waiting", not "gone".
_GONE_EVENTS = (select.POLLIN | select.POLLERR | select.POLLHUP | select.POLLNVAL
                | getattr(select, "POLLRDHUP", 0))


def run_as_batch() -> None:
    """The calling thread (and the threads it starts) run as ``SCHED_BATCH`` (Linux;
    elsewhere, or where it is refused, nothing changes).

    A session thread wakes when its client's request arrives, which is nearly always
    while another session thread holds the interpreter lock. As an ordinary thread it
    preempts that one at once, finds the lock taken and sleeps again: two context
    switches for nothing. A batch thread is not run ahead of the running one on a
    wake-up; it runs when that one blocks (in a read, a log force), which is also
    when the lock is free. Eight connections doing put+commit: 3.2-3.4 context
    switches per message in the server before, 2.6 after, and about a tenth more
    messages per second (docs/benchmarks.md). The HA controller's verify, monitor and
    liveness threads stay ordinary, so they still run ahead of every session thread, and
    so does a session that streams (:func:`run_as_ordinary`)."""
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except (AttributeError, OSError):
        pass


def run_as_ordinary() -> None:
    """The calling thread (and the threads it starts from now on) run as ordinary
    ``SCHED_OTHER`` threads again: a session that starts a streaming consumer.

    A stream's session thread reads acknowledgements while the stream's pusher and
    committers pass the interpreter lock around; as batch threads they halved a
    consumer's rate (20,600 against 28,200 messages/s, with the server's CPU per
    message 48 against 20-29 µs; docs/benchmarks.md)."""
    try:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    except (AttributeError, OSError):
        pass


#: TCP keepalive for client connections (seconds): first probe after ``idle`` seconds
#: of silence, then every ``interval``, the connection given up after ``count`` probes
#: unanswered. A client whose host died or was cut off sends no FIN or RST: a
#: consumer's connection waiting on an empty queue is not idle (the listener's idle
#: timeout spares it), so without probes it lasted for ever, and took the next messages
#: to come, which stayed locked until TCP gave up retransmitting them (about 15 minutes).
#: Probes run only while nothing is in flight; data unacknowledged is TCP's own business
#: (no TCP_USER_TIMEOUT: it would also drop a client that merely stopped reading for a
#: while, which the idle timeout judges).
@dataclass(frozen=True)
class KeepAlive:
    """TCP keepalive timing of a listener's client connections."""

    idle: int = 60
    interval: int = 10
    count: int = 6


def set_keepalive(conn: socket.socket, keepalive: KeepAlive) -> None:
    """Keepalive probes on ``conn`` (options this platform lacks are left out)."""
    opts = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    for name, value in (("TCP_KEEPIDLE", keepalive.idle),
                        ("TCP_KEEPINTVL", keepalive.interval),
                        ("TCP_KEEPCNT", keepalive.count)):
        if hasattr(socket, name):
            opts.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    for level, opt, value in opts:
        try:
            conn.setsockopt(level, opt, value)
        except OSError:
            pass


_FRAME_LEN = struct.Struct(">I")
_FRAME_PREFIX = struct.Struct(">II")


class _CheckedReader(FrameReader):
    """A :class:`FrameReader` that refuses a header of ``MAX_REQUEST_HEADER`` or more
    from its length fields, before the frame is read or decoded: for connections not
    (yet) known as the administrator's. An administrator's connection reads through a
    plain FrameReader (:meth:`Listener._reader_for`), so its requests pay nothing for
    this."""

    def read(self) -> dict[str, Any]:
        """The next frame, as :meth:`FrameReader.read`; ProtocolError (2010) for a
        header of ``MAX_REQUEST_HEADER`` or more."""
        buf, pos = self._buf, self._pos
        if len(buf) - pos < 8:
            self._fill(4, True)
            (length,) = _FRAME_LEN.unpack_from(self._buf, self._pos)
            if 4 <= length <= self.max_frame:
                self._fill(8, False)  # a frame this long has its header length next
            buf, pos = self._buf, self._pos
        # the header length's two high bytes: 0 and below 4 for any header under 256 KiB
        # (MAX_REQUEST_HEADER), so a usual request costs two byte reads here
        if len(buf) - pos >= 8 and (buf[pos + 4] or buf[pos + 5] >= 4):
            self._refuse_long_header()
        return FrameReader.read(self)

    def _refuse_long_header(self) -> None:
        """ProtocolError (2010) if the next frame's header is MAX_REQUEST_HEADER or
        longer; a frame the reader refuses anyway (too long, a header longer than its
        frame) and a version 1 frame (first byte ``{``, refused in words it can print)
        are left to it."""
        length, hlen = _FRAME_PREFIX.unpack_from(self._buf, self._pos)
        if (MAX_REQUEST_HEADER <= hlen <= length - 4 and length <= self.max_frame
                and self._buf[self._pos + 4] != 0x7B):
            raise ProtocolError(f"a frame header of {hlen} bytes exceeds this "
                                f"connection's limit of {MAX_REQUEST_HEADER}",
                                mqrc=MQRC_DATA_LENGTH_ERROR)


class _LogLimit:
    """At most ``per_minute`` lines a minute (:class:`miqm.net.auth.RateLimit`): the lines
    bad input writes; the first line after a minute with some left out says how many."""

    def __init__(self, log: Callable[[str], None], per_minute: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._write = log
        self._limit = RateLimit(per_minute, clock)

    def __call__(self, line: str) -> None:
        write, more = self._limit.take()
        if write:
            if more:
                line += f" ({more} more such lines in the last minute were not logged)"
            self._write(line)


def _cut_before_hello(session: Session, raw: socket.socket) -> None:
    """End a connection that has not passed hello (its handshake deadline passed, or it
    made room for a newer one): shut down, so that its thread, blocked in a read, sees
    the end and closes it. Called under the listener's lock, before that thread takes
    its entry out, so the descriptor is still this connection's."""
    session.handshake_expired = True
    sock = session._sock if session._sock is not None else raw
    try:
        # the plain socket call, also on a TLS socket mid-handshake
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


def _owes_nothing() -> bool:
    """:attr:`Session.owes_ack` of a session that runs no stream."""
    return False


class Session:
    """Per-connection state: an id, the peer address, a ``state`` dict the handler owns
    (the service keeps the open unit of work there), the authenticated ``principal``,
    and close callbacks."""

    def __init__(self, peer: str = "local") -> None:
        self.id = next(_session_ids)
        self.peer = peer
        self.state: dict[str, Any] = {}
        self.principal: str | None = None
        #: what serves its requests once authenticated when not the listener's
        #: ``handler``: its ``app_handler``, for a principal other than admin
        self.handler: Handler | None = None
        self._callbacks: list[Callable[[Session], None]] = []
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._sock: socket.socket | None = None
        self.closed = False
        #: streams that keep a silent connection alive (a consumer waiting for messages)
        self.streams = 0
        #: asked when the connection has been silent for the idle timeout with streams
        #: running: true while a stream has pushed messages the client has not
        #: acknowledged (it is not waiting for messages: the client owes an answer)
        self.owes_ack: Callable[[], bool] = _owes_nothing
        #: set when the listener dropped the connection for not passing hello in time
        self.handshake_expired = False
        #: requests read whose replies have not been sent yet (its thread counts them):
        #: Listener.stop lets them go out (endmqm's "end" is answered just before the
        #: instance stops its listener)
        self.unanswered = 0

    def on_close(self, callback: Callable[[Session], None]) -> None:
        """Run ``callback(session)`` when the session closes (at once if already closed)."""
        with self._lock:
            if not self.closed:
                self._callbacks.append(callback)
                return
        callback(self)

    def send(self, data: bytes) -> None:
        """Send encoded frames (OSError if the connection is gone)."""
        sock = self._sock
        if sock is None:
            raise OSError("the session has no connection")
        with self._write_lock:
            sock.sendall(data)

    def peer_gone(self) -> bool:
        """Whether the client has gone: its end of the connection is closed (EOF, a reset)
        or the session was closed. Looks without waiting and without reading, so a
        request the client already sent stays for the session's thread. A handler that
        waits (a get with wait) asks between slices of its wait, and before it takes a
        message, so that a client that is gone does not take one with it."""
        if self.closed:
            return True
        sock = self._sock
        if sock is None:
            return False  # an in-process session: no connection to lose
        try:
            fd = sock.fileno()
        except OSError:
            return True
        if fd < 0:
            return True
        poller = select.poll()
        poller.register(fd, _GONE_EVENTS)
        try:
            events = poller.poll(0)
        except OSError:
            return True
        return any(ev & (_GONE_EVENTS & ~select.POLLIN) for _fd, ev in events)

    def push(self, header: dict[str, Any], body: bytes | None = None) -> None:
        """Send an unsolicited frame (a consumer's messages) to the client."""
        self.send(encode(header, body if body is not None else b""))

    def abort(self) -> None:
        """Break the connection (STOP CONN): the session's thread sees it end and closes
        the session, which runs the close callbacks (its unit of work is backed out)."""
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        """Run the close callbacks once; later calls do nothing. Callback errors are
        swallowed after the others ran: one failed backout must not skip the rest."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            try:
                cb(self)
            except Exception:  # a close hook must not stop the others
                pass

    def __repr__(self) -> str:
        return f"Session({self.id}, {self.peer})"


class Listener:
    """A TCP listener serving ``handler`` on ``host:port`` (port 0 = any free port).

    ``authenticator`` (:class:`miqm.net.auth.Authenticator`) checks the credential in
    each connection's ``hello``; until it passes, every request is answered 2035.
    ``tls`` is a server-side :class:`ssl.SSLContext` (None = plain TCP). ``keepalive``
    probes client TCP connections (:class:`KeepAlive`; None: no probes).
    """

    def __init__(self, handler: Handler, host: str = "127.0.0.1", port: int = 0,
                 *, log: Callable[[str], None] | None = None, authenticator: Any = None,
                 tls: ssl.SSLContext | None = None, idle_timeout: float = 600.0,
                 handshake_timeout: float = 10.0, max_connections: int = 5000,
                 max_frame: int = MAX_FRAME,
                 preauth_max_frame: int = PREAUTH_MAX_FRAME, ipc: str | None = None,
                 app_handler: Handler | None = None, log_per_minute: int = 20,
                 max_pending: int | None = None,
                 keepalive: KeepAlive | None = KeepAlive()) -> None:
        self.handler = handler
        #: probes on client TCP connections (None: none; qm.ini TCP KeepAlive=No)
        self.keepalive = keepalive
        #: serves the sessions of principals other than admin (None: ``handler``)
        self.app_handler = app_handler
        self.host = host
        self.port = port
        self._log = log or (lambda _msg: None)
        #: what bad input writes to the error log goes through this limit
        self._log_bad = _LogLimit(self._log, log_per_minute)
        self.authenticator = authenticator
        self.tls = tls
        self.idle_timeout = idle_timeout
        self.handshake_timeout = handshake_timeout
        self.max_connections = max_connections
        #: connections that have not passed hello yet, at most (None: a fifth of
        #: ``max_connections``, at most 1,000); past it the oldest is dropped (see
        #: _accept_loop), so clients that never authenticate cannot hold every slot
        self.max_pending = max(1, max_pending if max_pending is not None
                               else min(1000, max_connections // 5))
        self.max_frame = max_frame
        self.preauth_max_frame = min(preauth_max_frame, max_frame)
        self._sock: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None
        #: the local (IPC) socket's abstract name once bound, else None: see start()
        self.ipc = ipc
        self._ipc_sock: socket.socket | None = None
        self._ipc_thread: threading.Thread | None = None
        self._reaper_thread: threading.Thread | None = None
        #: connections that have not passed hello yet: session id -> (deadline, session,
        #: the accepted socket); the reaper drops those past their deadline
        self._pending: dict[int, tuple[float, Session, socket.socket]] = {}
        self._conns: dict[int, tuple[socket.socket, Session, threading.Thread]] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        #: connections refused or dropped for bad input, by reason (for status/metrics)
        self.rejected: dict[str, int] = {}
        #: warnings about its configuration for the console of the strmqm that starts the
        #: instance (miqm/net/listen.py: a credentials file others can read)
        self.warnings: list[str] = []
        #: the frame each connection gets as its last (:meth:`quiesce`), or None
        self._notice: dict[str, Any] | None = None

    @property
    def address(self) -> tuple[str, int]:
        """The bound (host, port); valid after :meth:`start`."""
        return self.host, self.port

    def start(self) -> tuple[str, int]:
        """Bind, listen and start accepting; returns the bound (host, port). NetError
        (AMQ9218) with one line if the address cannot be bound (a port in use)."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError as exc:
            raise NetError(f"AMQ9218: The TCP/IP listener program could not create a "
                           f"socket: {exc}", amq="AMQ9218", mqrc=2059) from None
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
            sock.listen(512)
        except (OSError, OverflowError) as exc:
            sock.close()
            reason = getattr(exc, "strerror", None) or str(exc)
            if isinstance(exc, socket.gaierror) or \
                    getattr(exc, "errno", None) == errno.EADDRNOTAVAIL:
                # the address, not the port: no free port would help
                advice = ("Correct the address (Host in the Listener stanza of qm.ini, or "
                          "MIQM_LISTENER_HOST) to one of this host's own, or 0.0.0.0 for "
                          "all of them.")
            else:
                advice = ("Choose a free port (Port in the Listener stanza of qm.ini, or "
                          "MIQM_LISTENER_PORT) or end what uses it.")
            raise NetError(
                f"AMQ9218: The TCP/IP listener program could not bind to {self.host}"
                f"({self.port}): {reason}. {advice}", amq="AMQ9218", mqrc=2059) from None
        self._sock = sock
        self.host, self.port = sock.getsockname()[:2]
        self._accept_thread = threading.Thread(target=self._accept_loop, args=(sock, False),
                                               name="miqm-listener", daemon=True)
        self._accept_thread.start()
        if self.ipc:
            self._start_ipc(self.ipc)
        if self.handshake_timeout and self.handshake_timeout > 0:
            self._reaper_thread = threading.Thread(target=self._reap_loop,
                                                   name="miqm-listener-handshake",
                                                   daemon=True)
            self._reaper_thread.start()
        return self.host, self.port

    def _start_ipc(self, name: str) -> None:
        """Listen also on a local socket in Linux's abstract namespace (MQ's local
        commands use IPC, not the channel): commands on this host reach the instance
        without TLS, which a listener that requires client certificates would ask of
        them, and without a file to leave behind after kill -9. Only processes of this
        user (or root) are served there; they still pass hello with a credential. Not
        being able to bind it is a warning: the TCP listener is the contract."""
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        except (OSError, AttributeError) as exc:
            self._no_ipc(f"could not be made ({exc})")
            return
        try:
            sock.bind("\0" + name)
            sock.listen(64)
        except OSError as exc:
            sock.close()
            self._no_ipc(f"could not be bound ({exc.strerror or exc})")
            return
        self._ipc_sock = sock
        self._ipc_thread = threading.Thread(target=self._accept_loop, args=(sock, True),
                                            name="miqm-listener-ipc", daemon=True)
        self._ipc_thread.start()

    def _no_ipc(self, why: str) -> None:
        """No local socket: a warning for the error log and the starting console."""
        self.ipc = None
        text = f"the local listener socket {why}; commands on this host use the TCP listener"
        self._log(f"AMQ9218: {text}")
        self.warnings.append(f"AMQ9218W: {text}")

    def _reap_loop(self) -> None:
        """Drop connections that have not passed hello within ``handshake_timeout`` of
        connecting, whatever they send meanwhile (a length prefix and then silence, a
        frame dripped a byte at a time, a TLS handshake and then silence): a client that
        has not authenticated holds a connection slot for seconds, not ``idle_timeout``."""
        while not self._stopping.is_set():
            now = time.monotonic()
            nearest = now + 1.0
            with self._lock:
                expired = [(sid, entry) for sid, entry in self._pending.items()
                           if entry[0] <= now]
                for sid, _entry in expired:
                    del self._pending[sid]
                if self._pending:
                    nearest = min(nearest, min(e[0] for e in self._pending.values()))
                if expired:  # counted before the client can see its connection end
                    self.rejected["handshake_timeout"] = (
                        self.rejected.get("handshake_timeout", 0) + len(expired))
                # the socket is shut down under the lock: its session's thread closes it
                # only after taking its entry out (_done_pending), so the descriptor is
                # still this connection's
                for _sid, (_deadline, session, raw) in expired:
                    _cut_before_hello(session, raw)
            self._stopping.wait(max(0.01, nearest - time.monotonic()))

    def _drop_oldest_pending(self) -> None:
        """Make room among the connections that have not passed hello (called under the
        lock, with ``max_pending`` of them): the oldest is dropped as its handshake
        deadline would drop it. Unauthenticated connections had counted against
        ``max_connections`` alone: 6,600 opened in ten seconds and left silent filled
        all 5,000 slots, and a client with a good credential got 2025. A client that
        sends its hello passes it within milliseconds, so it is never the oldest here
        unless ``max_pending`` connections arrive within those milliseconds."""
        sid = next(iter(self._pending))  # inserted in deadline order: the oldest first
        _deadline, session, raw = self._pending.pop(sid)
        self.rejected["preauth_evicted"] = self.rejected.get("preauth_evicted", 0) + 1
        _cut_before_hello(session, raw)  # under the lock, as the reaper does

    def _done_pending(self, session: Session) -> None:
        """``session`` passed hello or ended: no handshake deadline any more."""
        if session.id in self._pending:
            with self._lock:
                self._pending.pop(session.id, None)

    def _count(self, why: str) -> None:
        with self._lock:
            self.rejected[why] = self.rejected.get(why, 0) + 1

    def _accept_loop(self, lsock: socket.socket, local: bool) -> None:
        while not self._stopping.is_set():
            try:
                conn, peer = lsock.accept()
            except OSError:
                if self._stopping.is_set():
                    return
                time.sleep(0.01)  # EMFILE and friends: do not spin
                continue
            if local:
                who = self._local_peer(conn)
                if who is None:
                    continue
                session = Session(who)
            else:
                try:
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                except OSError:
                    pass
                if self.keepalive is not None:
                    set_keepalive(conn, self.keepalive)
                session = Session(f"{peer[0]}({peer[1]})")
            with self._lock:
                full = len(self._conns) >= self.max_connections
            if full:
                self._count("max_connections")
                self._refuse(conn, MQRC_MAX_CONNS_LIMIT_REACHED,
                             f"the listener has its maximum of {self.max_connections} "
                             "connections (MQRC 2025 MQRC_MAX_CONNS_LIMIT_REACHED)",
                             local=local)
                continue
            thread = threading.Thread(target=self._serve, args=(conn, session, local),
                                      name=f"miqm-session-{session.id}", daemon=True)
            with self._lock:
                if self._stopping.is_set():
                    conn.close()
                    return
                self._conns[session.id] = (conn, session, thread)
                if self._reaper_thread is not None and self.handshake_timeout > 0:
                    if len(self._pending) >= self.max_pending:
                        self._drop_oldest_pending()
                    self._pending[session.id] = (
                        time.monotonic() + self.handshake_timeout, session, conn)
            try:
                thread.start()
            except RuntimeError:  # cannot start a thread: refuse this one, keep serving
                with self._lock:
                    self._conns.pop(session.id, None)
                    self._pending.pop(session.id, None)
                self._count("no_thread")
                conn.close()

    def _local_peer(self, conn: socket.socket) -> str | None:
        """The name a local connection's session gets (``local(pid N)``), or None when
        its process belongs to another user than this listener's (refused with 2035)."""
        try:
            pid, uid, _gid = _UCRED.unpack(conn.getsockopt(
                socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
        except (OSError, struct.error):
            pid, uid = 0, -1
        if uid not in (os.getuid(), 0):
            self._count("local_user")
            self._log_bad(f"AMQ5534: a local connection from pid {pid} (uid {uid}) was refused: "
                      "the local socket serves only the queue manager's own user")
            # marked: a client goes on to the TCP listener
            self._refuse(conn, MQRC_NOT_AUTHORIZED, "the local socket serves only the queue "
                         "manager's own user (MQRC 2035 MQRC_NOT_AUTHORIZED): connect "
                         "through the TCP listener", local=True, local_refused=True)
            return None
        return f"local(pid {pid})"

    def _refuse(self, conn: socket.socket, mqrc: int, text: str, local: bool = False,
                local_refused: bool = False) -> None:
        """Answer ``mqrc`` (not through TLS, which has not begun) and close; with
        ``local_refused`` the reply says the local socket refused this process."""
        if self.tls is None or local:
            reply = error_reply(mqrc, text)
            if local_refused:
                reply["local"] = "refused"
            try:
                conn.settimeout(0.5)
                conn.sendall(encode(reply))
            except OSError:
                pass
        try:
            conn.close()
        except OSError:
            pass

    def _handshake(self, conn: socket.socket, session: Session,
                   tls: ssl.SSLContext | None) -> socket.socket | None:
        """TLS handshake (when configured) within the handshake timeout."""
        conn.settimeout(self.handshake_timeout)
        if tls is None:
            return conn
        try:
            first = conn.recv(1, socket.MSG_PEEK)
        except OSError:
            self._count("silent")
            return None
        if first and first[0] != 0x16:  # not a TLS record: a plain client
            self._count("plain_on_tls")
            self._log_bad(f"AMQ9637: {session.peer} sent plain TCP to this TLS listener; the "
                      "client must connect with TLS (MIQM_TLS_CA)")
            try:
                conn.sendall(encode(error_reply(
                    MQRC_SSL_INITIALIZATION_ERROR,
                    "this listener requires TLS: connect with TLS (set MIQM_TLS_CA to the "
                    "CA file that signed the listener's certificate)", amq="AMQ9637")))
            except OSError:
                pass
            return None
        tconn: ssl.SSLSocket | None = None
        try:
            # the handshake runs on the session's socket, so that the handshake deadline
            # (_reap_loop) can end a client that drips it
            tconn = tls.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
            session._sock = tconn
            tconn.do_handshake()
        except (ssl.SSLError, OSError, ValueError) as exc:
            session._sock = None
            if tconn is not None:  # it holds the connection now (conn is detached)
                try:
                    tconn.close()
                except OSError:
                    pass
            if session.handshake_expired:
                return None
            self._count("tls_handshake")
            self._log_bad(f"AMQ9637: the TLS handshake with {session.peer} failed: "
                      f"{getattr(exc, 'reason', None) or exc} (a plain client on a TLS "
                      "listener, or a certificate the listener does not accept)")
            return None
        return tconn

    def _serve(self, raw: socket.socket, session: Session, local: bool = False) -> None:
        run_as_batch()
        conn: socket.socket | None = raw
        tls = None if local else self.tls  # the local socket never leaves the host
        try:
            conn = self._handshake(raw, session, tls)
            if conn is None:
                return
            session._sock = conn
            reader: FrameReader = _CheckedReader(conn, self.preauth_max_frame)
            if tls is None:
                try:
                    prefix = reader.peek_prefix()
                except (NetError, OSError):
                    self._count("silent")
                    return
                if is_tls_hello(prefix):
                    self._count("tls_on_plain")
                    self._log_bad(f"AMQ9631: {session.peer} started a TLS handshake on this "
                              "plain-TCP listener; configure the client without TLS or the "
                              "listener with SSLCertFile/SSLKeyFile")
                    return
            if tls is None:
                set_deadlines(conn, self.idle_timeout)
            else:
                conn.settimeout(self.idle_timeout or None)
            self._loop(conn, reader, session)
        finally:
            self._done_pending(session)
            if conn is not None:
                try:
                    conn.close()
                except OSError:
                    pass
            if conn is not raw:
                try:
                    raw.close()
                except OSError:
                    pass
            session.close()
            with self._lock:
                self._conns.pop(session.id, None)

    def _loop(self, conn: socket.socket, reader: FrameReader, session: Session) -> None:
        try:
            self._serve_requests(conn, reader, session)
        finally:
            session.unanswered = 0

    def _serve_requests(self, conn: socket.socket, reader: FrameReader,
                        session: Session) -> None:
        out: list[bytes] = []
        size = 0
        while not self._stopping.is_set():
            try:
                request = reader.read()
            except READ_TIMEOUT:
                if (session.streams > 0 and session.principal is not None
                        and not session.owes_ack()):
                    continue  # a consumer waiting for messages is not idle
                # one holding pushed messages it never acknowledged is: a client stopped
                # (SIGSTOP) or cut off held them locked for ever (MQ's heartbeat ends
                # such a channel)
                self._count("idle")
                return
            except OldProtocol:
                self._count("old_protocol")
                try:
                    session.send(encode_v1(error_reply(
                        MQRC_UNEXPECTED_ERROR,
                        f"this client speaks protocol version 1; the queue manager speaks "
                        f"version {PROTOCOL_VERSION}: upgrade the client (miqm) to match",
                        amq="AMQ9504")))
                except OSError:
                    pass
                return
            except (ProtocolError, RecursionError, MemoryError) as exc:
                # RecursionError: a header nested deeper than the JSON parser goes (a few
                # KiB of "[" do it); it had ended the session's thread with a traceback
                # and no reply, no count and no line in the error log
                if not isinstance(exc, ProtocolError):
                    exc = ProtocolError(f"a frame header could not be decoded "
                                        f"({type(exc).__name__})")
                self._count("malformed")
                self._log_bad(f"AMQ9504: a protocol error from {session.peer}: {exc}; "
                          "the connection was closed")
                try:
                    session.send(encode(error_reply(
                        exc.mqrc if exc.mqrc == MQRC_DATA_LENGTH_ERROR else MQRC_UNEXPECTED_ERROR,
                        f"AMQ9504: protocol error: {exc}", amq="AMQ9504")))
                except OSError:
                    pass
                return
            except (NetError, OSError):
                self._send_notice(session)
                return
            session.unanswered += 1
            close_after = False
            if session.principal is None:
                reply, close_after = self._authenticate(request, session)
                if session.principal is not None:  # authenticated: the usual limits
                    self._done_pending(session)
                    reader = self._reader_for(session, reader)
                if reply is None:
                    reply = self._dispatch(request, session)
                    if request.get("op") == "hello":
                        if reply.get("ok"):
                            reply["features"] = list(FEATURES)
                        elif reply.get("mqrc") in _HELLO_ENDS:
                            # another queue manager's name, or no CONNECT authority: the
                            # connection ends, as MQCONN's does (it stayed open, its
                            # principal authenticated, and served, unseen by DISPLAY CONN)
                            close_after = True
            else:
                reply = self._dispatch(request, session)
            # a quiet pipelined request ("async": 2) is answered only if it failed
            if not (request.get("async") == 2 and reply.get("ok") is True):
                rid = request.get("id")
                if type(rid) is int and len(reply) == 1 and reply.get("ok") is True:
                    data = ok_frame(rid)  # a bare "ok": most replies of put+commit
                else:
                    if "id" in request:
                        reply["id"] = rid
                    try:
                        data = encode(reply)
                    except (ValueError, TypeError, NetError) as exc:
                        # an unserialisable reply is a bug in a handler: say so, keep
                        # serving
                        data = encode(error_reply(MQRC_UNEXPECTED_ERROR,
                                                  f"unserialisable reply: {exc}"))
                out.append(data)
                size += len(data)
            if not close_after and size < _COALESCE and reader.buffered():
                continue
            try:
                if out:
                    session.send(b"".join(out) if len(out) > 1 else out[0])
            except OSError:
                return
            finally:
                session.unanswered = 0
            out.clear()
            size = 0
            if close_after:
                return
        self._send_notice(session)  # the listener stopped between two requests

    def _reader_for(self, session: Session, reader: FrameReader) -> FrameReader:
        """The reader for ``session`` now that it is authenticated: the usual frame limit,
        and for the administrator a plain FrameReader (nothing checked per request),
        taking over what was read already."""
        if session.principal != ADMIN:
            reader.max_frame = self.max_frame
            return reader
        plain = FrameReader(reader.sock, self.max_frame)
        plain._buf, plain._pos = reader._buf, reader._pos
        return plain

    def _authenticate(self, request: dict[str, Any],
                      session: Session) -> tuple[dict[str, Any] | None, bool]:
        """Before a successful hello: (reply, close?) — None lets the request through."""
        auth = self.authenticator
        if request.get("op") != "hello":
            if auth is None or not auth.required:
                self._authenticated(session, ADMIN)
                return None, False
            auth.check(None, session.peer)  # counted and logged like a wrong credential
            return error_reply(MQRC_NOT_AUTHORIZED,
                               "not authorized: send hello with a credential first "
                               "(MQRC 2035 MQRC_NOT_AUTHORIZED)", amq="AMQ5534"), True
        if auth is None:
            self._authenticated(session, ADMIN)
            return None, False
        credential = request.get("credential")
        principal = auth.check(credential, session.peer)
        if principal is None:
            what = "missing" if not credential else "not valid"
            named = split(credential)[0] if isinstance(credential, str) else ""
            if named and named != ADMIN:
                # an application's credential: pointing it at crtmqm's (the admin's)
                # would hand it more than its own authorities
                advice = (f"set MIQM_CREDENTIAL (or the application's credential=) to "
                          f"principal '{loggable(named)}' and the secret 'miqm credential "
                          "--add' printed for it")
            else:
                advice = ("set MIQM_CREDENTIAL (or the application's credential=) to the "
                          "credential crtmqm created (the data directory's credentials "
                          "file)")
            return error_reply(MQRC_NOT_AUTHORIZED,
                               f"the credential is {what} for this queue manager (MQRC 2035 "
                               f"MQRC_NOT_AUTHORIZED): {advice}", amq="AMQ5534"), True
        self._authenticated(session, principal)
        return None, False

    def _authenticated(self, session: Session, principal: str) -> None:
        session.principal = principal
        # None: the listener's ``handler``, looked up per request (it may be replaced)
        session.handler = None if principal == ADMIN else self.app_handler

    def _dispatch(self, request: dict[str, Any], session: Session) -> dict[str, Any]:
        version = request.get("v", PROTOCOL_VERSION)
        if version != PROTOCOL_VERSION:
            return error_reply(MQRC_UNEXPECTED_ERROR,
                               f"protocol version {version!r} is not supported by this "
                               f"queue manager (it speaks version {PROTOCOL_VERSION})")
        try:
            reply = (session.handler or self.handler)(request, session)
        except Exception as exc:  # one bad request must not kill the session
            self._log_bad(f"request {loggable(str(request.get('op')))!r} from {session.peer} "
                          f"failed: {type(exc).__name__}: {loggable(str(exc), 300)}")
            return error_reply(getattr(exc, "mqrc", MQRC_UNEXPECTED_ERROR),
                               f"{type(exc).__name__}: {exc}")
        # handlers make a new dict per reply: the id is set on it without a copy
        return reply if isinstance(reply, dict) else {"ok": True, "result": reply}

    def quiesce(self, notice: dict[str, Any]) -> None:
        """The instance is ending: :meth:`stop` gives each connection ``notice`` (an error
        reply without an ``id``: ``mqrc`` 2161 or 2162, ``quiesce``, ``reconnect``) as its
        last frame, after the replies of every request it has read. The client takes it
        as the answer to a call it sent that was never read (so never done)."""
        self._notice = dict(notice)

    def _send_notice(self, session: Session) -> None:
        """A connection whose reading ended while the listener stops gets the notice."""
        notice = self._notice
        if notice is None or not self._stopping.is_set():
            return
        try:
            session.send(encode(notice))
        except (OSError, ValueError):
            pass

    def sessions(self) -> list[Session]:
        """The sessions open now."""
        with self._lock:
            return [s for _c, s, _t in self._conns.values()]

    def stop(self, timeout: float = 2.0) -> None:
        """Stop accepting, close every connection, and run every session's close hooks
        (their units of work are backed out) before returning."""
        self._stopping.set()
        for lsock in (self._sock, self._ipc_sock):
            if lsock is None:
                continue
            try:
                # close() alone does not wake a thread blocked in accept() on Linux
                lsock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                lsock.close()
            except OSError:
                pass
        # replies already being made go out first (a short grace: a handler stuck in a
        # long get-wait is not waited for here). Polled: a lock and a wake-up per request
        # to count them would cost every request for the sake of the last one.
        grace = time.monotonic() + min(0.5, max(0.0, timeout))
        while True:
            with self._lock:
                conns = list(self._conns.values())
            if all(s.unanswered <= 0 for _c, s, _t in conns) or time.monotonic() >= grace:
                break
            time.sleep(0.002)
        if self._notice is not None:
            # stop reading: each session thread, its replies sent, sends the notice
            # (_send_notice) and ends; the plain call, so TLS can still write
            for conn, session, _thread in conns:
                sock = session._sock if session._sock is not None else conn
                try:
                    socket.socket.shutdown(sock, socket.SHUT_RD)
                except OSError:
                    pass
            told = time.monotonic() + min(1.0, max(0.0, timeout))
            for _conn, _session, thread in conns:
                if thread.is_alive():
                    thread.join(max(0.0, told - time.monotonic()))
        for conn, _session, _thread in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        deadline = time.monotonic() + timeout  # one budget for all, not one per session
        for _conn, session, thread in conns:
            # a connection accepted just now may be listed before its thread started
            # (join() would raise): its socket is shut already, so it ends at once
            if thread.is_alive():
                thread.join(max(0.0, deadline - time.monotonic()))
            # a thread still inside a handler (a long get-wait) must not keep its unit of
            # work open past the end of the instance: run the hooks from here
            session.close()
        for accepting in (self._accept_thread, self._ipc_thread):
            if accepting is not None:
                accepting.join(max(0.1, deadline - time.monotonic()))


def server_tls_context(cert_file: str, key_file: str,
                       client_ca_file: str = "") -> ssl.SSLContext:
    """A server-side TLS context (TLS 1.2+); with ``client_ca_file`` clients must present
    a certificate it signed. ConfigError (one line) if a file cannot be loaded."""
    from miqm.errors import ConfigError

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    # each file named with its key: "[Errno 2] No such file or directory" alone left the
    # administrator guessing which of three
    what = f"SSLCertFile={cert_file} with SSLKeyFile={key_file}"
    try:
        ctx.load_cert_chain(cert_file, key_file)
        if client_ca_file:
            what = f"SSLClientCAFile={client_ca_file}"
            ctx.load_verify_locations(client_ca_file)
            ctx.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise ConfigError(f"AMQ9637: the listener's TLS files cannot be used: {what}: {why}; "
                          "check SSLCertFile, SSLKeyFile and SSLClientCAFile in qm.ini.",
                          amq="AMQ9637") from None
    return ctx
