"""``miqm credential -m QMgr [--rotate] [--show] [--add NAME | --remove NAME]``: the
listener's credentials file.

crtmqm creates ``<datadir>/credentials``; a queue manager created before that has none
(its listener accepts every client). This command creates the file when it is missing,
``--rotate`` replaces the admin secret (running instances read it at their next start),
and ``--show`` prints the admin credential (``admin:<secret>``) for a remote client's
``MIQM_CREDENTIAL``. ``--add NAME`` adds an application principal with a fresh secret and
prints its credential (``NAME:<secret>``; with ``--rotate``, replaces its secret);
``--remove NAME`` deletes one. Authority records (SET AUTHREC, setmqaut) say what each
principal may do; the running listener notices the change by itself.
"""

from __future__ import annotations

import typer


def credential(qmgr: str, rotate: bool, show: bool, add: str = "",
               remove: str = "") -> list[str]:
    """Do the work; returns the lines to print. MiqmError/LockFsError on failure."""
    from lockfs.volume import open_volume
    from miqm.net import auth
    from miqm.paths import find

    if add or remove:
        return _principal(qmgr, add, remove, rotate)

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


def _principal(qmgr: str, add: str, remove: str, rotate: bool) -> list[str]:
    """--add/--remove of an application principal. A refusal is a ConfigError whose line
    starts with AMQ7026, so the command exits with AMQ7026's code (1), not AMQ7880's."""
    from lockfs.volume import open_volume
    from miqm import authz
    from miqm.errors import ConfigError
    from miqm.net import auth
    from miqm.paths import find

    name = add or remove
    try:
        authz.check_principal(name)
    except authz.AuthzError as exc:
        raise ConfigError(f"AMQ7026: {exc}.") from None
    entry = find(qmgr)
    volume = open_volume(entry.data_path)
    try:
        principals = auth.read(volume)
        if principals is None:
            raise ConfigError(f"queue manager '{qmgr}' has no credentials file: create it "
                              f"first with 'miqm credential -m {qmgr}'.", amq="AMQ7026")
        if remove:
            if name == auth.ADMIN:
                raise ConfigError("AMQ7026: the admin principal cannot be removed (rotate "
                                  "its secret with --rotate).")
            if name not in principals:
                raise ConfigError(f"AMQ7026: principal '{name}' is not in the credentials "
                                  "file.")
            del principals[name]
            auth.write(volume, principals)
            return [f"Principal '{name}' removed; its authority records stay until "
                    "DELETE AUTHREC."]
        if name in principals and not rotate:
            raise ConfigError(f"AMQ7026: principal '{name}' already exists; add --rotate to "
                              "replace its secret.")
        principals[name] = auth.new_secret()
        auth.write(volume, principals)
        return [f"{name}:{principals[name]}"]
    finally:
        volume.close()


def register(app: typer.Typer) -> None:
    """Add the ``credential`` command to the umbrella app."""

    @app.command("credential")
    def credential_cmd(
        qmgr: str = typer.Option(..., "-m", metavar="QMgr", help="queue manager"),
        rotate: bool = typer.Option(False, "--rotate", help="replace the admin secret"),
        show: bool = typer.Option(False, "--show",
                                  help="print the admin credential for MIQM_CREDENTIAL"),
        add: str = typer.Option("", "--add", metavar="NAME",
                                help="add an application principal; prints NAME:<secret>"),
        remove: str = typer.Option("", "--remove", metavar="NAME",
                                   help="remove an application principal"),
    ) -> None:
        """Create, rotate or show the listener credential of a queue manager; add or
        remove application principals."""
        from lockfs.errors import LockFsError
        from miqm.cli.common import fail, fail_usage

        if add and remove:
            # a usage error like every other wrong combination of flags (exit 2), not
            # AMQ7026, which says a principal's name is not valid
            fail_usage("give --add or --remove, not both.")
        if show and (add or remove):  # --show was ignored: it shows the admin credential
            fail_usage("--show prints the admin credential; it does not go with --add or "
                       "--remove (--add prints the new principal's credential itself).")
        if rotate and remove:  # --rotate was ignored
            fail_usage("--rotate replaces a secret (the admin's, or with --add NAME that "
                       "principal's); it does not go with --remove.")
        try:
            for line in credential(qmgr, rotate, show, add, remove):
                typer.echo(line)
        except LockFsError as exc:
            fail(f"cannot reach the data directory of '{qmgr}': {exc}", 71)
