"""Configuration files: ``mqs.ini`` (per host) and ``qm.ini`` (per queue manager).

Both use MQ's stanza format::

    Log:
       LogPrimaryFiles=3
       LogType=CIRCULAR

A stanza name ends with ``:`` at the start of a line; its keys follow, indented.
``#`` and ``;`` start comments. Parsing errors name the file and line.

Timing rule (design point 2, checked at load like Patroni's loop_wait + 2*retry_timeout
<= ttl): ``VerifyInterval + MonitorStall`` must be less than the filesystem lease, so a
partitioned active stops itself before the standby can be granted the lock.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Literal, overload

from miqm.errors import ConfigError
from miqm.store.settings import (
    GATHER_AUTO,
    GATHER_NONE,
    QM_INI_GROUP_COMMIT_CPU,
    LogSettings,
    StoreTuning,
    cpu_text,
)

if TYPE_CHECKING:
    from lockfs.volume import Volume

_KEY_RE = re.compile(r"^\s+([A-Za-z][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$")
_STANZA_RE = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)\s*:\s*$")


@dataclass
class Stanza:
    """One ``Name:`` block with its ordered keys."""

    name: str
    values: dict[str, str] = field(default_factory=dict)


def decode_ini(raw: bytes, source: str) -> str:
    """An ini file's bytes as text; ConfigError naming the first byte that is not UTF-8.
    Read with replacement characters, a path holding such a byte (a LogPath written in
    ISO-8859-1) became another path, and setmqini wrote it back changed."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{source} is damaged or not UTF-8: byte 0x{raw[exc.start]:02x} at offset "
            f"{exc.start} is not UTF-8 text. Restore it from a backup, or convert it "
            "(iconv -f ISO-8859-1 -t UTF-8) and check its paths."
        ) from None
    return text.removeprefix("\ufeff")  # a byte-order mark (saved by a Windows editor)


def parse_ini(text: str, source: str) -> list[Stanza]:
    """Parse MQ stanza text; raise ConfigError naming ``source`` and the line on bad input."""
    stanzas: list[Stanza] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].split(";", 1)[0].rstrip()
        if not line.strip():
            continue
        m = _STANZA_RE.match(line)
        if m:
            stanzas.append(Stanza(m.group(1)))
            continue
        m = _KEY_RE.match(line)
        if m and stanzas:
            stanzas[-1].values[m.group(1)] = m.group(2)
            continue
        raise ConfigError(
            f"{source} line {lineno} is not valid ({raw.strip()[:60]!r}): "
            "expected 'Stanza:' or an indented 'Key=Value'. Correct or restore the file."
        )
    return stanzas


def format_ini(stanzas: list[Stanza]) -> str:
    """Render stanzas back to MQ's text format."""
    out: list[str] = []
    for s in stanzas:
        out.append(f"{s.name}:")
        out.extend(f"   {k}={v}" for k, v in s.values.items())
    return "\n".join(out) + "\n"


#: the whole numbers qm.ini may give outside the Log stanza (LogSettings checks the Log
#: stanza's with MQ's ranges): key -> (lowest, highest)
INT_RANGES: dict[str, tuple[int, int]] = {
    "MaxUncommittedMsgs": (1, 999_999_999),  # MQ's MAXUMSGS range
    "CheckPointLogRecdMax": (1, 999_999_999),
    "CheckPointLogRecdMin": (0, 999_999_999),
}

#: the largest number of seconds a qm.ini timing may be: the HA timings at most a day,
#: CheckPointWaitLen at most a year
SECONDS_MAX: dict[str, float] = {
    "StandbyPollInterval": 86_400.0,
    "VerifyInterval": 86_400.0,
    "MonitorStall": 86_400.0,
    "LivenessInterval": 86_400.0,
    "FilesystemLease": 86_400.0,
    "CheckPointWaitLen": 31_536_000.0,
}

#: qm.ini's name of each HATuning field, for the lines that name them
HA_KEYS: dict[str, str] = {
    "standby_poll": "StandbyPollInterval",
    "verify_interval": "VerifyInterval",
    "monitor_stall": "MonitorStall",
    "liveness_interval": "LivenessInterval",
    "lease": "FilesystemLease",
}


def _int(values: dict[str, str], key: str, default: int, source: str,
         stanza: str = "") -> int:
    raw = values.get(key)
    if raw is None:
        return default
    where = f"{stanza} {key}" if stanza else key
    bounds = INT_RANGES.get(key)
    try:
        value = int(raw)
        ok = bounds is None or bounds[0] <= value <= bounds[1]
    except ValueError:
        value, ok = default, False
    if not ok:
        allowed = f"a whole number from {bounds[0]} to {bounds[1]}" if bounds else \
            "a whole number"
        raise ConfigError(f"{source}: {where}={raw[:40]} is not valid: it must be {allowed}. "
                          "Correct it (setmqini).")
    return value


def _yes_no(values: dict[str, str], key: str, default: bool, source: str) -> bool:
    raw = values.get(key)
    if raw is None:
        return default
    if raw.strip().upper() in ("YES", "NO"):
        return raw.strip().upper() == "YES"
    raise ConfigError(f"{source}: {key}={raw} is not valid: use Yes or No.")


def _float(values: dict[str, str], key: str, default: float, source: str,
           stanza: str = "TuningParameters") -> float:
    raw = values.get(key)
    if raw is None:
        return default
    hi = SECONDS_MAX.get(key, 86_400.0)
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= hi):
        raise ConfigError(f"{source}: {stanza} {key}={raw[:40]} is not valid: it must be a "
                          f"number of seconds greater than 0 and at most {hi:g}. Correct it "
                          "(setmqini).")
    return value


def parse_cpu(raw: str, what: str = "GroupCommitCPU") -> int:
    """GroupCommitCPU's text (auto, none or a CPU number) as StoreTuning holds it; the
    number's range is StoreTuning's to check."""
    if raw.lower() == "auto":
        return GATHER_AUTO
    if raw.lower() == "none":
        return GATHER_NONE
    if not raw.isdigit():
        raise ConfigError(f"{what}={raw} is not valid: use auto, none or a CPU number.")
    return int(raw)


@dataclass(frozen=True)
class HATuning:
    """Multi-instance timing (qm.ini ``TuningParameters:``), in seconds.

    ``standby_poll`` StandbyPollInterval, ``verify_interval`` VerifyInterval,
    ``monitor_stall`` MonitorStall, ``liveness_interval`` LivenessInterval,
    ``lease`` FilesystemLease (the NFSv4 lease of the shared filesystem, 90 s by default),
    ``read_ahead`` StandbyReadAhead (a standby keeps the deep queues' indexes, the
    checkpoint file and the queue catalog read and decoded: a faster takeover for as
    much memory as the active's index entries, about 30 bytes a message).
    """

    standby_poll: float = 2.0
    verify_interval: float = 10.0
    monitor_stall: float = 20.0
    liveness_interval: float = 60.0
    lease: float = 90.0
    read_ahead: bool = True

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.type in (bool, "bool"):
                continue
            value = getattr(self, f.name)
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"TuningParameters {HA_KEYS.get(f.name, f.name)}="
                                  f"{value:g} is not valid: it must be a number of seconds "
                                  "greater than 0.")
        if self.verify_interval + self.monitor_stall >= self.lease:
            raise ConfigError(
                f"VerifyInterval ({self.verify_interval:g}s) + MonitorStall "
                f"({self.monitor_stall:g}s) must be less than the filesystem lease "
                f"FilesystemLease ({self.lease:g}s), or a partitioned active instance could "
                "still be writing when the standby takes over: lower them or raise the lease."
            )


@dataclass(frozen=True)
class QMConfig:
    """Everything qm.ini says about a queue manager."""

    name: str
    log: LogSettings = field(default_factory=LogSettings)
    log_path: str = ""
    tuning: StoreTuning = field(default_factory=StoreTuning)
    ha: HATuning = field(default_factory=HATuning)
    metrics_port: int = 0
    stanzas: tuple[Stanza, ...] = ()


def parse_qm_ini(text: str, source: str = "qm.ini") -> QMConfig:
    """Parse and validate qm.ini. Out-of-range values raise ConfigError with MQ's ranges."""
    stanzas = parse_ini(text, source)
    by_name: dict[str, dict[str, str]] = {}
    for s in stanzas:
        by_name.setdefault(s.name, {}).update(s.values)
    log = by_name.get("Log", {})
    tune = by_name.get("TuningParameters", {})
    qmgr = by_name.get("QueueManager", {})
    metrics = by_name.get("Metrics", {})
    try:
        log_settings = LogSettings(
            log_type=log.get("LogType", "CIRCULAR").upper(),
            file_pages=_int(log, "LogFilePages", 4096, source, "Log"),
            primary_files=_int(log, "LogPrimaryFiles", 3, source, "Log"),
            secondary_files=_int(log, "LogSecondaryFiles", 2, source, "Log"),
            buffer_pages=_int(log, "LogBufferPages", 0, source, "Log"),
            write_integrity=log.get("LogWriteIntegrity", "TripleWrite"),
        )
        tuning = StoreTuning(
            checkpoint_log_recd_max=_int(tune, "CheckPointLogRecdMax", 50000, source,
                                         "TuningParameters"),
            checkpoint_log_recd_min=_int(tune, "CheckPointLogRecdMin", 100, source,
                                         "TuningParameters"),
            checkpoint_wait_len=_float(tune, "CheckPointWaitLen", 1800.0, source),
            max_umsgs=_int(qmgr, "MaxUncommittedMsgs", 10000, source, "QueueManager"),
            group_commit_cpu=parse_cpu(tune.get("GroupCommitCPU",
                                                cpu_text(QM_INI_GROUP_COMMIT_CPU))),
        )
        ha = HATuning(
            standby_poll=_float(tune, "StandbyPollInterval", 2.0, source),
            verify_interval=_float(tune, "VerifyInterval", 10.0, source),
            monitor_stall=_float(tune, "MonitorStall", 20.0, source),
            liveness_interval=_float(tune, "LivenessInterval", 60.0, source),
            lease=_float(tune, "FilesystemLease", 90.0, source),
            read_ahead=_yes_no(tune, "StandbyReadAhead", True, source),
        )
    except ConfigError as exc:
        if source in str(exc):
            raise
        raise ConfigError(f"{source}: {exc}", amq=exc.amq) from None
    return QMConfig(
        name=qmgr.get("Name", ""),
        log=log_settings,
        log_path=log.get("LogPath", ""),
        tuning=tuning,
        ha=ha,
        # checked with a line naming the stanza by miqm.metrics.settings at strmqm
        metrics_port=int(metrics["Port"]) if metrics.get("Port", "").isdigit() else 0,
        stanzas=tuple(stanzas),
    )


@overload
def read_qm_ini(volume: Volume, where: str, qmgr: str, *,
                edit: Callable[[str, str], str] | None = None,
                damaged_ok: Literal[False] = False) -> QMConfig: ...


@overload
def read_qm_ini(volume: Volume, where: str, qmgr: str, *,
                edit: Callable[[str, str], str] | None = None,
                damaged_ok: Literal[True]) -> QMConfig | None: ...


def read_qm_ini(volume: Volume, where: str, qmgr: str, *,
                edit: Callable[[str, str], str] | None = None,
                damaged_ok: bool = False) -> QMConfig | None:
    """qm.ini of queue manager ``qmgr``, read from ``volume`` (its data directory,
    ``where``), decoded and parsed as strmqm reads it: ConfigError (AMQ7880, naming the
    file and what to do) when it is missing, cannot be read, is not UTF-8 or does not
    parse. ``edit(text, source)`` may change the text before it is parsed (the
    controller's AutoConfig merge).

    With ``damaged_ok`` (dltmqm, which only needs the LogPath to find what to delete),
    nothing is refused: None when the file cannot be read; bytes that are not UTF-8 are
    read as replacement characters; a file that does not parse gives the defaults with
    the LogPath its ``LogPath=`` line names, if any."""
    from lockfs.errors import LockFsError, VolumeNotFound

    source = f"{where}/qm.ini"
    try:
        raw = volume.read_bytes("qm.ini")
    except VolumeNotFound:
        if damaged_ok:
            return None
        raise ConfigError(f"AMQ7880: qm.ini of queue manager '{qmgr}' is missing from "
                          f"{where}; restore it from a backup or recreate the queue "
                          "manager.") from None
    except LockFsError as exc:
        if damaged_ok:
            return None
        raise ConfigError(f"AMQ7880: cannot read qm.ini of queue manager '{qmgr}' in "
                          f"{where} ({exc}): check that filesystem, or restore the file "
                          "from a backup.") from None
    if damaged_ok:
        # replacement characters are good enough to find a LogPath: nothing is written back
        text = raw.decode("utf-8", "replace").removeprefix("\ufeff")
        try:
            return parse_qm_ini(edit(text, source) if edit else text, source)
        except ConfigError:
            m = re.search(r"^\s*LogPath\s*=\s*(\S.*?)\s*$", text, re.M)
            return QMConfig(name="", log_path=m.group(1) if m else "")
    # never with replacement characters, which would make another path of a LogPath
    # that is not UTF-8
    text = decode_ini(raw, source)
    return parse_qm_ini(edit(text, source) if edit else text, source)


def check_complete(text: str, source: str = "qm.ini") -> None:
    """Refuse a qm.ini that lost what crtmqm writes into every one: a file with no stanza
    at all (empty, or truncated to nothing), or one without its ``Log`` stanza. Starting
    from it would silently use the defaults, circular logging among them, whatever the
    queue manager was created with (a linear log's media recovery would be lost)."""
    stanzas = parse_ini(text, source)
    if not stanzas:
        raise ConfigError(
            f"{source} is empty or damaged (it has no stanza): restore it from a backup, or "
            "recreate its QueueManager, Log and TuningParameters stanzas with setmqini."
        )
    if not any(s.name == "Log" for s in stanzas):
        raise ConfigError(
            f"{source} has no Log stanza (crtmqm writes one): the file is damaged and the "
            "queue manager would start with default (circular) logging. Restore it from a "
            "backup, or recreate the Log stanza (LogType, LogPath, ...) with setmqini."
        )
    if not any(s.name == "Log" and s.values.get("LogPath", "").strip() for s in stanzas):
        name = next((s.values["Name"] for s in stanzas
                     if s.name == "QueueManager" and s.values.get("Name")), "QMgr")
        # the default log directory is another log than the one crtmqm -ld made: strmqm
        # said 'amqhlctl.lfh is missing ... recreate the queue manager', or, with an old
        # log there, would have started on it
        raise ConfigError(
            f"{source} has no LogPath in its Log stanza (crtmqm writes one): the file is "
            "damaged and the queue manager would look for its log in this host's default "
            f"log directory. Restore it from a backup, or set it first: setmqini -m {name} "
            "-s Log -k LogPath -v <the log directory: crtmqm's -ld path and the queue "
            "manager's directory name>."
        )


def render_qm_ini(name: str, log: LogSettings, log_path: str, ha: HATuning | None = None,
                  tuning: StoreTuning | None = None) -> str:
    """qm.ini text for a new queue manager (crtmqm)."""
    ha = ha or HATuning()
    tuning = tuning or StoreTuning(group_commit_cpu=QM_INI_GROUP_COMMIT_CPU)
    stanzas = [
        Stanza("QueueManager", {"Name": name, "MaxUncommittedMsgs": str(tuning.max_umsgs)}),
        Stanza("Log", {
            "LogPrimaryFiles": str(log.primary_files),
            "LogSecondaryFiles": str(log.secondary_files),
            "LogFilePages": str(log.file_pages),
            "LogType": log.log_type,
            "LogBufferPages": str(log.buffer_pages),
            "LogPath": log_path,
            "LogWriteIntegrity": log.write_integrity,
        }),
        Stanza("TuningParameters", {
            "StandbyPollInterval": f"{ha.standby_poll:g}",
            "VerifyInterval": f"{ha.verify_interval:g}",
            "MonitorStall": f"{ha.monitor_stall:g}",
            "LivenessInterval": f"{ha.liveness_interval:g}",
            "FilesystemLease": f"{ha.lease:g}",
            "CheckPointLogRecdMax": str(tuning.checkpoint_log_recd_max),
            "CheckPointLogRecdMin": str(tuning.checkpoint_log_recd_min),
            "CheckPointWaitLen": f"{tuning.checkpoint_wait_len:g}",
            "GroupCommitCPU": cpu_text(tuning.group_commit_cpu),
            # written only when turned off: Yes is the default
            **({} if ha.read_ahead else {"StandbyReadAhead": "No"}),
        }),
    ]
    return format_ini(stanzas)


def with_ha(config: QMConfig, **changes: float) -> QMConfig:
    """A copy of ``config`` with HA timings changed (validated)."""
    return replace(config, ha=replace(config.ha, **changes))
