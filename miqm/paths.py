"""Where a queue manager lives: the host's data root, ``mqs.ini``, and each queue
manager's data and log locations (local paths or ``nfs4://`` URLs).

``mqs.ini`` is per host (under ``MIQM_DATA_ROOT``); updates are serialised with an
inter-process lock (fasteners) so two commands never interleave a rewrite.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import fasteners

from miqm.config import Stanza, format_ini, parse_ini
from miqm.errors import ConfigError, QMgrNotFound, UsageError

_QM_NAME = re.compile(r"[A-Za-z0-9._/%]{1,48}")  # fullmatch: '$' would let "QM1\n" in


def data_root() -> str:
    """This host's root (``MIQM_DATA_ROOT``, default ``/var/mqm``)."""
    # absolute: a relative root would give each working directory its own mqs.ini
    return os.path.abspath(os.environ.get("MIQM_DATA_ROOT") or "/var/mqm")


_HOST_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")


def hostname() -> str:
    """The host name this instance reports (``MIQM_HOSTNAME`` or the OS host name).

    It goes into lock files, run files and dspmq's lines, so it must be a DNS-like name:
    1 to 64 letters, digits, '.', '-' and '_'. Anything else (an empty MIQM_HOSTNAME
    included) is a UsageError naming the variable."""
    raw = os.environ.get("MIQM_HOSTNAME")
    name = socket.gethostname() if raw is None else raw
    if not _HOST_NAME.fullmatch(name):
        shown = repr(name if len(name) <= 40 else name[:40] + "...")
        if raw is None:
            raise UsageError(
                f"the host name {shown} cannot be written into lock files: set MIQM_HOSTNAME "
                "to a host name of 1 to 64 letters, digits, '.', '-' and '_'."
            )
        raise UsageError(
            f"MIQM_HOSTNAME={shown} ({len(name)} characters) is not a valid host name: use 1 "
            "to 64 letters, digits, '.', '-' and '_' (or unset it for the OS host name)."
        )
    return name


def check_qmgr_name(name: str) -> str:
    """Validate a queue manager name as MQ does (1-48 of A-Z a-z 0-9 . _ / %): AMQ7048 and
    exit 72, as MQ's control commands answer a name that is not valid."""
    if not _QM_NAME.fullmatch(name or ""):
        shown = repr(name if len(name or "") <= 60 else name[:60] + "...")
        raise UsageError(
            f"AMQ7048: {shown} is not a valid queue manager name: use 1 to 48 characters "
            "from A-Z, a-z, 0-9, '.', '_', '/' and '%'.", amq="AMQ7048"
        )
    return name


def directory_name(qmgr: str) -> str:
    """MQ's directory mangling: '.' becomes '!' and '/' becomes '&'."""
    return qmgr.replace(".", "!").replace("/", "&")


def join_location(base: str, name: str) -> str:
    """``base`` + ``/name`` for a local path or an nfs4:// URL (options such as
    ``?lease=10`` stay at the end of the URL)."""
    path, sep, query = base.partition("?") if "://" in base else (base, "", "")
    return path.rstrip("/") + "/" + name + sep + query


def split_location(location: str) -> tuple[str, str]:
    """(parent location, last name) of a path or nfs4:// URL; the inverse of
    :func:`join_location`."""
    path, sep, query = location.partition("?") if "://" in location else (location, "", "")
    parent, _, name = path.rstrip("/").rpartition("/")
    return parent + sep + query, name


def _comparable(location: str) -> str:
    """A location as :func:`log_within_data` compares it: a local path resolved (links,
    ``..``, a trailing ``/``), a URL without its options or trailing ``/``."""
    if "://" in location:
        return location.partition("?")[0].rstrip("/")
    return os.path.realpath(location)


def log_within_data(data_location: str, log_location: str) -> str | None:
    """What is wrong with a log directory that is its data directory or lies inside it
    (a clause for an AMQ7017 line, naming both), else None. Either way the log
    directory's own ``active`` lock guards nothing: it is the data directory's lock
    file, or a copy of the data directory put in its place carries the log along."""
    data, log = _comparable(data_location), _comparable(log_location)
    if log == data:
        where = f"is the data directory {data_location}, and its lock file 'active' the data " \
                "directory's"
    elif log.startswith(data.rstrip("/") + "/"):
        where = f"is inside the data directory {data_location}, and a copy of that put in " \
                "its place would carry the log along"
    else:
        return None
    return f"the log directory {log_location} {where}: the log's own lock could not stop " \
           "a second active instance"


@dataclass(frozen=True)
class QMgrEntry:
    """One ``QueueManager:`` stanza of mqs.ini."""

    name: str
    directory: str
    prefix: str
    data_path: str  # the queue manager's data directory location (path or nfs4:// URL)

    def stanza(self) -> Stanza:
        """The mqs.ini stanza for this entry."""
        return Stanza(
            "QueueManager",
            {"Name": self.name, "Prefix": self.prefix, "Directory": self.directory,
             "DataPath": self.data_path},
        )


def mqs_ini_path(root: str | None = None) -> str:
    """Path of this host's mqs.ini."""
    return os.path.join(root or data_root(), "mqs.ini")


@contextmanager
def registry_lock(root: str | None = None) -> Iterator[None]:
    """Serialise mqs.ini read-modify-write across processes on this host."""
    root = root or data_root()
    try:
        os.makedirs(root, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"cannot create the data root {root}: {exc.strerror}. "
            "Set MIQM_DATA_ROOT to a writable directory."
        ) from None
    lock = fasteners.InterProcessLock(os.path.join(root, ".mqs.ini.lock"))
    with lock:
        yield


def load_registry(root: str | None = None) -> dict[str, QMgrEntry]:
    """All queue managers defined on this host; empty if mqs.ini does not exist."""
    path = mqs_ini_path(root)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return {}
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path} is damaged: it is not valid text (byte 0x{exc.object[exc.start]:02x} at "
            f"offset {exc.start} is not UTF-8). Restore it from a backup, or recreate it: "
            "move it aside and register each queue manager again with addmqinf."
        ) from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}. Check its "
                          "permissions.") from None
    entries: dict[str, QMgrEntry] = {}
    for s in parse_ini(text, path):
        if s.name != "QueueManager":
            continue
        v = s.values
        if "Name" not in v:
            raise ConfigError(f"{path}: a QueueManager stanza has no Name. Correct the file.")
        missing = [key for key in ("Prefix", "Directory") if key not in v]
        if missing and not v.get("DataPath"):
            # a stanza reduced to its Name named a made-up place, and dltmqm then
            # removed the entry and said 'deleted' while the queue manager ran elsewhere
            raise ConfigError(
                f"{path}: the QueueManager stanza of '{v['Name']}' has no "
                f"{' and no '.join(missing)} and no DataPath, so its data cannot be "
                "found. Correct the file (dspmqinf on a host where it is registered shows "
                "the stanza), or register it again with addmqinf.")
        directory = v.get("Directory", directory_name(v["Name"]))
        prefix = v.get("Prefix", root or data_root())
        data_path = v.get("DataPath") or join_location(
            os.path.join(prefix, "qmgrs"), directory
        )
        entries[v["Name"]] = QMgrEntry(v["Name"], directory, prefix, data_path)
    return entries


def _write_registry(entries: dict[str, QMgrEntry], root: str | None) -> None:
    path = mqs_ini_path(root)
    text = format_ini(
        [Stanza("AllQueueManagers", {"DefaultPrefix": root or data_root()})]
        + [e.stanza() for e in entries.values()]
    )
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def register(entry: QMgrEntry, root: str | None = None, *, replace: bool = False) -> None:
    """Add a queue manager to this host's mqs.ini (addmqinf / crtmqm)."""
    with registry_lock(root):
        entries = load_registry(root)
        if entry.name in entries and not replace:
            raise ConfigError(
                f"AMQ8110: queue manager '{entry.name}' already exists on this host.",
                amq="AMQ8110",
            )
        entries[entry.name] = entry
        _write_registry(entries, root)


def unregister(name: str, root: str | None = None) -> None:
    """Remove a queue manager from this host's mqs.ini (dltmqm / rmvmqinf)."""
    with registry_lock(root):
        entries = load_registry(root)
        entries.pop(name, None)
        _write_registry(entries, root)


def find(name: str, root: str | None = None) -> QMgrEntry:
    """The entry for ``name``, or QMgrNotFound with MQ's AMQ7048 line."""
    check_qmgr_name(name)
    entries = load_registry(root)
    if name not in entries:
        raise QMgrNotFound(
            f"The queue manager name '{name}' is either not valid or not known on this host "
            f"(mqs.ini under {root or data_root()}). Create it with crtmqm or add it with addmqinf."
        )
    return entries[name]


def default_data_location(qmgr: str, root: str | None = None) -> str:
    """``<root>/qmgrs/<dir>``: where a queue manager's data goes without -md."""
    return join_location(os.path.join(root or data_root(), "qmgrs"), directory_name(qmgr))


def default_log_location(qmgr: str, root: str | None = None) -> str:
    """``<root>/log/<dir>``: where a queue manager's log goes without -ld."""
    return join_location(os.path.join(root or data_root(), "log"), directory_name(qmgr))
