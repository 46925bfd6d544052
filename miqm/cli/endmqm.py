"""``endmqm [-c | -w | -i | -p] [-s] [-x] [-r] QMgr``: end an instance.

* ``-c`` (default) controlled: returns once the request is accepted; ``-w`` controlled and
  waits; ``-i`` immediate and ``-p`` pre-emptive (no shutdown checkpoint; restart
  recovers from the log) wait until the instance has ended.
* ``-s`` ends the active instance permitting switchover: the standby takes over. Without
  it the standby ends too (it sees the queue manager ended, not crashed).
* ``-x`` ends the standby instance only. ``endmqm`` on a host whose instance is the
  standby, without ``-x``, is an error.
* ``-r`` is accepted for MQ compatibility: clients reconnect by themselves.

The instance on this host is found through its run record; otherwise the active
instance through ``<datadir>/listener`` and a standby through ``<datadir>/standby-listener``.
"""

from __future__ import annotations

import json
import time

import typer

from miqm.cli.common import fail, make_app, run_typer

app = make_app("End a queue manager instance.")


def _endpoint_from_data(qmgr: str, name: str) -> tuple[str, int] | None:
    from lockfs import open_volume
    from lockfs.errors import LockFsError
    from miqm.paths import find

    try:
        volume = open_volume(find(qmgr).data_path)
        try:
            rec = json.loads(volume.read_bytes(name))
        finally:
            volume.close()
        return str(rec["host"]), int(rec["port"])
    except (LockFsError, ValueError, KeyError, TypeError):
        return None


@app.command()
def endmqm(
    qmgr: str = typer.Argument(..., metavar="QMgr", help="queue manager name"),
    controlled: bool = typer.Option(False, "-c", help="controlled (quiesced) end (default)"),
    wait: bool = typer.Option(False, "-w", help="controlled end; wait until it has ended"),
    immediate: bool = typer.Option(False, "-i", help="immediate end"),
    preemptive: bool = typer.Option(False, "-p", help="pre-emptive end (no checkpoint)"),
    switchover: bool = typer.Option(False, "-s", help="permit switchover to the standby"),
    standby_only: bool = typer.Option(False, "-x", help="end the standby instance only"),
    reconnect: bool = typer.Option(False, "-r", help="ask clients to reconnect (they do "
                                   "anyway)"),
) -> None:
    """End the queue manager's instance."""
    from miqm.errors import NetError
    from miqm.ha import runfile
    from miqm.net.client import Endpoint, connect
    from miqm.paths import check_qmgr_name, find

    check_qmgr_name(qmgr)
    find(qmgr)
    if sum((controlled, wait, immediate, preemptive)) > 1:
        fail("endmqm: use only one of -c, -w, -i and -p (try 'endmqm -h')", 2)
    if standby_only and switchover:
        fail("endmqm: -s ends the active instance and -x the standby; use one (try "
             "'endmqm -h')", 2)
    mode = ("wait" if wait else "immediate" if immediate else "preemptive" if preemptive
            else "controlled")
    local = runfile.read(qmgr)
    target: tuple[str, int] | None = None
    if local is not None and local.get("address"):
        if local.get("mode") == "standby" and not standby_only:
            fail(f"AMQ8146: the instance of queue manager '{qmgr}' on this host is a standby "
                 "instance; end it with endmqm -x, or end the active instance on its host.", 5)
        if local.get("mode") == ("standby" if standby_only else "active"):
            host, port = local["address"]
            target = (str(host), int(port))
    if target is None:
        target = _endpoint_from_data(qmgr, "standby-listener" if standby_only else "listener")
    if target is None:
        what = "standby instance" if standby_only else "running instance"
        fail(f"AMQ8146: IBM MQ queue manager '{qmgr}' has no {what} to end.", 16 if
             standby_only else 40)
    try:
        with connect(qmgr, endpoints=[Endpoint(*target)], allow_standby=True) as conn:
            reply = conn.call("end", mode=mode, switchover=switchover,
                              standby_only=standby_only, reconnect=reconnect)
    except NetError as exc:
        if exc.mqrc == 2059:
            fail(f"AMQ8146: IBM MQ queue manager '{qmgr}' not available: no instance "
                 f"answered at {target[0]}({target[1]}).", 40)
        fail(exc.user_line(), 5)
    if mode == "controlled" and not standby_only:
        typer.echo("Quiesce request accepted. The queue manager will stop when all "
                   "outstanding work is complete.")
    pid = int(reply.get("pid") or 0)
    if mode != "controlled" or standby_only:
        _wait_ended(qmgr, target, pid)
    if standby_only:
        typer.echo(f"IBM MQ queue manager '{qmgr}' standby instance ended.")
    elif mode != "controlled":
        typer.echo(f"IBM MQ queue manager '{qmgr}' ending.")
        typer.echo(f"IBM MQ queue manager '{qmgr}' ended, permitting switchover to a standby "
                   "instance." if switchover else f"IBM MQ queue manager '{qmgr}' ended.")


def _wait_ended(qmgr: str, target: tuple[str, int], pid: int, timeout: float = 120.0) -> None:
    """Until the instance's process (this host) or its listener (elsewhere) is gone."""
    import socket

    from miqm.ha import runfile

    deadline = time.monotonic() + timeout
    local = runfile.read(qmgr, check_alive=False)
    on_this_host = local is not None and int(local.get("pid", -1)) == pid
    while time.monotonic() < deadline:
        if on_this_host:
            if not runfile.alive(pid):
                return
        else:
            try:
                socket.create_connection(target, timeout=0.5).close()
            except OSError:
                return
        time.sleep(0.02)
    fail(f"AMQ8146: queue manager '{qmgr}' did not end within {timeout:g}s.", 71)


def main() -> None:
    """Console-script entry point."""
    run_typer(app, "endmqm")
