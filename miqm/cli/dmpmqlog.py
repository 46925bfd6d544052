"""``dmpmqlog -m QMgr [-s LSN] [-f LogPath] [--json]``: the recovery log's records for a
person to read, as MQ's dmpmqlog prints them: the control file, one line per record from
the restart point (or from ``-s LSN``, an older record of a linear log), then where the
log ends.

For a queue manager that is not running (``amqldmpa`` shows a running one's logger): it
is how a log that stops ``strmqm`` is looked into. It writes nothing. Damage ends the dump
with the reader's one line (exit 71), after every record before it.
"""

from __future__ import annotations

import json
from typing import Any

import typer

from miqm.cli.common import fail, make_app, run_typer

app = make_app("Dump the recovery log's records.")


@app.command()
def dmpmqlog(
    qmgr: str = typer.Option(..., "-m", metavar="QMgr", help="queue manager name"),
    start: int = typer.Option(None, "-s", metavar="LSN", min=0,
                              help="first record (an LSN at or after the restart point, or "
                                   "an older one a linear log still holds)"),
    log_path: str = typer.Option(None, "-f", metavar="LogPath",
                                 help="the log directory (default: qm.ini's LogPath)"),
    as_json: bool = typer.Option(False, "--json", help="one JSON document"),
) -> None:
    """Dump the recovery log of a queue manager that is not running."""
    from lockfs import open_volume
    from miqm.amq import PRODUCT
    from miqm.cli.dltmqm import held_locks
    from miqm.config import read_qm_ini
    from miqm.errors import MiqmError, StoreError
    from miqm.paths import default_log_location, find
    from miqm.store import logdump

    entry = find(qmgr)
    data = open_volume(entry.data_path)
    try:
        if not data.exists(""):
            fail(f"AMQ6062: the data directory of '{qmgr}', {entry.data_path}, does not exist "
                 "on this host: mount the shared filesystem, then run dmpmqlog again.", 71)
        if held_locks(data):
            raise MiqmError(f"AMQ8041: {PRODUCT} queue manager '{qmgr}' is running: its log "
                            "is being written while it would be read. End every instance "
                            f"with endmqm first, or use amqldmpa -m {qmgr} for the logger of "
                            "a running queue manager.", amq="AMQ8041")
        cfg = read_qm_ini(data, entry.data_path, qmgr)
    finally:
        data.close()
    where = log_path or cfg.log_path or default_log_location(qmgr)
    log_volume = open_volume(where)
    records: list[dict[str, Any]] = []
    head: dict[str, Any] = {}
    try:
        try:
            log = logdump.open_log(log_volume, cfg.log)
        except StoreError as exc:
            _end(as_json, qmgr, where, head, records, None, str(exc))
        try:
            head = logdump.header(log)
            if not as_json:
                typer.echo(f"Log of queue manager {qmgr} in {where}")
                for key, value in head.items():
                    typer.echo(f"{key}:\t{value}")
                typer.echo("")
            try:
                for e in logdump.entries(log, start):
                    if as_json:
                        records.append(e.as_dict())
                    else:
                        typer.echo(e.line())
            except StoreError as exc:
                _end(as_json, qmgr, where, head, records, None, str(exc))
            _end(as_json, qmgr, where, head, records, logdump.trailer(log), None)
        finally:
            log.close()
    finally:
        log_volume.close()


def _end(as_json: bool, qmgr: str, where: str, head: dict[str, Any],
         records: list[dict[str, Any]], tail: dict[str, Any] | None,
         error: str | None) -> None:
    """The dump's end: where the log ends, or the damage that ended it (exit 71)."""
    if as_json:
        doc = {"qmgr": qmgr, "log_path": where, "control": head, "records": records,
               "end": tail, "error": error}
        typer.echo(json.dumps(doc, indent=1))
        if error:
            raise typer.Exit(71)
        return
    if error:
        fail(error, 71)
    assert tail is not None
    typer.echo("")
    for key, value in tail.items():
        typer.echo(f"{key}:\t{value}")


def main() -> None:
    """Console-script entry point."""
    run_typer(app, "dmpmqlog")
