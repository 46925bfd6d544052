"""Control commands exit with the code docs/messages.md gives the message they end on."""

from __future__ import annotations

from typing import Any

import pytest

from miqm import amq


class _Conn:
    def __init__(self, reply: dict[str, Any]) -> None:
        self.reply = reply

    def __enter__(self) -> _Conn:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def call(self, op: str, **kw: Any) -> dict[str, Any]:
        return self.reply


def test_setmqaut_remove_without_a_record_exits_with_amq1122s_code(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import miqm.net.client
    from miqm.cli.authz import setmqaut

    line = amq.line("AMQ1122", severity=True, profile="Q1", objtype="QUEUE", principal="bob")
    monkeypatch.setattr(miqm.net.client, "connect",
                        lambda qmgr, **kw: _Conn({"failed": True, "lines": [line]}))
    with pytest.raises(SystemExit) as exit_:
        setmqaut(["-m", "QM1", "-t", "queue", "-n", "Q1", "-p", "bob", "-remove"])
    assert exit_.value.code == amq.exit_code("AMQ1122") == 10
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "AMQ1122" in err[0]


def test_an_error_line_starting_with_a_number_exits_with_its_code() -> None:
    from miqm.cli.common import error_line
    from miqm.errors import NetError

    line, code = error_line(NetError("AMQ8146: miqm queue manager 'QM1' not available."))
    assert code == amq.exit_code("AMQ8146") == 40 and line.startswith("AMQ8146")
    assert error_line(NetError("the connection is closed"))[1] == 1  # no number: its own
    assert error_line(NetError("AMQ8146: x", amq="AMQ9204"))[1] == amq.exit_code("AMQ9204")


def test_amqldmpa_on_a_stopped_queue_manager_exits_40(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    import miqm.net.client
    from miqm.cli import amqldmpa
    from miqm.errors import NetError

    def stopped(qmgr: str, **kw: Any) -> None:
        raise NetError(f"AMQ8146: miqm queue manager '{qmgr}' not available. Start it.")

    monkeypatch.setattr(miqm.net.client, "connect", stopped)
    monkeypatch.setattr(sys, "argv", ["amqldmpa", "-m", "QM1"])
    with pytest.raises(SystemExit) as exit_:
        amqldmpa.main()
    assert exit_.value.code == 40
    assert capsys.readouterr().err.strip().startswith("AMQ8146")
