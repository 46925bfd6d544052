"""A refused profile, principal or authority name is shown in one line of bounded length
whatever it holds (setmqaut, dspmqaut, SET AUTHREC print the refusal)."""

from __future__ import annotations

import pytest

from miqm import authz


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


def test_shown_keeps_printable_names_as_they_are() -> None:
    assert authz.shown("APP1.**") == "APP1.**"
    assert authz.shown("A\nB") == "A\\x0aB"
    assert authz.shown("x" * 70) == "x" * 64 + "..."
