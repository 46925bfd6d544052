"""A refused profile, principal or authority name is shown in one line of bounded length
whatever it holds (setmqaut, dspmqaut, SET AUTHREC print the refusal)."""

from __future__ import annotations

import pytest

from miqm import authz
from miqm.text import one_line


@pytest.mark.parametrize(("check", "name"), [
    (authz.check_profile, "A\nAMQ8862I: miqm authority record set."),
    (authz.check_profile, "A\x01\x1b[31m"),
    (authz.check_principal, "APP1\r\nX"),
    (authz.check_principal, "P" * 10_000),
    (lambda n: authz.expand("QUEUE", [n]), "PUT\nALL"),
])
def test_a_refused_name_is_one_bounded_line(check, name: str) -> None:
    with pytest.raises(authz.AuthzError) as err:
        check(name)
    text = str(err.value)
    assert text.isprintable()
    assert len(text) < 200


def test_a_shown_name_keeps_printable_names_as_they_are() -> None:
    assert one_line("APP1.**", 64) == "APP1.**"
    assert one_line("A\nB", 64) == "A\\x0aB"
    assert one_line("x" * 70, 64) == "x" * 64 + "..."


def test_a_refused_requests_queue_name_cannot_forge_error_log_entries() -> None:
    """A put naming queue 'Q1\\n<date> - Process(1) ...\\nAMQ8004: ... ended.' by a
    principal without PUT wrote that forged entry into AMQERR01.LOG with the refusal."""
    from miqm.net.authorize import Authorizer

    class Store:
        authrec_serial = 1

        def authrecs(self) -> list[dict]:
            return [{"objtype": "QMGR", "profile": "self", "principal": "APP1",
                     "auths": ["CONNECT"]}]

    class Session:
        def __init__(self) -> None:
            self.principal = "APP1"
            self.state: dict = {}

    lines: list[str] = []
    authorizer = Authorizer(Store(), "QM1", lambda number, line: lines.append(line))
    name = "Q1\n11/27/2026 11:59:59 PM - Process(1)\nAMQ8004: miqm queue manager ended."
    reply = authorizer.check("put", {"queue": name}, Session())
    assert reply is not None and reply["mqrc"] == 2035
    assert len(lines) == 1 and "\n" not in lines[0] and "Q1\\x0a11/27" in lines[0]
    assert "\n" not in reply["error"]


def test_made_up_long_names_are_not_kept_in_the_lookup_cache() -> None:
    """A principal's puts to queues with 250 KiB names it made up each added an answer
    to the authority cache (50,000 of them before it is cleared: 12 GiB)."""
    table = authz.AuthTable([authz.AuthRec("QUEUE", "APP1.**", "APP1", frozenset({"PUT"}))])
    for i in range(100):
        name = f"APP1.{i}." + "X" * 100_000
        assert table.allows("APP1", "QUEUE", name, "PUT")  # the answer is still right
    assert len(table._cache) == 0
    assert table.allows("APP1", "QUEUE", "APP1.Q", "PUT")
    assert len(table._cache) == 1
