"""``miqm bench net``: the client path against the in-process store, side by side.

One run, one scratch queue manager (1 KiB persistent messages):

* ``inprocess_8`` (and ``inprocess_8_after``, measured again after the network runs):
  8 threads in this process calling the store directly, put+commit each (the reference
  the network path is compared with, as the mean of both);
* ``put_commit_8`` / ``put_commit_1``: 8 and 1 client processes over the listener
  (loopback), put under syncpoint + commit per message; ``put_commit_8_cpu``: the CPU
  microseconds per message the server process and the client processes spent in it
  (what caps the rate when nine processes share two CPUs). The 8-connection run comes
  first, on an empty queue, as the in-process runs it is compared with start;
* ``batch_100``: one client, 100 puts per commit;
* ``consume``: one streaming consumer (prefetch 200) of the persistent messages left by
  the runs above, outside syncpoint;
* ``machine``: how fast this machine was around the run, measured before and after it
  (``python_loop_ms``: the best of three pure-Python loops of 10**6 additions, the CPU
  the clients and the server share; ``raw_fdatasync_per_s``: 4 KiB write+fdatasync for
  half a second, beside the queue manager's files). The absolute rates follow both from
  hour to hour on a shared machine; the ratios measured in one run much less.

``--rounds R`` repeats the in-process store and the 8-connection run R times, alternating
(the other runs once): ``ratio_to_inprocess`` is then the sum of the 8-connection runs
over the sum of the in-process means beside each (``*_runs`` list every run). On two CPUs
shared with other work one pair moves by a fifth from run to run; more rounds give a
ratio that moves less.

The server is a separate process (store + listener, no HA), so clients and server do not
share an interpreter lock. A checkpoint is taken between the network runs, so that none
of them pays for the checkpoint of the messages the runs before it left. Prints absolute
rates and ``ratio_to_inprocess`` for the 8-connection path; the peer broker the issue
compares with is measured outside the project.

``--authrecs N`` (:func:`bench_authz`) measures instead the cost of authorization on the
hot path: a listener that requires credentials, N authority records (generic profiles,
one of which grants the application its puts), and the same runs side by side in one
run, alternating: ``off`` as the privileged ``admin`` principal (never checked: what
every client was before authority records) and ``on`` as an application principal
checked against the records on every request. Runs: 8 connections put+commit
(persistent) and 1 connection non-persistent puts outside syncpoint (the cheapest
request, where a check weighs most); ``ratio_*`` = on / off, summed over the rounds.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from miqm.errors import MiqmError

QMGR = "QMNETB"
QUEUE = "BENCH.Q"
BODY = b"x" * 1024


def _open_store(root: str) -> Any:
    from lockfs.posix import PosixVolume
    from miqm.config import parse_qm_ini
    from miqm.store.log import RecoveryLog
    from miqm.store.qmstore import QueueManagerStore

    data = PosixVolume(os.path.join(root, "qmgrs", QMGR))
    cfg = parse_qm_ini(data.read_bytes("qm.ini").decode())
    log = PosixVolume(cfg.log_path)
    # newer than the last activation, even one opened within the same second
    gen = max(int(time.time()), RecoveryLog.recorded_generation(log) + 1)
    return QueueManagerStore.open(data, log, QMGR, cfg.log, cfg.tuning, generation=gen)


def serve(root: str, authrecs: int = 0) -> None:
    """Child process: open the store, listen on a free loopback port, print it, and
    serve until stdin closes. With ``authrecs``, the listener requires the credentials
    in ``MIQM_BENCH_PRINCIPALS`` (JSON) and the store gets that many authority records."""
    from miqm.net.auth import Authenticator
    from miqm.net.server import Listener
    from miqm.net.service import QueueService

    store = _open_store(root)
    auth = None
    if authrecs:
        auth = Authenticator(json.loads(os.environ["MIQM_BENCH_PRINCIPALS"]))
        for objtype, profile, principal, auths in authority_records(authrecs):
            store.set_authrec(objtype, profile, principal, auths)
    listener = Listener(QueueService(store, QMGR).handle, authenticator=auth)
    host, port = listener.start()
    print(f"{host} {port}", flush=True)
    sys.stdin.read()
    listener.stop()
    store.close()


def _end_server(server: subprocess.Popen[str]) -> None:
    """Close the bench server's stdin (its signal to end) and wait for it (30 s at most)."""
    if server.stdin is not None:
        server.stdin.close()
    try:
        server.wait(30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def _create(root: str) -> None:
    """The bench queue manager created under ``root`` (MIQM_DATA_ROOT left as it was)."""
    saved = os.environ.get("MIQM_DATA_ROOT")
    os.environ["MIQM_DATA_ROOT"] = root
    try:
        from miqm.cli.crtmqm import _create as create

        create(QMGR, None, None, "CIRCULAR", 4096, 3, 2)
    finally:
        if saved is None:
            os.environ.pop("MIQM_DATA_ROOT", None)
        else:
            os.environ["MIQM_DATA_ROOT"] = saved


APP = "benchapp"


def authority_records(n: int) -> list[tuple[str, str, str, list[str]]]:
    """``n`` authority records (n >= 2): CONNECT for the application principal, one
    generic profile granting its puts and gets on the bench queue (``BENCH.**``), and
    generic profiles that do not apply: more specific ones of the same principal that
    a lookup tries first (``BENCH.Z<i>*``), and other principals' (``APP<i>.**``)."""
    recs: list[tuple[str, str, str, list[str]]] = [
        ("QMGR", "self", APP, ["CONNECT"]), ("QUEUE", "BENCH.**", APP, ["GET", "PUT"])]
    for i in range(max(0, n - 2)):
        if i % 2 == 0:
            recs.append(("QUEUE", f"BENCH.Z{i}*", APP, ["BROWSE"]))
        else:
            recs.append(("QUEUE", f"APP{i}.**", f"app{i}", ["GET", "PUT"]))
    return recs


def _producer(conname: str, n: int, per_commit: int, out: Any,
              credential: str | None = None) -> None:
    from miqm.client import connect

    with connect(QMGR, conname=conname, credential=credential, reconnect=False) as qm:
        out.put(("ready", 0.0))
        c0 = time.process_time()  # this process's CPU, to the nanosecond (os.times: ticks)
        t0 = time.perf_counter()
        if per_commit == 0:  # non-persistent, outside syncpoint
            for _ in range(n):
                qm.put(QUEUE, BODY, persistent=False, syncpoint=False)
        else:
            for i in range(n):
                qm.put(QUEUE, BODY, persistent=True, syncpoint=True)
                if (i + 1) % per_commit == 0:
                    qm.commit()
            qm.commit()
        elapsed = time.perf_counter() - t0
        out.put(("done", elapsed, time.process_time() - c0))


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process ``pid`` (all its threads) has used so far."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _run_clients(conname: str, clients: int, n: int, per_commit: int,
                 credential: str | None = None, server_pid: int | None = None,
                 cpu: dict[str, float] | None = None) -> float:
    """Messages per second for ``clients`` producer processes, ``n`` messages each
    (wall time from the first start to the last finish); ``per_commit`` 0: non-persistent
    puts outside syncpoint. With ``cpu`` (and ``server_pid``), fills in the CPU
    microseconds per message the clients and the server spent meanwhile."""
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_producer, args=(conname, n, per_commit, q, credential))
             for _ in range(clients)]
    for p in procs:
        p.start()
    early = [q.get(timeout=120) for _ in procs]  # a quick client may be done already
    server0 = _cpu_seconds(server_pid) if server_pid is not None else 0.0
    t0 = time.perf_counter()
    done = [d for d in early if d[0] == "done"]
    while len(done) < len(procs):
        d = q.get(timeout=600)
        if d[0] == "done":
            done.append(d)
    elapsed = time.perf_counter() - t0
    for p in procs:
        p.join(30)
    if cpu is not None:
        total = clients * n
        cpu["clients_us_per_msg"] = round(sum(d[2] for d in done) / total * 1e6, 1)
        if server_pid is not None:
            cpu["server_us_per_msg"] = round(
                (_cpu_seconds(server_pid) - server0) / total * 1e6, 1)
    return clients * n / elapsed


def _settle(conname: str) -> None:
    """A checkpoint between runs: each run starts with the messages of the runs before it
    in the queue file, not with a checkpoint of them still to take (a run of a few
    thousand messages lasts less than that checkpoint)."""
    from miqm.client import connect

    with connect(QMGR, conname=conname, reconnect=False) as qm:
        qm._call("checkpoint")


def _inprocess(store: Any, threads: int, n: int) -> float:
    def work() -> None:
        for _ in range(n):
            uow = store.begin()
            store.put(QUEUE, BODY, persistent=True, uow=uow)
            store.commit(uow)

    ts = [threading.Thread(target=work) for _ in range(threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return threads * n / (time.perf_counter() - t0)


def _consume(conname: str, total: int) -> float:
    from miqm.client import connect

    with connect(QMGR, conname=conname, reconnect=False) as qm:
        got = 0
        t0 = time.perf_counter()
        for _msg in qm.consume(QUEUE, prefetch=200, wait=2.0):
            got += 1
            if got >= total:
                break
        return got / (time.perf_counter() - t0)


def _start_server(root: str, *extra: str,
                  env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], str]:
    """The bench's server process on the queue manager under ``root`` (``extra``: more
    arguments of :func:`serve`; ``env``: its environment, else this one's with
    MIQM_DATA_ROOT), and its CONNAME."""
    server = subprocess.Popen([sys.executable, "-m", "miqm.bench.net", "--serve", root,
                               *extra], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=env or dict(os.environ, MIQM_DATA_ROOT=root))
    try:
        assert server.stdout is not None
        host, port = server.stdout.readline().split()
    except (ValueError, AssertionError):
        _end_server(server)
        raise MiqmError("the bench's server process did not start (its error is above); "
                        "try --dir on a local filesystem with free space") from None
    return server, f"{host}({port})"


def _empty_queue(store: Any) -> None:
    """The bench queue defined again, empty (each measured run starts alike)."""
    store.delete_queue(QUEUE, purge=True)
    store.define_queue(QUEUE, MAXDEPTH=10_000_000)


def python_loop_ms(n: int = 10**6, tries: int = 3) -> float:
    """The best of ``tries`` timings of a pure-Python loop of ``n`` additions, in ms:
    the interpreter's speed on this machine at this minute."""
    best = float("inf")
    for _ in range(tries):
        t0 = time.perf_counter()
        total = 0
        for i in range(n):
            total += i
        best = min(best, time.perf_counter() - t0)
    return round(best * 1000, 1)


def _machine_speed(directory: str) -> dict[str, float]:
    """The interpreter's loop time and the raw 4 KiB write+fdatasync rate in
    ``directory`` (on the queue manager's disk), for ``machine`` in the figures."""
    from miqm.bench.store import RawProbe

    probe = RawProbe(directory)
    try:
        probe.run(0.5)
        raw = probe.rate()
    finally:
        probe.close()
    return {"python_loop_ms": python_loop_ms(), "raw_fdatasync_per_s": round(raw, 1)}


def bench_net(messages: int = 2000, echo: Callable[[str], None] = print,
              directory: str | None = None, rounds: int = 1) -> dict[str, Any]:
    """Run the benchmark; returns the figures (see the module docstring). With
    ``rounds`` > 1 the in-process store and the 8-connection run alternate that many
    times (the other runs are made once, in the first round), and the ratio is the sum
    of the network runs over the sum of the in-process runs beside them."""
    inprocs: list[float] = []
    nets: list[float] = []
    results: dict[str, Any] = {}
    cpu: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="miqm-bench-net-", dir=directory) as root:
        echo("this machine's speed: a Python loop, raw write+fdatasync ...")
        speed = [_machine_speed(root)]
        _create(root)
        store = _open_store(root)
        store.define_queue(QUEUE, MAXDEPTH=10_000_000)
        for r in range(rounds):
            step = f"round {r + 1}/{rounds}: " if rounds > 1 else ""
            echo(f"{step}in-process store, 8 threads x {messages} put+commit ...")
            inprocs.append(_inprocess(store, 8, messages))
            _empty_queue(store)
            store.close()
            server, conname = _start_server(root)
            try:
                os.environ.pop("MIQM_CONNECTION", None)
                # first, on an empty queue, as the in-process runs beside it start
                echo(f"{step}8 connections, put+commit ...")
                nets.append(_run_clients(conname, 8, messages, 1, server_pid=server.pid,
                                         cpu=cpu if r == 0 else None))
                _settle(conname)
                if r == 0:
                    echo(f"{step}1 connection, put+commit ...")
                    results["put_commit_1"] = round(_run_clients(conname, 1, messages, 1), 1)
                    _settle(conname)
                    echo(f"{step}1 connection, 100 puts per commit ...")
                    results["batch_100"] = round(_run_clients(conname, 1, messages * 5, 100),
                                                 1)
                    _settle(conname)
                    total = messages * (1 + 8 + 5)
                    echo(f"{step}streaming consumer, {total} persistent messages outside "
                         "syncpoint ...")
                    results["consume"] = round(_consume(conname, total), 1)
            finally:
                _end_server(server)
            # the disk and CPUs are shared: the in-process store runs again after the
            # network runs, and each network run is compared with the two beside it
            store = _open_store(root)
            if r > 0:
                _empty_queue(store)  # what this round's 8 connections left
        echo(f"in-process store again, 8 threads x {messages} put+commit ...")
        inprocs.append(_inprocess(store, 8, messages))
        store.close()
        speed.append(_machine_speed(root))
    beside = sum((a + b) / 2 for a, b in itertools.pairwise(inprocs))
    results = {"inprocess_8": round(inprocs[0], 1), **results}
    results["put_commit_8"] = round(sum(nets) / len(nets), 1)
    results["put_commit_8_cpu"] = cpu
    results["inprocess_8_after"] = round(inprocs[-1], 1)
    results["ratio_to_inprocess"] = round(sum(nets) / beside, 3)
    if rounds > 1:
        results["rounds"] = rounds
        results["inprocess_8_runs"] = [round(x, 1) for x in inprocs]
        results["put_commit_8_runs"] = [round(x, 1) for x in nets]
        results["ratio_to_inprocess_runs"] = [
            round(n / ((a + b) / 2), 3)
            for n, (a, b) in zip(nets, itertools.pairwise(inprocs), strict=True)]
    results["machine"] = {f"{key}_{when}": m[key] for when, m in zip(("before", "after"),
                                                                       speed, strict=True)
                          for key in m}
    results["cpus"] = len(os.sched_getaffinity(0))
    results["load_avg_1m"] = round(os.getloadavg()[0], 2)
    for key in ("inprocess_8", "put_commit_1", "put_commit_8", "batch_100", "consume",
                "inprocess_8_after"):
        echo(f"  {key:<18} {results[key]:>10,.0f} msgs/s")
    if rounds > 1:
        echo(f"  8 connections by round: {', '.join(f'{x:,.0f}' for x in nets)} msgs/s; "
             f"in-process: {', '.join(f'{x:,.0f}' for x in inprocs)} msgs/s")
    echo(f"  8 connections / in-process store: {results['ratio_to_inprocess']:.0%}")
    echo(f"  8 connections, CPU per message: server {cpu.get('server_us_per_msg', 0):.0f} µs, "
         f"clients {cpu.get('clients_us_per_msg', 0):.0f} µs")
    echo("  this machine: a Python loop of 10**6 additions "
         f"{speed[0]['python_loop_ms']:.0f} ms before, {speed[-1]['python_loop_ms']:.0f} ms "
         f"after; raw write+fdatasync {speed[0]['raw_fdatasync_per_s']:,.0f}/s before, "
         f"{speed[-1]['raw_fdatasync_per_s']:,.0f}/s after")
    return results


def check_cost_us(authrecs: int, n: int = 200_000) -> dict[str, float]:
    """The server's per-request check in this process, in microseconds: an application
    principal's put against ``authrecs`` records (cached answer), the admin's (no
    check), and one lookup with the cache emptied first (what a change costs once)."""
    import timeit

    from miqm.net.authorize import Authorizer
    from miqm.net.server import Session

    class _Records:
        authrec_serial = 1

        def authrecs(self) -> list[dict[str, Any]]:
            return [{"objtype": t, "profile": p, "principal": u, "auths": a}
                    for t, p, u, a in authority_records(authrecs)]

    authorizer = Authorizer(_Records(), QMGR)
    app, admin = Session("bench"), Session("bench")
    app.principal, admin.principal = APP, "admin"
    req = {"op": "put", "queue": QUEUE}
    if authorizer.check("put", req, app) is not None:
        raise AssertionError("the bench records do not grant the bench queue")
    on = timeit.timeit(lambda: authorizer.check("put", req, app), number=n) / n
    off = timeit.timeit(lambda: authorizer.check("put", req, admin), number=n) / n
    table = authorizer.table

    def miss() -> None:
        table.refresh()
        table.lookup(APP, "QUEUE", QUEUE)

    cold = timeit.timeit(miss, number=n // 20) / (n // 20)
    return {"check_us_on": round(on * 1e6, 3), "check_us_off": round(off * 1e6, 3),
            "lookup_us_uncached": round(cold * 1e6, 2)}


def _enforced(conname: str, credential: str) -> int:
    """The reason a put of the application to a queue no record grants gets (2035, or
    the "on" runs would not measure a checked path): a BenchError otherwise."""
    from miqm.client import MQError, connect
    from miqm.errors import MiqmError

    with connect(QMGR, conname=conname, credential=credential, reconnect=False) as qm:
        try:
            qm.put("OTHER.Q", b"x", persistent=False)
        except MQError as exc:
            if exc.reason == 2035:
                return 2035
            raise MiqmError(f"the application's put to OTHER.Q got MQRC {exc.reason}, "
                            "not 2035: authorization is not in force") from None
    raise MiqmError("the application's put to OTHER.Q succeeded: authorization is not "
                    "in force")


def bench_authz(messages: int = 2000, authrecs: int = 100, rounds: int = 2,
                echo: Callable[[str], None] = print,
                directory: str | None = None) -> dict[str, Any]:
    """The cost of authorization (see the module docstring); returns the figures."""
    from miqm.net.auth import new_secret

    secrets = {"admin": new_secret(), APP: new_secret()}
    creds = {"off": f"admin:{secrets['admin']}", "on": f"{APP}:{secrets[APP]}"}
    runs = (("put_commit_8", 8, messages, 1), ("put_np_1", 1, messages * 5, 0))
    with tempfile.TemporaryDirectory(prefix="miqm-bench-authz-", dir=directory) as root:
        _create(root)
        store = _open_store(root)
        store.define_queue(QUEUE, MAXDEPTH=100_000_000)
        store.close()
        env = dict(os.environ, MIQM_DATA_ROOT=root,
                   MIQM_BENCH_PRINCIPALS=json.dumps(secrets))
        server, conname = _start_server(root, "--authrecs", str(authrecs), env=env)
        totals: dict[str, float] = {}
        results: dict[str, Any] = {"authrecs": authrecs, "rounds": rounds}
        try:
            os.environ.pop("MIQM_CONNECTION", None)
            results["refused_elsewhere"] = _enforced(conname, creds["on"])
            for r in range(rounds):
                for name, clients, n, per_commit in runs:
                    for mode in (("off", "on") if r % 2 == 0 else ("on", "off")):
                        echo(f"round {r + 1}: {name}, authorization {mode} ...")
                        rate = _run_clients(conname, clients, n, per_commit, creds[mode])
                        results.setdefault(f"{name}_{mode}", []).append(round(rate, 1))
                        totals[f"{name}_{mode}"] = totals.get(f"{name}_{mode}", 0.0) + rate
        finally:
            _end_server(server)
    for name, *_ in runs:
        results[f"ratio_{name}"] = round(totals[f"{name}_on"] / totals[f"{name}_off"], 3)
        pairs = sorted(on / off for on, off in zip(results[f"{name}_on"],
                                                    results[f"{name}_off"], strict=True))
        results[f"ratio_{name}_median"] = round(pairs[len(pairs) // 2], 3)
    results.update(check_cost_us(authrecs))
    results["cpus"] = len(os.sched_getaffinity(0))
    results["load_avg_1m"] = round(os.getloadavg()[0], 2)
    for name, *_ in runs:
        off = results[f"{name}_off"]
        on = results[f"{name}_on"]
        echo(f"  {name:<14} off {', '.join(f'{x:,.0f}' for x in off)}  on "
             f"{', '.join(f'{x:,.0f}' for x in on)} msgs/s  ratio "
             f"{results[f'ratio_{name}']:.3f} (median of rounds "
             f"{results[f'ratio_{name}_median']:.3f})")
    echo(f"  the check in process: {results['check_us_on']:.2f} us (application, "
         f"{authrecs} records) vs {results['check_us_off']:.2f} us (admin); uncached "
         f"lookup {results['lookup_us_uncached']:.1f} us")
    return results


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--serve" and sys.argv[3] == "--authrecs":
        serve(sys.argv[2], int(sys.argv[4]))
    elif len(sys.argv) == 3 and sys.argv[1] == "--serve":
        serve(sys.argv[2])
    else:
        print(json.dumps(bench_net()))
