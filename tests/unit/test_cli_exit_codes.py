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
