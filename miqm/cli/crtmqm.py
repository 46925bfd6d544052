"""``crtmqm``: create a queue manager (data directory, qm.ini, recovery log, mqs.ini entry).

``crtmqm [-md DataPath] [-ld LogPath] [-lc | -ll] [-lf LogFilePages] [-lp Primary]
[-ls Secondary] [-ii IniFileOrDir] [-ic MqscFileOrDir] [-q] QMgr``. Data goes to
``DataPath/<dir>`` (default ``$MIQM_DATA_ROOT/qmgrs/<dir>``), the log to ``LogPath/<dir>`` (default
``$MIQM_DATA_ROOT/log/<dir>``); either may be an ``nfs4://`` URL.

Timings (standby poll, verify interval, checkpoint frequency) are not crtmqm flags, as
in MQ: change them in the ``TuningParameters:`` stanza of the new qm.ini with
``setmqini`` before ``strmqm``. On a filesystem whose lease can be measured (``nfs4://``:
the server is asked) crtmqm chooses VerifyInterval and MonitorStall that fit the lease and
says so in one line (:func:`miqm.autoconfig.fit_lease`).

``-ii`` / ``-ic`` record an ``AutoConfig:`` stanza (``IniConfig``, ``MQSCConfig``) applied
at every start: the ini files merged into qm.ini, the MQSC scripts run once the store is
open. They are checked here (they must exist, parse, and leave a valid qm.ini).
"""

from __future__ import annotations

import typer

from miqm import amq
from miqm.cli.common import fail, make_app, run_typer

app = make_app("Create a queue manager.")


def _auto_stanza(ini: str | None, mqsc_loc: str | None) -> dict[str, str]:
    """The AutoConfig keys for -ii/-ic (absolute paths), checked before anything is made."""
    import os

    from miqm import autoconfig

    keys: dict[str, str] = {}
    if ini:
        keys[autoconfig.INI_KEY] = os.path.abspath(ini)
        autoconfig.ini_files(keys[autoconfig.INI_KEY])
    if mqsc_loc:
        keys[autoconfig.MQSC_KEY] = os.path.abspath(mqsc_loc)
        autoconfig.check_mqsc(keys[autoconfig.MQSC_KEY])
    return keys


def _qm_ini(qmgr: str, settings: object, log_loc: str, lease: float | None,
            auto: dict[str, str]) -> tuple[str, str | None]:
    """qm.ini's text (timings fitted to ``lease``, AutoConfig recorded and checked) and the
    line about the lease, if one was measured."""
    from miqm import autoconfig
    from miqm.config import Stanza, format_ini, parse_ini, parse_qm_ini, render_qm_ini

    ha, lease_line = (autoconfig.fit_lease(lease) if lease else (None, None))
    text = render_qm_ini(qmgr, settings, log_loc, ha=ha)  # type: ignore[arg-type]
    if auto:
        stanzas = parse_ini(text, "qm.ini")
        stanzas.append(Stanza(autoconfig.STANZA, dict(auto)))
        text = format_ini(stanzas)
        merged, _ = autoconfig.apply_ini(text, "qm.ini")
        parse_qm_ini(merged, "qm.ini merged with -ii")
    return text, lease_line


def _absolute(location: str) -> str:
    """``location`` as an absolute path (an ``nfs4://`` URL as it is). mqs.ini and qm.ini
    record it, and every later command (and the other host, through dspmqinf's addmqinf
    line) reads it from wherever it runs: ``crtmqm -md rel/data`` recorded
    ``DataPath=rel/data/QM1``, which no command run from another directory found."""
    import os

    return location if "://" in location else os.path.abspath(location)


def _inside(location: str, directory: str) -> bool:
    """Whether ``location`` is ``directory`` or under it (paths or URLs, as written)."""
    loc, d = location.rstrip("/"), directory.rstrip("/")
    return loc == d or loc.startswith(d + "/")


def _refuse_overlap(qmgr: str, data_loc: str, log_loc: str, entries: dict) -> None:
    """Refuse a log directory that is the data directory or lies inside it (its lock
    would guard nothing), and a data or log directory inside the data directory of a
    queue manager this host knows: dltmqm of that one deletes its whole
    directory, and with it the new queue manager's files (crtmqm -md X/qmgrs/QM1 QM2 or
    -ld X/qmgrs/QM1 QM2 were accepted)."""
    from miqm.errors import ConfigError
    from miqm.paths import log_within_data

    overlap = log_within_data(data_loc, log_loc)
    if overlap is not None:
        raise ConfigError(amq.line(
            "AMQ7017", qmgr=qmgr, detail=f"{overlap}. Give -md and -ld directories apart "
            "from each other, neither inside the other, or leave -ld out."), amq="AMQ7017")
    for name, entry in entries.items():
        for flag, location in (("-md", data_loc), ("-ld", log_loc)):
            if not _inside(location, entry.data_path):
                continue
            why = (f"inside the data directory of queue manager '{name}' "
                   f"({entry.data_path}), which dltmqm {name} deletes whole: give {flag} a "
                   "directory of its own.")
            raise _location_error(qmgr, flag, location, f"is {why}")


def _log_space(exc: Exception, settings: object) -> Exception:
    """AMQ6708 for a log that could not be made (a full disk), saying how much room the
    log takes and how to ask for less: the line said only 'No space left on device'."""
    import errno

    from miqm.errors import LogWriteError

    text = str(exc)
    if getattr(exc, "errno", None) == errno.ENOSPC or "No space left" in text:
        pages = settings.file_pages  # type: ignore[attr-defined]
        primary = settings.primary_files  # type: ignore[attr-defined]
        secondary = settings.secondary_files  # type: ignore[attr-defined]
        mib = pages * 4096 / 1048576
        text = (f"{text.rstrip('.')}. The log needs {primary * mib:g} MiB now ({primary} "
                f"primary files, -lp, of {pages} pages of 4 KiB, -lf) and {secondary * mib:g}"
                f" MiB more for its {secondary} secondary files (-ls) when it fills: make "
                "room there, or give smaller -lf/-lp/-ls; nothing was created.")
    return LogWriteError(text, amq=getattr(exc, "amq", None) or "AMQ6708")


def _location_error(qmgr: str, flag: str, location: str, predicate: str) -> Exception:
    """-md's AMQ6062 or -ld's AMQ7017, saying that ``location`` ``predicate``."""
    from miqm.errors import ConfigError

    if flag == "-md":
        return ConfigError(amq.line("AMQ6062", path=location, detail=f"it {predicate}"),
                           amq="AMQ6062")
    return ConfigError(amq.line("AMQ7017", qmgr=qmgr, detail=f"{location} {predicate}"),
                       amq="AMQ7017")


def _unusable(qmgr: str, what: str, location: str, exc: Exception) -> Exception:
    """The error for a -md (AMQ6062) or -ld (AMQ7017) location that cannot be made or
    reached."""
    flag = "-md" if what == "data" else "-ld"
    return _location_error(qmgr, flag, location,
                           f"cannot be created or reached ({exc}). Give {flag} an existing, "
                           "writable directory (or an nfs4:// URL).")


def _create(qmgr: str, data_base: str | None, log_base: str | None, log_type: str,
            lf: int, lp: int, ls: int, auto: dict[str, str] | None = None) -> list[str]:
    """Do the work; returns the console lines. Raises MiqmError/LockFsError on failure."""
    from lockfs import open_volume
    from lockfs.errors import LockFsError
    from miqm import autoconfig
    from miqm.errors import ConfigError, LogWriteError
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
    data_parent = _absolute(data_base or join_location(root, "qmgrs"))
    log_parent = _absolute(log_base or join_location(root, "log"))
    data_loc = join_location(data_parent, dirname)
    log_loc = join_location(log_parent, dirname)
    _refuse_overlap(qmgr, data_loc, log_loc, load_registry())

    auto = auto or {}
    made: list[tuple[object, str]] = []  # (parent volume, dirname) to remove on failure
    parents = []
    try:
        for parent_loc, what in ((data_parent, "data"), (log_parent, "log")):
            try:
                parent = open_volume(parent_loc)
                parents.append(parent)
                parent.makedirs("")
            except LockFsError as exc:
                raise _unusable(qmgr, what, parent_loc, exc) from None
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
            text, lease_line = _qm_ini(qmgr, settings, log_loc,
                                       autoconfig.measured_lease(data), auto)
            data.write_atomic("qm.ini", text.encode())
            from miqm.net import auth

            auth.write(data, {auth.ADMIN: auth.new_secret()})  # the listener's admin
            data.makedirs("queues")
            data.makedirs("errors")
            from miqm.store.qmstore import QueueManagerStore

            try:
                QueueManagerStore.create(data, log, qmgr, settings)
            except LogWriteError as exc:
                raise _log_space(exc, settings) from None
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
        *([lease_line] if lease_line else []),
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
    ini_config: str = typer.Option(None, "-ii", metavar="IniFileOrDir",
                                   help="ini file(s) merged into qm.ini at every start "
                                   "(AutoConfig IniConfig)"),
    mqsc_config: str = typer.Option(None, "-ic", metavar="MqscFileOrDir",
                                    help="MQSC script(s) run at every start "
                                    "(AutoConfig MQSCConfig)"),
    default_qmgr: bool = typer.Option(False, "-q", help="accepted for MQ compatibility"),
) -> None:
    """Create a queue manager."""
    from miqm.store.settings import LogSizeError

    if circular and linear:
        fail("crtmqm: -lc and -ll cannot both be given: choose circular or linear logging.", 2)
    try:
        auto = _auto_stanza(ini_config, mqsc_config)
        lines = _create(qmgr, data_path, log_path, "LINEAR" if linear else "CIRCULAR",
                        file_pages, primary, secondary, auto)
    except LogSizeError as exc:
        # a flag's value: a usage error (exit 2) like every other bad flag (other
        # ConfigErrors, an -ic script's MAXDEPTH(-5) among them, are not the flags')
        fail(f"crtmqm: {exc} Correct -lf, -lp or -ls.", 2)
    for line in lines:
        typer.echo(line)


def main() -> None:
    """Console-script entry point."""
    run_typer(app, "crtmqm")
