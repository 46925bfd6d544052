"""dspmqaut and setmqaut against a listener: a queue that does not exist is MQ's AMQ7085
(exit 133, 'unknown object name'), while generic profiles, which are not objects, keep
working in setmqaut."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

from miqm import amq
from miqm.cli import authz as authz_cli
from miqm.cli import crtmqm, runmqsc
from tests.unit.test_cli_mqadmin import one_line, root, run, serve  # noqa: F401 - root: fixture
from tests.unit.test_net import FakeStore


class AuthStore(FakeStore):
    """FakeStore that keeps authority records as the real store does."""

    def __init__(self) -> None:
        super().__init__()
        self.authrec_serial = 0
        self.recs: dict[tuple[str, str, str], list[str]] = {}

    def authrecs(self) -> list[dict[str, Any]]:
        return [{"objtype": o, "profile": p, "principal": who, "auths": list(a)}
                for (o, p, who), a in self.recs.items()]

    def set_authrec(self, objtype: str, profile: str, principal: str,
                    auths: list[str] | None) -> None:
        if auths is None:
            self.recs.pop((objtype, profile, principal), None)
        else:
            self.recs[(objtype, profile, principal)] = list(auths)
        self.authrec_serial += 1


@pytest.fixture()
def qm1(root, capsys, monkeypatch) -> Iterator[AuthStore]:  # noqa: F811 - imported fixture
    """QM1 created here (its data directory holds the credentials file: admin only) and
    served by a listener on a stub store, reached through MIQM_CONNECTION."""
    monkeypatch.setenv("MIQM_HOSTNAME", "hosta")
    rc, _, err = run(crtmqm.main, ["crtmqm", "QM1"], capsys, monkeypatch)
    assert rc == 0, err
    yield from serve(AuthStore(), monkeypatch)


def _ends(main: Any) -> Any:
    """``main`` ending in sys.exit as a console script does (setmqaut and dspmqaut return
    normally when they succeed)."""
    def wrapped() -> None:
        main()
        sys.exit(0)
    return wrapped


def dspmqaut(argv: list[str], capsys, monkeypatch) -> tuple[int, str, str]:
    return run(_ends(authz_cli.dspmqaut_main), ["dspmqaut", "-m", "QM1", *argv], capsys,
               monkeypatch)


def setmqaut(argv: list[str], capsys, monkeypatch) -> tuple[int, str, str]:
    return run(_ends(authz_cli.setmqaut_main), ["setmqaut", "-m", "QM1", *argv], capsys,
               monkeypatch)


def test_dspmqaut_on_a_queue_that_does_not_exist_is_amq7085(
        qm1, capsys, monkeypatch) -> None:
    rc, _, err = run(runmqsc.main, ["runmqsc", "QM1"], capsys, monkeypatch,
                     stdin="DEFINE QLOCAL(Q1)\n")
    assert rc == 0, err
    assert amq.exit_code("AMQ7085") == 133  # MQ's 'unknown object name'
    rc, out, err = dspmqaut(["-t", "queue", "-n", "NOSUCH", "-p", "nobody"], capsys,
                            monkeypatch)
    assert (rc, out) == (133, "")
    assert one_line(err) == "AMQ7085: Object NOSUCH, type queue not found."
    rc, out, err = dspmqaut(["-t", "q", "-n", "q1", "-p", "nobody"], capsys, monkeypatch)
    assert rc == 133 and "Object q1, type queue" in one_line(err)  # names keep their case

    rc, out, err = dspmqaut(["-t", "queue", "-n", "Q1", "-p", "nobody"], capsys, monkeypatch)
    assert rc == 0 and out == "Entity nobody has the following authorizations for object Q1:\n"
    rc, out, err = dspmqaut(["-t", "qmgr", "-p", "nobody"], capsys, monkeypatch)
    assert rc == 0 and "object QM1:" in out, err


def test_generic_profiles_are_not_objects(qm1, capsys, monkeypatch) -> None:
    rc, out, err = setmqaut(["-t", "queue", "-n", "Q.**", "-p", "admin", "+put"], capsys,
                            monkeypatch)
    assert rc == 0 and out == "The setmqaut command completed successfully.\n", err
    assert qm1.recs == {("QUEUE", "Q.**", "admin"): ["PUT"]}
    rc, out, err = dspmqaut(["-t", "queue", "-n", "Q.**", "-p", "admin"], capsys,
                            monkeypatch)  # dspmqaut names one object, as before
    assert rc == 36 and "generic profile" in one_line(err)


def test_setmqaut_warns_of_a_principal_without_a_credential(
        qm1, root, capsys, monkeypatch) -> None:  # noqa: F811 - the imported fixture
    import os

    from miqm.cli import umbrella

    warning = ("AMQ1123: Principal 'app1' has no credential for queue manager 'QM1', so it "
               "cannot connect until it has one: run 'miqm credential -m QM1 --add app1' "
               "to give it a secret.")
    rc, out, err = setmqaut(["-t", "qmgr", "-p", "app1", "+connect"], capsys, monkeypatch)
    assert rc == 0 and out == "The setmqaut command completed successfully.\n"
    assert one_line(err) == warning
    assert qm1.recs == {("QMGR", "self", "app1"): ["CONNECT"]}  # kept all the same
    rc, out, err = setmqaut(["-t", "qmgr", "-p", "app1", "-remove"], capsys, monkeypatch)
    assert rc == 0 and err == ""  # removing a record needs no credential

    rc, out, err = setmqaut(["-t", "qmgr", "-p", "admin", "+connect"], capsys, monkeypatch)
    assert rc == 0 and err == ""
    rc, out, err = run(umbrella.main, ["miqm", "credential", "-m", "QM1", "--add", "app1"],
                       capsys, monkeypatch)
    assert rc == 0, err
    rc, out, err = setmqaut(["-t", "queue", "-n", "APP.**", "-p", "app1", "+put"], capsys,
                            monkeypatch)
    assert rc == 0 and err == ""
    # no credentials file at all: the listener accepts every client, nothing to warn of
    os.unlink(os.path.join(root, "qmgrs", "QM1", "credentials"))
    rc, out, err = setmqaut(["-t", "qmgr", "-p", "app2", "+connect"], capsys, monkeypatch)
    assert rc == 0 and err == ""
