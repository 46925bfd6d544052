"""Chaos: lock files removed by hand under a running pair (a 'stale lock' clean-up),
then an instance started on a third host, on real processes.

Before: the third host was granted a new ``master`` at once and ran as a second active
instance on the same log until the first one's next verify (up to VerifyInterval: here
5 s, two actives in dspmq for all of it). Now it finds ``active`` held by an instance
that never held its master and refuses before writing anything (AMQ7279, one line);
the first active stops at its next verify (its master file is no longer the path's),
and the standby takes over.
"""

from __future__ import annotations

import os
import time

import pytest

from miqm.localpair import Host, LocalPair

pytestmark = pytest.mark.integration


def _actives(pair: LocalPair, host: Host) -> list[str]:
    return [str(i.get("host")) for i in pair.status(host).get("instances", [])
            if str(i.get("mode", "")).lower() == "active"]


def test_an_instance_started_after_master_was_removed_never_runs_beside_the_active(
        ) -> None:
    pair = LocalPair(qmgr="QMTAMPER")
    pair.tuning["VerifyInterval"] = "5"
    third = Host("hostc", os.path.join(pair.base, "hostc"))
    try:
        pair.create()
        pair.start(pair.a)
        pair.start(pair.b)
        os.makedirs(third.root)
        pair.run(third, *pair.run(pair.a, "dspmqinf", "-o", "command",
                                  pair.qmgr).stdout.split())
        pair.mqsc(pair.a, "DEFINE QLOCAL(TAMPER.Q)\n")
        pair.put(pair.a, "TAMPER.Q", ["before"])
        assert _actives(pair, pair.a) == ["hosta"]
        os.unlink(os.path.join(pair.data_dir(), "master"))
        started = pair.run(third, "strmqm", pair.qmgr, check=False)
        out = (started.stdout + started.stderr).strip()
        assert started.returncode != 0, out
        assert "AMQ7279" in out and "active lock" in out and "hosta" in out, out
        assert "Traceback" not in out
        # until the first active has stopped and the standby has taken over: never the
        # third host, never two at once
        deadline = time.monotonic() + 60
        seen: list[list[str]] = []
        while time.monotonic() < deadline:
            now = _actives(pair, pair.b)
            seen.append(now)
            assert "hostc" not in now and len(now) <= 1, seen
            if now == ["hostb"]:
                break
            time.sleep(0.2)
        assert seen[-1] == ["hostb"], seen
        pair.put(pair.b, "TAMPER.Q", ["after"])
        assert pair.get_all(pair.b, "TAMPER.Q") == ["before", "after"]
    finally:
        pair.run(third, "endmqm", "-i", pair.qmgr, check=False, timeout=20)
        pair.close()
