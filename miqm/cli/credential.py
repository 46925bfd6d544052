"""``miqm credential -m QMgr [--rotate] [--show]``: the listener's credentials file.

crtmqm creates ``<datadir>/credentials``; a queue manager created before that has none
(its listener accepts every client). This command creates the file when it is missing,
``--rotate`` replaces the admin secret (running instances read it at their next start),
and ``--show`` prints the admin credential (``admin:<secret>``) for a remote client's
``MIQM_CREDENTIAL``.
"""

from __future__ import annotations

import typer


def credential(qmgr: str, rotate: bool, show: bool) -> list[str]:
    """Do the work; returns the lines to print. MiqmError/LockFsError on failure."""
    from lockfs.volume import open_volume
    from miqm.net import auth
    from miqm.paths import find

    entry = find(qmgr)
    volume = open_volume(entry.data_path)
    lines = []
    try:
        principals = auth.read(volume)
        where = f"{entry.data_path}/{auth.CREDENTIALS_FILE}"
        if principals is None:
            principals = {auth.ADMIN: auth.new_secret()}
            auth.write(volume, principals)
            lines.append(f"Credentials created in {where}: the listener requires them from "
                         "the next start of the queue manager.")
        elif rotate:
            principals[auth.ADMIN] = auth.new_secret()
            auth.write(volume, principals)
            lines.append(f"The admin secret in {where} was replaced; restart the queue "
                         "manager's instances for their listeners to use it.")
        elif not show:
            lines.append(f"{where} exists (principals: {', '.join(sorted(principals))}).")
        if show:
            lines.append(f"{auth.ADMIN}:{principals[auth.ADMIN]}")
    finally:
        volume.close()
    return lines


def register(app: typer.Typer) -> None:
    """Add the ``credential`` command to the umbrella app."""

    @app.command("credential")
    def credential_cmd(
        qmgr: str = typer.Option(..., "-m", metavar="QMgr", help="queue manager"),
        rotate: bool = typer.Option(False, "--rotate", help="replace the admin secret"),
        show: bool = typer.Option(False, "--show",
                                  help="print the admin credential for MIQM_CREDENTIAL"),
    ) -> None:
        """Create, rotate or show the listener credential of a queue manager."""
        from lockfs.errors import LockFsError
        from miqm.cli.common import fail

        try:
            for line in credential(qmgr, rotate, show):
                typer.echo(line)
        except LockFsError as exc:
            fail(f"cannot reach the data directory of '{qmgr}': {exc}", 71)
