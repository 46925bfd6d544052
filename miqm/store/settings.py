"""Store settings (the qm.ini ``Log:`` and ``TuningParameters:`` values the store reads),
with IBM MQ's defaults and ranges. Parsing the ini file is miqm.config's job; the store
only ever sees these validated dataclasses."""

from __future__ import annotations

from dataclasses import dataclass

from miqm.errors import ConfigError

PAGE = 4096

# (minimum, maximum) per MQ (Unix values).
LOG_FILE_PAGES_RANGE = (64, 65535)
LOG_PRIMARY_RANGE = (2, 510)
LOG_SECONDARY_RANGE = (1, 509)
LOG_MAX_ACTIVE_FILES = 511
LOG_BUFFER_PAGES_RANGE = (18, 4096)  # 0 means the default, 512
MAX_CPUS = 1024  # CPU numbers a thread's affinity mask can name (glibc's CPU_SETSIZE)


class LogSizeError(ConfigError):
    """A log size value (LogFilePages, LogPrimaryFiles, LogSecondaryFiles, LogBufferPages)
    outside MQ's range: from qm.ini an AMQ7880 like any other bad value, from crtmqm's
    -lf/-lp/-ls a usage error."""


@dataclass(frozen=True)
class LogSettings:
    """The ``Log:`` stanza: type and size of the recovery log."""

    log_type: str = "CIRCULAR"  # CIRCULAR | LINEAR
    file_pages: int = 4096
    primary_files: int = 3
    secondary_files: int = 2
    buffer_pages: int = 0
    write_integrity: str = "TripleWrite"  # TripleWrite | DoubleWrite (== Triple) | SingleWrite

    def __post_init__(self) -> None:
        def check(name: str, value: int, lo: int, hi: int) -> None:
            if not lo <= value <= hi:
                raise LogSizeError(
                    f"{name}={value} is out of range: it must be from {lo} to {hi}.")

        if self.log_type not in ("CIRCULAR", "LINEAR"):
            raise ConfigError(f"LogType={self.log_type} is not valid: use CIRCULAR or LINEAR.")
        check("LogFilePages", self.file_pages, *LOG_FILE_PAGES_RANGE)
        check("LogPrimaryFiles", self.primary_files, *LOG_PRIMARY_RANGE)
        check("LogSecondaryFiles", self.secondary_files, *LOG_SECONDARY_RANGE)
        if self.primary_files + self.secondary_files > LOG_MAX_ACTIVE_FILES:
            raise LogSizeError(
                f"LogPrimaryFiles + LogSecondaryFiles = {self.primary_files + self.secondary_files}"
                f" exceeds {LOG_MAX_ACTIVE_FILES} active log files: reduce one of them."
            )
        if self.buffer_pages != 0:
            check("LogBufferPages", self.buffer_pages, *LOG_BUFFER_PAGES_RANGE)
        if self.write_integrity not in ("TripleWrite", "DoubleWrite", "SingleWrite"):
            raise ConfigError(
                f"LogWriteIntegrity={self.write_integrity} is not valid:"
                " use TripleWrite, DoubleWrite or SingleWrite."
            )

    @property
    def file_size(self) -> int:
        """Bytes in one log extent."""
        return self.file_pages * PAGE

    @property
    def effective_buffer_pages(self) -> int:
        """LogBufferPages with 0 meaning MQ's default of 512 pages (2 MiB)."""
        return self.buffer_pages or 512

    @property
    def triple_write(self) -> bool:
        """DoubleWrite has meant TripleWrite since MQ 7.1."""
        return self.write_integrity != "SingleWrite"


#: ``GroupCommitCPU`` values besides a CPU number
GATHER_NONE = -1  # none: threads waiting for log forces stay where the scheduler puts them
GATHER_AUTO = -2  # auto: they gather on the CPU the first of them ran on
#: GroupCommitCPU when qm.ini does not set it: the queue manager's threads (connections,
#: all created by miqm) gather; an embedded store's default is GATHER_NONE (StoreTuning)
QM_INI_GROUP_COMMIT_CPU = GATHER_AUTO


def cpu_text(cpu: int) -> str:
    """GroupCommitCPU as qm.ini writes it: auto, none or the CPU number."""
    return {GATHER_AUTO: "auto", GATHER_NONE: "none"}.get(cpu, str(cpu))


@dataclass(frozen=True)
class StoreTuning:
    """Checkpoint, unit-of-work and log-force limits (TuningParameters / QMGR attributes).

    ``group_commit_cpu`` (GroupCommitCPU): the CPU a thread is moved to when it first waits
    for a log force another thread is writing (see ``miqm/store/_forcequeue.c``),
    :data:`GATHER_AUTO` or a CPU number; :data:`GATHER_NONE` (the default here) moves no
    thread. A process that embeds the store keeps its threads where it put them unless it
    opts in; the queue manager opts in for its own threads (qm.ini's GroupCommitCPU,
    default ``auto``: :data:`QM_INI_GROUP_COMMIT_CPU`).
    """

    checkpoint_log_recd_max: int = 50000
    checkpoint_log_recd_min: int = 100
    checkpoint_wait_len: float = 1800.0  # seconds
    max_umsgs: int = 10000
    #: fraction of the active log a unit of work may pin before AMQ7469 rolls it back
    uow_log_space_limit: float = 0.8
    group_commit_cpu: int = GATHER_NONE
    #: a checkpoint writes a queue's index file (miqm/store/qindex.py) when its queue
    #: file holds at least this many records; smaller queues are scanned on open. Low:
    #: a takeover that scans ten queues of 100 messages each costs as much as the rest
    #: of the open, while a standby reads their indexes ahead
    index_min_records: int = 64
    #: a checkpoint that changes an indexed queue writes a delta file of the records
    #: added and deleted since the index (qindex.DeltaLog) while it holds at most this
    #: many, or a sixteenth of the index's records if that is more, and no more records
    #: than the index has; else the index again. 0: no delta files (every change writes
    #: the index again)
    index_delta_records: int = 4096
    #: a delta file of at least this many records is left as it is by a checkpoint whose
    #: changes since it number at most a quarter of it: those go to a second, small
    #: delta file (``idx.d2``), so that a checkpoint (a takeover's above all) does not
    #: rewrite a big delta for a few changes. 0: never
    index_top_min: int = 8192

    def __post_init__(self) -> None:
        if not GATHER_AUTO <= self.group_commit_cpu < MAX_CPUS:
            raise ConfigError(
                f"GroupCommitCPU={self.group_commit_cpu} is not valid: use auto, none or a "
                f"CPU number from 0 to {MAX_CPUS - 1}.")
