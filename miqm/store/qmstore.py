"""QueueManagerStore: local queues, units of work and checkpoints over the recovery log.

Write-ahead discipline (design point 4):

* every persistent change is appended to the :class:`~miqm.store.log.RecoveryLog` under
  the store lock, then applied to memory; a commit, a prepare, or a persistent put/get
  outside syncpoint forces the log *after* releasing the lock, so concurrent callers
  share forces (the log's group commit);
* queue files change only in :meth:`checkpoint`, after the log is forced past every
  record the change reflects (see :mod:`miqm.store.queues` for why a crash mid-checkpoint
  is harmless); the checkpoint file is replaced last, then the log may free extents.
* a checkpoint holds the store lock only to decide what it writes and to hand those
  writes to the page cache; making them durable (paced write-back, fdatasync, the
  checkpoint file) happens with the lock released, so commits go on meanwhile. Nothing
  those writes contain can change under them: they are the state as of the CHECKPOINT
  record, and what happens after it is in the log after it (restart replays it).

Non-persistent messages are never logged and live only in memory.
"""

from __future__ import annotations

import bisect
import datetime as _dt
import fnmatch
import gc
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, NoReturn

from lockfs.errors import LockFsError, VolumeNotFound, VolumeStalled
from lockfs.volume import FileHead, Volume, VolumeFile
from miqm import amq
from miqm.errors import LogFullError, MessagingError, ObjectError, StoreError
from miqm.histogram import LONG_BUCKETS, Histogram
from miqm.store import checkpoint as ckpt
from miqm.store import qindex
from miqm.store import records as R
from miqm.store.queues import (
    DATA_START,
    DEFAULT_ATTRS,
    BodyWriter,
    LocalQueue,
    MemMessage,
    PriorityIndex,
    QueueFile,
)
from miqm.store.recovery import MSGID_PREFIX, StoreState, generated_key, restart
from miqm.store.settings import LogSettings, StoreTuning
from miqm.store.uow import ACTIVE, PREPARED, ROLLED_BACK, UnitOfWork
from miqm.text import one_line

# a checkpoint writes contiguous records in runs of at most this many bytes (a million
# queued messages must not become one gigabyte buffer)
_RUN_MAX = 4 << 20
# a checkpoint's queue-file data goes to the disk in steps of this many bytes: a log force
# issued meanwhile waits behind one step, not behind the whole checkpoint
_WRITE_BACK_STEP = 1 << 20
# a checkpoint syncs or renames this many files or more in threads, this many at once
_PARALLEL_MIN = 16
_PARALLEL_FILES = 32
# after a takeover, the checkpoint that writes the deep queues' indexes the open deferred
# (or the whole checkpoint a takeover's open leaves to the thread) waits this long (the
# checkpoint thread looks at least once a second)
_INDEX_DELAY = 1.0
# a takeover's open leaves its checkpoint to the checkpoint thread only while the log is
# less full than this (else the room the checkpoint frees is wanted at once) ...
_DEFER_LOG_USAGE = 0.5
# ... and while the data volume has room for what that checkpoint writes: at least this
# many bytes, and twice the log the open replayed, free by statvfs (a full filesystem
# then fails the open's own checkpoint, and the standby stays the standby until space
# returns); a backend that cannot tell must take a probe write of _SPACE_PROBE_BYTES (a
# file never synced, removed at once)
_SPACE_MIN = 4 << 20
SPACE_PROBE = "amqalspc.tmp"
_SPACE_PROBE_BYTES = 256 << 10
# queue definitions (DEFINE, ALTER, DELETE) are cheap to log and dear to replay (a JSON
# record each, then a catalog to write): after this many since the last checkpoint, one
# follows once they pause for _DEFINITION_PAUSE seconds, or _DEFINITION_WAIT after the
# burst began, so a takeover after runmqsc defined thousands of queues reads them from
# the catalog instead of replaying them (issue 22)
#: queues of the last catalog that hold records now, named in the checkpoint file rather
#: than writing the catalog again: this many, or a sixteenth of the catalog if more
_FILED_MIN = 64
_DEFINITION_BURST = 256
_DEFINITION_PAUSE = 0.5
_DEFINITION_WAIT = 5.0

MQRC_BACKED_OUT = 2003
MQRC_GET_INHIBITED = 2016
MQRC_SYNCPOINT_LIMIT_REACHED = 2024
MQRC_MSG_TOO_BIG_FOR_Q = 2030
MQRC_PRIORITY_ERROR = 2050
MQRC_PUT_INHIBITED = 2051
MQRC_Q_FULL = 2053
MQRC_UNKNOWN_OBJECT_NAME = 2085
MQRC_HANDLE_NOT_AVAILABLE = 2017
#: seconds between AMQ7463 lines while the log stays full
_LOG_FULL_REPEAT = 60.0
#: the longest an append that finds the log full waits (holding the store lock) for the
#: checkpoint in progress to reach the disk, so that it can free the log's tail
_ROOM_WAIT = 30.0
MQRC_MSG_TOO_BIG_FOR_Q_MGR = 2031
MQRC_Q_NOT_EMPTY = 2055
MQRC_PERSISTENT_NOT_ALLOWED = 2048
#: the largest MAXMSGL ALTER QMGR may set (MQ's 100 MB)
_QMGR_MAXMSGL = 104_857_600
#: MAXMSGL of a new queue manager (MQ's default, 4 MB): crtmqm stores it in the first
#: checkpoint, so it is the queue manager's own value from then on
QMGR_MAXMSGL_DEFAULT = 4_194_304
#: MAXMSGL of a queue manager that has none stored: one created before crtmqm stored it,
#: which had 100 MB as its default and keeps it (an upgrade refuses no message it took)
_QMGR_MAXMSGL_UNSTORED = _QMGR_MAXMSGL
#: kinds of queue manager objects kept in the QMGR attributes (see set_object)
OBJECT_KINDS = ("QALIAS", "QMODEL")

_INT_ATTRS = {"MAXDEPTH": (0, 999_999_999), "DEFPRTY": (0, 9), "MAXMSGL": (0, 104_857_600),
              "BOTHRESH": (0, 999_999_999)}
_ENUM_ATTRS = {"DEFPSIST": ("YES", "NO"), "PUT": ("ENABLED", "DISABLED"),
               "GET": ("ENABLED", "DISABLED"),
               # a dynamic queue made from a model (MQOPEN of a QMODEL) says which kind
               "DEFTYPE": ("PREDEFINED", "TEMPDYN", "PERMDYN")}


#: MQ's reason for a call on a damaged object (the service's reply carries it)
MQRC_OBJECT_DAMAGED = 2101


@dataclass(frozen=True)
class Message:
    """A message as returned by ``get``."""

    body: bytes
    msgid: bytes
    correlid: bytes
    priority: int
    persistent: bool
    #: the put time in seconds since the epoch, as the store keeps it
    put_epoch: float
    #: where a browse found it, (priority, key): what MQGMO_BROWSE_NEXT starts after
    #: (``get(..., browse=True, after=position)``); None for a message got
    position: tuple[int, int] | None = None

    @property
    def put_time(self) -> _dt.datetime:
        """The put time (UTC), to the microsecond :func:`put_micros` gives (so every
        path that reports it agrees); made when asked for: a consumer streaming
        messages sends the microseconds, and a datetime per message cost about 1 µs."""
        return _EPOCH_UTC + _dt.timedelta(microseconds=put_micros(self.put_epoch))


_EPOCH_UTC = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


def put_micros(put_epoch: float) -> int:
    """A put time in seconds since the epoch as whole microseconds: the one rounding
    that :attr:`Message.put_time` and a streaming consumer's batches both use."""
    return round(put_epoch * 1_000_000)


def _memory_message(q: LocalQueue, key: int) -> Message | None:
    """Message ``key`` of ``q`` from memory (its body not yet, or still, in flight to the
    queue file); None if only the queue file has it."""
    m = q.mem.get(key)
    if m is None and q.in_flight is not None:
        m = q.in_flight.get(key)
    if m is None:
        return None
    return Message(m.body, m.msgid, m.correlid, m.priority, m.persistent, m.put_time)


def _record_message(rec: tuple[int, int, bool, float, bytes, bytes, bytes]) -> Message:
    """A message from a queue-file record (QueueFile.read)."""
    _key, prio, pers, t, mid, cid, body = rec
    return Message(body, mid, cid, prio, pers, t)


# an open opens this many queue files or more side by side (``Volume.concurrent_opens``)
_PARALLEL_OPEN_MIN = 4
# a file head not read ahead (QueueManagerStore._heads)
_UNREAD = FileHead(-1, b"")


@dataclass
class _CheckpointPlan:
    """What a checkpoint decided under the store lock, for the part done without it."""

    info: ckpt.CheckpointInfo
    replaced: list[LocalQueue]  # new queue files, renamed into place once it completes
    # files written, each with the (offset, length) runs of its bulk writes
    written: list[tuple[Any, list[tuple[int, int]]]]
    # bodies planned under the lock and encoded and written in the second step:
    # (file, queues.BodyWriter after plan(), that file's runs in ``written``)
    encoders: list[tuple[Any, Any, list[tuple[int, int]]]] = field(default_factory=list)
    in_flight: list[LocalQueue] = field(default_factory=list)  # their bodies until then
    # index files to write (qindex.snapshot() taken under the lock): (queue, snapshot)
    indexes: list[tuple[LocalQueue, tuple[Any, ...]]] = field(default_factory=list)
    # delta files to write: (queue, checkpoint of its index, DeltaLog.snapshot() taken
    # under the lock)
    deltas: list[tuple[LocalQueue, int, tuple[Any, ...]]] = field(default_factory=list)
    # second delta files to write: (queue, checkpoint of its delta, snapshot)
    tops: list[tuple[LocalQueue, int, tuple[Any, ...]]] = field(default_factory=list)
    unindexed: list[str] = field(default_factory=list)  # queues whose index is dropped
    catalog: bytes | None = None  # a new queue catalog to write (amqalcat.fil)
    started: float = field(default_factory=time.perf_counter)  # for checkpoint_seconds
    # set when step two is over (sync_ok: it succeeded): an append that finds the log
    # full waits for it, holding the store lock, and completes the checkpoint itself
    synced: threading.Event = field(default_factory=threading.Event)
    sync_ok: bool = False
    # which of the last steps have been taken or claimed, by the checkpoint's thread or
    # by such an append (each under the store lock): step three, the index files' renames
    # (indexes_done once they are over), the end (_end_checkpoint)
    finished: bool = False
    indexed: bool = False
    indexes_done: threading.Event = field(default_factory=threading.Event)
    ended: bool = False


class _Waiter:
    """A getter blocked outside syncpoint: a put may hand it a message directly."""

    __slots__ = ("correlid", "msgid", "result")

    def __init__(self, msgid: bytes | None, correlid: bytes | None) -> None:
        self.msgid = msgid
        self.correlid = correlid
        self.result: Message | None = None


_NO_ID = bytes(24)


def _pad24(b: bytes | None) -> bytes:
    b = b or b""
    if len(b) > 24:
        raise MessagingError("message or correlation id longer than 24 bytes", mqrc=2206)
    return b + bytes(24 - len(b))


def _norm_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in attrs.items():
        key = k.upper()
        if key in _INT_ATTRS:
            lo, hi = _INT_ATTRS[key]
            try:
                v = int(v)
            except (TypeError, ValueError) as exc:
                raise ObjectError(f"{key}({v}) is not a number") from exc
            if not lo <= v <= hi:
                raise ObjectError(f"{key}({v}) is out of range {lo}-{hi}")
        elif key in _ENUM_ATTRS:
            v = str(v).upper()
            if v not in _ENUM_ATTRS[key]:
                raise ObjectError(f"{key}({v}) is not valid: use {' or '.join(_ENUM_ATTRS[key])}")
        elif key == "DESCR":
            v = str(v)[:64]
        elif key == "BOQNAME":
            v = str(v).strip()[:48]
        else:
            continue  # unknown attributes are the MQSC layer's business, not stored
        out[key] = v
    return out


def unknown_queue_text(name: str) -> str:
    """What a call naming a queue that is not defined is told (MQRC 2085): the name as
    the caller gave it, which may be any string, escaped onto one short line so that no
    control character reaches a terminal or a log."""
    return f"queue '{one_line(name, 64, strict=True)}' is not defined (MQRC 2085)"


def unfiled_queue_name(name: str) -> str | None:
    """Why a new queue may not be called ``name`` in this store though MQ's rules allow
    it, or None. A queue's files are kept under ``queues/<name>/``: a ``/`` in the name
    walks out of that directory (``../../y``: the next checkpoint failed, the queue
    manager stopped, and every restart stopped again replaying the put) or into another
    queue's (``Q1/q`` is a directory inside queue Q1's file), and ``.`` and ``..`` name
    the directories themselves. MQ maps ``/`` in names to another character for its
    files; until this store does (docs/protocol.md), such names are refused."""
    if "/" in name or name in (".", ".."):
        return (f"'{name[:60]}' cannot name a queue on this queue manager: its files are "
                "named after it, so it may not contain / nor be . or ..")
    return None


class QueueManagerStore:
    """The queue manager's persistent store; see module docstring and docs/architecture.md.

    Thread-safe: one lock guards the state; log forces happen outside it.
    """

    def __init__(self, data: Volume, log: Any, qmgr: str, settings: LogSettings,
                 tuning: StoreTuning, *, write_guard: Callable[[], None] | None,
                 errlog: Callable[[str, str], None] | None,
                 clock: Callable[[], float], wallclock: Callable[[], float]) -> None:
        self.data = data
        self.log = log
        self.qmgr = qmgr
        self.settings = settings
        self.tuning = tuning
        self._guard = write_guard
        self._errlog = errlog or (lambda amq_no, text: None)
        self._clock = clock
        self._wallclock = wallclock
        self._opened_at = wallclock()
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._sleepers = 0  # threads in self._cond.wait(): only they need a notify
        self._waiters: dict[str, list[_Waiter]] = {}
        self.state = StoreState()
        self._nonce = os.urandom(8)
        self._msgid_head = MSGID_PREFIX + self._nonce
        self._completed_cp = 0
        self._next_cp = 1
        self._records_since_cp = 0
        self._last_cp_time = clock()
        self._check_due = False
        self._usage_after_cp = 0.0
        self._closed = False
        self._failed: BaseException | None = None
        self._damaged: dict[str, str] = {}
        self._log_full_said = float("-inf")  # when AMQ7463 was last written (_log_full)
        # AMQ7463 was written and no record has been appended since: the next one that is
        # writes AMQ7464 (the log is no longer full), once
        self._log_full_open = False
        # the checkpoint between its first and last steps in another thread (its plan)
        self._cp_running: _CheckpointPlan | None = None
        self._media: dict[str, int] = {}
        # the oldest log files restart and media recovery need, as the error log last
        # said (AMQ7467, AMQ7468; linear logs): written again when a checkpoint moves them
        self._log_files_said: tuple[str, str] | None = None
        self._deleted_files: set[str] = set()
        self._aborted: set[int] = set()  # checkpoints that never completed (qindex)
        # the checkpoint ending open() leaves deep queues' indexes to the next one (the
        # checkpoint thread's, requested at once): a takeover does not wait for them
        self._opening = False
        self._index_later = False
        self._index_cache: qindex.IndexCache | None = None
        # file heads the open read for its queues in one call (_read_heads_ahead): path
        # -> head, None for a file that does not exist; each taken once
        self._heads: dict[str, FileHead | None] = {}
        self._index_due: float | None = None  # when the checkpoint thread writes them
        self._replayed_bytes = 0  # of log, by the open's restart
        self._definitions = 0  # since the last checkpoint began
        self._burst_began: float | None = None  # of definitions: see _DEFINITION_BURST
        self._definitions_due: float | None = None
        # the queue catalog last written: name -> (qid, attrs) of queues empty on file
        self._catalog: dict[str, tuple[int, dict[str, Any]]] | None = None
        self._catalog_cp = 0
        self._max_cp_seen = 0  # the highest checkpoint stamp the queue-file scans met
        # the log space a unit of work may pin (AMQ7469 acts at uow_log_space_limit of it):
        # the log fills by whole extents from the one holding the restart point, which can
        # sit anywhere in its extent, so only N - 1 of the N extents are sure to be free
        extent = int(getattr(log, "extent_bytes", 0) or settings.file_size)
        self._capacity = extent * max(1, settings.primary_files + settings.secondary_files - 1)
        self._pin_limit = int(self._capacity * tuning.uow_log_space_limit)
        self._pin_threshold: int | None = None  # an LSN past which a unit may pin too much
        #: units backed out (or rolled forward) by AMQ7469 since the open (a metric: a
        #: burst of log use reaches the limit faster than a gauge's alert can see)
        self.log_space_backouts = 0
        # log space is looked at (_after_op) each time the log has grown by 1/64 of what a
        # unit may pin: often enough to act well before it runs out, rarely enough that
        # the check (Python, under the store lock) stays off the commit path
        self._space_check_every = max(1, self._capacity // 64)
        self._next_space_check = 0
        self._cp_thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._cp_kick = threading.Event()  # wakes the checkpoint thread
        self._cp_wanted = False  # a trigger fired; the checkpoint thread takes it
        self._cp_active = False  # a checkpoint is between its first and last step
        self._cp_idle = threading.Condition(self._lock)
        # tests: called between a checkpoint's locked first step and the rest
        self._cp_between: Callable[[], None] | None = None
        self.recovery_stats: dict[str, Any] = {}
        #: bumped by every change of the authority records (readers cache against it)
        self.authrec_serial = 0
        # each completed checkpoint's duration (its count: checkpoints taken since open)
        self.checkpoint_seconds = Histogram(LONG_BUCKETS)

    # ------------------------------------------------------------------ lifecycle
    @staticmethod
    def create(data: Volume, log: Volume, qmgr: str, settings: LogSettings) -> None:
        """crtmqm: an empty log and an initial checkpoint file. Refuses to overwrite."""
        from miqm.store.log import RecoveryLog

        if data.exists(ckpt.NAME):
            raise ObjectError(f"queue manager '{qmgr}' already has a store in {data.describe()}")
        RecoveryLog.create(log, settings)
        data.makedirs("queues")
        ckpt.write(data, ckpt.CheckpointInfo(qmgr={"MAXUMSGS": StoreTuning().max_umsgs,
                                                   "MAXMSGL": QMGR_MAXMSGL_DEFAULT}))

    @classmethod
    def open(cls, data: Volume, log: Volume, qmgr: str, settings: LogSettings,
             tuning: StoreTuning, *, generation: int,
             write_guard: Callable[[], None] | None = None,
             errlog: Callable[[str, str], None] | None = None,
             on_event: Callable[..., None] | None = None,
             clock: Callable[[], float] = time.monotonic,
             wallclock: Callable[[], float] = time.time,
             background: bool = True,
             recovery_log: Any = None,
             index_cache: qindex.IndexCache | None = None,
             defer_checkpoint: bool = False) -> QueueManagerStore:
        """Open the store: restart recovery, then a checkpoint.

        ``index_cache``: index files a standby read ahead (used where still current).
        ``defer_checkpoint`` (a takeover): the checkpoint is left to the checkpoint
        thread, a moment later, when the log and the data volume both have room
        (:meth:`_may_defer_checkpoint`); ``recovery_stats["checkpoint"]`` says which
        ("deferred" or "taken").

        ``recovery_log`` substitutes an already-open log (tests); ``background`` starts
        the thread that takes CheckPointWaitLen checkpoints.
        """
        if write_guard is not None:
            # state a backend has to establish again (an NFSv4 client lease that ran out)
            # is used for a write only once the guard has passed
            data.write_fence = write_guard
            if isinstance(log, Volume):
                log.write_fence = write_guard
        info = ckpt.read(data, index_cache)
        if recovery_log is None:
            from miqm.store.log import RecoveryLog

            recovery_log = RecoveryLog.open(log, settings, generation=generation,
                                            write_guard=write_guard, on_event=on_event,
                                            clock=clock, gather_cpu=tuning.group_commit_cpu)
            made = "CIRCULAR" if recovery_log.circular else "LINEAR"
            if settings.log_type != made:
                # the log's own type decides how it reuses extents; the store's (qm.ini's)
                # decides whether rcdmqimg/rcrmqobj are allowed: a circular log that qm.ini
                # calls LINEAR took media images that its reused extents could never
                # replay, and said LOGTYPE(LINEAR)
                recovery_log.close()
                raise StoreError(
                    f"qm.ini says LogType={settings.log_type} but the log in "
                    f"{log.describe()} was created {made}: the log type is fixed when the "
                    f"queue manager is created; set it back with 'setmqini -m {qmgr} -s Log "
                    f"-k LogType -v {made}' (to change it, recreate the queue manager "
                    f"with crtmqm {'-ll' if made == 'CIRCULAR' else '-lc'})",
                    amq="AMQ7017")
        store = cls(data, recovery_log, qmgr, settings, tuning, write_guard=write_guard,
                    errlog=errlog, clock=clock, wallclock=wallclock)
        try:
            store._index_cache = index_cache
            store._recover(info)
            # Deferring changes nothing recovery relies on: the undo of units in flight
            # is already in the log (CLRs, BACKOUT, forced), and until a checkpoint
            # completes a crash replays from the same restart point as this open did,
            # through what this instance logs after it.
            deferred = defer_checkpoint and background and store._may_defer_checkpoint()
            store.recovery_stats["checkpoint"] = "deferred" if deferred else "taken"
            if not deferred:
                store._opening = True
                store.checkpoint()
                store._opening = False
        except BaseException:
            try:
                recovery_log.close()
            except Exception:  # the recovery failure is what the user must see
                pass
            store._close_files()
            raise
        if background:
            store._cp_thread = threading.Thread(target=store._cp_loop, name="checkpoint",
                                                daemon=True)
            store._cp_thread.start()
            if store._index_later or deferred:
                # the deferred indexes (or the whole checkpoint): in the background, a
                # moment after the takeover (not competing with its first requests for the
                # disk and the lock)
                store._index_due = clock() + _INDEX_DELAY
        return store

    def _may_defer_checkpoint(self) -> bool:
        """Whether the open may leave its checkpoint to the checkpoint thread: the log
        is less than half full, and the data volume has room (a full filesystem then
        fails the open's own checkpoint, which a standby treats as "wait for space"; one
        that fills in the next second stops the active as any failed checkpoint does)."""
        if self._failed is not None or self._log_usage() >= _DEFER_LOG_USAGE:
            return False
        free = self.data.available_bytes()
        if free is not None:  # a statvfs: over NFS one call on a context already open
            return free >= _SPACE_MIN + 2 * self._replayed_bytes
        try:
            try:
                with self.data.open(SPACE_PROBE, create=True) as f:
                    f.pwrite(bytes(_SPACE_PROBE_BYTES), 0)
            finally:
                self.data.unlink(SPACE_PROBE)
        except LockFsError:
            return False
        return True

    def close(self) -> None:
        """Shutdown checkpoint, then close the log and the queue files."""
        with self._lock:
            if self._closed:
                return
            self._stop.set()
            self._cp_kick.set()
            try:
                if self._failed is None:
                    self._checkpoint_locked()
            finally:
                self._closed = True
                self._cond.notify_all()
                try:
                    self.log.close()
                finally:
                    self._close_files()

    def _close_files(self) -> None:
        for q in self.state.queues.live():
            if q.file is not None:
                q.file.close()

    # ------------------------------------------------------------------ recovery
    def _recover(self, info: ckpt.CheckpointInfo) -> None:
        st = StoreState(info.next_key, info.next_txid)
        st.qmgr = dict(info.qmgr)
        for rec in info.authrecs:
            st.set_authrec(rec)
        self.state = st
        self._completed_cp = info.seq
        self._aborted = set(info.aborted)
        # indexed_queues counts those loaded with a delta file too (delta_queues)
        # of the indexed ones, prefetched_queues came from what a standby read ahead
        self._loads = {"indexed_queues": 0, "scanned_queues": 0, "catalog_queues": 0,
                       "second_delta_queues": 0, "filed_queues": 0,
                       "delta_queues": 0, "prefetched_queues": 0}
        max_cp = info.seq
        catalog: dict[str, tuple[int, dict[str, Any]]] = {}
        if info.catalog:
            found, why = ckpt.read_catalog(self.data, info.catalog, self._index_cache)
            if found is None:
                self._errlog("AMQ1131", amq.text("AMQ1131", why=why))
            elif why:  # from the copy: the next checkpoint writes both again
                catalog = found
                self._errlog("AMQ1132", amq.text("AMQ1132", why=why))
            else:
                catalog = found
                self._catalog, self._catalog_cp = dict(catalog), info.catalog
        # defined by the catalog alone, or (with records in their files) loaded from them;
        # after a standby's read-ahead, the split it made while it waited
        split = ckpt.split_catalog(info, catalog)
        self._loads["filed_queues"] += split.filed
        # thousands of queues allocate hundreds of thousands of objects and free none:
        # the cyclic collector would rescan them again and again (as in replay)
        collecting = gc.isenabled()
        gc.disable()
        loading = time.perf_counter()
        try:
            self._load_queues(info, split)
        finally:
            if collecting:
                gc.enable()
        loaded = time.perf_counter() - loading
        max_cp = max(max_cp, self._max_cp_seen)
        self._media = dict(info.media)
        for name, lsn in self._media.items():
            if name in st.queues:
                st.queues[name].media_lsn = lsn
        self._next_cp = max_cp + 1
        start = info.restart_lsn if info.restart_lsn is not None else self._log_start()
        t0 = time.perf_counter()
        # committed puts are applied when their queue is first used, or by the next
        # checkpoint: a takeover serves first (QueueTable.defer)
        stats = restart(st, self.log, start, info.cp_lsn, info.uows, self.qmgr, self._errlog,
                        defer_puts=True, cp_seq=info.seq)
        stats["seconds"] = time.perf_counter() - t0
        stats["load_seconds"] = loaded  # the queues, before the replay (``seconds``)
        end = getattr(self.log, "end_lsn", None)
        self._replayed_bytes = max(0, int(end()) - start) if callable(end) else 0
        stats.update(self._loads)
        if st.max_cp_seq > info.seq:
            # checkpoints after the completed one that never completed: what they wrote
            # into files loaded from an index is still there, and must never count
            self._aborted.update(range(info.seq + 1, st.max_cp_seq + 1))
            self._next_cp = max(self._next_cp, st.max_cp_seq + 1)
        self.recovery_stats = stats
        # images of queues whose DELETE the replay redid (see delete_queue)
        self._media = {n: lsn for n, lsn in self._media.items() if n in st.queues}
        oldest = st.uows.oldest_logged()
        if oldest is not None and oldest.first_lsn is not None:
            self._pin_threshold = oldest.first_lsn + self._pin_limit
        for q in st.queues.live():
            if q.file is not None and q.file.garbage:
                if self._guard is not None:
                    self._guard()
                q.file.zero_garbage()
        # directories of queues deleted after the checkpoint (or never checkpointed)
        self._deleted_files = {n for n in self._list_queue_dirs() if n not in st.queues}

    def _load_queues(self, info: ckpt.CheckpointInfo, split: ckpt.CatalogSplit) -> None:
        """Every queue of the checkpoint: from the catalog (empty on file), its index
        file, or a scan of its queue file."""
        st = self.state
        self._max_cp_seen = 0
        # no live record in its file: defined from the catalog, file not opened (the
        # first checkpoint that writes to it makes a new file), object made on first use
        st.queues.set_dormant(split.dormant)
        self._loads["catalog_queues"] = len(split.dormant)
        names = split.loaded
        opened: dict[str, tuple[QueueFile, bool, StoreError | None]] = {}
        # a queue with an index: its file's header and size read, the file opened at its
        # first use (QueueFile.open_existing(later=True)); the rest are scanned now
        to_scan = [name for name in names if not info.index_of(name)[0]]
        if len(to_scan) >= _PARALLEL_OPEN_MIN and self.data.concurrent_opens:
            # side by side (over NFS an open is about a millisecond of round trips); only
            # this open touches these files, and each is loaded below as before
            def open_one(name: str) -> None:
                opened[name] = self._open_queue_file(name, info.queues[name], info.seq)

            try:
                self._each_file(open_one, to_scan, _PARALLEL_OPEN_MIN,
                                self.data.concurrent_opens)
            except BaseException:
                for qf, _exists, _error in opened.values():
                    qf.close()
                raise
        # the queues opened above are those without an index: none of them is read here
        self._heads = self._read_heads_ahead(names, info)
        try:
            for name in names:
                qid = info.queues[name]
                q, seen = self._load_queue(name, qid, info.seq, *info.index_of(name),
                                           opened=opened.pop(name, None))
                self._max_cp_seen = max(self._max_cp_seen, seen)
                st.queues[name] = q
        finally:
            self._heads = {}
            for qf, _exists, _error in opened.values():  # not loaded: a failure above
                qf.close()
        st.queues.adopt_qids(info.queues)

    def _read_heads_ahead(self, names: list[str], info: ckpt.CheckpointInfo
                          ) -> dict[str, FileHead | None]:
        """The file heads the loads of queues ``names`` with an index read (the queue
        file's, its replacement's, the index's and the delta's that the standby's read
        ahead is checked against), read in one call of the volume: over NFSv4 one round
        trip for all of them, where each queue took some fifteen. They are read after
        the lock, by this open, as each load would read them, and nothing else writes
        these files meanwhile. Nothing here on a failure (each load reads its own and says
        what is wrong), but a server that does not answer fails the open at once."""
        wanted: list[tuple[str, int]] = []
        for name in names:
            idx_cp, dx_cp, _d2_cp = info.index_of(name)
            if not idx_cp:
                continue
            at = f"queues/{name}/"
            wanted += [(at + "q.new", 0), (at + "q", DATA_START)]
            if self._index_cache is not None:
                wanted.append((at + "idx", qindex.HEAD_SIZE))
                if dx_cp:
                    wanted.append((at + "idx.d", qindex.DHEAD_SIZE))
        if len(wanted) < 2:
            return {}
        try:
            heads = self.data.read_heads(wanted)
        except VolumeStalled:
            raise  # each load would wait as long again before failing the same way
        except LockFsError:
            return {}
        return dict(zip((path for path, _size in wanted), heads, strict=True))

    def _head(self, path: str, size: int) -> bytes:
        """The first ``size`` bytes of ``path``: as this open read them ahead
        (:meth:`_read_heads_ahead`), else from the volume."""
        if path in self._heads:
            got = self._heads.pop(path)
            if got is None:
                raise VolumeNotFound(f"{path} does not exist", path=path)
            return got.data[:size]
        return self.data.read_head(path, size)

    def _list_queue_dirs(self) -> list[str]:
        try:
            return self.data.listdir("queues")
        except LockFsError:
            return []

    def _log_start(self) -> int:
        fn = getattr(self.log, "first_lsn", None)
        if callable(fn):
            return int(fn())
        if fn is not None:
            return int(fn)
        return 0

    def _load_queue(self, name: str, qid: int, completed: int, idx_cp: int = 0,
                    dx_cp: int = 0, d2_cp: int = 0, *,
                    opened: tuple[QueueFile, bool, StoreError | None] | None = None
                    ) -> tuple[LocalQueue, int]:
        """Rebuild a queue's index (as of checkpoint ``completed``) from its index file
        when the checkpoint file names one (``idx_cp``, with the delta file of checkpoint
        ``dx_cp`` and the second delta file of ``d2_cp`` if not 0) and they check out,
        else from its queue file."""
        qf, exists, error = opened or self._open_queue_file(name, qid, completed,
                                                            later=bool(idx_cp))
        if error is not None:
            why = str(error).split(" (restore it with", 1)[0]
            self._damaged[name] = why
            self._errlog("AMQ7472", f"Object {name}, type queue damaged: {why}; "
                         f"{self._damaged_remedy(name)}")
            return LocalQueue(name, qid, {}), 0
        if not exists or qf.qid != qid:
            qf.close()
            if exists or completed > 0:
                why = (f"queue file {self.data.describe()}/{qf.path} is missing"
                       if not exists else
                       f"queue file {self.data.describe()}/{qf.path} belongs to another "
                       "incarnation of the queue")
                self._damaged[name] = why
                self._errlog("AMQ7472", f"Object {name}, type queue damaged: {why}; "
                             f"{self._damaged_remedy(name)}")
            return LocalQueue(name, qid, {}), 0
        q = LocalQueue(name, qid, qf.attrs)
        q.file, q.file_qid, q.header_dirty = qf, qid, False
        if idx_cp and self._load_index(q, qf, idx_cp, dx_cp, d2_cp):
            self._loads["indexed_queues"] += 1
            self._loads["delta_queues"] += 1 if dx_cp else 0
            self._loads["second_delta_queues"] += 1 if d2_cp else 0
            return q, 0
        self._loads["scanned_queues"] += 1
        q.add_scanned(qf.scan(completed, aborted=self._aborted), generated_key)
        q.file_records = q.present
        recorded = qf.recorded_records(completed, self._aborted)
        if recorded is not None and recorded != q.present and \
                not self._file_damaged(q, qf, recorded):
            return LocalQueue(q.name, q.qid, qf.attrs), 0  # damaged until rcrmqobj
        q.idx_stale = True  # the open's checkpoint writes an index if it is deep enough
        if qf.max_key >= self.state.next_key:
            self.state.next_key = qf.max_key + 1
        return q, qf.max_cp_seen

    def _damaged_remedy(self, name: str) -> str:
        """What an administrator does about damaged queue ``name``: with a linear log,
        rcrmqobj rebuilds it from its media image; with a circular log (no image) only
        deleting and defining it again makes the name usable."""
        if self.settings.log_type == "LINEAR":
            return (f"recover it with 'rcrmqobj -m {self.qmgr} -t qlocal {name}' (it needs "
                    "a media image recorded by rcdmqimg), or DELETE QLOCAL it")
        return ("restore the queue file from a backup taken with the queue manager ended, "
                "or DELETE QLOCAL it (a circular log has no media image to recover it from)")

    def _file_damaged(self, q: LocalQueue, qf: QueueFile, recorded: int) -> bool:
        """A queue file that holds other than the records its last checkpoint left live in
        it (truncated, or records overwritten: their checksums fail): never a silent
        loss. With a linear log the queue is damaged (AMQ7472) until rcrmqobj rebuilds it
        from its media image and the log, or it is deleted (False: the file is closed
        and the queue not to be used); with a circular log, which has no media image, it
        keeps the messages that could be read (True) and the error log says how many
        were lost."""
        where = f"{self.data.describe()}/{qf.path}"
        why = (f"queue file {where} holds {q.present} readable messages where its last "
               f"checkpoint left {recorded} (truncated or overwritten)")
        if self.settings.log_type == "LINEAR":
            qf.close()
            self._damaged[q.name] = why
            self._errlog("AMQ7472", f"Object {q.name}, type queue damaged: {why}; recover "
                         f"it with 'rcrmqobj -m {self.qmgr} -t qlocal {q.name}', or DELETE "
                         "QLOCAL it")
            return False
        self._errlog("AMQ7472", f"Object {q.name}, type queue damaged: {why}; it keeps "
                     f"the {q.present} that could be read, {max(0, recorded - q.present)} "
                     "lost (a circular log has no media image to recover them from)")
        q.header_dirty = True  # the next checkpoint records the count kept: said once
        return True

    def _open_queue_file(self, name: str, qid: int, completed: int, later: bool = False
                         ) -> tuple[QueueFile, bool, StoreError | None]:
        """Queue ``name``'s file opened (``later``: at its first use), after a
        checkpoint's replacement (``q.new``, current once checkpoint ``completed`` names
        it) is put in place: (the file, whether it exists, why it cannot be read or
        None)."""
        qf = QueueFile(self.data, name)
        newer = QueueFile(self.data, name, f"queues/{name}/q.new")
        ahead = self._heads.pop(qf.path, _UNREAD) if later else _UNREAD
        if ahead is _UNREAD or self._heads.pop(newer.path, _UNREAD) is not None:
            ahead = _UNREAD  # read below, after any replacement is in place
            try:
                if newer.open_existing():
                    # a replacement written by a checkpoint: current once that completed
                    if newer.qid == qid and newer.created_cp <= completed:
                        newer.close()
                        self.data.rename(newer.path, qf.path)
                    else:
                        newer.close()
                        self.data.unlink(newer.path)
            except StoreError:
                newer.close()
                self.data.unlink(newer.path)
        if ahead is None:  # read ahead: the queue file does not exist
            return qf, False, None
        try:
            return qf, qf.open_existing(later, None if ahead is _UNREAD else ahead), None
        except StoreError as exc:
            qf.close()
            return qf, False, exc

    def _load_index(self, q: LocalQueue, qf: QueueFile, idx_cp: int, dx_cp: int,
                    d2_cp: int = 0) -> bool:
        """Load ``q``'s messages from its index file (``idx``, or ``idx.new`` when the
        checkpoint that wrote it completed before the rename) and, if ``dx_cp``, its delta
        file (``idx.d`` or ``idx.d.new`` likewise), and, if ``d2_cp``, the second delta
        file on top of that (``idx.d2`` or ``idx.d2.new``); False, with an AMQ1130 line in
        the error log, when they cannot be trusted (the caller scans)."""
        try:
            file_blocks = max(0, (qf.size() - DATA_START) // qf.fmt.block)
        except LockFsError as exc:
            self._errlog("AMQ1130", amq.text("AMQ1130", queue=q.name, why=str(exc)))
            return False
        whys: list[str] = []
        # what the standby read ahead, if the index file is still the one it read
        ahead = self._prefetched(q, idx_cp)
        x = None
        dlog = None  # the DeltaLog of x the standby built, if x is its delta
        if dx_cp and ahead is not None and ahead.delta is not None:
            if (ahead.delta.base_cp, ahead.delta.cp) == (idx_cp, dx_cp) and \
                    self._delta_head(q) == ahead.dhead:
                x = ahead.delta  # the same file (same header): decoded, maybe applied
                dlog = ahead.dlog
        if ahead is not None and x is None:
            ahead.drop_delta()  # the index alone; the delta is read below
        if dx_cp and x is None:
            x = self._read_delta(q, "idx.d", idx_cp, dx_cp)
            if x is None:
                return False
        x2 = None
        if d2_cp:
            x2 = self._read_delta(q, "idx.d2", dx_cp, d2_cp)
            if x2 is None:
                return False
        # all but the last delta are applied before the queue file's size is known to fit
        # (a later delta may free blocks past its end)
        fits = 1 << 62 if x2 is not None else file_blocks
        for fname in ("idx", "idx.new"):
            path = f"queues/{q.name}/{fname}"
            ix = q.index = PriorityIndex()
            try:
                d = None
                if fname == "idx" and ahead is not None:
                    d, base_n = ahead.data, ahead.base_n
                    if x is None and len(d.space) > file_blocks:
                        d = None  # the check reading it would make (a delta may shrink it)
                    elif ahead.applied:
                        if x2 is None:
                            qindex.fit_space(d, file_blocks)  # the rest was checked ahead
                    elif x is not None:
                        qindex.apply_delta(d, x, fits)
                    if d is not None:
                        self._loads["prefetched_queues"] += 1
                    ahead = None  # used (or not usable) once
                if d is None:
                    # with a delta, the index's space map may be longer than the file now
                    with self.data.open(path) as f:
                        d = qindex.read_index(f.pread, f.size(), q.qid, idx_cp,
                                              file_blocks if x is None else 1 << 62)
                    base_n = sum(len(k) for k in d.keys)
                    if x is not None:
                        qindex.apply_delta(d, x, fits)
                if x2 is not None:
                    qindex.apply_delta(d, x2, file_blocks)
                ix.keys, ix.blocks, ix.lens = d.keys, d.blocks, d.lens
                for xd in (x, x2):
                    for key in xd.deleted if xd is not None else ():
                        hit = ix.find(key)
                        if hit is None:
                            raise qindex.IndexInvalid(
                                f"delta: deleted record {key} is not in the index")
                        ix.remove(*hit)
            except (qindex.IndexInvalid, LockFsError) as exc:
                whys.append(f"{fname}: {exc}")
                continue
            q.present = q.file_records = ix.count()
            for key, m in d.msgids:
                q.msgids[m] = key
            for key, c in d.correlids:
                q.correlids.setdefault(c, []).append(key)
            space = d.space
            if len(space) < file_blocks:
                space.extend(bytes(file_blocks - len(space)))
            qf.space = space
            qf.max_key = max((k[-1] for k in d.keys if k), default=0)
            if qf.max_key >= self.state.next_key:
                self.state.next_key = qf.max_key + 1
            q.idx_cp, q.dx_cp, q.d2_cp = idx_cp, dx_cp, d2_cp
            if x is None:
                q.dx = qindex.DeltaLog(idx_cp, base_n)
            elif dlog is not None and dlog.base_n == base_n:
                q.dx = dlog  # built ahead from the same delta over the same index
            else:
                q.dx = qindex.DeltaLog.from_file(x, base_n)
            q.dx2 = (qindex.DeltaLog(dx_cp, 0) if x2 is None
                     else qindex.DeltaLog.from_file(x2, 0))
            if x2 is not None:
                q.dx.merge(x2)
            if q.dx.too_big(self.tuning.index_delta_records):
                # written by the open of a takeover: folded into a new index soon
                q.idx_fold = True
                self._index_later = True
            return True
        self._errlog("AMQ1130", amq.text("AMQ1130", queue=q.name, why="; ".join(whys)))
        return False

    def _prefetched(self, q: LocalQueue, idx_cp: int) -> qindex.IndexAhead | None:
        """What the standby read ahead for ``q``, if its index file ``idx`` is still the
        one it read (same header bytes) and names the expected incarnation and
        checkpoint."""
        cache = self._index_cache
        if cache is None:
            return None
        try:
            head = self._head(f"queues/{q.name}/idx", qindex.HEAD_SIZE)
        except LockFsError:
            return None
        got = cache.take(q.name, head)
        return got if got is not None and got.data.qid == q.qid and \
            got.data.cp == idx_cp else None

    def _read_delta(self, q: LocalQueue, name: str, base_cp: int,
                    cp: int) -> qindex.QueueIndexDelta | None:
        """``q``'s delta file ``name`` (or ``name.new``, whose checkpoint completed before
        the rename) describing checkpoints ``base_cp``..``cp``; None, with an AMQ1130
        line in the error log, when neither can be used."""
        tried: list[str] = []
        for fname in (name, f"{name}.new"):
            try:
                return qindex.decode_delta(self.data.read_bytes(f"queues/{q.name}/{fname}"),
                                           q.qid, base_cp, cp)
            except (qindex.IndexInvalid, LockFsError) as exc:
                tried.append(f"{fname}: {exc}")
        self._errlog("AMQ1130", amq.text("AMQ1130", queue=q.name, why="; ".join(tried)))
        return None

    def _delta_head(self, q: LocalQueue) -> bytes | None:
        """The header bytes of ``q``'s delta file ``idx.d`` (None if it cannot be read)."""
        try:
            return self._head(f"queues/{q.name}/idx.d", qindex.DHEAD_SIZE)
        except LockFsError:
            return None

    # ------------------------------------------------------------------ internals
    @property
    def failure(self) -> BaseException | None:
        """What stopped the store (a failed log write or force, a write guard that refused,
        a failed checkpoint), or None while it works. Once set it stays set: every later
        operation raises :class:`StoreError`, and the owner should stop the instance."""
        return self._failed

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"queue manager '{self.qmgr}' store is closed")
        if self._failed is not None:
            raise StoreError(f"queue manager '{self.qmgr}' store stopped after a failure: "
                             f"{self._failed}")

    def _wake(self) -> None:
        """Wake getters waiting for messages (a commit or put made some visible)."""
        if self._sleepers:
            self._cond.notify_all()

    def _queue(self, name: str) -> LocalQueue:
        q = self.state.queues.get(name)
        if q is None:
            raise MessagingError(unknown_queue_text(name),
                                 mqrc=MQRC_UNKNOWN_OBJECT_NAME)
        if name in self._damaged:
            damaged = StoreError(f"queue '{name}' is damaged: {self._damaged[name]}; "
                                 "recreate it with rcrmqobj (a linear log) or DELETE QLOCAL "
                                 "it (MQRC 2101 MQRC_OBJECT_DAMAGED)", amq="AMQ7472")
            damaged.mqrc = MQRC_OBJECT_DAMAGED  # type: ignore[attr-defined]  # the reply's
            raise damaged
        return q

    def _append(self, payload: bytes, uow: UnitOfWork | None = None) -> int:
        """Append under the lock; notes what the record pins and what it triggers. A log
        full to it makes room first (:meth:`_append_when_full`)."""
        try:
            lsn = self.log.append(payload)
        except LogFullError as exc:
            lsn = self._append_when_full(payload, exc)
        except BaseException as exc:
            # a failed append may have left the log unusable: fail-stop, never guess
            self._failed = exc
            raise
        if uow is not None and uow.first_lsn is None:
            uow.first_lsn = lsn
            if self._pin_threshold is None:
                self._pin_threshold = lsn + self._pin_limit
        if self._pin_threshold is not None and lsn > self._pin_threshold:
            self._check_due = True
        self._records_since_cp += 1
        if self._records_since_cp >= self.tuning.checkpoint_log_recd_max:
            self._check_due = True
        elif lsn >= self._next_space_check:
            self._next_space_check = lsn + self._space_check_every
            self._check_due = True
            if self._log_full_open:  # _log_full set the check to come at once
                self._log_full_open = False
                self._errlog("AMQ7464", amq.text("AMQ7464", qmgr=self.qmgr))
        self._last_lsn = lsn
        return lsn

    def _append_reserved(self, payload: bytes) -> int:
        """Under the lock: append a record that makes room in the log (a CHECKPOINT, or
        the end of a unit AMQ7469 rolls back or forward), which may use the pages the
        log keeps back from ordinary records (RecoveryLog.append_reserved). It never
        makes room itself: LogFullError, reported as AMQ7463, if even those are full."""
        append = getattr(self.log, "append_reserved", None) or self.log.append
        try:
            lsn = int(append(payload))
        except LogFullError as exc:
            self._log_full(exc)
            raise
        except BaseException as exc:
            self._failed = exc
            raise
        self._records_since_cp += 1
        self._last_lsn = lsn
        return lsn

    def _append_when_full(self, payload: bytes, exc: LogFullError) -> int:
        """Under the lock: the log had no room for an ordinary record. As MQ does, make
        room and append it, and report the log full (AMQ7463, MQRC 2102 to the caller)
        only when that cannot be done: something real holds the log's tail (a unit of
        work in flight), a record larger than the log, or no room on the filesystem.

        Making room is bounded: the checkpoint in progress in another thread is waited
        for (at most ``_ROOM_WAIT``, the store lock held) and completed here, else one
        is taken here, and only when it would move the restart point to a later extent
        (``RecoveryLog.reclaimable``); one append after each. The checkpoint thread, the
        usual way space comes back, is late when a producer fills a small log faster
        than it syncs and frees it: each such append got 2102 for nothing."""
        reclaimable = getattr(self.log, "reclaimable", None)
        if not getattr(self.log, "could_hold", lambda n: True)(len(payload)):
            reclaimable = None  # larger than the log: no checkpoint makes room for it
        for make_room in (self._complete_running_checkpoint, self._checkpoint_for_room):
            # a checkpoint now would move the restart point to itself, or to the first
            # record of the oldest unit in flight: nothing to gain unless that frees room
            if (reclaimable is None or self._closed or self._failed is not None
                    or not reclaimable(self.state.uows.restart_lsn(self.log.end_lsn()))
                    or not make_room()):
                continue
            try:
                return int(self.log.append(payload))
            except LogFullError as again:
                exc = again
            except BaseException as failed:
                self._failed = failed
                raise
        self._log_full(exc)
        raise exc

    def _complete_running_checkpoint(self) -> bool:
        """Under the lock: whether the checkpoint in progress in another thread (between
        its steps) has been completed here, freeing the log up to its restart point and
        letting another begin. Its second step (syncing the queue files) needs no lock
        and is waited for; the steps after it need the lock this thread holds, so they
        are taken here, each unless its thread has taken it already."""
        plan = self._cp_running
        if plan is None or not plan.synced.wait(_ROOM_WAIT) or not plan.sync_ok:
            return False  # none, or its thread reports a failed sync (and stops the store)
        try:
            if not plan.finished:
                plan.finished = True
                self._checkpoint_finish(plan)
            if not plan.indexed:
                plan.indexed = True
                try:
                    self._put_index_files(plan)
                finally:
                    plan.indexes_done.set()
            elif not plan.indexes_done.wait(_ROOM_WAIT):  # its thread renames them now
                return False
        except BaseException as exc:  # a half-completed checkpoint: stop, as its thread
            self._checkpoint_failed(exc)  # would (one line for a volume error)
        if not plan.ended:
            plan.ended = True
            self._cp_running = None
            self._end_checkpoint()
        return True

    def _checkpoint_for_room(self) -> bool:
        """Under the lock: whether a checkpoint was taken here to free the log (none can
        begin while another is between its steps)."""
        if self._cp_active:
            return False
        try:
            self._checkpoint_locked()
        except LogFullError:  # not even the reserve had room: reported, nothing written
            return False
        return True

    def _log_full(self, exc: LogFullError) -> None:
        """AMQ7463 in the error log when an append finds the log full (the caller gets
        MQRC 2102), at most once a minute while it stays full: the administrator learns
        why applications fail, and what the log says to do about it. The next record
        appended after a written AMQ7463 writes AMQ7464 (no longer full), once."""
        now = self._clock()
        if now - self._log_full_said >= _LOG_FULL_REPEAT:
            self._log_full_said = now
            self._log_full_open = True
            # the next append that succeeds takes the space check, which says AMQ7464
            self._next_space_check = 0
            why = str(exc).removeprefix("AMQ7463: ").removeprefix("the log is full: ")
            self._errlog("AMQ7463", f"{amq.text('AMQ7463', qmgr=self.qmgr)} {why}")

    def gather_here(self) -> bool:
        """Move the calling thread to the CPU where threads waiting for log forces gather
        (GroupCommitCPU; :meth:`RecoveryLog.gather_here`); False while that CPU is not
        chosen yet."""
        return self.log.gather_here()

    def _force(self, lsn: int) -> None:
        """Make ``lsn`` durable, then check the write guard again before anyone is told.

        The guard before a write cannot cover a pause between the check and the write
        reaching the disk: a process stopped there and resumed after another instance
        took over would complete its write late. The second check is the fence on the
        acknowledgement: the belief still current (or the lock re-verified) after the
        force means every write of it landed while this instance owned the data; if not,
        the caller is never told its record is safe and the store stops.
        """
        try:
            self.log.force(lsn)
            if self._guard is not None:
                self._guard()
        except BaseException as exc:
            self._failed = exc
            raise

    def _after_op(self) -> None:
        """Checkpoint / AMQ7469 work deferred to the end of an operation (under the lock)."""
        if not self._check_due:
            return
        self._check_due = False
        self._relieve_log_space()
        usage = self._log_usage()
        # log space running low: checkpoint so the log can free extents, but not again
        # and again while a unit of work pins them (AMQ7469 deals with that)
        if (self._records_since_cp >= self.tuning.checkpoint_log_recd_max
                or (usage >= 0.5 and usage >= self._usage_after_cp + 0.1)):
            self._request_checkpoint()

    def _note_definition(self) -> None:
        """Under the lock: a queue was defined, altered or deleted (_DEFINITION_BURST)."""
        self._definitions += 1
        if self._definitions < _DEFINITION_BURST or self._cp_thread is None:
            return
        now = self._clock()
        if self._burst_began is None:
            self._burst_began = now
        self._definitions_due = min(now + _DEFINITION_PAUSE,
                                    self._burst_began + _DEFINITION_WAIT)
        if self._definitions == _DEFINITION_BURST:
            self._cp_kick.set()  # the checkpoint thread sets its clock by the due time

    def _request_checkpoint(self) -> None:
        """A trigger fired (under the lock): the checkpoint thread takes the checkpoint,
        so the operation that tripped it does not wait for it; without that thread
        (``open(background=False)``) it is taken here."""
        if self._cp_thread is None:
            self._checkpoint_room_allowing()
            return
        # the records counted so far precede the CHECKPOINT record to come: it covers them
        self._records_since_cp = 0
        if not self._cp_wanted:
            self._cp_wanted = True
            self._cp_kick.set()

    def _log_usage(self) -> float:
        try:
            return float(self.log.usage())
        except Exception:
            return 0.0

    def _pinned_fraction(self, u: UnitOfWork) -> float:
        if u.first_lsn is None:
            return 0.0
        head = getattr(self, "_last_lsn", u.first_lsn)
        return (head - u.first_lsn) / self._capacity

    @staticmethod
    def _unit_said(u: UnitOfWork, pinned: float) -> str:
        """What AMQ7469 says of the unit it ended: what it did and how much log it held
        (the error log said only its number, which no application or command shows)."""
        queues = sorted({op[1] for op in u.ops})
        shown = ", ".join(queues[:5]) + (f" and {len(queues) - 5} more" if len(queues) > 5
                                         else "")
        n = len(u.ops)
        return (f": {n} operation{'' if n == 1 else 's'} on {shown or 'no queue'}, begun at LSN "
                f"{u.first_lsn}, holding {pinned:.0%} of the log")

    def _relieve_log_space(self) -> None:
        """AMQ7469: roll back (or, if prepared, roll forward) units pinning too much log."""
        limit = self.tuning.uow_log_space_limit
        acted = False
        while True:
            u = self.state.uows.oldest_logged()
            pinned = 0.0 if u is None else self._pinned_fraction(u)
            if u is None or pinned <= limit:
                self._pin_threshold = (None if u is None or u.first_lsn is None
                                       else u.first_lsn + self._pin_limit)
                break
            said = self._unit_said(u, pinned)  # before the unit is ended or carried
            if u.state == PREPARED:
                lsn = self._append_reserved(R.encode_json(R.CARRY, {
                    "xid": u.xid, "ops": u.logged_ops(),
                    **({"owner": u.owner} if u.owner else {})}, u.txid))
                u.first_lsn = lsn
                self.log_space_backouts += 1
                self._errlog("AMQ7469", "AMQ7469: Transactions rolled forward to release log "
                             f"space (unit {u.xid}{said}).")
            else:
                self._append_reserved(R.encode_end(R.BACKOUT, u.txid))
                self.state.apply_backout(u, ROLLED_BACK)
                self.log_space_backouts += 1
                self._errlog("AMQ7469", amq.text("AMQ7469") + f" (unit {u.txid} of queue "
                             f"manager '{self.qmgr}'{said}; the "
                             "application gets MQRC 2003 at its next call in it: commit "
                             "more often, or raise LogPrimaryFiles/LogSecondaryFiles)")
                self._cond.notify_all()
            acted = True
        if acted:
            self._checkpoint_room_allowing()

    def _checkpoint_room_allowing(self) -> None:
        """Under the lock, at the end of an operation that has done its work: a
        checkpoint, unless the log has no room even for its record (AMQ7463 said so; the
        operation still succeeded, and the next trigger tries again)."""
        try:
            self._checkpoint_locked()
        except LogFullError:
            pass

    def _cp_loop(self) -> None:
        from miqm.store.log import keep_thread_cpus

        # its own waits for forces never choose the gather CPU (a lone producer, which
        # never waits behind another, keeps its CPU); but its writing of bodies runs in
        # Python, under the interpreter lock the committing threads pass around, so once
        # their waits have chosen that CPU it joins them there (docs/benchmarks.md)
        keep_thread_cpus()
        placed = False
        tick = min(1.0, max(0.05, self.tuning.checkpoint_wait_len / 10))
        while not self._stop.is_set():
            # read without the lock: hints for the wait (the first due of the two)
            due = min((d for d in (self._definitions_due, self._index_due) if d is not None),
                      default=None)
            self._cp_kick.wait(tick if due is None else
                               min(tick, max(0.0, due - self._clock())))
            self._cp_kick.clear()
            if not placed:
                placed = self.gather_here()
            if self._stop.is_set():
                return
            try:
                with self._lock:
                    if self._closed or self._failed is not None:
                        return
                    wanted = self._cp_wanted or (
                        self._clock() - self._last_cp_time >= self.tuning.checkpoint_wait_len
                        and self._records_since_cp >= self.tuning.checkpoint_log_recd_min)
                    if self._index_due is not None and self._clock() >= self._index_due:
                        self._index_due = None
                        wanted = True
                    due = self._definitions_due
                    if due is not None and self._clock() >= due:
                        wanted = True
                if wanted:
                    self._checkpoint_unlocked()
            except LogFullError:  # no room for its record: AMQ7463 said so; try again later
                continue
            except Exception as exc:  # reported; the next operation will fail clearly
                if not self._closed:  # else a close took the shutdown checkpoint meanwhile
                    self._errlog("AMQ6118", f"checkpoint failed: {exc}")
                return

    def _check_uow(self, uow: UnitOfWork, ending: bool = False) -> None:
        """Raise unless ``uow`` is active. A unit AMQ7469 backed out answers MQRC 2003 to
        every call in it until the application ends it (``ending``: MQCMIT), as MQ's
        does: its next put or get is no reason to call it ended (later calls answered
        2017, 'handle not available')."""
        if uow.state == ROLLED_BACK:
            if ending:
                uow.state = "ended"
            raise MessagingError("the unit of work was backed out to release log space "
                                 "(AMQ7469, MQRC 2003)", mqrc=MQRC_BACKED_OUT)
        if uow.state == PREPARED:
            raise MessagingError("the unit of work is prepared; resolve it by xid",
                                 mqrc=2072)
        if uow.state != ACTIVE:
            raise MessagingError("the unit of work has ended", mqrc=MQRC_HANDLE_NOT_AVAILABLE)

    def _msgid(self, key: int) -> bytes:
        return self._msgid_head + key.to_bytes(8, "big") + b"\0\0\0\0"

    # ------------------------------------------------------------------ objects
    def define_queue(self, name: str, **attrs: Any) -> None:
        """DEFINE QLOCAL: logged (forced) before it exists; ObjectError for a name whose
        files the store cannot make (:func:`unfiled_queue_name`)."""
        unfiled = unfiled_queue_name(name)
        if unfiled is not None:
            raise ObjectError(unfiled)
        norm = _norm_attrs(attrs)
        with self._lock:
            self._check_open()
            if name in self.state.queues or self._object_kind(name):
                raise ObjectError(f"AMQ8150: miqm object {name} already exists.",
                                  amq="AMQ8150")
            qid = self.state.next_key
            self.state.next_key += 1
            now = self._wallclock()
            stamp = _dt.datetime.fromtimestamp(now, _dt.UTC)
            full = {**DEFAULT_ATTRS, **norm,
                    "CRDATE": stamp.strftime("%Y-%m-%d"), "CRTIME": stamp.strftime("%H.%M.%S")}
            full["ALTDATE"], full["ALTTIME"] = full["CRDATE"], full["CRTIME"]
            lsn = self._append(R.encode_json(R.DEFINE, {"name": name, "qid": qid,
                                                        "attrs": full}))
            q = self.state.queues[name] = LocalQueue(name, qid, full)
            # defined again before the checkpoint that removes the old one's file: the
            # new incarnation's file replaces it even if it stays empty
            q.need_file = name in self._deleted_files
            self._damaged.pop(name, None)
            self._note_definition()
            self._after_op()
        self._force(lsn)

    def alter_queue(self, name: str, **attrs: Any) -> None:
        """ALTER QLOCAL."""
        norm = _norm_attrs(attrs)
        with self._lock:
            self._check_open()
            q = self._queue(name)
            stamp = _dt.datetime.fromtimestamp(self._wallclock(), _dt.UTC)
            norm["ALTDATE"], norm["ALTTIME"] = stamp.strftime("%Y-%m-%d"), stamp.strftime(
                "%H.%M.%S")
            lsn = self._append(R.encode_json(R.ALTER, {"name": name, "attrs": norm}))
            q.attrs = {**q.attrs, **norm}  # replaced, never changed: the catalog shares it
            q.header_dirty = True
            self._note_definition()
            self._after_op()
        self._force(lsn)

    def delete_queue(self, name: str, purge: bool = False) -> None:
        """DELETE QLOCAL (refused with messages on it unless ``purge``, or with
        uncommitted work on it)."""
        with self._lock:
            self._await_checkpoint_idle()  # it closes the queue file a checkpoint may sync
            self._check_open()
            q = self.state.queues.get(name)
            if q is None:
                raise MessagingError(unknown_queue_text(name),
                                     mqrc=MQRC_UNKNOWN_OBJECT_NAME)
            if q.locked or q.uncommitted:
                raise ObjectError(f"AMQ8148: miqm object {name} in use.", amq="AMQ8148")
            if q.present and not purge:
                raise ObjectError(f"AMQ8143: miqm queue {name} not empty.", amq="AMQ8143")
            lsn = self._append(R.encode_json(R.DELETE, {"name": name}))
            del self.state.queues[name]
            self._damaged.pop(name, None)
            # its media image goes with it: kept, it would hold the oldest log file
            # media recovery needs (AMQ7468) at the image's LSN for ever
            self._media.pop(name, None)
            if q.file is not None:
                q.file.close()
            self._deleted_files.add(name)
            self._wake()
            self._note_definition()
            self._after_op()
        self._force(lsn)

    def queue_attrs(self, name: str) -> dict[str, Any]:
        """Attributes as DISPLAY QLOCAL shows them (MQSC names), with CURDEPTH."""
        with self._lock:
            q = self._queue(name)
            return self._attrs_of(q)

    def _attrs_of(self, q: LocalQueue) -> dict[str, Any]:
        a = {"QUEUE": q.name, "TYPE": "QLOCAL", **q.attrs}
        a["CURDEPTH"] = q.depth
        a["UNCOM"] = "YES" if q.uncommitted or q.locked else "NO"
        a["IPPROCS"] = a["OPPROCS"] = 0
        return a

    def queues_with(self, attr: str, value: Any) -> list[str]:
        """Names of the queues whose attribute ``attr`` is ``value`` (a pass over the
        definitions only: no attribute copies, cheap with thousands of queues)."""
        with self._lock:
            return sorted(n for n in self.state.queues.names_with(attr, value)
                          if n not in self._damaged)

    def list_queues(self, pattern: str = "*") -> list[dict[str, Any]]:
        """Attributes of every queue whose name matches ``pattern`` (``*`` generic)."""
        with self._lock:
            if not any(c in pattern for c in "*?["):  # one name: no pass over all queues
                q = self.state.queues.get(pattern)
                return [] if q is None or pattern in self._damaged else [self._attrs_of(q)]
            return [self._attrs_of(q) for n, q in sorted(self.state.queues.items())
                    if fnmatch.fnmatchcase(n, pattern) and n not in self._damaged]

    def damaged(self, pattern: str = "*") -> dict[str, str]:
        """The damaged queues whose name matches ``pattern`` (``*`` generic), each with
        why (AMQ7472 at start: its file missing, unreadable or another incarnation's).
        :meth:`list_queues` leaves them out; :meth:`delete_queue` deletes them (their files
        go at the next checkpoint as for any delete), after which DEFINE works again."""
        with self._lock:
            return {n: why for n, why in sorted(self._damaged.items())
                    if fnmatch.fnmatchcase(n, pattern) and n in self.state.queues}

    def set_qmgr_attrs(self, **attrs: Any) -> None:
        """ALTER QMGR (MAXUMSGS, MAXMSGL, DESCR)."""
        norm: dict[str, Any] = {}
        for k, v in attrs.items():
            if k.upper() == "MAXUMSGS":
                v = int(v)
                if not 1 <= v <= 999_999_999:
                    raise ObjectError(f"MAXUMSGS({v}) is out of range 1-999999999")
                norm["MAXUMSGS"] = v
            elif k.upper() == "MAXMSGL":
                v = int(v)
                if not 32768 <= v <= _QMGR_MAXMSGL:
                    raise ObjectError(f"MAXMSGL({v}) is out of range 32768-{_QMGR_MAXMSGL}")
                norm["MAXMSGL"] = v
            elif k.upper() == "DESCR":
                norm["DESCR"] = str(v)[:64]
            elif k.upper() == "CONNAUTH":
                norm["CONNAUTH"] = str(v).strip()[:48]
            elif k.upper() == "MONQ":
                v = str(v).upper()
                if v not in ("OFF", "LOW", "MEDIUM", "HIGH"):
                    raise ObjectError(f"MONQ({v}) is not valid: use OFF, LOW, MEDIUM or HIGH")
                norm["MONQ"] = v
        with self._lock:
            self._check_open()
            lsn = self._append(R.encode_json(R.QMGR, norm))
            self.state.qmgr.update(norm)
            self._after_op()
        self._force(lsn)

    def qmgr_attrs(self) -> dict[str, Any]:
        """DISPLAY QMGR attributes."""
        with self._lock:
            return {"QMNAME": self.qmgr, "MAXUMSGS": self._max_umsgs(),
                    "MAXMSGL": int(self.state.qmgr.get("MAXMSGL", _QMGR_MAXMSGL_UNSTORED)),
                    "DESCR": str(self.state.qmgr.get("DESCR", "")),
                    "MONQ": str(self.state.qmgr.get("MONQ", "MEDIUM")),
                    **({"CONNAUTH": self.state.qmgr["CONNAUTH"]}
                       if "CONNAUTH" in self.state.qmgr else {})}

    # -- queue manager objects other than local queues (aliases, models) ---------------
    # They live in the QMGR attributes under "KIND/NAME" (None once deleted): a QMGR log
    # record carries each change and every checkpoint carries them all, so they survive
    # restart, failover and media recovery like MAXUMSGS does.

    def _object_kind(self, name: str) -> str:
        for kind in OBJECT_KINDS:
            if self.state.qmgr.get(f"{kind}/{name}") is not None:
                return kind
        return ""

    def set_object(self, kind: str, name: str, attrs: dict[str, Any] | None) -> None:
        """Define or replace (``attrs``) or delete (None) queue manager object ``name`` of
        ``kind`` (QALIAS, QMODEL); logged and forced. AMQ8150 if a queue of another kind
        has the name."""
        if kind not in OBJECT_KINDS:
            raise ObjectError(f"unknown object kind {kind}")
        with self._lock:
            self._check_open()
            other = self._object_kind(name)
            if attrs is not None and (name in self.state.queues or other not in ("", kind)):
                raise ObjectError(f"AMQ8150: miqm object {name} already exists.",
                                  amq="AMQ8150")
            change = {f"{kind}/{name}": None if attrs is None else dict(attrs)}
            lsn = self._append(R.encode_json(R.QMGR, change))
            self.state.qmgr.update(change)
            self._after_op()
        self._force(lsn)

    def get_object(self, kind: str, name: str) -> dict[str, Any] | None:
        """The attributes of object ``name`` of ``kind``, None if there is none."""
        with self._lock:
            v = self.state.qmgr.get(f"{kind}/{name}")
            return None if v is None else dict(v)

    def list_objects(self, kind: str, pattern: str = "*") -> list[tuple[str, dict[str, Any]]]:
        """(name, attributes) of every object of ``kind`` whose name matches ``pattern``."""
        prefix = f"{kind}/"
        with self._lock:
            return [(k[len(prefix):], dict(v)) for k, v in sorted(self.state.qmgr.items())
                    if k.startswith(prefix) and v is not None
                    and fnmatch.fnmatchcase(k[len(prefix):], pattern)]

    # -- queue status ------------------------------------------------------------------
    def queue_status(self, name: str) -> dict[str, Any]:
        """DISPLAY QSTATUS TYPE(QUEUE) figures: CURDEPTH, UNCOM (uncommitted puts and
        gets), MSGAGE (seconds the oldest message a get could have has been on the queue,
        None if there is none), last put/get wall-clock times (0: none since start), QTIME averages
        (microseconds) and the RESET QSTATS counters."""
        with self._lock:
            q = self._queue(name)
            oldest = None
            idx = q.index
            for p in range(10):
                ks, bl = idx.keys[p], idx.blocks[p]
                for i in range(idx.head[p], len(ks)):
                    if bl[i] != -2 and q.available(ks[i]):
                        if oldest is None or ks[i] < oldest[0]:
                            oldest = (ks[i], p, i)
                        break
            now = self._wallclock()
            age = None
            if oldest is not None:
                age = max(0, int(now - self._read(q, *oldest).put_epoch))
            st = q.stats
            return {"CURDEPTH": q.depth, "UNCOM": len(q.uncommitted) + len(q.locked),
                    "MSGAGE": age, "LPUT": st.last_put, "LGET": st.last_get,
                    "QTIME": (st.qtime_short, st.qtime_long), "MSGSIN": st.msgs_in,
                    "MSGSOUT": st.msgs_out, "HIGHQDPT": max(st.high_depth, q.depth),
                    "RESETAT": st.reset_at or self._opened_at}

    def reset_queue_stats(self, name: str) -> dict[str, Any]:
        """RESET QSTATS: MSGSIN, MSGSOUT, HIGHQDPT since the last reset (or start) and
        RESETINT (seconds since then); the counters start again from now."""
        with self._lock:
            q = self._queue(name)
            st = q.stats
            now = self._wallclock()
            out = {"MSGSIN": st.msgs_in, "MSGSOUT": st.msgs_out,
                   "HIGHQDPT": max(st.high_depth, q.depth),
                   "RESETINT": int(now - (st.reset_at or self._opened_at))}
            st.msgs_in = st.msgs_out = 0
            st.high_depth = q.depth
            st.reset_at = now
            return out

    def clear_queue(self, name: str) -> int:
        """CLEAR QLOCAL: remove every message; returns how many. Refused (MQRC 2055,
        AMQ8143) while the queue has uncommitted puts or gets. Each persistent message's
        removal is a logged get outside syncpoint, forced before return: restart and
        failover see the queue empty."""
        lsn = None
        with self._lock:
            self._check_open()
            q = self._queue(name)
            if q.uncommitted or q.locked:
                raise MessagingError(
                    f"AMQ8143: miqm queue {name} not empty: it has uncommitted messages "
                    "(MQRC 2055 MQRC_Q_NOT_EMPTY); commit or back out that work, or end "
                    "the connections doing it, then clear again.", mqrc=MQRC_Q_NOT_EMPTY,
                    amq="AMQ8143")
            keys: list[tuple[int, bool]] = []
            idx = q.index
            for p in range(10):
                ks, bl = idx.keys[p], idx.blocks[p]
                for i in range(idx.head[p], len(ks)):
                    if bl[i] == -2:
                        continue
                    k = ks[i]
                    m = q.mem.get(k)
                    if m is None and q.in_flight is not None:
                        m = q.in_flight.get(k)
                    keys.append((k, True if m is None else m.persistent))
            for k, persistent in keys:
                if persistent:
                    lsn = self._append(R.encode_get(0, name, k))
                q.remove(k)
            if keys:
                self._after_op()
        if lsn is not None:
            self._force(lsn)
        return len(keys)

    # ------------------------------------------------------------------ authority records
    def set_authrec(self, objtype: str, profile: str, principal: str,
                    auths: list[str] | None) -> None:
        """Set the authority record (objtype, profile, principal) to ``auths``, logged and
        forced like any object change; None deletes it. The store only keeps the
        records: what they mean is miqm.authz's."""
        rec = {"objtype": objtype, "profile": profile, "principal": principal,
               "auths": None if auths is None else list(auths)}
        with self._lock:
            self._check_open()
            lsn = self._append(R.encode_json(R.AUTHREC, rec))
            self.state.set_authrec(rec)
            self.authrec_serial += 1
            self._after_op()
        self._force(lsn)

    def authrecs(self) -> list[dict[str, Any]]:
        """Every authority record: [{objtype, profile, principal, auths}]."""
        with self._lock:
            return self.state.authrec_list()

    def _max_umsgs(self) -> int:
        return int(self.state.qmgr.get("MAXUMSGS", self.tuning.max_umsgs))

    # ------------------------------------------------------------------ messaging
    def begin(self) -> UnitOfWork:
        """Start a unit of work (nothing is logged until its first persistent operation)."""
        with self._lock:
            if self._closed or self._failed is not None:
                self._check_open()
            return self.state.uows.new()

    def put(self, queue: str, body: bytes, *, persistent: bool | None = None,
            priority: int | None = None, msgid: bytes | None = None,
            correlid: bytes | None = None, uow: UnitOfWork | None = None) -> bytes:
        """MQPUT; returns the msgid. Outside syncpoint a persistent put is durable on
        return; under syncpoint nothing is visible to others until commit."""
        body = bytes(body)
        lsn = None
        with self._lock:
            if self._closed or self._failed is not None:
                self._check_open()
            q = self.state.queues.get(queue)
            if q is None or self._damaged:
                q = self._queue(queue)
            if uow is not None and uow.state != ACTIVE:
                self._check_uow(uow)
            if q.attrs["PUT"] != "ENABLED":
                raise MessagingError(f"puts are inhibited on queue '{queue}' (MQRC 2051)",
                                     mqrc=MQRC_PUT_INHIBITED)
            if len(body) > int(q.attrs["MAXMSGL"]):
                raise MessagingError(f"message of {len(body)} bytes exceeds MAXMSGL of queue "
                                     f"'{queue}' (MQRC 2030)", mqrc=MQRC_MSG_TOO_BIG_FOR_Q)
            if len(body) > self.state.qmgr.get("MAXMSGL", _QMGR_MAXMSGL_UNSTORED):
                raise MessagingError(
                    f"message of {len(body)} bytes exceeds the queue manager's MAXMSGL of "
                    f"{self.state.qmgr.get('MAXMSGL', _QMGR_MAXMSGL_UNSTORED)} bytes: ALTER "
                    "QMGR MAXMSGL raises it (MQRC 2031 MQRC_MSG_TOO_BIG_FOR_Q_MGR)",
                    mqrc=MQRC_MSG_TOO_BIG_FOR_Q_MGR)
            prio = int(q.attrs["DEFPRTY"]) if priority is None else int(priority)
            if not 0 <= prio <= 9:
                raise MessagingError(f"priority {prio} is not 0-9 (MQRC 2050)",
                                     mqrc=MQRC_PRIORITY_ERROR)
            pers = (q.attrs["DEFPSIST"] == "YES") if persistent is None else bool(persistent)
            if pers and q.attrs.get("DEFTYPE") == "TEMPDYN":
                raise MessagingError(f"queue '{queue}' is a temporary dynamic queue: it takes "
                                     "non-persistent messages only (MQRC 2048 "
                                     "MQRC_PERSISTENT_NOT_ALLOWED)",
                                     mqrc=MQRC_PERSISTENT_NOT_ALLOWED)
            # MAXUMSGS is at least 1: a unit's first message never needs the lookup
            if uow is not None and uow.ops and len(uow.ops) >= self._max_umsgs():
                raise MessagingError("MAXUMSGS reached for this unit of work (MQRC 2024)",
                                     mqrc=MQRC_SYNCPOINT_LIMIT_REACHED)
            key = self.state.next_key
            self.state.next_key += 1
            mid = _pad24(msgid) if msgid else self._msgid(key)
            cid = _pad24(correlid) if correlid else _NO_ID
            now = self._wallclock()
            if (uow is None and q.present == len(q.uncommitted) + len(q.locked)
                    and self._hand_over(queue, mid, cid, prio, pers, now, body)):
                st = q.stats
                st.msgs_in += 1
                st.last_put = now
                st.got(now, now)
                return mid
            if q.present - len(q.locked) >= int(q.attrs["MAXDEPTH"]):  # CURDEPTH
                raise MessagingError(f"queue '{queue}' is full (MQRC 2053)", mqrc=MQRC_Q_FULL)
            if pers:
                lsn = self._append(R.encode_put(uow.txid if uow else 0, queue, key, prio, now,
                                                mid, cid, body), uow)
            # the key is new and next_key already past it: StoreState.add_message inlined
            q.mem[key] = MemMessage(prio, pers, now, mid, cid, body)
            q.add_put(key, prio, len(body), mid if msgid else None, cid if correlid else None)
            st = q.stats
            st.msgs_in += 1
            st.last_put = now
            if q.present - len(q.locked) > st.high_depth:
                st.high_depth = q.present - len(q.locked)
            if uow is not None:
                q.uncommitted[key] = uow.txid
                uow.ops.append(("P", queue, key, pers))
            else:
                self._wake()
            if self._check_due:
                self._after_op()
        if lsn is not None and uow is None:
            self._force(lsn)
        return mid

    def _hand_over(self, queue: str, mid: bytes, cid: bytes, prio: int, pers: bool,
                   now: float, body: bytes) -> bool:
        """Put to a waiting getter outside syncpoint: the message never touches the queue.

        No log record is needed even when persistent: the put and the destructive get
        complete together in memory, so a crash either precedes both (the put was never
        acknowledged) or follows both (the message was delivered, nothing to recover).
        Getters under syncpoint are never handed a message (their backout must be able to
        restore it, which needs the logged put).
        """
        for w in self._waiters.get(queue, ()):
            if w.result is None and (w.msgid is None or w.msgid == mid) and (
                    w.correlid is None or w.correlid == cid):
                w.result = Message(body, mid, cid, prio, pers, now)
                self._waiters[queue].remove(w)
                self._cond.notify_all()
                return True
        return False

    def _select(self, q: LocalQueue, msgid: bytes | None, correlid: bytes | None,
                after: tuple[int, int] | None = None) -> tuple[int, int, int] | None:
        """(key, priority, index) of the message a get would return; with ``after`` (a
        browse cursor, (priority, key)), the first such message past that position in
        delivery order."""
        idx = q.index
        if after is not None:
            pa, ka = after
        if msgid is not None:
            cands = []
            k = q.msgids.get(msgid)
            if k is not None:
                cands.append(k)
            gk = generated_key(msgid)
            if gk is not None:
                cands.append(gk)
            for k in cands:
                hit = idx.find(k)
                if hit is None or not q.available(k):
                    continue
                if after is not None and not (hit[0] < pa or (hit[0] == pa and k > ka)):
                    continue
                m = self._read(q, k, *hit)
                if m.msgid == msgid and (correlid is None or m.correlid == correlid):
                    return k, hit[0], hit[1]
            return None
        if correlid is not None:
            best = None
            for k in q.correlids.get(correlid, ()):
                hit = idx.find(k)
                if hit is None or not q.available(k):
                    continue
                if after is not None and not (hit[0] < pa or (hit[0] == pa and k > ka)):
                    continue
                cand = (-hit[0], k, hit)
                if best is None or cand < best:
                    best = cand
            return None if best is None else (best[1], best[2][0], best[2][1])
        for p in range(9 if after is None else pa, -1, -1):
            ks, bl = idx.keys[p], idx.blocks[p]
            start = idx.head[p]
            if after is not None and p == pa:
                # a message of a higher priority that came after the cursor passed is
                # not seen, as with MQ's browse cursor
                start = bisect.bisect_right(ks, ka, start)
            for i in range(start, len(ks)):
                if bl[i] == -2:
                    continue
                k = ks[i]
                if k in q.locked or k in q.uncommitted:
                    continue
                return k, p, i
        return None

    def _read(self, q: LocalQueue, key: int, p: int, i: int) -> Message:
        msg = _memory_message(q, key)
        if msg is not None:
            return msg
        assert q.file is not None
        try:
            rec = q.file.read(q.index.blocks[p][i], q.index.lens[p][i])
        except LockFsError as exc:
            raise StoreError(f"cannot read queue file of '{q.name}': {exc}") from exc
        except StoreError as exc:
            raise self._found_damaged(q, exc) from exc
        return _record_message(rec)

    def _found_damaged(self, q: LocalQueue, exc: StoreError) -> StoreError:
        """Under the lock: a record of ``q``'s file failed its check when read (a get or
        browse after restart trusted the index, which does not read bodies). The queue is
        damaged from now on, as a restart that found it would make it: AMQ7472 in the
        error log with what to do, and MQRC 2101 to this and every later call, rather
        than 2102 on every get of the same message with the rest stuck behind it."""
        why = str(exc)
        why = why.split(" (restore it with", 1)[0]
        self._damaged[q.name] = why
        self._errlog("AMQ7472", f"Object {q.name}, type queue damaged: {why}; "
                     f"{self._damaged_remedy(q.name)}")
        damaged = StoreError(f"queue '{q.name}' is damaged: {why}; "
                             f"{self._damaged_remedy(q.name)} (MQRC 2101 "
                             "MQRC_OBJECT_DAMAGED)", amq="AMQ7472")
        damaged.mqrc = MQRC_OBJECT_DAMAGED  # type: ignore[attr-defined]  # the reply's
        return damaged

    def _read_many(self, q: LocalQueue, picked: list[tuple[int, int, int]]) -> list[Message]:
        """:meth:`_read` of each (key, priority, index) in ``picked``; the ones only in
        the queue file read together (QueueFile.read_many)."""
        out: list[Message | None] = []
        places: list[tuple[int, int]] = []
        at: list[int] = []
        for k, p, i in picked:
            msg = _memory_message(q, k)
            if msg is None:
                at.append(len(out))
                places.append((q.index.blocks[p][i], q.index.lens[p][i]))
            out.append(msg)
        if places:
            assert q.file is not None
            try:
                records = q.file.read_many(places)
            except LockFsError as exc:
                raise StoreError(f"cannot read queue file of '{q.name}': {exc}") from exc
            except StoreError as exc:
                raise self._found_damaged(q, exc) from exc
            for slot, rec in zip(at, records, strict=True):
                out[slot] = _record_message(rec)
        return out  # type: ignore[return-value]

    def get(self, queue: str, *, msgid: bytes | None = None, correlid: bytes | None = None,
            wait: float = 0.0, browse: bool = False, after: tuple[int, int] | None = None,
            uow: UnitOfWork | None = None) -> Message | None:
        """MQGET, or a browse (MQGMO_BROWSE_FIRST; with ``after``, the position of a
        message browsed before, MQGMO_BROWSE_NEXT: the next one in delivery order). A
        browsed message carries its :attr:`Message.position`. Returns None if nothing
        arrives within ``wait`` seconds."""
        mid = _pad24(msgid) if msgid is not None else None
        cid = _pad24(correlid) if correlid is not None else None
        deadline = self._clock() + max(0.0, wait)
        lsn = None
        waiter: _Waiter | None = None
        with self._lock:
            try:
                while True:
                    self._check_open()
                    q = self._queue(queue)
                    if uow is not None and not browse:
                        self._check_uow(uow)
                    if not browse and q.attrs["GET"] != "ENABLED":
                        raise MessagingError(f"gets are inhibited on queue '{queue}' "
                                             "(MQRC 2016)", mqrc=MQRC_GET_INHIBITED)
                    if waiter is not None and waiter.result is not None:
                        return waiter.result
                    hit = self._select(q, mid, cid, after if browse else None)
                    if hit is not None:
                        key, p, i = hit
                        msg = self._read(q, key, p, i)
                        if browse:
                            return replace(msg, position=(p, key))
                        q.stats.got(self._wallclock(), msg.put_epoch)
                        if uow is not None:
                            if len(uow.ops) >= self._max_umsgs():
                                raise MessagingError("MAXUMSGS reached for this unit of work "
                                                     "(MQRC 2024)",
                                                     mqrc=MQRC_SYNCPOINT_LIMIT_REACHED)
                            if msg.persistent:
                                self._append(R.encode_get(uow.txid, queue, key), uow)
                            q.locked[key] = uow.txid
                            uow.ops.append(("G", queue, key, msg.persistent))
                        else:
                            if msg.persistent:
                                lsn = self._append(R.encode_get(0, queue, key))
                            q.remove(key)
                        self._after_op()
                        break
                    remaining = deadline - self._clock()
                    if remaining <= 0:
                        return None
                    if waiter is None and uow is None and not browse:
                        waiter = _Waiter(mid, cid)
                        self._waiters.setdefault(queue, []).append(waiter)
                    self._sleepers += 1
                    try:
                        self._cond.wait(min(remaining, 1.0))
                    finally:
                        self._sleepers -= 1
            finally:
                if waiter is not None and waiter in self._waiters.get(queue, ()):
                    self._waiters[queue].remove(waiter)
        if lsn is not None:
            self._force(lsn)
        return msg

    def get_many(self, queue: str, n: int, uow: UnitOfWork) -> list[Message]:
        """Up to ``n`` messages in delivery order, got under ``uow`` without waiting: the
        rules of :meth:`get` under syncpoint, in one pass over the queue's index rather
        than one pass per message (a streaming consumer's batch, miqm/net/streaming.py).
        Returns ``[]`` when none is available."""
        out: list[Message] = []
        with self._lock:
            self._check_open()
            q = self._queue(queue)
            self._check_uow(uow)
            if q.attrs["GET"] != "ENABLED":
                raise MessagingError(f"gets are inhibited on queue '{queue}' (MQRC 2016)",
                                     mqrc=MQRC_GET_INHIBITED)
            limit = self._max_umsgs()
            now = self._wallclock()
            idx = q.index
            locked, uncommitted = q.locked, q.uncommitted
            # choose first, then read them all (one read per run of records in the queue
            # file), then take them: a bad record fails the batch before any is taken
            picked: list[tuple[int, int, int]] = []
            room = limit - len(uow.ops)
            for p in range(9, -1, -1):
                ks, bl = idx.keys[p], idx.blocks[p]
                for i in range(idx.head[p], len(ks)):
                    if bl[i] == -2:
                        continue
                    k = ks[i]
                    if k in locked or k in uncommitted:
                        continue
                    if len(picked) >= room:
                        if picked:
                            break
                        raise MessagingError("MAXUMSGS reached for this unit of work "
                                             "(MQRC 2024)", mqrc=MQRC_SYNCPOINT_LIMIT_REACHED)
                    picked.append((k, p, i))
                    if len(picked) >= n:
                        break
                if len(picked) >= n or (picked and len(picked) >= room):
                    break
            for (k, _p, _i), msg in zip(picked, self._read_many(q, picked), strict=True):
                if msg.persistent:
                    self._append(R.encode_get(uow.txid, queue, k), uow)
                locked[k] = uow.txid
                uow.ops.append(("G", queue, k, msg.persistent))
                q.stats.got(now, msg.put_epoch)
                out.append(msg)
            if out:
                self._after_op()
        return out

    def commit(self, uow: UnitOfWork) -> None:
        """MQCMIT: returns once the COMMIT record is durable (forces are shared)."""
        lsn = None
        with self._lock:
            if self._closed or self._failed is not None:
                self._check_open()
            if uow.state != ACTIVE:
                self._check_uow(uow, ending=True)  # raises: backed out, prepared or ended
            if uow.first_lsn is not None:  # logged
                lsn = self._append(R.encode_end(R.COMMIT, uow.txid))
            self.state.apply_commit(uow)
            self._wake()
            if self._check_due:
                self._after_op()
        if lsn is not None:
            self._force(lsn)

    def backout(self, uow: UnitOfWork) -> None:
        """MQBACK: undo the unit (its BACKOUT record need not be forced: restart would
        undo it anyway)."""
        with self._lock:
            if uow.state in (ROLLED_BACK, "ended"):
                uow.state = "ended"
                return
            self._check_open()
            if uow.logged:
                self._append(R.encode_end(R.BACKOUT, uow.txid))
            self.state.apply_backout(uow)
            self._wake()
            self._after_op()

    def prepare(self, uow: UnitOfWork, owner: str | None = None) -> str:
        """Phase one of two-phase commit: durable PREPARE; returns the xid. ``owner``
        (who prepared the unit) is logged with it and kept while it is in doubt, across
        restarts and failovers (:meth:`unit_owner`)."""
        with self._lock:
            self._check_open()
            self._check_uow(uow)
            xid = f"{self.qmgr}.{self._nonce.hex()}.{uow.txid}"
            lsn = self._append(R.encode_prepare(uow.txid, xid, owner), uow)
            uow.state, uow.xid, uow.owner = PREPARED, xid, owner or None
            self.state.uows.by_xid[xid] = uow
            self._after_op()
        self._force(lsn)
        return xid

    def resolve(self, xid: str, commit: bool) -> None:
        """Phase two for a prepared (possibly recovered, in-doubt) unit."""
        lsn = None
        with self._lock:
            self._check_open()
            u = self.state.uows.by_xid.get(xid)
            if u is None or u.state != PREPARED:
                raise ObjectError(f"no in-doubt unit of work with xid '{xid}'")
            lsn = self._append(R.encode_end(R.COMMIT if commit else R.BACKOUT, u.txid))
            if commit:
                self.state.apply_commit(u)
            else:
                self.state.apply_backout(u)
            self._wake()
            self._after_op()
        self._force(lsn)

    def unit_owner(self, xid: str) -> str | None:
        """Who prepared the in-doubt unit ``xid`` (as given to :meth:`prepare`), or None
        (not given, or no such unit)."""
        with self._lock:
            u = self.state.uows.by_xid.get(xid)
            return u.owner if u is not None else None

    def in_doubt(self) -> list[str]:
        """Xids of prepared units awaiting resolve."""
        with self._lock:
            return sorted(u.xid for u in self.state.uows.units.values()
                          if u.state == PREPARED and u.xid)

    # ------------------------------------------------------------------ checkpoint
    def checkpoint(self) -> None:
        """Take a checkpoint now (also done on open, close, and by the triggers)."""
        self._checkpoint_unlocked()

    def _await_checkpoint_idle(self) -> None:
        """Under the lock: wait (lock released meanwhile) until no checkpoint is between
        its steps. Operations that close or read whole queue files call this before they
        change anything."""
        while self._cp_active:
            self._cp_idle.wait()

    def _end_checkpoint(self) -> None:
        """Under the lock: the running checkpoint is over (done or failed)."""
        self._cp_active = False
        self._cp_idle.notify_all()

    def _checkpoint_locked(self) -> None:
        """A whole checkpoint by a caller holding the store lock, which it keeps."""
        self._await_checkpoint_idle()
        self._cp_active = True
        try:
            plan = self._checkpoint_plan()
            self._checkpoint_sync(plan)
            self._checkpoint_finish(plan)
            self._put_index_files(plan)
        finally:
            self._end_checkpoint()

    def _checkpoint_unlocked(self) -> None:
        """A whole checkpoint by a caller not holding the store lock: it is held for the
        first and last steps only, commits go on while the checkpoint's writes reach the
        disk."""
        with self._lock:
            self._await_checkpoint_idle()
            self._check_open()
            self._cp_active = True
            try:
                plan = self._checkpoint_plan()
            except BaseException:
                self._end_checkpoint()
                raise
            self._cp_running = plan  # an append that finds the log full may complete it
        try:
            if self._cp_between is not None:
                self._cp_between()
            self._checkpoint_sync(plan)
            with self._lock:
                if not plan.finished:
                    plan.finished = True
                    self._checkpoint_finish(plan)
                mine, plan.indexed = not plan.indexed, True
            if mine:
                try:
                    self._put_index_files(plan)
                finally:
                    plan.indexes_done.set()
        finally:
            plan.synced.set()  # whatever happened, nobody waits for it any longer
            with self._lock:
                if not plan.ended:  # else an append ended it (and may run its own now)
                    plan.ended = True
                    self._cp_running = None
                    self._end_checkpoint()

    def _checkpoint_failed(self, exc: BaseException) -> NoReturn:
        """Fail-stop on a checkpoint error (under the lock), and raise what the caller
        must see: a volume error as one line saying what to do."""
        if isinstance(exc, LockFsError):
            err = StoreError(f"checkpoint of queue manager '{self.qmgr}' failed: {exc}; "
                             "committed work is safe in the log, restart the queue manager "
                             "once the data directory is writable")
            self._failed = self._failed or err
            raise err from exc
        self._failed = self._failed or exc
        raise exc

    def _checkpoint_plan(self) -> _CheckpointPlan:
        """Step one, under the lock: the CHECKPOINT record, forced, and every queue file
        brought up to date in the page cache (bodies written, delete marks, headers)."""
        st = self.state
        st.queues.apply_deferred()  # before anything below reads a queue
        seq = self._next_cp
        self._cp_wanted = False
        info = ckpt.CheckpointInfo(
            seq=seq, next_key=st.next_key, next_txid=st.uows.next_txid,
            queues=st.queues.qids(),
            uows=st.uows.snapshot(),
            qmgr={k: v for k, v in st.qmgr.items() if v is not None},  # deleted: dropped
            media=dict(self._media), authrecs=st.authrec_list())
        plan = _CheckpointPlan(info, [], [])
        try:
            cp_lsn = self._append_reserved(R.encode_json(R.CHECKPOINT, {"seq": seq,
                                                                         "uows": info.uows}))
        except LogFullError:
            # nothing written, nothing changed: this checkpoint did not begin, and the
            # store goes on (a later one finds room once units in flight end)
            raise
        except BaseException as exc:
            self._checkpoint_failed(exc)
        try:
            info.cp_lsn = cp_lsn
            info.restart_lsn = st.uows.restart_lsn(cp_lsn)
            self._records_since_cp = 0
            self._definitions, self._burst_began, self._definitions_due = 0, None, None
            self._last_cp_time = self._clock()
            self._force(cp_lsn)  # write-ahead: every record these files reflect is durable
            # a dormant queue (never touched since the catalog defined it) has nothing to
            # write: only the queues that are objects are visited
            for q in st.queues.live():
                if q.name in self._damaged:
                    continue
                if self._guard is not None:  # a pause may have ended between queues
                    self._guard()
                self._write_queue(q, seq, plan)
            info.idx = {q.name: q.idx_cp for q in st.queues.live()
                        if q.idx_cp and not q.dx_cp and q.name not in self._damaged}
            info.idxd = {q.name: [q.idx_cp, q.dx_cp] for q in st.queues.live()
                         if q.idx_cp and q.dx_cp and not q.d2_cp
                         and q.name not in self._damaged}
            info.idxd2 = {q.name: [q.idx_cp, q.dx_cp, q.d2_cp] for q in st.queues.live()
                          if q.idx_cp and q.dx_cp and q.d2_cp
                          and q.name not in self._damaged}
            info.aborted = sorted(self._aborted)
            self._plan_catalog(plan)
        except BaseException as exc:
            self._checkpoint_failed(exc)
        return plan

    def _plan_catalog(self, plan: _CheckpointPlan) -> None:
        """Under the lock, in step 1: the queue catalog of this checkpoint (the definition
        of every queue that holds no live record: for one with no file, its only one); a
        new one is written only when it differs from the last."""
        info = plan.info
        # a queue's attributes are replaced, never changed in place (alter_queue): the
        # catalog keeps the dicts themselves, and comparing with the last one mostly
        # compares identities
        cat = dict(self.state.queues.dormant())  # their entries: compared by identity
        cat.update((q.name, (q.qid, q.attrs)) for q in self.state.queues.live()
                   if q.present == 0 and q.name not in self._damaged)
        last = self._catalog
        if last is not None and cat.items() <= last.items():
            # the last catalog, but for queues that hold records now: while they are few,
            # named in the checkpoint file (``filed``) instead of a new catalog, which with
            # thousands of queues is two files of hundreds of kilobytes
            filed = last.keys() - cat.keys()
            if len(filed) <= max(_FILED_MIN, len(last) // 16):
                info.catalog, info.filed = self._catalog_cp, sorted(filed)
                return
        plan.catalog = ckpt.encode_catalog(info.seq, cat)
        self._catalog, self._catalog_cp = cat, info.seq
        info.catalog = info.seq

    def _checkpoint_sync(self, plan: _CheckpointPlan) -> None:
        """Step two, with or without the lock: the queue files' writes reach the disk in
        steps (a log force meanwhile waits behind one step), each file is made durable,
        then the checkpoint file is replaced."""
        try:
            for f, w, runs in plan.encoders:
                if self._guard is not None:
                    self._guard()
                while (done := w.encode_next()) is not None:
                    offset = w.qf.fmt.offset(done[0])
                    f.pwrite(done[1], offset)
                    runs.append((offset, len(done[1])))
            plan.encoders.clear()
            seq = plan.info.seq
            files = [(f"queues/{q.name}/idx.new", qindex.encode(q.qid, seq, *snap))
                     for q, snap in plan.indexes]
            files += [(f"queues/{q.name}/idx.d.new",
                       qindex.encode_delta(q.qid, base, seq, snap))
                      for q, base, snap in plan.deltas]
            files += [(f"queues/{q.name}/idx.d2.new",
                       qindex.encode_delta(q.qid, base, seq, snap))
                      for q, base, snap in plan.tops]
            for path, pieces in files:
                if self._guard is not None:
                    self._guard()
                f = self.data.open(path, create=True)
                try:
                    f.truncate(0)
                    off = 0
                    for piece in pieces:
                        f.pwrite(piece, off)
                        off += len(piece)
                    f.fdatasync()
                finally:
                    f.close()
            def make_durable(item: tuple[VolumeFile, list[tuple[int, int]]]) -> None:
                f, runs = item
                if self._guard is not None:
                    self._guard()
                for off, n in runs:
                    end = off + n
                    while off < end:
                        step = min(_WRITE_BACK_STEP, end - off)
                        f.write_back(off, step)
                        off += step
                f.fdatasync()

            self._each_file(make_durable, plan.written)
            if plan.catalog is not None:
                if self._guard is not None:
                    self._guard()
                for name in ckpt.CATALOGS:
                    self.data.write_atomic(name + ".new", plan.catalog)
            if self._guard is not None:
                self._guard()
            ckpt.write(self.data, plan.info)
            plan.sync_ok = True
            plan.synced.set()
        except BaseException as exc:
            plan.synced.set()  # before the lock: an append holding it may be waiting
            with self._lock:
                self._checkpoint_failed(exc)

    def _checkpoint_finish(self, plan: _CheckpointPlan) -> None:
        """Step three, under the lock: the checkpoint is complete; new files take their
        place, freed blocks become reusable, the log may free extents."""
        st = self.state
        info = plan.info
        replaced = plan.replaced
        seq = info.seq
        self._completed_cp = seq
        self._next_cp = seq + 1
        for q in plan.in_flight:
            q.in_flight = None
        def put_in_place(q: LocalQueue) -> None:
            assert q.file is not None
            self.data.rename(q.file.path, f"queues/{q.name}/q")
            q.file.path = f"queues/{q.name}/q"

        self._each_file(put_in_place, replaced)
        if plan.catalog is not None:
            for name in ckpt.CATALOGS:
                self.data.rename(name + ".new", name)
        for q in st.queues.live():
            if q.file is not None:
                q.file.release_freed()
                if q.file.shrink_if_oversized():
                    pass
            if len(q.msgids) + len(q.correlids) > 2 * max(16, q.present):
                q.purge_stale_selectors()
        for name in list(self._deleted_files):
            if name not in st.queues:
                self.data.remove_tree(f"queues/{name}")
            self._deleted_files.discard(name)
        media_lsn = min(info.media.values()) if info.media else None
        try:
            self.log.set_restart_lsn(info.restart_lsn, media_lsn)
        except TypeError:
            self.log.set_restart_lsn(info.restart_lsn)
        self._usage_after_cp = self._log_usage()
        self.last_checkpoint = info
        self._say_log_files()
        self.checkpoint_seconds.observe(time.perf_counter() - plan.started)

    def _say_log_files(self) -> None:
        """AMQ7467 and AMQ7468 in the error log when a checkpoint has moved the oldest log
        file restart or media recovery needs (linear logs): what an archiving job reads to
        know which files it may move away, as MQ writes them. Not for the open's own
        checkpoint (the baseline: strmqm's lines stay as they are), at most one pair per
        extent the log moves on (AMQ7468 only when it moves too), never on a message's
        path."""
        if self.settings.log_type != "LINEAR":
            return
        rec = self._safe(self.log.oldest_extent_for_restart)
        med = self._safe(self.log.oldest_extent_for_media)
        if not isinstance(rec, str) or not isinstance(med, str):
            return
        said, self._log_files_said = self._log_files_said, (rec, med)
        if said is None:
            return
        # each only when it moved: a busy log moves its restart point an extent every
        # few checkpoints, its media point only at rcdmqimg
        if said[0] != rec:
            self._errlog("AMQ7467", amq.text("AMQ7467", qmgr=self.qmgr, extent=rec))
        if said[1] != med:
            self._errlog("AMQ7468", amq.text("AMQ7468", qmgr=self.qmgr, extent=med))

    def _put_index_files(self, plan: _CheckpointPlan) -> None:
        """Step three's renames of the index files the checkpoint wrote (and removal of
        those they replace), after the store lock is let go: the checkpoint is complete,
        nothing in this process reads them, an open takes ``idx.new`` (and so on) where a
        crash left it, and with many small indexed queues these renames held commits
        back for tens of milliseconds. Another checkpoint waits for them (it cannot
        start before this one ends)."""
        def index(name: str) -> None:
            self.data.rename(f"queues/{name}/idx.new", f"queues/{name}/idx")
            self.data.unlink(f"queues/{name}/idx.d")  # of the previous index
            self.data.unlink(f"queues/{name}/idx.d2")

        def delta(name: str) -> None:
            self.data.rename(f"queues/{name}/idx.d.new", f"queues/{name}/idx.d")
            self.data.unlink(f"queues/{name}/idx.d2")  # of the previous delta

        def top(name: str) -> None:
            self.data.rename(f"queues/{name}/idx.d2.new", f"queues/{name}/idx.d2")

        def unindexed(name: str) -> None:
            for fname in ("idx", "idx.new", "idx.d", "idx.d.new", "idx.d2", "idx.d2.new"):
                self.data.unlink(f"queues/{name}/{fname}")

        jobs = [*((index, q.name) for q, _snap in plan.indexes),
                *((delta, q.name) for q, _base, _snap in plan.deltas),
                *((top, q.name) for q, _base, _snap in plan.tops),
                *((unindexed, name) for name in plan.unindexed)]
        self._each_file(lambda job: job[0](job[1]), jobs)

    def _each_file(self, fn: Callable[[Any], None], items: list[Any],
                   parallel_min: int = _PARALLEL_MIN, parallel: bool | None = None) -> None:
        """``fn(item)`` for every item (a file to sync, a queue file to rename into
        place), in threads when there are many and the data volume allows it: one at a
        time, the first checkpoint after defining 5,000 queues waited for the journal
        10,000 times (issue 22). Returns once all are done; raises the first failure."""
        allowed = self.data.concurrent_syncs if parallel is None else parallel
        if len(items) < parallel_min or not allowed:
            for item in items:
                fn(item)
            return
        from concurrent.futures import ThreadPoolExecutor

        def each(chunk: list[Any]) -> None:
            for item in chunk:
                fn(item)

        n = min(_PARALLEL_FILES, len(items))  # a thread per item at most
        with ThreadPoolExecutor(max_workers=n, thread_name_prefix="store-files") as pool:
            futures = [pool.submit(each, items[i::n]) for i in range(n)]
        for future in futures:
            future.result()

    def _write_queue(self, q: LocalQueue, seq: int, plan: _CheckpointPlan) -> None:
        """Bring one queue file up to date for checkpoint ``seq`` in the page cache; the
        file goes into ``plan.written`` (made durable by the checkpoint's second step)
        and, if it is a new file (``q.new``), into ``plan.replaced`` (renamed into place
        once the checkpoint is complete)."""
        if q.file is None:
            if (not q.need_file and q.present == 0
                    and not any(m.persistent for m in q.mem.values())):
                # nothing to hold: the queue catalog this checkpoint writes (every queue
                # without a live record, in two copies) is its definition; a file is
                # made when a message must go into it. Defining 5,000 queues thus costs
                # a takeover one catalog, not 5,000 files (issue 22).
                q.header_dirty = False
                q.file_qid = q.qid
                return
            q.file_qid = 0
        fresh = q.file is None or q.file_qid != q.qid
        if fresh:
            if q.file is not None:
                q.file.close()
            if self._guard is not None:
                self._guard()
            qf = QueueFile(self.data, q.name, f"queues/{q.name}/q.new")
            qf.create(q.qid, seq, q.attrs)
            q.file, q.file_qid, q.header_dirty = qf, q.qid, False
            q.to_delete.clear()
            q.file_records = 0
            if self.data.exists(f"queues/{q.name}/q"):
                # records of the old incarnation stay in q until the rename
                pass
        qf = q.file
        assert qf is not None
        dirty = q.header_dirty
        records = q.file_records
        if records is not None:
            records -= len(q.to_delete)
        dx = q.dx
        for block, n, key in q.to_delete:
            if self._guard is not None:
                self._guard()
            qf.mark_deleted(block, key, seq)
            qf.free_later(block, n)
            if dx is not None:
                dx.removed(key, block, n)
                if q.dx2 is not None:
                    q.dx2.removed(key, block, n)
            dirty = True
        q.to_delete.clear()
        mem = q.mem
        runs: list[tuple[int, int]] = []
        if any(m.persistent for m in mem.values()):
            if self._guard is not None:
                self._guard()
            # one pass over the bodies held in memory: persistent ones go to the file and
            # leave memory together at the end (a restart after a million puts has a
            # million of them: no list of them, no deletion one by one)
            # here only their blocks are chosen and indexed; the second step encodes
            # and writes them (lock released; a get meanwhile finds them in in_flight)
            w = BodyWriter(q, qf, mem, seq, _RUN_MAX)
            q.mem = w.plan()
            if records is not None:
                records += len(w.planned)
            if dx is not None:
                chosen = q.msgids.get
                blocks_for = qf.fmt.blocks_for
                logs = [dx] if q.dx2 is None else [dx, q.dx2]
                for b, k, m, stored in w.planned:
                    msgid = m.msgid if chosen(m.msgid) == k else None
                    correlid = m.correlid if m.correlid.strip(b"\0") else None
                    for log in logs:
                        log.added(m.priority, k, b, stored, blocks_for(stored), msgid,
                                  correlid)
            plan.encoders.append((qf.f, w, runs))
            q.in_flight = mem
            plan.in_flight.append(q)
            dirty = True
        if dirty:
            # the definition, and the records live in the file once this checkpoint
            # completes, which a restart's scan must find (_file_damaged): written with
            # the records, made durable by the same sync
            if self._guard is not None:
                self._guard()
            qf.write_header(q.attrs, None if records is None else (seq, records))
            q.header_dirty = False
            q.file_records = records
        if dirty or fresh or q.idx_stale or (q.idx_fold and not self._opening):
            if dirty or fresh:
                plan.written.append((qf.f, runs))
            stale, q.idx_stale = q.idx_stale, False
            # the file changed (or was scanned): its index and a delta describe it, a new
            # index does, or none does
            deep = q.present - len(q.mem) >= self.tuning.index_min_records
            limit = self.tuning.index_delta_records
            indexed = bool(deep and q.idx_cp and not fresh and not stale and limit > 0)
            if (indexed and dx is not None
                    and (self._opening or not (q.idx_fold or dx.too_big(limit)))):
                # a few bytes per changed record (the file changed: neither fresh nor
                # only scanned, so dirty). The checkpoint ending an open (a takeover)
                # writes one however big (it holds what the log replayed): else the
                # queue has no index until the next checkpoint, and a second crash
                # before that means a scan; a big one is folded into a new index by the
                # checkpoint thread a moment later.
                top = self.tuning.index_top_min
                dx2 = q.dx2
                if (q.dx_cp and dx2 is not None and top > 0 and dx.size() >= top
                        and 4 * dx2.size() <= dx.size()):
                    # a few changes on a big delta: a second delta file of what changed
                    # since it (cumulative too), the big one left as it is
                    plan.tops.append((q, q.dx_cp, dx2.snapshot(qf.space)))
                    q.d2_cp = seq
                else:
                    plan.deltas.append((q, q.idx_cp, dx.snapshot(qf.space)))
                    q.dx_cp, q.d2_cp = seq, 0
                    q.dx2 = qindex.DeltaLog(seq, 0)
                if self._opening and dx.too_big(limit):
                    q.idx_fold = True
                    self._index_later = True
            else:
                q.idx_fold = False
                if deep and self._opening:
                    q.idx_stale = True  # written by the next checkpoint; if the file
                    # changes now, the index it had is dropped below
                    self._index_later = True
                if deep and not q.idx_stale:
                    plan.indexes.append((q, qindex.snapshot(q.index, qf.space, q.msgids,
                                                            q.correlids)))
                    q.idx_cp, q.dx_cp, q.d2_cp = seq, 0, 0
                    q.dx = qindex.DeltaLog(seq, q.present - len(q.mem))
                    q.dx2 = None
                elif q.idx_cp and (dirty or fresh):
                    q.idx_cp, q.dx_cp, q.dx, q.d2_cp, q.dx2 = 0, 0, None, 0, None
                    plan.unindexed.append(q.name)
        if fresh:
            plan.replaced.append(q)

    # ------------------------------------------------------------------ status
    def status(self) -> dict[str, Any]:
        """DISPLAY QMSTATUS fields (CURRLOG, RECLOG, MEDIALOG, LOGUTIL, ...)."""
        with self._lock:
            out: dict[str, Any] = {"QMNAME": self.qmgr, "STATUS": "RUNNING",
                                   "LOGTYPE": self.settings.log_type}
            stats = self._safe(self.log.stats) or {}
            out["CURRLOG"] = stats.get("current_extent") or stats.get("CURRLOG") or ""
            out["RECLOG"] = self._safe(self.log.oldest_extent_for_restart) or ""
            out["MEDIALOG"] = (self._safe(self.log.oldest_extent_for_media) or ""
                               if self.settings.log_type == "LINEAR" else "")
            out["LOGUTIL"] = round(self._log_usage() * 100, 1)
            out["LOGPATH"] = getattr(getattr(self.log, "volume", None), "url", "")
            out["INDOUBT"] = len(self.in_doubt())
            out["CHECKPOINT"] = self._completed_cp
            if out["RECLOG"]:
                out["AMQ7467"] = amq.text("AMQ7467", qmgr=self.qmgr, extent=out["RECLOG"])
            if out["MEDIALOG"]:
                out["AMQ7468"] = amq.text("AMQ7468", qmgr=self.qmgr, extent=out["MEDIALOG"])
            return out

    @staticmethod
    def _safe(fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception:
            return None

    def logger_dump(self) -> dict[str, Any]:
        """The log's amqldmpa fields."""
        return dict(self.log.stats())

    # ------------------------------------------------------------------ media
    def record_image(self, queue: str) -> None:
        """rcdmqimg: a media image of ``queue`` (linear logging; see :mod:`media`)."""
        from miqm.store import media

        media.require_linear(self.settings.log_type, self.qmgr)
        with self._lock:
            self._check_open()
            q = self._queue(queue)
            if q.file is None:
                q.need_file = True  # only in the catalog: this checkpoint makes its file
            self._checkpoint_locked()
            info = self.last_checkpoint
            assert q.file is not None and q.file.f is not None
            media.write_image(self.data, queue, q.file.f, info, q.qid)
            lsn = self._append(R.encode_json(R.MEDIA, {"name": queue,
                                                       "lsn": info.restart_lsn}))
            self._media[queue] = int(info.restart_lsn)  # type: ignore[arg-type]
            q.media_lsn = self._media[queue]
            self._checkpoint_locked()
        self._force(lsn)
        # the error log keeps what media operations were done, and when
        self._errlog("AMQ7086", amq.text("AMQ7086", name=queue))

    def recreate_object(self, queue: str) -> None:
        """rcrmqobj: rebuild ``queue``'s file from its image plus the log."""
        from miqm.store import media

        media.require_linear(self.settings.log_type, self.qmgr)
        with self._lock:
            self._await_checkpoint_idle()  # the queue file is closed and replaced below
            self._check_open()
            live = self.state.queues.get(queue)
            if live is None:
                raise ObjectError(f"queue '{queue}' is not defined", amq="AMQ8147")
            q = media.rebuild_queue(self.data, self.log, live, self._aborted)
            if live.file is not None:
                live.file.close()
            self.state.queues[queue] = q
            self._damaged.pop(queue, None)
            self._checkpoint_locked()
        self._errlog("AMQ7107", amq.text("AMQ7107", name=queue))

