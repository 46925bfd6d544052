"""What every command shares: one clear line on failure, never a traceback.

Each console script is a typer app run through :func:`run`. Errors go to stderr as one
line (with the AMQ number where MQ has one) and the process exits non-zero. Anything
unexpected is also reduced to one line, after its traceback is kept in a file the user
is pointed to, because a traceback must never reach a user.
"""

from __future__ import annotations

import errno
import functools
import math
import os
import signal
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable
from typing import Any, NoReturn

import typer

from lockfs.errors import LockFsError, VolumeNotFound, VolumePermissionError
from miqm import amq
from miqm.errors import MiqmError, UsageError, leading_number

#: help options of every command: MQ's administrators type -? for help
HELP_OPTIONS = ["-h", "--help", "-?"]

#: the environment every command reads, shown at the end of every --help
ENVIRONMENT = (
    ("MIQM_DATA_ROOT", "this host's root (mqs.ini, qmgrs/, log/, run/); default /var/mqm"),
    ("MIQM_HOSTNAME", "host name in lock files (1-64 of A-Za-z0-9.-_); default the OS's"),
    ("MIQM_CONNECTION", "clients: host(port),host(port); unset = bindings mode"),
    ("MIQM_CREDENTIAL", "clients: credential (or @file) for a remote listener"),
    ("MIQM_LISTENER_HOST", "strmqm: listener address, over qm.ini"),
    ("MIQM_LISTENER_PORT", "strmqm: listener port, over qm.ini"),
    ("MIQM_METRICS_PORT", "strmqm: Prometheus metrics port, over qm.ini; 0 = off"),
    ("MIQM_STRMQM_TIMEOUT", "strmqm: seconds (> 0) to wait for the verdict; default 600"),
)


def environment_help() -> str:
    """The epilog every --help ends with (click keeps \\b paragraphs as written)."""
    width = max(len(name) for name, _ in ENVIRONMENT)
    lines = ["\b", f"Environment ({amq.PRODUCT} {amq.VERSION}):"]
    lines += [f"  {name.ljust(width)}  {what}" for name, what in ENVIRONMENT]
    return "\n".join(lines)


def env_seconds(name: str, default: float) -> float:
    """A positive, finite number of seconds from the environment variable ``name``
    (``default`` when it is unset or empty); UsageError naming the variable otherwise."""
    return env_positive(name, default)


def env_positive(name: str, default: float, unit: str = "seconds",
                 advice: str = "Correct it or unset it.") -> float:
    """A positive, finite number (of ``unit``) from the environment variable ``name``
    (``default`` when it is unset or empty); UsageError naming the variable otherwise."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise UsageError(
            f"{name}={raw[:40]!r} is not valid: it must be a positive number of {unit} "
            f"(default {default:g}). {advice}"
        )
    return value


def make_app(help_text: str) -> typer.Typer:
    """A typer app with the settings every miqm command uses."""
    return typer.Typer(
        help=help_text,
        add_completion=False,
        pretty_exceptions_enable=False,
        pretty_exceptions_show_locals=False,
        rich_markup_mode=None,
        no_args_is_help=False,
        context_settings={"help_option_names": HELP_OPTIONS},
    )


def command_path(default: str = "") -> str:
    """The running (sub)command as typed, e.g. ``miqm bench store``; ``default`` outside a
    command."""
    try:  # typer >= 0.20 vendors click as typer._click
        from typer._click.globals import get_current_context  # type: ignore[import-not-found]
    except ImportError:  # pragma: no cover - older typer on real click
        from click import get_current_context  # type: ignore[no-redef]
    ctx = get_current_context(silent=True)
    return str(ctx.command_path) if ctx is not None else default


def fail_usage(message: str, code: int = 2) -> NoReturn:
    """:func:`fail` with the running command's path in front (``miqm bench store: ...``)."""
    fail(f"{command_path(os.path.basename(sys.argv[0]))}: {message}", code)


def fail(message: str, code: int = 1) -> NoReturn:
    """Print one line to stderr and exit with ``code``."""
    typer.echo(message, err=True)
    raise typer.Exit(code)


def fail_amq(number: str, hint: str = "", **fields: object) -> NoReturn:
    """Print the table's line for ``number`` (then ``hint``) and exit with its exit code."""
    line = amq.line(number, **fields)
    fail(f"{line} {hint}".rstrip(), amq.exit_code(number) or 1)


#: the table's AMQ number a line starts with, or None (an error made from such a line
#: takes that number, and its exit code, by itself: MiqmError)
line_number = leading_number


#: reason codes a command's connection gets from an instance that is ending
_ENDING = {2161: ("controlled", "MQRC_Q_MGR_QUIESCING"),
           2162: ("immediately", "MQRC_Q_MGR_STOPPING")}


def error_line(exc: BaseException) -> tuple[str, int]:
    """The user's line and exit code for an exception."""
    if isinstance(exc, MiqmError) and getattr(exc, "mqrc", None) in _ENDING:
        # the client's line tells an application to 'end the unit of work and
        # disconnect'; an administrator's command wants to know the queue manager is
        # ending (MQ's AMQ8146, exit 40)
        how, name = _ENDING[exc.mqrc]  # type: ignore[attr-defined]
        return (f"AMQ8146: {amq.PRODUCT} queue manager not available: it is ending ({how}, "
                f"MQRC {exc.mqrc} {name}) and takes no new work. Check with dspmq -x, and "
                "run the command again once an instance runs."), amq.exit_code("AMQ8146")
    if isinstance(exc, MiqmError):
        return exc.user_line(), exc.exit_code
    if isinstance(exc, VolumePermissionError) and exc.errno == errno.EROFS:
        # not a permission an administrator can change with chmod: said as it is
        return (f"{exc}: the filesystem is mounted read-only and nothing was changed. "
                "Remount it read-write, then run the command again."), 71
    if isinstance(exc, VolumePermissionError):
        return (f"AMQ7077: permission denied on the shared filesystem: {exc}. "
                "Check ownership and permissions of the directory."), 71
    if isinstance(exc, VolumeNotFound):
        return f"a file or directory the queue manager needs is missing: {exc}.", 71
    if isinstance(exc, LockFsError):
        return f"the shared filesystem failed: {exc}. Check the mount and the server.", 71
    if isinstance(exc, OSError) and exc.filename is None and exc.errno in _OUTPUT_ERRNOS:
        # a write with no file named: the command's own output (> /dev/full, a full disk
        # under > report.txt); it said 'No space left on device: . Check the path and
        # permissions.'
        return (f"{exc.strerror or exc}: the command's output could not be written. What it "
                "did before is done (check it, e.g. with dspmq or DISPLAY); make room where "
                "the output goes, or write it elsewhere."), 71
    if isinstance(exc, OSError):
        return f"{exc.strerror or exc}: {exc.filename or ''}. Check the path and permissions.", 71
    return "", 1


#: errors of a write to stdout that cannot go on (no room, I/O error, no such stream)
_OUTPUT_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EBADF)


def _no_closed_streams() -> None:
    """A command started with stdout or stderr closed (``>&-``) writes what would go
    there to /dev/null, as every command did through typer.echo: those writing to
    sys.stdout themselves (setmqaut, dspmqaut, dmpmqaut, runmqsc) ended in AMQ6184
    ('NoneType' object has no attribute 'write')."""
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))


def run(main: Callable[[], object]) -> None:
    """Run ``main`` (a typer app or function); map every failure to one line + exit code."""
    _no_closed_streams()
    try:
        main()
    except SystemExit:
        raise
    except typer.Exit as exc:  # raised by fail() and by commands, outside click's handling
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    except Stopped as exc:  # a second one during the cleanup of the first
        sys.stderr.write(f"stopped by {signal.Signals(exc.signum).name}\n")
        sys.exit(128 + exc.signum)
    except BaseException as exc:  # the one place every failure is reduced to a line
        line, code = error_line(exc)
        if not line:
            path = os.path.join(tempfile.gettempdir(), f"miqm-fdc-{os.getpid()}.txt")
            try:
                with open(path, "w", encoding="utf-8") as f:
                    traceback.print_exception(exc, file=f)
            except OSError:
                path = "(could not be saved)"
            line = amq.line("AMQ6184", detail=f"{type(exc).__name__}: {exc}; details in "
                            f"{path}. Report it with that file.")
            code = 71
        sys.stderr.write(line.rstrip() + "\n")
        sys.exit(code)


#: MQ's flags that have no counterpart here, per command, with what to do instead: an MQ
#: administrator types them from habit, and click's 'No such option: -u' said nothing of
#: what to do (runmqsc's own are in miqm.cli.runmqsc)
MQ_ONLY_FLAGS: dict[str, dict[str, str]] = {
    "crtmqm": {
        "-c": "set the description once it runs: runmqsc QMgr, ALTER QMGR DESCR('text')",
        "-d": "miqm has no channels, so no default transmission queue",
        "-u": "miqm has no dead-letter queue: an application moves a message it cannot "
              "process to the queue's BOQNAME itself (docs/mqsc.md)",
        "-p": "the listener's port is set in qm.ini after crtmqm: setmqini -m QMgr -s "
              "Listener -k Port -v Port (or MIQM_LISTENER_PORT at strmqm)",
        "-x": "set it after crtmqm: setmqini -m QMgr -s QueueManager -k "
              "MaxUncommittedMsgs -v N (or ALTER QMGR MAXUMSGS(N) once it runs)",
        "-t": "miqm has no triggering, so no trigger interval",
        "-oa": "authorities are given per principal with setmqaut -p (docs/mqsc.md, "
               "Authorization)",
        "-sa": "start the queue manager at boot with the systemd unit miqm@QMgr "
               "(deploy/systemd, docs/runbook.md section 6)",
        "-si": "start the queue manager with strmqm, or the systemd unit miqm@QMgr",
        "-sax": "start the queue manager at boot with the systemd unit miqm@QMgr "
                "(deploy/systemd, docs/runbook.md section 6)",
        "-ss": "start the queue manager with strmqm, or the systemd unit miqm@QMgr",
    },
    "strmqm": {
        "-c": "miqm has no default objects to recreate (its default definitions are "
              "built in: docs/mqsc.md)",
        "-a": "miqm has no backup queue managers: restore the data and log directories "
              "from a copy instead (docs/runbook.md section 11)",
        "-r": "miqm has no backup queue managers to replay logs into: restore the data "
              "and log directories from a copy instead (docs/runbook.md section 11)",
        "-ns": "the instance's listener always starts with it; point applications "
               "elsewhere to keep them off",
    },
    "endmqm": {
        "-t": "a timed end is not supported: endmqm -w QMgr ends it controlled (open "
              "units of work are backed out after 10 s), and endmqm -i QMgr ends it now",
        "-tp": "a timed end is not supported: endmqm -w QMgr ends it controlled (open "
               "units of work are backed out after 10 s), and endmqm -i QMgr ends it now",
    },
}


def _mq_only_flag(prog: str, argv: list[str]) -> str:
    """The line refusing the first of ``argv`` that is one of MQ_ONLY_FLAGS[prog] ('' if
    none is): the flag, that miqm has no counterpart, and what to do instead."""
    table = MQ_ONLY_FLAGS.get(prog, {})
    for arg in argv:
        if arg == "--":
            break
        if arg in table:
            return f"{prog}: {arg} is MQ's, with no counterpart in {amq.PRODUCT}: {table[arg]}."
    return ""


def run_typer(app: typer.Typer, prog: str | None = None,
              on_usage_error: Callable[[str, int], None] | None = None) -> None:
    """Entry point body for a console script built on a typer app.

    Click's own usage errors are reduced to one line too (no boxes, no help dump);
    ``on_usage_error(line, exit_code)`` is told of one first (amqmfsck --json writes its
    document for it).
    """
    try:  # typer >= 0.20 vendors click as typer._click
        from typer._click.exceptions import ClickException  # type: ignore[import-not-found]
    except ImportError:  # pragma: no cover - older typer on real click
        from click.exceptions import ClickException  # type: ignore[no-redef]

    name = prog or os.path.basename(sys.argv[0])
    refused = _mq_only_flag(name, sys.argv[1:])
    if refused:
        run(lambda: fail(refused, 2))
    command = typer.main.get_command(app)
    _add_epilog(command)
    _say_interrupted(command, name)

    def invoke() -> None:
        try:
            rc = command.main(args=sys.argv[1:], standalone_mode=False, prog_name=name)
        except ClickException as exc:  # named as the (sub)command that refused it
            ctx = getattr(exc, "ctx", None)
            path = str(ctx.command_path) if ctx is not None else name
            line = f"{path}: {exc.format_message()} (try '{path} -h')"
            if on_usage_error is not None:
                on_usage_error(line, exc.exit_code)
            fail(line, exc.exit_code)
        except typer.Abort:
            fail("interrupted", 130)
        sys.exit(rc if isinstance(rc, int) else 0)

    run(invoke)


#: signals that end a long command the way Ctrl-C does when it asks for it
#: (:func:`unwind_on_stop_signals`): ``timeout``, ``kill`` and a closed terminal
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Stopped(BaseException):
    """SIGTERM or SIGHUP arrived: unwinds like KeyboardInterrupt, through the cleanup."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_stopped(signum: int, _frame: object) -> None:
    raise Stopped(signum)


def unwind_on_stop_signals() -> dict[int, Any]:
    """From now on SIGTERM and SIGHUP raise :class:`Stopped` in the main thread, so that a
    command's cleanup runs (their default action ended it at once, leaving the instances
    it started running); returns the handlers they had. Nothing outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {s: signal.signal(s, _raise_stopped) for s in STOP_SIGNALS}


def _say_interrupted(command: object, name: str) -> None:
    """Ctrl-C in a command (or subcommand) that does not handle it itself: one line and
    exit 130. Typer would turn it into a silent exit 130, so it is caught in the
    command's own callback, before typer sees it."""
    callback = getattr(command, "callback", None)
    if callback is not None:
        def interruptible(*args: Any, **kwargs: Any) -> Any:
            try:
                return callback(*args, **kwargs)
            except KeyboardInterrupt:
                fail(f"{name}: interrupted (Ctrl-C): the command did not complete", 130)
            except Stopped as exc:
                fail(f"{name}: stopped by {signal.Signals(exc.signum).name}: the command "
                     "did not complete", 128 + exc.signum)

        command.callback = functools.wraps(callback)(interruptible)  # type: ignore[attr-defined]
    for sub in getattr(command, "commands", {}).values():
        _say_interrupted(sub, name)


def _add_epilog(command: object) -> None:
    """The environment paragraph at the end of a command's (and its subcommands') help."""
    epilog = environment_help()
    command.epilog = f"{command.epilog}\n\n{epilog}" if getattr(  # type: ignore[attr-defined]
        command, "epilog", None) else epilog
    for sub in getattr(command, "commands", {}).values():
        _add_epilog(sub)
