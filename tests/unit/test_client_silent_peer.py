"""A queue manager that goes silent under a connected application: the real store and
listener in this process, reached through a TCP relay that can stop passing bytes while
keeping the application's socket open (a network partition, an active host that fenced
itself while its FIN and RST were dropped). The application must find out by itself and
go on with the next CONNAME entry, as MQ's clients do through channel heartbeats."""

from __future__ import annotations

import importlib.util
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from miqm import client as mq
from tests.unit.test_client import served  # noqa: F401  (fixture)
from tests.waiting import wait_until

pytestmark = pytest.mark.skipif(importlib.util.find_spec("miqm.store.log") is None,
                                reason="needs the store's recovery log")


class SilentRelay:
    """Relays TCP connections to ``target`` until :meth:`silence`: then the queue
    manager's side of each connection is closed (the instance behind it is gone) and the
    application's side stays open and hears nothing more; new connections are refused."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listening = socket.create_server(("127.0.0.1", 0))
        self.address = self.listening.getsockname()
        self.silent = threading.Event()
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                app, _addr = self.listening.accept()
            except OSError:
                return  # closed by silence() or close()
            if self.silent.is_set():
                app.close()
                return
            qmgr = socket.create_connection(self.target)
            with self._lock:
                self.pairs.append((app, qmgr))
            for src, dst in ((app, qmgr), (qmgr, app)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                return
            if not data:
                return
            if self.silent.is_set():
                continue  # dropped on the way, as by a partition
            try:
                dst.sendall(data)
            except OSError:
                return

    def silence(self, blackhole: bool = False) -> None:
        """From now on nothing passes; the queue manager's side ends, the application's
        side stays open. New connections are refused, or with ``blackhole`` neither
        accepted nor refused (a host powered off: the connect waits out its timeout)."""
        self.silent.set()
        if blackhole:
            self._blackhole()
        else:
            self._stop_listening()
        with self._lock:
            for _app, qmgr in self.pairs:
                qmgr.close()

    def _blackhole(self) -> None:
        # a listening socket whose accept queue is full drops every new SYN: the
        # accepting thread is stopped, the socket re-made with a backlog of 0 and filled
        address = self.listening.getsockname()
        self._stop_listening()
        self.listening = socket.socket()
        self.listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listening.bind(address)
        self.listening.listen(0)
        self.fillers = []
        for _ in range(3):
            filler = socket.socket()
            filler.setblocking(False)
            try:
                filler.connect(address)
            except BlockingIOError:
                pass
            self.fillers.append(filler)

    def _stop_listening(self) -> None:
        # shutdown wakes the accept() in progress; a close alone leaves the socket
        # listening under it until the next connection
        try:
            self.listening.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listening.close()

    def close(self) -> None:
        """Close everything the relay holds."""
        self._stop_listening()
        for filler in getattr(self, "fillers", ()):
            filler.close()
        with self._lock:
            for app, qmgr in self.pairs:
                app.close()
                qmgr.close()


@dataclass
class RelayedConsumer:
    """An application consuming Q1 through a :class:`SilentRelay` (its first CONNAME
    entry; the listener itself is the second), after the relay went silent."""

    qm: mq.QueueManager
    got: list[mq.Message]
    errors: list[BaseException]


@contextmanager
def consumer_when_silenced(server: Any, blackhole: bool, join: float,
                           **options: Any) -> Iterator[RelayedConsumer]:
    """Connect through a relay with ``options``, consume Q1 on a thread, put "before"
    and see it consumed, silence the relay (``blackhole``: a host powered off), put
    "after", then hand over; closed afterwards (the consumer thread given ``join``
    seconds to end)."""
    real = "{}({})".format(*server.listener.address)
    relay = SilentRelay(server.listener.address)
    conname = f"{relay.address[0]}({relay.address[1]}),{real}"
    qm = mq.connect("QMC", conname=conname, reconnect=True, call_timeout=1.0, **options)
    consumer = RelayedConsumer(qm, [], [])

    def consume() -> None:
        try:
            for msg in qm.consume("Q1", prefetch=10):
                consumer.got.append(msg)
        except mq.HConnError:
            pass  # closed by the test
        except BaseException as exc:  # reported to the test
            consumer.errors.append(exc)

    thread = threading.Thread(target=consume, daemon=True)
    try:
        assert qm._conn.endpoint is not None and qm._conn.endpoint.port == relay.address[1]
        with mq.connect("QMC", conname=real) as producer:
            producer.put("Q1", b"before", persistent=True)
            thread.start()
            wait_until(lambda: len(consumer.got) == 1, "the first message consumed", 15)
            relay.silence(blackhole=blackhole)
            producer.put("Q1", b"after", persistent=True)
        yield consumer
    finally:
        qm.close()
        thread.join(join)
        relay.close()


def test_a_consumer_whose_queue_manager_went_silent_moves_to_the_next_entry(
        served) -> None:  # noqa: F811
    with consumer_when_silenced(served, blackhole=False, join=10,
                                reconnect_timeout=30.0) as c:
        got, errors = c.got, c.errors
        # without a look at a silent connection the consumer waited on it for ever
        wait_until(lambda: any(m.body == b"after" for m in got) or errors,
                   "the consumer reconnected and got the message put after the silence",
                   15)
        assert not errors, errors
        bodies = [m.body for m in got]
        assert set(bodies) == {b"before", b"after"}, bodies
        # a message seen twice is marked: never delivered twice without a word
        assert all(m.redelivered for m in got[1:] if m.body == b"before"), got
        assert c.qm._conn.endpoint.port == served.listener.address[1]


def test_a_stopped_consumer_holding_pushed_messages_is_dropped_at_the_idle_timeout(
        served) -> None:  # noqa: F811
    """A consumer that has messages pushed to it and then says nothing (its process
    stopped, its host cut off) is dropped after the listener's IdleTimeout like any other
    silent client, and its messages go back to the queue for others, marked; before, a
    connection with a consumer was never idle and held them locked for ever."""
    served.listener.idle_timeout = 1.0
    real = "{}({})".format(*served.listener.address)
    bodies = [f"m{i}".encode() for i in range(5)]
    with mq.connect("QMC", conname=real) as producer:
        for body in bodies:
            producer.put("Q1", body, persistent=True, syncpoint=True)
        producer.commit()
    stopped = mq.connect("QMC", conname=real, reconnect=False, call_timeout=60.0)
    try:
        consumer = iter(stopped.consume("Q1", prefetch=10))
        first = next(consumer)  # the batch of five pushed, one handed out, none acked
        assert first.body == bodies[0]
        # from here the application does nothing, as if stopped
        wait_until(lambda: served.listener.rejected.get("idle", 0) >= 1,
                   "the silent consumer's connection dropped as idle", 15)
        with mq.connect("QMC", conname=real) as other:
            again = [other.get("Q1", wait=10.0) for _ in bodies]
        assert [m.body for m in again] == bodies
        assert all(m.redelivered for m in again), [m.backout_count for m in again]
    finally:
        stopped._conn.abort()
        stopped.close()


def test_a_reconnect_tries_the_entry_that_broke_last(served) -> None:  # noqa: F811
    """The first CONNAME entry's host went silent and now drops every packet (powered
    off): the reconnect goes to the other entry first, not through a connect timeout on
    the dead one at every attempt (MQ tries the list in order; with a 30 s connect timeout
    that was 30 s more per reconnect)."""
    with consumer_when_silenced(served, blackhole=True, join=40, timeout=30.0,
                                reconnect_timeout=60.0) as c:
        # found silent within about two call_timeouts, then the other entry at once;
        # trying the dead entry first waited out the 30 s connect timeout
        wait_until(lambda: any(m.body == b"after" for m in c.got),
                   "the consumer reconnected to the other entry", 15)
        assert c.qm._conn.endpoint.port == served.listener.address[1]
