"""The sample programs ``amqsput``, ``amqsget`` and ``amqsbcg``.

``amqsput QMgr Queue [--non-persistent] [--syncpoint N]``: one message per stdin line
(the newline is not part of the message); as in MQ's amqsput, an empty line ends the
input. Messages are persistent unless ``--non-persistent``. With ``--syncpoint N`` the
puts are committed every N messages and at the end.

``amqsget QMgr Queue [--wait SECONDS] [--syncpoint N]``: writes each message body
followed by a newline to stdout and nothing else (so output can be compared with the
input), until no message arrives for ``--wait`` seconds (default 2; MQ's sample waits
15), then exits 0. ``-v`` adds MQ's banner lines on stderr.

``amqsbcg QMgr Queue``: browses every message on the queue (MQGMO_BROWSE_FIRST, then
BROWSE_NEXT) and prints each as MQ's sample does: its descriptor fields and its data as
a hex dump beside the printable characters; the messages stay on the queue.

A failing call prints MQ's ``MQPUT ended with reason code 2053`` style line and exits 1
(amqsput's says how many input lines were put before it).
"""

from __future__ import annotations

import math
import sys
from typing import Any

import typer

from miqm.cli.common import fail, make_app, run_typer

put_app = make_app("Put one message per stdin line on a queue.")
get_app = make_app("Get every message from a queue, one per stdout line.")
browse_app = make_app("Browse every message on a queue and print it, descriptor and data.")

def _open(qmgr: str, queue: str) -> Any:
    """Connect and check the queue exists (MQOPEN); one line + exit on failure."""
    from miqm.client import MQError, connect

    try:
        qm = connect(qmgr, reconnect=False)
    except MQError as exc:
        fail(f"MQCONNX ended with reason code {exc.reason}: {exc.user_line()}", 1)
    try:
        qm.inquire(queue)
    except MQError as exc:
        qm.close()
        fail(f"MQOPEN ended with reason code {exc.reason}: {exc}", 1)
    return qm


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
    from miqm.client import MQError

    if syncpoint < 0:
        fail("amqsput: --syncpoint must be 0 or more.", 2)
    typer.echo("Sample AMQSPUT0 start")
    qm = _open(qmgr, queue)
    typer.echo(f"target queue is {queue}")
    pending = 0
    done = 0  # lines put (outside syncpoint) or committed: where to go on from
    call = "MQPUT"  # named in the failure line, as MQ's sample does
    from miqm.net.protocol import MAX_MESSAGE

    # a line is read up to the largest message (and its line end), never further: a
    # stream with no line end (< /dev/zero) filled the memory before any refusal
    limit = MAX_MESSAGE + 2
    try:
        for number, raw in enumerate(iter(lambda: sys.stdin.buffer.readline(limit), b""),
                                     1):
            if len(raw) == limit and not raw.endswith(b"\n"):
                fail(f"amqsput: input line {number} is longer than the largest "
                     f"message ({MAX_MESSAGE} bytes) and was not put (MQRC 2010 "
                     f"MQRC_DATA_LENGTH_ERROR) (the first {done} lines were put"
                     f"{' and committed' if syncpoint else ''})", 1)
            body = raw.rstrip(b"\n").rstrip(b"\r")
            if not body:
                break
            call = "MQPUT"
            qm.put(queue, body, persistent=not non_persistent, syncpoint=syncpoint > 0)
            pending += 1
            if not syncpoint:
                done += 1
            elif pending >= syncpoint:
                call = "MQCMIT"
                qm.commit()
                done += pending
                pending = 0
        if syncpoint and pending:
            call = "MQCMIT"
            qm.commit()
            done += pending
    except MQError as exc:
        # which input lines are on the queue: the user knows where to go on from
        fail(f"{call} ended with reason code {exc.reason}: {exc} (the first {done} lines "
             f"were put{' and committed' if syncpoint else ''})", 1)
    finally:
        qm.close()
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
    from miqm.client import MQError

    if not math.isfinite(wait) or wait < 0 or syncpoint < 0:
        # nan passed the check and the sample waited for ever
        fail("amqsget: --wait must be a number of seconds, 0 or more, and --syncpoint 0 "
             "or more.", 2)
    if verbose:
        typer.echo("Sample AMQSGET0 start", err=True)
    qm = _open(qmgr, queue)
    out = sys.stdout.buffer
    pending = 0
    call = "MQGET"  # named in the failure line, as MQ's sample does
    try:
        # outside syncpoint the queue manager streams messages ahead; under syncpoint
        # each is got into the unit of work as it is written
        for msg in qm.consume(queue, prefetch=100, syncpoint=syncpoint > 0, wait=wait):
            # the message leaves stdout before it is committed: a crash here repeats a
            # message rather than losing one (at-least-once, as MQ's sample)
            out.write(msg.body + b"\n")
            pending += 1
            if syncpoint and pending >= syncpoint:
                out.flush()
                call = "MQCMIT"
                qm.commit()
                call = "MQGET"
                pending = 0
        out.flush()
        if syncpoint and pending:
            call = "MQCMIT"
            qm.commit()
    except MQError as exc:
        out.flush()
        # a failed commit was named MQGET; what became of the messages written since
        # the last commit is what the reason says (2003: they come again; 2549: maybe)
        fail(f"{call} ended with reason code {exc.reason}: {exc}", 1)
    finally:
        qm.close()
    if verbose:
        typer.echo("no more messages", err=True)
        typer.echo("Sample AMQSGET0 end", err=True)


def hex_dump(data: bytes) -> list[str]:
    """``data`` as MQ's amqsbcg shows it: 16 bytes a line, offset, four-digit groups and
    the printable ASCII characters (a dot for the others) between quotes."""
    lines = []
    for at in range(0, len(data), 16):
        chunk = data[at:at + 16]
        groups = " ".join(chunk[i:i + 2].hex().upper() for i in range(0, len(chunk), 2))
        text = "".join(chr(b) if 0x20 <= b < 0x7F else "." for b in chunk)
        lines.append(f"{at:08X}:  {groups:<39} '{text:<16}'")
    return lines


def _describe(number: int, msg: Any) -> list[str]:
    """One browsed message as amqsbcg prints it."""
    stamp = msg.put_time
    return [f"MQGET of message number {number}, CompCode:0 Reason:0",
            "****Message descriptor****",
            f"  MsgId : X'{msg.msgid.hex().upper()}'",
            f"  CorrelId : X'{msg.correlid.hex().upper()}'",
            f"  BackoutCount : {msg.backout_count}",
            f"  Priority : {msg.priority}  Persistence : {1 if msg.persistent else 0}",
            f"  PutDate : '{stamp:%Y%m%d}'  PutTime : '{stamp:%H%M%S}"
            f"{stamp.microsecond // 10_000:02d}'" if stamp is not None else
            "  PutDate : ''  PutTime : ''",
            "",
            "****   Message      ****",
            "",
            f" length - {len(msg.body)} of {len(msg.body)} bytes",
            "",
            *hex_dump(msg.body),
            "",
            ""]


@browse_app.command()
def amqsbcg(
    qmgr: str = typer.Argument(..., metavar="QMgr"),
    queue: str = typer.Argument(..., metavar="Queue"),
) -> None:
    """Browse every message on the queue; they stay on it."""
    from miqm.client import MQError

    typer.echo(f"AMQSBCG0 - starts here\n**********************\n\n MQOPEN - '{queue}'\n")
    qm = _open(qmgr, queue)
    count = 0
    try:
        for count, msg in enumerate(qm.browse_all(queue), start=1):
            typer.echo("\n".join(_describe(count, msg)))
    except MQError as exc:
        fail(f"MQGET ended with reason code {exc.reason}: {exc}", 1)
    finally:
        qm.close()
    typer.echo(f" No more messages ({count} browsed)\n MQCLOSE\n MQDISC")


def amqsput_main() -> None:
    """Console-script entry point for amqsput."""
    run_typer(put_app, "amqsput")


def amqsget_main() -> None:
    """Console-script entry point for amqsget."""
    run_typer(get_app, "amqsget")


def amqsbcg_main() -> None:
    """Console-script entry point for amqsbcg."""
    run_typer(browse_app, "amqsbcg")
