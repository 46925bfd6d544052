"""``endmqm [-c | -w | -i | -p] [-s] [-x] [-r] [--remote] QMgr``: end an instance.

* ``-c`` (default) controlled: returns once the request is accepted; ``-w`` controlled and
  waits; ``-i`` immediate and ``-p`` pre-emptive (no shutdown checkpoint; restart
  recovers from the log) wait until the instance has ended.
* ``-s`` ends the active instance permitting switchover: the standby takes over. Without
  it the standby ends too (it sees the queue manager ended, not crashed). With no standby
  instance running, ``-s`` is refused and nothing ends (exit 40).
* ``-x`` ends the standby instance only. ``endmqm`` on a host whose instance is the
  standby, without ``-x``, is an error.
* ``-r`` asks reconnectable clients to reconnect to another instance, as ``-s`` does.

What connected applications see (docs/client.md, "When the queue manager ends"): a
controlled end refuses new connections and new work with 2161 (MQRC_Q_MGR_QUIESCING) and
gives units of work already open up to 10 s to commit or back out; ``-i`` and ``-p``
answer 2162 (MQRC_Q_MGR_STOPPING) at once; ``endmqm -i`` during a controlled end cuts the
wait short.

As MQ's, endmqm acts where it is typed: it ends the instance that runs on this host
(found through its run record). Typed on a host where no instance of the queue manager
runs (or, with ``-x``, where the instance is the active one), it is refused with one line
naming the hosts the instances run on (AMQ1106, from the lock holder records), unless
``--remote`` asks to act on them from here: then the active instance is reached through
``<datadir>/listener`` and a standby through ``<datadir>/standby-listener``. A queue
manager with no instance anywhere is AMQ8146, exit 40, with or without ``-x``.
"""

from __future__ import annotations

import json
import time
from typing import Any

import typer

from miqm import amq
from miqm.cli.common import fail, fail_amq, line_number, make_app, run_typer
from miqm.net.protocol import MQRC_SSL_INITIALIZATION_ERROR

app = make_app("End a queue manager instance.")


def _endpoint_from_data(qmgr: str, name: str) -> tuple[str, int, str | None] | None:
    """An instance's listener from its record in the data directory: host, port and its
    local socket (None if it records none)."""
    from lockfs import open_volume
    from lockfs.errors import LockFsError
    from miqm.net.client import local_socket
    from miqm.paths import find

    try:
        volume = open_volume(find(qmgr).data_path)
        try:
            rec = json.loads(volume.read_bytes(name))
        finally:
            volume.close()
        return str(rec["host"]), int(rec["port"]), local_socket(rec.get("ipc"))
    except (LockFsError, ValueError, KeyError, TypeError, AttributeError):
        return None


def lock_holders(qmgr: str) -> dict[str, Any]:
    """What the lock files say (dspmq's probe ``locks``); {} when the shared filesystem
    cannot be read (may block on the FS)."""
    from miqm.cli.dspmq import probe
    from miqm.paths import find

    try:
        return dict(probe(qmgr, find(qmgr).data_path)["locks"])
    except Exception:  # an unreadable shared filesystem: nothing known
        return {}


def instances_elsewhere(qmgr: str, locks: dict[str, Any] | None = None
                        ) -> list[tuple[str, str]]:
    """(host, Active|Standby) of the instances the lock files say run (may block on the FS)."""
    if locks is None:
        locks = lock_holders(qmgr)
    found = []
    for lock, mode in (("master", "Active"), ("standby", "Standby")):
        rec = locks.get(lock) or {}
        if rec.get("held") and rec.get("host"):
            found.append((str(rec["host"]), mode))
    return found


@app.command()
def endmqm(
    qmgr: str = typer.Argument(..., metavar="QMgr", help="queue manager name"),
    controlled: bool = typer.Option(False, "-c", help="controlled (quiesced) end (default)"),
    wait: bool = typer.Option(False, "-w", help="controlled end; wait until it has ended"),
    immediate: bool = typer.Option(False, "-i", help="immediate end"),
    preemptive: bool = typer.Option(False, "-p", help="pre-emptive end (no checkpoint)"),
    switchover: bool = typer.Option(False, "-s", help="permit switchover to the standby"),
    standby_only: bool = typer.Option(False, "-x", help="end the standby instance only"),
    reconnect: bool = typer.Option(False, "-r", help="ask reconnectable clients to "
                                   "reconnect to another instance"),
    remote: bool = typer.Option(False, "--remote", help="act on instances running on other "
                                "hosts (without it, endmqm ends only an instance on this "
                                "host)"),
) -> None:
    """End the queue manager's instance."""
    from miqm.errors import NetError
    from miqm.ha import runfile
    from miqm.net.client import Endpoint, connect, local_socket
    from miqm.paths import check_qmgr_name, find, hostname

    check_qmgr_name(qmgr)
    find(qmgr)
    if sum((controlled, wait, immediate, preemptive)) > 1:
        fail("endmqm: use only one of -c, -w, -i and -p (try 'endmqm -h')", 2)
    if standby_only and switchover:
        fail("endmqm: -s ends the active instance and -x the standby; use one (try "
             "'endmqm -h')", 2)
    mode = ("wait" if wait else "immediate" if immediate else "preemptive" if preemptive
            else "controlled")
    from miqm.cli.dspmq import local_from_locks

    local = runfile.read(qmgr)
    here = hostname()
    locks: dict[str, Any] | None = None
    target: tuple[str, int, str | None] | None = None
    if local is None:  # no run record, or an unreadable one: what do the lock files say?
        locks = lock_holders(qmgr)
        local = local_from_locks(locks, here)
    if local is not None and (local.get("address") or local.get("from_locks")):
        if local.get("mode") == "standby" and not standby_only:
            fail_amq("AMQ1105", qmgr=qmgr, host=here)
        if local.get("mode") == ("standby" if standby_only else "active"):
            if local.get("address"):
                host, port = local["address"]
                target = (str(host), int(port), local_socket(local.get("ipc")))
            else:  # the listener the instance records in the data directory
                target = _endpoint_from_data(qmgr, "standby-listener" if standby_only
                                             else "listener")
    if target is None and not remote:
        elsewhere = [(h, m) for h, m in instances_elsewhere(qmgr, locks)
                     if local is None or h != local.get("host")]
        if local is not None and local.get("mode") == "active" and standby_only:
            standbys = ", ".join(f"{h} (standby)" for h, m in elsewhere if m == "Standby")
            fail_amq("AMQ1109", f"The standby instance runs on {standbys}: run endmqm -x "
                     "there, or add --remote." if standbys else "There is no standby "
                     "instance.", qmgr=qmgr, host=here)
        if elsewhere:
            fail_amq("AMQ1106", qmgr=qmgr, host=here,
                     where=", ".join(f"{h} ({m.lower()})" for h, m in elsewhere))
        if local is not None and local.get("from_locks"):
            fail_amq("AMQ8146", f"Its instance on this host (pid {local.get('pid')}) holds "
                     "the lock but has recorded no listener to reach it: run endmqm again "
                     "once dspmq shows it running, or end pid "
                     f"{local.get('pid')} (kill -TERM).", qmgr=qmgr)
        if local is not None and not local.get("address"):
            fail_amq("AMQ8146", f"Its instance on this host (pid {local.get('pid')}) is still "
                     "starting: run endmqm again once dspmq shows it.", qmgr=qmgr)
        fail_amq("AMQ8146", "No instance of it is running.", qmgr=qmgr)
    if target is None:
        target = _endpoint_from_data(qmgr, "standby-listener" if standby_only else "listener")
    if target is None:
        fail_amq("AMQ8146", f"It has no {'standby' if standby_only else 'running'} instance "
                 "to end.", qmgr=qmgr)
    if switchover:
        _refuse_switchover_without_standby(qmgr, locks)
    pid_here = int(local.get("pid") or 0) if local is not None else 0
    try:
        with connect(qmgr, endpoints=[Endpoint(*target)], allow_standby=True) as conn:
            reply = conn.call("end", mode=mode, switchover=switchover,
                              standby_only=standby_only, reconnect=reconnect)
    except NetError as exc:
        if exc.mqrc == 2059:
            fail_amq("AMQ8146", f"No instance answered at {target[0]}({target[1]}).",
                     qmgr=qmgr)
        if (exc.mqrc == MQRC_SSL_INITIALIZATION_ERROR and mode == "immediate"
                and not (switchover or reconnect) and pid_here and runfile.alive(pid_here)):
            # a listener that requires client certificates this shell has none of: an
            # instance on this host takes SIGTERM as endmqm -i (its controller's handler)
            reply = _signal_end(pid_here)
        else:
            line = exc.user_line()
            if exc.mqrc == MQRC_SSL_INITIALIZATION_ERROR and pid_here:
                line = (f"{line.rstrip('.')}. On this host, 'endmqm -i {qmgr}' ends the "
                        "instance without its listener.")
            fail(line, amq.exit_code(exc.amq or line_number(line)) or 5)
    if mode == "controlled" and not standby_only:
        typer.echo(amq.text("AMQ1003"))
    pid = int(reply.get("pid") or 0)
    if mode != "controlled" or standby_only:
        _wait_ended(qmgr, target[:2], pid,
                    local is not None and int(local.get("pid") or -1) == pid)
    if standby_only:
        typer.echo(amq.text("AMQ1006", qmgr=qmgr))
    elif mode != "controlled":
        typer.echo(amq.text("AMQ1004", qmgr=qmgr))
        typer.echo(amq.text("AMQ1005" if switchover else "AMQ8004", qmgr=qmgr))


def _refuse_switchover_without_standby(qmgr: str, locks: dict[str, Any] | None) -> None:
    """``endmqm -s`` with no standby instance: refused, as MQ's -s checks for a standby
    before it ends the active one. It ended the queue manager everywhere while saying
    'ended, permitting switchover to a standby instance', an outage the administrator
    did not ask for. When the lock files cannot be read, the end goes ahead (no check
    is possible, and the administrator asked for an end)."""
    if locks is None:
        locks = lock_holders(qmgr)
    standby = locks.get("standby") or {}
    if not locks or standby.get("held") is not False:
        return
    fail(f"endmqm: queue manager '{qmgr}' has no standby instance to switch over to, so "
         "nothing was ended: start one on the other host with 'strmqm -x "
         f"{qmgr}' and run endmqm -s again, or end the queue manager without -s.", 40)


def _signal_end(pid: int) -> dict[str, Any]:
    """End the instance with process ``pid`` on this host as ``endmqm -i`` does, by the
    signal its controller takes for that (SIGTERM): for a listener this shell cannot
    reach (TLS with client certificates); what the listener's reply would have been."""
    import os
    import signal

    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass  # it ended meanwhile: _wait_ended returns at once
    except PermissionError:
        fail(f"endmqm: the instance's process {pid} belongs to another user: run endmqm "
             "as that user (or set MIQM_TLS_CA, MIQM_TLS_CERT and MIQM_TLS_KEY to reach "
             "its listener)", 5)
    return {"pid": pid}


def _wait_ended(qmgr: str, target: tuple[str, int], pid: int, on_this_host: bool,
                timeout: float = 120.0) -> None:
    """Until the instance's process (``on_this_host``) or its listener (elsewhere) is
    gone."""
    import socket

    from miqm.ha import runfile

    deadline = time.monotonic() + timeout
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
    fail_amq("AMQ1107", qmgr=qmgr, timeout=f"{timeout:g}")


def main() -> None:
    """Console-script entry point."""
    run_typer(app, "endmqm")
