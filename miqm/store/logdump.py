"""The recovery log's records for a person to read (MQ's ``dmpmqlog``): what a queue
manager that will not start, or a log an operator suspects, holds, read without writing.

``open_log`` opens the log directory as restart would, but this module never appends,
forces or moves the restart point, so nothing in it is written (a log opened and read
this way writes nothing on close either: :meth:`RecoveryLog.close` writes only a log
that has been made ready for appends). Use it on a queue manager that is not running:
an active instance writes pages while they are read, and a page caught half-written
reads as damage.

``entries`` yields one :class:`LogEntry` a record, from the restart point (or an older
LSN of a linear log); a damaged page ends it with the reader's own error
(:class:`~miqm.errors.StoreError`, AMQ6118 or AMQ7017, one line) after every record
before it has been yielded, which is what the operator needs to see.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from lockfs.volume import Volume
from miqm.errors import StoreError
from miqm.store import records as R
from miqm.store.log import RecoveryLog
from miqm.store.settings import LogSettings


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One record: where it is, who wrote it, what it is."""

    lsn: int
    generation: int
    type: str
    txid: int
    length: int
    detail: str

    def line(self) -> str:
        """The record on one line, as ``dmpmqlog`` prints it."""
        return (f"LSN {self.lsn:>14}  gen {self.generation:<4} {self.type:<10} "
                f"txid {self.txid:<8} len {self.length:<7} {self.detail}").rstrip()

    def as_dict(self) -> dict[str, Any]:
        """The record as a JSON object (``--json``)."""
        return {"lsn": self.lsn, "generation": self.generation, "type": self.type,
                "txid": self.txid, "length": self.length, "detail": self.detail}


def open_log(volume: Volume, settings: LogSettings) -> RecoveryLog:
    """The log in ``volume`` opened for reading (its own generation: nothing is written
    unless something appends, which nothing here does). StoreError, one line, when the
    control file or an active log file is missing or damaged."""
    return RecoveryLog.open(volume, settings,
                            generation=RecoveryLog.recorded_generation(volume))


def header(log: RecoveryLog) -> dict[str, Any]:
    """The control file's fields (:meth:`RecoveryLog.control_summary`)."""
    return log.control_summary()


def trailer(log: RecoveryLog) -> dict[str, Any]:
    """After :func:`entries` has run to the end: where the log ends, and what restart
    would report as unfinished there (AMQ1134's text), if anything."""
    return {"EndLSN": log.end_lsn(), "TornTail": log.torn_tail}


def entries(log: RecoveryLog, start_lsn: int | None = None) -> Iterator[LogEntry]:
    """The records from ``start_lsn`` (default: the restart point) to the log's end."""
    start = log.first_lsn() if start_lsn is None else start_lsn
    for batch in log.record_batches(start):
        for lsn, gen, payload, _next in batch:
            yield entry(lsn, gen, bytes(payload))


def entry(lsn: int, generation: int, payload: bytes) -> LogEntry:
    """One record's entry; a payload that does not decode is shown as such, not raised
    (the dump is how such a record is found)."""
    rtype = payload[0] if payload else 0
    name = R.TYPE_NAMES.get(rtype, f"TYPE{rtype}")
    try:
        rec = R.decode(payload, lsn)
    except (StoreError, ValueError, KeyError, TypeError):
        return LogEntry(lsn, generation, name, _txid(payload), len(payload),
                        "undecodable record")
    return LogEntry(lsn, generation, name, rec.txid, len(payload), _detail(rec))


def _txid(payload: bytes) -> int:
    return int.from_bytes(payload[1:9], "little") if len(payload) >= 9 else 0


def _detail(rec: R.Record) -> str:
    t = rec.type
    if t == R.PUT:
        return (f"queue {rec.queue} key {rec.key} priority {rec.priority} msgid "
                f"{rec.msgid.hex()} body {len(rec.body)} bytes")
    if t == R.GET:
        return f"queue {rec.queue} key {rec.key}"
    if t == R.CLR:
        what = "put" if rec.kind == "P" else "get"
        return f"undoes the {what} of key {rec.key} on queue {rec.queue}"
    if t == R.PREPARE:
        return f"xid {rec.xid}" + (f" owner {rec.owner}" if rec.owner else "")
    if t == R.CARRY:
        return f"xid {rec.xid} {len(rec.ops)} operations carried forward"
    if t == R.CHECKPOINT:
        uows = rec.attrs.get("uows") or []
        return f"checkpoint {rec.attrs.get('seq')} units in flight {len(uows)}"
    if t == R.DEFINE:
        return f"queue {rec.queue} qid {rec.qid}"
    if t in (R.ALTER, R.DELETE):
        return f"queue {rec.queue}" + (f" {_compact(rec.attrs)}" if t == R.ALTER else "")
    if t == R.MEDIA:
        return f"media image of queue {rec.queue} from LSN {rec.attrs.get('lsn')}"
    if t in (R.QMGR, R.AUTHREC):
        return _compact(rec.attrs)
    return ""


def _compact(obj: Any, limit: int = 160) -> str:
    text = json.dumps(obj, separators=(",", ":"), sort_keys=True, default=str)
    return text if len(text) <= limit else text[:limit - 3] + "..."
