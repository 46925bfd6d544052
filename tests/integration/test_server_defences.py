"""The listener and service of a real instance (strmqm) against clients that misbehave or
go away: a killed client's get-wait, unauthenticated clients that hold memory or
connection slots, principal names written to the error log, DELETE of a queue in use, a
damaged queue, and a credentials file others can read."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest

from miqm.localpair import LocalPair
from tests.waiting import wait_until


@pytest.fixture()
def single(tmp_path) -> Iterator[LocalPair]:
    """A queue manager with one running instance (host A)."""
    p = LocalPair(qmgr="QMSRV", base=str(tmp_path))
    try:
        p.create()
        p.start(p.a)
        yield p
    finally:
        p.close()


def _python(pair: LocalPair, script: str, **kw) -> subprocess.Popen[str]:
    return subprocess.Popen(["python3", "-c", script], env=pair.a.env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def _run(pair: LocalPair, script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["python3", "-c", script], env=pair.a.env(), text=True,
                          capture_output=True, timeout=60)


def _kill(proc: subprocess.Popen[str]) -> None:
    """``kill -9`` of a client process (it may have ended already), reaped."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait(10)


def _ipprocs(pair: LocalPair, queue: str) -> int:
    out = pair.mqsc(pair.a, f"DISPLAY QLOCAL({queue}) IPPROCS\n")
    for word in out.replace(")", ") ").split():
        if word.startswith("IPPROCS("):
            return int(word[8:-1])
    raise AssertionError(f"no IPPROCS in {out!r}")


def test_a_killed_clients_get_wait_does_not_take_the_next_message(single) -> None:
    """kill -9 of a client waiting in get(wait=20): a persistent message put afterwards
    stays on the queue (before the fix the dead getter took it and it was lost)."""
    pair = single
    pair.mqsc(pair.a, "DEFINE QLOCAL(QW)\n")
    getter = _python(pair, "from miqm.client import connect\n"
                           "qm = connect('QMSRV')\n"
                           "qm.get('QW', wait=20)\n")
    try:
        wait_until(lambda: _ipprocs(pair, "QW") == 1, "the getter waits on QW", timeout=30,
                   poll=0.1)
        time.sleep(0.3)
    finally:
        _kill(getter)
    put = _run(pair, "from miqm.client import connect\n"
                     "with connect('QMSRV') as qm:\n"
                     "    qm.put('QW', b'important', persistent=True)\n")
    assert put.returncode == 0, put.stderr
    # the waiting get ended with its connection: the handle is gone too
    wait_until(lambda: _ipprocs(pair, "QW") == 0, "the dead getter's handle closes",
               timeout=10, poll=0.1)
    got = _run(pair, "from miqm.client import connect\n"
                     "with connect('QMSRV') as qm:\n"
                     "    print(qm.get('QW', wait=2).body.decode())\n")
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == "important"


def _errlog(pair: LocalPair) -> str:
    path = os.path.join(pair.data_dir(), "errors", "AMQERR01.LOG")
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.read()


def test_a_refused_principal_is_logged_escaped_and_cut_short(single) -> None:
    pair = single
    script = ("import sys\nfrom miqm.client import connect, MQError\n"
              "try:\n    connect('QMSRV', credential=sys.argv[1], reconnect=False)\n"
              "except MQError as e:\n    print(e.reason)\n")
    for credential in ("evil\n----- miqm -----\nAMQ9999 forged entry:x",
                       "p" * 7000 + ":x"):
        proc = subprocess.run(["python3", "-c", script, credential], env=pair.a.env(),
                              text=True, capture_output=True, timeout=60)
        assert proc.stdout.strip() == "2035", proc.stderr
    text = _errlog(pair)
    # one line, escaped: no forged entry starts a line of its own
    assert not any(line.startswith("AMQ9999") for line in text.splitlines())
    assert "'evil\\x0a----- miqm -----\\x0aAMQ9999 forged entry'" in text
    refusals = [line for line in text.splitlines() if "AMQ5534" in line]
    assert len(refusals) >= 2 and all(len(line) < 600 for line in refusals)
    assert "p" * 64 + "..." in text and "p" * 65 not in text


def test_delete_qlocal_is_refused_while_a_connection_has_the_queue_open(single) -> None:
    """As MQ (and as CLEAR QLOCAL already did): AMQ8148 while a getter waits on it; the
    getter keeps waiting rather than getting 2085; once it is gone DELETE works."""
    pair = single
    pair.mqsc(pair.a, "DEFINE QLOCAL(QD)\n")
    getter = _python(pair, "from miqm.client import connect, MQError\n"
                           "qm = connect('QMSRV')\n"
                           "try:\n    qm.get('QD', wait=30)\n"
                           "except MQError as e:\n    print(e.reason, flush=True)\n")
    try:
        wait_until(lambda: _ipprocs(pair, "QD") == 1, "the getter waits on QD", timeout=30,
                   poll=0.1)
        proc = pair.run(pair.a, "runmqsc", pair.qmgr, stdin="DELETE QLOCAL(QD) PURGE\n",
                        check=False)
        assert "AMQ8148E" in proc.stdout and "MQRC_OBJECT_IN_USE" in proc.stdout
        assert proc.returncode != 0
        assert "QUEUE(QD)" in pair.mqsc(pair.a, "DISPLAY QLOCAL(QD)\n")
        assert getter.poll() is None  # still waiting, not ended with 2085
    finally:
        _kill(getter)
    wait_until(lambda: _ipprocs(pair, "QD") == 0, "the getter's handle closes", timeout=10,
               poll=0.1)
    assert "AMQ8007I" in pair.mqsc(pair.a, "DELETE QLOCAL(QD)\n")


def test_a_damaged_queue_can_be_deleted_and_defined_again(single) -> None:
    """Its file removed while the queue manager was down: DISPLAY says it is damaged and
    what to do, DEFINE REPLACE is refused with that line, DELETE removes it (circular
    logging: no rcrmqobj), and DEFINE then works."""
    pair = single
    pair.mqsc(pair.a, "DEFINE QLOCAL(Q1)\nDEFINE QLOCAL(Q2)\n")
    pair.put(pair.a, "Q1", ["one", "two"])
    pair.run(pair.a, "endmqm", "-w", pair.qmgr, timeout=60)
    qdir = os.path.join(pair.data_dir(), "queues", "Q1")
    assert os.path.isdir(qdir)
    shutil.rmtree(qdir)
    pair.start(pair.a)

    def mqsc(text: str) -> tuple[str, int]:
        proc = pair.run(pair.a, "runmqsc", pair.qmgr, stdin=text, check=False)
        assert "Traceback" not in proc.stdout + proc.stderr
        return proc.stdout, proc.returncode

    out, rc = mqsc("DISPLAY QLOCAL(Q1)\n")
    assert "AMQ7472E: Object Q1, type queue damaged" in out and "DELETE QLOCAL(Q1)" in out
    assert "rcrmqobj" in out and rc != 0
    out, rc = mqsc("DISPLAY QLOCAL(Q*)\n")
    assert "QUEUE(Q2)" in out and "AMQ7472E: Object Q1, type queue damaged" in out
    assert "QUEUE(Q1)" not in out
    out, rc = mqsc("DEFINE QLOCAL(Q1)\n")
    assert "AMQ8150E" in out and rc != 0
    out, rc = mqsc("DEFINE QLOCAL(Q1) REPLACE\n")
    assert "AMQ7472E" in out and rc != 0
    out, rc = mqsc("CLEAR QLOCAL(Q1)\n")
    assert "AMQ7472E" in out and rc != 0
    out, rc = mqsc("DELETE QLOCAL(Q1)\n")
    assert "AMQ8007I" in out and rc == 0, out
    out, rc = mqsc("DISPLAY QLOCAL(Q1)\n")
    assert "AMQ8147E" in out
    out, rc = mqsc("DEFINE QLOCAL(Q1)\n")
    assert "AMQ8006I" in out and rc == 0, out
    pair.put(pair.a, "Q1", ["three"])
    # the new queue survives a restart, and nothing of the old one comes back
    pair.run(pair.a, "endmqm", "-w", pair.qmgr, timeout=60)
    pair.start(pair.a)
    assert pair.get_all(pair.a, "Q1") == ["three"]
    assert "damaged" not in mqsc("DISPLAY QLOCAL(*)\n")[0]


def test_a_credentials_file_others_can_read_is_warned_about(tmp_path) -> None:
    """Mode 0666: strmqm starts (the docs give 0600 as what crtmqm makes) and the error log
    says which file, its mode and 'chmod 600'; a client's @file credential at 0666 works
    and its stderr says the same once."""
    pair = LocalPair(qmgr="QMCRED", base=str(tmp_path))
    try:
        pair.create()
        creds = os.path.join(pair.data_dir(), "credentials")
        assert os.stat(creds).st_mode & 0o777 == 0o600
        os.chmod(creds, 0o666)
        console = pair.start(pair.a)
        lines = [ln for ln in _errlog(pair).splitlines() if "AMQ1133" in ln]
        assert len(lines) == 1, lines
        assert creds in lines[0] and "0666" in lines[0] and f"chmod 600 {creds}" in lines[0]
        # and on the console of the strmqm that started it
        shown = [ln for ln in console.splitlines() if "AMQ1133W" in ln]
        assert len(shown) == 1 and "chmod 600" in shown[0], console
        pair.mqsc(pair.a, "DEFINE QLOCAL(QC)\n")
        with open(creds, encoding="utf-8") as fh:
            secret = json.load(fh)["principals"]["admin"]["secret"]
        secret_file = os.path.join(pair.base, "cred")
        with open(secret_file, "w", encoding="utf-8") as fh:
            fh.write(f"admin:{secret}\n")
        os.chmod(secret_file, 0o666)
        env = dict(pair.a.env(), MIQM_CREDENTIAL="@" + secret_file)
        proc = subprocess.run(["python3", "-c", "from miqm.client import connect\n"
                               "with connect('QMCRED') as qm:\n"
                               "    qm.put('QC', b'x')\n"
                               "    print(qm.get('QC').body.decode())\n"],
                              env=env, text=True, capture_output=True, timeout=60)
        assert proc.returncode == 0 and proc.stdout.strip() == "x", proc.stderr
        warned = [ln for ln in proc.stderr.splitlines() if "AMQ1133W" in ln]
        assert len(warned) == 1 and secret_file in warned[0] and "chmod 600" in warned[0]
        assert "Traceback" not in proc.stderr
        # a private file: not a word
        os.chmod(secret_file, 0o600)
        proc = subprocess.run(["python3", "-c", "from miqm.client import connect\n"
                               "with connect('QMCRED') as qm:\n"
                               "    qm.put('QC', b'y')\n"],
                              env=env, text=True, capture_output=True, timeout=60)
        assert proc.returncode == 0 and "AMQ1133" not in proc.stderr, proc.stderr
    finally:
        pair.close()
