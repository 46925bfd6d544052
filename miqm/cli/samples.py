"""The sample programs ``amqsput`` and ``amqsget``.

``amqsput QMgr Queue [--non-persistent] [--syncpoint N]``: one message per stdin line
(the newline is not part of the message); as in MQ's amqsput, an empty line ends the
input. Messages are persistent unless ``--non-persistent``. With ``--syncpoint N`` the
puts are committed every N messages and at the end.

``amqsget QMgr Queue [--wait SECONDS] [--syncpoint N]``: writes each message body
followed by a newline to stdout and nothing else (so output can be compared with the
input), until no message arrives for ``--wait`` seconds (default 2; MQ's sample waits
15), then exits 0. ``-v`` adds MQ's banner lines on stderr.

A failing call prints MQ's ``MQPUT ended with reason code 2053`` style line and exits 1.
"""

from __future__ import annotations

import sys

import typer

from miqm.cli.common import fail, make_app, run_typer

put_app = make_app("Put one message per stdin line on a queue.")
get_app = make_app("Get every message from a queue, one per stdout line.")

MQRC_NO_MSG_AVAILABLE = 2033


def _open(qmgr: str, queue: str) -> object:
    """Connect and check the queue exists (MQOPEN); one line + exit on failure."""
    from miqm.errors import NetError
    from miqm.net.client import connect

    try:
        conn = connect(qmgr)
    except NetError as exc:
        fail(f"MQCONNX ended with reason code {exc.mqrc}: {exc.user_line()}", 1)
    try:
        conn.call("open", queue=queue)
    except NetError as exc:
        conn.close()
        fail(f"MQOPEN ended with reason code {exc.mqrc}: {exc}", 1)
    return conn


@put_app.command()
def amqsput(
    qmgr: str = typer.Argument(..., metavar="QMgr"),
    queue: str = typer.Argument(..., metavar="Queue"),
    non_persistent: bool = typer.Option(False, "--non-persistent",
                                        help="put non-persistent messages"),
    syncpoint: int = typer.Option(0, "--syncpoint", metavar="N",
                                  help="commit every N messages (0 = no syncpoint)"),
) -> None:
    """Put one message per stdin line."""
    from miqm.errors import NetError
    from miqm.net.protocol import b64

    if syncpoint < 0:
        fail("amqsput: --syncpoint must be 0 or more.", 2)
    typer.echo("Sample AMQSPUT0 start")
    conn = _open(qmgr, queue)
    typer.echo(f"target queue is {queue}")
    pending = 0
    call = "MQPUT"  # named in the failure line, as MQ's sample does
    try:
        for raw in sys.stdin.buffer:
            body = raw.rstrip(b"\n").rstrip(b"\r")
            if not body:
                break
            call = "MQPUT"
            conn.call("put", queue=queue, body=b64(body),  # type: ignore[attr-defined]
                      persistent=not non_persistent, syncpoint=syncpoint > 0)
            pending += 1
            if syncpoint and pending >= syncpoint:
                call = "MQCMIT"
                conn.call("commit")  # type: ignore[attr-defined]
                pending = 0
        if syncpoint and pending:
            call = "MQCMIT"
            conn.call("commit")  # type: ignore[attr-defined]
    except NetError as exc:
        fail(f"{call} ended with reason code {exc.mqrc}: {exc}", 1)
    finally:
        conn.close()  # type: ignore[attr-defined]
    typer.echo("Sample AMQSPUT0 end")


@get_app.command()
def amqsget(
    qmgr: str = typer.Argument(..., metavar="QMgr"),
    queue: str = typer.Argument(..., metavar="Queue"),
    wait: float = typer.Option(2.0, "--wait", metavar="SECONDS",
                               help="stop when no message arrives for this long"),
    syncpoint: int = typer.Option(0, "--syncpoint", metavar="N",
                                  help="get under syncpoint, committing every N messages"),
    verbose: bool = typer.Option(False, "-v", help="MQ's banner lines on stderr"),
) -> None:
    """Get messages until the queue stays empty for --wait seconds."""
    from miqm.errors import NetError
    from miqm.net.protocol import unb64

    if wait < 0 or syncpoint < 0:
        fail("amqsget: --wait and --syncpoint must not be negative.", 2)
    if verbose:
        typer.echo("Sample AMQSGET0 start", err=True)
    conn = _open(qmgr, queue)
    out = sys.stdout.buffer
    pending = 0
    try:
        while True:
            try:
                reply = conn.call("get", queue=queue, wait=wait,  # type: ignore[attr-defined]
                                  syncpoint=syncpoint > 0)
            except NetError as exc:
                if exc.mqrc == MQRC_NO_MSG_AVAILABLE:
                    break
                raise
            # the message leaves stdout before it is committed: a crash here repeats a
            # message rather than losing one (at-least-once, as MQ's sample)
            out.write((unb64(reply.get("body")) or b"") + b"\n")
            pending += 1
            if syncpoint and pending >= syncpoint:
                out.flush()
                conn.call("commit")  # type: ignore[attr-defined]
                pending = 0
        out.flush()
        if syncpoint and pending:
            conn.call("commit")  # type: ignore[attr-defined]
    except NetError as exc:
        out.flush()
        fail(f"MQGET ended with reason code {exc.mqrc}: {exc}", 1)
    finally:
        conn.close()  # type: ignore[attr-defined]
    if verbose:
        typer.echo("no more messages", err=True)
        typer.echo("Sample AMQSGET0 end", err=True)


def amqsput_main() -> None:
    """Console-script entry point for amqsput."""
    run_typer(put_app, "amqsput")


def amqsget_main() -> None:
    """Console-script entry point for amqsget."""
    run_typer(get_app, "amqsget")
