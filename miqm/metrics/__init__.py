"""Prometheus metrics: every running instance's ``/metrics`` endpoint
(:mod:`miqm.metrics.instance`), ``miqm exporter`` for a queue manager as the shared files
show it (:mod:`miqm.metrics.exporter`), and where they listen
(:mod:`miqm.metrics.settings`). docs/metrics.md lists every metric.

Importing this package does not import prometheus_client: the controller calls
:func:`start_for_controller` on every start, and only an instance that serves metrics
pays for the import.
"""

from __future__ import annotations

from typing import Any

from miqm.errors import MetricsError


def start_for_controller(ctl: Any) -> Any | None:
    """Serve ``/metrics`` for the execution controller ``ctl`` (after its setup) as qm.ini
    and ``MIQM_METRICS_PORT`` say; None when no endpoint is configured, or when it cannot
    be served and qm.ini says ``Required=No`` (the error log says why).

    Raises MetricsError (one line naming qm.ini and the key) otherwise."""
    from miqm.metrics.settings import metrics_required, metrics_settings

    source = f"{ctl.data.describe()}/qm.ini"
    stanzas = list(ctl.cfg.stanzas)
    try:
        settings = metrics_settings(stanzas, source)
        if not settings.enabled:
            return None
        from miqm.metrics.instance import InstanceCollector
        from miqm.metrics.server import serve

        collector = InstanceCollector(ctl, queue_limit=settings.queue_limit)
        server = serve(collector, settings.port, settings.bind,
                       settings.port_source, bind_what=f"{source}: Metrics: BindAddress")
    except MetricsError as exc:
        if metrics_required(stanzas, source):
            raise
        ctl.say("AMQ7880", f"{exc.user_line()} Starting without a metrics endpoint "
                           f"(Metrics: Required=No in {source}).")
        return None
    host, port = server.address
    ctl.event("metrics", address=f"{host}:{port}")
    return server
