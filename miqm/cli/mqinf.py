"""``dspmqinf`` and ``addmqinf``: copy a queue manager's mqs.ini entry to another host.

On the first host ``dspmqinf -o command QM1`` prints the ``addmqinf`` line to run on the
second, which registers the same shared data directory there (after checking it really
holds a queue manager: a ``qm.ini``).
"""

from __future__ import annotations

import os

import typer

from miqm import amq
from miqm.cli.common import fail, fail_amq, make_app, run_typer

dspmqinf_app = make_app("Display a queue manager's configuration information.")
addmqinf_app = make_app("Add queue manager configuration information to this host.")
rmvmqinf_app = make_app("Remove queue manager configuration information from this host.")


@dspmqinf_app.command()
def dspmqinf(
    qmgr: str = typer.Argument(..., metavar="QMgr", help="queue manager name"),
    output: str = typer.Option("stanza", "-o", help="stanza | command"),
) -> None:
    """Print the mqs.ini stanza, or (-o command) the addmqinf command that recreates it."""
    from miqm.paths import find

    if output not in ("stanza", "command"):
        fail(f"dspmqinf: -o {output} is not valid: use -o stanza or -o command.", 2)
    e = find(qmgr)
    if output == "command":
        typer.echo(f"addmqinf -s QueueManager -v Name={e.name} -v Directory={e.directory} "
                   f"-v Prefix={e.prefix} -v DataPath={e.data_path}")
        return
    typer.echo("QueueManager:")
    for key, value in (("Name", e.name), ("Directory", e.directory), ("Prefix", e.prefix),
                       ("DataPath", e.data_path)):
        typer.echo(f"   {key}={value}")


def _qm_ini_name(raw: bytes, data_path: str) -> str:
    """The queue manager a data directory's qm.ini names ('' when it names none); a qm.ini
    that cannot be parsed is AMQ6062."""
    from miqm.config import parse_ini
    from miqm.errors import ConfigError

    try:
        stanzas = parse_ini(raw.decode("utf-8", "replace"), f"{data_path}/qm.ini")
    except ConfigError as exc:
        fail_amq("AMQ6062", path=data_path, detail=f"its qm.ini is damaged ({exc}). Restore "
                 "it from a backup.")
    return next((s.values.get("Name", "") for s in stanzas if s.name == "QueueManager"), "")


@addmqinf_app.command()
def addmqinf(
    values: list[str] = typer.Option(..., "-v", metavar="Name=Value",
                                     help="Name, Directory, Prefix, DataPath"),
    stanza: str = typer.Option("QueueManager", "-s", help="stanza type (QueueManager)"),
) -> None:
    """Register an existing (shared) queue manager on this host."""
    from lockfs import open_volume
    from lockfs.errors import LockFsError
    from miqm.paths import QMgrEntry, check_qmgr_name, data_root, directory_name, register

    if stanza != "QueueManager":
        fail(f"addmqinf: -s {stanza} is not valid: only -s QueueManager is supported.", 2)
    attrs: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            fail(f"addmqinf: -v {item} is not Name=Value.", 2)
        if key not in ("Name", "Directory", "Prefix", "DataPath"):
            fail(f"addmqinf: -v {key} is not a QueueManager attribute: use Name, Directory, "
                 "Prefix or DataPath.", 2)
        attrs[key] = value
    if "Name" not in attrs or "DataPath" not in attrs:
        fail("addmqinf: -v Name=QMgr and -v DataPath=Path are both required "
             "(run 'dspmqinf -o command QMgr' on the first host to get the line).", 2)
    name = check_qmgr_name(attrs["Name"])
    data_path = attrs["DataPath"]
    if "://" not in data_path:  # recorded in mqs.ini, read from wherever commands run
        data_path = os.path.abspath(data_path)
    prefix = attrs.get("Prefix") or data_root()
    if os.path.normpath(prefix) != os.path.normpath(data_root()) and not os.path.isdir(prefix):
        fail(f"addmqinf: -v Prefix={prefix} is not a directory on this host: give this "
             f"host's own root ({data_root()}, MIQM_DATA_ROOT) or leave Prefix out.", 2)
    try:
        vol = open_volume(data_path)
        try:
            raw = vol.read_bytes("qm.ini") if vol.exists("qm.ini") else None
        finally:
            vol.close()
    except LockFsError as exc:
        fail_amq("AMQ6062", path=data_path, detail=f"it cannot be reached ({exc}). Check the "
                 "mount.")
    if raw is None:
        fail_amq("AMQ6062", path=data_path, detail="it does not hold a queue manager (no "
                 "qm.ini): give the shared data directory printed by dspmqinf on the first "
                 "host.")
    holder = _qm_ini_name(raw, data_path)
    if holder and holder != name:
        fail_amq("AMQ6062", path=data_path, detail=f"it holds queue manager '{holder}', not "
                 f"'{name}' (its qm.ini says Name={holder}): give -v Name={holder}, or the "
                 f"data directory of '{name}' (dspmqinf -o command {name} on its first host).")
    register(QMgrEntry(name, attrs.get("Directory") or directory_name(name), prefix,
                       data_path))
    typer.echo(amq.text("AMQ1007"))


@rmvmqinf_app.command()
def rmvmqinf(qmgr: str = typer.Argument(..., metavar="QMgr", help="queue manager name")
             ) -> None:
    """Remove a queue manager's mqs.ini entry from this host (its data stays), as MQ's
    rmvmqinf; refused while an instance of it runs on this host."""
    from miqm.cli.dspmq import local_from_locks
    from miqm.cli.endmqm import lock_holders
    from miqm.ha import runfile
    from miqm.paths import find, hostname, unregister

    find(qmgr)  # AMQ7048 for a name this host does not know
    local = runfile.read(qmgr) or local_from_locks(lock_holders(qmgr), hostname())
    if local is not None:
        standby = local.get("mode") == "standby"
        fail_amq("AMQ1104", f"End it first (endmqm{' -x' if standby else ''} {qmgr}): "
                 "without its entry it could no longer be ended or seen here.", qmgr=qmgr,
                 what="a standby instance" if standby else "an instance",
                 pid=local.get("pid"))
    unregister(qmgr)
    typer.echo(f"{amq.PRODUCT} configuration information removed.")


def rmvmqinf_main() -> None:
    """Console-script entry point for rmvmqinf (``rmvmqinf QMgr``)."""
    run_typer(rmvmqinf_app, "rmvmqinf")


def dspmqinf_main() -> None:
    """Console-script entry point for dspmqinf."""
    run_typer(dspmqinf_app, "dspmqinf")


def addmqinf_main() -> None:
    """Console-script entry point for addmqinf."""
    run_typer(addmqinf_app, "addmqinf")
