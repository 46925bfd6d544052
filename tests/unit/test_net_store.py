"""The client commands against the real store, served by the real listener in this process
(no execution controller): crtmqm, runmqsc, amqsput, amqsget, amqldmpa, rcdmqimg and
rcrmqobj through their entry points; a store restart keeps persistent messages only."""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from lockfs.posix import PosixVolume
from miqm.cli import amqldmpa, crtmqm, media, runmqsc, samples
from tests.unit.test_cli_mqadmin import run

pytestmark = pytest.mark.skipif(importlib.util.find_spec("miqm.store.log") is None,
                                reason="needs the store's recovery log")


class Served:
    """A store opened the way the controller opens it, behind a listener, with the
    listener record written for bindings-mode clients."""

    def __init__(self, root: str, qmgr: str) -> None:
        self.root, self.qmgr = root, qmgr
        self.generation = 0
        self.store: Any = None
        self.listener: Any = None

    def start(self) -> None:
        from miqm.config import parse_qm_ini
        from miqm.net.server import Listener
        from miqm.net.service import QueueService
        from miqm.store.qmstore import QueueManagerStore

        data = PosixVolume(os.path.join(self.root, "qmgrs", self.qmgr))
        config = parse_qm_ini(data.read_bytes("qm.ini").decode())
        self.generation += 1
        self.store = QueueManagerStore.open(data, PosixVolume(config.log_path), self.qmgr,
                                            config.log, config.tuning,
                                            generation=self.generation, background=False)
        self.listener = Listener(QueueService(self.store, self.qmgr).handle)
        host, port = self.listener.start()
        data.write_atomic("listener", json.dumps({"host": host, "port": port,
                                                  "host_name": "t", "pid": os.getpid()}).encode())

    def stop(self) -> None:
        self.listener.stop()
        self.store.close()
        os.unlink(os.path.join(self.root, "qmgrs", self.qmgr, "listener"))


@pytest.fixture()
def served(tmp_path, monkeypatch, capsys) -> Iterator[Served]:
    root = str(tmp_path / "root")
    monkeypatch.setenv("MIQM_DATA_ROOT", root)
    monkeypatch.delenv("MIQM_CONNECTION", raising=False)
    rc, _, err = run(crtmqm.main, ["crtmqm", "-ll", "-lf", "64", "QMS"], capsys, monkeypatch)
    assert rc == 0, err
    s = Served(root, "QMS")
    s.start()
    try:
        yield s
    finally:
        if s.listener is not None and s.store is not None:
            try:
                s.stop()
            except Exception:
                pass


def test_end_to_end_against_the_real_store(served, capsys, monkeypatch) -> None:
    script = ("DEFINE QLOCAL(Q1) MAXDEPTH(100) DESCR('test queue')\n"
              "DISPLAY QLOCAL(Q1)\nALTER QLOCAL(Q1) MAXDEPTH(200)\nDIS QL(Q*) CURDEPTH\n"
              "ALTER QMGR MAXUMSGS(500)\nDISPLAY QMGR\nDISPLAY QMSTATUS ALL\n"
              "DEFINE QLOCAL(Q1)\nDELETE QLOCAL(NOPE)\n")
    rc, out, err = run(runmqsc.main, ["runmqsc", "QMS"], capsys, monkeypatch, stdin=script)
    assert rc == 10, out + err
    for expect in ("AMQ8006I: miqm queue created.", "DESCR(test queue)", "MAXDEPTH(100)",
                   "AMQ8008I: miqm queue changed.", "CURDEPTH(0)", "MAXUMSGS(500)",
                   "AMQ8705I: Display Queue Manager Status Details.", "RECLOG(S",
                   "AMQ8150E", "AMQ8147E: miqm object NOPE not found.",
                   "2 valid MQSC commands could not be processed."):
        assert expect in out, (expect, out)
    assert "AMQ7467(" not in out

    rc, _, err = run(samples.amqsput_main, ["amqsput", "QMS", "Q1", "--syncpoint", "3"],
                     capsys, monkeypatch, stdin="p1\np2\np3\np4\n")
    assert rc == 0, err
    rc, _, err = run(samples.amqsput_main, ["amqsput", "QMS", "Q1", "--non-persistent"],
                     capsys, monkeypatch, stdin="n1\nn2\n")
    assert rc == 0, err
    rc, out, err = run(amqldmpa.main, ["amqldmpa", "-m", "QMS"], capsys, monkeypatch)
    assert rc == 0 and "logactive" in out, err
    rc, out, err = run(media.rcdmqimg_main, ["rcdmqimg", "-m", "QMS", "-t", "queue", "Q1"],
                       capsys, monkeypatch)
    assert rc == 0 and "Q1" in out and "AMQ7467I" in out, out + err

    served.stop()
    served.start()  # restart: recovery keeps persistent messages, drops non-persistent
    rc, out, err = run(samples.amqsget_main, ["amqsget", "QMS", "Q1", "--wait", "0",
                                              "--syncpoint", "2"], capsys, monkeypatch)
    assert rc == 0, err
    assert out == "p1\np2\np3\np4\n"
    rc, _, err = run(samples.amqsget_main, ["amqsget", "QMS", "NOPE"], capsys, monkeypatch)
    assert rc == 1 and "MQOPEN ended with reason code 2085" in err


def test_an_unknown_queue_name_is_told_on_one_escaped_line(served) -> None:
    """A queue name is whatever the caller sent: the 2085 line shows it escaped, so a
    line break or a terminal escape in it reaches no terminal and no log."""
    from miqm.errors import MessagingError
    from miqm.net.server import Session
    from miqm.net.service import QueueService

    hostile = "EVIL\n\x1b[2J\x00Q"
    with pytest.raises(MessagingError) as caught:
        served.store.put(hostile, b"x")
    reply = QueueService(served.store, served.qmgr).handle(
        {"op": "open", "queue": hostile, "input": True}, Session())
    assert reply["mqrc"] == 2085
    for text in (str(caught.value), reply["error"]):
        assert "is not defined" in text and "EVIL" in text, text
        assert text.isprintable(), repr(text)


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="SCHED_BATCH is Linux's")
def test_a_session_runs_as_batch_until_it_streams(served) -> None:
    # put+commit sessions run as SCHED_BATCH (server.run_as_batch); a streaming
    # consumer's session thread, pusher and committers run as ordinary threads: as batch
    # threads they halved its rate (server.run_as_ordinary)
    import threading

    from miqm.client import connect

    policies: list[int] = []
    handler = served.listener.handler

    def noting(req: dict[str, Any], session: Any) -> Any:
        if req.get("op") == "ping":
            policies.append(os.sched_getscheduler(0))
        return handler(req, session)

    served.listener.handler = noting
    served.store.define_queue("S1")
    with connect("QMS", reconnect=False) as qm:
        for i in range(3):
            qm.put("S1", f"m{i}".encode(), syncpoint=True)
            qm.commit()
        qm._call("ping")
        got = []
        stream_policies: set[int] = set()
        for msg in qm.consume("S1", prefetch=2, wait=0.5):
            got.append(msg.body)
            # the pusher, and a committer once a batch was acknowledged
            stream_policies |= {os.sched_getscheduler(t.native_id)
                                for t in threading.enumerate()
                                if t.name.startswith(("miqm-consume-", "miqm-commit-"))
                                and t.native_id is not None}
            if len(got) == 3:
                break
        qm._call("ping")
    assert got == [b"m0", b"m1", b"m2"]
    assert policies == [os.SCHED_BATCH, os.SCHED_OTHER]
    assert stream_policies == {os.SCHED_OTHER}
