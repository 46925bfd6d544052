"""The store's state machine and restart recovery over the recovery log.

:class:`StoreState` holds what the queue manager knows (queues, their messages, the
in-flight units of work) and the *apply* functions that change it. The same functions
run at runtime (after a record is appended) and during replay, so redo cannot drift from
what was done the first time.

Restart (:func:`restart`), as MQ's three phases:

1. **Replay** from the restart point ``min(checkpoint, oldest in-flight unit's first
   record)``. Records before the checkpoint only rebuild the in-flight units' operation
   lists (their effects are already in the queue files); records after it are redone.
   Redo is idempotent: a put whose key is present is skipped, a get of a missing key too.
2. **Recovery**: the in-flight table is complete (prepared units keep their xid).
3. **Undo** of every unit that is neither committed nor prepared, newest operation first,
   each undo written as a compensation record (CLR) then applied; a BACKOUT record ends
   the unit. A restart interrupted here sees the CLRs on the next replay and undoes only
   what is left.
"""

from __future__ import annotations

import gc
import struct
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from miqm import amq
from miqm.errors import StoreError
from miqm.store import records as R
from miqm.store.queues import LocalQueue, MemMessage, QueueTable
from miqm.store.uow import ACTIVE, PREPARED, UnitOfWork, UowTable

MSGID_PREFIX = b"MIQM"


def generated_key(msgid: bytes) -> int | None:
    """The key embedded in a msgid this store generated (``MIQM`` + nonce + key)."""
    if len(msgid) == 24 and msgid[:4] == MSGID_PREFIX:
        return int.from_bytes(msgid[12:20], "big")
    return None


class StoreState:
    """Queues, messages and units of work, with the operations that change them."""

    def __init__(self, next_key: int = 1, next_txid: int = 1) -> None:
        self.queues = QueueTable()
        self.uows = UowTable(next_txid)
        self.next_key = next_key
        self.qmgr: dict[str, Any] = {}
        #: authority records, (objtype, profile, principal) -> authorities (AUTHREC)
        self.authrecs: dict[tuple[str, str, str], tuple[str, ...]] = {}
        self.only: str | None = None  # media recovery: apply records of one queue only
        self.last_uow: UnitOfWork | None = None  # replay's cache of the unit last seen
        # the highest checkpoint number a replay saw in a CHECKPOINT record: a checkpoint
        # forces its record before it writes any queue file, so every stamp in the files
        # is at most this or the completed checkpoint's
        self.max_cp_seq = 0

    # -- helpers -------------------------------------------------------------------
    def set_authrec(self, rec: dict[str, Any]) -> None:
        """Set one authority record from its JSON (``auths`` null deletes it; an empty
        list is a record granting nothing, which hides less specific profiles)."""
        key = (str(rec["objtype"]), str(rec["profile"]), str(rec["principal"]))
        auths = rec.get("auths")
        if auths is None:
            self.authrecs.pop(key, None)
        else:
            self.authrecs[key] = tuple(str(a) for a in auths)

    def authrec_list(self) -> list[dict[str, Any]]:
        """The authority records as JSON objects (for the checkpoint)."""
        return [{"objtype": t, "profile": p, "principal": u, "auths": list(a)}
                for (t, p, u), a in sorted(self.authrecs.items())]

    def add_message(self, q: LocalQueue, key: int, m: MemMessage) -> None:
        """Put a message with its body in memory onto ``q``."""
        q.mem[key] = m
        q.add(key, m.priority, -1, len(m.body), m.msgid, m.correlid, generated_key)
        if key >= self.next_key:
            self.next_key = key + 1

    def _q(self, name: str) -> LocalQueue | None:
        if self.only is not None and name != self.only:
            return None
        return self.queues.get(name)

    def undo_op(self, u: UnitOfWork, idx: int) -> None:
        """Undo operation ``idx`` of ``u``: remove its put, or release its get."""
        kind, qname, key, _lg = u.ops[idx]
        u.undone.add(idx)
        q = self._q(qname)
        if q is None:
            return
        if kind == "P":
            if q.uncommitted.get(key) == u.txid:
                q.remove(key)
        elif q.locked.get(key) == u.txid:
            del q.locked[key]

    def apply_commit(self, u: UnitOfWork) -> None:
        """Make the unit's puts visible and its gets final."""
        undone = u.undone
        txid = u.txid
        last_name: str | None = None
        q: LocalQueue | None = None
        for i, (kind, qname, key, _lg) in enumerate(u.ops):
            if undone and i in undone:
                continue
            if qname != last_name:  # units mostly touch one queue: look it up once
                q, last_name = self._q(qname), qname
            if q is None:
                continue
            if kind == "P":
                if q.uncommitted.get(key) == txid:
                    del q.uncommitted[key]
            elif q.locked.get(key) == txid:
                q.remove(key)
        self.uows.end(u)
        if self.last_uow is u:
            self.last_uow = None

    def redo_commit(self, txid: int) -> None:
        """Replay the COMMIT of ``txid`` (nothing if the unit is not in the table)."""
        u = self.uows.units.get(txid)
        if u is not None:
            self.apply_commit(u)

    def apply_backout(self, u: UnitOfWork, state: str = "ended") -> None:
        """Undo every operation still in effect, newest first."""
        for i in range(len(u.ops) - 1, -1, -1):
            if i not in u.undone:
                self.undo_op(u, i)
        self.uows.end(u, state)
        if self.last_uow is u:
            self.last_uow = None

    # -- replay --------------------------------------------------------------------
    def note_first(self, u: UnitOfWork, lsn: int) -> None:
        """Remember the unit's first record (what it pins in the log)."""
        if u.first_lsn is None:
            u.first_lsn = lsn

    def mark(self, rec: R.Record) -> None:
        """A record from before the checkpoint of a unit in flight at the checkpoint:
        rebuild its operation list; the messages themselves are already in the files."""
        u = self.uows.get_or_make(rec.txid)
        self.note_first(u, rec.lsn)
        t = rec.type
        if t == R.PUT:
            u.ops.append(("P", rec.queue, rec.key, True))
            q = self._q(rec.queue)
            if q is not None and q.index.find(rec.key) is not None:
                q.uncommitted[rec.key] = u.txid
        elif t == R.GET:
            u.ops.append(("G", rec.queue, rec.key, True))
            q = self._q(rec.queue)
            if q is not None and q.index.find(rec.key) is not None:
                q.locked[rec.key] = u.txid
        elif t == R.CLR:
            self._clr(u, rec)
        elif t == R.PREPARE:
            u.state, u.xid = PREPARED, rec.xid
            u.owner = rec.owner or None
            self.uows.by_xid[rec.xid] = u
        elif t == R.CARRY:
            self._carry(u, rec)

    def _clr(self, u: UnitOfWork, rec: R.Record) -> None:
        for i in range(len(u.ops) - 1, -1, -1):
            k, qn, key, _lg = u.ops[i]
            if i not in u.undone and k == rec.kind and qn == rec.queue and key == rec.key:
                self.undo_op(u, i)
                return

    def _carry(self, u: UnitOfWork, rec: R.Record) -> None:
        u.ops = [(k, qn, key, True) for k, qn, key in rec.ops]
        u.undone = set()
        u.state, u.xid = PREPARED, rec.xid
        u.owner = rec.owner or None
        u.first_lsn = rec.lsn
        self.uows.by_xid[rec.xid] = u
        for k, qn, key in rec.ops:
            q = self._q(qn)
            if q is None or q.index.find(key) is None:
                continue
            (q.uncommitted if k == "P" else q.locked)[key] = u.txid

    def redo(self, rec: R.Record) -> None:
        """Apply one record from after the checkpoint (idempotently)."""
        t = rec.type
        if t == R.PUT:
            q = self._q(rec.queue)
            if rec.txid:
                u = self.uows.get_or_make(rec.txid)
                self.note_first(u, rec.lsn)
                u.ops.append(("P", rec.queue, rec.key, True))
            if q is None:
                return
            if q.index.find(rec.key, rec.priority) is None:
                self.add_message(q, rec.key, MemMessage(rec.priority, True, rec.put_time,
                                                        rec.msgid, rec.correlid, rec.body))
                if rec.txid:
                    q.uncommitted[rec.key] = rec.txid
            elif rec.key >= self.next_key:
                self.next_key = rec.key + 1
        elif t == R.GET:
            q = self._q(rec.queue)
            if not rec.txid:
                if q is not None:
                    q.remove(rec.key)
                return
            u = self.uows.get_or_make(rec.txid)
            self.note_first(u, rec.lsn)
            u.ops.append(("G", rec.queue, rec.key, True))
            if q is not None and q.index.find(rec.key) is not None:
                q.locked[rec.key] = rec.txid
        elif t == R.COMMIT:
            self.redo_commit(rec.txid)
        elif t == R.BACKOUT:
            u = self.uows.units.get(rec.txid)
            if u is not None:
                self.apply_backout(u)
        elif t in (R.PREPARE, R.CLR, R.CARRY):
            self.mark(rec)
        elif t == R.DEFINE:
            if self.only is None or rec.queue == self.only:
                old = self.queues.get(rec.queue)
                if old is None or old.qid != rec.qid:
                    # dormant, as the catalog's queues are: replaying thousands of
                    # definitions makes objects only for the queues used after them
                    self.queues.define_dormant(rec.queue, rec.qid, rec.attrs)
        elif t == R.ALTER:
            q = self._q(rec.queue)
            if q is not None:
                q.attrs = {**q.attrs, **rec.attrs}  # replaced, never changed in place
                q.header_dirty = True
        elif t == R.DELETE:
            if self.only is None:
                self.queues.pop(rec.queue, None)
        elif t == R.QMGR:
            self.qmgr.update(rec.attrs)
        elif t == R.AUTHREC:
            if self.only is None:  # media recovery of one queue leaves them alone
                self.set_authrec(rec.attrs)
        elif t == R.MEDIA:
            q = self.queues.get(rec.queue)
            if q is not None:
                q.media_lsn = rec.key


_ZERO24 = bytes(24)



def _put_redo(state: StoreState, defer: bool = False
              ) -> tuple[Callable[[bytes, int], bool], Callable[[], None]]:
    """A fast redo of PUT records for one replay, and a function that forgets its cached
    queue lookups (called whenever another kind of record may have changed the queues).

    The redo skips building a Record (PUTs are most of a log) and returns False when the
    general path must handle the record. With ``defer``, a committed put (outside
    syncpoint, or a unit of that one put) is left to the queue table
    (:meth:`QueueTable.defer`), which applies it when its queue is first looked up or
    before a checkpoint: a takeover then serves without first redoing a burst of puts to
    queues nobody has asked for yet. Only the key counter moves at once."""
    queues = state.queues
    only = state.only
    found: dict[bytes, tuple[str, LocalQueue] | None] = {}
    layouts = R._PUT_LAYOUTS
    new_message = MemMessage
    prefix = MSGID_PREFIX
    deferred = queues.defer if defer and only is None else None

    def forget() -> None:
        found.clear()

    uows = state.uows

    def redo(payload: bytes, lsn: int, committed: bool = False) -> bool:
        """``committed``: the unit's COMMIT follows this put at once and the unit has
        nothing else (the caller checked): the put is redone as committed, without a
        unit of work to make and end (most of a busy log is such units)."""
        n = payload[9] | (payload[10] << 8)
        layout = layouts.get(n) or R.put_layout(n)
        _t, txid, _n, raw_name, key, prio, t, msgid, correlid, blen = \
            layout.unpack_from(payload)
        hit = found.get(raw_name)
        if hit is None:
            name = raw_name.decode()
            q0 = queues.get(name)
            if q0 is None or only is not None:
                return False
            hit = found[raw_name] = (name, q0)
        name, q = hit
        if committed:
            uows.seen(txid)
            txid = 0
        if deferred is not None:
            if not txid:
                if key >= state.next_key:
                    state.next_key = key + 1
                # kept unpacked, as apply takes it: not decoded a second time
                deferred(q, (payload, layout.size, 0, key, prio, t, msgid, correlid, blen),
                         apply_deferred)
                return True
            queues.get(name)  # its deferred puts first: they came before this one
        if txid:
            u = state.last_uow
            if u is None or u.txid != txid:
                u = state.last_uow = state.uows.get_or_make(txid)
            if u.first_lsn is None:
                u.first_lsn = lsn
            u.ops.append(("P", name, key, True))
        apply(q, payload, layout.size, txid, key, prio, t, msgid, correlid, blen)
        return True

    def apply_deferred(q: LocalQueue, puts: list[tuple[Any, ...]]) -> None:
        """Apply the committed puts :meth:`QueueTable.defer` kept for ``q`` (each the
        arguments of ``apply`` after the queue)."""
        for put in puts:
            apply(q, *put)

    def apply(q: LocalQueue, payload: bytes, start: int, txid: int, key: int, prio: int,
              t: float, msgid: bytes, correlid: bytes, blen: int) -> None:
        """The put's message on ``q`` (nothing if ``q`` has it already)."""
        ix = q.index
        ks = ix.keys[prio]
        if ks and ks[-1] >= key:
            if ix.find(key, prio) is not None:
                return
            ix.add(key, prio, -1, blen)
        else:
            ks.append(key)
            ix.blocks[prio].append(-1)
            ix.lens[prio].append(blen)
        q.mem[key] = new_message(prio, True, t, msgid, correlid, payload[start:start + blen])
        q.present += 1
        if msgid[:4] != prefix or int.from_bytes(msgid[12:20], "big") != key:
            q.msgids[msgid] = key
        if correlid != _ZERO24:
            q.correlids.setdefault(correlid, []).append(key)
        if txid:
            q.uncommitted[key] = txid
        if key >= state.next_key:
            state.next_key = key + 1

    return redo, forget


def record_batches(log: Any, start_lsn: int) -> Iterable[list[Any]]:
    """``log``'s records from ``start_lsn`` in lists: as the recovery log reads them (a
    page's run of whole records at a time), or one at a time from a log without that."""
    batches = getattr(log, "record_batches", None)
    if batches is not None:
        return batches(start_lsn)  # type: ignore[no-any-return]
    return ([r] for r in log.records(start_lsn))


def _put_carried(batches: Iterable[list[Any]], put: int) -> Iterator[list[Any]]:
    """``batches`` with a PUT that ends one moved to the start of the next, so that a unit
    of one put meets its COMMIT in the same list (the pure-Python log reader yields one
    record at a time; the C one a page's run, which a unit may straddle)."""
    carry = None
    for batch in batches:
        if carry is not None:
            batch = [carry, *batch]
            carry = None
        if batch and batch[-1][2][0] == put:
            carry = batch[-1]
            batch = batch[:-1]
        if batch:
            yield batch
    if carry is not None:
        yield [carry]


def replay(state: StoreState, batches: Iterable[list[Any]], cp_lsn: int | None,
           cp_txids: set[int], defer_puts: bool = False) -> int:
    """Phase 1 over ``batches`` (lists of LogRecord, see :func:`record_batches`);
    returns how many records were read. ``defer_puts``: committed puts are left to the
    queue table to apply when their queue is first used (see :func:`_put_redo`)."""
    n = 0
    decode = R.decode
    put, commit = R.PUT, R.COMMIT
    redo_put, forget = _put_redo(state, defer_puts)
    redo_commit = state.redo_commit
    first_redo = -1 if cp_lsn is None else cp_lsn
    # Replay allocates millions of objects and frees none: the cyclic collector would
    # rescan them all again and again (a quarter of the time) while finding nothing.
    collecting = gc.isenabled()
    gc.disable()
    units = state.uows.units
    try:
        for batch in _put_carried(batches, put):
            n += len(batch)
            i, count = 0, len(batch)
            while i < count:
                lsn, _gen, payload, _next = batch[i]
                i += 1
                kind = payload[0]
                if kind == put and lsn >= first_redo:
                    # a unit of one put, its COMMIT next (MQPUT under syncpoint, MQCMIT)
                    fused = False
                    if i < count:
                        after = batch[i][2]
                        if after[0] == commit and len(after) == 9 and \
                                after[1:9] == payload[1:9]:
                            txid = int.from_bytes(after[1:9], "little")
                            fused = txid != 0 and txid not in units
                    try:
                        if redo_put(payload, lsn, fused):
                            i += fused  # its COMMIT is applied with it
                            continue
                    except (IndexError, ValueError, UnicodeDecodeError, struct.error):
                        pass  # the general decoder reports it properly
                elif kind == commit and lsn >= first_redo and len(payload) == 9:
                    # without building a Record; a commit changes no queue object, so
                    # the put lookups stay cached
                    redo_commit(int.from_bytes(payload[1:9], "little"))
                    continue
                rec = decode(payload, lsn)
                if rec.type != put:
                    forget()  # a DEFINE, DELETE, ... may have replaced a queue object
                    if rec.type == R.CHECKPOINT:
                        seq = int(rec.attrs.get("seq") or 0)
                        if seq > state.max_cp_seq:
                            state.max_cp_seq = seq
                if cp_lsn is not None and lsn < cp_lsn:
                    if rec.txid and rec.txid in cp_txids and rec.type != R.CHECKPOINT:
                        state.mark(rec)
                    continue
                state.redo(rec)
    finally:
        if collecting:
            gc.enable()
    return n


def undo_inflight(state: StoreState, append: Callable[[bytes], int],
                  force: Callable[[int], None]) -> tuple[int, int]:
    """Phase 3: roll back in-flight units that are not prepared, writing CLRs.

    Returns (units rolled back, units left in doubt)."""
    rolled = 0
    units = list(state.uows.units.values())
    last = None
    for u in units:
        if u.state == PREPARED:
            continue
        for i in range(len(u.ops) - 1, -1, -1):
            if i in u.undone:
                continue
            kind, qname, key, logged = u.ops[i]
            if logged:
                last = append(R.encode_clr(u.txid, kind, qname, key))
            state.undo_op(u, i)
        last = append(R.encode_end(R.BACKOUT, u.txid))
        state.uows.end(u)
        rolled += 1
    if last is not None:
        force(last)
    in_doubt = sum(1 for u in state.uows.units.values() if u.state == PREPARED)
    return rolled, in_doubt


def restart(state: StoreState, log: Any, start_lsn: int, cp_lsn: int | None,
            cp_uows: list[dict[str, Any]], qmgr: str,
            errlog: Callable[[str, str], None], defer_puts: bool = False,
            cp_seq: int | None = None) -> dict[str, int]:
    """Run restart recovery over ``log`` from ``start_lsn``; returns counters.
    ``defer_puts``: see :func:`replay` (``deferred_puts`` counts those left).
    ``cp_seq``: the number of the checkpoint whose record is at ``cp_lsn``; the record
    found there must be that checkpoint's."""
    for d in cp_uows:
        u = state.uows.get_or_make(int(d["txid"]))
        u.state = str(d.get("state") or ACTIVE)
        u.xid = d.get("xid")
        u.owner = d.get("owner") or None
        u.first_lsn = d.get("first_lsn")
        if u.xid:
            state.uows.by_xid[u.xid] = u
        # the ops are rebuilt from the log; keep first_lsn as the checkpoint said
        u.first_lsn = None
    _check_same_time(log, start_lsn, cp_lsn)
    batches = record_batches(log, start_lsn)
    if cp_lsn is not None and cp_seq is not None:
        batches = _meeting_checkpoint(batches, cp_lsn, cp_seq)
    try:
        n = replay(state, batches, cp_lsn, {int(d["txid"]) for d in cp_uows}, defer_puts)
    except StoreError as exc:
        # reading from a restart point past an older log's end meets the middle of a
        # page, or an extent it never had: say what that means, if the log read from its
        # own restart point ends before the checkpoint record (only on this failure: no
        # second read otherwise)
        if cp_lsn is not None and _ends_before(log, cp_lsn):
            raise _log_older(log, cp_lsn) from exc
        raise
    if cp_lsn is not None and _ends_before(log, cp_lsn):
        raise _log_older(log, cp_lsn)
    torn = getattr(log, "torn_tail", None)
    if torn:
        errlog("AMQ1134", amq.text("AMQ1134", qmgr=qmgr, detail=torn))
    errlog("AMQ7229", amq.text("AMQ7229", count=n, qmgr=qmgr))
    errlog("AMQ7230", amq.text("AMQ7230", qmgr=qmgr))
    total = len(state.uows.units)
    errlog("AMQ7231", amq.text("AMQ7231", count=sum(len(u.ops) for u in
                                                     state.uows.units.values()), qmgr=qmgr))
    # the undo's records end units and so make room: they may use the pages a circular
    # log keeps back from ordinary records, as before that reserve existed (a log full
    # at the crash must still take them, or the queue manager could not start)
    rolled, in_doubt = undo_inflight(state, getattr(log, "append_reserved", log.append),
                                     log.force)
    errlog("AMQ7232", amq.text("AMQ7232", qmgr=qmgr))
    if total:
        errlog("AMQ7233", amq.text("AMQ7233", count=rolled, total=total, qmgr=qmgr))
    deferred = sum(state.queues.deferred_counts().values())
    return {"records": n, "rolled_back": rolled, "in_doubt": in_doubt,
            "deferred_puts": deferred}


_SAME_BACKUP = ("restore the data and log directories together from the same backup "
                "(docs/runbook.md, Backup and restore); the queue manager cannot start")


def _check_same_time(log: Any, start_lsn: int, cp_lsn: int | None) -> None:
    """The checkpoint file (``start_lsn``) must not be older than the log's own restart
    point: a checkpoint moves the log's restart point only after it has replaced
    amqalchk.fil, so an older one is a data directory (or that file) restored or left
    from another time. Replaying from it would reload queue files newer than it, report
    them damaged and, on a circular log, find its extents reused."""
    first = getattr(log, "first_lsn", None)
    if cp_lsn is None or not callable(first):
        return
    log_start = int(first())
    if start_lsn < log_start:
        raise StoreError(
            f"the checkpoint file amqalchk.fil is older than the recovery log: it restarts "
            f"at LSN {start_lsn}, and the log released everything before LSN {log_start} "
            f"at a later checkpoint; the data directory (or amqalchk.fil) comes from "
            f"another time than the log directory: {_SAME_BACKUP}", amq="AMQ6118")


def _ends_before(log: Any, cp_lsn: int) -> bool:
    """The log, read to its end from its own restart point, ends at or before the
    checkpoint record ``cp_lsn`` (which a checkpoint forces before it writes
    amqalchk.fil). False when that read fails too: the damage is the report."""
    end = getattr(log, "end_lsn", None)
    if not callable(end):
        return False
    try:
        return int(end()) <= cp_lsn
    except StoreError:
        return False


def _log_older(log: Any, cp_lsn: int) -> StoreError:
    """The log ends before the checkpoint the data directory records."""
    return StoreError(
        f"the recovery log ends at LSN {int(log.end_lsn())}, before the checkpoint record "
        f"at LSN {cp_lsn} that amqalchk.fil names: the log directory is older than the "
        f"data directory (restored or copied without it) or has lost the records at "
        f"its end; {_SAME_BACKUP}", amq="AMQ6118")


def _meeting_checkpoint(batches: Iterable[list[Any]], cp_lsn: int, cp_seq: int
                        ) -> Iterator[list[Any]]:
    """``batches``, checking once that the record at ``cp_lsn`` is the CHECKPOINT record
    of checkpoint ``cp_seq``: nothing in a log file ties it to its queue manager, and one
    copied in from another (or from another time of this one) can have record boundaries
    where this log's were (queue managers that did the same things), so it reads as
    well-formed and its records would be replayed as this one's. One comparison a list
    (a page's run of records), none a record: the replay's pace is unchanged."""
    it = iter(batches)
    for batch in it:
        if batch and batch[-1][0] >= cp_lsn:
            rec = next(r for r in batch if r[0] >= cp_lsn)
            why = _not_checkpoint(rec, cp_lsn, cp_seq)
            if why:
                raise StoreError(
                    f"the recovery log does not belong with this data directory: the record "
                    f"at LSN {cp_lsn} is not the checkpoint {cp_seq} that amqalchk.fil "
                    f"names ({why}); a log file was copied in from another queue manager "
                    f"or from another time: {_SAME_BACKUP}", amq="AMQ6118")
            yield batch
            break
        yield batch
    yield from it


def _not_checkpoint(rec: Any, cp_lsn: int, cp_seq: int) -> str:
    """Why ``rec`` (the first record at or after ``cp_lsn``) is not checkpoint
    ``cp_seq``'s record, or ''."""
    lsn, payload = rec[0], rec[2]
    if lsn != cp_lsn:
        return f"no record starts there; the next is at LSN {lsn}"
    if not payload or payload[0] != R.CHECKPOINT:
        name = R.TYPE_NAMES.get(payload[0], "unknown") if payload else "empty"
        return f"it is a {name} record"
    try:
        seq = R.decode(bytes(payload), lsn).attrs.get("seq")
    except (StoreError, ValueError, AttributeError):
        return "its checkpoint record cannot be read"
    if seq != cp_seq:
        return f"it is checkpoint {seq}"
    return ""
