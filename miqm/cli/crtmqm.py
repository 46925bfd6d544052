"""``crtmqm``: create a queue manager (data directory, qm.ini, recovery log, mqs.ini entry).

``crtmqm [-md DataPath] [-ld LogPath] [-lc | -ll] [-lf LogFilePages] [-lp Primary]
[-ls Secondary] [-q] QMgr``. Data goes to ``DataPath/<dir>`` (default
``$MIQM_DATA_ROOT/qmgrs/<dir>``), the log to ``LogPath/<dir>`` (default
``$MIQM_DATA_ROOT/log/<dir>``); either may be an ``nfs4://`` URL.

Timings (standby poll, verify interval, checkpoint frequency) are not crtmqm flags, as
in MQ: edit the ``TuningParameters:`` stanza of the new qm.ini before ``strmqm``.
"""

from __future__ import annotations

import typer

from miqm import amq
from miqm.cli.common import fail, make_app, run_typer

app = make_app("Create a queue manager.")


def _create(qmgr: str, data_base: str | None, log_base: str | None, log_type: str,
            lf: int, lp: int, ls: int) -> list[str]:
    """Do the work; returns the console lines. Raises MiqmError/LockFsError on failure."""
    from lockfs import open_volume
    from miqm.config import render_qm_ini
    from miqm.errors import ConfigError
    from miqm.paths import (
        QMgrEntry,
        check_qmgr_name,
        data_root,
        directory_name,
        join_location,
        load_registry,
        register,
    )
    from miqm.store.settings import LogSettings

    check_qmgr_name(qmgr)
    settings = LogSettings(log_type=log_type, file_pages=lf, primary_files=lp,
                           secondary_files=ls)
    root = data_root()
    if qmgr in load_registry():
        raise ConfigError(amq.line("AMQ8110", qmgr=qmgr), amq="AMQ8110")
    dirname = directory_name(qmgr)
    data_parent = data_base or join_location(root, "qmgrs")
    log_parent = log_base or join_location(root, "log")
    data_loc = join_location(data_parent, dirname)
    log_loc = join_location(log_parent, dirname)

    made: list[tuple[object, str]] = []  # (parent volume, dirname) to remove on failure
    parents = []
    try:
        for parent_loc, what in ((data_parent, "data"), (log_parent, "log")):
            parent = open_volume(parent_loc)
            parents.append(parent)
            parent.makedirs("")
            if parent.exists(dirname) and parent.listdir(dirname):
                raise ConfigError(
                    f"{amq.line('AMQ8110', qmgr=qmgr)[:-1]}: the {what} directory "
                    f"{join_location(parent_loc, dirname)} is not empty. Delete it "
                    "or choose another -md/-ld.", amq="AMQ8110")
            parent.makedirs(dirname)
            made.append((parent, dirname))
        data = open_volume(data_loc)
        log = open_volume(log_loc)
        try:
            data.write_atomic("qm.ini", render_qm_ini(qmgr, settings, log_loc).encode())
            from miqm.net import auth

            auth.write(data, {auth.ADMIN: auth.new_secret()})  # the listener's admin
            data.makedirs("queues")
            data.makedirs("errors")
            from miqm.store.qmstore import QueueManagerStore

            QueueManagerStore.create(data, log, qmgr, settings)
        finally:
            data.close()
            log.close()
        register(QMgrEntry(qmgr, dirname, root, data_loc))
    except BaseException:
        # leave nothing half-made behind, so the user can simply run crtmqm again
        for parent, name in made:
            try:
                parent.remove_tree(name)  # type: ignore[attr-defined]
            except Exception:  # best effort; the original error matters
                pass
        raise
    finally:
        for parent in parents:
            parent.close()
    return [
        amq.text("AMQ8001"),
        f"Directory '{data_loc}' created.",
        "The queue manager is associated with installation 'Installation1'.",
        f"Creating or replacing default objects for queue manager '{qmgr}'.",
        "Default objects statistics : 0 created. 0 replaced. 0 failed.",
        "Completing setup.",
        "Setup completed.",
    ]


@app.command()
def crtmqm(
    qmgr: str = typer.Argument(..., metavar="QMgr", help="queue manager name"),
    data_path: str = typer.Option(None, "-md", metavar="DataPath",
                                  help="parent of the data directory (path or nfs4:// URL)"),
    log_path: str = typer.Option(None, "-ld", metavar="LogPath",
                                 help="parent of the log directory (path or nfs4:// URL)"),
    circular: bool = typer.Option(False, "-lc", help="circular logging (the default)"),
    linear: bool = typer.Option(False, "-ll", help="linear logging"),
    file_pages: int = typer.Option(4096, "-lf", metavar="LogFilePages",
                                   help="log extent size in 4 KiB pages (64-65535)"),
    primary: int = typer.Option(3, "-lp", metavar="Primary", help="primary log files (2-510)"),
    secondary: int = typer.Option(2, "-ls", metavar="Secondary",
                                  help="secondary log files (1-509)"),
    default_qmgr: bool = typer.Option(False, "-q", help="accepted for MQ compatibility"),
) -> None:
    """Create a queue manager."""
    from miqm.errors import ConfigError

    if circular and linear:
        fail("crtmqm: -lc and -ll cannot both be given: choose circular or linear logging.", 2)
    try:
        lines = _create(qmgr, data_path, log_path, "LINEAR" if linear else "CIRCULAR",
                        file_pages, primary, secondary)
    except ConfigError as exc:
        if "out of range" in str(exc) or "exceeds" in str(exc):
            fail(f"AMQ8101: crtmqm: {exc} Correct -lf, -lp or -ls.", 2)
        raise
    for line in lines:
        typer.echo(line)


def main() -> None:
    """Console-script entry point."""
    run_typer(app, "crtmqm")
