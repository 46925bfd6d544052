"""Chaos: the fault campaign's local faults beyond a kill of the active, on real
processes (two instances of one queue manager on this machine, a third host started in
the middle), under committing producers and consumers, audited message by message:

* ``kill-both``: both instances killed at once (a power cut of both hosts), started
  again in a random order;
* ``kill-takeover``: the active killed, then the standby killed in its takeover's
  recovery (``qmstatus.ini`` then says Starting with PermitFailover=No), both started
  again in a random order;
* ``third``: ``strmqm -x`` on a third host as the active is killed: it may become the
  standby, never the active;
* ``pause-standby``: the standby stopped (SIGSTOP) while the active is killed, resumed;
* ``kill-checkpoint``, ``kill-extent``: the active killed while a checkpoint replaces
  ``amqalchk.fil`` or while the log control file names a new extent (an injected stall
  holds each there).

Each must end with nothing committed lost, nothing backed out resurrected, no unit torn,
no acknowledgement from a deposed owner and no internal error in any log.
"""

from __future__ import annotations

import pytest

from miqm.bench.campaign import LOCAL_EXTRA_FAULTS, bench_campaign

pytestmark = pytest.mark.integration

BAD = ("lost", "duplicated", "resurrected", "torn_units", "torn_gets", "phantoms",
       "two_owners", "violations", "stale_writes")


@pytest.mark.parametrize("faults", [
    ("kill-both", "kill-takeover", "third"),
    ("pause-standby", "kill-checkpoint", "kill-extent", "kill-switchover"),
])
def test_local_chaos_faults_keep_both_promises(faults: tuple[str, ...]) -> None:
    assert set(faults) <= set(LOCAL_EXTRA_FAULTS)
    result = bench_campaign(len(faults), faults, producers=2, consumers=2, seed=7,
                            round_robin=True, settle=0.5, echo=lambda _s: None)
    assert result["units"]["committed"] > 0
    assert {k: result[k] for k in BAD} == dict.fromkeys(BAD, 0), result
    assert result["internal_errors"] == [], result["internal_errors"]
    assert sum(result["faults"].values()) == len(faults)
