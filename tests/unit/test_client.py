"""The application client library (miqm.client) against the real store behind the real
listener in this process: put/get/browse/commit/backout with typed errors, the streaming
consumer (prefetch, close returns what was not handed out, resuming after the serving
listener is replaced), credentials (2035), listener settings, TLS with certificates made
here, and bad input that must not disturb a concurrent well-behaved client."""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from miqm import client as mq
from miqm.config import parse_ini
from miqm.errors import ConfigError, NetError
from miqm.net import auth, protocol
from miqm.net.client import client_tls_context
from miqm.net.server import KeepAlive, Listener, server_tls_context
from miqm.net.settings import listener_settings
from tests.unit.test_net_store import Served
from tests.waiting import wait_until

pytestmark = pytest.mark.skipif(importlib.util.find_spec("miqm.store.log") is None,
                                reason="needs the store's recovery log")


@pytest.fixture()
def served(tmp_path, monkeypatch, capsys) -> Iterator[Served]:
    from miqm.cli import crtmqm
    from tests.unit.test_cli_mqadmin import run

    root = str(tmp_path / "root")
    monkeypatch.setenv("MIQM_DATA_ROOT", root)
    monkeypatch.delenv("MIQM_CONNECTION", raising=False)
    monkeypatch.delenv("MIQM_CREDENTIAL", raising=False)
    rc, _, err = run(crtmqm.main, ["crtmqm", "-ll", "-lf", "64", "QMC"], capsys, monkeypatch)
    assert rc == 0, err
    s = Served(root, "QMC")
    s.start()
    s.store.define_queue("Q1", MAXDEPTH=100000)
    try:
        yield s
    finally:
        try:
            s.stop()
        except Exception:
            pass


def test_put_get_browse_commit_backout_and_typed_errors(served) -> None:
    with mq.connect("QMC") as qm:
        mid = qm.put("Q1", b"\x00one", persistent=True)
        assert isinstance(mid, bytes) and len(mid) == 24
        assert qm.browse("Q1").body == b"\x00one"
        msg = qm.get("Q1", wait=0)
        assert msg.body == b"\x00one" and msg.msgid == mid and msg.persistent
        assert msg.backout_count == 0 and not msg.redelivered
        with pytest.raises(mq.NoMessageAvailable) as info:
            qm.get("Q1")
        assert info.value.reason == 2033 and isinstance(info.value, mq.MQError)
        with pytest.raises(mq.UnknownObjectName) as info2:
            qm.put("NOPE", b"x")
        assert info2.value.reason == 2085
        with pytest.raises(mq.UnknownObjectName):
            qm.inquire("NOPE")
        assert int(qm.inquire("Q1")["MAXDEPTH"]) == 100000
        qm.put("Q1", b"a", syncpoint=True, correlid=b"c1")
        qm.put("Q1", b"b", syncpoint=True)
        with mq.connect("QMC") as other:
            with pytest.raises(mq.NoMessageAvailable):
                other.get("Q1")  # not committed yet
        qm.commit()
        got = qm.get("Q1", syncpoint=True)
        assert got.body == b"a" and got.correlid.rstrip(b"\0") == b"c1"
        qm.backout()
        again = qm.get("Q1")
        assert again.body == b"a" and again.backout_count == 1 and again.redelivered
        # a pipelined put that fails dooms its unit of work: commit says so (2003)
        served.store.define_queue("QSMALL", MAXMSGL=4)
        qm.put("Q1", b"ok", syncpoint=True)
        qm.put("QSMALL", b"too long", syncpoint=True)  # refused by the queue manager
        with pytest.raises(mq.BackedOut) as info3:
            qm.commit()
        assert "2030" in str(info3.value)
        assert qm.get("Q1").body == b"b"
        with pytest.raises(mq.NoMessageAvailable):
            qm.get("Q1")


def put_committed(bodies: list[bytes], queue: str = "Q1") -> None:
    """``bodies`` put on ``queue`` of QMC as persistent messages, in one unit of work."""
    with mq.connect("QMC") as qm:
        for b in bodies:
            qm.put(queue, b, persistent=True, syncpoint=True)
        qm.commit()


def test_streaming_consumer_delivers_everything_once_and_close_returns_the_rest(served) -> None:
    bodies = [f"m{i:04d}".encode() * 10 for i in range(600)]
    with mq.connect("QMC") as qm:
        for b in bodies:
            qm.put("Q1", b, persistent=True, syncpoint=True)
        qm.commit()
        got = []
        consumer = qm.consume("Q1", prefetch=50)
        for msg in consumer:
            got.append(msg.body)
            if len(got) == 130:
                break  # mid-batch: the rest, pushed or not, goes back to the queue
        assert got == bodies[:130]
        rest = [m.body for m in qm.consume("Q1", prefetch=200, wait=0.5)]
    assert rest == bodies[130:]  # nothing lost, nothing twice, order kept
    assert served.store.status() is not None
    # what the metrics endpoint reports as got: committed stream batches count too, the
    # messages handed back at close do not (600 got in all, each once)
    service = served.listener.handler.__self__
    wait_until(lambda: service.messages_got == 600,
               f"messages_got == 600 (it is {service.messages_got})", 10)
    # the threads that committed the streams' batches ended with the streams
    wait_until(lambda: not [t for t in threading.enumerate()
                            if t.name.startswith("miqm-commit")],
               "no committer thread left", 10)


def test_consumer_resumes_when_its_listener_is_replaced(served) -> None:
    """The serving listener goes away (as at a failover) while a consumer streams: it
    reconnects by itself, nothing is lost, and anything seen twice says so."""
    bodies = [f"r{i:04d}".encode() for i in range(400)]
    put_committed(bodies)
    seen: list[mq.Message] = []
    with mq.connect("QMC", reconnect=True, reconnect_timeout=20) as qm:
        consumer = qm.consume("Q1", prefetch=40)
        for msg in consumer:
            seen.append(msg)
            if len(seen) == 100:
                # the instance ends: its listener closes every session (the store backs
                # their delivery units out), a new one starts with the listener record
                served.listener.stop()
                served.store.close()
                served.start()
            if len({m.body for m in seen}) == len(bodies):
                break
        assert qm.reconnects >= 1
    first: dict[bytes, int] = {}
    for i, m in enumerate(seen):
        if m.body in first:
            assert m.redelivered, f"{m.body!r} delivered twice without being flagged"
        first.setdefault(m.body, i)
    assert set(first) == set(bodies)


def test_credentials_2035_counted_and_bindings_reads_the_file(served, monkeypatch) -> None:
    from lockfs.posix import PosixVolume

    data_dir = os.path.join(served.root, "qmgrs", "QMC")
    assert os.stat(os.path.join(data_dir, "credentials")).st_mode & 0o777 == 0o600
    principals = auth.read(PosixVolume(data_dir))
    assert principals and set(principals) == {"admin"} and len(principals["admin"]) == 64
    failures: list[tuple[str, str]] = []
    authn = auth.Authenticator(principals, lambda peer, p, n: failures.append((peer, p)))
    served.listener.authenticator = authn
    with mq.connect("QMC") as qm:  # bindings mode reads the credentials file itself
        qm.put("Q1", b"x")
    monkeypatch.setenv("MIQM_CREDENTIAL", "admin:" + "0" * 64)
    with pytest.raises(mq.NotAuthorized) as info:
        mq.connect("QMC", reconnect=False)
    assert info.value.reason == 2035
    secret_file = os.path.join(served.root, "cred")
    with open(secret_file, "w") as fh:
        fh.write(principals["admin"] + "\n")
    monkeypatch.setenv("MIQM_CREDENTIAL", "@" + secret_file)
    with mq.connect("QMC") as qm:
        assert qm.get("Q1").body == b"x"
    # a raw client that skips hello, or sends none, gets 2035 and is disconnected
    host, port = served.listener.address
    with socket.create_connection((host, port)) as s:
        protocol.write_frame(s, {"id": 1, "op": "get", "queue": "Q1"})
        reply = protocol.read_frame(s)
        assert reply["mqrc"] == 2035
    with socket.create_connection((host, port)) as s:
        protocol.write_frame(s, {"id": 1, "op": "hello", "qmgr": "QMC"})
        assert protocol.read_frame(s)["mqrc"] == 2035
    assert authn.failures == 3 and len(failures) == 3
    assert all(peer.startswith("127.0.0.1(") for peer, _ in failures)
    assert authn.check("wrong") is None and authn.check(principals["admin"]) == "admin"


def test_a_refused_application_is_told_about_its_own_credential_or_authority(
        served, monkeypatch) -> None:
    """A wrong secret for an application's principal is not answered with advice to use
    crtmqm's (the admin's) credential; an application that authenticated but may not
    connect is told so as an authority refusal (AMQ8077), not a failed authentication."""
    served.listener.authenticator = auth.Authenticator({"admin": "a" * 64, "app1": "b" * 64})
    monkeypatch.setenv("MIQM_CREDENTIAL", "app1:" + "0" * 64)
    with pytest.raises(mq.NotAuthorized) as info:
        mq.connect("QMC", reconnect=False)
    text = str(info.value)
    assert "AMQ5534" in text and "principal 'app1'" in text and "crtmqm" not in text, text
    monkeypatch.setenv("MIQM_CREDENTIAL", "admin:" + "0" * 64)
    with pytest.raises(mq.NotAuthorized) as info:
        mq.connect("QMC", reconnect=False)
    assert "crtmqm created" in str(info.value)
    served.store.set_authrec("QMGR", "self", "app1", [])  # authority records in force
    served.store.set_authrec("QUEUE", "Q1", "app1", ["PUT"])
    monkeypatch.setenv("MIQM_CREDENTIAL", "app1:" + "b" * 64)
    with pytest.raises(mq.NotAuthorized) as info:
        mq.connect("QMC", reconnect=False)
    text = str(info.value)
    assert text.startswith("AMQ8077: ") and "CONNECT" in text and "AMQ5534" not in text, text


def test_auth_failures_are_rate_limited_in_the_log() -> None:
    now = [0.0]
    logged: list[int] = []
    a = auth.Authenticator({"admin": "s"}, lambda peer, p, n: logged.append(n),
                           log_per_minute=5, clock=lambda: now[0])
    for _ in range(50):
        assert a.check("bad", "p") is None
    assert a.failures == 50 and len(logged) == 5
    now[0] = 61.0
    a.check("bad", "p")
    assert logged[-1] == 45  # the next window reports what the last one suppressed


def test_listener_settings_from_qm_ini_and_environment() -> None:
    def cfg(text: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
        return listener_settings(parse_ini(text, "qm.ini"), env or {})

    assert (cfg("").host, cfg("").port) == ("127.0.0.1", 1414)
    assert cfg("TCP:\n   Port=1500\n").port == 1500
    both = "TCP:\n   Port=1500\nListener:\n   Port=1600\n   Host=0.0.0.0\n"
    assert (cfg(both).host, cfg(both).port) == ("0.0.0.0", 1600)
    over = cfg(both, {"MIQM_LISTENER_PORT": "0", "MIQM_LISTENER_HOST": "::1"})
    assert (over.host, over.port) == ("::1", 0)
    for bad in ("Listener:\n   Port=70000\n", "TCP:\n   Port=x\n",
                "Listener:\n   SSLCertFile=/a\n"):
        with pytest.raises(ConfigError):
            cfg(bad)
    with pytest.raises(ConfigError) as info:
        cfg("", {"MIQM_LISTENER_PORT": "-1"})
    assert "MIQM_LISTENER_PORT" in str(info.value)


def test_keepalive_from_qm_ini_and_on_accepted_connections() -> None:
    def cfg(text: str):  # type: ignore[no-untyped-def]
        return listener_settings(parse_ini(text, "qm.ini"), {})

    assert cfg("").keepalive is True  # on by default
    assert cfg("TCP:\n   KeepAlive=No\n").keepalive is False  # MQ's own stanza
    assert cfg("TCP:\n   KeepAlive=no\nListener:\n   KeepAlive=YES\n").keepalive is True
    with pytest.raises(ConfigError) as info:
        cfg("TCP:\n   KeepAlive=sometimes\n")
    assert "KeepAlive" in str(info.value) and "Yes or No" in str(info.value)

    # the probes' timing is set on each accepted client socket
    listener = Listener(lambda r, s: {"ok": True}, keepalive=KeepAlive(idle=7, interval=3,
                                                                         count=4))
    host, port = listener.start()
    try:
        with socket.create_connection((host, port)):
            wait_until(lambda: listener._conns, "the accepted connection")
            conn = next(iter(listener._conns.values()))[0]
            assert conn.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            if hasattr(socket, "TCP_KEEPIDLE"):
                assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 7
                assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 3
                assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 4
    finally:
        listener.stop()


def test_port_in_use_is_one_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(protocol.NetError) as info:
            Listener(lambda r, s: {"ok": True}, port=port).start()
        assert "AMQ9218" in str(info.value) and str(port) in str(info.value)
        assert "\n" not in str(info.value) and "free port" in str(info.value)


@pytest.mark.parametrize("host", ["999.1.1.1", "192.0.2.1"])
def test_an_address_not_of_this_host_is_told_to_be_corrected_not_the_port(host) -> None:
    """A name that does not resolve, or an address this host does not have: no free port
    would help, so the line names the address setting (it advised choosing a port)."""
    with pytest.raises(protocol.NetError) as info:
        Listener(lambda r, s: {"ok": True}, host=host, port=0).start()
    text = str(info.value)
    assert "AMQ9218" in text and host in text and "MIQM_LISTENER_HOST" in text, text
    assert "free port" not in text and "\n" not in text


def _good_client_works(qm: mq.QueueManager, n: int = 20) -> None:
    for i in range(n):
        qm.put("Q1", f"g{i}".encode())
    assert [qm.get("Q1").body for _ in range(n)] == [f"g{i}".encode() for i in range(n)]


def test_bad_input_leaves_the_listener_and_other_clients_alone(served) -> None:
    served.listener.handshake_timeout = 0.5
    served.listener.max_frame = 1024 * 1024
    host, port = served.listener.address
    with mq.connect("QMC") as good:
        _good_client_works(good)
        # malformed header: an error reply, then the connection is closed
        with socket.create_connection((host, port)) as s:
            s.sendall(b"\x00\x00\x00\x07\x00\x00\x00\x03abc")
            reply = protocol.read_frame(s)
            assert reply["ok"] is False and "AMQ9504" in reply["error"]
            assert s.recv(10) == b""
        # an oversized frame is refused before it is read (2010)
        with socket.create_connection((host, port)) as s:
            s.sendall(b"\x7f\x00\x00\x00")
            assert protocol.read_frame(s)["mqrc"] == 2010
        # a version 1 client gets a version 1 refusal it can print
        with socket.create_connection((host, port)) as s:
            s.sendall(protocol.encode_v1({"v": 1, "id": 0, "op": "hello", "qmgr": "QMC"}))
            length = int.from_bytes(s.recv(4), "big")
            import json
            data = b""
            while len(data) < length:
                data += s.recv(length - len(data))
            refusal = json.loads(data)
            assert refusal["ok"] is False and "version 1" in refusal["error"]
        # a TLS client on this plain listener: its handshake fails, the listener logs it
        ctx = ssl.create_default_context()
        with socket.create_connection((host, port)) as raw:
            with pytest.raises((ssl.SSLError, OSError)):
                ctx.wrap_socket(raw, server_hostname="localhost")
        # a client that connects and says nothing is dropped after the handshake timeout
        silent = socket.create_connection((host, port))
        silent.settimeout(10)
        t0 = time.monotonic()
        assert silent.recv(10) == b""
        assert time.monotonic() - t0 < 8
        silent.close()
        # an oversized message from the library: 2010 before anything is sent
        with pytest.raises(mq.MQError) as info:
            good.put("Q1", b"x" * (protocol.MAX_MESSAGE + 1))
        assert info.value.reason == 2010
        _good_client_works(good)
    rejected = served.listener.rejected
    assert rejected.get("malformed", 0) >= 1 and rejected.get("old_protocol") == 1
    assert rejected.get("tls_on_plain") == 1 and rejected.get("silent", 0) >= 1


def test_many_idle_connections_do_not_stop_a_working_client(served) -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 2 * 1000 + 200  # both ends of each connection live in this process
    if soft < want and (hard == resource.RLIM_INFINITY or hard >= want):
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    n = min(1000, (resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 200) // 2)
    host, port = served.listener.address

    def rss_kib() -> int:
        with open("/proc/self/status") as fh:
            return next(int(ln.split()[1]) for ln in fh if ln.startswith("VmRSS:"))

    before = rss_kib()
    idle = []
    try:
        for _ in range(n):
            idle.append(socket.create_connection((host, port)))
        deadline = time.monotonic() + 30
        while len(served.listener.sessions()) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(served.listener.sessions()) >= n
        grown = rss_kib() - before
        assert grown < n * 256, f"{n} idle connections cost {grown} KiB"  # bounded
        with mq.connect("QMC") as good:
            _good_client_works(good, 50)
    finally:
        for s in idle:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    deadline = time.monotonic() + 30  # the sessions go away with their clients
    while len(served.listener.sessions()) > 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(served.listener.sessions()) <= 1


def test_a_flood_of_bad_credentials_does_not_stop_a_good_client(served) -> None:
    from lockfs.posix import PosixVolume

    principals = auth.read(PosixVolume(os.path.join(served.root, "qmgrs", "QMC")))
    authn = auth.Authenticator(principals, lambda *a: None)
    served.listener.authenticator = authn
    conname = "{}({})".format(*served.listener.address)
    stop = threading.Event()

    def flood() -> None:
        while not stop.is_set():
            try:
                mq.connect("QMC", conname=conname, credential="admin:bad", reconnect=False)
            except mq.NotAuthorized:
                pass

    threads = [threading.Thread(target=flood) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        with mq.connect("QMC", conname=conname, credential=principals["admin"]) as good:
            _good_client_works(good, 100)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert authn.failures >= 3


def _make_certs(d: str) -> dict[str, str]:
    """A CA, a server certificate for localhost/127.0.0.1 and a client certificate."""
    def run(*argv: str) -> None:
        subprocess.run(["openssl", *argv], check=True, capture_output=True, cwd=d)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
        "-days", "2", "-subj", "/CN=test-ca")
    with open(os.path.join(d, "ext.cnf"), "w") as fh:
        fh.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for name in ("server", "client"):
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
            f"{name}.csr", "-subj", f"/CN={name}")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", "ext.cnf")
    return {k: os.path.join(d, k) for k in ("ca.crt", "server.crt", "server.key",
                                             "client.crt", "client.key")}


def tls_listener_of(served: Any, certs: dict[str, str]) -> tuple[Listener, str]:
    """A started TLS listener over ``served``'s store that requires client certificates
    signed by ``certs``' CA, and its CONNAME."""
    from miqm.net.service import QueueService

    listener = Listener(QueueService(served.store, "QMC").handle,
                        tls=server_tls_context(certs["server.crt"], certs["server.key"],
                                               certs["ca.crt"]),
                        handshake_timeout=2.0)
    host, port = listener.start()
    return listener, f"{host}({port})"


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_tls_listener_with_client_certificates(served, tmp_path) -> None:
    certs = _make_certs(str(tmp_path))
    tls_listener, conname = tls_listener_of(served, certs)
    try:
        good_ctx = client_tls_context(certs["ca.crt"], certs["client.crt"],
                                      certs["client.key"])
        with mq.connect("QMC", conname=conname, tls=good_ctx) as qm:
            _good_client_works(qm)
            # a streaming consumer over TLS: pushes and acks share the TLS connection
            for i in range(300):
                qm.put("Q1", f"t{i}".encode(), syncpoint=True)
            qm.commit()
            got = [m.body for m in qm.consume("Q1", prefetch=50, wait=1.0)]
            assert got == [f"t{i}".encode() for i in range(300)]
        # no client certificate: refused by the listener's handshake
        with pytest.raises(mq.MQError) as info:
            mq.connect("QMC", conname=conname, tls=client_tls_context(certs["ca.crt"]),
                       reconnect=False)
        assert info.value.reason == 2393  # MQRC_SSL_INITIALIZATION_ERROR
        # a plain client on the TLS listener: a clear line, not a hang
        with pytest.raises(mq.MQError) as info2:
            mq.connect("QMC", conname=conname, reconnect=False)
        assert "TLS" in str(info2.value)
        # and the listener still serves
        with mq.connect("QMC", conname=conname, tls=good_ctx) as qm:
            _good_client_works(qm)
        assert tls_listener.rejected.get("tls_handshake", 0) >= 1
        assert tls_listener.rejected.get("plain_on_tls", 0) == 1
    finally:
        tls_listener.stop()


def test_concurrent_producers_and_a_consumer(served) -> None:
    n, per = 4, 150
    errors: list[BaseException] = []

    def produce(k: int) -> None:
        try:
            with mq.connect("QMC") as qm:
                for i in range(per):
                    qm.put("Q1", f"{k}-{i}".encode(), persistent=True, syncpoint=True)
                    if i % 10 == 9:
                        qm.commit()
                qm.commit()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    got: list[bytes] = []
    with mq.connect("QMC") as qm:
        for msg in qm.consume("Q1", prefetch=64, wait=3.0):
            got.append(msg.body)
            if len(got) == n * per:
                break
    for t in threads:
        t.join()
    assert not errors
    assert sorted(got) == sorted(f"{k}-{i}".encode() for k in range(n) for i in range(per))


def test_no_credentials_file_means_open_and_miqm_credential_creates_one(served) -> None:
    from miqm.cli.credential import credential

    data_dir = os.path.join(served.root, "qmgrs", "QMC")
    os.unlink(os.path.join(data_dir, "credentials"))  # a queue manager from before
    open_auth = auth.Authenticator(None)
    assert not open_auth.required and open_auth.check(None) == "admin"
    served.listener.authenticator = open_auth
    with mq.connect("QMC") as qm:
        qm.put("Q1", b"old")
    lines = credential("QMC", rotate=False, show=True)
    assert "created" in lines[0] and lines[1].startswith("admin:")
    assert os.stat(os.path.join(data_dir, "credentials")).st_mode & 0o777 == 0o600
    rotated = credential("QMC", rotate=True, show=True)
    assert rotated[-1] != lines[1] and "replaced" in rotated[0]


def test_store_get_many_follows_get_rules(served) -> None:
    from miqm.errors import MessagingError

    store = served.store
    for i in range(10):
        store.put("Q1", f"n{i}".encode(), persistent=True, priority=0)
    store.put("Q1", b"urgent", persistent=False, priority=9)
    uow = store.begin()
    held = store.get("Q1", uow=uow)  # the priority 9 message, locked by this unit
    assert held is not None and held.body == b"urgent"
    got = store.get_many("Q1", 4, uow)
    assert [m.body for m in got] == [b"n0", b"n1", b"n2", b"n3"]  # skips the locked one
    other = store.begin()
    assert [m.body for m in store.get_many("Q1", 100, other)] == [
        f"n{i}".encode() for i in range(4, 10)]
    assert store.get_many("Q1", 5, store.begin()) == []
    store.backout(other)
    store.commit(uow)
    again = store.begin()
    assert [m.body for m in store.get_many("Q1", 100, again)] == [
        f"n{i}".encode() for i in range(4, 10)]
    store.backout(again)
    store.set_qmgr_attrs(MAXUMSGS=2)
    try:
        limited = store.begin()
        assert len(store.get_many("Q1", 100, limited)) == 2
        store.backout(limited)
    finally:
        store.set_qmgr_attrs(MAXUMSGS=10000)
    store.alter_queue("Q1", GET="DISABLED")
    with pytest.raises(MessagingError) as info:
        store.get_many("Q1", 1, store.begin())
    assert info.value.mqrc == 2016


def test_open_handles_counted_and_reopened_after_a_reconnect(served) -> None:
    """An explicit open shows in IPPROCS/OPPROCS; after the serving listener is replaced
    (as at a failover) a reconnecting client opens it again with its next call; a close
    ends it."""
    with mq.connect("QMC", reconnect=True, reconnect_timeout=20) as qm:
        assert qm.open("Q1", "INPUT", "BROWSE") == "Q1"
        qm.put("Q1", b"x")  # an OUTPUT handle of its own
        attrs = qm.inquire("Q1")
        assert (attrs["IPPROCS"], attrs["OPPROCS"]) == (1, 1)
        served.listener.stop()
        served.store.close()
        served.start()
        qm.inquire("Q1")  # a read: made again on the new connection and resent
        attrs = qm.inquire("Q1")  # reopened first: INPUT again, OUTPUT not (no put yet)
        assert (attrs["IPPROCS"], attrs["OPPROCS"]) == (1, 0)
        qm.close_queue("Q1")
        assert qm.inquire("Q1")["IPPROCS"] == 0


def _frames_within(s: socket.socket, seconds: float) -> list[dict]:
    """Every frame the server sends on ``s`` until it is quiet for ``seconds``."""
    reader = protocol.FrameReader(s)
    frames = []
    s.settimeout(seconds)
    try:
        while True:
            frames.append(reader.read())
    except TimeoutError:
        return frames


def test_quiet_puts_are_answered_only_when_they_fail(served) -> None:
    host, port = served.listener.address
    with socket.create_connection((host, port)) as s:
        s.sendall(protocol.encode({"v": 2, "id": 0, "op": "hello", "qmgr": "QMC"}))
        hello = protocol.read_frame(s)
        assert hello["ok"] and "quiet" in hello["features"]
        put = {"op": "put", "queue": "Q1", "syncpoint": True, "persistent": True}
        s.sendall(b"".join([
            protocol.encode({**put, "id": 1, "async": 2}, b"one"),
            protocol.encode({**put, "id": 2, "async": 2, "queue": "NOPE"}, b"two"),
            protocol.encode({**put, "id": 3, "async": 2}, b"three"),
            protocol.encode({"id": 4, "op": "commit"})]))
        frames = _frames_within(s, 1.0)
        # the failed put (2085) and the commit it doomed (2003): nothing for the others
        assert [(f["id"], f["ok"], f.get("mqrc")) for f in frames] == [
            (2, False, 2085), (4, False, 2003)]
        s.sendall(b"".join([
            protocol.encode({**put, "id": 5, "async": 2}, b"four"),
            protocol.encode({**put, "id": 6, "async": 1}, b"five"),
            protocol.encode({"id": 7, "op": "commit"})]))
        frames = _frames_within(s, 1.0)
        # a request without async 2 is still answered (what an older client sends)
        assert [(f["id"], f["ok"]) for f in frames] == [(6, True), (7, True)]
    with mq.connect("QMC") as qm:
        assert [qm.get("Q1").body for _ in range(2)] == [b"four", b"five"]


@pytest.mark.parametrize("quiet", [True, False])
def test_pipelined_puts_with_and_without_a_quiet_listener(served, monkeypatch, quiet) -> None:
    from miqm.net import server

    if not quiet:  # a listener of an earlier release answers every request
        monkeypatch.setattr(server, "FEATURES", ())
    with mq.connect("QMC") as qm:
        conn = qm._conn
        assert conn._quiet is quiet
        for round_ in range(3):
            for i in range(50):
                qm.put("Q1", f"{round_}-{i}".encode(), syncpoint=True)
            qm.commit()
            assert conn._pending == {}  # every pipelined put settled by the commit's reply
        served.store.define_queue("QSMALL", MAXMSGL=4)
        qm.put("QSMALL", b"too long", syncpoint=True)  # refused by the queue manager
        qm.put("Q1", b"after", syncpoint=True)
        with pytest.raises(mq.BackedOut) as info:
            qm.commit()
        assert "2030" in str(info.value)
        assert conn._pending == {}
        got = [qm.get("Q1").body for _ in range(150)]
        assert got == [f"{r}-{i}".encode() for r in range(3) for i in range(50)]
        with pytest.raises(mq.NoMessageAvailable):
            qm.get("Q1")


def test_an_idle_connection_is_closed_after_the_idle_timeout(served) -> None:
    served.listener.idle_timeout = 0.5
    host, port = served.listener.address
    with socket.create_connection((host, port)) as s:
        s.sendall(protocol.encode({"v": 2, "id": 0, "op": "hello", "qmgr": "QMC"}))
        assert protocol.read_frame(s)["ok"]
        s.settimeout(10)
        t0 = time.monotonic()
        assert s.recv(10) == b""  # the listener hung up on the silent, authenticated client
        assert 0.3 < time.monotonic() - t0 < 8
    assert served.listener.rejected.get("idle") == 1
    with mq.connect("QMC") as good:
        _good_client_works(good)


@pytest.mark.parametrize("packed", [True, False])
def test_consumer_reads_packed_batches_and_the_older_lists(served, monkeypatch,
                                                           packed) -> None:
    from miqm.net import server, streaming

    if not packed:  # a listener of an earlier release pushes per-message lists
        monkeypatch.setattr(server, "FEATURES", ("quiet",))
    formats: list[bool] = []
    encode = streaming.encode_batch

    def spy(*args, **kwargs):
        formats.append(bool(args[4] if len(args) > 4 else kwargs.get("packed")))
        return encode(*args, **kwargs)

    monkeypatch.setattr(streaming, "encode_batch", spy)
    with mq.connect("QMC") as qm:
        sent = []
        for i in range(150):
            body = f"b{i}".encode() * (i % 7)  # empty bodies too
            sent.append((body, 9 - i % 10, i % 3 != 0))
            qm.put("Q1", body, priority=9 - i % 10, persistent=i % 3 != 0,
                   correlid=b"c%d" % i, syncpoint=True)
        qm.commit()
        before = time.time()
        browsed = qm.browse("Q1")
        got = list(qm.consume("Q1", prefetch=40, wait=0.5))
    assert formats and set(formats) == {packed}
    # the same messages, in priority order, with every field the get path gives
    want = sorted(sent, key=lambda m: -m[1])
    assert [(m.body, m.priority, m.persistent) for m in got] == want
    assert got[0].msgid == browsed.msgid and got[0].correlid == browsed.correlid
    assert all(abs(m.put_time.timestamp() - before) < 60 for m in got)
    assert got[0].put_time == browsed.put_time


def test_packed_batch_round_trip_keeps_every_field() -> None:
    import datetime as dt
    from types import SimpleNamespace

    from miqm.net.streaming import BackoutCounts, encode_batch

    t = dt.datetime(2026, 11, 26, 21, 0, 1, 123456, tzinfo=dt.UTC)
    msgs = [SimpleNamespace(msgid=bytes([i]) * 24, correlid=b"c".ljust(24, b"\0"),
                            body=b"x" * i, priority=i % 10, persistent=bool(i % 2),
                            put_time=t) for i in range(70)]
    counts = BackoutCounts()
    counts.bump([msgs[3].msgid])
    seen = []
    for packed in (True, False):
        header, body = encode_batch(7, 2, msgs, counts, packed)
        consumer = mq.Consumer.__new__(mq.Consumer)
        consumer._suspect, consumer._batch = {}, None
        consumer._take({**header, "body": body})
        assert consumer._batch is not None and consumer._batch[0] == 2
        seen.append([(m.body, m.msgid, m.correlid, m.priority, m.persistent,
                      m.put_time, m.backout_count) for m in consumer._batch[1]])
    assert seen[0] == seen[1]
    assert seen[0][3][6] == 1 and seen[0][4][6] == 0 and seen[0][5][5] == t
    with pytest.raises(ValueError):  # a table longer than the data
        consumer._take({"push": 7, "batch": 3, "n": 5, "body": b"\0" * 10})


def _recording(served) -> list[tuple]:
    """The (op, commit) of every request the listener hands to the service from now on."""
    seen: list[tuple] = []
    handler = served.listener.handler

    def record(req, session):
        seen.append((req.get("op"), bool(req.get("commit"))))
        return handler(req, session)

    served.listener.handler = record
    return seen


@pytest.mark.parametrize("offered", [True, False])
def test_a_unit_of_one_put_goes_with_its_commit_as_one_request(served, monkeypatch,
                                                               offered) -> None:
    from miqm.net import server

    if not offered:  # a listener of an earlier release: the put, then the commit
        monkeypatch.setattr(server, "FEATURES", ("quiet", "packed"))
    with mq.connect("QMC") as qm:
        seen = _recording(served)
        qm.put("Q1", b"alone", syncpoint=True)
        assert seen == []  # held back: the commit may follow
        qm.commit()
        assert seen == ([("put", True)] if offered else [("put", False), ("commit", False)])
        assert qm._conn._pending == {} and qm._conn._lone_put is None
        assert qm.get("Q1").body == b"alone"

        # refused puts: the commit reports the unit backed out (2003), naming the put's
        # reason, as it does for a pipelined put, and nothing is left on the queue
        served.store.define_queue("QSMALL", MAXMSGL=2)
        for bad, why in ((dict(queue="QSMALL"), "2030"), (dict(queue="NOPE"), "2085")):
            args = {"queue": "Q1", **bad}
            qm.put(args.pop("queue"), b"bad", syncpoint=True, **args)
            with pytest.raises(mq.BackedOut) as info:
                qm.commit()
            assert why in str(info.value)
        with pytest.raises(mq.NoMessageAvailable):
            qm.get("Q1")
        qm.commit()  # the next unit starts clean: nothing was left open

        del seen[:]
        # a unit of more than its first put: that put goes first, as it is
        qm.put("Q1", b"one", syncpoint=True)
        qm.put("Q1", b"two", syncpoint=True)
        qm.commit()
        qm.put("Q1", b"three", syncpoint=True)
        assert qm.get("Q1", syncpoint=True).body == b"one"
        qm.commit()
        qm.put("Q1", b"gone", syncpoint=True)
        qm.backout()
        assert seen == [("put", False), ("put", False), ("commit", False),
                        ("put", False), ("get", False), ("commit", False),
                        ("put", False), ("backout", False)]
        assert [qm.get("Q1").body for _ in range(2)] == [b"two", b"three"]
        with pytest.raises(mq.NoMessageAvailable):
            qm.get("Q1")


def test_a_put_with_commit_on_the_wire(served) -> None:
    """What the listener does with a put that carries its commit: commits it at once
    (durable, then answered once); joins a unit the session already has open; refuses
    it outside syncpoint (2046); answers 2003 when the put is refused."""
    host, port = served.listener.address
    with socket.create_connection((host, port)) as s:
        s.sendall(protocol.encode({"v": 2, "id": 0, "op": "hello", "qmgr": "QMC"}))
        assert "putcommit" in protocol.read_frame(s)["features"]
        put = {"op": "put", "queue": "Q1", "syncpoint": True, "persistent": True}
        s.sendall(b"".join([
            protocol.encode({**put, "id": 1, "commit": True}, b"a"),
            protocol.encode({**put, "id": 2, "async": 2}, b"b"),
            protocol.encode({**put, "id": 3, "commit": True}, b"c"),
            protocol.encode({**put, "id": 4, "commit": True, "syncpoint": False}, b"d"),
            protocol.encode({**put, "id": 5, "commit": True, "queue": "NOPE"}, b"e")]))
        frames = _frames_within(s, 1.0)
        assert [(f["id"], f["ok"], f.get("mqrc")) for f in frames] == [
            (1, True, None), (3, True, None), (4, False, 2046), (5, False, 2003)]
        assert "2085" in frames[-1]["error"]
    with mq.connect("QMC") as qm:
        assert [qm.get("Q1").body for _ in range(3)] == [b"a", b"b", b"c"]
        with pytest.raises(mq.NoMessageAvailable):
            qm.get("Q1")


def test_pipelined_puts_refused_by_a_stopped_store_never_commit(served) -> None:
    """A store that has stopped (a failed log write) refuses even to begin a unit of work:
    pipelined puts refused that way must fail their commit, not leave it an empty unit
    that commits ok. The fault campaign on the NFS lab found a commit acknowledged that
    way while the server stalled, its messages never stored."""
    from miqm.errors import LogWriteError

    with mq.connect("QMC") as qm:
        qm.put("Q1", b"before", syncpoint=True)
        qm.commit()
        served.store._failed = LogWriteError("the recovery log stopped (test)")
        try:
            for n in (3, 1):  # a unit of three puts, and a unit of one (with its commit)
                for i in range(n):
                    qm.put("Q1", f"lost-{n}-{i}".encode(), syncpoint=True)
                with pytest.raises(mq.MQError) as info:
                    qm.commit()
                assert info.value.reason in (2003, 2102), info.value
        finally:
            served.store._failed = None
        assert qm.get("Q1").body == b"before"
        with pytest.raises(mq.NoMessageAvailable):
            qm.get("Q1")


def test_a_message_put_time_is_the_microsecond_its_batches_carry() -> None:
    """The store keeps put times in seconds (a float); a get reports them as a datetime
    and a streaming batch as microseconds. Both round the same way, so one message never
    shows two put times: 1830318594.5445526 s is 544,552 µs by the batch's rounding, and
    544,553 µs by datetime.fromtimestamp's."""
    import datetime as dt

    from miqm.net.streaming import BackoutCounts, encode_batch
    from miqm.store.qmstore import Message

    t = 1830318594.5445526
    msg = Message(b"x", b"m" * 24, bytes(24), 4, True, t)
    for packed in (True, False):
        header, body = encode_batch(1, 1, [msg], BackoutCounts(), packed)
        consumer = mq.Consumer.__new__(mq.Consumer)
        consumer._suspect, consumer._batch = {}, None
        consumer._take({**header, "body": body})
        assert consumer._batch is not None
        assert consumer._batch[1][0].put_time == msg.put_time
    assert msg.put_time == dt.datetime(2028, 1, 1, 5, 49, 54, 544552, tzinfo=dt.UTC)


def test_a_browse_cursor_walks_the_queue_and_holds_across_a_reconnect(served) -> None:
    """browse (MQGMO_BROWSE_FIRST), browse_next (MQGMO_BROWSE_NEXT) and browse_all:
    each message once in delivery order, left on the queue; the cursor is the store's
    key, so it holds when the serving instance is replaced under the connection."""
    with mq.connect("QMC", reconnect_timeout=10) as qm:
        for body, prio in ((b"a", 5), (b"b", 5), (b"c", 9), (b"d", 0)):
            qm.put("Q1", body, persistent=True, priority=prio,
                   correlid=b"C" if body in (b"b", b"d") else None)
        assert [m.body for m in qm.browse_all("Q1")] == [b"c", b"a", b"b", b"d"]
        assert [m.body for m in qm.browse_all("Q1", correlid=b"C")] == [b"b", b"d"]
        assert qm.browse("Q1").body == b"c"
        assert qm.browse_next("Q1").body == b"a"
        served.listener.stop()  # the instance goes; the next call reconnects
        served.store.close()
        served.start()
        assert qm.browse_next("Q1").body == b"b"
        assert qm.browse_next("Q1").body == b"d"
        with pytest.raises(mq.NoMessageAvailable):
            qm.browse_next("Q1")
        assert qm.reconnects == 1
        assert [qm.get("Q1").body for _ in range(4)] == [b"c", b"a", b"b", b"d"]
    with mq.connect("QMC") as qm:  # a cursor no browse returned: 2046, not a crash
        qm.put("Q1", b"e")
        for bad in (["x", 1], [10, 1], [5], "5:1", [5, -1]):
            with pytest.raises(NetError) as info:
                qm._conn.call("get", queue="Q1", browse=True, after=bad)
            assert info.value.mqrc == 2046, bad
        assert qm.browse("Q1").body == b"e"
