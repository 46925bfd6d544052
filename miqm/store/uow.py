"""Units of work: what a syncpoint holds until commit or backout, and the table of them.

A :class:`UnitOfWork` records its operations in order as ``(kind, queue, key, logged)``:
``P`` a put (the message is invisible to others until commit), ``G`` a destructive get
(the message is locked until commit removes it or backout releases it). ``logged`` says
whether a log record describes the operation (persistent messages); non-persistent
operations are undone in memory only and never reach the log.
"""

from __future__ import annotations

ACTIVE, PREPARED, ROLLED_BACK, ENDED = "active", "prepared", "rolled_back", "ended"


class UnitOfWork:
    """One syncpoint. Obtain from ``QueueManagerStore.begin()``; end with commit/backout.

    ``first_lsn`` is the LSN of its first log record (what it pins in the log);
    ``state`` is active, prepared (in doubt), rolled_back (by AMQ7469: its next call
    fails with MQRC 2003) or ended; ``owner`` who prepared it (given to ``prepare``,
    kept in its records; the store does not interpret it); ``ops`` its operations in
    order; ``undone`` the
    indexes of operations undone by CLRs (restart). A plain slotted class: one is made
    for every syncpoint, on the commit path.
    """

    __slots__ = ("first_lsn", "ops", "owner", "state", "txid", "undone", "xid")

    def __init__(self, txid: int, state: str = ACTIVE, xid: str | None = None,
                 first_lsn: int | None = None) -> None:
        self.txid = txid
        self.state = state
        self.xid = xid
        self.first_lsn = first_lsn
        self.owner: str | None = None
        self.ops: list[tuple[str, str, int, bool]] = []
        self.undone: set[int] = set()

    def __repr__(self) -> str:
        return (f"UnitOfWork(txid={self.txid}, state={self.state!r}, xid={self.xid!r}, "
                f"first_lsn={self.first_lsn}, ops={len(self.ops)})")

    @property
    def logged(self) -> bool:
        """True once any record of this unit is in the log."""
        return self.first_lsn is not None

    def pending_ops(self) -> list[tuple[int, tuple[str, str, int, bool]]]:
        """(index, op) of operations not yet undone, in order."""
        return [(i, op) for i, op in enumerate(self.ops) if i not in self.undone]

    def logged_ops(self) -> list[tuple[str, str, int]]:
        """The logged operations still in effect, for CARRY and checkpoint records."""
        return [(k, q, key) for i, (k, q, key, lg) in enumerate(self.ops)
                if lg and i not in self.undone]


class UowTable:
    """In-flight units by txid, in order of their first log record (oldest first)."""

    def __init__(self, next_txid: int = 1) -> None:
        self.next_txid = next_txid
        self.units: dict[int, UnitOfWork] = {}
        self.by_xid: dict[str, UnitOfWork] = {}

    def new(self) -> UnitOfWork:
        """A fresh active unit with a never-reused txid."""
        u = UnitOfWork(self.next_txid)
        self.next_txid += 1
        self.units[u.txid] = u
        return u

    def get_or_make(self, txid: int) -> UnitOfWork:
        """The unit ``txid`` (recovery: created on its first record)."""
        u = self.units.get(txid)
        if u is None:
            u = UnitOfWork(txid)
            self.units[txid] = u
            self.seen(txid)
        return u

    def seen(self, txid: int) -> None:
        """Recovery met ``txid`` in the log: it is never handed out again."""
        if txid >= self.next_txid:
            self.next_txid = txid + 1

    def end(self, u: UnitOfWork, state: str = ENDED) -> None:
        """Forget a finished unit."""
        u.state = state
        self.units.pop(u.txid, None)
        if u.xid is not None:
            self.by_xid.pop(u.xid, None)

    def oldest_logged(self) -> UnitOfWork | None:
        """The in-flight unit whose first record is oldest (it pins the log)."""
        best = None
        for u in self.units.values():
            if u.first_lsn is not None and (best is None or u.first_lsn < best.first_lsn):
                best = u
        return best

    def restart_lsn(self, checkpoint_lsn: int) -> int:
        """Where restart must begin reading: the checkpoint or an older unit's first record."""
        oldest = self.oldest_logged()
        if oldest is not None and oldest.first_lsn is not None:
            return min(checkpoint_lsn, oldest.first_lsn)
        return checkpoint_lsn

    def snapshot(self) -> list[dict[str, object]]:
        """The table as the checkpoint carries it (logged units only)."""
        return [{"txid": u.txid, "state": u.state, "xid": u.xid, "first_lsn": u.first_lsn,
                 **({"owner": u.owner} if u.owner else {})}
                for u in self.units.values() if u.first_lsn is not None]
