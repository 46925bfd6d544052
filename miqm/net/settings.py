"""Where and how an instance listens: the ``Listener`` (or MQ-like ``TCP``) stanza of
qm.ini, overridden by ``MIQM_LISTENER_HOST`` / ``MIQM_LISTENER_PORT``.

::

    Listener:
       Host=0.0.0.0              # bind address; loopback (127.0.0.1) by default
       Port=1414                 # 0 = any free port (tests, two instances on one machine)
       IdleTimeout=600           # seconds a connection may stay silent (0 = no limit)
       SSLCertFile=/path/qm.crt  # TLS: this queue manager's certificate (PEM) ...
       SSLKeyFile=/path/qm.key   # ... and its private key; both or neither
       SSLClientCAFile=/path/ca.crt  # optional: require client certificates signed by it

``TCP: Port=N`` (MQ's own stanza) is read when the ``Listener`` stanza gives no port.
``TCP: KeepAlive=No`` (or ``KeepAlive`` in the ``Listener`` stanza, which wins) turns off
the TCP keepalive probes on client connections (on by default, unlike MQ, whose
channels have heartbeats instead: :class:`miqm.net.server.KeepAlive`).
Both instances of a queue manager read the same qm.ini, so each listens on the same port
on its own host, and a client's CONNAME list is ``hosta(1414),hostb(1414)``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from miqm.errors import ConfigError

DEFAULT_PORT = 1414
DEFAULT_HOST = "127.0.0.1"
DEFAULT_IDLE_TIMEOUT = 600.0


@dataclass(frozen=True)
class ListenerSettings:
    """The listener's address and TLS files (empty = plain TCP)."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    cert_file: str = ""
    key_file: str = ""
    client_ca_file: str = ""
    keepalive: bool = True

    @property
    def tls(self) -> bool:
        """Whether the listener speaks TLS."""
        return bool(self.cert_file)


def _port(raw: str, where: str) -> int:
    try:
        port = int(raw.strip())
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ConfigError(f"{where} is {raw!r}: a listener port is a number from 0 to 65535 "
                          "(0 = any free port); correct it.", amq="AMQ9204")
    return port


def listener_settings(stanzas: Any, environ: Mapping[str, str] | None = None,
                      source: str = "qm.ini") -> ListenerSettings:
    """The listener settings from qm.ini's stanzas (``QMConfig.stanzas``) and the
    environment; ConfigError naming the bad value."""
    env = os.environ if environ is None else environ
    by_name: dict[str, dict[str, str]] = {}
    for s in stanzas or ():
        by_name.setdefault(s.name, {}).update(s.values)
    lst = by_name.get("Listener", {})
    tcp = by_name.get("TCP", {})
    host = lst.get("Host", "").strip() or DEFAULT_HOST
    port = DEFAULT_PORT
    if "Port" in lst:
        port = _port(lst["Port"], f"{source}: Listener Port")
    elif "Port" in tcp:
        port = _port(tcp["Port"], f"{source}: TCP Port")
    if env.get("MIQM_LISTENER_HOST", "").strip():
        host = env["MIQM_LISTENER_HOST"].strip()
    if env.get("MIQM_LISTENER_PORT", "").strip():
        port = _port(env["MIQM_LISTENER_PORT"], "MIQM_LISTENER_PORT")
    idle = DEFAULT_IDLE_TIMEOUT
    if "IdleTimeout" in lst:
        try:
            idle = float(lst["IdleTimeout"])
            if idle < 0:
                raise ValueError
        except ValueError:
            raise ConfigError(f"{source}: Listener IdleTimeout is {lst['IdleTimeout']!r}: "
                              "use seconds, 0 or more (0 = no limit).", amq="AMQ9204") from None
    keepalive = True
    for stanza, values in (("TCP", tcp), ("Listener", lst)):  # the Listener's wins
        if "KeepAlive" in values:
            raw = values["KeepAlive"].strip().upper()
            if raw not in ("YES", "NO"):
                raise ConfigError(f"{source}: {stanza} KeepAlive is {values['KeepAlive']!r}: "
                                  "use Yes or No.", amq="AMQ9204")
            keepalive = raw == "YES"
    cert, key = lst.get("SSLCertFile", "").strip(), lst.get("SSLKeyFile", "").strip()
    if bool(cert) != bool(key):
        raise ConfigError(f"{source}: Listener needs both SSLCertFile and SSLKeyFile for TLS "
                          "(or neither for plain TCP).", amq="AMQ9204")
    return ListenerSettings(host=host, port=port, idle_timeout=idle, cert_file=cert,
                            key_file=key, client_ca_file=lst.get("SSLClientCAFile", "").strip(),
                            keepalive=keepalive)
