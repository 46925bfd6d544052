"""The demo's accounting (pure): nothing lost, every duplicate explained by an in-doubt
commit, or the demo fails."""

from __future__ import annotations

from miqm.demo import Side, _account


def sides(sent: list[int], got: list[int], prod_doubt: set[int] = frozenset(),
          cons_doubt: set[int] = frozenset()) -> tuple[Side, Side]:
    prod, cons = Side("producer"), Side("consumer")
    for i, s in enumerate(sent):
        prod.ok(s, float(i), "hosta")
    for i, s in enumerate(got):
        cons.ok(s, float(i), "hosta")
    prod.in_doubt |= set(prod_doubt)
    cons.in_doubt |= set(cons_doubt)
    return prod, cons


def account(prod: Side, cons: Side) -> tuple[int, str]:
    lines: list[str] = []
    rc = _account(lines.append, prod, cons, "hosta")
    return rc, "\n".join(lines)


def test_everything_received_once_passes() -> None:
    rc, out = account(*sides([0, 1, 2], [0, 1, 2]))
    assert rc == 0 and "lost 0, duplicates 0" in out and "PASS" in out


def test_a_lost_message_fails() -> None:
    rc, out = account(*sides([0, 1, 2], [0, 2]))
    assert rc == 1 and "lost 1" in out and "lost: [1]" in out and "FAIL" in out


def test_duplicates_pass_only_when_an_in_doubt_commit_explains_them() -> None:
    rc, out = account(*sides([0, 1, 2], [0, 1, 1, 2], prod_doubt={1}))
    assert rc == 0 and "duplicates 1" in out and "sent again after an in-doubt" in out
    rc, out = account(*sides([0, 1, 2], [0, 1, 1, 2], cons_doubt={1}))
    assert rc == 0 and "delivered again" in out
    rc, out = account(*sides([0, 1, 2], [0, 1, 1, 2]))
    assert rc == 1 and "UNEXPLAINED" in out


def test_the_longest_gap_between_commits_is_the_failover_seen() -> None:
    prod = Side("producer")
    for t in (0.0, 0.1, 0.2, 1.7, 1.8):
        prod.ok(int(t * 10), t, "h")
    assert abs(prod.gap - 1.5) < 1e-9 and prod.gap_end == 1.7
