"""Chaos on the NFSv4 lab (real nfs-ganesha, each instance in its own network namespace):
the campaign's lab faults whose outcome the instances decide, under committing producers
and consumers, audited message by message.

* ``pause-standby``: the standby stopped (SIGSTOP) for 1.5 leases while the active is
  killed, then resumed. It used to end with AMQ6119 (its kept-open ``master`` file's
  NFSv4 state had expired: LockLostError on its next attempt) and nobody took over;
  the campaign then found no new active at all.
* ``pause-lease``, ``partition-short``, ``partition-lease``, ``server-pause``: the active
  paused, cut off, or its server paused, for about the lease: either the same active
  carries on or it stops itself and the standby takes over, never both at once.
* ``partition-standby``, ``kill-both``, ``third``: the standby cut off while its active
  dies; both killed at once and started again in a random order; a third host's
  ``strmqm -x`` as the active dies (it may become the standby, never the active).
"""

from __future__ import annotations

import pytest

from miqm.bench.campaign import LAB_CHAOS_FAULTS, bench_campaign
from tests import lab

pytestmark = pytest.mark.integration

BAD = ("lost", "duplicated", "resurrected", "torn_units", "torn_gets", "phantoms",
       "two_owners", "violations", "stale_writes")


@pytest.mark.parametrize("faults", [
    ("pause-standby",),
    ("pause-lease", "partition-short", "server-pause"),
    ("partition-standby", "kill-both", "third", "partition-lease"),
])
def test_lab_chaos_faults_keep_both_promises(nfs_lab: lab.NfsLab,
                                             faults: tuple[str, ...]) -> None:
    assert set(faults) <= set(LAB_CHAOS_FAULTS)
    result = bench_campaign(len(faults), faults, producers=2, consumers=2, seed=11,
                            round_robin=True, lab=True, lab_dir=str(nfs_lab.dir),
                            echo=lambda _s: None)
    assert result["units"]["committed"] > 0
    assert {k: result[k] for k in BAD} == dict.fromkeys(BAD, 0), result
    assert result["internal_errors"] == [], result["internal_errors"]
