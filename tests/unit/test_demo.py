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


def test_the_pairs_commands_do_not_take_a_users_remote_settings(monkeypatch) -> None:
    """A user who exported a remote client's settings (README, "Applications on other
    hosts") or this host's listener address and metrics port for a real queue manager, then
    ran ``miqm demo``: the demo's loopback instances and local commands must not use them
    (runmqsc failed with 2035 on the credential, strmqm on the address or the port)."""
    from miqm.localpair import Host

    for name, value in (("MIQM_CREDENTIAL", "admin:wrong"), ("MIQM_TLS_CA", "/nonexistent"),
                        ("MIQM_TLS_CERT", "/c"), ("MIQM_TLS_KEY", "/k"),
                        ("MIQM_CONNECTION", "hosta(1414)"),
                        ("MIQM_LISTENER_HOST", "192.0.2.10"), ("MIQM_METRICS_PORT", "9464")):
        monkeypatch.setenv(name, value)
    env = Host("hosta", "/r").env()
    assert env["MIQM_DATA_ROOT"] == "/r" and env["MIQM_HOSTNAME"] == "hosta"
    assert env["MIQM_LISTENER_PORT"] == "0"
    for name in ("MIQM_CREDENTIAL", "MIQM_TLS_CA", "MIQM_TLS_CERT", "MIQM_TLS_KEY",
                 "MIQM_CONNECTION", "MIQM_LISTENER_HOST", "MIQM_METRICS_PORT"):
        assert name not in env, name
    # a caller's own settings for one host still apply (tests, miqm bench metrics)
    assert Host("hosta", "/r", extra={"MIQM_METRICS_PORT": "1"}).env()[
        "MIQM_METRICS_PORT"] == "1"


def test_options_the_demo_cannot_run_with_are_refused() -> None:
    """nan passes every comparison: it ran the demo with no load (--seconds nan) or no
    rate at all (--rate nan) instead of being refused."""
    import math

    import pytest

    from miqm.demo import run_demo
    from miqm.errors import UsageError

    for kw, word in (({"seconds": math.nan}, "--seconds"), ({"seconds": 0.0}, "--seconds"),
                     ({"seconds": math.inf}, "--seconds"), ({"rate": math.nan}, "--rate"),
                     ({"rate": -1.0}, "--rate"), ({"messages": -1}, "--messages")):
        with pytest.raises(UsageError) as err:
            run_demo(echo=lambda _line: None, **kw)
        assert word in str(err.value) and err.value.exit_code == 2


def test_rate_zero_is_told_as_no_limit() -> None:
    """--rate 0 runs the producer as fast as it goes; the demo said 'up to 0/s'."""
    from miqm.demo import pace

    assert pace(0.0) == "as fast as it goes" and pace(200.0) == "up to 200/s"


def test_the_pair_finds_the_commands_beside_this_python_when_path_lacks_them(
        monkeypatch, tmp_path) -> None:
    """``python -m`` of a venv not activated, or ``pip install --user`` without
    ~/.local/bin on PATH: the demo failed with 'No such file or directory: endmqm' (its
    cleanup's error, hiding crtmqm's), exit 71, and left its directory behind."""
    import os
    import sysconfig

    import pytest

    from miqm import localpair
    from miqm.localpair import LocalPair, PairError, command_path

    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
    found = command_path("crtmqm")
    assert os.path.dirname(found) in (sysconfig.get_path("scripts"),
                                      sysconfig.get_path("scripts", f"{os.name}_user"))
    with pytest.raises(PairError, match="not on PATH"):
        command_path("no-such-miqm-command")
    # a command that cannot be run is one line, and the cleanup still removes everything
    monkeypatch.setattr(localpair, "command_path", lambda name: str(tmp_path / name))
    monkeypatch.setattr(localpair.tempfile, "tempdir", str(tmp_path))
    pair = LocalPair(qmgr="QMNONE")
    with pytest.raises(PairError, match=r"crtmqm .*could not be run"):
        pair.run(pair.a, "crtmqm", "QMNONE")
    pair.close()
    assert not os.path.exists(pair.base)


def test_miqm_demo_names_only_the_option_that_is_wrong() -> None:
    """``miqm demo`` checked the options with its own message, which named all three and
    said --seconds could be 0 (it cannot); it now says what run_demo's check says."""
    import subprocess

    for argv, word, others in ((["--seconds", "0"], "--seconds", ("--rate", "--messages")),
                               (["--rate", "-1"], "--rate", ("--seconds", "--messages"))):
        proc = subprocess.run(["miqm", "demo", *argv], capture_output=True, text=True,
                              timeout=60)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert word in lines[0] and not any(o in lines[0] for o in others), lines[0]
