"""The listener: accepts client connections and hands each request to a handler.

One thread per connection: requests on a connection are answered in order, and a
get-with-wait blocks only its own connection. That is plenty for the thousands of
messages per second a queue manager on one log disk can commit (the log force, not the
listener, is the limit), and it keeps a session's unit of work on one thread.

The execution controller creates a :class:`Listener` with a handler (the
:class:`~miqm.net.service.QueueService`, wrapped for its control ops), calls
:meth:`Listener.start`, records the address, and calls :meth:`Listener.stop` when the
instance ends. Closing a session runs its ``on_close`` callbacks exactly once, which is
how the service backs out a unit of work left open by a client that went away.
"""

from __future__ import annotations

import itertools
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from miqm.net.protocol import (
    MQRC_UNEXPECTED_ERROR,
    PROTOCOL_VERSION,
    NetError,
    error_reply,
    read_frame,
    write_frame,
)

Handler = Callable[[dict[str, Any], "Session"], dict[str, Any]]

_session_ids = itertools.count(1)


class Session:
    """Per-connection state: an id, the peer address, a ``state`` dict the handler owns
    (the service keeps the open unit of work there), and close callbacks."""

    def __init__(self, peer: str = "local") -> None:
        self.id = next(_session_ids)
        self.peer = peer
        self.state: dict[str, Any] = {}
        self._callbacks: list[Callable[[Session], None]] = []
        self._lock = threading.Lock()
        self.closed = False

    def on_close(self, callback: Callable[[Session], None]) -> None:
        """Run ``callback(session)`` when the session closes (at once if already closed)."""
        with self._lock:
            if not self.closed:
                self._callbacks.append(callback)
                return
        callback(self)

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
    """A TCP listener serving ``handler`` on ``host:port`` (port 0 = any free port)."""

    def __init__(self, handler: Handler, host: str = "127.0.0.1", port: int = 0,
                 *, log: Callable[[str], None] | None = None) -> None:
        self.handler = handler
        self.host = host
        self.port = port
        self._log = log or (lambda _msg: None)
        self._sock: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None
        self._conns: dict[int, tuple[socket.socket, Session, threading.Thread]] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()

    @property
    def address(self) -> tuple[str, int]:
        """The bound (host, port); valid after :meth:`start`."""
        return self.host, self.port

    def start(self) -> tuple[str, int]:
        """Bind, listen and start accepting; returns the bound (host, port)."""
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET,
                             socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
            sock.listen(128)
        except OSError as exc:
            sock.close()
            raise NetError(
                f"AMQ9218: The TCP/IP listener program could not bind to {self.host}"
                f"({self.port}): {exc.strerror or exc}. Choose a free port.", mqrc=2059,
                amq="AMQ9218") from None
        self._sock = sock
        self.host, self.port = sock.getsockname()[:2]
        self._accept_thread = threading.Thread(target=self._accept_loop, name="miqm-listener",
                                               daemon=True)
        self._accept_thread.start()
        return self.host, self.port

    def _accept_loop(self) -> None:
        assert self._sock is not None
        while not self._stopping.is_set():
            try:
                conn, peer = self._sock.accept()
            except OSError:
                if self._stopping.is_set():
                    return
                continue
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            session = Session(f"{peer[0]}({peer[1]})")
            thread = threading.Thread(target=self._serve, args=(conn, session),
                                      name=f"miqm-session-{session.id}", daemon=True)
            with self._lock:
                if self._stopping.is_set():
                    conn.close()
                    return
                self._conns[session.id] = (conn, session, thread)
            thread.start()

    def _serve(self, conn: socket.socket, session: Session) -> None:
        try:
            while not self._stopping.is_set():
                try:
                    request = read_frame(conn)
                except (NetError, OSError):
                    return
                reply = self._dispatch(request, session)
                if "id" in request:
                    reply["id"] = request["id"]
                reply.setdefault("v", PROTOCOL_VERSION)
                try:
                    write_frame(conn, reply)
                except (OSError, ValueError, TypeError) as exc:
                    if isinstance(exc, OSError):
                        return
                    # an unserialisable reply is a bug in a handler: say so, keep serving
                    write_frame(conn, error_reply(MQRC_UNEXPECTED_ERROR,
                                                  f"unserialisable reply: {exc}"))
        finally:
            try:
                conn.close()
            except OSError:
                pass
            session.close()
            with self._lock:
                self._conns.pop(session.id, None)

    def _dispatch(self, request: dict[str, Any], session: Session) -> dict[str, Any]:
        version = request.get("v", PROTOCOL_VERSION)
        if version != PROTOCOL_VERSION:
            return error_reply(MQRC_UNEXPECTED_ERROR,
                               f"protocol version {version!r} is not supported by this "
                               f"queue manager (it speaks version {PROTOCOL_VERSION})")
        try:
            reply = self.handler(request, session)
        except Exception as exc:  # one bad request must not kill the session
            self._log(f"request {request.get('op')!r} failed: {type(exc).__name__}: {exc}")
            return error_reply(getattr(exc, "mqrc", MQRC_UNEXPECTED_ERROR),
                               f"{type(exc).__name__}: {exc}")
        return dict(reply) if isinstance(reply, dict) else {"ok": True, "result": reply}

    def sessions(self) -> list[Session]:
        """The sessions open now."""
        with self._lock:
            return [s for _c, s, _t in self._conns.values()]

    def stop(self, timeout: float = 2.0) -> None:
        """Stop accepting, close every connection, and run every session's close hooks
        (their units of work are backed out) before returning."""
        self._stopping.set()
        if self._sock is not None:
            try:
                # close() alone does not wake a thread blocked in accept() on Linux
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                self._sock.close()
            except OSError:
                pass
        with self._lock:
            conns = list(self._conns.values())
        for conn, _session, _thread in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        deadline = time.monotonic() + timeout  # one budget for all, not one per session
        for _conn, session, thread in conns:
            thread.join(max(0.0, deadline - time.monotonic()))
            # a thread still inside a handler (a long get-wait) must not keep its unit of
            # work open past the end of the instance: run the hooks from here
            session.close()
        if self._accept_thread is not None:
            self._accept_thread.join(max(0.1, deadline - time.monotonic()))
