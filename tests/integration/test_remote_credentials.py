"""An application principal's secret rotated while the application runs, on a real
queue manager of two instances listening on two addresses (127.0.0.2 and 127.0.0.3, a
real CONNAME list of two hosts): connections already made go on, as MQ's do; a new one
with the old secret is refused within seconds by the active instance, and by the
standby once it has taken over (a kill -9 of the active), where the old secret reconnected
before; the new secret connects to either."""

from __future__ import annotations

import json
import os

import pytest

from miqm import client as mq
from miqm.localpair import LocalPair
from tests.waiting import wait_until


def _listener(pair: LocalPair, name: str) -> str:
    with open(os.path.join(pair.data_dir(), name), encoding="utf-8") as fh:
        where = json.load(fh)
    return f"{where['host']}({where['port']})"


def _refused(conname: str, credential: str) -> bool:
    try:
        mq.connect("QMROT", conname=conname, credential=credential, reconnect=False).close()
    except mq.NotAuthorized:
        return True
    return False


@pytest.fixture()
def pair(tmp_path):
    p = LocalPair(qmgr="QMROT", base=str(tmp_path))
    p.a.extra["MIQM_LISTENER_HOST"] = "127.0.0.2"
    p.b.extra["MIQM_LISTENER_HOST"] = "127.0.0.3"
    try:
        p.create()
        p.start(p.a)
        p.start(p.b)
        yield p
    finally:
        p.close()


def test_a_rotated_secret_is_refused_by_both_instances(pair: LocalPair) -> None:
    pair.mqsc(pair.a, "DEFINE QLOCAL(APP1.Q)\n")
    old = pair.run(pair.a, "miqm", "credential", "-m", pair.qmgr, "--add", "APP1"
                   ).stdout.strip().splitlines()[-1]
    pair.run(pair.a, "setmqaut", "-m", pair.qmgr, "-t", "qmgr", "-p", "APP1", "+connect")
    pair.run(pair.a, "setmqaut", "-m", pair.qmgr, "-t", "queue", "-n", "APP1.**", "-p",
             "APP1", "+put", "+get")
    conname = f"{_listener(pair, 'listener')},{_listener(pair, 'standby-listener')}"
    assert conname.startswith("127.0.0.2(") and ",127.0.0.3(" in conname, conname
    app = mq.connect("QMROT", conname=conname, credential=old, reconnect=True,
                     reconnect_timeout=30)
    try:
        app.put("APP1.Q", b"before", persistent=True)
        pair.run(pair.a, "miqm", "credential", "-m", pair.qmgr, "--remove", "APP1")
        new = pair.run(pair.a, "miqm", "credential", "-m", pair.qmgr, "--add", "APP1"
                       ).stdout.strip().splitlines()[-1]
        assert new != old
        app.put("APP1.Q", b"during", persistent=True)  # a connection made stays
        wait_until(lambda: _refused(conname, old), "the old secret refused", 15)
        mq.connect("QMROT", conname=conname, credential=new).close()
        # the standby read the file when it started, before the rotation
        pair.kill_active()
        pair.wait_active(not_host="hosta", timeout=60)
        with pytest.raises(mq.NotAuthorized):
            app.put("APP1.Q", b"after")  # reconnecting with the old secret: refused
        assert _refused(conname, old)
        with mq.connect("QMROT", conname=conname, credential=new) as qm:
            assert [qm.get("APP1.Q").body for _ in range(2)] == [b"before", b"during"]
    finally:
        app.close()
