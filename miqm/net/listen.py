"""The execution controller's listener, built from the queue manager's configuration:
address and port (:mod:`miqm.net.settings`), credentials (:mod:`miqm.net.auth`) and TLS.

Kept apart from the controller so the HA code only calls :func:`make_listener`.
"""

from __future__ import annotations

import secrets
from typing import Any

from miqm.net.auth import Authenticator, exposed_warning, local_credentials_path, read
from miqm.net.server import Handler, Listener, server_tls_context
from miqm.net.settings import listener_settings


def make_listener(ctl: Any, handler: Handler) -> Listener:
    """A listener for controller ``ctl`` (its ``cfg``, ``data`` volume, ``qmgr``, ``pid``
    and ``say``), on the configured address and on a local socket for this host's
    commands (:class:`~miqm.net.server.Listener`'s ``ipc``); ConfigError with one line
    for a bad setting or an unusable credentials/TLS file."""
    settings = listener_settings(ctl.cfg.stanzas)
    principals = read(ctl.data)

    def on_failure(peer: str, principal: str, suppressed: int) -> None:
        more = f" ({suppressed} more failures in the last minute were not logged)" \
            if suppressed else ""
        ctl.say("AMQ5534", f"AMQ5534E: a client at {peer} was refused by queue manager "
                           f"'{ctl.qmgr}': the credential for principal '{principal}' is "
                           f"missing or wrong (MQRC 2035 MQRC_NOT_AUTHORIZED){more}.")
        ctl.event("auth_failure", peer=peer, principal=principal)

    auth = Authenticator(principals, on_failure,
                         source=(lambda: read(ctl.data)) if principals is not None else None)
    path = local_credentials_path(ctl.data) if principals is not None else None
    warning = exposed_warning(path, "its credentials file") if path else None
    if warning is not None:
        # warned, not refused: the docs give 0600 as the mode crtmqm makes, and a standby
        # that refused would leave the queue manager without one
        ctl.say("AMQ1133", f"Queue manager '{ctl.qmgr}': {warning}.")
    if principals is None:
        ctl.say("AMQ5540", f"AMQ5540W: queue manager '{ctl.qmgr}' has no credentials file: "
                           "its listener accepts every client. Create one with "
                           f"'miqm credential -m {ctl.qmgr}' to require a credential.")
    tls = None
    if settings.tls:
        tls = server_tls_context(settings.cert_file, settings.key_file,
                                 settings.client_ca_file)

    def log(line: str) -> None:
        number = line.split(":", 1)[0] if line.startswith("AMQ") else "AMQ6184"
        ctl.say(number, line)

    # the local socket's name: unique to this start of this instance (a record left by a
    # dead instance cannot lead a command to another queue manager of the same name)
    ipc = f"miqm/{ctl.qmgr}/{ctl.pid}/{secrets.token_hex(6)}"
    listener = Listener(handler, host=settings.host, port=settings.port, log=log,
                        authenticator=auth, tls=tls, idle_timeout=settings.idle_timeout,
                        ipc=ipc)
    #: lines for the console of the strmqm that starts this instance (the controller
    #: prints them with its own; they are in the error log already)
    listener.warnings = [f"AMQ1133W: Queue manager '{ctl.qmgr}': {warning}."] if warning \
        else []
    return listener


def listener_stats(listener: Listener) -> dict[str, Any]:
    """What the listener counted: open sessions, refused credentials, and connections
    dropped for bad input by reason (for ``instance`` replies and metrics)."""
    auth = listener.authenticator
    return {"sessions": len(listener.sessions()),
            "auth_failures": getattr(auth, "failures", 0),
            "auth_required": bool(getattr(auth, "required", False)),
            "rejected": dict(listener.rejected)}
