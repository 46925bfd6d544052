"""The listener's local socket (MQ's local commands use IPC, not a channel): a command on
the listener's host reaches it without TLS, a record naming a socket that does not answer
here (another host) falls back to the TCP address, and a process of another user is sent
on to the TCP listener rather than served."""

from __future__ import annotations

import json
import os
import shutil
import socket
import uuid

import pytest

from miqm.errors import NetError
from miqm.net.client import Endpoint, QMgrEnding, connect
from miqm.net.server import Listener, server_tls_context
from miqm.net.service import QueueService, quiesce_reply
from tests.unit.test_client import _make_certs
from tests.unit.test_net import FakeStore, _register


def _name() -> str:
    return f"miqm-test/{uuid.uuid4().hex}"


def _listener(**kw) -> tuple[Listener, QueueService]:
    service = QueueService(FakeStore(), "QM1", host_name="hosta")
    service.store.define_queue("Q1")
    listener = Listener(service.handle, **kw)
    listener.start()
    return listener, service


def test_a_local_command_needs_no_client_certificate(tmp_path) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command")
    certs = _make_certs(str(tmp_path))
    tls = server_tls_context(certs["server.crt"], certs["server.key"], certs["ca.crt"])
    listener, service = _listener(tls=tls, ipc=_name())
    try:
        host, port = listener.address
        assert listener.ipc
        with connect("QM1", endpoints=[Endpoint(host, port, listener.ipc)]) as conn:
            conn.call("put", queue="Q1", body=b"local", persistent=True)
            (session,) = listener.sessions()
            assert session.peer == f"local(pid {os.getpid()})"
        assert [m.body for m in service.store.msgs["Q1"]] == [b"local"]
        # the TCP address alone still asks for TLS and a client certificate
        with pytest.raises(NetError) as info:
            connect("QM1", endpoints=[Endpoint(host, port)])
        assert info.value.mqrc == 2393
    finally:
        listener.stop()
    assert listener.sessions() == []


def test_a_socket_that_does_not_answer_here_falls_back_to_tcp(tmp_path, monkeypatch) -> None:
    data = _register(tmp_path, monkeypatch)
    listener, _service = _listener()  # no local socket: as on another host
    try:
        host, port = listener.address
        with open(os.path.join(data, "listener"), "w") as f:
            json.dump({"host": host, "port": port, "ipc": _name()}, f)
        with connect("QM1") as conn:  # bindings mode: the record's socket, then TCP
            assert conn.endpoint == Endpoint(host, port)
            (session,) = listener.sessions()
            assert not session.peer.startswith("local")
    finally:
        listener.stop()


def test_bindings_mode_goes_through_the_local_socket(tmp_path, monkeypatch) -> None:
    data = _register(tmp_path, monkeypatch)
    listener, _service = _listener(ipc=_name())
    try:
        host, port = listener.address
        with open(os.path.join(data, "listener"), "w") as f:
            json.dump({"host": host, "port": port, "ipc": listener.ipc}, f)
        with connect("QM1") as conn:
            assert conn.endpoint == Endpoint(host, port, listener.ipc)
            (session,) = listener.sessions()
            assert session.peer.startswith("local(pid ")
    finally:
        listener.stop()


def test_a_name_in_use_is_a_warning_and_tcp_serves(tmp_path) -> None:
    name = _name()
    first, _ = _listener(ipc=name)
    try:
        second, _ = _listener(ipc=name)
        try:
            assert second.ipc is None and len(second.warnings) == 1
            assert "local listener socket" in second.warnings[0]
            with connect("QM1", endpoints=[Endpoint(*second.address)]) as conn:
                conn.call("ping")
        finally:
            second.stop()
    finally:
        first.stop()


def _as_nobody(endpoint: Endpoint) -> str:
    """In a forked child that has become user nobody: connect to ``endpoint`` and say
    through which socket it was served (the interpreter itself is not readable by
    nobody under /root, so no new process is started)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        status = 1
        try:
            os.close(read_end)
            os.setgid(65534)
            os.setuid(65534)
            with connect("QM1", endpoints=[endpoint], credential="unused") as conn:
                answer = "local" if conn.endpoint.ipc else "tcp"
            os.write(write_end, answer.encode())
            status = 0
        except BaseException as exc:  # reported to the parent, never raised here
            os.write(write_end, f"error {type(exc).__name__}: {exc}".encode())
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as fh:
        said = fh.read().decode()
    os.waitpid(pid, 0)
    return said


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user")
def test_another_users_process_is_sent_to_the_tcp_listener() -> None:
    listener, _service = _listener(ipc=_name())
    try:
        host, port = listener.address
        assert _as_nobody(Endpoint(host, port, listener.ipc)) == "tcp"
        assert listener.rejected.get("local_user") == 1
        # this user's (root's) process is served on the local socket
        with connect("QM1", endpoints=[Endpoint(host, port, listener.ipc)]) as conn:
            assert conn.endpoint.ipc == listener.ipc
    finally:
        listener.stop()


def test_a_local_socket_that_answers_nothing_is_not_tried_again_over_tcp() -> None:
    """A paused instance (SIGSTOP) accepts on both sockets and answers on neither: the
    client gives up on it after one timeout, not one per socket."""
    name = _name()
    silent_local = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent_tcp = socket.socket()
    try:
        silent_local.bind("\0" + name)
        silent_local.listen(4)
        silent_tcp.bind(("127.0.0.1", 0))
        silent_tcp.listen(4)
        with pytest.raises(NetError) as info:
            connect("QM1", timeout=0.5,
                    endpoints=[Endpoint("127.0.0.1", silent_tcp.getsockname()[1], name)])
        assert info.value.mqrc == 2059
        silent_tcp.setblocking(False)
        with pytest.raises(BlockingIOError):
            silent_tcp.accept()  # nobody came to the TCP address
    finally:
        silent_local.close()
        silent_tcp.close()


@pytest.mark.parametrize("call", ["call", "send"])
def test_the_last_frame_reaches_a_client_on_the_local_socket(call: str) -> None:
    """An ending instance stops reading its connections and sends each a last frame
    (2161 here). A local socket refuses the client's next send at once (TCP takes it):
    the client reads that frame all the same, and is told the reason, not left to
    reconnect to an instance that is gone."""
    listener, service = _listener(ipc=_name())
    host, port = listener.address
    conn = connect("QM1", endpoints=[Endpoint(host, port, listener.ipc)], reconnect=True,
                   reconnect_timeout=3)
    try:
        assert conn.endpoint.ipc == listener.ipc
        service.quiesce(2161)
        listener.quiesce(quiesce_reply(2161, False, notice=True))
        listener.stop()
        with pytest.raises(QMgrEnding) as info:
            if call == "send":  # pipelined (a consumer's ack): the next call tells
                conn.send("ping", flush=True)
            conn.call("ping")
        assert info.value.mqrc == 2161
    finally:
        conn.close()
