"""A streaming consumer whose host is cut off (no FIN, no RST: its link goes down) is
found dead by the listener's TCP keepalive probes: its session ends and the messages
pushed to it go back to the queue. Before keepalive, a consumer waiting on an empty
queue was never idle, so its connection lasted for ever and the next messages to come
stayed locked under it until TCP gave up retransmitting them (about 15 minutes).

The client runs in a network namespace of its own joined to this one by a veth pair;
the cut is the veth going down. The store and listener run in this process (short
probe timings: 1 s idle, 1 s apart, 2 probes)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from miqm.net.server import KeepAlive, Listener
from miqm.net.service import QueueService
from miqm.store.settings import LogSettings
from tests.unit.storedirs import create_store, open_store
from tests.waiting import wait_until

pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="needs root (a network namespace for the client)")

_NS = f"miqm-ka{os.getpid()}"
_HOST_IF, _NS_IF = f"mka{os.getpid()}h", f"mka{os.getpid()}c"
_HOST_IP, _NS_IP = "10.213.77.1", "10.213.77.2"

_CONSUMER = """
import sys
from miqm.client import connect
with connect("QM", conname=sys.argv[1], reconnect=False) as qm:
    for msg in qm.consume("KA.Q", prefetch=10, wait=3600):
        print("got", msg.body.decode(), flush=True)
"""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture()
def client_netns() -> Iterator[str]:
    """A namespace whose only way out is a veth pair to this one; yields its name."""
    try:
        _ip("netns", "add", _NS)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.fail(f"could not make network namespace {_NS}: {exc}")
    try:
        _ip("link", "add", _HOST_IF, "type", "veth", "peer", "name", _NS_IF)
        _ip("link", "set", _NS_IF, "netns", _NS)
        _ip("addr", "add", f"{_HOST_IP}/30", "dev", _HOST_IF)
        _ip("link", "set", _HOST_IF, "up")
        _ip("netns", "exec", _NS, "ip", "addr", "add", f"{_NS_IP}/30", "dev", _NS_IF)
        _ip("netns", "exec", _NS, "ip", "link", "set", _NS_IF, "up")
        _ip("netns", "exec", _NS, "ip", "link", "set", "lo", "up")
        yield _NS
    finally:
        subprocess.run(["ip", "netns", "pids", _NS], capture_output=True)
        subprocess.run(["ip", "link", "del", _HOST_IF], capture_output=True)
        subprocess.run(["ip", "netns", "del", _NS], capture_output=True)


def _cut_consumer_keeps_its_messages(tmp_path: Path, ns: str,
                                     keepalive: KeepAlive | None, wait: float) -> bool:
    """Whether a message put ``wait`` seconds after the link of a consumer in ``ns``
    went down is pushed to that consumer (locked under it, not on the queue)."""
    create_store(tmp_path, LogSettings())
    store = open_store(tmp_path, LogSettings(), 1)
    store.define_queue("KA.Q")
    listener = Listener(QueueService(store, "QM").handle, host=_HOST_IP, port=0,
                        keepalive=keepalive)
    host, port = listener.start()
    client = subprocess.Popen(
        ["ip", "netns", "exec", ns, sys.executable, "-c", _CONSUMER, f"{host}({port})"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=str(Path(__file__).resolve().parents[2]))
    try:
        wait_until(lambda: any(s.streams for s in listener.sessions()), "the consumer",
                   timeout=30)
        store.put("KA.Q", b"m1", persistent=True)
        assert client.stdout is not None
        assert client.stdout.readline().strip() == "got m1"
        # the link goes down while the consumer waits on an empty queue (nothing in
        # flight: the probes' case); the next message comes once the probes had time
        # the batch's acknowledgement, its commit and the pushes after it settle first:
        # data in flight at the cut leaves the connection to TCP's retransmissions
        time.sleep(0.5)
        _ip("link", "set", _HOST_IF, "down")
        time.sleep(wait)
        store.put("KA.Q", b"m2", persistent=True)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            uow = store.begin()
            msg = store.get("KA.Q", uow=uow, wait=0.2)
            store.backout(uow)
            if msg is not None:
                assert msg.body == b"m2"
                return False
        return True
    finally:
        client.kill()
        client.wait()
        listener.stop()
        store.close()


def test_a_cut_off_consumer_is_found_dead_and_its_messages_come_back(
        tmp_path: Path, client_netns: str) -> None:
    # 1 s of silence, then 2 probes 1 s apart: dead after about 3 s
    assert not _cut_consumer_keeps_its_messages(
        tmp_path, client_netns, KeepAlive(idle=1, interval=1, count=2), wait=6.0)


def test_without_keepalive_the_cut_off_consumer_keeps_them(tmp_path: Path,
                                                           client_netns: str) -> None:
    # the other side of the test above: the same cut with no probes, and the message
    # goes to the dead consumer (what the probes are for; it makes the test above able
    # to fail)
    assert _cut_consumer_keeps_its_messages(tmp_path, client_netns, None, wait=6.0)
