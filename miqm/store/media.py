"""Linear-log media recovery: record a queue's media image, recreate a queue from it.

``record_image`` takes a checkpoint, copies the queue file to ``queues/<Q>/img`` (through
a temporary name, synced, renamed) with ``img.meta`` (the checkpoint it is consistent
with), and logs a MEDIA record. The log's media LSN is the oldest image's restart point,
so the extents it needs stay (AMQ7468 names the oldest).

``recreate_object`` rebuilds the queue from the image plus every log record since: the
same replay restart uses, restricted to the one queue. The rebuilt messages are written
to a fresh queue file by an immediate checkpoint.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from lockfs.errors import LockFsError, VolumeNotFound
from miqm.errors import ObjectError, StoreError
from miqm.store import records as R
from miqm.store.queues import LocalQueue, MemMessage, QueueFile
from miqm.store.recovery import StoreState, record_batches, replay

if TYPE_CHECKING:
    from miqm.store.qmstore import QueueManagerStore


def _require_linear(store: QueueManagerStore) -> None:
    if store.settings.log_type != "LINEAR":
        raise ObjectError("AMQ7466: media recovery needs linear logging; queue manager "
                          f"'{store.qmgr}' uses circular logging.", amq="AMQ7466")


def record_image(store: QueueManagerStore, queue: str) -> None:
    """rcdmqimg for one queue."""
    _require_linear(store)
    with store._lock:
        store._check_open()
        q = store._queue(queue)
        store._checkpoint_locked()
        info = store.last_checkpoint
        assert q.file is not None and q.file.f is not None
        src = q.file.f
        base = f"queues/{queue}"
        try:
            with store.data.open(f"{base}/img.tmp", create=True) as out:
                out.truncate(0)
                off, size = 0, src.size()
                while off < size:
                    chunk = src.pread(min(4 << 20, size - off), off)
                    out.pwrite(chunk, off)
                    off += len(chunk)
                out.fdatasync()
            store.data.rename(f"{base}/img.tmp", f"{base}/img")
            meta = {"seq": info.seq, "cp_lsn": info.cp_lsn, "restart_lsn": info.restart_lsn,
                    "uows": info.uows, "qid": q.qid}
            store.data.write_atomic(f"{base}/img.meta", json.dumps(meta).encode())
        except LockFsError as exc:
            raise StoreError(f"cannot record media image of queue '{queue}': {exc}") from exc
        lsn = store._append(R.encode_json(R.MEDIA, {"name": queue, "lsn": info.restart_lsn}))
        store._media[queue] = int(info.restart_lsn)  # type: ignore[arg-type]
        q.media_lsn = store._media[queue]
        store._checkpoint_locked()
    store._force(lsn)


def recreate_object(store: QueueManagerStore, queue: str) -> None:
    """rcrmqobj for one queue: image + log replay, then a fresh queue file."""
    _require_linear(store)
    base = f"queues/{queue}"
    with store._lock:
        store._await_checkpoint_idle()  # the queue file is closed and replaced below
        store._check_open()
        live = store.state.queues.get(queue)
        if live is None:
            raise ObjectError(f"queue '{queue}' is not defined", amq="AMQ8147")
        try:
            meta = json.loads(store.data.read_bytes(f"{base}/img.meta"))
        except VolumeNotFound as exc:
            raise ObjectError(f"AMQ7472: no media image of queue '{queue}' was recorded "
                              "(run rcdmqimg first)", amq="AMQ7472") from exc
        if int(meta["qid"]) != live.qid:
            raise ObjectError(f"the media image of queue '{queue}' is of an earlier "
                              "definition of the queue", amq="AMQ7472")
        img = QueueFile(store.data, queue, f"{base}/img")
        if not img.open_existing():
            raise ObjectError(f"media image {base}/img is missing", amq="AMQ7472")
        tmp = StoreState()
        tmp.only = queue
        q = LocalQueue(queue, live.qid, img.attrs)
        try:
            for r in img.scan(int(meta["seq"])):
                _k, prio, pers, t, mid, cid, body = img.read(r.block, r.body_len)
                tmp.add_message(q, r.key, MemMessage(prio, pers, t, mid, cid, body))
        finally:
            img.close()
        tmp.queues[queue] = q
        cp_txids = set()
        for d in meta["uows"]:
            u = tmp.uows.get_or_make(int(d["txid"]))
            u.state, u.xid = d.get("state") or "active", d.get("xid")
            cp_txids.add(u.txid)
        replay(tmp, record_batches(store.log, int(meta["restart_lsn"])), meta["cp_lsn"],
               cp_txids)
        # carry over what the log never held: non-persistent messages
        for key, m in live.mem.items():
            if not m.persistent and q.index.find(key) is None:
                tmp.add_message(q, key, m)
        q.attrs = dict(live.attrs)
        q.locked = {k: t for k, t in live.locked.items() if q.index.find(k) is not None}
        q.uncommitted = {k: t for k, t in live.uncommitted.items()
                         if q.index.find(k) is not None}
        q.present = sum(1 for _ in q.index.iter_order())
        if live.file is not None:
            live.file.close()
        q.file, q.file_qid, q.header_dirty = None, 0, True
        q.media_lsn = live.media_lsn
        store.state.queues[queue] = q
        store._damaged.pop(queue, None)
        store._checkpoint_locked()
