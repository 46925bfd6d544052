"""Where an instance serves ``/metrics``: qm.ini's ``Metrics:`` stanza, with
``MIQM_METRICS_PORT`` in the environment over its port.

::

    Metrics:
       Port=9464              # 0 or absent: no endpoint (the default)
       BindAddress=127.0.0.1  # the address to listen on (0.0.0.0: every interface)
       Required=Yes           # No: a port that cannot be used is reported, and the
                              # instance starts without metrics
       QueueLimit=1000        # queues with per-queue series (in name order); 0: none

Pure (no Prometheus import): the controller calls it for every start, metrics or not.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from miqm.config import Stanza
from miqm.errors import MetricsError

STANZA = "Metrics"
ENV_PORT = "MIQM_METRICS_PORT"
DEFAULT_BIND = "127.0.0.1"
#: queues with series of their own by default: 3 series each, so 3,000 series and about
#: 0.25 MB a scrape at most; 10,000 queues (30,000 series) outgrew a scrape timeout
DEFAULT_QUEUE_LIMIT = 1000


@dataclass(frozen=True)
class MetricsSettings:
    """The endpoint an instance serves: ``port`` 0 means none."""

    port: int = 0
    bind: str = DEFAULT_BIND
    required: bool = True
    #: where the port came from, for error lines: "qm.ini" key or the environment variable
    port_source: str = "qm.ini"
    #: queues with per-queue series (Metrics: QueueLimit)
    queue_limit: int = DEFAULT_QUEUE_LIMIT

    @property
    def enabled(self) -> bool:
        """True if an endpoint is to be served."""
        return self.port != 0


def parse_port(raw: str, what: str) -> int:
    """A TCP port number 0-65535 from ``raw``; MetricsError naming ``what`` otherwise."""
    text = raw.strip()
    if not text.isdigit() or int(text) > 65535:
        raise MetricsError(f"{what}={raw!r} is not a port number: use 1-65535, or 0 for no "
                           "metrics endpoint")
    return int(text)


def metrics_required(stanzas: Iterable[Stanza], source: str = "qm.ini") -> bool:
    """qm.ini ``Metrics: Required`` (Yes unless No): must the instance refuse to start
    when its metrics endpoint cannot be served?"""
    raw = "Yes"
    for s in stanzas:
        if s.name == STANZA:
            raw = s.values.get("Required", raw)
    if raw.strip().lower() not in ("yes", "no"):
        raise MetricsError(f"{source}: {STANZA}: Required={raw!r} must be Yes or No")
    return raw.strip().lower() == "yes"


def metrics_settings(stanzas: Iterable[Stanza], source: str = "qm.ini",
                     env: Mapping[str, str] | None = None) -> MetricsSettings:
    """The settings from qm.ini's stanzas (``source`` names the file) and the environment.

    Every bad value is one MetricsError line naming the file, the stanza and the key."""
    env = os.environ if env is None else env
    stanzas = list(stanzas)
    values: dict[str, str] = {}
    for s in stanzas:
        if s.name == STANZA:
            values.update(s.values)
    required = metrics_required(stanzas, source)
    bind = values.get("BindAddress", DEFAULT_BIND).strip() or DEFAULT_BIND
    try:
        ipaddress.ip_address(bind)
    except ValueError:
        raise MetricsError(f"{source}: {STANZA}: BindAddress={bind!r} is not an IP address "
                           "(use 127.0.0.1 for this host only, 0.0.0.0 for every "
                           "interface)") from None
    raw_limit = values.get("QueueLimit", str(DEFAULT_QUEUE_LIMIT)).strip()
    if not raw_limit.isdigit():
        raise MetricsError(f"{source}: {STANZA}: QueueLimit={raw_limit!r} is not a number of "
                           f"queues: use 0 (no per-queue series) or more (default "
                           f"{DEFAULT_QUEUE_LIMIT})")
    limit = int(raw_limit)
    if env.get(ENV_PORT, "").strip():
        port = parse_port(env[ENV_PORT], f"{ENV_PORT} (over {source} {STANZA}: Port)")
        return MetricsSettings(port, bind, required, ENV_PORT, limit)
    port = parse_port(values.get("Port", "0"), f"{source}: {STANZA}: Port")
    return MetricsSettings(port, bind, required, f"{source} {STANZA}: Port", limit)
