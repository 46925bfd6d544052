"""Benchmark clients in this process: bindings mode as one host's installation."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

_CLIENT_VARS = ("MIQM_DATA_ROOT", "MIQM_HOSTNAME", "MIQM_CONNECTION")


@contextlib.contextmanager
def client_of(root: str, hostname: str) -> Iterator[None]:
    """Clients made inside resolve the queue manager as host ``hostname`` whose data root is
    ``root`` (bindings mode: they follow the active instance through the shared data
    directory); the environment is restored after."""
    saved = {k: os.environ.get(k) for k in _CLIENT_VARS}
    os.environ.update({"MIQM_DATA_ROOT": root, "MIQM_HOSTNAME": hostname})
    os.environ.pop("MIQM_CONNECTION", None)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def seconds_until_new_active(qmgr: str, old_host: str, t0: float, timeout: float,
                             connect_timeout: float, pause: float) -> float | None:
    """Seconds from ``t0`` until a client (set up by :func:`client_of`) gets an answer from
    an active instance on a host other than ``old_host``; ``None`` after ``timeout``."""
    from miqm.errors import MiqmError
    from miqm.net.client import connect

    while time.monotonic() - t0 < timeout:
        try:
            with connect(qmgr, timeout=connect_timeout) as conn:
                if conn.server_host != old_host:
                    conn.call("ping")
                    return time.monotonic() - t0
        except MiqmError:
            pass
        time.sleep(pause)
    return None
