"""``dspmq [-m QMgr] [-x] [-o status | -o standby] [-s] [-a] [-f] [--json]``: status.

``-s`` is MQ's spelling of ``-o status``; ``-a`` lists only the queue managers with an
instance running on this host (active or standby); ``-n`` is accepted and changes nothing.

The status comes from this host's run record (an instance here), the lock files
(``master``/``active``/``standby``: held or not, asked without taking a lock) and
``qmstatus.ini``. Every queue manager is probed on a separate thread with a deadline, so
``dspmq`` answers within a second even when the shared filesystem hangs: the queue
manager is then reported as ``Status not available``, as it is when its data directory
or qm.ini cannot be read (removed, or a filesystem unmounted under it).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import typer

from miqm.cli.common import fail, make_app, run_typer

app = make_app("Display queue managers and their instances.")

DEADLINE = 0.9  # seconds for all probes together
#: a held lock whose holder record cannot be read (written over, truncated)
UNKNOWN = "unknown: its lock file holds no readable holder record"


def probe(name: str, data_path: str) -> dict[str, Any]:
    """What the lock files and qmstatus.ini say about ``name`` (may block on the FS).

    Raises (so that dspmq shows ``Status not available``, as MQ does) when the data
    directory or its qm.ini cannot be read: the directory removed, or a filesystem
    unmounted under it, says nothing about the queue manager's state."""
    from lockfs import open_volume
    from lockfs.errors import LockFsError, VolumePermissionError
    from lockfs.faults import wrap_from_env
    from lockfs.lockfile import peek
    from miqm.errors import ConfigError
    from miqm.ha import qmstatus

    volume = wrap_from_env(open_volume(data_path), "data")
    try:
        try:
            volume.read_head("qm.ini", 1)  # VolumeNotFound/LockFsError: not available
        except VolumePermissionError:
            # a read-only mount (or a file this user may only read): the status can still
            # be read, as the lock files are (peek)
            volume.open_readonly("qm.ini").close()
        locks = {}
        for lock in ("master", "active", "standby"):
            rec, held = peek(volume, lock)
            locks[lock] = {"held": held, "host": rec.host if rec else None,
                           "lock_id": rec.lock_id if rec else None,
                           "pid": rec.pid if rec else None,
                           "generation": rec.generation if rec else None}
        damaged = None
        try:
            try:
                st: Any = qmstatus.read(volume)
            except VolumePermissionError:  # a read-only mount: read it without writing
                st = qmstatus.read(_ReadOnly(volume))
        except ConfigError as exc:  # garbage: not "no status yet", which reads as Ended
            st, damaged = None, str(exc)
        except LockFsError:
            st = None
        learn = getattr(volume, "learn_lease", None)  # nfs4://: the server's lease
        lease = volume.lease_seconds if learn is not None and learn() else None
        return {"locks": locks, "lease": lease,
                "qmstatus": ({"damaged": damaged} if damaged is not None else None
                             if st is None else {
                                 "status": st.status, "permit_standby": st.permit_standby})}
    finally:
        volume.close()


class _ReadOnly:
    """A volume whose ``read_bytes`` opens the file read-only (the volumes open files
    read-write, which a read-only mount refuses); everything else is the volume's."""

    def __init__(self, volume: Any) -> None:
        self._volume = volume

    def read_bytes(self, path: str) -> bytes:
        """The whole content of a (small) file, opened read-only."""
        f = self._volume.open_readonly(path)
        try:
            return bytes(f.pread(f.size(), 0))
        finally:
            f.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._volume, name)


def controller_alive(pid: int) -> bool:
    """True if ``pid`` is a live miqm execution controller on this host."""
    from miqm.ha.runfile import instance_alive

    return instance_alive(int(pid))


def process_stopped(pid: int) -> bool:
    """True if ``pid`` is stopped by a signal (SIGSTOP, SIGTSTP: state T) or a tracer (t).
    A stopped instance keeps its locks and its pid, so nothing else tells it from a running
    one: dspmq on its host said Running while it served nothing (docs/runbook.md)."""
    try:
        with open(f"/proc/{int(pid)}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except (OSError, ValueError):
        return False
    # the command name in parentheses may hold spaces and ')': the state follows the last
    fields = stat[stat.rfind(")") + 1:].split()
    return bool(fields) and fields[0] in ("T", "t")


def local_from_locks(locks: dict[str, Any], here: str,
                     alive: Any = controller_alive) -> dict[str, Any] | None:
    """This host's instance as the lock files tell it, for when its run record is missing
    or unreadable: the ``master`` (active) or ``standby`` lock held, or not known to be
    free, by ``here`` for a process that is alive (``alive``: pid -> bool). A record in
    the shape of the run record, without its control ``address``; None if there is none."""
    for lock, mode in (("master", "active"), ("standby", "standby")):
        rec = locks.get(lock) or {}
        pid = rec.get("pid")
        if rec.get("held") is not False and rec.get("host") == here and pid and alive(pid):
            return {"pid": int(pid), "host": here, "mode": mode, "status": "Running",
                    "from_locks": True}
    return None


def describe(name: str, probed: dict[str, Any] | None, local: dict[str, Any] | None,
             here: str | None = None, alive: Any = None,
             stopped: Any = None) -> dict[str, Any]:
    """The dspmq facts for one queue manager (pure: tests feed it directly). With ``here``
    (this host's name) and ``alive`` (pid -> bool), a master lock still held for an
    instance of this host whose process is gone (the NFSv4 server keeps it until the lease
    runs out) is reported as such: ``holder_ended`` and one more line. With ``stopped``
    (pid -> bool), an instance of this host whose process is stopped (SIGSTOP) is marked
    ``stopped`` and said in one more line: it holds its lock and answers nothing."""
    instances: list[dict[str, Any]] = []
    standby = "Not applicable"
    if probed is None:
        status = "Status not available"
        if local is not None:
            instances.append({"host": local.get("host"), "mode": _mode(local.get("mode")),
                              "pid": local.get("pid")})
        return {"qmgr": name, "status": status, "standby": standby, "instances": instances,
                "locks": {}}
    locks = probed["locks"]
    st = probed.get("qmstatus") or {}
    master = locks["master"]
    standby_lock = locks["standby"]
    master_held = master["held"] is True or (master["held"] is None
                                             and st.get("status") in ("Running", "Starting"))
    if local is not None and local.get("mode") == "active":
        status = str(local.get("status") or "Running")
    elif local is not None and local.get("mode") == "standby":
        status = "Running as standby"
    elif local is not None:
        status = "Starting"
    elif master_held:
        status = "Running elsewhere"
    elif st.get("damaged"):
        # nothing says how it ended: "Ended normally" (the default of a status file not
        # yet written) would be a guess an administrator might act on
        status = "Status not available"
    else:
        recorded = str(st.get("status") or "Ended normally")
        status = recorded if recorded.startswith("Ended") else "Ended unexpectedly"
    # a lock held whose holder record is damaged still is an instance (host None: the
    # text says 'unknown'); it was left out, and a running standby vanished from dspmq -x
    if master_held and (master["host"] or master["held"] is True):
        instances.append({"host": master["host"], "mode": "Active", "pid": master["pid"]})
    if standby_lock["held"] is True:
        instances.append({"host": standby_lock["host"], "mode": "Standby",
                          "pid": standby_lock["pid"]})
    if local is not None and not any(i["host"] == local.get("host") for i in instances):
        instances.append({"host": local.get("host"), "mode": _mode(local.get("mode")),
                          "pid": local.get("pid")})
    if master_held:
        standby = "Permitted" if st.get("permit_standby") else "Not permitted"
    info = {"qmgr": name, "status": status, "standby": standby, "instances": instances,
            "locks": {k: v for k, v in locks.items() if v["held"]}}
    if st.get("damaged"):
        info["status_damaged"] = st["damaged"]
    if (status == "Running elsewhere" and here and alive is not None
            and master["host"] == here and master["pid"] and not alive(master["pid"])):
        info["holder_ended"] = {"host": here, "pid": master["pid"],
                                "lease_seconds": probed.get("lease")}
        for inst in instances:
            if inst["host"] == here and inst["mode"] == "Active":
                inst["ended"] = True
    if here and stopped is not None:
        for inst in instances:
            if inst["host"] == here and inst.get("pid") and not inst.get("ended") \
                    and stopped(inst["pid"]):
                inst["stopped"] = True
    return info


def _mode(mode: object) -> str:
    return {"active": "Active", "standby": "Standby"}.get(str(mode), "Starting")


def format_text(info: dict[str, Any], *, instances: bool, fields: list[str],
                locks: bool) -> list[str]:
    """dspmq's text lines for one queue manager."""
    head = f"QMNAME({info['qmgr']})".ljust(58)
    parts = []
    if "status" in fields:
        parts.append(f"STATUS({info['status']})")
    if "standby" in fields:
        parts.append(f"STANDBY({info['standby']})")
    lines = [(head + " ".join(parts)).rstrip()]
    if instances:
        for inst in info["instances"]:
            lines.append(f"    INSTANCE({inst['host'] or UNKNOWN}) MODE({inst['mode']})")
    if info.get("status_damaged"):
        lines.append(f"    {info['status_damaged']}")
    gone = info.get("holder_ended")
    if gone:
        lease = f" ({gone['lease_seconds']:g}s)" if gone.get("lease_seconds") else ""
        lines.append(f"    The instance on this host ({gone['host']}, pid {gone['pid']}) that "
                     "holds the master lock has ended: the server releases the lock when "
                     f"its lease{lease} runs out, and a standby instance then takes over.")
    for inst in info["instances"]:
        if inst.get("stopped"):
            what = ("serves no application and no standby takes over while it holds the "
                    "master lock" if inst["mode"] == "Active"
                    else "will not take over if the active instance fails")
            lines.append(f"    The {inst['mode'].lower()} instance on this host "
                         f"({inst['host']}, pid {inst['pid']}) is stopped (SIGSTOP): it "
                         f"{what}. Resume it with kill -CONT {inst['pid']}, or end it with "
                         f"kill -9 {inst['pid']}.")
    if locks:
        for name in ("master", "active", "standby"):
            lk = info["locks"].get(name)
            if lk and lk["host"]:
                lines.append(f"    {name}({lk['host']},{lk['lock_id']})")
            elif lk:
                lines.append(f"    {name}({UNKNOWN})")
    return lines


@app.command()
def dspmq(
    qmgr: str = typer.Option(None, "-m", metavar="QMgr", help="only this queue manager"),
    show_instances: bool = typer.Option(False, "-x", help="show the instances"),
    output: list[str] = typer.Option(None, "-o", metavar="status|standby|all|default",
                                     help="fields to show"),
    show_locks: bool = typer.Option(False, "-f", help="show the lock file holders"),
    as_json: bool = typer.Option(False, "--json", help="one JSON object per queue manager"),
    status_flag: bool = typer.Option(False, "-s", help="the status (the default; MQ's "
                                     "-s, as -o status)"),
    active_only: bool = typer.Option(False, "-a", help="only queue managers with an "
                                     "instance running on this host"),
    _untranslated: bool = typer.Option(False, "-n", help="accepted for MQ compatibility "
                                       "(output is never translated)"),
) -> None:
    """Display the queue managers defined on this host and their status."""
    from miqm.ha import runfile
    from miqm.paths import find, hostname, load_registry

    fields: list[str] = []
    for o in (output or []) + (["status"] if status_flag or not output else []):
        o = o.lower()
        if o in ("status", "default"):
            fields.append("status")
        elif o == "standby":
            fields.append("standby")
        elif o == "all":
            fields += ["status", "standby"]
        else:
            fail(f"dspmq: -o {o} is not supported: use status, standby, all or default "
                 "(try 'dspmq -h')", 2)
    entries = [find(qmgr)] if qmgr else sorted(load_registry().values(), key=lambda e: e.name)
    results: dict[str, dict[str, Any] | None] = {e.name: None for e in entries}
    try:  # a malformed MIQM_FAULTS is this command's input, not a filesystem's state
        from lockfs.faults import faults_from_env

        faults_from_env("data")
    except ValueError as exc:
        fail(f"dspmq: {exc}. Correct or unset MIQM_FAULTS (docs/lockfs.md).", 2)
    unexpected: list[str] = []

    def worker(name: str, data_path: str) -> None:
        from lockfs.errors import LockFsError
        from miqm.errors import MiqmError

        try:
            results[name] = probe(name, data_path)
        except (LockFsError, MiqmError, OSError):
            results[name] = None  # an unreadable shared filesystem: Status not available
        except Exception as exc:  # a bug: still Status not available, but said
            results[name] = None
            unexpected.append(f"dspmq: internal error reading the status of {name} "
                              f"({type(exc).__name__}: {exc}); please report it")

    threads = []
    for e in entries:
        t = threading.Thread(target=worker, args=(e.name, e.data_path), daemon=True)
        t.start()
        threads.append(t)
    deadline = time.monotonic() + DEADLINE
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    here = hostname()
    for e in entries:
        probed = results.get(e.name)
        local = runfile.read(e.name)
        if local is None and probed is not None:  # run record missing or unreadable
            local = local_from_locks(probed["locks"], here)
        info = describe(e.name, probed, local, here, controller_alive, process_stopped)
        if active_only and local is None:  # MQ's -a: running here (active or standby)
            continue
        if as_json:
            typer.echo(json.dumps(info))
        else:
            for line in format_text(info, instances=show_instances, fields=fields,
                                    locks=show_locks):
                typer.echo(line)
    for line in unexpected:
        typer.echo(line, err=True)


def main() -> None:
    """Console-script entry point."""
    run_typer(app, "dspmq")
