"""A real instance's listener (strmqm) against a hostile client with raw sockets: an
application principal that tries the controller's own ops (end, instance), JSON nested
past the parser's depth before hello, and an application tag that forges lines of
DISPLAY CONN. Each is refused with MQ's reason code and a line in the error log with the
peer address, and the instance goes on serving."""

from __future__ import annotations

import json
import os
import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest

from miqm.localpair import LocalPair
from miqm.net import protocol
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

QM = "QMSECL"


@pytest.fixture(scope="module")
def qm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalPair, str, str]]:
    """A running instance, an application principal APP1 with CONNECT only, and the two
    credentials (admin's, APP1's)."""
    pair = LocalPair(qmgr=QM, base=str(tmp_path_factory.mktemp("seclistener")))
    try:
        pair.create()
        pair.start(pair.a)
        app = pair.run(pair.a, "miqm", "credential", "-m", QM, "--add", "APP1").stdout.strip()
        admin = pair.run(pair.a, "miqm", "credential", "-m", QM, "--show").stdout.strip()
        pair.run(pair.a, "setmqaut", "-m", QM, "-t", "qmgr", "-p", "APP1", "+connect")
        yield pair, admin.splitlines()[-1], app.splitlines()[-1]
    finally:
        pair.close()


def _address(pair: LocalPair) -> tuple[str, int]:
    with open(os.path.join(pair.data_dir(), "listener"), encoding="utf-8") as f:
        rec = json.load(f)
    return rec["host"], int(rec["port"])


def _hello(pair: LocalPair, credential: str, **extra: Any) -> socket.socket:
    s = socket.create_connection(_address(pair), timeout=20)
    protocol.write_frame(s, {"id": 1, "op": "hello", "v": 2, "qmgr": QM,
                             "credential": credential, **extra})
    assert protocol.read_frame(s)["ok"]
    return s


def _errlog(pair: LocalPair) -> str:
    with open(os.path.join(pair.data_dir(), "errors", "AMQERR01.LOG"), encoding="utf-8") as f:
        return f.read()


def _running(pair: LocalPair) -> bool:
    return "Running" in pair.run(pair.a, "dspmq", "-m", QM).stdout


@pytest.mark.parametrize("op", ["end", "instance"])
def test_an_application_principal_cannot_end_the_queue_manager(qm, op) -> None:
    """{"op": "end", "mode": "immediate"} from a principal holding CONNECT alone ended
    the queue manager: the controller answered it before any authority check."""
    pair, _admin, app = qm
    with _hello(pair, app) as s:
        protocol.write_frame(s, {"id": 2, "op": op, "mode": "immediate"})
        reply = protocol.read_frame(s)
    assert reply["mqrc"] == protocol.MQRC_NOT_AUTHORIZED, reply
    assert _running(pair)
    wait_until(lambda: "Entity 'APP1' has insufficient authority" in _errlog(pair),
               "the refusal in the error log", timeout=10, poll=0.1)


def test_json_nested_too_deep_before_hello_is_answered_and_logged(qm) -> None:
    """A few KiB of '[' before hello ended the session's thread with a RecursionError
    traceback in the controller's output file, with no reply and no error log line."""
    pair, admin, _app = qm
    good = _hello(pair, admin)
    with socket.create_connection(_address(pair), timeout=20) as s:
        header = b'{"op":' + b"[" * 3000 + b"]" * 3000 + b"}"
        s.sendall(struct.pack(">II", 4 + len(header), len(header)) + header)
        reply = protocol.read_frame(s)
        port = s.getsockname()[1]
    assert reply["mqrc"] == protocol.MQRC_UNEXPECTED_ERROR and reply["amq"] == "AMQ9504"
    line = f"AMQ9504: a protocol error from 127.0.0.1({port})"
    wait_until(lambda: line in _errlog(pair), "the AMQ9504 line with the peer address",
               timeout=10, poll=0.1)
    out = os.path.join(pair.a.root, "run", f"{QM}.out")
    if os.path.exists(out):
        with open(out, encoding="utf-8", errors="replace") as f:
            assert "RecursionError" not in f.read()
    with good:
        protocol.write_frame(good, {"id": 2, "op": "ping"})
        assert protocol.read_frame(good)["ok"]


def test_an_application_tag_cannot_forge_display_conn_lines(qm) -> None:
    """APPLTAG is what the client says: a line break in it made a line of its own in
    runmqsc's DISPLAY CONN, and parentheses a USERID of its own."""
    pair, admin, _app = qm
    with _hello(pair, admin, appltag="x)\nAMQ8276I: FAKE USERID(root"):
        out = pair.mqsc(pair.a, "DISPLAY CONN(*) ALL\n")
    assert "\nAMQ8276I: FAKE" not in out
    assert "USERID(root" not in out
    assert "APPLTAG(x??AMQ8276I: FAKE USERID?roo)" in out


@pytest.mark.parametrize("name", ["'../../y'", "'Q1/q'", "'..'"])
def test_a_queue_name_that_walks_out_of_its_directory_is_refused(qm, name) -> None:
    """'../../y' is a valid MQ name (dots and slashes), and the store names a queue's
    files after it: a persistent put to it made the next checkpoint fail, the queue
    manager stop, and every restart stop again. Refused at DEFINE (runmqsc, and MQSC
    written by a client itself) and as a dynamic queue's name from a model; the queue
    manager checkpoints and goes on."""
    pair, admin, _app = qm
    out = pair.run(pair.a, "runmqsc", QM, stdin=f"DEFINE QLOCAL({name})\n"
                   "DEFINE QLOCAL(SEC.Q1)\nDEFINE QMODEL(SEC.MODEL)\n", check=False).stdout
    assert "cannot name a queue on this queue manager" in out
    with _hello(pair, admin) as s:
        raw = {"verb": "DEFINE", "objtype": "QLOCAL", "name": name.strip("'")}
        protocol.write_frame(s, {"id": 2, "op": "mqsc", "command": raw})
        reply = protocol.read_frame(s)
        assert reply["failed"] and "cannot name a queue" in " ".join(reply["lines"])
        protocol.write_frame(s, {"id": 3, "op": "open", "queue": "SEC.MODEL",
                                 "dynamic": name.strip("'"), "options": ["INPUT"]})
        assert protocol.read_frame(s)["mqrc"] == 2011
        for i, queue in enumerate((name.strip("'"), "SEC.Q1")):
            protocol.write_frame(s, {"id": 4 + i, "op": "put", "queue": queue,
                                     "persistent": True, "body": b"m"})
            protocol.read_frame(s)
        protocol.write_frame(s, {"id": 9, "op": "checkpoint"})
        assert protocol.read_frame(s)["ok"]
    assert _running(pair)


def test_one_connection_cannot_start_thousands_of_consumers(qm) -> None:
    """Each streaming consumer is a thread: 3,000 consume requests on one connection made
    3,000 threads in the queue manager. A connection may have 256 (MQ's MAXHANDS
    default); the next is 2017, as is its 257th dynamic queue."""
    pair, admin, _app = qm
    pair.run(pair.a, "runmqsc", QM, stdin="DEFINE QLOCAL(SEC.CONSUMED)\n"
             "DEFINE QMODEL(SEC.DYNMODEL)\n")
    with _hello(pair, admin) as s:
        n = 300
        s.sendall(b"".join(protocol.encode({"id": i, "op": "consume", "queue":
                                            "SEC.CONSUMED", "sub": i + 1, "prefetch": 1})
                           for i in range(n)))
        replies = []
        while len(replies) < n:
            frame = protocol.read_frame(s)
            if "push" not in frame:
                replies.append(frame)
        assert sum(1 for r in replies if r["ok"]) == 256
        assert {r["mqrc"] for r in replies if not r["ok"]} == {2017}
    with _hello(pair, admin) as s:
        reasons = []
        for i in range(257):
            protocol.write_frame(s, {"id": i, "op": "open", "queue": "SEC.DYNMODEL",
                                     "dynamic": "SEC.D.*", "options": ["INPUT"]})
            reply = protocol.read_frame(s)
            reasons.append(reply.get("mqrc", 0))
        assert reasons[:256] == [0] * 256 and reasons[256] == 2017
    assert _running(pair)


def test_an_application_cannot_resolve_another_applications_unit(qm) -> None:
    """Any principal with CONNECT listed every in-doubt unit of work and could commit or
    back out another application's prepared unit."""
    pair, admin, app = qm
    app2 = pair.run(pair.a, "miqm", "credential", "-m", QM, "--add", "APP2").stdout.strip()
    app2 = app2.splitlines()[-1]
    pair.run(pair.a, "runmqsc", QM, stdin="DEFINE QLOCAL(SEC.XA)\n")
    for principal in ("APP1", "APP2"):
        pair.run(pair.a, "setmqaut", "-m", QM, "-t", "qmgr", "-p", principal, "+connect")
        pair.run(pair.a, "setmqaut", "-m", QM, "-t", "queue", "-n", "SEC.XA", "-p",
                 principal, "+put")
    with _hello(pair, app) as s:
        protocol.write_frame(s, {"id": 2, "op": "put", "queue": "SEC.XA", "syncpoint": True,
                                 "body": b"transfer"})
        assert protocol.read_frame(s)["ok"]
        protocol.write_frame(s, {"id": 3, "op": "prepare"})
        xid = protocol.read_frame(s)["xid"]
        with _hello(pair, app2) as other:
            protocol.write_frame(other, {"id": 2, "op": "in_doubt"})
            assert xid not in protocol.read_frame(other)["xids"]
            protocol.write_frame(other, {"id": 3, "op": "resolve", "xid": xid,
                                         "commit": False})
            assert protocol.read_frame(other)["mqrc"] == protocol.MQRC_NOT_AUTHORIZED
        protocol.write_frame(s, {"id": 4, "op": "in_doubt"})
        assert xid in protocol.read_frame(s)["xids"]
        protocol.write_frame(s, {"id": 5, "op": "resolve", "xid": xid, "commit": True})
        assert protocol.read_frame(s)["ok"]
    with _hello(pair, admin) as s:
        protocol.write_frame(s, {"id": 2, "op": "get", "queue": "SEC.XA"})
        assert protocol.read_frame(s)["body"] == b"transfer"


def test_after_a_failover_an_application_still_cannot_resolve_another_applications_unit(
        tmp_path) -> None:
    """Who prepared a unit was known only to the instance that prepared it: after a
    failover any principal with CONNECT could commit or back out another application's
    in-doubt unit on the new active. The store now logs the owner with PREPARE."""
    qmgr = "QMSECX"
    with LocalPair(qmgr=qmgr, base=str(tmp_path)) as pair:
        pair.create()
        pair.start(pair.a)
        pair.start(pair.b)
        pair.wait_active()
        apps = {}
        for principal in ("APP1", "APP2"):
            out = pair.run(pair.a, "miqm", "credential", "-m", qmgr, "--add", principal)
            apps[principal] = out.stdout.strip().splitlines()[-1]
            pair.run(pair.a, "setmqaut", "-m", qmgr, "-t", "qmgr", "-p", principal,
                     "+connect")
        pair.run(pair.a, "runmqsc", qmgr, stdin="DEFINE QLOCAL(SEC.XA)\n")
        pair.run(pair.a, "setmqaut", "-m", qmgr, "-t", "queue", "-n", "SEC.XA", "-p",
                 "APP1", "+put")

        def hello(credential: str) -> socket.socket:
            s = socket.create_connection(_address(pair), timeout=20)
            protocol.write_frame(s, {"id": 1, "op": "hello", "v": 2, "qmgr": qmgr,
                                     "credential": credential})
            assert protocol.read_frame(s)["ok"]
            return s

        with hello(apps["APP1"]) as s:
            protocol.write_frame(s, {"id": 2, "op": "put", "queue": "SEC.XA",
                                     "syncpoint": True, "body": b"transfer"})
            assert protocol.read_frame(s)["ok"]
            protocol.write_frame(s, {"id": 3, "op": "prepare"})
            xid = protocol.read_frame(s)["xid"]
        first = pair.kill_active()
        pair.wait_active(not_host=first["host"])
        with hello(apps["APP2"]) as other:
            protocol.write_frame(other, {"id": 2, "op": "in_doubt"})
            assert xid not in protocol.read_frame(other)["xids"]
            protocol.write_frame(other, {"id": 3, "op": "resolve", "xid": xid,
                                         "commit": False})
            assert protocol.read_frame(other)["mqrc"] == protocol.MQRC_NOT_AUTHORIZED
        with hello(apps["APP1"]) as s:
            protocol.write_frame(s, {"id": 2, "op": "in_doubt"})
            assert xid in protocol.read_frame(s)["xids"]
            protocol.write_frame(s, {"id": 3, "op": "resolve", "xid": xid, "commit": True})
            assert protocol.read_frame(s)["ok"]
