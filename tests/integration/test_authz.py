"""Authorization against real instances (two hosts on this machine, each listening on
its own loopback address): an application principal added while the queue manager
runs, every refusal path (connect, put, get, browse, inquire, MQSC by authority, the
control commands) answered 2035 / AMQ8135E with AMQ8077 in the error log, the MQ-shaped
output of DISPLAY AUTHREC and dspmqaut, and the records surviving a kill -9 failover."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from miqm.localpair import LocalPair
from tests.integration.test_multi_instance import _errlog, created_pair
from tests.ports import free_port

pytestmark = pytest.mark.integration

QM = "QMAUTH"
TUNING = {"StandbyPollInterval": "0.2", "VerifyInterval": "0.5", "MonitorStall": "2",
          "LivenessInterval": "5", "FilesystemLease": "90"}


@pytest.fixture()
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LocalPair]:
    yield from created_pair(request, tmp_path, TUNING, qmgr=QM)


class App:
    """Commands run as a remote application: another 'host' with no data directory,
    reaching both instances through a CONNAME list with its own credential."""

    def __init__(self, pair: LocalPair, conname: str, credential: str) -> None:
        self.env = dict(os.environ, MIQM_CONNECTION=conname, MIQM_CREDENTIAL=credential,
                        MIQM_DATA_ROOT=os.path.join(pair.base, "app"))
        self.env.pop("MIQM_LISTENER_PORT", None)

    def run(self, *argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), env=self.env, input=stdin, capture_output=True,
                              text=True, timeout=120)

    def reasons(self, body: str) -> list[str]:
        """Run client calls (one per line of ``body``, ``qm`` connected); each prints ok
        or its MQRC."""
        script = ["from miqm.client import connect, MQError",
                  "try:",
                  f"    qm = connect('{QM}', reconnect_timeout=30)",
                  "except MQError as e:",
                  "    print(e.reason); raise SystemExit(0)"]
        for call in body.strip().splitlines():
            script += ["try:", f"    {call.strip()}", "    print('ok')",
                       "except MQError as e:", "    print(e.reason)"]
        proc = self.run("python", "-c", "\n".join(script))
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.split()


def test_authority_records_are_enforced_and_survive_a_failover(pair: LocalPair) -> None:
    port = free_port("127.0.0.2")
    with open(os.path.join(pair.data_dir(), "qm.ini"), "a", encoding="utf-8") as fh:
        fh.write(f"Listener:\n   Port={port}\n")
    for host, addr in ((pair.a, "127.0.0.1"), (pair.b, "127.0.0.2")):
        host.extra = {"MIQM_LISTENER_HOST": addr, "MIQM_LISTENER_PORT": ""}
    assert "started using" in pair.start(pair.a)
    assert "standby instance" in pair.start(pair.b)
    pair.mqsc(pair.a, "DEFINE QLOCAL(APP.IN)\nDEFINE QLOCAL(APP.OUT)\nDEFINE QLOCAL(PAY.Q)\n")
    # an application principal, added while the instances run (the listener notices)
    cred = pair.run(pair.a, "miqm", "credential", "-m", QM, "--add", "app1").stdout.strip()
    assert cred.startswith("app1:")
    app = App(pair, f"127.0.0.1({port}),127.0.0.2({port})", cred)

    # no record yet: the connection itself is refused, and the error log says why
    assert app.reasons("qm.put('APP.IN', b'x')") == ["2035"]
    assert re.search(r"AMQ8077.*Entity 'app1' .*object 'QMAUTH'.*unauthorized: connect",
                     _errlog(pair))

    # records through the control commands (as the administrator on hosta) and MQSC
    assert pair.run(pair.a, "setmqaut", "-m", QM, "-t", "qmgr", "-p", "app1",
                    "+connect").stdout == "The setmqaut command completed successfully.\n"
    pair.run(pair.a, "setmqaut", "-m", QM, "-t", "queue", "-n", "APP.**", "-p", "app1",
             "+put", "+get", "+browse", "+inq", "+dsp")
    out = pair.mqsc(pair.a, "SET AUTHREC PROFILE(APP.OUT) OBJTYPE(QUEUE) "
                    "PRINCIPAL('app1') AUTHADD(BROWSE)\n")
    assert "AMQ8862I" in out
    shown = pair.mqsc(pair.a, "DISPLAY AUTHREC PRINCIPAL('app1') OBJTYPE(QUEUE)\n")
    blocks = re.findall(r"PROFILE\((\S+)\)\s+ENTITY\((\S+)\)\s+ENTTYPE\((\S+)\)\s+"
                        r"OBJTYPE\((\S+)\)\s+AUTHLIST\((\S+)\)", shown)
    assert blocks == [("APP.**", "app1", "PRINCIPAL", "QUEUE", "BROWSE,DSP,GET,INQ,PUT"),
                      ("APP.OUT", "app1", "PRINCIPAL", "QUEUE", "BROWSE")]
    dsp = pair.run(pair.a, "dspmqaut", "-m", QM, "-t", "queue", "-n", "APP.OUT",
                   "-p", "app1").stdout
    assert dsp == "Entity app1 has the following authorizations for object APP.OUT:\n\tbrowse\n"

    # every refusal path of the application, and what it may do
    assert app.reasons("""
        qm.put('APP.IN', b'one', persistent=True)
        print(qm.get('APP.IN', wait=1).body.decode())
        qm.put('APP.OUT', b'x')
        qm.put('PAY.Q', b'x')
        qm.get('PAY.Q')
        qm.browse('PAY.Q')
        qm.inquire('PAY.Q')
        qm.inquire('APP.IN')
        next(iter(qm.consume('PAY.Q')))
        qm.browse('APP.OUT')
    """) == ["ok", "one", "ok", "2035", "2035", "2035", "2035", "2035", "ok", "2035", "2033"]
    log = _errlog(pair)
    for what in ("put", "get", "browse", "inq"):
        assert re.search(rf"Entity 'app1' .*object 'PAY.Q'.*unauthorized: {what}\.", log), what
    # MQSC from the application: refused by authority (AMQ8135E, runmqsc exit 10); a
    # generic display shows only what it may display
    proc = app.run("runmqsc", QM, stdin="DEFINE QLOCAL(APP.NEW)\nDISPLAY QLOCAL(*)\n"
                   "SET AUTHREC PROFILE(**) OBJTYPE(QUEUE) PRINCIPAL('app1') AUTHADD(ALL)\n")
    assert proc.returncode == 10
    assert proc.stdout.count("AMQ8135E: Not authorized.") == 2
    assert "QUEUE(APP.IN)" in proc.stdout and "PAY.Q" not in proc.stdout
    refused = app.run("setmqaut", "-m", QM, "-t", "queue", "-n", "PAY.Q", "-p", "app1", "+get")
    assert refused.returncode == 71 and refused.stderr.startswith("AMQ7077")

    # a reply queue made from a model the records name: its creator may use it, whatever
    # name the queue manager gave it (MQ gives a dynamic queue's creator authority)
    pair.mqsc(pair.a, "DEFINE QMODEL(RPL.MODEL)\n")
    pair.run(pair.a, "setmqaut", "-m", QM, "-t", "queue", "-n", "RPL.MODEL", "-p", "app1",
             "+get", "+put", "+inq")
    assert app.reasons("""
        name = qm.open('RPL.MODEL', 'INPUT', dynamic='RPL.*')
        qm.put(name, b'reply', persistent=False)
        print(qm.get(name, wait=1).body.decode())
        qm.put('RPL.OTHER', b'x')
    """) == ["ok", "ok", "reply", "ok", "2035"]

    # kill -9 of the active: the standby on hostb serves with the same records
    victim = pair.kill_active()
    assert victim["host"] == "hosta"
    pair.wait_active(not_host="hosta", timeout=30)
    assert app.reasons("""
        qm.put('APP.IN', b'after', persistent=True)
        qm.put('PAY.Q', b'x')
        print(qm.host)
    """) == ["ok", "2035", "hostb", "ok"]
    assert "PROFILE(APP.**)" in pair.mqsc(pair.b, "DIS AUTHREC PROFILE(APP.IN)\n")

    # a removed principal is refused once the listener reads its credentials again
    pair.run(pair.b, "miqm", "credential", "-m", QM, "--remove", "app1")
    assert "AMQ8560I" in pair.mqsc(pair.b, "REFRESH SECURITY\n")
    assert app.reasons("qm.put('APP.IN', b'x')") == ["2035"]


def test_bench_net_authrecs_runs_both_sides_and_reports_the_ratio() -> None:
    from miqm.bench.net import bench_authz

    out = bench_authz(messages=40, authrecs=100, rounds=1, echo=lambda s: None)
    assert out["refused_elsewhere"] == 2035
    for name in ("put_commit_8", "put_np_1"):
        assert len(out[f"{name}_off"]) == len(out[f"{name}_on"]) == 1
        assert out[f"ratio_{name}"] > 0


def test_bench_net_reports_rates_and_the_cpu_per_message_of_both_sides() -> None:
    from miqm.bench.net import bench_net

    out = bench_net(messages=150, echo=lambda s: None)
    for key in ("inprocess_8", "put_commit_1", "put_commit_8", "batch_100", "consume"):
        assert out[key] > 0, key
    cpu = out["put_commit_8_cpu"]
    # both sides did work for every message: more than a microsecond each, not zero
    assert cpu["server_us_per_msg"] > 1 and cpu["clients_us_per_msg"] > 1
    assert 0 < out["ratio_to_inprocess"]
    # and how fast the machine was, before and after, to read the absolute rates by
    machine = out["machine"]
    assert sorted(machine) == ["python_loop_ms_after", "python_loop_ms_before",
                               "raw_fdatasync_per_s_after", "raw_fdatasync_per_s_before"]
    assert all(v > 0 for v in machine.values()), machine


def test_bench_net_rounds_alternate_the_in_process_store_and_eight_connections() -> None:
    from miqm.bench.net import bench_net

    out = bench_net(messages=100, echo=lambda s: None, rounds=2)
    inproc, nets = out["inprocess_8_runs"], out["put_commit_8_runs"]
    assert len(inproc) == 3 and len(nets) == 2 and all(x > 0 for x in inproc + nets)
    beside = (inproc[0] + inproc[1]) / 2 + (inproc[1] + inproc[2]) / 2
    assert abs(out["ratio_to_inprocess"] - sum(nets) / beside) < 0.002
    each = [round(n / ((a + b) / 2), 3)
            for n, a, b in zip(nets, inproc, inproc[1:], strict=False)]
    assert each == out["ratio_to_inprocess_runs"]
    assert out["consume"] > 0  # the other runs once, in the first round
