"""Names a client presents reach the error log escaped and cut short (miqm.net.auth)."""

from __future__ import annotations

from miqm.net.auth import LOGGED_NAME, Authenticator, loggable


def test_loggable_escapes_non_printables_and_truncates() -> None:
    assert loggable("app1") == "app1"
    forged = loggable("evil\n----- miqm -----\nAMQ9999: forged entry")
    assert "\n" not in forged and forged.startswith("evil\\x0a----- miqm")
    assert loggable("a\\b") == "a\\\\b"  # a backslash cannot fake an escape
    assert loggable("\u202eabc\x00") == "\\u202eabc\\x00"
    assert loggable("\ud800") == "\\ud800"  # a lone surrogate from JSON: still writable
    long = loggable("x" * 3_000_000)
    assert long == "x" * LOGGED_NAME + "..."
    assert len(loggable("\n" * 1000)) <= LOGGED_NAME + 3


def test_refused_principals_are_reported_safe_for_the_log() -> None:
    seen: list[str] = []
    auth = Authenticator({"admin": "s" * 64},
                         lambda peer, principal, suppressed: seen.append(principal))
    assert auth.check("evil\n----- miqm -----\nforged:x", "p") is None
    assert auth.check("y" * 100_000 + ":x", "p") is None
    assert auth.check(None, "p") is None
    assert seen[0] == "evil\\x0a----- miqm -----\\x0aforged"
    assert seen[1] == "y" * LOGGED_NAME + "..."
    assert seen[2] == "(none)"
    assert auth.check("admin:" + "s" * 64, "p") == "admin"
