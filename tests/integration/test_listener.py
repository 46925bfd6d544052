"""The listener of real instances (strmqm, two hosts on this machine): a fixed port from
qm.ini, both instances listening on the same port of their own address (127.0.0.1 and
127.0.0.2), a CONNAME walker that skips the standby (2543) and follows a failover, the
credential crtmqm made, and a port in use refused by strmqm with one line and nothing
half-started."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Iterator

import pytest

from miqm.localpair import LocalPair
from tests.ports import free_port


@pytest.fixture()
def pair(tmp_path) -> Iterator[LocalPair]:
    p = LocalPair(qmgr="QMLSN", base=str(tmp_path))
    try:
        yield p
    finally:
        p.close()


def _credential(pair: LocalPair) -> str:
    with open(os.path.join(pair.data_dir(), "credentials"), encoding="utf-8") as fh:
        return "admin:" + json.load(fh)["principals"]["admin"]["secret"]


def _client(pair: LocalPair, conname: str, script: str) -> subprocess.CompletedProcess[str]:
    """Run a miqm.client program from a third 'host' that sees no data directory."""
    env = dict(os.environ, MIQM_CONNECTION=conname, MIQM_CREDENTIAL=_credential(pair),
               MIQM_DATA_ROOT=os.path.join(pair.base, "app"))
    return subprocess.run(["python", "-c", script], env=env, capture_output=True, text=True,
                          timeout=120)


def test_fixed_port_both_instances_and_a_conname_walker(pair) -> None:
    pair.create()
    port = free_port("127.0.0.2")
    with open(os.path.join(pair.data_dir(), "qm.ini"), "a", encoding="utf-8") as fh:
        fh.write(f"Listener:\n   Port={port}\n")
    # qm.ini gives the port; each host gives its own address
    for host, addr in ((pair.a, "127.0.0.1"), (pair.b, "127.0.0.2")):
        host.extra = {"MIQM_LISTENER_HOST": addr, "MIQM_LISTENER_PORT": ""}
    pair.start(pair.a)
    pair.start(pair.b)
    pair.mqsc(pair.a, "DEFINE QLOCAL(L.Q)\n")
    with open(os.path.join(pair.data_dir(), "listener"), encoding="utf-8") as fh:
        assert json.load(fh)["port"] == port
    conname = f"127.0.0.2({port}),127.0.0.1({port})"  # the standby first
    put = ("from miqm.client import connect\n"
           "with connect('QMLSN') as qm:\n"
           "    qm.put('L.Q', b'one', persistent=True)\n"
           "    print(qm.host)\n")
    proc = _client(pair, conname, put)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "hosta"
    # the standby answers an application with 2543, quickly
    only_standby = _client(pair, f"127.0.0.2({port})",
                           "from miqm.client import connect, MQError\n"
                           "try:\n    connect('QMLSN', reconnect=False)\n"
                           "except MQError as e:\n    print(e.reason)\n")
    assert only_standby.stdout.strip() == "2543", only_standby.stderr
    # a wrong credential is 2035
    env_bad = dict(os.environ, MIQM_CONNECTION=conname, MIQM_CREDENTIAL="admin:nope",
                   MIQM_DATA_ROOT=os.path.join(pair.base, "app"))
    bad = subprocess.run(["python", "-c", "from miqm.client import connect, MQError\n"
                          "try:\n    connect('QMLSN', reconnect=False)\n"
                          "except MQError as e:\n    print(e.reason)\n"],
                         env=env_bad, capture_output=True, text=True, timeout=60)
    assert bad.stdout.strip() == "2035", bad.stderr
    with open(os.path.join(pair.data_dir(), "errors", "AMQERR01.LOG"), encoding="utf-8",
              errors="replace") as fh:
        logged = fh.read()
    # the number once: the error log writes it before the text (it was there twice,
    # 'AMQ5534: AMQ5534E: ...')
    assert "AMQ5534" in logged and "AMQ5534E" not in logged
    # counted: the active instance reports its listener's figures
    # counted: each instance reports its listener's figures (the walker met the standby
    # first, and a wrong credential ends the walk there)
    stats = _client(pair, conname,
                    "import json\nfrom miqm.net.client import Endpoint, connect\n"
                    f"for addr in ('127.0.0.1', '127.0.0.2'):\n"
                    f"    with connect('QMLSN', endpoints=[Endpoint(addr, {port})],\n"
                    "                 allow_standby=True) as c:\n"
                    "        print(json.dumps(c.call('instance')['listener']))\n")
    assert stats.returncode == 0, stats.stderr
    figures = [json.loads(line) for line in stats.stdout.splitlines()]
    assert sum(f["auth_failures"] for f in figures) >= 1
    assert all(f["auth_required"] is True for f in figures)
    # failover: the same CONNAME list reaches the new active on hostb
    pair.kill_active()
    pair.wait_active(not_host="hosta", timeout=60)
    get = ("from miqm.client import connect\n"
           "with connect('QMLSN', reconnect_timeout=30) as qm:\n"
           "    print(qm.get('L.Q', wait=5).body.decode(), qm.host)\n")
    proc = _client(pair, conname, get)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["one", "hostb"]


def test_port_in_use_fails_strmqm_with_one_line(pair) -> None:
    pair.create()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        pair.a.extra = {"MIQM_LISTENER_PORT": str(port)}
        proc = pair.run(pair.a, "strmqm", pair.qmgr, check=False)
        assert proc.returncode != 0
        out = (proc.stdout + proc.stderr).strip()
        assert "AMQ9218" in out and str(port) in out and "Traceback" not in out
        assert len([ln for ln in proc.stderr.splitlines() if ln.strip()]) == 1
    # nothing half-started: no instance runs, and a free port starts it normally
    status = pair.run(pair.a, "dspmq", "-m", pair.qmgr, check=False).stdout
    assert "Running" not in status
    pair.a.extra = {}
    pair.start(pair.a)
    assert pair.active()["host"] == "hosta"


def test_a_streaming_consumer_survives_kill_minus_nine_of_the_active(pair) -> None:
    """kill -9 of the active instance while a miqm.client consumer streams: it resumes on
    the new active by itself; nothing is lost, and anything it sees twice is flagged."""

    pair.create()
    pair.start(pair.a)
    pair.start(pair.b)
    pair.mqsc(pair.a, "DEFINE QLOCAL(S.Q) MAXDEPTH(100000)\n")
    bodies = [f"s{i:04d}" for i in range(400)]
    pair.put(pair.a, "S.Q", bodies)
    script = (
        "import sys, time\n"
        "from miqm.client import connect\n"
        "with connect('QMLSN', reconnect=True, reconnect_timeout=60) as qm:\n"
        "    for msg in qm.consume('S.Q', prefetch=50, wait=8.0):\n"
        "        print(msg.body.decode(), msg.backout_count, qm.host, flush=True)\n"
        "        time.sleep(0.01)\n")
    proc = subprocess.Popen(["python", "-c", script], env=pair.a.env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        first = [proc.stdout.readline() for _ in range(60)]  # streaming from hosta
        assert all(line.split()[2] == "hosta" for line in first)
        pair.kill_active()
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    seen = [line.split() for line in first + out.splitlines() if line.strip()]
    got: dict[str, int] = {}
    for body, count, _host in seen:
        if body in got:
            assert int(count) >= 1, f"{body} delivered twice without a backout count"
        got[body] = got.get(body, 0) + 1
    assert set(got) == set(bodies), "messages lost across the failover"
    assert seen[-1][2] == "hostb"
