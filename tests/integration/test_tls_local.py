"""A queue manager whose listener requires client certificates, ended from its own host
by a shell that has none (real strmqm/endmqm processes): ``endmqm -i`` still ends it
(its controller takes SIGTERM as ``endmqm -i``), and a controlled ``endmqm`` says in one
line what the listener wants and that ``endmqm -i`` works without it."""

from __future__ import annotations

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


def test_endmqm_i_ends_an_instance_whose_listener_wants_a_client_certificate(tmp_path
                                                                              ) -> None:
    pair = LocalPair(qmgr=QM, base=str(tmp_path / "pair"))
    try:
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
