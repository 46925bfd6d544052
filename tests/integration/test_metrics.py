"""Metrics with the real parts: both instances of a local pair serve /metrics, a
``miqm exporter`` serves what dspmq -x sees, ``promtool check metrics`` accepts all three,
and a real Prometheus (the Debian package's server) evaluating the shipped alert rules
sees the failover alert and then the no-standby alert fire after ``kill -9`` of the
active instance. Also: answers while the shared files hang, and bad ports."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from miqm.localpair import Host, LocalPair
from tests.ports import free_port

pytestmark = pytest.mark.integration

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "miqm-rules.yml"
TUNING = {"StandbyPollInterval": "0.2", "VerifyInterval": "0.5", "MonitorStall": "2",
          "LivenessInterval": "5", "FilesystemLease": "90"}
PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")


def _scrape(port: int, timeout: float = 10.0) -> tuple[float, str]:
    t0 = time.perf_counter()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as r:
        body = r.read().decode()
    return time.perf_counter() - t0, body


def _samples(body: str, name: str) -> dict[str, float]:
    """{label text: value} of metric ``name`` in an exposition."""
    out = {}
    for line in body.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            key, _, value = line.rpartition(" ")
            out[key[len(name):]] = float(value)
    return out


def _wait(what: str, cond: Callable[[], Any], timeout: float = 60.0, poll: float = 0.3
          ) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = cond()
        except OSError as exc:
            last = exc
        else:
            if last:
                return last
        time.sleep(poll)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def _promtool_check(body: str) -> None:
    if PROMTOOL is None:
        return
    proc = subprocess.run([PROMTOOL, "check", "metrics"], input=body, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LocalPair]:
    p = LocalPair(qmgr="QMMET", base=str(tmp_path / "pair"), tuning=dict(TUNING))
    p.create()
    try:
        yield p
    finally:
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            for host in (p.a, p.b):
                for f in sorted(Path(host.root, "run").glob("*.out")):
                    print(f"===== {f}\n{f.read_text(errors='replace')[-3000:]}")
            log = Path(p.data_dir()) / "errors" / "AMQERR01.LOG"
            if log.exists():
                print(log.read_text(errors="replace")[-4000:])
        try:
            p.close()
        finally:  # even when an endmqm hangs: no instance outlives the test
            for pid in p._controller_pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def _third_host(p: LocalPair, name: str = "hostc") -> Host:
    """A host with the queue manager defined and no instance (where the exporter runs)."""
    host = Host(name, os.path.join(p.base, name))
    os.makedirs(host.root, exist_ok=True)
    line = p.run(p.a, "dspmqinf", "-o", "command", p.qmgr).stdout.split()
    p.run(host, *line)
    return host


def _pair_with_metrics(p: LocalPair) -> tuple[dict[str, int], Host]:
    """Both instances started (A active, B standby) with a metrics port each, and a
    third host for the exporter: ``({host: metrics port}, the third host)``."""
    ports = {"hosta": free_port(), "hostb": free_port()}
    p.a.extra["MIQM_METRICS_PORT"] = str(ports["hosta"])
    p.b.extra["MIQM_METRICS_PORT"] = str(ports["hostb"])
    assert "started using" in p.start(p.a)
    assert "standby instance" in p.start(p.b)
    return ports, _third_host(p)


def _start_exporter(p: LocalPair, host: Host, port: int) -> subprocess.Popen[Any]:
    """``miqm exporter`` of the pair's queue manager on ``host``, serving ``port``."""
    return subprocess.Popen(["miqm", "exporter", "-m", p.qmgr, "--port", str(port)],
                            env=host.env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def _start_prometheus(config: Path, tmp_path: Path, port: int) -> subprocess.Popen[Any]:
    """A Prometheus server on ``config``, its data under ``tmp_path``, on ``port``."""
    return subprocess.Popen(
        [str(PROMETHEUS), f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)


def _stop(proc: subprocess.Popen[Any] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def _write_qm_ini_metrics(p: LocalPair, values: dict[str, str]) -> None:
    path = Path(p.data_dir()) / "qm.ini"
    text = path.read_text() + "Metrics:\n" + "".join(
        f"   {k}={v}\n" for k, v in values.items())
    path.write_text(text)


# ---------------------------------------------------------------- real Prometheus
def _prom_config(tmp: Path, targets: dict[str, list[int]], rules: Path) -> Path:
    cfg = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s",
                   "scrape_timeout": "900ms"},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {"job_name": job, "honor_labels": True,
             "static_configs": [{"targets": [f"127.0.0.1:{p}" for p in ports]}]}
            for job, ports in targets.items()],
    }
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _short_rules(tmp: Path) -> Path:
    """The shipped rules with every ``for:`` cut to 2 s (the expressions unchanged)."""
    doc = yaml.safe_load(RULES.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "2s"
    path = tmp / "miqm-rules.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _api(port: int, path: str, **params: str) -> Any:
    url = f"http://127.0.0.1:{port}/api/v1/{path}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)["data"]


def _firing(port: int, name: str) -> list[dict[str, str]]:
    return [a["labels"] for a in _api(port, "alerts")["alerts"]
            if a["labels"].get("alertname") == name and a["state"] == "firing"]


@pytest.mark.skipif(PROMETHEUS is None, reason="the prometheus server is not installed "
                                               "(Debian package prometheus)")
def test_prometheus_fires_failover_then_no_standby_after_kill_9(
        pair: LocalPair, tmp_path: Path) -> None:
    ports = {"hosta": free_port(), "hostb": free_port()}
    pair.a.extra["MIQM_METRICS_PORT"] = str(ports["hosta"])  # the environment on A,
    assert "started using" in pair.start(pair.a)
    assert "standby instance" in pair.run(  # strmqm's option on B
        pair.b, "strmqm", "-x", "--metrics-port", str(ports["hostb"]), pair.qmgr).stdout
    hostc = _third_host(pair)
    ex_port, prom_port = free_port(), free_port()
    exporter = prom = None
    try:
        exporter = subprocess.Popen(
            ["miqm", "exporter", "-m", pair.qmgr, "--port", str(ex_port)], env=hostc.env(),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        # every endpoint answers, and promtool accepts what it serves
        for port in (ports["hosta"], ports["hostb"], ex_port):
            _took, body = _wait(f"/metrics on {port}", lambda port=port: _scrape(port))
            _promtool_check(body)
        config = _prom_config(tmp_path, {"miqm": [ports["hosta"], ports["hostb"]],
                                         "miqm-exporter": [ex_port]}, _short_rules(tmp_path))
        prom = subprocess.Popen(
            [str(PROMETHEUS), f"--config.file={config}",
             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
        _wait("every target up", lambda: len([r for r in _api(prom_port, "query", query="up")
                                             ["result"] if r["value"][1] == "1"]) == 3,
              timeout=90)
        _wait("the pair seen by the rules", lambda: _api(
            prom_port, "query", query='miqm_standby_present{instance="hosta"} == 1')["result"])
        time.sleep(3)  # a few evaluations with both instances up
        assert _firing(prom_port, "MiqmFailover") == []
        assert _firing(prom_port, "MiqmNoStandby") == []
        assert _firing(prom_port, "MiqmSplitBrain") == []

        killed = pair.kill_active()
        assert killed["host"] == "hosta"
        failover = _wait("MiqmFailover firing", lambda: _firing(prom_port, "MiqmFailover"),
                         timeout=90)
        assert failover[0]["instance"] == "hostb" and failover[0]["qmgr"] == pair.qmgr
        nostandby = _wait("MiqmNoStandby firing", lambda: _firing(prom_port, "MiqmNoStandby"),
                          timeout=90)
        assert nostandby[0]["qmgr"] == pair.qmgr
        assert _firing(prom_port, "MiqmSplitBrain") == []
        assert _firing(prom_port, "MiqmNoActiveInstance") == []
    finally:
        _stop(prom)
        _stop(exporter)


# ---------------------------------------------------------------- hung filesystem
def test_metrics_answer_while_the_shared_files_hang(pair: LocalPair) -> None:
    """The active's metrics read the standby lock file through a volume of their own: a
    stalled open of it (MIQM_FAULTS; the instance itself never opens that file once
    active) leaves the scrape answering, with no value yet and the read in flight. The
    exporter, its open of ``master`` stalled, says Status not available at once."""
    port = free_port()
    pair.a.extra["MIQM_METRICS_PORT"] = str(port)
    pair.a.extra["MIQM_FAULTS"] = json.dumps([{"volume": "data", "op": "open",
                                               "path": "standby", "kind": "stall",
                                               "seconds": 60}])
    assert "started using" in pair.start(pair.a)
    del pair.a.extra["MIQM_FAULTS"]  # the instance has it; later commands (endmqm) not
    hostc = _third_host(pair)
    ex_port = free_port()
    env = hostc.env()
    env["MIQM_FAULTS"] = json.dumps([{"volume": "data", "op": "open", "path": "master",
                                      "kind": "stall", "seconds": 60}])
    exporter = subprocess.Popen(["miqm", "exporter", "-m", pair.qmgr, "--port", str(ex_port)],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        took = []
        for _ in range(4):
            dt, body = _scrape(port)
            took.append(dt)
            time.sleep(0.5)
        assert max(took) < 2.0, f"scrapes took {took}"  # deadline 0.05 s; the fault: 60 s
        assert list(_samples(body, "miqm_filesystem_probe_in_flight").values()) == [1.0]
        assert list(_samples(body, "miqm_filesystem_probe_age_seconds").values()) == [-1.0]
        roles = [k for k, v in _samples(body, "miqm_instance_role").items() if v == 1.0]
        assert len(roles) == 1 and 'role="active"' in roles[0]
        _promtool_check(body)

        _wait("the exporter", lambda: _scrape(ex_port))
        dt, body = _scrape(ex_port)
        assert dt < 2.0, f"a scrape took {dt:.2f}s"  # deadline 0.08 s; the fault: 60 s
        status = {k: v for k, v in _samples(body, "miqm_qmgr_status").items() if v == 1.0}
        assert list(status) == ['{instance="hostc",qmgr="QMMET",status="Status not available"}']
        assert _samples(body, "miqm_qmgr_status_available") == {
            '{instance="hostc",qmgr="QMMET"}': 0.0}
        _promtool_check(body)
    finally:
        _stop(exporter)


def test_refused_clients_are_counted_in_the_metrics(pair: LocalPair) -> None:
    """A wrong credential, a principal without the authority it asks for and a malformed
    frame each show in the active's metrics (what MiqmAuthenticationFailures and an
    operator's dashboards read), beside the listener's other reasons at 0."""
    from miqm.net import protocol

    port = free_port()
    pair.a.extra["MIQM_METRICS_PORT"] = str(port)
    assert "started using" in pair.start(pair.a)
    app = pair.run(pair.a, "miqm", "credential", "-m", pair.qmgr, "--add", "APP1"
                   ).stdout.strip().splitlines()[-1]
    pair.run(pair.a, "setmqaut", "-m", pair.qmgr, "-t", "qmgr", "-p", "APP1", "+connect")
    with open(os.path.join(pair.data_dir(), "listener"), encoding="utf-8") as f:
        rec = json.load(f)
    address = (rec["host"], int(rec["port"]))

    def hello(credential: str) -> tuple[socket.socket, dict[str, Any]]:
        s = socket.create_connection(address, timeout=20)
        protocol.write_frame(s, {"id": 1, "op": "hello", "v": 2, "qmgr": pair.qmgr,
                                 "credential": credential})
        return s, protocol.read_frame(s)

    s, reply = hello("APP1:" + "x" * 20)  # a wrong secret
    s.close()
    assert reply.get("mqrc") == protocol.MQRC_NOT_AUTHORIZED, reply
    s, reply = hello(app)
    with s:
        assert reply["ok"], reply
        protocol.write_frame(s, {"id": 2, "op": "instance"})  # needs DSP, which APP1 lacks
        assert protocol.read_frame(s).get("mqrc") == protocol.MQRC_NOT_AUTHORIZED
    with socket.create_connection(address, timeout=20) as s:
        s.sendall(struct.pack(">II", 12, 99) + b"garbage!")  # a header longer than its frame
        s.recv(65536)

    def counted() -> str | None:
        _dt, body = _scrape(port)
        ok = (_samples(body, "miqm_authentication_failures_total")
              == {'{instance="hosta",qmgr="QMMET"}': 1.0}
              and _samples(body, "miqm_authorization_refusals_total")
              == {'{instance="hosta",qmgr="QMMET"}': 1.0}
              and _samples(body, "miqm_listener_refused_connections_total").get(
                  '{instance="hosta",qmgr="QMMET",reason="malformed"}') == 1.0)
        return body if ok else None

    body = _wait("the refusals in the metrics", counted, timeout=20)
    refused = _samples(body, "miqm_listener_refused_connections_total")
    assert refused['{instance="hosta",qmgr="QMMET",reason="max_connections"}'] == 0.0
    _promtool_check(body)


# ---------------------------------------------------------------- bad ports
def test_bad_metrics_ports_are_one_line_naming_qm_ini_and_the_key(pair: LocalPair) -> None:
    _write_qm_ini_metrics(pair, {"Port": "abc"})
    proc = pair.run(pair.a, "strmqm", "-x", pair.qmgr, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Traceback" not in out
    assert "qm.ini: Metrics: Port='abc' is not a port number" in out
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr

    pair.a.extra["MIQM_METRICS_PORT"] = "70000"
    proc = pair.run(pair.a, "strmqm", "-x", pair.qmgr, check=False)
    assert proc.returncode != 0
    assert "MIQM_METRICS_PORT" in proc.stderr and "70000" in proc.stderr

    with socket.socket() as busy:  # a port in use: refused, then started without metrics
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        pair.a.extra["MIQM_METRICS_PORT"] = str(busy.getsockname()[1])
        proc = pair.run(pair.a, "strmqm", "-x", pair.qmgr, check=False)
        assert proc.returncode != 0 and "is in use" in proc.stderr
        assert "MIQM_METRICS_PORT" in proc.stderr
        assert pair.status().get("status") != "Running"
        _write_qm_ini_metrics(pair, {"Required": "No"})  # later stanza values win
        proc = pair.run(pair.a, "strmqm", "-x", pair.qmgr, check=False)
        assert proc.returncode == 0, proc.stderr
        log = (Path(pair.data_dir()) / "errors" / "AMQERR01.LOG").read_text()
        assert "Starting without a metrics endpoint" in log


def test_exporter_bad_input_is_one_line(tmp_path: Path) -> None:
    env = dict(os.environ, MIQM_DATA_ROOT=str(tmp_path / "root"), MIQM_HOSTNAME="hostc")
    cases = ((["-m", "NOSUCH"], "AMQ7048"), (["-m", "QM1", "--port", "0"], "--port 0"),
             (["-m", "QM1", "--bind", "nowhere"], "--bind 'nowhere'"))
    for args, words in cases:
        proc = subprocess.run(["miqm", "exporter", *args], env=env, capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode != 0, args
        assert words in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
