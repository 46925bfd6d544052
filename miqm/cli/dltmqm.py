"""``dltmqm QMgr``: delete a queue manager's data and log directories and its mqs.ini entry.

Refused while any instance runs (anywhere: the lock files on the shared data directory
say so). On a host where the data is already gone (the other host of a multi-instance
pair ran dltmqm first), only this host's mqs.ini entry is removed, as rmvmqinf would.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import typer

from miqm import amq
from miqm.amq import PRODUCT
from miqm.cli.common import make_app, run_typer

if TYPE_CHECKING:
    from lockfs.volume import Volume

app = make_app("Delete a queue manager.")

#: Lock files an instance holds while it runs: master/active (active), standby (standby).
LOCK_NAMES = ("master", "active", "standby")


def held_locks(volume: object) -> list[str]:
    """Names of the lock files some running instance holds on ``volume`` (an unknown
    answer counts as held: deleting a running queue manager is the worse mistake)."""
    from miqm.net.client import lock_held

    return [name for name in LOCK_NAMES if lock_held(volume, name, probe=True) is not False]


def _who(qmgr: str, held: list[str]) -> str:
    """Where the instances holding ``held`` run, from their holder records, for the
    refusal: 'its instances run on hosta (active), hostb (standby)'."""
    from miqm.cli.endmqm import instances_elsewhere

    found = instances_elsewhere(qmgr)
    if not found:
        return f"an instance holds its {' and '.join(held)} lock{'s' if len(held) > 1 else ''}"
    where = ", ".join(f"{host} ({mode.lower()})" for host, mode in found)
    return f"its instance{'s run' if len(found) > 1 else ' runs'} on {where}"


def _log_location(data: Volume, data_path: str, qmgr: str) -> str | None:
    """The LogPath recorded in qm.ini (even a damaged one), or None."""
    from miqm.config import read_qm_ini

    cfg = read_qm_ini(data, data_path, qmgr, damaged_ok=True)
    return (cfg.log_path or None) if cfg is not None else None


@app.command()
def dltmqm(qmgr: str = typer.Argument(..., metavar="QMgr", help="queue manager name")) -> None:
    """Delete a queue manager."""
    from lockfs import open_volume
    from miqm.errors import MiqmError
    from miqm.paths import default_log_location, find, unregister

    entry = find(qmgr)
    data = open_volume(entry.data_path)
    try:
        present = data.exists("")
        if present:
            _refuse_if_read_only(data, entry.data_path, qmgr)
            held = held_locks(data)
            if held:
                raise MiqmError(
                    f"AMQ8041: {PRODUCT} queue manager '{qmgr}' is running ({_who(qmgr, held)}"
                    "). End every instance with endmqm first (endmqm -x for a standby, on "
                    "its host).", amq="AMQ8041")
            log_loc = _log_location(data, entry.data_path, qmgr) or _default_log_or_refuse(
                entry.data_path, qmgr, default_log_location(qmgr))
            log = open_volume(log_loc)
            try:
                if _log_in_use(log, log_loc, entry.data_path):
                    # an active on a data directory replaced under it (a copy, another
                    # export mounted there) holds no lock the data directory shows
                    raise MiqmError(
                        f"AMQ8041: {PRODUCT} queue manager '{qmgr}' is running: an "
                        f"instance holds the active lock in its log directory {log_loc}, "
                        "though none holds the data directory's (was the data directory "
                        "replaced under it?). End it with endmqm on its host first; "
                        "nothing was deleted.", amq="AMQ8041")
                log.remove_tree("")
            finally:
                log.close()
            _remove_dir(log_loc)
            data.remove_tree("")
            _remove_dir(entry.data_path)
    finally:
        data.close()
    unregister(qmgr)
    if present:
        typer.echo(amq.text("AMQ8002", qmgr=qmgr))
    else:
        # the other host deleted it, or the shared filesystem is not mounted here: the
        # data, if any, is where it was; say so rather than 'deleted'
        typer.echo(f"{amq.text('AMQ8002', qmgr=qmgr)[:-1]} from this host: its data "
                   f"directory {entry.data_path} does not exist here (deleted on the "
                   "other host, or the shared filesystem is not mounted), so only this "
                   "host's mqs.ini entry was removed, as rmvmqinf does.")


def _log_in_use(log: object, log_loc: str, data_path: str) -> bool:
    """Whether an instance holds ``active`` in the log directory (an active holds it
    there too, where the log directory is not the data directory)."""
    from miqm.net.client import lock_held

    if os.path.realpath(log_loc) == os.path.realpath(data_path):
        return False  # the same 'active', looked at already
    return lock_held(log, "active", probe=True) is True


def _refuse_if_read_only(data: object, data_path: str, qmgr: str) -> None:
    """Refuse, in one line, a data directory on a read-only filesystem: its lock files
    cannot be opened to ask whether an instance holds them, which read as 'running'
    (AMQ8041), and nothing could be deleted anyway."""
    import errno

    from lockfs.errors import LockFsError, VolumePermissionError
    from miqm.errors import MiqmError

    try:
        f = data.open("qm.ini")  # type: ignore[attr-defined]
    except VolumePermissionError as exc:
        if exc.errno != errno.EROFS:
            return
        raise MiqmError(amq.line(
            "AMQ6062", path=data_path,
            detail=f"it is on a read-only filesystem, so queue manager '{qmgr}' cannot be "
                   "deleted; nothing was deleted. Remount it read-write, then run dltmqm "
                   "again."), amq="AMQ6062") from None
    except LockFsError:
        return
    f.close()


def _default_log_or_refuse(data_path: str, qmgr: str, default: str) -> str:
    """The default log location (crtmqm without -ld) when qm.ini names no LogPath, if a
    log is there; otherwise refuse before anything is deleted: with a damaged or emptied
    qm.ini the data directory went and the log (crtmqm -ld elsewhere) stayed, and crtmqm
    of the same name then refused its non-empty log directory (AMQ8110)."""
    from lockfs import open_volume
    from lockfs.errors import LockFsError
    from miqm.errors import MiqmError

    try:
        log = open_volume(default)
        try:
            if log.exists("amqhlctl.lfh"):
                return default
        finally:
            log.close()
    except LockFsError:
        pass
    raise MiqmError(amq.line(
        "AMQ7017", qmgr=qmgr,
        detail=f"{data_path}/qm.ini is damaged or names no LogPath, and there is no log "
               f"at the default {default}, so dltmqm cannot tell which log directory to "
               "delete; nothing was deleted. Restore qm.ini from a backup (its Log stanza's "
               "LogPath names the log directory) and run dltmqm again, or delete the data "
               "and log directories by hand, then run dltmqm again to remove the entry."),
        amq="AMQ7017")


def _remove_dir(location: str) -> None:
    """Remove the (now empty) directory ``location`` itself through its parent."""
    from lockfs import open_volume
    from miqm.paths import split_location

    parent_loc, name = split_location(location)
    if not parent_loc or not name:
        return
    parent = open_volume(parent_loc)
    try:
        parent.rmdir(name)
    finally:
        parent.close()


def main() -> None:
    """Console-script entry point."""
    run_typer(app, "dltmqm")
