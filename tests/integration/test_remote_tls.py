"""A real instance (strmqm) with a TLS listener, as an application team sets one up for
clients on other hosts: the listener's private key left readable by other users is
warned about, as the credentials file is, and a client that trusts the CA connects."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from miqm.localpair import LocalPair
from tests.unit.test_client import _make_certs

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None,
                                reason="needs the openssl command")


def test_a_tls_key_file_others_can_read_is_warned_about(tmp_path) -> None:
    certs = _make_certs(str(tmp_path))
    os.chmod(certs["server.key"], 0o644)  # what openssl or a copy often leaves
    pair = LocalPair(qmgr="QMTLSK", base=str(tmp_path / "pair"))
    try:
        pair.create()
        for key, value in (("SSLCertFile", certs["server.crt"]),
                           ("SSLKeyFile", certs["server.key"])):
            pair.run(pair.a, "setmqini", "-m", pair.qmgr, "-s", "Listener", "-k", key,
                     "-v", value)
        console = pair.start(pair.a)
        path = os.path.join(pair.data_dir(), "errors", "AMQERR01.LOG")
        with open(path, encoding="utf-8", errors="replace") as fh:
            lines = [ln for ln in fh.read().splitlines() if "AMQ1133" in ln]
        key = certs["server.key"]
        assert len(lines) == 1, lines
        assert key in lines[0] and "0644" in lines[0] and f"chmod 600 {key}" in lines[0]
        shown = [ln for ln in console.splitlines() if "AMQ1133W" in ln]
        assert len(shown) == 1 and key in shown[0], console
        # the listener serves TLS all the same, to a client naming its TCP address
        with open(os.path.join(pair.data_dir(), "listener"), encoding="utf-8") as fh:
            where = json.load(fh)
        env = dict(pair.a.env(), MIQM_CONNECTION=f"{where['host']}({where['port']})",
                   MIQM_TLS_CA=certs["ca.crt"])
        proc = subprocess.run(["python3", "-c", "from miqm.client import connect\n"
                               "with connect('QMTLSK') as qm:\n    print(qm.qmgr)\n"],
                              env=env, text=True, capture_output=True, timeout=60)
        assert proc.returncode == 0 and proc.stdout.strip() == "QMTLSK", proc.stderr
    finally:
        pair.close()
