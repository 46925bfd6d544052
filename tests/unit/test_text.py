"""miqm.text.one_line: the one way text someone else chose is made one bounded line
(runmqsc's echo, refusals that name a principal or profile, error log entries)."""

from __future__ import annotations

from miqm.text import one_line


def test_printable_text_is_kept_as_it_is() -> None:
    assert one_line("DEFINE QLOCAL('A.B') DESCR('C:\\dir')\t* x") == \
        "DEFINE QLOCAL('A.B') DESCR('C:\\dir')\t* x"


def test_line_breaks_and_format_characters_are_escaped() -> None:
    assert one_line("A\nB\r\x00\x1b[31m") == "A\\x0aB\\x0d\\x00\\x1b[31m"
    assert one_line("\u202eabc\u2028") == "\\u202eabc\\u2028"
    # above the basic plane: eight digits, so the escape cannot run into what follows
    assert one_line("\U000e0041z") == "\\U000e0041z"


def test_a_byte_that_was_not_utf8_is_shown_as_that_byte() -> None:
    raw = b"QLOCAL(\xff\xfe)".decode("utf-8", "surrogateescape")
    assert one_line(raw) == "QLOCAL(\\xff\\xfe)"


def test_limit_cuts_between_escapes_never_inside_one() -> None:
    assert one_line("x" * 70, 64) == "x" * 64 + "..."
    assert one_line("x" * 64, 64) == "x" * 64
    cut = one_line("abc\n" * 10, 9)
    assert cut == "abc\\x0aab..."
    assert len(one_line("\n" * 1_000_000, 40)) <= 43


def test_strict_doubles_backslashes_and_escapes_tabs() -> None:
    """A principal named ``a\\x0ab`` (literally) must not read as one with a line break."""
    assert one_line("a\\x0ab", strict=True) == "a\\\\x0ab"
    assert one_line("a\nb", strict=True) == "a\\x0ab"
    assert one_line("a\tb", strict=True) == "a\\x09b"
    assert one_line("a\\b", 3, strict=True) == "a\\\\..."
