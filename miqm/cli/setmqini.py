"""``setmqini -m QMgr -s Stanza -k Key (-v Value | -d)``: change qm.ini wherever it lives.

The queue manager's data directory may be a local path, a kernel NFS mount, or an
``nfs4://`` URL nobody has mounted: setmqini reads and rewrites qm.ini through the same
volume layer the queue manager uses (the file is replaced atomically). The first stanza
of that name gets the key (the stanza is added if there is none); ``-d`` deletes the key
(and a stanza left empty). The result must still be a valid qm.ini, or nothing is
written. Changes take effect at the next ``strmqm``. Comments in qm.ini are not kept.
"""

from __future__ import annotations

import typer

from miqm.cli.common import fail, make_app, run_typer

app = make_app("Change a key of a queue manager's qm.ini (-v Value to set, -d to delete).")


@app.command()
def setmqini(
    qmgr: str = typer.Option(..., "-m", metavar="QMgr", help="queue manager name"),
    stanza: str = typer.Option(..., "-s", metavar="Stanza", help="stanza, e.g. "
                               "TuningParameters"),
    key: str = typer.Option(..., "-k", metavar="Key", help="key, e.g. VerifyInterval"),
    value: str = typer.Option(None, "-v", metavar="Value", help="the value to set"),
    delete: bool = typer.Option(False, "-d", help="delete the key"),
) -> None:
    """Set (-v) or delete (-d) one key of the queue manager's qm.ini."""
    from lockfs.errors import VolumeNotFound
    from lockfs.volume import open_volume
    from miqm import autoconfig
    from miqm.config import check_complete, decode_ini, format_ini, parse_ini, parse_qm_ini
    from miqm.errors import ConfigError, MiqmError
    from miqm.paths import check_qmgr_name, find

    if delete == (value is not None):
        fail("setmqini: give exactly one of -v Value (set the key) or -d (delete it).", 2)
    check_qmgr_name(qmgr)
    entry = find(qmgr)
    source = f"{entry.data_path}/qm.ini"
    data = open_volume(entry.data_path)
    try:
        try:
            raw = data.read_bytes("qm.ini")
        except VolumeNotFound:
            raise ConfigError(f"AMQ7880: qm.ini of queue manager '{qmgr}' is missing from "
                              f"{entry.data_path}; restore it or recreate the queue "
                              "manager.") from None
        text = decode_ini(raw, source)  # not 'replace': it would be written back changed
        stanzas = parse_ini(text, source)
        if delete:
            if not autoconfig.delete_key(stanzas, stanza, key):
                typer.echo(f"setmqini: qm.ini of '{qmgr}' has no {stanza} {key}; nothing "
                           "to delete.", err=True)
                return
        else:
            autoconfig.set_key(stanzas, stanza, key, value)
        new = format_ini(stanzas)
        try:
            parse_qm_ini(new, source)
            check_complete(new, source)
            _check_listener_and_metrics(new, source)
        except MiqmError as exc:
            raise ConfigError(f"setmqini: not changed, the result would not be valid: "
                              f"{exc}", exit_code=2) from None
        data.write_atomic("qm.ini", new.encode())
    finally:
        data.close()


def _check_listener_and_metrics(text: str, source: str) -> None:
    """The Listener and Metrics stanzas as strmqm reads them (it refused 'Listener
    Port=abc' at the next start, which setmqini had written without a word), without the
    environment (the file is checked, not this shell's overrides) and without the rule
    that SSLCertFile and SSLKeyFile come together: setmqini sets one key at a time."""
    from miqm.config import parse_ini
    from miqm.metrics.settings import metrics_settings
    from miqm.net.settings import listener_settings

    stanzas = parse_ini(text, source)
    metrics_settings(stanzas, source, env={})
    for s in stanzas:
        if s.name == "Listener":
            s.values.pop("SSLCertFile", None)
            s.values.pop("SSLKeyFile", None)
    listener_settings(stanzas, environ={}, source=source)


def main() -> None:
    """Console-script entry point."""
    run_typer(app, "setmqini")
