"""``setmqaut``, ``dspmqaut`` and ``dmpmqaut``: authority records from the command line,
as MQ has them.

::

    setmqaut -m QMgr -t queue|qmgr [-n Profile] -p Principal (+auth|-auth ...) | -remove
    dspmqaut -m QMgr -t queue|qmgr [-n ObjectName] -p Principal
    dmpmqaut -m QMgr [-n Profile [-x]] [-l] [-t queue|qmgr] [-p Principal]

setmqaut keeps records for any principal, as MQ does, but warns (AMQ1123, on stderr,
exit 0) when the data directory's credentials file gives the principal no secret, so it
cannot connect until ``miqm credential -m QMgr --add Principal``.

Both talk to the active instance like runmqsc (bindings mode with the data directory's
credential, or ``MIQM_CONNECTION`` + ``MIQM_CREDENTIAL``) and run the equivalent MQSC
(``SET AUTHREC``, ``DELETE AUTHREC``, ``DISPLAY AUTHREC ... MATCH(PROFILE)``), so the
server checks the caller's own authority (CHG, DSP on the queue manager) as for MQSC.
Profile and principal keep their case, as MQ's control commands do. Authorities are
MQ's names: ``+put -get +all +alladm +allmqi +none`` ... The argument parsing is done
here by hand: ``-get`` is an authority, not an option.

Exit codes are MQ's: 0 done, 36 bad arguments, 40 queue manager not available, 71 an
unexpected failure (or refused: AMQ7077); a command the queue manager answers with a
numbered error exits with that number's code in docs/messages.md (AMQ1122, no such
record to remove: 10); 133 dspmqaut on a queue that does not exist (AMQ7085; a generic
profile is not an object: setmqaut takes it, dspmqaut refuses it with 36); 146 object
name missing, 147 object type
missing, 148 bad object type, 149 principal missing, 150 no authorities given, 151 a
bad authority.
"""

from __future__ import annotations

import re
import sys
from typing import NoReturn

from miqm import amq, authz, mqsc
from miqm.cli.common import error_line, line_number, run

_TYPES = {"queue": authz.QUEUE, "q": authz.QUEUE, "qmgr": authz.QMGR}

SETMQAUT_USAGE = ("usage: setmqaut -m QMgr -t queue|qmgr [-n Profile] -p Principal "
                  "(+auth|-auth ...) | -remove")
DSPMQAUT_USAGE = "usage: dspmqaut -m QMgr -t queue|qmgr [-n ObjectName] -p Principal"

HELP = """{usage}

  -m QMgr        queue manager (its active instance, reached like runmqsc)
  -t ObjectType  queue (or q) or qmgr
  -n Name        queue name or generic profile (? * **); not for qmgr
  -p Principal   the principal (a credential's name: miqm credential --add NAME)
  -g Group       not supported: this product has no groups
{extra}  -?, -h, --help show this help

Authorities: browse chg clr connect crt dlt dsp get inq put set, and all alladm allmqi
none.

"""


def _help(text: str) -> NoReturn:
    """Print a command's help with the environment it reads, and exit 0."""
    from miqm.cli.common import environment_help

    env = "\n".join(x for x in environment_help().splitlines() if x != "\b")
    sys.stdout.write(text + env + "\n")
    sys.exit(0)


DMPMQAUT_HELP = """{usage}

  -m QMgr        queue manager (its active instance, reached like runmqsc)
  -n Profile     the records whose profiles apply to this name (-x: this profile only)
  -t ObjectType  queue (or q) or qmgr only
  -p Principal   the records of this principal only
  -l             the profile names only
  -g Group       not supported: this product has no groups
  -?, -h, --help show this help

"""


def _need_qmgr(prog: str, opts: dict[str, str], usage: str) -> None:
    """Exit 36 on what every authority command refuses: groups, or no -m QMgr."""
    if "g" in opts:
        _fail(f"{prog}: -g (groups) is not supported: name a principal with -p.", 36)
    if "m" not in opts:
        _fail(f"{prog}: -m QMgr is required. {usage}", 36)


def _fail(line: str, code: int) -> NoReturn:
    sys.stderr.write(line.rstrip() + "\n")
    sys.exit(code)


def _parse(argv: list[str], prog: str, usage: str, extra: str,
           authorities: bool) -> tuple[dict[str, str], list[tuple[str, str]], bool]:
    """(options, [(+|-, authority)], remove) from the command line; exits on bad input."""
    opts: dict[str, str] = {}
    auths: list[tuple[str, str]] = []
    remove = False
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-h", "-?", "--help"):
            _help(HELP.format(usage=usage, extra=extra))
        if arg in ("-m", "-t", "-n", "-p", "-g", "-s"):
            if i + 1 >= len(argv):
                _fail(f"{prog}: {arg} needs a value. {usage}", 36)
            if arg[1] in opts:  # '-p app1 -p app2' set app2's record alone
                _fail(f"{prog}: {arg} is given twice: give it once (one principal, one "
                      f"object per command). {usage}", 36)
            opts[arg[1]] = argv[i + 1]
            i += 2
            continue
        if authorities and arg == "-remove":
            remove = True
        elif authorities and len(arg) > 1 and arg[0] in "+-" and arg[1:].isalpha():
            auths.append((arg[0], arg[1:].upper()))
        else:
            _fail(f"{prog}: unexpected argument {arg!r}. {usage}", 36)
        i += 1
    _need_qmgr(prog, opts, usage)
    if "t" not in opts:
        _fail(f"{prog}: -t ObjectType is required (queue or qmgr). {usage}", 147)
    if opts["t"].lower() not in _TYPES:
        _fail(f"{prog}: -t {opts['t']} is not an object type here: use queue or qmgr.", 148)
    if "p" not in opts:
        _fail(f"{prog}: -p Principal is required. {usage}", 149)
    objtype = _TYPES[opts["t"].lower()]
    if objtype == authz.QUEUE and not opts.get("n"):
        _fail(f"{prog}: -n Name is required for -t queue. {usage}", 146)
    if objtype == authz.QMGR and opts.get("n"):
        _fail(f"{prog}: -n is not valid with -t qmgr (the queue manager is -m).", 36)
    try:
        authz.check_principal(opts["p"])
        if objtype == authz.QUEUE:
            authz.check_profile(opts["n"])
    except authz.AuthzError as exc:
        code = 36 if "profile" in str(exc) else 1
        _fail(amq.line("AMQ7026", detail=str(exc)) if code == 1
              else f"{prog}: {exc}", code)
    opts["t"] = objtype
    return opts, auths, remove


def _valid_authority(objtype: str, name: str) -> bool:
    """True if ``name`` is an authority (or group) of ``objtype``."""
    try:
        authz.expand(objtype, [name])
    except authz.AuthzError:
        return False
    return True


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _call(qmgr: str, text: str) -> tuple[bool, list[str]]:
    """Run one MQSC command on the active instance: (failed, its lines). Exits when the
    queue manager cannot be reached."""
    from miqm.errors import MiqmError
    from miqm.net.client import connect

    cmd = mqsc.parse_command(text)
    try:
        with connect(qmgr) as conn:
            reply = conn.call("mqsc", command=cmd.to_dict())
    except MiqmError as exc:
        mqrc = getattr(exc, "mqrc", None)
        if mqrc == 2035:  # the caller may not connect (or its credential is refused)
            _fail(f"{amq.line('AMQ7077')} {exc.user_line()}", 71)
        line, code = error_line(exc)  # an ending instance is AMQ8146 (exit 40) there
        _fail(line, 40 if mqrc in (2059, 2543) else code or 71)
    return bool(reply.get("failed")), [str(x) for x in reply.get("lines", [])]


def _send(qmgr: str, text: str, prog: str) -> list[str]:
    """Run one MQSC command on the active instance; its lines. Exits on failure."""
    failed, lines = _call(qmgr, text)
    if failed:
        first = lines[0] if lines else ""
        if first.startswith("AMQ8135"):
            _fail(f"{amq.line('AMQ7077')} {first.split(':', 1)[1].strip()}", 71)
        _fail(f"{prog}: {first}", amq.exit_code(line_number(first)) or 71)
    return lines


def setmqaut(argv: list[str]) -> None:
    """The setmqaut command (see the module docstring)."""
    prog = "setmqaut"
    opts, auths, remove = _parse(argv, prog, SETMQAUT_USAGE,
                                 "  -remove        delete the authority record\n", True)
    objtype = opts["t"]
    profile = f" PROFILE({_quote(opts['n'])})" if objtype == authz.QUEUE else ""
    head = f"AUTHREC{profile} OBJTYPE({objtype}) PRINCIPAL({_quote(opts['p'])})"
    if remove:
        if auths:
            _fail(f"{prog}: -remove takes no authorities. {SETMQAUT_USAGE}", 36)
        _send(opts["m"], f"DELETE {head}", prog)
    else:
        if not auths:
            _fail(f"{prog}: no authorities given (+put, -get, ...). {SETMQAUT_USAGE}", 150)
        add = [a for sign, a in auths if sign == "+"]
        rmv = [a for sign, a in auths if sign == "-"]
        try:
            authz.expand(objtype, add + rmv)
        except authz.AuthzError:
            bad = next(f"{sign}{a.lower()}" for sign, a in auths
                       if not _valid_authority(objtype, a))
            valid = " ".join(f"+{a.lower()}" for a in (*authz.AUTHORITIES[objtype],
                                                       *authz.GROUPS))
            _fail(f"{prog}: {bad} is not an authority of -t {objtype.lower()}: use {valid}.",
                  151)
        both = sorted(set(add) & set(rmv))
        if both:
            _fail(f"{prog}: +{both[0].lower()} and -{both[0].lower()} both given: name each "
                  "authority once.", 151)
        parts = [f"SET {head}"]
        if add:
            parts.append(f"AUTHADD({','.join(add)})")
        if rmv:
            parts.append(f"AUTHRMV({','.join(rmv)})")
        _send(opts["m"], " ".join(parts), prog)
    sys.stdout.write("The setmqaut command completed successfully.\n")
    warning = None if remove else no_credential_warning(opts["m"], opts["p"])
    if warning:
        sys.stderr.write(warning + "\n")


def no_credential_warning(qmgr: str, principal: str) -> str | None:
    """AMQ1123 when the data directory's credentials file (``miqm credential``) has no
    secret for ``principal``: its authority records are kept, as MQ keeps them for any
    principal, but it cannot connect. None when it has one, when the queue manager has
    no credentials file (its listener accepts every client), or when the data directory
    cannot be read from here (setmqaut over MIQM_CONNECTION from another host)."""
    from lockfs.errors import LockFsError
    from lockfs.volume import open_volume
    from miqm.errors import MiqmError
    from miqm.net import auth
    from miqm.paths import find

    try:
        volume = open_volume(find(qmgr).data_path)
        try:
            principals = auth.read(volume)
        finally:
            volume.close()
    except (MiqmError, LockFsError, OSError):
        return None
    if principals is None or principal in principals:
        return None
    return amq.line("AMQ1123", qmgr=qmgr, principal=principal)


def effective(lines: list[str]) -> tuple[str | None, list[str]]:
    """(profile, authorities) of the most specific record in DISPLAY AUTHREC output."""
    best: tuple[tuple[int, tuple[int, ...], str], str, list[str]] | None = None
    profile = ""
    for line in lines:
        m = re.search(r"\bPROFILE\(([^)]*)\)", line)
        if m:
            profile = m.group(1)
        m = re.search(r"\bAUTHLIST\(([^)]*)\)", line)
        if m:
            auths = [a for a in m.group(1).split(",") if a and a != "NONE"]
            key = authz.specificity(profile)
            if best is None or key > best[0]:
                best = (key, profile, auths)
    return (None, []) if best is None else (best[1], best[2])


def _require_queue(qmgr: str, name: str) -> None:
    """Exit with AMQ7085 (133, MQ's 'unknown object name') when no queue (local, alias or
    model) called ``name`` exists; a caller who may not display it goes on to the
    authority records, which the queue manager checks on their own."""
    failed, lines = _call(qmgr, f"DISPLAY QUEUE({_quote(name)})")
    if failed and lines and line_number(lines[0]) == "AMQ8147":
        _fail(amq.line("AMQ7085", name=name, objtype="queue"), amq.exit_code("AMQ7085"))


def dspmqaut(argv: list[str]) -> None:
    """The dspmqaut command (see the module docstring)."""
    prog = "dspmqaut"
    opts, _auths, _remove = _parse(argv, prog, DSPMQAUT_USAGE, "", False)
    objtype = opts["t"]
    name = opts.get("n") or opts["m"]
    if objtype == authz.QUEUE and authz.is_generic(name):
        _fail(f"{prog}: -n names one object; '{name}' is a generic profile (DISPLAY "
              "AUTHREC in runmqsc lists profiles).", 36)
    if objtype == authz.QUEUE:
        _require_queue(opts["m"], name)
    profile = f" PROFILE({_quote(name)})" if objtype == authz.QUEUE else ""
    lines = _send(opts["m"], f"DISPLAY AUTHREC{profile} OBJTYPE({objtype}) "
                  f"PRINCIPAL({_quote(opts['p'])}) MATCH(PROFILE)", prog)
    auths = effective(lines)[1]
    if opts["p"] == authz.PRIVILEGED:  # every authority, whatever the records say
        auths = list(authz.AUTHORITIES[objtype])
    sys.stdout.write(f"Entity {opts['p']} has the following authorizations for object "
                     f"{name}:\n")
    for a in auths:
        sys.stdout.write(f"\t{a.lower()}\n")


DMPMQAUT_USAGE = ("usage: dmpmqaut -m QMgr [-n Profile [-x]] [-l] [-t queue|qmgr] "
                  "[-p Principal]")


def dmpmqaut(argv: list[str]) -> None:
    """The dmpmqaut command: the authority records, as MQ dumps them (``profile:``,
    ``object type:``, ``entity:``, ``entity type:``, ``authority:``), for the audit or
    the backup of a queue manager's security. ``-n`` the profiles that apply to a name
    (``-x``: that profile only), ``-t`` and ``-p`` filter, ``-l`` lists profile names."""
    prog = "dmpmqaut"
    opts: dict[str, str] = {}
    flags: set[str] = set()
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-h", "-?", "--help"):
            _help(DMPMQAUT_HELP.format(usage=DMPMQAUT_USAGE))
        if arg in ("-m", "-n", "-t", "-p", "-g", "-s"):
            if i + 1 >= len(argv):
                _fail(f"{prog}: {arg} needs a value. {DMPMQAUT_USAGE}", 36)
            if arg[1] in opts:
                _fail(f"{prog}: {arg} is given twice. {DMPMQAUT_USAGE}", 36)
            opts[arg[1]] = argv[i + 1]
            i += 2
            continue
        if arg in ("-l", "-x", "-e"):
            flags.add(arg)
        else:
            _fail(f"{prog}: unexpected argument {arg!r}. {DMPMQAUT_USAGE}", 36)
        i += 1
    _need_qmgr(prog, opts, DMPMQAUT_USAGE)
    if "-x" in flags and "n" not in opts:
        _fail(f"{prog}: -x needs -n Profile. {DMPMQAUT_USAGE}", 36)
    parts = ["DISPLAY AUTHREC"]
    if "t" in opts:
        if opts["t"].lower() not in _TYPES:
            _fail(f"{prog}: -t {opts['t']} is not an object type here: use queue or qmgr.",
                  148)
        parts.append(f"OBJTYPE({_TYPES[opts['t'].lower()]})")
    try:
        if "n" in opts:
            authz.check_profile(opts["n"])
            parts.append(f"PROFILE({_quote(opts['n'])})")
            parts.append("MATCH(EXACT)" if "-x" in flags else "MATCH(PROFILE)")
        if "p" in opts:
            authz.check_principal(opts["p"])
            parts.append(f"PRINCIPAL({_quote(opts['p'])})")
    except authz.AuthzError as exc:
        _fail(f"{prog}: {exc}", 36)
    lines = _send(opts["m"], " ".join(parts), prog)
    records = _records(lines)
    if "-l" in flags:
        for profile in dict.fromkeys(f"profile:     {r['PROFILE']}, object type: "
                                     f"{r['OBJTYPE'].lower()}" for r in records):
            sys.stdout.write(profile + "\n")
        return
    for r in records:
        auths = [a.lower() for a in r["AUTHLIST"].split(",") if a]
        sys.stdout.write(f"profile:     {r['PROFILE']}\n"
                         f"object type: {r['OBJTYPE'].lower()}\n"
                         f"entity:      {r['ENTITY']}\n"
                         f"entity type: {r['ENTTYPE'].lower()}\n"
                         f"authority:   {' '.join(auths) or 'none'}\n")


def _records(lines: list[str]) -> list[dict[str, str]]:
    """The records of DISPLAY AUTHREC output, as {PROFILE, ENTITY, ENTTYPE, OBJTYPE,
    AUTHLIST}."""
    out: list[dict[str, str]] = []
    for line in lines:
        if line.startswith("AMQ8864"):
            out.append({})
        elif out:
            out[-1].update(re.findall(r"\b([A-Z]+)\(([^)]*)\)", line))
    return [r for r in out if {"PROFILE", "ENTITY", "OBJTYPE", "AUTHLIST"} <= set(r)]


def dmpmqaut_main() -> None:
    """Console-script entry point."""
    run(lambda: dmpmqaut(sys.argv[1:]))


def setmqaut_main() -> None:
    """Console-script entry point."""
    run(lambda: setmqaut(sys.argv[1:]))


def dspmqaut_main() -> None:
    """Console-script entry point."""
    run(lambda: dspmqaut(sys.argv[1:]))
