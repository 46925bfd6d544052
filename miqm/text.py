"""Text someone else chose (a command, a queue or principal name, an exception's words)
made safe for one line of output or of the error log."""

from __future__ import annotations

ELLIPSIS = "..."


def one_line(text: str, limit: int | None = None, *, strict: bool = False) -> str:
    """``text`` as it may be shown on one line: a byte that was not valid UTF-8 on input
    (decoded with ``surrogateescape``) as ``\\xNN``; every other character that is not
    printable (line breaks, control characters, Unicode format characters such as a
    right-to-left override) as ``\\xNN``, ``\\uNNNN`` or ``\\UNNNNNNNN``; tabs kept.
    ``limit`` cuts the result at that many characters (never inside an escape) with
    ``...`` after it. ``strict`` (names an unauthenticated peer sent, for the error
    log) also escapes tabs and doubles backslashes, so that no name can look like
    another's escape.

    Written raw, a line break in such text would forge lines (or error log entries) of
    its own, and a long one make a line of any length."""
    if (text.isprintable() and (limit is None or len(text) <= limit)
            and not (strict and "\\" in text)):
        return text
    out: list[str] = []
    size = 0
    for ch in text:
        code = ord(ch)
        if strict and ch == "\\":
            piece = "\\\\"
        elif ch.isprintable() or (ch == "\t" and not strict):
            piece = ch
        elif 0xDC80 <= code <= 0xDCFF:  # surrogateescape: the byte that was not UTF-8
            piece = f"\\x{code - 0xDC00:02x}"
        elif code < 0x100:
            piece = f"\\x{code:02x}"
        elif code < 0x10000:
            piece = f"\\u{code:04x}"
        else:
            piece = f"\\U{code:08x}"
        if limit is not None and size + len(piece) > limit:
            out.append(ELLIPSIS)
            break
        out.append(piece)
        size += len(piece)
    return "".join(out)
