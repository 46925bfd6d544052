"""``miqm bench failover``: repeated failovers between two local instances, timed from
the fault to the new active instance serving a client request."""

from __future__ import annotations

import os
import signal
import statistics
import time
from collections.abc import Callable
from typing import Any

from miqm.bench.clients import client_of, seconds_until_new_active
from miqm.localpair import LocalPair


def _wait_serving(pair: LocalPair, old_host: str, t0: float, timeout: float = 120.0) -> float:
    """Seconds from ``t0`` until a client (in this process, bindings mode as the other
    host) gets an answer from a new active instance: no subprocess start-up in the
    measurement, 2 ms between attempts."""
    other = pair.b if old_host == pair.a.name else pair.a
    with client_of(other.root, other.name):
        took = seconds_until_new_active(pair.qmgr, old_host, t0, timeout,
                                        connect_timeout=0.5, pause=0.002)
    if took is None:
        raise TimeoutError(f"no new active instance of {pair.qmgr} within {timeout:g}s")
    return took


def bench_failover(cycles: int, fault: str = "kill",
                   echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Run ``cycles`` failovers; returns durations (seconds) and their p50/max."""
    durations: list[float] = []
    lost = 0
    with LocalPair(qmgr="QMBENCH") as pair:
        pair.create()
        pair.start(pair.a)
        pair.start(pair.b)
        pair.mqsc(pair.a, "DEFINE QLOCAL(BENCH.Q)\n")
        for i in range(cycles):
            before = pair.active() or pair.wait_active()
            old = pair.host(before["host"])
            pair.put(old, "BENCH.Q", [f"cycle {i}"])
            pid = int(before["pid"])
            t0 = time.monotonic()
            if fault == "kill":
                os.kill(pid, signal.SIGKILL)
            elif fault == "pause":
                os.kill(pid, signal.SIGSTOP)
            else:
                pair.run(old, "endmqm", "-s", pair.qmgr)
            took = _wait_serving(pair, before["host"], t0)
            new = pair.wait_active(not_host=before["host"], timeout=120, poll=0.01)
            durations.append(took)
            got = pair.get_all(pair.host(new["host"]), "BENCH.Q")
            lost += 0 if got == [f"cycle {i}"] else 1
            echo(f"cycle {i + 1}/{cycles}: {fault} on {before['host']} -> {new['host']} "
                 f"serving after {took:.3f}s")
            if fault == "pause":
                try:
                    os.kill(pid, signal.SIGCONT)
                except (ProcessLookupError, ValueError, KeyError):
                    pass
                time.sleep(0.5)
            pair.start(old)  # the old host comes back as the standby
    ds = sorted(durations)
    result = {
        "fault": fault,
        "cycles": cycles,
        "failover_seconds": {
            "p50": round(statistics.median(ds), 3),
            "max": round(ds[-1], 3),
            "all": [round(d, 3) for d in durations],
        },
        "cycles_losing_messages": lost,
    }
    echo(f"failover ({fault}) p50 {result['failover_seconds']['p50']}s "
         f"max {result['failover_seconds']['max']}s over {cycles} cycles")
    return result
