"""The samples as a new user runs them: a failing commit in ``amqsget --syncpoint`` is
named MQCMIT (it said MQGET), with the reason, one line and exit 1. Against the real
store behind the real listener in this process (``served`` from test_client.py)."""

from __future__ import annotations

import importlib.util

import pytest

from miqm import client as mq
from tests.unit.test_client import put_committed, served  # noqa: F401  (served: fixture)

pytestmark = pytest.mark.skipif(importlib.util.find_spec("miqm.store.log") is None,
                                reason="needs the store's recovery log")


def test_amqsget_names_a_commit_that_failed_mqcmit(served, capsys, monkeypatch) -> None:  # noqa: F811
    from miqm.cli import samples
    from tests.unit.test_cli_mqadmin import run

    put_committed([b"one", b"two", b"three"])

    def refused(self: mq.QueueManager) -> None:
        raise mq.BackedOut("the unit of work was backed out (MQRC 2003 MQRC_BACKED_OUT)")

    commit = mq.QueueManager.commit
    monkeypatch.setattr(mq.QueueManager, "commit", refused)
    rc, out, err = run(samples.amqsget_main,
                       ["amqsget", "QMC", "Q1", "--wait", "0", "--syncpoint", "2"],
                       capsys, monkeypatch)
    assert rc == 1 and err.strip().splitlines() == [
        "MQCMIT ended with reason code 2003: the unit of work was backed out (MQRC 2003 "
        "MQRC_BACKED_OUT)"], err
    assert out.splitlines() == ["one", "two"]
    monkeypatch.setattr(mq.QueueManager, "commit", commit)
    with mq.connect("QMC") as qm:  # nothing was committed: all three are still there
        assert [m.body for m in qm.browse_all("Q1")] == [b"one", b"two", b"three"]


def test_amqsput_says_how_many_lines_were_put_before_a_failure(served, capsys,  # noqa: F811
                                                               monkeypatch) -> None:
    """A put refused half-way (the queue full) said only the reason: a user piping a
    file in could not tell where to go on from."""
    from miqm.cli import samples
    from tests.unit.test_cli_mqadmin import run

    served.store.define_queue("QFULL", MAXDEPTH=3)
    lines = "".join(f"line {i}\n" for i in range(6))
    rc, _out, err = run(samples.amqsput_main, ["amqsput", "QMC", "QFULL"], capsys,
                        monkeypatch, stdin=lines)
    assert rc == 1 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("MQPUT ended with reason code 2053") and "first 3 lines were put" in err
    rc, _out, err = run(samples.amqsput_main,
                        ["amqsput", "QMC", "Q1", "--syncpoint", "2"], capsys, monkeypatch,
                        stdin=lines.replace("line 3", "x" * 5_000_000))
    assert rc == 1 and "first 2 lines were put and committed" in err, err
    with mq.connect("QMC") as qm:
        assert [m.body for m in qm.browse_all("Q1")] == [b"line 0", b"line 1"]


def test_amqsput_reads_no_line_past_the_largest_message(served, capsys,  # noqa: F811
                                                        monkeypatch) -> None:
    """A stream without line ends (< /dev/zero) was read whole into memory before any
    refusal: a line is read only up to the largest message (made small here)."""
    from miqm.cli import samples
    from miqm.net import protocol
    from tests.unit.test_cli_mqadmin import run

    monkeypatch.setattr(protocol, "MAX_MESSAGE", 1000)
    stdin = "line 0\nline 1\n" + "z" * 50_000
    rc, _out, err = run(samples.amqsput_main, ["amqsput", "QMC", "Q1"], capsys, monkeypatch,
                        stdin=stdin)
    assert rc == 1 and len(err.strip().splitlines()) == 1, err
    assert "input line 3 is longer than the largest message (1000 bytes)" in err, err
    assert "2010" in err and "first 2 lines were put" in err, err
    with mq.connect("QMC") as qm:
        assert [m.body for m in qm.browse_all("Q1")] == [b"line 0", b"line 1"]
