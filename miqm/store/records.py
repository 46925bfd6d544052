"""Log record payloads of the queue store: what each persistent change looks like in
the recovery log (the framing around them is :mod:`miqm.store.framing`'s job).

Every payload starts with ``type:u8`` and ``txid:u64`` (0 = outside syncpoint). Records are
small fixed structs with length-prefixed names so replay can decode with one
``struct.unpack_from`` per record (restart speed is measured in records per second).

Types and what redo does with them (see docs/store-format.md):

* ``DEFINE(name, qid, attrs)`` / ``ALTER(name, attrs)`` / ``DELETE(name)``: object changes.
* ``PUT(txid, queue, key, priority, put_time, msgid, correlid, body)``: a persistent put.
* ``GET(txid, queue, key)``: a destructive get of a persistent message.
* ``COMMIT(txid)`` / ``BACKOUT(txid)``: end of a unit of work (BACKOUT undoes what is left).
* ``PREPARE(txid, xid)``: phase one of two-phase commit; the unit stays in doubt.
* ``CLR(txid, kind, queue, key)``: a compensation record written by restart undo: the
  named operation is undone and never undone again if restart itself is interrupted.
* ``CARRY(txid, xid, ops)``: a prepared unit's operation list carried forward so it no
  longer pins old log extents (AMQ7469 "rolled forward").
* ``CHECKPOINT(json)``, ``MEDIA(queue, lsn)``, ``QMGR(attrs)``.
* ``AUTHREC(objtype, profile, principal, auths)``: an authority record set to ``auths``
  (null deletes it). The store keeps these for the authorization layer
  (:mod:`miqm.authz`) and knows nothing of what they mean.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any

from miqm.errors import StoreError

DEFINE, ALTER, DELETE, PUT, GET, COMMIT, BACKOUT, PREPARE, CLR, CHECKPOINT, CARRY, MEDIA, QMGR = (
    range(1, 14)
)
#: type 20, apart from the range above, so object kinds added later keep 14-19
AUTHREC = 20
TYPE_NAMES = {
    AUTHREC: "AUTHREC",
    DEFINE: "DEFINE", ALTER: "ALTER", DELETE: "DELETE", PUT: "PUT", GET: "GET",
    COMMIT: "COMMIT", BACKOUT: "BACKOUT", PREPARE: "PREPARE", CLR: "CLR",
    CHECKPOINT: "CHECKPOINT", CARRY: "CARRY", MEDIA: "MEDIA", QMGR: "QMGR",
}

_HEAD = struct.Struct("<BQ")  # type, txid
_U16 = struct.Struct("<H")
# key, priority, put_time, msgid, correlid, body length
_PUT = struct.Struct("<QBd24s24sI")
_KEY = struct.Struct("<Q")
_KIND_KEY = struct.Struct("<BQ")
_QID = struct.Struct("<I")

MSGID_LEN = 24


@dataclass(slots=True)
class Record:
    """One decoded store record. Unused fields keep their defaults."""

    type: int
    txid: int = 0
    queue: str = ""
    key: int = 0
    priority: int = 0
    put_time: float = 0.0
    msgid: bytes = b""
    correlid: bytes = b""
    body: bytes = b""
    kind: str = ""
    qid: int = 0
    xid: str = ""
    owner: str = ""
    attrs: dict[str, Any] = field(default_factory=dict)
    ops: list[tuple[str, str, int]] = field(default_factory=list)
    lsn: int = 0


def _name(s: str) -> bytes:
    b = s.encode()
    return _U16.pack(len(b)) + b


def _read_name(buf: bytes | memoryview, pos: int) -> tuple[str, int]:
    (n,) = _U16.unpack_from(buf, pos)
    pos += 2
    return bytes(buf[pos:pos + n]).decode(), pos + n


_PUT_LAYOUTS: dict[int, struct.Struct] = {}
_GET_LAYOUTS: dict[int, struct.Struct] = {}


def _layout(made: dict[int, struct.Struct], n: int, fields: str) -> struct.Struct:
    """A record's head for a queue name of ``n`` bytes as one struct: type, txid, name
    length, name, then ``fields``; made once per length into ``made``, whose ``get(n)``
    is what the hot paths try first."""
    layout = made.get(n)
    if layout is None:
        layout = made[n] = struct.Struct(f"<BQH{n}s{fields}")
    return layout


def put_layout(n: int) -> struct.Struct:
    """The whole PUT header for a queue name of ``n`` bytes as one struct: type, txid,
    name length, name, then the PUT fields (one pack to write, one unpack to redo)."""
    return _layout(_PUT_LAYOUTS, n, _PUT.format.lstrip("<"))


def encode_put(txid: int, queue: str, key: int, priority: int, put_time: float,
               msgid: bytes, correlid: bytes, body: bytes) -> bytes:
    """A PUT record (the body is the message's only copy until the next checkpoint)."""
    name = queue.encode()
    n = len(name)
    layout = _PUT_LAYOUTS.get(n) or put_layout(n)
    return layout.pack(PUT, txid, n, name, key, priority, put_time, msgid, correlid,
                       len(body)) + body


def encode_get(txid: int, queue: str, key: int) -> bytes:
    """A destructive GET of message ``key`` (type, txid, name length, name, key: one
    pack, as a PUT's header; a consumer writes one per message)."""
    name = queue.encode()
    n = len(name)
    layout = _GET_LAYOUTS.get(n) or _layout(_GET_LAYOUTS, n, _KEY.format.lstrip("<"))
    return layout.pack(GET, txid, n, name, key)


def encode_end(kind: int, txid: int) -> bytes:
    """COMMIT or BACKOUT of ``txid``."""
    return _HEAD.pack(kind, txid)


def encode_prepare(txid: int, xid: str, owner: str | None = None) -> bytes:
    """PREPARE: the unit's outcome now belongs to its coordinator; ``owner`` (who
    prepared it) follows the xid when given (a reader that knows no owner stops at the
    xid)."""
    head = _HEAD.pack(PREPARE, txid) + _name(xid)
    return head + _name(owner) if owner else head


def encode_clr(txid: int, kind: str, queue: str, key: int) -> bytes:
    """A compensation record: operation (kind P|G, queue, key) of ``txid`` is undone."""
    return _HEAD.pack(CLR, txid) + _name(queue) + _KIND_KEY.pack(ord(kind), key)


def encode_json(rtype: int, obj: dict[str, Any], txid: int = 0) -> bytes:
    """DEFINE/ALTER/DELETE/CHECKPOINT/CARRY/MEDIA/QMGR: rare records, JSON bodies."""
    return _HEAD.pack(rtype, txid) + json.dumps(obj, separators=(",", ":")).encode()


def decode(payload: bytes, lsn: int = 0) -> Record:
    """Decode one payload; raises StoreError on an unknown type or short payload."""
    try:
        rtype, txid = _HEAD.unpack_from(payload, 0)
        if rtype == PUT:
            queue, pos = _read_name(payload, 9)
            key, prio, t, msgid, correlid, n = _PUT.unpack_from(payload, pos)
            pos += _PUT.size
            body = payload[pos:pos + n]
            if len(body) != n:
                raise ValueError("short body")
            return Record(PUT, txid, queue, key, prio, t, msgid, correlid, body, lsn=lsn)
        if rtype == GET:
            queue, pos = _read_name(payload, 9)
            (key,) = _KEY.unpack_from(payload, pos)
            return Record(GET, txid, queue, key, lsn=lsn)
        if rtype in (COMMIT, BACKOUT):
            return Record(rtype, txid, lsn=lsn)
        if rtype == PREPARE:
            xid, pos = _read_name(payload, 9)
            owner = _read_name(payload, pos)[0] if pos < len(payload) else ""
            return Record(PREPARE, txid, xid=xid, owner=owner, lsn=lsn)
        if rtype == CLR:
            queue, pos = _read_name(payload, 9)
            k, key = _KIND_KEY.unpack_from(payload, pos)
            return Record(CLR, txid, queue, key, kind=chr(k), lsn=lsn)
        if rtype == AUTHREC:
            return Record(AUTHREC, txid, attrs=json.loads(payload[9:]), lsn=lsn)
        if rtype in (DEFINE, ALTER, DELETE, CHECKPOINT, CARRY, MEDIA, QMGR):
            obj = json.loads(payload[9:])
            rec = Record(rtype, txid, queue=obj.get("name", ""), qid=obj.get("qid", 0),
                         xid=obj.get("xid", ""), attrs=obj.get("attrs", obj), lsn=lsn)
            if rtype == CARRY:
                rec.ops = [(k, q, key) for k, q, key in obj["ops"]]
                rec.owner = str(obj.get("owner") or "")
            if rtype == MEDIA:
                rec.key = int(obj["lsn"])
            return rec
    except (struct.error, ValueError, KeyError, UnicodeDecodeError) as exc:
        raise StoreError(f"undecodable store record at LSN {lsn}: {exc}") from exc
    raise StoreError(f"unknown store record type {rtype} at LSN {lsn}")
