"""This host's record of a running instance: ``$MIQM_DATA_ROOT/run/<dir>.json``.

Written by the execution controller (JSON ``pid``, ``qmgr``, ``host``, ``mode``,
``status``, ``address`` [host, port] of its control listener, ``ipc`` the name of its
local socket (None if it has none), ``started``) and removed
when it ends. Local commands (``endmqm``, ``dspmq``, ``strmqm``) read it to find the
instance on this host without touching the shared filesystem; a record whose process is
gone is stale and ignored.
"""

from __future__ import annotations

import json
import os
from typing import Any

from miqm.paths import data_root, directory_name


def path(qmgr: str, root: str | None = None) -> str:
    """Where the run record of ``qmgr`` lives on this host."""
    return os.path.join(root or data_root(), "run", f"{directory_name(qmgr)}.json")


def write(qmgr: str, record: dict[str, Any]) -> None:
    """Replace the record atomically."""
    p = path(qmgr)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    tmp = f"{p}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(record, f)
    os.replace(tmp, p)


def remove(qmgr: str, pid: int) -> None:
    """Remove the record if it is still ``pid``'s."""
    rec = read(qmgr, check_alive=False)
    if rec is not None and rec.get("pid") == pid:
        try:
            os.unlink(path(qmgr))
        except FileNotFoundError:
            pass


def alive(pid: int) -> bool:
    """True if process ``pid`` exists (and is not a zombie). A pid no process can have
    (0 or below, which ``kill`` takes for process groups, or past the C range) is not
    alive: a run record written over by hand carried one, and every local command
    (strmqm, endmqm, dspmq) ended on an internal error."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True


def instance_alive(pid: int) -> bool:
    """True if ``pid`` is a live miqm process other than this one. After a reboot or a
    container restart a left-over record's pid may name another program, or this very
    process (a container's pid 1): neither is the instance the record was written by."""
    if pid == os.getpid() or not alive(pid):
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"miqm" in f.read()
    except FileNotFoundError:
        return False
    except OSError:
        return True


def read(qmgr: str, *, check_alive: bool = True) -> dict[str, Any] | None:
    """The record of the instance on this host, or None (none, unreadable, or stale:
    its process is gone, or is not the instance, :func:`instance_alive`)."""
    try:
        with open(path(qmgr), encoding="utf-8") as f:
            rec = json.load(f)
        pid = int(rec["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if check_alive and not instance_alive(pid):
        return None
    return rec if isinstance(rec, dict) else None
