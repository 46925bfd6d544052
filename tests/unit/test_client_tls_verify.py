"""What an application is told when it does not accept the listener's certificate: a
real TLS listener in this process with certificates made here by openssl, one expired,
one naming another host, one signed by a CA the client does not trust. Each is 2393 at
once, and the line says which check failed (they all read CERTIFICATE_VERIFY_FAILED)."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

import pytest

from miqm import client as mq
from miqm.net.client import client_tls_context
from miqm.net.server import Listener, server_tls_context

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None,
                                reason="needs the openssl command")


def _openssl(d: str, *argv: str) -> None:
    subprocess.run(["openssl", *argv], check=True, capture_output=True, cwd=d)


def _sign(d: str, name: str, ca: str, san: str, days: str) -> None:
    """``name``.crt/.key signed by ``ca`` for ``san``, valid ``days`` (negative: expired)."""
    with open(os.path.join(d, f"{name}.cnf"), "w") as fh:
        fh.write(f"subjectAltName={san}\n")
    _openssl(d, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
             f"{name}.csr", "-subj", f"/CN={name}")
    _openssl(d, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey",
             f"{ca}.key", "-CAcreateserial", "-out", f"{name}.crt", "-days", days,
             "-extfile", f"{name}.cnf")


def _handler(request: dict[str, Any], session: Any) -> dict[str, Any]:
    return {"ok": True, "qmgr": "QMT", "host": "here"}


@pytest.mark.parametrize(("cert", "ca", "says"), [
    ("expired", "ca", "certificate has expired"),
    ("misnamed", "ca", "mismatch, certificate is not valid for '127.0.0.1'"),
    ("good", "other", "unable to get local issuer certificate"),
])
def test_a_refused_listener_certificate_names_the_check_that_failed(
        tmp_path, cert: str, ca: str, says: str) -> None:
    d = str(tmp_path)
    for name in ("ca", "other"):
        _openssl(d, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                 f"{name}.key", "-out", f"{name}.crt", "-days", "2", "-subj", f"/CN={name}")
    san = "DNS:localhost,IP:127.0.0.1"
    {"expired": lambda: _sign(d, "expired", "ca", san, "-1"),
     "misnamed": lambda: _sign(d, "misnamed", "ca", "DNS:otherhost,IP:10.9.9.9", "2"),
     "good": lambda: _sign(d, "good", "ca", san, "2")}[cert]()
    listener = Listener(_handler, tls=server_tls_context(os.path.join(d, f"{cert}.crt"),
                                                         os.path.join(d, f"{cert}.key")),
                        handshake_timeout=2.0)
    host, port = listener.start()
    try:
        with pytest.raises(mq.SSLInitializationError) as info:
            mq.connect("QMT", conname=f"{host}({port})", credential="x:y",
                       tls=client_tls_context(os.path.join(d, f"{ca}.crt")))
        assert info.value.reason == 2393
        assert says in str(info.value), str(info.value)
        assert "client certificate" not in str(info.value)  # not the question here
    finally:
        listener.stop()


def test_an_unusable_tls_file_is_named_with_its_setting(tmp_path, capsys) -> None:
    """A missing or mismatched file: the line names which setting and path (it said
    '[Errno 2] No such file or directory' and listed three settings); a client key others
    can read works and is warned about once on stderr."""
    from miqm.errors import ConfigError

    d = str(tmp_path)
    _openssl(d, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
             "ca.crt", "-days", "2", "-subj", "/CN=ca")
    san = "DNS:localhost,IP:127.0.0.1"
    _sign(d, "server", "ca", san, "2")
    _sign(d, "client", "ca", san, "2")
    p = {n: os.path.join(d, n) for n in ("ca.crt", "server.crt", "server.key",
                                         "client.crt", "client.key", "missing.pem")}
    cases = [
        (lambda: client_tls_context(p["missing.pem"]), "MIQM_TLS_CA", p["missing.pem"]),
        (lambda: client_tls_context(p["ca.crt"], p["client.crt"], p["missing.pem"]),
         "MIQM_TLS_KEY", p["missing.pem"]),
        (lambda: client_tls_context(p["ca.crt"], p["client.crt"], p["server.key"]),
         "MIQM_TLS_KEY", "mismatch"),
        (lambda: server_tls_context(p["missing.pem"], p["server.key"]),
         f"SSLCertFile={p['missing.pem']}", "No such file"),
        (lambda: server_tls_context(p["server.crt"], p["client.key"]),
         f"SSLKeyFile={p['client.key']}", "mismatch"),
        (lambda: server_tls_context(p["server.crt"], p["server.key"], p["missing.pem"]),
         f"SSLClientCAFile={p['missing.pem']}", "No such file"),
    ]
    for make, names, why in cases:
        with pytest.raises(ConfigError) as info:
            make()
        text = str(info.value)
        assert names in text and why in text and "\n" not in text, text
    os.chmod(p["client.key"], 0o644)
    for _ in range(2):
        client_tls_context(p["ca.crt"], p["client.crt"], p["client.key"])
    warned = [ln for ln in capsys.readouterr().err.splitlines() if "AMQ1133W" in ln]
    assert len(warned) == 1 and f"chmod 600 {p['client.key']}" in warned[0], warned
