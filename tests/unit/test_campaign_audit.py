"""The fault campaign's audit: each kind of damage is counted (pure logic)."""

from __future__ import annotations

from miqm.bench.campaign import _audit, _deposed_acks, _Ledger

CLEAN = {"lost": 0, "duplicated": 0, "resurrected": 0, "torn_units": 0, "torn_gets": 0,
         "phantoms": 0, "lost_in_flight": 0}


def _ledger() -> _Ledger:
    ledger = _Ledger()
    ledger.note("committed", ["c1", "c2"])
    ledger.note("committed", ["c3"])
    ledger.note("backed_out", ["b1", "b2"], 2009)
    ledger.note("unknown", ["u1", "u2"], 2549)
    ledger.note("unknown", ["v1", "v2"], 2549)
    return ledger


def test_a_clean_history_audits_clean() -> None:
    audit = _audit(_ledger(), ["c1", "c2", "c3", "u1", "u2"])  # one unknown unit kept whole
    assert audit == CLEAN


def test_every_kind_of_damage_is_counted() -> None:
    got = ["c1", "c3", "c3", "b2", "u1", "v1", "v2", "zz"]
    audit = _audit(_ledger(), got)
    assert audit == {**CLEAN,
                     "lost": 1,          # c2
                     "duplicated": 1,    # c3 twice
                     "resurrected": 1,   # b2 of a backed-out unit
                     "torn_units": 1,    # u1 without u2
                     "phantoms": 1}      # zz was never put


def test_the_ledger_counts_reason_codes() -> None:
    assert _ledger().errors == {2009: 1, 2549: 2}


def test_what_consumers_got_for_good_counts_as_found_once() -> None:
    ledger = _ledger()
    ledger.delivered += ["c1", "c2"]  # consumed during the faults
    assert _audit(ledger, ["c3"]) == CLEAN
    # consumed and then still on the queue: delivered twice
    assert _audit(ledger, ["c1", "c3"])["duplicated"] == 1


def test_a_unit_of_gets_with_an_unknown_commit_is_back_whole_or_not_at_all() -> None:
    ledger = _ledger()
    ledger.delivered_unknown.append(["c1", "c2"])
    assert _audit(ledger, ["c3"]) == CLEAN  # the commit went through
    assert _audit(ledger, ["c1", "c2", "c3"]) == CLEAN  # it did not: both back
    assert _audit(ledger, ["c1", "c3"])["torn_gets"] == 1


def test_a_get_outside_syncpoint_cut_off_in_flight_may_take_one_message() -> None:
    ledger = _ledger()
    ledger.gets_uncertain = 1
    assert _audit(ledger, ["c1", "c3"]) == {**CLEAN, "lost_in_flight": 1}
    assert _audit(ledger, ["c3"])["lost"] == 1  # two missing, one get cut off


def test_an_acknowledgement_from_a_deposed_owner_is_two_owners() -> None:
    timeline = [{"at_monotonic": 10.0, "took": 1.0, "new": "hostb"},
                {"at_monotonic": 20.0, "took": None, "new": "hostb"},
                {"at_monotonic": 30.0, "took": 2.0, "new": "hosta"}]
    ledger = _Ledger()
    ledger.acks = [(8.9, 9.0, "hosta"), (10.4, 10.5, "hosta"),  # before hostb served
                   (11.9, 12.0, "hostb"), (24.9, 25.0, "hostb"), (30.9, 31.0, "hostb"),
                   (32.9, 33.0, "hosta")]
    assert _deposed_acks(ledger, timeline) == (0, 0)
    # sent before hostb served, its answer read after: not proof either way
    ledger.acks.append((10.9, 11.5, "hosta"))
    assert _deposed_acks(ledger, timeline) == (0, 1)
    # sent after hostb served and answered by hosta, then hostb after hosta took over
    ledger.acks += [(14.0, 15.0, "hosta"), (39.0, 40.0, "hostb")]
    assert _deposed_acks(ledger, timeline) == (2, 1)


def test_internal_errors_are_found_in_output_and_error_logs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A fault handled badly (a traceback in a controller's output, AMQ6184 in an error
    log) is reported with the run, not lost in the kept tree."""
    from miqm.bench.campaign import _internal_errors

    (tmp_path / "hosta" / "run").mkdir(parents=True)
    (tmp_path / "hosta" / "run" / "QMCAMP.out").write_text("ok\nTraceback (most recent)\n")
    (tmp_path / "errors").mkdir()
    (tmp_path / "errors" / "AMQERR01.LOG").write_text("AMQ8003: started\nAMQ6184: boom\n")
    (tmp_path / "other.txt").write_text("Traceback\n")  # neither kind of file: not read
    found = _internal_errors([str(tmp_path)])
    assert len(found) == 2
    assert any("QMCAMP.out: Traceback" in f for f in found)
    assert any("AMQERR01.LOG: AMQ6184: boom" in f for f in found)


def test_every_local_extra_fault_is_one_the_local_cluster_injects() -> None:
    """The campaign's own fault names: each has its branch in the local cluster."""
    import inspect

    from miqm.bench.campaign import LOCAL_EXTRA_FAULTS, _LocalCluster

    source = inspect.getsource(_LocalCluster.inject)
    for fault in LOCAL_EXTRA_FAULTS:
        assert f'"{fault}"' in source, fault


def test_the_command_takes_the_chaos_faults_and_refuses_the_lab_only_ones_locally() -> None:
    """``miqm bench campaign --faults`` accepted only kill and switchover locally: the
    chaos faults ran only from Python. (``--cycles 0`` stops each run right after the
    faults were accepted.)"""
    import subprocess

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["miqm", "bench", "campaign",
                               *args], capture_output=True, text=True, timeout=60)

    taken = run("--faults", "kill-both,third,kill-takeover", "--cycles", "0")
    assert taken.returncode == 2 and "--cycles" in taken.stderr, taken.stderr
    refused = run("--faults", "partition-lease", "--cycles", "0")
    assert refused.returncode == 2 and "partition-lease cannot be injected" in refused.stderr
