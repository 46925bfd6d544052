"""An error whose line starts with an AMQ number exits with that number's code in the
message table (docs/messages.md), even when its class names another number by default:
``ConfigError("AMQ7026: ...")`` exits 1 (AMQ7026), not 71 (ConfigError's AMQ7880)."""

from __future__ import annotations

import pytest

from miqm import amq
from miqm.cli import umbrella
from miqm.errors import ConfigError, HAError, MiqmError, ObjectError
from tests.unit.test_cli_mqadmin import one_line, root, run  # noqa: F401 - root: fixture


@pytest.mark.parametrize(("err", "number", "code"), [
    (ConfigError("AMQ7026: a principal name was invalid."), "AMQ7026", 1),
    (ConfigError("AMQ7026E: a principal name was invalid."), "AMQ7026", 1),
    (ObjectError("AMQ7472: Object Q1, type queue damaged."), "AMQ7472", 10),
    (ConfigError("no number in the line"), "AMQ7880", 71),  # the class's number
    (ConfigError("AMQ9999: not in the table"), "AMQ7880", 71),  # likewise
    (HAError("AMQ7026: explicit wins", amq="AMQ7279"), "AMQ7279", 71),
    (ConfigError("AMQ7026: explicit code wins", exit_code=3), "AMQ7026", 3),
])
def test_the_leading_number_names_the_error(err: MiqmError, number: str, code: int) -> None:
    assert err.amq == number and err.exit_code == code
    text = str(err)
    assert err.user_line() == (text if text.startswith("AMQ") else f"{number}: {text}")


def test_miqm_credential_refusals_exit_with_amq7026s_code(
        root, capsys, monkeypatch) -> None:  # noqa: F811 - the imported fixture
    from miqm.cli import crtmqm

    monkeypatch.setenv("MIQM_HOSTNAME", "hosta")
    assert run(crtmqm.main, ["crtmqm", "QM1"], capsys, monkeypatch)[0] == 0
    code = amq.exit_code("AMQ7026")
    assert code == 1
    for argv in (["--add", "bad name!"], ["--remove", "admin"], ["--remove", "nosuch"]):
        rc, _, err = run(umbrella.main, ["miqm", "credential", "-m", "QM1", *argv],
                         capsys, monkeypatch)
        assert rc == code and one_line(err).startswith("AMQ7026: "), (argv, rc, err)
    rc, out, err = run(umbrella.main, ["miqm", "credential", "-m", "QM1", "--add", "app1"],
                       capsys, monkeypatch)
    assert rc == 0 and out.startswith("app1:"), err
    rc, _, err = run(umbrella.main, ["miqm", "credential", "-m", "QM1", "--add", "app1"],
                     capsys, monkeypatch)
    assert rc == code and "already exists" in one_line(err)
