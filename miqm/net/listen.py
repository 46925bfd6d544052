"""The execution controller's listener, built from the queue manager's configuration:
address and port (:mod:`miqm.net.settings`), credentials (:mod:`miqm.net.auth`) and TLS.

Kept apart from the controller so the HA code only calls :func:`make_listener`.
"""

from __future__ import annotations

import secrets
from typing import Any

from miqm import authz
from miqm.net.auth import ADMIN, Authenticator, exposed_warning, local_credentials_path, read
from miqm.net.protocol import MQRC_NOT_AUTHORIZED, error_reply
from miqm.net.server import Handler, KeepAlive, Listener, Session, server_tls_context
from miqm.net.settings import listener_settings

#: The controller's own ops, answered before the queue service (and so before its
#: authority checks) sees a request: ``end`` (endmqm) is the administrator's alone, as
#: MQ's endmqm is the mqm group's; ``instance`` shows the instance (host, mode, pid, the
#: listener's counts) to a principal with DSP on the queue manager, as DISPLAY QMSTATUS.
CONTROL_OPS = frozenset({"end", "instance"})


def app_handler(ctl: Any, handler: Handler) -> Handler:
    """``handler`` for the sessions of application principals (not admin): the control
    ops (:data:`CONTROL_OPS`) are checked first. Any principal with a credential could
    end the queue manager (``{"op": "end", "mode": "immediate"}``) or read its pid,
    whatever its authority records said."""

    def serve(request: dict[str, Any], session: Session) -> dict[str, Any]:
        op = request.get("op")
        if op in CONTROL_OPS:
            refused = control_refusal(ctl, op, request, session)
            if refused is not None:
                return refused
        return handler(request, session)

    return serve


def control_refusal(ctl: Any, op: Any, request: dict[str, Any],
                    session: Session) -> dict[str, Any] | None:
    """None if ``session``'s principal may run control op ``op``, else the 2035 reply
    (the refusal logged through the queue service's authorizer: AMQ8077, rate-limited)."""
    principal = session.principal
    if principal is None or principal == ADMIN:
        return None
    service = getattr(ctl, "service", None)
    authorizer = getattr(service, "authorizer", None)
    if op == "instance" and authorizer is not None:
        # CONNECT and DSP on the queue manager, as the status op needs
        return authorizer.check("status", request, session)
    what = ("end the queue manager (endmqm: the administrator's credential)" if op == "end"
            else "display the instance on a standby")
    if authorizer is not None:
        refused = authorizer.refuse(principal, authz.QMGR, ctl.qmgr, "CTRL")
        refused["error"] = (f"principal '{principal}' may not {what} (MQRC 2035 "
                            "MQRC_NOT_AUTHORIZED)")
        return refused
    return error_reply(MQRC_NOT_AUTHORIZED, f"principal '{principal}' may not {what} "
                       "(MQRC 2035 MQRC_NOT_AUTHORIZED)", amq="AMQ8077")


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
        ctl.say("AMQ5534", f"A client at {peer} was refused by queue manager "
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
    warnings = [warning] if warning is not None else []
    if settings.tls:
        tls = server_tls_context(settings.cert_file, settings.key_file,
                                 settings.client_ca_file)
        # the private key is as secret as the credentials: warned about the same way (a
        # key others could read was used without a word)
        key_warning = exposed_warning(settings.key_file, "its TLS key file (SSLKeyFile)")
        if key_warning is not None:
            ctl.say("AMQ1133", f"Queue manager '{ctl.qmgr}': {key_warning}.")
            warnings.append(key_warning)

    def log(line: str) -> None:
        number = line.split(":", 1)[0] if line.startswith("AMQ") else "AMQ6184"
        ctl.say(number, line)

    # the local socket's name: unique to this start of this instance (a record left by a
    # dead instance cannot lead a command to another queue manager of the same name)
    ipc = f"miqm/{ctl.qmgr}/{ctl.pid}/{secrets.token_hex(6)}"
    listener = Listener(handler, host=settings.host, port=settings.port, log=log,
                        authenticator=auth, tls=tls, idle_timeout=settings.idle_timeout,
                        ipc=ipc, app_handler=app_handler(ctl, handler),
                        keepalive=KeepAlive() if settings.keepalive else None)
    #: lines for the console of the strmqm that starts this instance (the controller
    #: prints them with its own; they are in the error log already)
    listener.warnings = [f"AMQ1133W: Queue manager '{ctl.qmgr}': {w}." for w in warnings]
    return listener


def listener_stats(listener: Listener) -> dict[str, Any]:
    """What the listener counted: open sessions, refused credentials, and connections
    dropped for bad input by reason (for ``instance`` replies and metrics)."""
    auth = listener.authenticator
    return {"sessions": len(listener.sessions()),
            "auth_failures": getattr(auth, "failures", 0),
            "auth_required": bool(getattr(auth, "required", False)),
            "rejected": dict(listener.rejected)}
