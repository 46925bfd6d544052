"""``runmqsc [-e] [-v] [-c] [-u UserId] QMgr``: run MQSC commands from stdin against a
queue manager (MQ's -w, -x, -m and -n are refused with what to do instead).

Commands are parsed here (miqm.mqsc) and executed by the active instance (op ``mqsc``).
Exit codes are MQ's: 0 every command processed, 10 some command had a syntax error or
failed, 20 nothing could be run (the queue manager is not available). ``-v`` only checks
the syntax and needs no running queue manager; ``-e`` does not echo the commands; ``-c``
connects as a client through the listener (``MIQM_CONNECTION``, ``MIQM_CREDENTIAL``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import typer

from miqm.cli.common import HELP_OPTIONS, error_line, make_app, run_typer

app = make_app("Run MQSC commands from stdin.")


@app.command(context_settings={"allow_extra_args": True, "help_option_names": HELP_OPTIONS})
def runmqsc(
    ctx: typer.Context,
    qmgr: str = typer.Argument("", metavar="QMgr", help="queue manager name (miqm has no "
                               "default queue manager: name it)"),
    no_echo: bool = typer.Option(False, "-e", help="do not echo the commands"),
    verify: bool = typer.Option(False, "-v", help="check syntax only; run nothing"),
    client: bool = typer.Option(False, "-c", help="client mode: connect through the "
                                "listener at MIQM_CONNECTION with MIQM_CREDENTIAL"),
    user: str = typer.Option("", "-u", metavar="UserId", help="connect as this principal: "
                             "its secret is asked for, or read from the first line of "
                             "stdin when stdin is not a terminal (as MQ's runmqsc -u)"),
    wait: int = typer.Option(0, "-w", metavar="WaitTime", hidden=True,
                             help="MQ's indirect mode: refused (see docs/mqsc.md)"),
    indirect_x: bool = typer.Option(False, "-x", hidden=True, help="MQ's indirect mode"),
    local_qmgr: str = typer.Option("", "-m", metavar="LocalQMgrName", hidden=True,
                                   help="MQ's indirect mode"),
    no_qmgr: bool = typer.Option(False, "-n", hidden=True, help="MQ's CCDT mode"),
    script: str = typer.Option("", "-f", metavar="Filepath", help="read the commands "
                               "from this file instead of stdin (MQ 9.4's -f; a path or "
                               "a file:// URI)"),
) -> int:
    """Run MQSC commands read from stdin."""
    from miqm import mqsc
    from miqm.errors import MiqmError, NetError
    from miqm.paths import check_qmgr_name

    # arguments after QMgr (allow_extra_args keeps them out of the usage line)
    refused = _refused_mode(qmgr, wait, indirect_x, local_qmgr, no_qmgr) or _extra(
        qmgr, list(ctx.args))
    if refused:
        typer.echo(f"runmqsc: {refused}", err=True)
        return 20
    check_qmgr_name(qmgr)
    source = _stdin_lines()
    credential = None
    if user:
        credential = _user_credential(user, source)
        if credential is None:
            return 20
    if script:
        try:
            source = _file_lines(script)
        except OSError as exc:
            typer.echo(f"runmqsc: -f {script}: {exc.strerror or exc}: name a readable file "
                       "of MQSC commands (or give them on stdin).", err=True)
            return 20
    conn = None
    if not verify:
        from miqm.net.client import connect

        try:
            if client:
                conn = _client_connection(qmgr, credential)
            else:
                conn = connect(qmgr, credential=credential)
        except MiqmError as exc:
            if user and getattr(exc, "amq", None) == "AMQ5534":
                # the client's advice is about MIQM_CREDENTIAL, which -u does not use
                typer.echo(_bad_password_line(user, qmgr), err=True)
                return 20
            typer.echo(error_line(exc)[0], err=True)
            return 20
    out: list[str] = [mqsc.header(qmgr), ""]

    def emit(lines: list[str]) -> None:
        try:
            for line in lines:
                sys.stdout.write(line + "\n")
            # each answer as soon as it is known: a terminal user or a program driving
            # runmqsc through a pipe waits for it before writing the next command
            sys.stdout.flush()
        except BrokenPipeError:
            raise  # the reader went away (| head): ended quietly, as before
        except OSError as exc:
            raise _OutputFailed(exc) from None

    read = syntax = failed = sent = 0
    try:
        emit(out)
        number = 0
        for kind, text in mqsc.iter_input(source):
            if kind == "comment":  # echoed as MQ's runmqsc does: '       : * text'
                if not no_echo:
                    emit([mqsc.echo_comment(text)])
                continue
            number += 1
            lines = [] if no_echo else [mqsc.echo(number, text)]
            if kind == "toolong":
                read += 1
                syntax += 1
                emit(mqsc.too_long_lines(None if no_echo else number, text))
                continue
            if kind == "unfinished":  # the input ended inside a continued command
                read += 1
                syntax += 1
                emit(lines + mqsc.syntax_error_lines(
                    mqsc.MQSCSyntaxError(text, mqsc.UNFINISHED)))
                continue
            try:
                cmd = mqsc.parse_command(text)
            except mqsc.MQSCSyntaxError as err:
                read += 1
                syntax += 1
                emit(lines + mqsc.syntax_error_lines(err))
                continue
            if cmd.verb == "END":
                emit(lines)
                break
            read += 1
            if conn is None:  # -v: syntax checked, nothing run
                emit(lines)
                continue
            if _gone(conn):
                # the instance went away after the last answer (it ended, or failed
                # over): this command was not sent, so nothing of it is in doubt
                failed += 1
                emit([*lines, _lost_line(qmgr, 2009, sent=False)])
                break
            sent += 1
            try:
                reply = conn.call("mqsc", command=cmd.to_dict())
            except NetError as exc:
                failed += 1
                if exc.mqrc in (2009, 2059, 2543):  # the connection is gone: stop here
                    emit([*lines, _lost_line(qmgr, exc.mqrc, sent=True)])
                    break
                emit([*lines, exc.user_line()])
                continue
            if reply.get("failed"):
                failed += 1
            # a WHERE filter is applied here, to the objects the display returned
            emit(lines + mqsc.apply_where(cmd, [str(x) for x in reply.get("lines", [])]))
        emit(mqsc.trailer(read, syntax, failed))
    except _OutputFailed as exc:
        _drop_stdout()
        done = ("no command was sent to the queue manager" if sent == 0 else
                f"{_sent_words(sent)} sent to the queue manager before it stopped, the "
                "last perhaps without its answer shown; check with DISPLAY")
        typer.echo(f"runmqsc: its output could not be written ({exc.reason}): {done}. "
                   "Make room, or write the output elsewhere, and run the rest again.",
                   err=True)
        return 20
    finally:
        if conn is not None:
            conn.close()
    return 10 if (syntax or failed) else 0


class _OutputFailed(Exception):
    """stdout refused runmqsc's output (a full disk, an I/O error): it said 'No space
    left on device: . Check the path and permissions.' (exit 71), not whether the
    commands had run."""

    def __init__(self, exc: OSError) -> None:
        super().__init__(exc.strerror or str(exc))
        self.reason = exc.strerror or str(exc)


def _sent_words(n: int) -> str:
    return "1 command was" if n == 1 else f"{n} commands were"


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's flush at exit does not
    fail again with a second message."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _refused_mode(qmgr: str, wait: int, indirect_x: bool, local_qmgr: str,
                  no_qmgr: bool) -> str:
    """Why MQ's flags for what miqm has no counterpart of are refused ('' if none is
    given): indirect mode (``-w``, ``-x``, ``-m``: commands sent over channels through a
    local queue manager), ``-n`` (CCDT definitions without a queue manager), and no
    QMgr (MQ's default queue manager). They were click's 'No such option: -w' (exit 2)
    or 'Missing argument', saying nothing of what to do instead."""
    if wait or indirect_x or local_qmgr:
        return ("indirect mode (-w, -x, -m) is not supported: miqm has no channels "
                "between queue managers. Run runmqsc QMgr on a host of the queue manager, "
                "or runmqsc -c QMgr with MIQM_CONNECTION from any host.")
    if no_qmgr:
        return ("-n (client channel definitions without a queue manager) is not "
                "supported: a client names its queue manager's addresses in "
                "MIQM_CONNECTION (docs/client.md).")
    if not qmgr:
        return ("name the queue manager (runmqsc QMgr): miqm has no default queue "
                "manager. dspmq lists those this host knows.")
    return ""


def _extra(qmgr: str, extra: list[str]) -> str:
    """Why arguments after QMgr are refused ('' if there are none): runmqsc reads its
    commands from stdin, as MQ's does; 'runmqsc QM1 script.mqsc' said only 'Got
    unexpected extra argument'."""
    if not extra:
        return ""
    return (f"unexpected argument '{extra[0]}' after the queue manager name: runmqsc reads "
            f"its commands from stdin (runmqsc {qmgr} < {extra[0]})")


def _bad_password_line(user: str, qmgr: str) -> str:
    """MQ's AMQ5534 for ``-u UserId`` with a secret the queue manager refused, saying
    where runmqsc read it (the client's line said to set MIQM_CREDENTIAL, which -u does
    not use)."""
    from miqm import amq

    where = "at the prompt" if sys.stdin.isatty() else "as the first line of stdin"
    return (f"{amq.line('AMQ5534', severity=True, principal=user)} The password read "
            f"{where} is not the secret of principal '{user}' on queue manager '{qmgr}' "
            f"(or there is no such principal): give the one 'miqm credential -m {qmgr} "
            f"--add {user}' printed (--rotate makes a new one).")


def _user_credential(user: str, source: Iterator[str]) -> str | None:
    """``-u UserId``: the credential ``user:secret``, the secret asked for on a terminal
    or, as MQ's runmqsc does, read from the first line of stdin (never echoed, never
    parsed as a command); None, with one line on stderr, when the name cannot be one."""
    import getpass

    from miqm import authz

    try:
        authz.check_principal(user)
    except authz.AuthzError as exc:
        typer.echo(f"runmqsc: -u {exc}", err=True)
        return None
    if sys.stdin is not None and sys.stdin.isatty():
        secret = getpass.getpass("Enter password: ")
    else:
        first = next(source, None)  # None: stdin closed (<&-) or empty
        if first is None:
            # it was sent as an empty password and refused as a wrong one (AMQ5534), or,
            # with stdin closed, an AMQ6184
            typer.echo(f"runmqsc: -u {user}: no password was read, stdin is empty: give "
                       f"{user}'s secret as the first line of stdin (printf '%s\\n' "
                       f"\"$SECRET\" | cat - script.mqsc | runmqsc -u {user} QMgr).",
                       err=True)
            return None
        secret = first.rstrip("\r\n")
    return f"{user}:{secret}"


def _gone(conn: Any) -> bool:
    """Whether the connection is known to be broken before a command is sent on it (the
    instance ended or failed over after the last answer); a connection object that
    cannot say is taken as open."""
    peer_closed = getattr(conn, "peer_closed", None)
    return getattr(conn, "connected", True) is False or bool(
        peer_closed is not None and peer_closed())


#: the reason codes with which runmqsc stops, by name
_LOST = {2009: "MQRC_CONNECTION_BROKEN", 2059: "MQRC_Q_MGR_NOT_AVAILABLE",
         2543: "MQRC_STANDBY_Q_MGR"}


def _lost_line(qmgr: str, mqrc: int, *, sent: bool) -> str:
    """runmqsc's line when the queue manager went away (its instance ended or failed
    over): MQ's AMQ8146, whether the command was sent (in doubt) or not, and what to do.
    It said the command 'may or may not have been done' also when the break was seen
    before it was sent, and quoted the client library's advice ('connect(...,
    reconnect=True)'), which is an application's, not an administrator's."""
    from miqm import amq

    head = f"{amq.line('AMQ8146', severity=True, qmgr=qmgr)} The connection "
    why = f"(MQRC {mqrc} {_LOST.get(mqrc, '')})".replace(" )", ")")
    if not sent:
        return (f"{head}broke before this command was sent {why}: neither it nor the "
                "commands after it were run. Run them again: runmqsc reaches the instance "
                "that is active now.")
    return (f"{head}broke during this command {why}: it may or may not have been done, "
            "and the commands after it were not run. Check it with DISPLAY and run the "
            "rest again: runmqsc reaches the instance that is active now.")


def _file_lines(path: str) -> Iterator[str]:
    """``-f Filepath``: the file's lines, decoded as stdin's are. Opened here, so that a
    missing or unreadable file is refused (OSError) before anything runs; a directory
    too (IsADirectoryError is raised by open on Linux)."""
    if path.startswith("file://"):
        path = path[len("file://"):]
    stream = open(path, "rb")  # closed by _binary_lines when read to its end
    return _binary_lines(stream, close=True)


def _stdin_lines() -> Iterator[str]:
    """stdin line by line, as it arrives (not read whole first); bytes that are not
    UTF-8 are kept (surrogateescape) so the echo can show them."""
    if sys.stdin is None:  # started with stdin closed (<&-): there is nothing to read
        return
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:  # a text stream without bytes underneath
        yield from sys.stdin
        return
    yield from _binary_lines(stream)


def _binary_lines(stream: Any, close: bool = False) -> Iterator[str]:
    """The lines of a binary stream, a leading byte-order mark dropped."""
    try:
        yield from _decoded(stream)
    finally:
        if close:
            stream.close()


#: the most of one line of input kept (bytes): more than the longest MQSC command
#: (32,762 characters, up to 4 bytes each), so that a line past it is refused as too long
#: without being held whole; a file that is not text (or /dev/zero) filled the memory
LINE_BYTES = 4 * 32_762 + 8


def _decoded(stream: Any) -> Iterator[str]:
    """Each line of ``stream`` as text, read as it arrives; of a line longer than
    LINE_BYTES only its first LINE_BYTES are kept (the rest is read and dropped)."""
    first = True
    while True:
        raw = stream.readline(LINE_BYTES)
        if not raw:
            return
        if len(raw) == LINE_BYTES and not raw.endswith(b"\n"):
            while True:  # skip the rest of the line
                more = stream.readline(LINE_BYTES)
                if not more or more.endswith(b"\n"):
                    break
        if first and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]  # a script saved with a byte-order mark (Windows editors)
        first = False
        yield raw.decode("utf-8", "surrogateescape")


def _client_connection(qmgr: str, credential: str | None = None) -> Any:
    """``-c``: MQ's client mode. The queue manager is reached only through its listener
    (``MIQM_CONNECTION``, MQ's CONNAME list) with the credential an application would
    present (``MIQM_CREDENTIAL``); nothing is read from a local data directory, so this
    works from a host that does not know the queue manager."""
    import os

    from miqm.errors import ConfigError
    from miqm.net.auth import client_credential
    from miqm.net.client import connect, parse_conname

    conname = os.environ.get("MIQM_CONNECTION", "").strip()
    if not conname:
        raise ConfigError("runmqsc -c needs the queue manager's address: set "
                          "MIQM_CONNECTION='host(port),host(port)' (and MIQM_CREDENTIAL).",
                          amq="AMQ9204")
    return connect(qmgr, endpoints=parse_conname(conname),
                   credential=client_credential(qmgr, credential, bindings=False))


def main() -> None:
    """Console-script entry point. A usage error (an unknown flag, a flag without its
    value) exits 20, MQ's 'runmqsc could not run', not click's 2: scripts test for 20."""
    try:
        run_typer(app, "runmqsc")
    except SystemExit as exc:
        if exc.code == 2:
            raise SystemExit(20) from None
        raise
