"""``rcdmqimg`` and ``rcrmqobj``: record a queue's media image in the log, and recreate a
damaged or deleted queue from its image plus the log. Linear logging only; both run on
the active instance (ops ``rcdmqimg`` / ``rcrmqobj``)."""

from __future__ import annotations

import typer

from miqm.cli.common import fail, fail_amq, make_app, run_typer

rcdmqimg_app = make_app("Record a media image of queues (linear logging).")
rcrmqobj_app = make_app("Recreate queues from their media images (linear logging).")

_TYPES = ("queue", "q", "ql", "qlocal", "all", "*")


def _circular(qmgr: str) -> bool:
    """True if this host's qm.ini for ``qmgr`` says circular logging (bindings mode)."""
    import os

    from lockfs import open_volume
    from lockfs.errors import LockFsError
    from miqm.config import parse_qm_ini
    from miqm.paths import find

    if os.environ.get("MIQM_CONNECTION"):
        return False  # no local configuration: the queue manager itself will refuse
    entry = find(qmgr)
    try:
        vol = open_volume(entry.data_path)
        try:
            text = vol.read_bytes("qm.ini").decode("utf-8", "replace")
        finally:
            vol.close()
    except LockFsError:
        return False
    return parse_qm_ini(text).log.log_type == "CIRCULAR"


def _run(op: str, qmgr: str, objtype: str, name: str) -> None:
    from miqm import mqsc
    from miqm.errors import MiqmError
    from miqm.net.client import connect

    if objtype.lower() not in _TYPES:
        fail(f"{op}: -t {objtype} is not supported: use -t queue (or all).", 2)
    if not mqsc.is_object_name(name, generic=True):
        # it was 'queue ... is not defined': no queue can have that name
        fail(f"{op}: '{name[:60]}' is not a valid queue name: use 1 to 48 characters from "
             "A-Z, a-z, 0-9, '.', '_', '/' and '%' (a trailing '*' for a generic name).", 2)
    if _circular(qmgr):
        fail_amq("AMQ7089", "Media images need linear logging (crtmqm -ll).", qmgr=qmgr)
    try:
        with connect(qmgr) as conn:
            reply = conn.call(op, name=name)
    except MiqmError as exc:
        if getattr(exc, "mqrc", None) != 2085 or exc.amq not in (None, "AMQ8147"):
            raise  # 2085 with AMQ7472 is a queue without a media image: said as it is
        # rcdmqimg said "queue 'NOPE' is not defined (MQRC 2085)", exit 1, with no AMQ
        # number; rcrmqobj says AMQ8147 (exit 10), as MQ's both do
        fail_amq("AMQ8147", "DISPLAY QUEUE(*) in runmqsc lists the queues.", name=name)
    lines = reply.get("lines", [])
    if op == "rcdmqimg" and not any(str(x).startswith("AMQ7086") for x in lines):
        # every queue a name matches gets an image: none recorded, no queue matched (a
        # generic name said only which log files are needed, exit 0)
        fail_amq("AMQ8147", "No queue matches it: no media image was recorded. "
                 "DISPLAY QUEUE(*) in runmqsc lists the queues.", name=name)
    for line in lines:
        typer.echo(line)


@rcdmqimg_app.command()
def rcdmqimg(
    name: str = typer.Argument(..., metavar="Name", help="queue name (trailing * = generic)"),
    qmgr: str = typer.Option(..., "-m", metavar="QMgr", help="queue manager name"),
    objtype: str = typer.Option("queue", "-t", metavar="ObjectType", help="queue | all"),
) -> None:
    """Record media images."""
    _run("rcdmqimg", qmgr, objtype, name)


@rcrmqobj_app.command()
def rcrmqobj(
    name: str = typer.Argument(..., metavar="Name", help="queue name (trailing * = generic)"),
    qmgr: str = typer.Option(..., "-m", metavar="QMgr", help="queue manager name"),
    objtype: str = typer.Option("queue", "-t", metavar="ObjectType", help="queue | all"),
) -> None:
    """Recreate objects from their media images."""
    _run("rcrmqobj", qmgr, objtype, name)


def rcdmqimg_main() -> None:
    """Console-script entry point for rcdmqimg."""
    run_typer(rcdmqimg_app, "rcdmqimg")


def rcrmqobj_main() -> None:
    """Console-script entry point for rcrmqobj."""
    run_typer(rcrmqobj_app, "rcrmqobj")
