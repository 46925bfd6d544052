"""Chaos: the active's data directory replaced under it by a copy (a backup restored in
its place, another export mounted there), on real processes.

Before: the copy's ``master`` and ``active`` were locked by nobody, so an instance
started then (``strmqm`` without -x, here 1.8 s after the swap) ran as a second active,
both Running on the same log directory, until the first one's next verify (up to
VerifyInterval). Now the active also holds a lock in its log directory, which the copy
does not replace: a start is refused (AMQ7279, one line) while the first one runs, and
succeeds once the first one has stopped itself. (A standby's takeover in the same case
is deferred the same way: tests/unit/test_chaos_log_active.py.)
"""

from __future__ import annotations

import os
import shutil
import time

import pytest

from miqm.localpair import LocalPair

pytestmark = pytest.mark.integration


def _actives_by_file(pair: LocalPair) -> list[str]:
    """The hosts whose live instance's run record says active (each writes its own)."""
    import json

    from miqm.ha import runfile

    found = []
    for host in (pair.a, pair.b):
        try:
            with open(runfile.path(pair.qmgr, host.root), encoding="utf-8") as f:
                rec = json.load(f)
        except (OSError, ValueError):
            continue
        if rec.get("mode") == "active" and runfile.alive(int(rec.get("pid", 0))):
            found.append(host.name)
    return found


def test_a_data_directory_replaced_under_the_active_never_makes_two_actives() -> None:
    pair = LocalPair(qmgr="QMREPL")
    pair.tuning["VerifyInterval"] = "8"  # a wide window: the swap is caught by its verify
    pair.tuning["MonitorStall"] = "3"
    try:
        pair.create()
        pair.start(pair.a)
        pair.start(pair.b)
        pair.mqsc(pair.a, "DEFINE QLOCAL(REPL.Q)\n")
        pair.put(pair.a, "REPL.Q", ["before"])
        pair.run(pair.b, "endmqm", "-x", pair.qmgr)
        data = pair.data_dir()
        shutil.copytree(data, data + ".new", symlinks=True)
        os.rename(data, data + ".old")
        os.rename(data + ".new", data)
        started = pair.run(pair.b, "strmqm", pair.qmgr, check=False, timeout=60)
        out = (started.stdout + started.stderr).strip()
        assert "Traceback" not in out
        if started.returncode != 0:  # hosta still ran: refused before writing anything
            assert "AMQ7279" in out and "log directory" in out and "hosta" in out, out
            # hosta stops itself at its next verify (its master is no longer the path's)
            seen: list[list[str]] = []
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                seen.append(_actives_by_file(pair))
                assert "hostb" not in seen[-1], seen
                if not seen[-1]:
                    break
                time.sleep(0.1)
            assert seen[-1] == [], seen[-5:]
            again = pair.run(pair.b, "strmqm", pair.qmgr, check=False, timeout=60)
            assert again.returncode == 0, again.stdout + again.stderr
        else:  # hosta had stopped already (its verify came first): one active only
            assert "hosta" not in _actives_by_file(pair)
        assert _actives_by_file(pair) == ["hostb"]
        pair.put(pair.b, "REPL.Q", ["after"])
        assert pair.get_all(pair.b, "REPL.Q") == ["before", "after"]
    finally:
        pair.close()


def test_master_removed_and_active_made_a_link_never_makes_two_actives() -> None:
    """``master`` removed and ``active`` replaced by a symbolic link to a fresh file: the
    data directory's ``active`` check looked through the link at a file nobody locks, and
    a start ran beside the first active; the log directory's lock refuses it."""
    pair = LocalPair(qmgr="QMLINK")
    pair.tuning["VerifyInterval"] = "8"
    pair.tuning["MonitorStall"] = "3"
    try:
        pair.create()
        pair.start(pair.a)
        data = pair.data_dir()
        os.unlink(os.path.join(data, "master"))
        os.unlink(os.path.join(data, "active"))
        with open(os.path.join(data, "elsewhere"), "wb"):
            pass
        os.symlink("elsewhere", os.path.join(data, "active"))
        started = pair.run(pair.b, "strmqm", pair.qmgr, check=False, timeout=60)
        out = (started.stdout + started.stderr).strip()
        assert "Traceback" not in out
        if started.returncode == 0:  # only if hosta had stopped at its verify first
            assert "hosta" not in _actives_by_file(pair), out
        else:
            assert "AMQ7279" in out and "hosta" in out, out
            assert _actives_by_file(pair) == ["hosta"], out
    finally:
        pair.close()
