"""``strmqm [-x] QMgr``: start an instance of a queue manager.

Starts the execution controller (``python -m miqm.ha.controller``) detached, waits on a
pipe for its first verdict and prints MQ's console lines: the queue manager is running
here (active), or a standby instance has been started, or one line saying why not. The
controller's own stdout/stderr go to ``$MIQM_DATA_ROOT/run/<dir>.out``.

``strmqm [-x] --foreground QMgr`` (containers, systemd) instead becomes the controller
(same pid) and stays in the foreground until the instance ends: see
:mod:`miqm.ha.foreground` for its output, signals and exit codes.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from typing import Any

import typer

from miqm.cli.common import env_seconds, fail, fail_amq, make_app, run_typer

app = make_app("Start a queue manager instance (-x: permit a standby / run as one).")

#: how long strmqm waits for the controller's verdict by default (restart recovery can be
#: long); ``MIQM_STRMQM_TIMEOUT`` overrides it
VERDICT_TIMEOUT = 600.0


def _wait_verdict(fd: int, proc: subprocess.Popen[bytes], timeout: float) -> dict | None:
    buf = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buf += chunk
            if b"\n" in buf:
                break
        elif proc.poll() is not None and not select.select([fd], [], [], 0)[0]:
            break
    try:
        return json.loads(buf.decode().splitlines()[0]) if buf.strip() else None
    except (ValueError, IndexError):
        return None


def _check_qm_ini(qmgr: str, data_path: str) -> None:
    """Refuse an empty or damaged qm.ini here, in one line (the controller would start
    on the defaults); a qm.ini that cannot be read is left to the controller to report."""
    import errno

    from lockfs import open_volume
    from lockfs.errors import LockFsError, VolumePermissionError
    from miqm.config import check_complete, decode_ini

    try:
        vol = open_volume(data_path)
        try:
            raw = vol.read_bytes("qm.ini")
        finally:
            vol.close()
    except VolumePermissionError as exc:  # files are opened read-write: a write failure
        why = "it is on a read-only filesystem" if exc.errno == errno.EROFS else \
            f"it cannot be written ({exc})"
        fail_amq("AMQ6062", path=data_path, detail=f"{why}, and a queue manager writes to "
                 "its data directory: remount it read-write or correct its ownership and "
                 f"permissions, then run strmqm {qmgr} again.")
    except LockFsError:
        return
    text = decode_ini(raw, f"{data_path}/qm.ini")
    check_complete(text, f"{data_path}/qm.ini")


#: how long strmqm's look at the lock files may take before it leaves the question to the
#: controller (dspmq's look at them has 0.9 s)
_LOCK_LOOK_SECONDS = 2.0


def _one_strmqm_at_a_time(qmgr: str, run_dir: str) -> int | None:
    """Take this host's strmqm lock of ``qmgr`` (``run/<dir>.strmqm.lock``, our pid in it)
    and return its descriptor, kept open until this process ends; AMQ1104 if another
    strmqm of ``qmgr`` holds it. Two strmqm -x at once on one host both passed the check
    for an instance here and started an active and a standby on the same host (the
    standby's run record then hid the active from endmqm). None where the filesystem has
    no locks (the checks then run as before)."""
    import fcntl

    from miqm.errors import MiqmError
    from miqm.paths import directory_name

    try:
        fd = os.open(os.path.join(run_dir, f"{directory_name(qmgr)}.strmqm.lock"),
                     os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            other = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
        except OSError:
            other = "unknown"
        os.close(fd)
        raise MiqmError(f"AMQ1104: miqm queue manager '{qmgr}' is being started on this "
                        f"host by another strmqm (pid {other}): let it finish, then check "
                        "with dspmq -x.", amq="AMQ1104") from None
    except OSError:
        os.close(fd)
        return None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
    except OSError:
        pass  # the pid is for the other strmqm's line only
    return fd


#: how long strmqm waits for a controller that refused to start to end (it releases its
#: locks as it ends) before it looks at who holds them
_CONTROLLER_EXIT_SECONDS = 10.0

#: how long strmqm, refused because master is held, waits for the holder's record when
#: the record there is a gone process's of this host (a second strmqm racing the first)
_SETTLE_SECONDS = 1.5


def _refuse_if_running_here(qmgr: str, settle: bool = False) -> None:
    """AMQ1104 when the lock files say an instance of ``qmgr`` runs on this host although
    its run record is missing or unreadable (the controller, not finding it, would report
    the queue manager as running elsewhere). With ``settle`` (the controller was refused:
    master is held), a master lock whose record is still a gone process's of this host is
    looked at again for a moment: the instance that just took it writes its own record
    right after, and two strmqm on one host at once said AMQ1101 'running elsewhere ...
    use strmqm -x' for the one that lost."""
    import time

    from miqm.cli.dspmq import controller_alive, local_from_locks
    from miqm.paths import hostname

    here = hostname()
    deadline = time.monotonic() + (_SETTLE_SECONDS if settle else 0.0)
    while True:
        locks = _look_at_locks(qmgr)
        if locks is None:
            return
        local = local_from_locks(dict(locks), here)
        if local is not None:
            what = "a standby instance" if local["mode"] == "standby" else "an instance"
            fail_amq("AMQ1104", qmgr=qmgr, what=what, pid=local["pid"])
        master = locks.get("master") or {}
        stale = master.get("held") is True and master.get("host") == here and not (
            master.get("pid") and controller_alive(int(master["pid"])))
        if not stale or time.monotonic() >= deadline:
            return
        time.sleep(0.1)


def _look_at_locks(qmgr: str) -> dict[str, Any] | None:
    """The lock files' holders (endmqm.lock_holders), or None if the look did not end in
    _LOCK_LOOK_SECONDS: bounded, as dspmq's look is, since a shared filesystem that hangs
    must not hang strmqm here (the controller makes the same check on master before it
    writes anything)."""
    import threading

    from miqm.cli.endmqm import lock_holders

    locks: dict[str, Any] = {}
    look = threading.Thread(target=lambda: locks.update(lock_holders(qmgr)), daemon=True)
    look.start()
    look.join(_LOCK_LOOK_SECONDS)
    return None if look.is_alive() else locks


@app.command()
def strmqm(
    qmgr: str = typer.Argument(..., metavar="QMgr", help="queue manager name"),
    standby: bool = typer.Option(False, "-x", help="permit a standby instance; become the "
                                 "standby if the queue manager is active elsewhere"),
    foreground: bool = typer.Option(False, "--foreground",
                                    help="run the instance in the foreground (containers, "
                                    "systemd): logs to stdout too, SIGTERM ends it as "
                                    "endmqm -i; the exit code says why it ended"),
    metrics_port: int = typer.Option(None, "--metrics-port", metavar="N",
                                     help="serve /metrics on port N (0: none), over qm.ini's "
                                     "Metrics: Port (sets MIQM_METRICS_PORT)"),
) -> None:
    """Start the queue manager (or a standby instance of it) on this host."""
    from miqm.ha import runfile
    from miqm.paths import check_qmgr_name, data_root, directory_name, find, hostname

    check_qmgr_name(qmgr)
    hostname()  # a bad MIQM_HOSTNAME in one line here, not in the detached controller
    timeout = env_seconds("MIQM_STRMQM_TIMEOUT", VERDICT_TIMEOUT)
    if metrics_port is not None:
        if not 0 <= metrics_port <= 65535:
            fail(f"strmqm: --metrics-port {metrics_port} is not a port number: use 1-65535, "
                 "or 0 for no metrics endpoint", 2)
        os.environ["MIQM_METRICS_PORT"] = str(metrics_port)  # the controller inherits it
    _check_qm_ini(qmgr, find(qmgr).data_path)  # AMQ7048 here, not in the detached process
    run_dir = os.path.join(data_root(), "run")
    try:
        os.makedirs(run_dir, exist_ok=True)
    except OSError as exc:  # a file in its place, a read-only or full root
        fail(f"strmqm: this host's run directory {run_dir} cannot be made "
             f"({exc.strerror or exc}): it holds the record of the instance started here. "
             "Move aside whatever is in its place, or correct MIQM_DATA_ROOT, its "
             "permissions or its filesystem, and start the queue manager again.", 71)
    # held until the verdict (closed when this process ends; the controller does not
    # inherit it): the checks below and the start are one step per host and queue manager
    _one_strmqm_at_a_time(qmgr, run_dir)
    local = runfile.read(qmgr)
    if local is not None:
        mode = local.get("mode")
        what = "a standby instance" if mode == "standby" else "an instance"
        fail_amq("AMQ1104", qmgr=qmgr, what=what, pid=local.get("pid"))
    # No usable run record (removed, damaged, or left by a process that is gone): the
    # lock files still say whether an instance of this host runs. Asked before starting
    # a controller, since one that finds master held becomes a standby, and the active
    # instance would get a standby on its own host (no use for a failover, and it keeps
    # the other host's standby out as a third instance).
    _refuse_if_running_here(qmgr)
    if foreground:
        from miqm.ha.foreground import exec_controller

        exec_controller(qmgr, standby)
    out_path = os.path.join(run_dir, f"{directory_name(qmgr)}.out")
    r, w = os.pipe()
    argv = [sys.executable, "-m", "miqm.ha.controller", qmgr, "--verdict-fd", str(w)]
    if standby:
        argv.insert(4, "-x")
    with open(out_path, "ab") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                pass_fds=(w,), start_new_session=True, close_fds=True)
    os.close(w)
    try:
        verdict = _wait_verdict(r, proc, timeout)
    finally:
        os.close(r)
    if verdict is None:
        if proc.poll() is None:
            fail_amq("AMQ1108", qmgr=qmgr, timeout=f"{timeout:g}", pid=proc.pid)
        fail_amq("AMQ6184", qmgr=qmgr, detail=f"the execution controller of '{qmgr}' ended "
                 f"unexpectedly (exit {proc.returncode}); see {out_path} and "
                 "errors/AMQERR01.LOG.")
    if not verdict.get("ok"):
        # the refused controller is ending: its own locks go with it first (it sends the
        # verdict before it releases them, and a controller refused after master was
        # granted, by the log directory say, was then this host's 'instance running')
        try:
            proc.wait(_CONTROLLER_EXIT_SECONDS)
        except subprocess.TimeoutExpired:
            pass
        _refuse_if_running_here(qmgr, settle=True)
    for line in verdict.get("lines", []):
        typer.echo(line, err=not verdict.get("ok"))
    if not verdict.get("ok"):
        raise typer.Exit(int(verdict.get("exit") or 71))


def main() -> None:
    """Console-script entry point."""
    run_typer(app, "strmqm")
