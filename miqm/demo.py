"""``miqm demo``: a two-instance queue manager on this machine, with a failover to watch.

Creates QMDEMO with its data and log in a shared directory, starts an active instance
("hosta") and a standby ("hostb"), puts persistent messages, kills the active with
SIGKILL, shows the standby taking over, and checks every committed message survived.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from miqm.localpair import LocalPair


def run_demo(messages: int = 100, keep: bool = False, echo: Callable[[str], None] = print) -> int:
    """Run the demo; returns 0 if every committed message survived the failover."""
    with LocalPair(keep=keep) as pair:
        echo(f"== Shared data and log under {pair.shared}")
        pair.create()
        echo(f"== Created {pair.qmgr} on hosta; registered on hostb with addmqinf")
        for host in (pair.a, pair.b):
            echo(f"$ strmqm -x {pair.qmgr}    # on {host.name}")
            echo(pair.start(host).rstrip())
        echo(f"$ dspmq -x -o standby -m {pair.qmgr}")
        echo(pair.run(pair.a, "dspmq", "-x", "-o", "standby", "-m", pair.qmgr).stdout.rstrip())
        pair.mqsc(pair.a, "DEFINE QLOCAL(DEMO.Q) MAXDEPTH(100000)\n")
        lines = [f"message {i:05d}" for i in range(messages)]
        pair.put(pair.a, "DEMO.Q", lines)
        echo(f"== Put {messages} persistent messages on DEMO.Q")
        echo(f"$ dspmq -x -f -m {pair.qmgr}")
        echo(pair.run(pair.a, "dspmq", "-x", "-f", "-m", pair.qmgr).stdout.rstrip())

        victim = pair.kill_active()
        killed_at = time.monotonic()
        echo(f"== kill -9 {victim['pid']}  (the active instance on {victim['host']})")
        last = ""
        new = None
        while time.monotonic() - killed_at < 60:
            out = pair.run(pair.b, "dspmq", "-x", "-m", pair.qmgr, check=False).stdout.strip()
            if out != last:
                echo(f"  +{time.monotonic() - killed_at:5.2f}s  " + out.replace("\n", " | "))
                last = out
            inst = pair.active()
            if inst and inst.get("host") != victim["host"] and pair.serving(pair.b):
                new = inst
                break
            time.sleep(0.05)
        if new is None:
            echo("!! the standby did not take over within 60 s")
            return 1
        echo(f"== {new['host']} is active and serving {time.monotonic() - killed_at:.2f}s "
             "after the kill (including the dspmq/runmqsc polling)")
        got = pair.get_all(pair.b, "DEMO.Q")
        missing = sorted(set(lines) - set(got))
        dupes = len(got) - len(set(got))
        echo(f"== Got {len(got)} messages back after the failover; missing {len(missing)}, "
             f"duplicated {dupes}")
        echo(f"$ strmqm -x {pair.qmgr}    # restart hosta: it becomes the standby")
        echo(pair.start(pair.a).rstrip())
        echo(pair.run(pair.a, "dspmq", "-x", "-m", pair.qmgr).stdout.rstrip())
        ok = not missing and not dupes and len(got) == len(lines)
        echo("== PASS: every committed message survived the failover" if ok else "== FAIL")
        return 0 if ok else 1
