"""``miqm bench failover --backlog ... --rounds R``: each case's runs from the rounds are
pooled into one row (pure logic here; the benchmark itself runs in
tests/integration/test_takeover_backlog.py)."""

from __future__ import annotations

from typing import Any

from miqm.bench.failover import merge_rounds, summarize_backlog


def _run(took: list[float], first: float | None, served: list[float],
         first_served: float | None, restart: float, rss: float | None,
         read_ahead: int) -> dict[str, Any]:
    return {"depth": 0, "queues": 5000, "takeover_seconds": sorted(took),
            "p50": sorted(took)[len(took) // 2], "first_takeover": first,
            "fill_seconds": 1.0, "restart_seconds": restart, "rss_mb_after": rss,
            "queue_dir_bytes": 10, "store_bytes": 20, "bytes_per_message": None,
            "lock_to_serving_seconds": sorted(served),
            "lock_to_serving_p50": sorted(served)[len(served) // 2],
            "read_ahead_takeovers": read_ahead, "first_lock_to_serving": first_served}


def test_one_round_is_its_own_row() -> None:
    one = _run([0.03, 0.02, 0.04], 0.05, [0.02, 0.01, 0.03], 0.04, 0.2, 30.0, 3)
    assert merge_rounds([one]) is one


def test_the_rounds_of_a_case_are_pooled() -> None:
    rounds = [_run([0.030, 0.020, 0.040], 0.050, [0.020, 0.010, 0.030], 0.040, 0.2, 30.0, 3),
              _run([0.100, 0.110, 0.090], 0.300, [0.080, 0.090, 0.070], 0.200, 0.4, 35.0, 2),
              _run([0.025, 0.035, 0.045], None, [0.015, 0.025, 0.035], None, 0.3, None, 3)]
    row = merge_rounds(rounds)
    assert row["takeover_seconds"] == sorted(
        [0.03, 0.02, 0.04, 0.1, 0.11, 0.09, 0.025, 0.035, 0.045])
    assert row["p50"] == 0.04  # the median of all nine, not a median of medians (0.035)
    assert row["first_takeovers"] == [0.05, 0.3] and row["first_takeover"] == 0.175
    assert row["lock_to_serving_p50"] == 0.03 and len(row["lock_to_serving_seconds"]) == 9
    assert row["first_lock_to_serving"] == 0.12
    assert row["first_lock_to_serving_all"] == [0.04, 0.2]
    assert row["restart_seconds"] == 0.3 and row["rss_mb_after"] == 35.0
    assert row["read_ahead_takeovers"] == 8 and row["rounds"] == 3
    assert rounds[0]["takeover_seconds"] == [0.02, 0.03, 0.04]  # the parts are not changed


def test_pooled_rows_give_the_ratios_to_the_first_case() -> None:
    one = merge_rounds([_run([0.02, 0.02], None, [0.01], None, 0.1, 30.0, 0),
                        _run([0.04, 0.04], None, [0.01], None, 0.1, 30.0, 0)])
    many = merge_rounds([_run([0.03, 0.03], 0.06, [0.01], 0.02, 0.1, 30.0, 2),
                         _run([0.03, 0.03], 0.03, [0.01], 0.02, 0.1, 30.0, 2)])
    one["queues"] = 1
    rows = summarize_backlog([one, many], lambda _line: None)
    assert rows[0]["ratio"] == 1.0 and rows[1]["ratio"] == 1.0  # 0.03 / 0.03
    assert rows[1]["first_ratio"] == 1.5  # median of 0.06 and 0.03 over 0.03
