"""MQSC: parse a script into structured commands, and format results the way runmqsc does.

Pure: no I/O and no store. ``runmqsc`` parses locally (so a syntax error is reported
without a round trip and exactly where MQ reports it), sends each :class:`Command` as a
dict to the queue manager (op ``"mqsc"``), and the service executes it against the store
and formats the reply lines with the functions here. See docs/mqsc.md for the grammar.

Rules taken from MQ:

* a line whose first character is ``*`` is a comment; blank lines are ignored;
* a line ending in ``-`` continues at the start of the next line, one ending in ``+``
  continues at the first non-blank character of the next line;
* keywords are case-insensitive and have MQ's abbreviations (``DEF``, ``DIS``, ``ALT``,
  ``QL``); unquoted names and values are folded to upper case, quoted ones
  (``'it''s'``) keep their case;
* ``DISPLAY QLOCAL(name)`` with no attributes shows ALL; a generic name (``Q*``) with
  no attributes shows only QUEUE and TYPE.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from miqm import amq
from miqm.text import one_line

#: Settable queue attributes: kind and range/choices, as MQ defines them.
QUEUE_ATTRS: dict[str, tuple[str, Any]] = {
    "MAXDEPTH": ("int", (0, 999_999_999)),
    "DEFPSIST": ("enum", ("YES", "NO")),
    "DEFPRTY": ("int", (0, 9)),
    "DESCR": ("str", 64),
    "PUT": ("enum", ("ENABLED", "DISABLED")),
    "GET": ("enum", ("ENABLED", "DISABLED")),
    "MAXMSGL": ("int", (0, 104_857_600)),
    # kept for the applications, as in MQ: the queue manager never requeues by itself; an
    # application (MQ's JMS classes do) reads them with MQINQ and moves a message whose
    # backout count reached BOTHRESH to BOQNAME
    "BOTHRESH": ("int", (0, 999_999_999)),
    "BOQNAME": ("str", 48),
}

#: Queue attributes DISPLAY may name, in the order they are shown after QUEUE and TYPE.
QUEUE_DISPLAY_ORDER = (
    "ALTDATE", "ALTTIME", "BOQNAME", "BOTHRESH", "CRDATE", "CRTIME", "CURDEPTH", "DEFPRTY",
    "DEFPSIST", "DESCR", "GET", "IPPROCS", "MAXDEPTH", "MAXMSGL", "OPPROCS", "PUT", "UNCOM",
)

#: What DEFINE ... REPLACE sets where the command does not say (MQ: "unspecified
#: parameters are taken from the object named on LIKE, or from the default definition;
#: the parameters of the object being replaced are ignored"), so a script run again
#: without an attribute it once set puts that attribute back to its default, as in MQ.
#: The values are MQ's SYSTEM.DEFAULT.LOCAL/ALIAS/MODEL.QUEUE ones, the store's and
#: the queue service's defaults (tests/unit/test_mqsc.py checks they agree).
REPLACE_DEFAULTS: dict[str, dict[str, Any]] = {
    "QLOCAL": {"MAXDEPTH": 5000, "DEFPSIST": "NO", "DEFPRTY": 0, "DESCR": "",
               "PUT": "ENABLED", "GET": "ENABLED", "MAXMSGL": 4194304, "BOTHRESH": 0,
               "BOQNAME": ""},
    "QALIAS": {"DEFPSIST": "NO", "DEFPRTY": 0, "DESCR": "", "PUT": "ENABLED",
               "GET": "ENABLED"},
    "QMODEL": {"DEFTYPE": "TEMPDYN", "MAXDEPTH": 5000, "DEFPSIST": "NO", "DEFPRTY": 0,
               "DESCR": "", "PUT": "ENABLED", "GET": "ENABLED", "MAXMSGL": 4194304,
               "BOTHRESH": 0, "BOQNAME": ""},
}

#: MQ's default objects, which DEFINE ... LIKE(...) names in scripts written for MQ
#: (``LIKE(SYSTEM.DEFAULT.LOCAL.QUEUE)``). miqm has no such queues: its default definition
#: is REPLACE_DEFAULTS, so LIKE of the type's default object means those values (the
#: LIKE was refused AMQ8147 'not found', and the queue not made).
DEFAULT_OBJECTS = {"QLOCAL": "SYSTEM.DEFAULT.LOCAL.QUEUE",
                   "QALIAS": "SYSTEM.DEFAULT.ALIAS.QUEUE",
                   "QMODEL": "SYSTEM.DEFAULT.MODEL.QUEUE"}

#: MQ queue attributes that scripts written for MQ set and miqm's queues do not have
#: (no triggering, backout requeue, clustering, statistics queues, ...): named in the
#: syntax error so an administrator knows the attribute is MQ's, not mistyped.
MQ_ONLY_QUEUE_ATTRS = frozenset((
    "ACCTQ", "CLCHNAME", "CLUSNL", "CLUSTER", "CLWLPRTY",
    "CLWLRANK", "CLWLUSEQ", "CUSTOM", "DEFBIND", "DEFPRESP", "DEFREADA", "DEFSOPT",
    "DISTL", "HARDENBO", "IMGRCOVQ", "INDXTYPE", "INITQ", "MAXFSIZE", "MONQ", "MSGDLVSQ",
    "NOHARDENBO", "NOSHARE", "NOTRIGGER", "NPMCLASS", "PROCESS", "PROPCTL", "QDEPTHHI",
    "QDEPTHLO", "QDPHIEV", "QDPLOEV", "QDPMAXEV", "QSVCIEV", "QSVCINT", "RETINTVL",
    "SCOPE", "SHARE", "STATQ", "TRIGDATA", "TRIGDPTH", "TRIGGER", "TRIGMPRI",
    "TRIGTYPE", "USAGE", "XMITQ", "RNAME", "RQMNAME"))


#: what miqm's MQSC has, named when a script asks for something it has not
MIQM_OBJECTS = ("QLOCAL, QALIAS, QMODEL, QUEUE, QSTATUS, CONN, LSSTATUS, LOG, QSTATS, QMGR, "
                "QMSTATUS, AUTHREC, SECURITY")

_NO_CHANNELS = ("miqm has no channels: applications connect to the active instance's "
                "listener (docs/client.md), which DISPLAY LSSTATUS(*) and DISPLAY CONN(*) "
                "show")
#: MQ object types and verbs found in scripts written for MQ, with what to do instead
MQ_ONLY_OBJECTS = {
    **dict.fromkeys(("CHANNEL", "CHL", "CHSTATUS", "CHS", "CHLAUTH", "CLUSQMGR"),
                    _NO_CHANNELS),
    **dict.fromkeys(("LISTENER", "LSTR"), "the instance's own listener starts with strmqm "
                    "(its port: MIQM_LISTENER_PORT); DISPLAY LSSTATUS(*) shows it"),
    **dict.fromkeys(("TOPIC", "SUB", "SBSTATUS", "TPSTATUS", "PUBSUB"),
                    "miqm has no publish/subscribe"),
    **dict.fromkeys(("QREMOTE", "QR"), "miqm has no remote queues (one queue manager, no "
                    "channels): applications connect to it"),
    **dict.fromkeys(("PROCESS", "PRO", "SERVICE", "SVSTATUS", "NAMELIST", "NL", "AUTHINFO",
                     "COMMINFO", "STGCLASS", "POLICY", "APSTATUS", "APPLSTATUS"),
                    "miqm does not have it"),
}
MQ_ONLY_VERBS = {
    "START": "the listener starts with strmqm; miqm has no channels or services",
    **dict.fromkeys(("RESOLVE", "SUSPEND", "RESUME", "PURGE", "RVERIFY", "ARCHIVE",
                     "BACKUP", "RECOVER", "MOVE", "REFRESHCLUSTER"),
                    "miqm has no channels, clusters or CF structures"),
}


def _mq_only_object(verb: str, word: str) -> str:
    """The reason for an MQ object type miqm does not have."""
    hint = MQ_ONLY_OBJECTS.get(word)
    head = (f"{verb} {word} is an MQ command miqm does not have ({hint})" if hint else
            f"{verb} {word} is not valid")
    return f"{head}. Its MQSC objects: {MIQM_OBJECTS} (docs/mqsc.md)"


def _not_valid(word: str, verb: str, kind: str) -> str:
    """The reason for a parameter a DEFINE/ALTER of ``kind`` does not take: an MQ
    attribute miqm's queues do not have is said to be one, with what to do."""
    if word in MQ_ONLY_QUEUE_ATTRS:
        return (f"{word} is an MQ queue attribute miqm does not have (docs/mqsc.md, "
                f"'Queue attributes'): remove it from the {verb} {kind}")
    return f"{word} is not valid on {verb} {kind}"


QMGR_ATTRS: dict[str, tuple[str, Any]] = {
    "MAXUMSGS": ("int", (1, 999_999_999)),
    "MAXMSGL": ("int", (32768, 104_857_600)),
    "DESCR": ("str", 64),
    "MONQ": ("enum", ("OFF", "LOW", "MEDIUM", "HIGH")),
    # connection authentication: an AUTHINFO name turns it on, ' ' off (see docs/mqsc.md)
    "CONNAUTH": ("str", 48),
}

#: MQ's limit on the length of one MQSC command (continuations joined)
MAX_COMMAND_LENGTH = 32_762

#: how much of a command over that limit runmqsc echoes
ECHO_PREFIX = 80


def _shortened(text: str) -> str:
    """A command as echoed: whole up to MQ's limit, else its first characters and its
    length."""
    if len(text) <= MAX_COMMAND_LENGTH:
        return text
    return f"{text[:ECHO_PREFIX]}... ({len(text)} characters)"


_VERBS = {"DEFINE": "DEFINE", "DEF": "DEFINE", "ALTER": "ALTER", "ALT": "ALTER",
          "DELETE": "DELETE", "DISPLAY": "DISPLAY", "DIS": "DISPLAY", "PING": "PING",
          "END": "END", "EXIT": "END", "QUIT": "END"}
# security commands (authority records): parse_security below
_VERBS.update({"SET": "SET", "REFRESH": "REFRESH", "REF": "REFRESH"})
_QUEUE_TYPES = {"QLOCAL": "QLOCAL", "QL": "QLOCAL"}
_DISPLAY_QUEUE_TYPES = {**_QUEUE_TYPES, "QUEUE": "QLOCAL", "Q": "QLOCAL"}
_NAME_RE = re.compile(r"^[A-Za-z0-9._/%]{1,48}\Z")
_GENERIC_RE = re.compile(r"^[A-Za-z0-9._/%]{0,47}\*\Z")


class MQSCSyntaxError(Exception):
    """A command is not valid MQSC. ``segment`` is the command text up to the error,
    which runmqsc prints under AMQ8405I as MQ does; ``reason`` says what was expected."""

    def __init__(self, segment: str, reason: str) -> None:
        super().__init__(reason)
        self.segment = segment
        self.reason = reason


@dataclass(frozen=True)
class Command:
    """One parsed MQSC command.

    ``verb`` DEFINE | ALTER | DELETE | DISPLAY | PING | END; ``objtype`` QLOCAL | QMGR |
    QMSTATUS (empty for END); ``name`` the object (may be generic for DISPLAY);
    ``attrs`` typed values to set; ``options`` flags such as REPLACE/NOREPLACE/PURGE;
    ``like`` a DEFINE's LIKE queue; ``show`` the attributes DISPLAY asked for
    (``("ALL",)`` for all); ``text`` the command as read (for the echo).
    """

    verb: str
    objtype: str = ""
    name: str = ""
    attrs: dict[str, Any] = field(default_factory=dict)
    options: tuple[str, ...] = ()
    like: str = ""
    show: tuple[str, ...] = ()
    text: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The command as a JSON-friendly dict (the ``mqsc`` request's ``command``)."""
        return {"verb": self.verb, "objtype": self.objtype, "name": self.name,
                "attrs": dict(self.attrs), "options": list(self.options), "like": self.like,
                "show": list(self.show), "text": self.text}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Command:
        """Rebuild a command sent over the wire; ValueError if the dict is malformed."""
        try:
            return cls(verb=str(d["verb"]), objtype=str(d.get("objtype", "")),
                       name=str(d.get("name", "")), attrs=dict(d.get("attrs") or {}),
                       options=tuple(d.get("options") or ()), like=str(d.get("like", "")),
                       show=tuple(d.get("show") or ()), text=str(d.get("text", "")))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed MQSC command: {exc}") from None

    @property
    def generic(self) -> bool:
        """True if ``name`` is a generic name such as ``Q*`` or ``*``."""
        return self.name.endswith("*")


# -- script splitting --------------------------------------------------------------------


def split_commands(script: str) -> list[str]:
    """The commands in ``script`` with comments dropped and continuations joined."""
    return list(iter_commands(script.splitlines()))


def iter_commands(lines: Iterable[str]) -> Iterator[str]:
    """The commands in ``lines``: :func:`iter_input` without its comment lines (a command
    left unfinished at the end of ``lines`` is given as it stands)."""
    for kind, text in iter_input(lines):
        if kind != "comment":  # a toolong one is refused by parse_command
            yield text


#: why a command whose last line asked for a continuation that never came is not run
UNFINISHED = ("the input ended after a continuation character, + or -: the command is "
              "incomplete and was not run. End its last line without one, or with ';'")


def echo_comment(line: str) -> str:
    """A comment line as runmqsc echoes it, as MQ's does: ``       : * text``."""
    return f"{'':>6} : {one_line(line.rstrip())}"


def iter_input(lines: Iterable[str]) -> Iterator[tuple[str, str]]:
    """``("command", text)`` for each command in ``lines`` (continuations joined) and
    ``("comment", line)`` for each comment line (runmqsc echoes them, as MQ's does),
    each yielded as soon as its last line has been read: runmqsc answers a command typed
    at a terminal, or written into a pipe by a program waiting for the answer, before
    the next line. A command whose last line ends in a continuation character when the
    input ends is ``("unfinished", text)``: MQ ends a command only at a line that does
    not continue it, and running what was read of a script cut short would do part of a
    command (``DEFINE ... REPLACE +`` without the attributes after it puts every one
    back to its default).

    A command ends at a line not ending in ``+`` or ``-``, or, as MQ allows on
    Multiplatforms, at a line ending in ``;`` (even after ``+`` continuations).

    Comment and blank lines are dropped inside a continued command too (MQ: "any
    comments or blank lines are discarded when the command is reassembled"; the
    command continues on the next line that is neither): a blank line after a ``+``
    ended the command there, and a comment line became part of it, both syntax errors
    in scripts that MQ runs."""
    current: str | None = None
    strip_next = False
    for raw in lines:
        line = raw.rstrip()
        if line.startswith("*"):
            yield "comment", line
            continue
        if not line.strip():
            continue
        if current is not None and strip_next:
            line = line.lstrip()
        cont = False
        if line.endswith(";"):
            line = line[:-1].rstrip()  # the command ends here
        elif line.endswith(("+", "-")):
            cont = True
            strip_next = line.endswith("+")
            line = line[:-1]
        if current is None:
            current = line
        elif len(current) <= MAX_COMMAND_LENGTH:
            # past MQ's limit the rest is not kept: the command is refused anyway, and
            # continuation lines without end (a runaway script) would fill the memory
            current += line
        if not cont:
            if current.strip():
                yield _whole(current.strip())
            current = None
    if current is not None and current.strip():
        kind, text = _whole(current.strip())
        yield ("unfinished" if kind == "command" else kind), text


def _whole(text: str) -> tuple[str, str]:
    """``("command", text)``, or ``("toolong", its first characters)`` for a command over
    MQ's limit (its length is not known: what is past the limit was not kept)."""
    if len(text) > MAX_COMMAND_LENGTH:
        return "toolong", text[:MAX_COMMAND_LENGTH + 1]
    return "command", text


def too_long_lines(number: int | None, text: str) -> list[str]:
    """runmqsc's echo (unless ``number`` is None: -e) and AMQ8405 for a command
    :func:`iter_input` gave as ``toolong``."""
    shown = f"{one_line(text[:ECHO_PREFIX])}..."
    return [*([] if number is None else [f"{number:>6} : {shown}"]), MSG_SYNTAX, shown,
            f"(the command is longer than {MAX_COMMAND_LENGTH} characters: an MQSC command "
            f"may be at most {MAX_COMMAND_LENGTH} characters; it was not run)"]


# -- tokenising --------------------------------------------------------------------------


@dataclass
class _Token:
    word: str            # upper-cased keyword
    value: str | None    # the parenthesised value (None if there was none)
    quoted: bool         # the value was a quoted string
    end: int             # offset in the text just after this token


def _tokens(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in " \t,":
            i += 1
            continue
        m = re.match(r"[A-Za-z][A-Za-z0-9_]*", text[i:])
        if not m:
            raise MQSCSyntaxError(text[: i + 1], f"unexpected character '{one_line(ch)}'")
        word = m.group(0).upper()
        i += len(m.group(0))
        j = i
        while j < n and text[j] in " \t":
            j += 1
        if j < n and text[j] == "(" and word == "WHERE":
            value, i = _raw_value(text, j + 1)
            tokens.append(_Token(word, value, False, i))
        elif j < n and text[j] == "(":
            value, quoted, i = _value(text, j + 1)
            tokens.append(_Token(word, value, quoted, i))
        else:
            tokens.append(_Token(word, None, False, i))
    return tokens


def _raw_value(text: str, i: int) -> tuple[str, int]:
    """The text up to the ')' that closes a '(' just before ``i``, quotes respected (a
    WHERE condition: ``CURDEPTH GT 0``, ``DESCR EQ 'a (b)'``); (text, offset after ')')."""
    n = len(text)
    quoted = False
    j = i
    while j < n:
        if text[j] == "'":
            quoted = not quoted  # '' inside a string toggles twice: still inside
        elif text[j] == ")" and not quoted:
            return text[i:j], j + 1
        j += 1
    raise MQSCSyntaxError(text, "a '(' is not closed" if not quoted
                          else "a quoted string is not closed")


def _value(text: str, i: int) -> tuple[str, bool, int]:
    """Parse a value starting just after '('; returns (value, quoted, offset after ')')."""
    n = len(text)
    while i < n and text[i] in " \t":
        i += 1
    if i < n and text[i] == "'":
        out: list[str] = []
        i += 1
        while True:
            if i >= n:
                raise MQSCSyntaxError(text, "a quoted string is not closed")
            if text[i] == "'":
                if i + 1 < n and text[i + 1] == "'":
                    out.append("'")
                    i += 2
                    continue
                i += 1
                break
            out.append(text[i])
            i += 1
        while i < n and text[i] in " \t":
            i += 1
        if i >= n or text[i] != ")":
            raise MQSCSyntaxError(text[: i + 1], "expected ')' after a quoted value")
        return "".join(out), True, i + 1
    close = text.find(")", i)
    if close < 0:
        raise MQSCSyntaxError(text, "a '(' is not closed")
    value = text[i:close].strip()
    if "(" in value or "'" in value:
        raise MQSCSyntaxError(text[: close + 1], "unexpected '(' or quote in a value")
    return value, False, close + 1


# -- parsing -----------------------------------------------------------------------------


def _typed(tok: _Token, spec: tuple[str, Any], text: str) -> Any:
    kind, rule = spec
    seg = text[: tok.end]
    if tok.value is None:
        raise MQSCSyntaxError(seg, f"{tok.word} needs a value in parentheses")
    if kind == "int":
        if tok.quoted or not re.fullmatch(r"-?\d+", tok.value):
            raise MQSCSyntaxError(seg, f"{tok.word} needs a whole number")
        value = int(tok.value)  # a sign is taken, so that -1 is said to be out of range
        lo, hi = rule
        if not lo <= value <= hi:
            raise MQSCSyntaxError(seg, f"{tok.word}({value}) is out of range {lo} to {hi}")
        return value
    if kind == "enum":
        value = tok.value.upper()
        if tok.quoted or value not in rule:
            raise MQSCSyntaxError(seg, f"{tok.word} must be one of {', '.join(rule)}")
        return value
    if not tok.quoted and not tok.value.strip():
        # MQ: "a pair of parentheses with no significant information between them is not
        # valid"; it took DESCR() as blank, so a script passed here and failed on MQ
        raise MQSCSyntaxError(seg, f"{tok.word}() is empty: give a value, or ' ' for a "
                              "blank one")
    value = tok.value if tok.quoted else tok.value.upper()
    if len(value) > rule:
        raise MQSCSyntaxError(seg, f"{tok.word} is longer than {rule} characters")
    return value


def is_object_name(name: str, *, generic: bool = False) -> bool:
    """Whether ``name`` is an MQ object name (1 to 48 characters of A-Z a-z 0-9 . _ / %),
    or with ``generic`` also a generic one (up to 47 of them, then ``*``)."""
    return bool(_NAME_RE.match(name) or (generic and _GENERIC_RE.match(name)))


def _name(tok: _Token, text: str, *, generic: bool = False) -> str:
    seg = text[: tok.end]
    if tok.value is None or tok.value == "":
        raise MQSCSyntaxError(seg, f"{tok.word} needs an object name in parentheses")
    name = tok.value if tok.quoted else tok.value.upper()
    if is_object_name(name, generic=generic):
        return name
    raise MQSCSyntaxError(seg, f"'{name}' is not a valid object name")


def parse_command(text: str) -> Command:
    """Parse one command (continuations already joined); MQSCSyntaxError if invalid."""
    if len(text) > MAX_COMMAND_LENGTH:
        raise MQSCSyntaxError(text[:ECHO_PREFIX] + "...", f"the command is {len(text)} "
                              f"characters long: an MQSC command may be at most "
                              f"{MAX_COMMAND_LENGTH} characters")
    _check_decoded(text)
    tokens = _tokens(text)
    if not tokens:
        raise MQSCSyntaxError(text, "empty command")
    verb_tok = tokens[0]
    verb = _VERBS.get(verb_tok.word) or _ADMIN_VERBS.get(verb_tok.word)
    if verb is None or verb_tok.value is not None:
        hint = MQ_ONLY_VERBS.get(verb_tok.word) if verb_tok.value is None else None
        raise MQSCSyntaxError(text[: verb_tok.end], f"unknown command {verb_tok.word}" + (
            f": an MQ command miqm does not have ({hint})" if hint else ""))
    if verb == "END":
        if len(tokens) > 1:
            raise MQSCSyntaxError(text[: tokens[1].end], "END takes no parameters")
        return Command("END", text=text)
    if len(tokens) < 2:
        raise MQSCSyntaxError(text, f"{verb} needs an object type")
    obj = tokens[1]
    rest = tokens[2:]
    _no_repeats(rest, text)
    where = next((t for t in rest if t.word == "WHERE"), None)
    if where is None:
        return _parse_tokens(verb, obj, rest, text)
    cmd = _parse_tokens(verb, obj, [t for t in rest if t is not where], text)
    return _with_where(cmd, where, text)


def _check_decoded(text: str) -> None:
    """MQSCSyntaxError at the first byte of ``text`` that was not UTF-8 on input (runmqsc
    decodes with ``surrogateescape``). Such a command, a DESCR('café') saved in
    ISO-8859-1 say, could not be sent to the queue manager: runmqsc stopped with an
    internal error (AMQ6184) and ran none of the commands after it."""
    for i, ch in enumerate(text):
        if 0xDC80 <= ord(ch) <= 0xDCFF:
            raise MQSCSyntaxError(text[: i + 1], f"the byte \\x{ord(ch) - 0xDC00:02x} is not "
                                  "UTF-8: runmqsc reads UTF-8; convert the script (for "
                                  "one saved in ISO-8859-1: iconv -f ISO-8859-1 -t UTF-8 "
                                  "FILE > FILE.utf8) and run it again")


#: parameters that may not be given together (MQ: "REPLACE NOREPLACE is not allowed")
_EXCLUSIVE = ({"REPLACE", "NOREPLACE"}, {"PURGE", "NOPURGE"})
#: parameter synonyms, for the repeat check
_PARAM_SYNONYMS = {"TARGQ": "TARGET"}


def _no_repeats(rest: list[_Token], text: str) -> None:
    """MQ's rule: a parameter may be given once, and not with its NO form."""
    seen: set[str] = set()
    for tok in rest:
        word = _PARAM_SYNONYMS.get(tok.word, tok.word)
        if word in seen:
            raise MQSCSyntaxError(text[: tok.end], f"{tok.word} is repeated: give each "
                                  "parameter once")
        for pair in _EXCLUSIVE:
            if word in pair and seen & pair:
                other = next(iter(seen & pair))
                raise MQSCSyntaxError(text[: tok.end], f"{word} and {other} cannot be "
                                      "given together")
        seen.add(word)


def _parse_tokens(verb: str, obj: _Token, rest: list[_Token], text: str) -> Command:
    """The command a verb, an object keyword and its parameters make."""
    if obj.word == "AUTHREC" or verb in ("SET", "REFRESH"):
        return parse_security(verb, obj, rest, text)
    if obj.word == "QMGR" and obj.value is None:
        return _parse_qmgr(verb, rest, text)
    if obj.word == "QMSTATUS" and obj.value is None and verb == "DISPLAY":
        show = tuple(t.word for t in rest if t.value is None)
        if any(t.value is not None for t in rest):
            bad = next(t for t in rest if t.value is not None)
            raise MQSCSyntaxError(text[: bad.end], "QMSTATUS attributes take no values")
        return Command("DISPLAY", "QMSTATUS", show=show or ("ALL",), text=text)
    if verb in _ADMIN_VERBS or obj.word in _ADMIN_OBJECTS:
        return _parse_admin(verb, obj, rest, text)
    types = _DISPLAY_QUEUE_TYPES if verb == "DISPLAY" else _QUEUE_TYPES
    if obj.word not in types or verb == "PING":
        raise MQSCSyntaxError(text[: obj.end], _mq_only_object(verb, obj.word))
    name = _name(obj, text, generic=(verb == "DISPLAY"))
    if verb == "DISPLAY" and obj.word in ("QUEUE", "Q"):
        return _parse_display_any_queue(name, rest, text)
    if verb == "DISPLAY":
        return _parse_display_queue(name, rest, text)
    attrs: dict[str, Any] = {}
    options: list[str] = []
    like = ""
    for tok in rest:
        if verb == "DEFINE" and tok.word in ("REPLACE", "NOREPLACE") and tok.value is None:
            options.append(tok.word)
        elif verb == "DELETE" and tok.word in ("PURGE", "NOPURGE") and tok.value is None:
            options.append(tok.word)
        elif verb == "DEFINE" and tok.word == "LIKE":
            like = _name(tok, text)
            if like == DEFAULT_OBJECTS["QLOCAL"]:
                like = ""  # the default definition: the attributes below
                attrs = {**REPLACE_DEFAULTS["QLOCAL"], **attrs}
        elif verb in ("DEFINE", "ALTER") and tok.word in QUEUE_ATTRS:
            attrs[tok.word] = _typed(tok, QUEUE_ATTRS[tok.word], text)
        else:
            raise MQSCSyntaxError(text[: tok.end], _not_valid(tok.word, verb, "QLOCAL"))
    if verb == "DEFINE" and "REPLACE" in options and not like:
        attrs = {**REPLACE_DEFAULTS["QLOCAL"], **attrs}
    return Command(verb, "QLOCAL", name, attrs, tuple(options), like, text=text)


def _parse_display_queue(name: str, rest: list[_Token], text: str) -> Command:
    show: list[str] = []
    for tok in rest:
        if tok.word == "ALL" and tok.value is None:
            show.append("ALL")
        elif tok.word in ("TYPE",) and tok.value is not None:
            if tok.value.upper() not in ("QLOCAL", "QL", "ALL"):
                # aliases and models exist (it said 'only local queues exist here')
                raise MQSCSyntaxError(text[: tok.end], "DISPLAY QLOCAL shows local queues: "
                                      "for other types use DISPLAY QUEUE(name) TYPE(QALIAS "
                                      "or QMODEL), or DISPLAY QALIAS / QMODEL")
        elif tok.value is None and (tok.word in QUEUE_DISPLAY_ORDER or tok.word in
                                    ("QUEUE", "TYPE")):
            show.append(tok.word)
        else:
            raise MQSCSyntaxError(text[: tok.end], f"{tok.word} is not a queue attribute")
    if not show:
        show = ["QUEUE", "TYPE"] if name.endswith("*") else ["ALL"]
    return Command("DISPLAY", "QLOCAL", name, show=tuple(show), text=text)


def _parse_qmgr(verb: str, rest: list[_Token], text: str) -> Command:
    if verb == "PING":
        if rest:
            raise MQSCSyntaxError(text[: rest[0].end], "PING QMGR takes no parameters")
        return Command("PING", "QMGR", text=text)
    if verb == "ALTER":
        attrs: dict[str, Any] = {}
        for tok in rest:
            if tok.word not in QMGR_ATTRS:
                # CHLAUTH, DEADQ, STATMQI, ... in scripts written for MQ
                raise MQSCSyntaxError(text[: tok.end], f"{tok.word} is not valid on ALTER "
                                      f"QMGR: miqm's queue manager has only "
                                      f"{', '.join(QMGR_ATTRS)}")
            attrs[tok.word] = _typed(tok, QMGR_ATTRS[tok.word], text)
        return Command("ALTER", "QMGR", attrs=attrs, text=text)
    if verb == "DISPLAY":
        show = []
        for tok in rest:
            if tok.value is not None:
                raise MQSCSyntaxError(text[: tok.end], "DISPLAY QMGR attributes take no values")
            if tok.word not in ("ALL", "QMNAME", *QMGR_ATTRS):
                # it showed QMNAME alone, as if the attribute were blank
                raise MQSCSyntaxError(text[: tok.end], f"{tok.word} is not a queue manager "
                                      f"attribute here: use ALL, QMNAME, "
                                      f"{', '.join(QMGR_ATTRS)}")
            show.append(tok.word)
        return Command("DISPLAY", "QMGR", show=tuple(show) or ("ALL",), text=text)
    raise MQSCSyntaxError(text, f"{verb} QMGR is not valid")


# -- daily administration: status, connections, aliases, models ---------------------------

#: verbs beyond DEFINE/ALTER/DELETE/DISPLAY/PING (MQ's synonyms included)
_ADMIN_VERBS = {"CLEAR": "CLEAR", "STOP": "STOP", "RESET": "RESET"}
#: object keywords handled by _parse_admin, with MQ's synonyms
_ADMIN_OBJECTS = {"QSTATUS": "QSTATUS", "QS": "QSTATUS", "CONN": "CONN",
                  "LSSTATUS": "LSSTATUS", "LOG": "LOG", "QSTATS": "QSTATS",
                  "QALIAS": "QALIAS", "QA": "QALIAS", "QMODEL": "QMODEL", "QM": "QMODEL"}

#: DISPLAY QSTATUS TYPE(QUEUE) and TYPE(HANDLE) attributes, in the order shown
QSTATUS_QUEUE_ATTRS = ("CURDEPTH", "IPPROCS", "LGETDATE", "LGETTIME", "LPUTDATE",
                       "LPUTTIME", "MONQ", "MSGAGE", "OPPROCS", "QTIME", "UNCOM")
QSTATUS_HANDLE_ATTRS = ("APPLTAG", "APPLTYPE", "BROWSE", "CHANNEL", "CONN", "CONNAME",
                        "HSTATE", "INPUT", "INQUIRE", "OUTPUT", "PID", "USERID")
CONN_ATTRS = ("EXTCONN", "TYPE", "PID", "APPLTAG", "APPLTYPE", "CHANNEL", "CONNAME",
              "CONNDATE", "CONNTIME", "UOWLOG", "UOWSTATE", "USERID")
LSSTATUS_ATTRS = ("STATUS", "PID", "STARTDA", "STARTTI", "TRPTYPE", "IPADDR", "PORT",
                  "SESSIONS", "SSL")
LOG_ATTRS = ("CURRLOG", "RECLOG", "MEDIALOG", "LOGTYPE", "LOGPATH", "LOGUTIL", "LOGPRIM",
             "LOGSEC", "LOGFSIZE", "CHECKPOINT")
ALIAS_ATTRS: dict[str, tuple[str, Any]] = {
    "TARGET": ("name", None), "DESCR": QUEUE_ATTRS["DESCR"], "PUT": QUEUE_ATTRS["PUT"],
    "GET": QUEUE_ATTRS["GET"], "DEFPSIST": QUEUE_ATTRS["DEFPSIST"],
    "DEFPRTY": QUEUE_ATTRS["DEFPRTY"],
}
MODEL_ATTRS: dict[str, tuple[str, Any]] = {
    **QUEUE_ATTRS, "DEFTYPE": ("enum", ("TEMPDYN", "PERMDYN")),
}
#: DISPLAY QALIAS / QMODEL attributes, in the order shown after QUEUE and TYPE
ALIAS_DISPLAY_ORDER = ("ALTDATE", "ALTTIME", "CRDATE", "CRTIME", "DEFPRTY", "DEFPSIST",
                       "DESCR", "GET", "PUT", "TARGET", "TARGTYPE")
MODEL_DISPLAY_ORDER = ("ALTDATE", "ALTTIME", "BOQNAME", "BOTHRESH", "CRDATE", "CRTIME",
                       "DEFPRTY", "DEFPSIST", "DEFTYPE", "DESCR", "GET", "MAXDEPTH", "MAXMSGL",
                       "PUT")


def _show_list(rest: list[_Token], allowed: tuple[str, ...], what: str, text: str,
               skip: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The attribute words of a DISPLAY (``ALL`` or names in ``allowed``)."""
    show: list[str] = []
    for tok in rest:
        if tok.word in skip:
            continue
        if tok.value is None and (tok.word == "ALL" or tok.word in allowed):
            show.append(tok.word)
        else:
            raise MQSCSyntaxError(text[: tok.end], f"{tok.word} is not {what}")
    return tuple(show)


def _type_of(rest: list[_Token], choices: tuple[str, ...], default: str, text: str) -> str:
    """The value of a TYPE(...) parameter among ``choices`` (``default`` if absent)."""
    value = default
    for tok in rest:
        if tok.word == "TYPE":
            v = (tok.value or "").upper()
            if tok.value is None or tok.quoted or v not in choices:
                raise MQSCSyntaxError(text[: tok.end], f"TYPE must be one of {', '.join(choices)}")
            value = v
    return value


def _conn_id(tok: _Token, text: str) -> str:
    v = (tok.value or "").upper()
    if tok.value is None or not (v == "*" or re.fullmatch(r"[0-9A-F]{16}", v)):
        raise MQSCSyntaxError(text[: tok.end], "CONN needs a connection id (16 hexadecimal "
                              "digits, as DISPLAY CONN shows it, or *)")
    return v


def _nothing_after(rest: list[_Token], text: str, reason: str) -> None:
    """AMQ8405 at the first token of ``rest``, if there is one."""
    if rest:
        raise MQSCSyntaxError(text[: rest[0].end], reason)


def _parse_admin(verb: str, obj: _Token, rest: list[_Token], text: str) -> Command:
    """CLEAR QLOCAL, DISPLAY QSTATUS/CONN/LSSTATUS/LOG, STOP CONN, RESET QSTATS and the
    QALIAS/QMODEL objects."""
    kind = _ADMIN_OBJECTS.get(obj.word) or _QUEUE_TYPES.get(obj.word)
    seg = text[: obj.end]
    if verb == "CLEAR":
        if kind != "QLOCAL":
            raise MQSCSyntaxError(seg, "CLEAR takes QLOCAL(name)")
        name = _name(obj, text)
        _nothing_after(rest, text, "CLEAR QLOCAL takes no parameters")
        return Command("CLEAR", "QLOCAL", name, text=text)
    if verb == "STOP":
        if kind != "CONN":
            raise MQSCSyntaxError(seg, "STOP takes CONN(id)")
        name = _conn_id(obj, text)
        if name == "*":
            raise MQSCSyntaxError(seg, "STOP CONN needs one connection id, not *")
        _nothing_after(rest, text, "STOP CONN takes no other parameters")
        return Command("STOP", "CONN", name, text=text)
    if verb == "RESET":
        if kind != "QSTATS":
            raise MQSCSyntaxError(seg, "RESET takes QSTATS(name)")
        name = _name(obj, text, generic=True)
        _nothing_after(rest, text, "RESET QSTATS takes no other parameters")
        return Command("RESET", "QSTATS", name, text=text)
    if kind in ("QALIAS", "QMODEL"):
        return _parse_alias_model(verb, kind, obj, rest, text)
    if verb != "DISPLAY" or kind not in ("QSTATUS", "CONN", "LSSTATUS", "LOG"):
        raise MQSCSyntaxError(seg, f"{verb} {obj.word} is not valid")
    if kind == "QSTATUS":
        name = _name(obj, text, generic=True)
        qtype = _type_of(rest, ("QUEUE", "HANDLE"), "QUEUE", text)
        allowed = QSTATUS_QUEUE_ATTRS if qtype == "QUEUE" else QSTATUS_HANDLE_ATTRS
        show = _show_list(rest, allowed, f"a TYPE({qtype}) status attribute", text, ("TYPE",))
        return Command("DISPLAY", "QSTATUS", name, {"TYPE": qtype}, show=show or ("ALL",),
                       text=text)
    if kind == "CONN":
        name = _conn_id(obj, text)
        ctype = _type_of(rest, ("CONN", "HANDLE", "ALL"), "CONN", text)
        show = _show_list(rest, CONN_ATTRS, "a connection attribute", text, ("TYPE",))
        return Command("DISPLAY", "CONN", name, {"TYPE": ctype}, show=show or ("ALL",),
                       text=text)
    if kind == "LSSTATUS":
        if obj.value is None:
            raise MQSCSyntaxError(seg, "LSSTATUS needs a listener name or * in parentheses")
        name = _name(obj, text, generic=True)
        show = _show_list(rest, LSSTATUS_ATTRS, "a listener status attribute", text)
        return Command("DISPLAY", "LSSTATUS", name, show=show or ("ALL",), text=text)
    if obj.value is not None:
        raise MQSCSyntaxError(seg, "DISPLAY LOG takes no name")
    show = _show_list(rest, LOG_ATTRS, "a log attribute", text)
    return Command("DISPLAY", "LOG", show=show or ("ALL",), text=text)


def _parse_display_any_queue(name: str, rest: list[_Token], text: str) -> Command:
    """DISPLAY QUEUE / Q: queues of every type (local, alias, model), or of the one
    TYPE(...) names; objtype ``QUEUE``, ``attrs["TYPE"]`` the type asked for."""
    qtype = "ALL"
    kept: list[_Token] = []
    for tok in rest:
        if tok.word == "TYPE" and tok.value is not None:
            v = tok.value.upper()
            v = {"QL": "QLOCAL", "QA": "QALIAS", "QM": "QMODEL"}.get(v, v)
            if tok.quoted or v not in ("QLOCAL", "QALIAS", "QMODEL", "ALL"):
                raise MQSCSyntaxError(text[: tok.end], "TYPE must be QLOCAL, QALIAS, QMODEL "
                                      "or ALL")
            qtype = v
        else:
            kept.append(tok)
    allowed = (*QUEUE_DISPLAY_ORDER, *ALIAS_DISPLAY_ORDER, *MODEL_DISPLAY_ORDER,
               "QUEUE", "TYPE")
    show = _show_list(kept, allowed, "a queue attribute", text)
    if not show:
        show = ("QUEUE", "TYPE") if name.endswith("*") else ("ALL",)
    return Command("DISPLAY", "QUEUE", name, {"TYPE": qtype}, show=show, text=text)


def _parse_alias_model(verb: str, kind: str, obj: _Token, rest: list[_Token],
                       text: str) -> Command:
    """DEFINE/ALTER/DELETE/DISPLAY QALIAS and QMODEL."""
    if verb == "DISPLAY":
        name = _name(obj, text, generic=True)
        order = ALIAS_DISPLAY_ORDER if kind == "QALIAS" else MODEL_DISPLAY_ORDER
        show = _show_list(rest, (*order, "QUEUE", "TYPE"), f"a {kind} attribute", text)
        return Command("DISPLAY", kind, name,
                       show=show or (("QUEUE", "TYPE") if name.endswith("*") else ("ALL",)),
                       text=text)
    if verb not in ("DEFINE", "ALTER", "DELETE"):
        raise MQSCSyntaxError(text[: obj.end], f"{verb} {kind} is not valid")
    name = _name(obj, text)
    spec = ALIAS_ATTRS if kind == "QALIAS" else MODEL_ATTRS
    attrs: dict[str, Any] = {}
    options: list[str] = []
    like_default = False  # LIKE(SYSTEM.DEFAULT.ALIAS.QUEUE / MODEL.QUEUE)
    like = ""  # LIKE(another alias or model): the queue manager copies its attributes
    for tok in rest:
        if verb == "DEFINE" and tok.word in ("REPLACE", "NOREPLACE") and tok.value is None:
            options.append(tok.word)
        elif verb in ("DEFINE", "ALTER") and _PARAM_SYNONYMS.get(tok.word, tok.word) in spec:
            key = _PARAM_SYNONYMS.get(tok.word, tok.word)  # TARGQ: TARGET's old name
            kind_, _rule = spec[key]
            attrs[key] = (_name(tok, text) if kind_ == "name" else _typed(tok, spec[key], text))
        elif verb == "DEFINE" and tok.word == "LIKE":
            like = _name(tok, text)
            if like == DEFAULT_OBJECTS[kind]:
                like, like_default = "", True
        else:
            raise MQSCSyntaxError(text[: tok.end], _not_valid(tok.word, verb, kind))
    if verb == "DEFINE" and kind == "QALIAS" and "TARGET" not in attrs and not like:
        raise MQSCSyntaxError(text, "DEFINE QALIAS needs TARGET(queue) (or LIKE(alias))")
    if verb == "DEFINE" and not like and ("REPLACE" in options or like_default):
        attrs = {**REPLACE_DEFAULTS[kind], **attrs}
    return Command(verb, kind, name, attrs, tuple(options), like, text=text)
# -- WHERE filters ------------------------------------------------------------------------

#: WHERE's operators (MQ's): comparisons, generic match (LK, NL), list contains (CT, EX,
#: CTG, EXG)
WHERE_OPERATORS = ("LT", "GT", "EQ", "NE", "LE", "GE", "LK", "NL", "CT", "EX", "CTG", "EXG")
_WHERE_RE = re.compile(r"\s*([A-Za-z][A-Za-z0-9]*)\s+([A-Za-z]{2,3})\s+(.*?)\s*", re.DOTALL)
_PAIR_RE = re.compile(r"\b([A-Z][A-Z0-9]*)\(([^)]*)\)")


def _where_keywords(cmd: Command) -> tuple[str, ...]:
    """The attributes a WHERE may test on ``cmd``'s display (empty: no WHERE here)."""
    if cmd.objtype == "QLOCAL":
        return QUEUE_DISPLAY_ORDER
    if cmd.objtype == "QUEUE":
        return (*QUEUE_DISPLAY_ORDER, *ALIAS_DISPLAY_ORDER, *MODEL_DISPLAY_ORDER)
    if cmd.objtype == "QALIAS":
        return ALIAS_DISPLAY_ORDER
    if cmd.objtype == "QMODEL":
        return MODEL_DISPLAY_ORDER
    if cmd.objtype == "QSTATUS":  # MQ: QTIME cannot be a filter keyword
        return (tuple(a for a in QSTATUS_QUEUE_ATTRS if a != "QTIME")
                if cmd.attrs.get("TYPE", "QUEUE") == "QUEUE" else QSTATUS_HANDLE_ATTRS)
    if cmd.objtype == "CONN":
        return CONN_ATTRS
    if cmd.objtype == "LSSTATUS":
        return LSSTATUS_ATTRS
    return ()


def _with_where(cmd: Command, tok: _Token, text: str) -> Command:
    """``cmd`` with a WHERE(keyword operator value) filter: ``attrs["WHERE"]`` holds
    ``[keyword, operator, value]`` and the keyword is displayed (as MQ shows it)."""
    seg = text[: tok.end]
    allowed = _where_keywords(cmd) if cmd.verb == "DISPLAY" else ()
    if not allowed:
        raise MQSCSyntaxError(seg, f"WHERE is not valid on {cmd.verb} {cmd.objtype}")
    m = _WHERE_RE.fullmatch(tok.value or "")
    if m is None:
        raise MQSCSyntaxError(seg, "WHERE needs a condition: WHERE(keyword operator value),"
                              " e.g. WHERE(CURDEPTH GT 0)")
    keyword, op, raw = m.group(1).upper(), m.group(2).upper(), m.group(3)
    if keyword not in allowed:
        raise MQSCSyntaxError(seg, f"{keyword} cannot be a WHERE keyword of DISPLAY "
                              f"{cmd.objtype}")
    if op not in WHERE_OPERATORS:
        raise MQSCSyntaxError(seg, f"{op} is not a WHERE operator: use "
                              f"{', '.join(WHERE_OPERATORS)}")
    if raw.startswith("'"):
        if len(raw) < 2 or not raw.endswith("'") or "'" in raw[1:-1].replace("''", ""):
            raise MQSCSyntaxError(seg, "the WHERE value's quoted string is not closed")
        value = raw[1:-1].replace("''", "'")
    elif not raw or any(c in raw for c in " \t'()"):
        raise MQSCSyntaxError(seg, "the WHERE value is one word, or a quoted string")
    else:
        value = raw.upper()
    show = cmd.show
    if "ALL" not in show and keyword not in show:
        show = (*show, keyword)
    return replace(cmd, attrs={**cmd.attrs, "WHERE": [keyword, op, value]}, show=show)


def _number(text: str) -> int | None:
    return int(text) if re.fullmatch(r"-?\d+", text) else None


def _generic_hit(shown: str, value: str) -> bool:
    return shown.startswith(value[:-1]) if value.endswith("*") else shown == value


def where_matches(shown: str, op: str, value: str) -> bool:
    """True if a displayed attribute value ``shown`` satisfies ``op value``: numbers
    compared as numbers, other values as text; LK/NL take a generic value (``AB*``);
    CT/EX (CTG/EXG generic) test the items of a list value (``a,b,c``)."""
    # runmqsc shows a blank value as ' ' (DESCR( )): blanks around either side do not count
    shown, value = shown.strip(), value.strip()
    if op in ("LK", "NL"):
        return _generic_hit(shown, value) == (op == "LK")
    if op in ("CT", "EX", "CTG", "EXG"):
        items = [x.strip() for x in shown.split(",") if x.strip()]
        generic = op in ("CTG", "EXG")
        hit = any(_generic_hit(x, value) if generic else x == value for x in items)
        return hit == (op in ("CT", "CTG"))
    a, b = _number(shown), _number(value)
    left: Any
    right: Any
    if a is not None and b is not None:
        left, right = a, b
    elif a is None and b is None:
        left, right = shown, value
    else:  # a number against text (a blank MSGAGE against 60): only NE holds
        return op == "NE"
    return {"LT": left < right, "GT": left > right, "EQ": left == right,
            "NE": left != right, "LE": left <= right, "GE": left >= right}[op]


_ITEM_RE = re.compile(r"([A-Z][A-Z0-9]*)\((.*)\)\Z", re.DOTALL)


def _block_pairs(lines: list[str], width: int = 40) -> dict[str, str]:
    """The ``KEY(value)`` items of a display block, read back as attr_columns laid them
    out: two to a line, the second at column 3 + ``width``, or one on a line of its own.
    A value holding parentheses (``DESCR(a (b) c)``) is kept whole: a regular expression
    stopping at the first ')' cut it, and WHERE(DESCR EQ 'a (b) c') left out the queue."""
    pairs: dict[str, str] = {}
    for line in lines:
        body = line[3:]
        items = [body]
        second = body[width:]
        if (len(body) > width and body[width - 1] == " " and body[:width].rstrip().endswith(")")
                and _ITEM_RE.match(second) and not second.startswith(" ")):
            items = [body[:width].rstrip(), second]
        for item in items:
            m = _ITEM_RE.match(item.strip())
            if m:
                pairs[m.group(1)] = m.group(2)
            else:  # not laid out by attr_columns: the items as a pattern finds them
                pairs.update(_PAIR_RE.findall(item))
    return pairs


def apply_where(cmd: Command, lines: list[str]) -> list[str]:
    """A display's reply lines without the objects its WHERE filter leaves out (all of
    them when there is no WHERE). Each object is a block: an ``AMQnnnnI`` line and its
    ``KEY(value)`` lines; an object without the keyword is left out (MQ: objects for
    which the keyword is no attribute are not displayed); error lines are kept."""
    where = cmd.attrs.get("WHERE")
    if not where:
        return lines
    keyword, op, value = (str(x) for x in where)
    out: list[str] = []
    blocks: list[list[str]] = []
    for line in lines:
        if line.startswith("AMQ") or not blocks:
            blocks.append([line])
        else:
            blocks[-1].append(line)
    for block in blocks:
        head = block[0]
        if not head.startswith("AMQ") or head[7:8] != "I":
            out.extend(block)  # an error or warning line, not an object
            continue
        pairs = _block_pairs(block[1:])
        if keyword in pairs and where_matches(pairs[keyword], op, value):
            out.extend(block)
    return out


# -- security: authority records --------------------------------------------------------

_SEC_OBJTYPES = ("QUEUE", "QMGR")


def _word_list(tok: _Token, text: str) -> list[str]:
    if tok.value is None or not tok.value.strip():
        raise MQSCSyntaxError(text[: tok.end], f"{tok.word} needs a list in parentheses")
    return [w.upper() for w in re.split(r"[\s,]+", tok.value.strip()) if w]


def parse_security(verb: str, obj: _Token, rest: list[_Token], text: str) -> Command:
    """SET/DELETE/DISPLAY AUTHREC and REFRESH SECURITY (MQ's syntax, for OBJTYPE QUEUE
    and QMGR and principals; GROUP is refused, this product has no groups).

    The command's ``name`` is the PROFILE (empty for none); ``attrs`` hold OBJTYPE,
    PRINCIPAL, AUTHADD and AUTHRMV (lists) and MATCH."""
    from miqm import authz

    if verb == "REFRESH":
        # MQ's forms: REFRESH SECURITY, REFRESH SECURITY(*), TYPE(AUTHSERV) (the
        # default) or TYPE(CONNAUTH) (after ALTER QMGR CONNAUTH: here the change applies
        # at once, and the credentials file is read again either way)
        if obj.word != "SECURITY" or obj.value not in (None, "*"):
            raise MQSCSyntaxError(text[: obj.end], "REFRESH supports SECURITY only")
        for tok in rest:
            if tok.word != "TYPE" or (tok.value or "").upper() not in (
                    "AUTHSERV", "CONNAUTH", "ALL"):
                raise MQSCSyntaxError(text[: tok.end], "REFRESH SECURITY takes only "
                                      "TYPE(AUTHSERV) or TYPE(CONNAUTH)")
        return Command("REFRESH", "SECURITY", text=text)
    if obj.word != "AUTHREC" or obj.value is not None:
        hint = MQ_ONLY_OBJECTS.get(obj.word)
        raise MQSCSyntaxError(text[: obj.end], f"{verb} {obj.word} is not supported"
                              + (f" ({hint})" if hint else "") + f": {verb} AUTHREC is")
    if verb not in ("SET", "DELETE", "DISPLAY"):
        raise MQSCSyntaxError(text[: obj.end], f"{verb} AUTHREC is not valid")
    attrs: dict[str, Any] = {}
    profile = ""
    show: list[str] = []
    for tok in rest:
        seg = text[: tok.end]
        if tok.word == "PROFILE" and tok.value is not None:
            profile = tok.value if tok.quoted else tok.value.upper()
            try:
                if profile.lower() != authz.SELF:
                    authz.check_profile(profile)
            except authz.AuthzError as exc:
                raise MQSCSyntaxError(seg, str(exc)) from None
        elif tok.word == "OBJTYPE" and tok.value is not None:
            value = tok.value.upper()
            if value not in _SEC_OBJTYPES:
                raise MQSCSyntaxError(seg, "OBJTYPE must be QUEUE or QMGR (the objects "
                                      "this queue manager has)")
            attrs["OBJTYPE"] = value
        elif tok.word == "PRINCIPAL" and tok.value is not None:
            principal = tok.value if tok.quoted else tok.value.upper()
            try:
                attrs["PRINCIPAL"] = authz.check_principal(principal)
            except authz.AuthzError as exc:
                raise MQSCSyntaxError(seg, str(exc)) from None
        elif tok.word == "GROUP":
            raise MQSCSyntaxError(seg, "GROUP is not supported: authority records name a "
                                  "PRINCIPAL (a credential's principal)")
        elif tok.word in ("AUTHADD", "AUTHRMV") and verb == "SET":
            attrs[tok.word] = _word_list(tok, text)
        elif tok.word == "MATCH" and verb == "DISPLAY" and tok.value is not None:
            value = tok.value.upper()
            if value not in ("PROFILE", "EXACT", "MEMBERSHIP"):
                raise MQSCSyntaxError(seg, "MATCH must be PROFILE, EXACT or MEMBERSHIP")
            attrs["MATCH"] = "PROFILE" if value == "MEMBERSHIP" else value
        elif tok.word == "SERVCOMP" and tok.value is not None:
            continue  # one authorization service here: any name means it
        elif verb == "DISPLAY" and tok.value is None and tok.word in (
                "ALL", "AUTHLIST", "ENTITY", "ENTTYPE"):
            show.append(tok.word)
        else:
            raise MQSCSyntaxError(seg, f"{tok.word} is not valid on {verb} AUTHREC")
    objtype = attrs.get("OBJTYPE", "")
    if verb in ("SET", "DELETE"):
        if not objtype:
            raise MQSCSyntaxError(text, f"{verb} AUTHREC needs OBJTYPE(QUEUE) or OBJTYPE(QMGR)")
        if "PRINCIPAL" not in attrs:
            raise MQSCSyntaxError(text, f"{verb} AUTHREC needs PRINCIPAL('name')")
        if objtype == "QUEUE" and not profile:
            raise MQSCSyntaxError(text, f"{verb} AUTHREC OBJTYPE(QUEUE) needs PROFILE(name)")
    if verb == "SET":
        if "AUTHADD" not in attrs and "AUTHRMV" not in attrs:
            raise MQSCSyntaxError(text, "SET AUTHREC needs AUTHADD(...) or AUTHRMV(...)")
        for key in ("AUTHADD", "AUTHRMV"):
            try:
                authz.expand(objtype, attrs.get(key, ()))
            except authz.AuthzError as exc:
                raise MQSCSyntaxError(text, str(exc)) from None
        both = sorted(set(attrs.get("AUTHADD", ())) & set(attrs.get("AUTHRMV", ())))
        if both:  # which wins? the record would end up without it, silently
            raise MQSCSyntaxError(text, f"{', '.join(both)} is both in AUTHADD and in "
                                  "AUTHRMV: name each authority once")
    return Command(verb, "AUTHREC", profile, attrs, show=tuple(show) or ("ALL",), text=text)


def authrec_display(rec: dict[str, Any]) -> list[str]:
    """AMQ8864I and one authority record, as runmqsc shows it."""
    auths = list(rec.get("auths") or ()) or ["NONE"]
    pairs = [("PROFILE", rec["profile"]), ("ENTITY", rec["principal"]),
             ("ENTTYPE", "PRINCIPAL"), ("OBJTYPE", rec["objtype"])]
    return [amq.line("AMQ8864", severity=True), *attr_columns(pairs),
            "   AUTHLIST(" + ",".join(auths) + ")"]


# -- output ------------------------------------------------------------------------------

# runmqsc's lines, from the message table with MQ's severity letter (AMQ8006I: ...)
MSG_CREATED = amq.line("AMQ8006", severity=True)
MSG_DELETED = amq.line("AMQ8007", severity=True)
MSG_CHANGED = amq.line("AMQ8008", severity=True)
MSG_QMGR_CHANGED = amq.line("AMQ8005", severity=True)
MSG_PING = amq.line("AMQ8415", severity=True)
MSG_DISPLAY_QUEUE = amq.line("AMQ8409", severity=True)
MSG_DISPLAY_QMGR = amq.line("AMQ8408", severity=True)
MSG_DISPLAY_QMSTATUS = amq.line("AMQ8705", severity=True)
MSG_SYNTAX = amq.line("AMQ8405", severity=True)
MSG_CLEARED = amq.line("AMQ8022", severity=True)
MSG_DISPLAY_QSTATUS = amq.line("AMQ8450", severity=True)
MSG_DISPLAY_CONN = amq.line("AMQ8276", severity=True)
MSG_DISPLAY_LSSTATUS = amq.line("AMQ8631", severity=True)
MSG_CONN_STOPPED = amq.line("AMQ1010", severity=True)
MSG_DISPLAY_LOG = amq.line("AMQ1011", severity=True)


def not_found(name: str) -> str:
    """MQ's line for a missing object."""
    return amq.line("AMQ8147", severity=True, name=name)


def already_exists() -> str:
    """MQ's line for DEFINE of an existing object without REPLACE."""
    return amq.line("AMQ8150", severity=True)


def echo(number: int, text: str) -> str:
    """The numbered echo of a command: ``     1 : DEFINE QLOCAL(Q1)``."""
    return f"{number:>6} : {one_line(_shortened(text))}"


def header(qmgr: str) -> str:
    """The first line runmqsc prints."""
    return f"Starting MQSC for queue manager {qmgr}."


def display_value(key: str, value: Any) -> str:
    """A store value as MQSC shows it (booleans as YES/NO or ENABLED/DISABLED)."""
    if isinstance(value, bool):
        if key in ("PUT", "GET"):
            return "ENABLED" if value else "DISABLED"
        return "YES" if value else "NO"
    if value is None:
        return " "
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    text = str(value)
    return text if text else " "


def attr_columns(pairs: list[tuple[str, Any]], width: int = 40) -> list[str]:
    """``KEY(value)`` items two to a line, indented three and padded to ``width`` as
    runmqsc lays them out; an item wider than a column gets a line of its own."""
    items = [f"{k}({display_value(k, v)})" for k, v in pairs]
    lines: list[str] = []
    i = 0
    while i < len(items):
        first = items[i]
        if len(first) >= width or i + 1 >= len(items):
            lines.append("   " + first)
            i += 1
            continue
        lines.append("   " + first.ljust(width) + items[i + 1])
        i += 2
    return lines


def queue_display(attrs: dict[str, Any], show: tuple[str, ...]) -> list[str]:
    """AMQ8409I and the attribute lines for one queue; ``attrs`` keyed by MQSC names."""
    norm = {k.upper(): v for k, v in attrs.items()}
    name = norm.pop("QUEUE", norm.pop("NAME", ""))
    norm.pop("TYPE", None)
    pairs: list[tuple[str, Any]] = [("QUEUE", name), ("TYPE", "QLOCAL")]
    if "ALL" in show:
        keys = [k for k in QUEUE_DISPLAY_ORDER if k in norm]
        keys += sorted(k for k in norm if k not in QUEUE_DISPLAY_ORDER)
    else:
        keys = [k for k in QUEUE_DISPLAY_ORDER if k in show and k in norm]
    pairs += [(k, norm[k]) for k in keys]
    return [MSG_DISPLAY_QUEUE, *attr_columns(pairs)]


def qmgr_display(qmgr: str, attrs: dict[str, Any], show: tuple[str, ...]) -> list[str]:
    """AMQ8408I and the queue manager's attributes."""
    norm = {k.upper(): v for k, v in attrs.items() if k.upper() != "QMNAME"}
    keys = sorted(norm) if "ALL" in show else [k for k in show if k in norm]
    return [MSG_DISPLAY_QMGR, *attr_columns([("QMNAME", qmgr), *((k, norm[k]) for k in keys)])]


#: QMSTATUS fields shown first, in MQ's order; anything else the store reports follows.
QMSTATUS_ORDER = ("QMNAME", "TYPE", "STATUS", "STANDBY", "STARTDA", "STARTTI", "CHINIT",
                  "CMDSERV", "CONNS", "CURRLOG", "RECLOG", "MEDIALOG", "ARCHLOG", "LOGPATH",
                  "INSTANCE", "INSTANCES", "LOGUTIL")


def qmstatus_display(qmgr: str, status: dict[str, Any], show: tuple[str, ...]) -> list[str]:
    """AMQ8705I and the DISPLAY QMSTATUS fields."""
    # the store also carries the AMQ7467/AMQ7468 texts for the error log: not attributes
    norm = {k.upper(): v for k, v in status.items() if not k.upper().startswith("AMQ")}
    norm["QMNAME"] = qmgr
    norm.setdefault("TYPE", "RESTART")
    norm.setdefault("STATUS", "RUNNING")
    keys = [k for k in QMSTATUS_ORDER if k in norm]
    keys += sorted(k for k in norm if k not in QMSTATUS_ORDER)
    if "ALL" not in show:
        keys = [k for k in keys if k in ("QMNAME", "TYPE", "STATUS") or k in show]
    return [MSG_DISPLAY_QMSTATUS, *attr_columns([(k, norm[k]) for k in keys])]



def status_display(message: str, first: list[tuple[str, Any]], fields: dict[str, Any],
                   order: tuple[str, ...], show: tuple[str, ...]) -> list[str]:
    """A status display: ``message``, the identifying ``first`` pairs, then the fields
    asked for (``ALL``: every one in ``order``, then any other the server gave, sorted)."""
    norm = {k.upper(): v for k, v in fields.items()}
    for k, _v in first:
        norm.pop(k, None)
    if "ALL" in show:
        keys = [k for k in order if k in norm]
        keys += sorted(k for k in norm if k not in order)
    else:
        keys = [k for k in order if k in show and k in norm]
    return [message, *attr_columns([*first, *((k, norm[k]) for k in keys)])]


def object_display(kind: str, attrs: dict[str, Any], show: tuple[str, ...]) -> list[str]:
    """AMQ8409I and the attributes of a QALIAS or QMODEL."""
    order = ALIAS_DISPLAY_ORDER if kind == "QALIAS" else MODEL_DISPLAY_ORDER
    norm = {k.upper(): v for k, v in attrs.items()}
    name = norm.pop("QUEUE", "")
    norm.pop("TYPE", None)
    return status_display(MSG_DISPLAY_QUEUE, [("QUEUE", name), ("TYPE", kind)], norm, order,
                          tuple(k for k in show if k not in ("QUEUE", "TYPE")) or
                          (("ALL",) if "ALL" in show else ("-",)))


def mq_date_time(t: float | None) -> tuple[str, str]:
    """A wall-clock time as MQSC shows it: ``("2026-11-25", "01.02.03")``; blanks for
    None or 0 (never happened)."""
    import datetime as _dt

    if not t:
        return "", ""
    d = _dt.datetime.fromtimestamp(t, _dt.UTC)
    return d.strftime("%Y-%m-%d"), d.strftime("%H.%M.%S")


def syntax_error_lines(err: MQSCSyntaxError) -> list[str]:
    """What runmqsc prints for a syntax error (MQ's AMQ8405I, the segment, the reason)."""
    return [MSG_SYNTAX, one_line(_shortened(err.segment)), f"({one_line(err.reason)})"]


def _count(n: int, one: str, many: str) -> str:
    return one if n == 1 else many.format(n=n)


def trailer(read: int, syntax_errors: int, failed: int) -> list[str]:
    """runmqsc's closing summary lines, in MQ's wording."""
    lines = ["No MQSC commands read." if read == 0 else
             _count(read, "One MQSC command read.", "{n} MQSC commands read.")]
    if syntax_errors == 0:
        lines.append("No commands have a syntax error.")
    else:
        lines.append(_count(syntax_errors, "1 command has a syntax error.",
                            "{n} commands have a syntax error."))
    if failed == 0:
        lines.append("All valid MQSC commands were processed.")
    else:
        lines.append(_count(failed, "One valid MQSC command could not be processed.",
                            "{n} valid MQSC commands could not be processed."))
    return lines
