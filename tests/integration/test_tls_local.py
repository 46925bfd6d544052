"""A queue manager whose listener requires client certificates, administered from its
own host by a shell that has none (real strmqm/runmqsc/endmqm processes): local
commands reach the instance through its local socket, as MQ's local commands use IPC
rather than a channel, so runmqsc and a controlled ``endmqm`` work there; a client that
names the TCP address (MIQM_CONNECTION) is refused in one line saying what the listener
wants; and ``endmqm -i`` ends an instance whose local socket is out of reach too (its
controller takes SIGTERM as ``endmqm -i``)."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess

import pytest

from miqm.localpair import LocalPair
from tests.unit.test_client import _make_certs
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("openssl") is None,
                                 reason="needs the openssl command")]

QM = "QMTLSL"


def _tls_pair(tmp_path) -> tuple[LocalPair, dict[str, str]]:
    pair = LocalPair(qmgr=QM, base=str(tmp_path / "pair"))
    pair.create()
    certs_dir = tmp_path / "certs"
    certs_dir.mkdir()
    certs = _make_certs(str(certs_dir))
    for key, path in (("SSLCertFile", certs["server.crt"]),
                      ("SSLKeyFile", certs["server.key"]),
                      ("SSLClientCAFile", certs["ca.crt"])):
        pair.run(pair.a, "setmqini", "-m", QM, "-s", "Listener", "-k", key, "-v", path)
    pair.start(pair.a)
    assert pair.active() is not None
    return pair, certs


def test_local_commands_need_no_client_certificate_and_remote_ones_do(tmp_path) -> None:
    pair, certs = _tls_pair(tmp_path)
    try:
        shown = pair.run(pair.a, "runmqsc", QM, stdin="DISPLAY QMGR QMNAME\n", check=False)
        assert shown.returncode == 0, shown.stdout + shown.stderr
        assert QM in shown.stdout
        # the same command naming the TCP address, as a client on another host does
        (record,) = glob.glob(os.path.join(pair.shared, "**", "listener"), recursive=True)
        with open(record) as fh:
            rec = json.load(fh)
        assert rec.get("ipc"), rec  # the local socket the commands above went through
        address = f"{rec['host']}({rec['port']})"
        for env, names in (({}, "MIQM_TLS_CA"),
                           ({"MIQM_TLS_CA": certs["ca.crt"]}, "MIQM_TLS_CERT")):
            remote = subprocess.run(
                ["runmqsc", QM], input="DISPLAY QMGR QMNAME\n", capture_output=True,
                text=True, timeout=60,
                env=dict(pair.a.env(), MIQM_CONNECTION=address, **env))
            assert remote.returncode != 0
            lines = (remote.stdout + remote.stderr).strip().splitlines()
            assert len(lines) == 1, lines
            assert "2393" in lines[0] and names in lines[0], lines[0]
        ended = pair.run(pair.a, "endmqm", "-w", QM, check=False, timeout=120)
        assert ended.returncode == 0, ended.stdout + ended.stderr
        wait_until(lambda: pair.active() is None, "the instance has ended", timeout=30)
    finally:
        pair.close()


def _forget_local_socket(pair: LocalPair) -> None:
    """The instance's records without its local socket, as an instance of an earlier
    release records them (the local socket out of reach, as in a rolling upgrade)."""
    for record in (os.path.join(pair.a.root, "run", f"{QM}.json"),
                   *glob.glob(os.path.join(pair.shared, "**", "listener"), recursive=True)):
        with open(record) as fh:
            rec = json.load(fh)
        assert rec.pop("ipc", None), record
        with open(record, "w") as fh:
            json.dump(rec, fh)


def test_endmqm_i_ends_an_instance_whose_listener_wants_a_client_certificate(tmp_path
                                                                              ) -> None:
    pair, certs = _tls_pair(tmp_path)
    try:
        _forget_local_socket(pair)
        # a plain shell, then one that trusts the listener but has no certificate
        for env, names in (({}, "MIQM_TLS_CA"),
                           ({"MIQM_TLS_CA": certs["ca.crt"]}, "MIQM_TLS_CERT")):
            ended = subprocess.run(["endmqm", QM], env=dict(pair.a.env(), **env),
                                   capture_output=True, text=True, timeout=60)
            assert ended.returncode != 0
            lines = (ended.stdout + ended.stderr).strip().splitlines()
            assert len(lines) == 1, lines
            assert "2393" in lines[0] and names in lines[0], lines[0]
            assert f". On this host, 'endmqm -i {QM}' ends" in lines[0]
            assert pair.active() is not None  # refused: still running
        ended = pair.run(pair.a, "endmqm", "-i", QM, check=False, timeout=120)
        assert ended.returncode == 0, ended.stdout + ended.stderr
        assert "Traceback" not in ended.stdout + ended.stderr
        wait_until(lambda: pair.active() is None, "the instance has ended", timeout=30)
    finally:
        pair.close()
