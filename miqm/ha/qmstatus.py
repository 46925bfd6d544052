"""``qmstatus.ini``: the status every instance reads, and the failover permissions.

::

    QueueManagerStatus:
       CurrentStatus=Running
       PermitStandby=Yes
       PermitFailover=Yes
       PlatformSignature=2840517133
       PlatformString=Linux x86_64 little-endian
       Switchover=No

``PermitStandby`` says the active instance was started with ``-x`` (a standby may wait);
``PermitFailover`` is No from the moment an instance starts until it is running, so a
queue manager that crashes while starting is not taken over by the standby only to crash
again; ``Switchover`` says the last active ended with ``endmqm -s`` (a standby takes over
only after a crash or a switchover, not after a plain ``endmqm``); ``PlatformSignature``
stops a standby on another platform from taking over data it may not read the same way.
Written atomically (temporary file, fdatasync, rename).
"""

from __future__ import annotations

import platform
import re
import sys
import zlib
from dataclasses import dataclass, replace

from lockfs.errors import LockFsError, VolumeNotFound
from lockfs.volume import Volume
from miqm.config import Stanza, format_ini, parse_ini
from miqm.errors import ConfigError

NAME = "qmstatus.ini"

#: The twelve statuses dspmq reports.
STATUSES = (
    "Starting", "Running", "Running as standby", "Running elsewhere", "Quiescing",
    "Ending immediately", "Ending pre-emptively", "Ended normally", "Ended immediately",
    "Ended unexpectedly", "Ended pre-emptively", "Status not available",
)


def platform_string() -> str:
    """What this platform is, as written into qmstatus.ini."""
    return f"{platform.system()} {platform.machine()} {sys.byteorder}-endian"


def platform_signature() -> int:
    """A number for :func:`platform_string` (MQ's PlatformSignature)."""
    return zlib.crc32(platform_string().encode())


@dataclass(frozen=True)
class QMStatus:
    """The content of qmstatus.ini."""

    status: str = "Ended normally"
    permit_standby: bool = False
    permit_failover: bool = True
    platform_signature: int = 0
    platform_string: str = ""
    #: the last active instance ended permitting switchover (endmqm -s)
    switchover: bool = False

    def render(self) -> bytes:
        """The file's text."""
        yn = {True: "Yes", False: "No"}
        return format_ini([Stanza("QueueManagerStatus", {
            "CurrentStatus": self.status,
            "PermitStandby": yn[self.permit_standby],
            "PermitFailover": yn[self.permit_failover],
            "PlatformSignature": str(self.platform_signature),
            "PlatformString": self.platform_string,
            "Switchover": yn[self.switchover],
        })]).encode()

    def ours(self) -> bool:
        """True if the data was last run on this platform (or never run)."""
        return self.platform_signature in (0, platform_signature())

    def with_(self, **changes: object) -> QMStatus:
        """A copy with fields changed."""
        return replace(self, **changes)  # type: ignore[arg-type]


def read(volume: Volume) -> QMStatus:
    """qmstatus.ini, or the defaults if it does not exist yet. ConfigError if corrupt."""
    try:
        text = volume.read_bytes(NAME).decode("utf-8", "replace")
    except VolumeNotFound:
        return QMStatus()
    where = f"{volume.describe()}/{NAME}"
    values: dict[str, str] = {}
    try:
        stanzas = parse_ini(text, where)
    except ConfigError as exc:
        # "restore the file" (the parser's advice) is no use here: nobody backs up a
        # status file; what it holds is rewritten by the next start
        at = re.search(r"line \d+", str(exc))
        raise ConfigError(f"{where} is damaged{f' ({at.group(0)})' if at else ''}: it "
                          "holds only the queue manager's last status and is rewritten "
                          "when the queue manager starts. With no instance running, "
                          f"rename it (to {NAME}.damaged) and start the queue manager "
                          "again.") from None
    for s in stanzas:
        values.update(s.values)
    try:
        return QMStatus(
            status=values.get("CurrentStatus", "Ended normally"),
            permit_standby=values.get("PermitStandby", "No").lower() == "yes",
            permit_failover=values.get("PermitFailover", "Yes").lower() == "yes",
            platform_signature=int(values.get("PlatformSignature", "0") or 0),
            platform_string=values.get("PlatformString", ""),
            switchover=values.get("Switchover", "No").lower() == "yes",
        )
    except ValueError:
        raise ConfigError(f"{where}: PlatformSignature is not a number; restore the file or "
                          "delete it (it is rewritten when the queue manager starts)") from None


def write(volume: Volume, status: QMStatus) -> None:
    """Replace qmstatus.ini atomically."""
    volume.write_atomic(NAME, status.render())


def write_in_place(volume: Volume, status: QMStatus) -> None:
    """Overwrite qmstatus.ini in place, padded with blank lines to its present size: for
    a filesystem too full for :func:`write`'s temporary file (the blocks are already the
    file's). Not atomic; only to put back what the last active left."""
    data = status.render()
    f = volume.open(NAME)
    try:
        size = f.size()
        if len(data) < size:
            data += b"\n" * (size - len(data))
        f.pwrite(data, 0)
        if len(data) > size:
            f.truncate(len(data))
        f.fdatasync()
    finally:
        f.close()


def try_read(volume: Volume) -> QMStatus | None:
    """qmstatus.ini, or None if it cannot be read (dspmq must not fail on it)."""
    try:
        return read(volume)
    except (LockFsError, ConfigError):
        return None
