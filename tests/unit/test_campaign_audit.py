"""The fault campaign's audit: each kind of damage is counted (pure logic)."""

from __future__ import annotations

from miqm.bench.campaign import _audit, _Ledger


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
    assert audit == {"lost": 0, "duplicated": 0, "resurrected": 0, "torn_units": 0,
                     "phantoms": 0}


def test_every_kind_of_damage_is_counted() -> None:
    got = ["c1", "c3", "c3", "b2", "u1", "v1", "v2", "zz"]
    audit = _audit(_ledger(), got)
    assert audit == {"lost": 1,          # c2
                     "duplicated": 1,    # c3 twice
                     "resurrected": 1,   # b2 of a backed-out unit
                     "torn_units": 1,    # u1 without u2
                     "phantoms": 1}      # zz was never put


def test_the_ledger_counts_reason_codes() -> None:
    assert _ledger().errors == {2009: 1, 2549: 2}
