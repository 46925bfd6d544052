"""Four applications, each on its own reconnecting connection, through a ``kill -9`` of
the active instance (real ``strmqm`` processes on two 'hosts' on this machine): a put
outside syncpoint, units of five puts and a commit, gets under syncpoint and a commit,
and a streaming consumer. Each sees only MQ's failover reasons (2549 for a call whose
outcome is unknown, 2009/2003 for a unit that was lost) and afterwards the queues say
what the documentation (docs/client.md) promises: nothing acknowledged or committed is
lost, a lost unit left nothing, a unit in doubt is all there or not at all, and a
message delivered twice was marked (``backout_count >= 1``) except after a get under
syncpoint whose unit the application was told was lost or in doubt."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from miqm import client as mq
from miqm.localpair import LocalPair
from tests.integration.test_client_failover import bindings_pair
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

QM = "QMAPK"
N = 3000  # messages for the getter and for the consumer


@pytest.fixture()
def pair(tmp_path, monkeypatch) -> Iterator[LocalPair]:
    yield from bindings_pair(QM, tmp_path, monkeypatch)


class Apps:
    """The four applications' threads and what each saw."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.log: dict[str, list[Any]] = collections.defaultdict(list)
        self.unexpected: list[str] = []
        self.threads = [threading.Thread(target=self._guard, args=(f,), daemon=True)
                        for f in (self.putter, self.units, self.getter, self.consumer)]

    def _guard(self, body: Any) -> None:
        try:
            body()
        except BaseException as exc:  # handed to the test
            self.unexpected.append(f"{body.__name__}: {exc!r}")

    def count(self, key: str) -> int:
        return len(self.log[key])

    def putter(self) -> None:
        with mq.connect(QM, reconnect_timeout=60) as qm:
            i = 0
            while not self.stop.is_set():
                body = f"p{i}".encode()
                try:
                    qm.put("QP", body, persistent=True)
                    self.log["p_ok"].append(body)
                except mq.CallInterrupted:
                    self.log["p_doubt"].append(body)
                i += 1

    def units(self) -> None:
        with mq.connect(QM, reconnect_timeout=60) as qm:
            i = 0
            while not self.stop.is_set():
                bodies = [f"u{i}.{j}".encode() for j in range(5)]
                try:
                    for body in bodies:
                        qm.put("QU", body, persistent=True, syncpoint=True)
                    qm.commit()
                    self.log["u_ok"].append(bodies)
                except mq.CallInterrupted:
                    self.log["u_doubt"].append(bodies)
                except (mq.BackedOut, mq.ConnectionBroken):
                    self.log["u_lost"].append(bodies)
                    qm.backout()
                i += 1

    def getter(self) -> None:
        with mq.connect(QM, reconnect_timeout=60) as qm:
            while not self.stop.is_set():
                got: list[mq.Message] = []
                try:
                    for _ in range(3):
                        got.append(qm.get("QG", wait=0.2, syncpoint=True))
                except mq.NoMessageAvailable:
                    pass
                except (mq.BackedOut, mq.ConnectionBroken):
                    self.log["g_lost"].append(got)
                    qm.backout()
                    continue
                try:
                    qm.commit()
                    self.log["g_ok"].append(got)
                except mq.CallInterrupted:
                    self.log["g_doubt"].append(got)
                except (mq.BackedOut, mq.ConnectionBroken):
                    self.log["g_lost"].append(got)
                    qm.backout()

    def consumer(self) -> None:
        with mq.connect(QM, reconnect_timeout=60) as qm:
            consumer = qm.consume("QC", prefetch=100)
            while not self.stop.is_set():
                msg = consumer.next(0.2)
                if msg is not None:
                    self.log["c"].append(msg)
                    time.sleep(0.002)  # an application that takes its time
            consumer.close()


def drain(queue: str) -> collections.Counter[bytes]:
    with mq.connect(QM) as qm:
        return collections.Counter(m.body for m in qm.consume(queue, wait=0.5))


def test_applications_through_a_kill_of_the_active_lose_nothing_and_say_so(pair) -> None:
    pair.start(pair.a)
    pair.start(pair.b)
    pair.mqsc(pair.a, "".join(f"DEFINE QLOCAL({q}) MAXDEPTH(1000000) DEFPSIST(YES)\n"
                              for q in ("QP", "QU", "QG", "QC")))
    with mq.connect(QM) as qm:
        for queue, prefix in (("QG", "g"), ("QC", "c")):
            for i in range(N):
                qm.put(queue, f"{prefix}{i}".encode(), syncpoint=True)
                if i % 500 == 499:
                    qm.commit()
            qm.commit()
    apps = Apps()
    for t in apps.threads:
        t.start()
    try:
        keys = ("p_ok", "u_ok", "g_ok", "c")
        wait_until(lambda: all(apps.count(k) >= 20 for k in keys) or apps.unexpected,
                   timeout=60, what="the four applications under way")
        assert apps.count("c") < N // 2, "the consumer ended before the kill"
        before = {k: apps.count(k) for k in keys}
        killed = pair.kill_active()
        pair.wait_active(not_host=killed["host"], timeout=60)
        wait_until(lambda: all(apps.count(k) >= before[k] + 20 for k in keys)
                   or apps.unexpected, timeout=90, what="the applications after the kill")
    finally:
        apps.stop.set()
        for t in apps.threads:
            t.join(90)
    assert not apps.unexpected, apps.unexpected
    assert not any(t.is_alive() for t in apps.threads)
    log = apps.log

    # outside syncpoint: every put that returned is there once; one in doubt at most once
    put = drain("QP")
    assert [b for b in log["p_ok"] if put[b] != 1] == []
    assert [b for b in log["p_doubt"] if put[b] > 1] == []

    # units: committed ones whole, lost ones gone, in-doubt ones all or nothing
    units = drain("QU")
    assert [bs for bs in log["u_ok"] if any(units[b] != 1 for b in bs)] == []
    assert [bs for bs in log["u_lost"] if any(units[b] for b in bs)] == []
    assert [bs for bs in log["u_doubt"] if len({units[b] for b in bs}) != 1] == []

    # gets under syncpoint: a message committed once only; none lost
    left = drain("QG")
    committed = collections.Counter(m.body for got in log["g_ok"] for m in got)
    doubt = {m.body for got in log["g_doubt"] for m in got}
    assert [b for b, n in committed.items() if n > 1 or left[b]] == []
    every = {f"g{i}".encode() for i in range(N)}
    assert every - set(committed) - set(left) - doubt == set()
    told = {m.body for got in log["g_lost"] + log["g_doubt"] for m in got}
    seen: set[bytes] = set()
    for got in log["g_ok"]:
        for m in got:  # again unmarked only after the application was told
            assert m.body not in seen or m.redelivered or m.body in told, m.body
            seen.add(m.body)

    # the streaming consumer: every message once, or again marked; none lost
    rest = drain("QC")
    delivered: set[bytes] = set()
    for m in log["c"]:
        assert m.body not in delivered or m.redelivered, f"{m.body!r} again, unmarked"
        delivered.add(m.body)
    assert {f"c{i}".encode() for i in range(N)} - delivered - set(rest) == set()
