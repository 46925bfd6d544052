"""Linear-log media recovery: record a queue's media image, recreate a queue from it.

``record_image`` takes a checkpoint, copies the queue file to ``queues/<Q>/img`` (through
a temporary name, synced, renamed) with ``img.meta`` (the checkpoint it is consistent
with), and logs a MEDIA record. The log's media LSN is the oldest image's restart point,
so the extents it needs stay (AMQ7468 names the oldest).

``recreate_object`` rebuilds the queue from the image plus every log record since: the
same replay restart uses, restricted to the one queue. The rebuilt messages are written
to a fresh queue file by an immediate checkpoint.

This module does the file work and the rebuilding; the store
(:meth:`QueueManagerStore.record_image`, :meth:`QueueManagerStore.recreate_object`) holds
its lock around them, logs the MEDIA record and takes the checkpoints. Nothing here
touches the store itself.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from lockfs.errors import LockFsError, VolumeNotFound
from lockfs.volume import Volume, VolumeFile
from miqm.errors import ObjectError, StoreError
from miqm.store.checkpoint import CheckpointInfo
from miqm.store.queues import LocalQueue, MemMessage, QueueFile
from miqm.store.recovery import StoreState, record_batches, replay


def require_linear(log_type: str, qmgr: str) -> None:
    """AMQ7466 unless the queue manager logs linearly (media images need the whole log)."""
    if log_type != "LINEAR":
        raise ObjectError("AMQ7466: media recovery needs linear logging; queue manager "
                          f"'{qmgr}' uses circular logging.", amq="AMQ7466")


def write_image(data: Volume, queue: str, src: VolumeFile, info: CheckpointInfo,
                qid: int) -> None:
    """Copy ``queue``'s file ``src`` (just checkpointed: consistent with ``info``) to
    ``queues/<queue>/img`` through a temporary name, synced and renamed, and write
    ``img.meta`` (the checkpoint it is consistent with and the queue's incarnation)."""
    base = f"queues/{queue}"
    try:
        with data.open(f"{base}/img.tmp", create=True) as out:
            out.truncate(0)
            off, size = 0, src.size()
            while off < size:
                chunk = src.pread(min(4 << 20, size - off), off)
                out.pwrite(chunk, off)
                off += len(chunk)
            out.fdatasync()
        data.rename(f"{base}/img.tmp", f"{base}/img")
        meta = {"seq": info.seq, "cp_lsn": info.cp_lsn, "restart_lsn": info.restart_lsn,
                "uows": info.uows, "qid": qid}
        data.write_atomic(f"{base}/img.meta", json.dumps(meta).encode())
    except LockFsError as exc:
        # a copy cut short (a full disk) is removed: left, it holds the space the next
        # checkpoint needs, and the image before it (img, img.meta) stays in force
        with contextlib.suppress(LockFsError):
            data.unlink(f"{base}/img.tmp")
        raise StoreError(f"cannot record media image of queue '{queue}': {exc}; the "
                         "previous image, if any, stays in force: free space in the data "
                         "directory and run rcdmqimg again") from exc


def rebuild_queue(data: Volume, log: Any, live: LocalQueue,
                  aborted: frozenset[int] | set[int] = frozenset()) -> LocalQueue:
    """``live`` rebuilt from its media image plus every record of ``log`` since: a new
    queue object with no file (the next checkpoint writes one), the persistent messages
    from image and log, ``live``'s non-persistent ones, attributes, locks and uncommitted
    keys. Raises AMQ7472 when there is no usable image of this incarnation. ``aborted``:
    checkpoints that never completed (records they stamped are not live)."""
    queue = live.name
    base = f"queues/{queue}"
    try:
        meta = _read_meta(data, f"{base}/img.meta")
    except VolumeNotFound as exc:
        raise ObjectError(f"AMQ7472: no media image of queue '{queue}' was recorded "
                          "(run rcdmqimg first)", amq="AMQ7472") from exc
    except (LockFsError, ValueError) as exc:
        raise _damaged_image(queue, f"{data.describe()}/{base}/img.meta", str(exc)) from exc
    if int(meta["qid"]) != live.qid:
        raise ObjectError(f"the media image of queue '{queue}' is of an earlier "
                          "definition of the queue", amq="AMQ7472")
    img = QueueFile(data, queue, f"{base}/img")
    where = f"{data.describe()}/{base}/img"
    try:
        if not img.open_existing():
            raise ObjectError(f"media image {where} is missing; restore it from a backup, "
                              "or DELETE QLOCAL the queue", amq="AMQ7472")
    except ObjectError:
        raise
    except StoreError as exc:
        raise _damaged_image(queue, where, str(exc)) from exc
    tmp = StoreState()
    tmp.only = queue
    q = LocalQueue(queue, live.qid, img.attrs)
    seq = int(meta["seq"])
    found = 0
    try:
        for r in img.scan(seq, aborted=aborted):
            _k, prio, pers, t, mid, cid, body = img.read(r.block, r.stored)
            tmp.add_message(q, r.key, MemMessage(prio, pers, t, mid, cid, body))
            found += 1
        # a record whose check fails is passed over by the scan: count them, as a
        # restart counts a queue file, or the queue comes back silently short
        recorded = img.recorded_records(seq, aborted)
    except ObjectError:
        raise
    except StoreError as exc:
        raise _damaged_image(queue, where, str(exc)) from exc
    finally:
        img.close()
    if recorded is not None and recorded != found:
        raise _damaged_image(queue, where, f"it holds {found} readable messages where "
                             f"its checkpoint left {recorded}")
    tmp.queues[queue] = q
    cp_txids = set()
    for d in meta["uows"]:
        u = tmp.uows.get_or_make(int(d["txid"]))
        u.state, u.xid = d.get("state") or "active", d.get("xid")
        cp_txids.add(u.txid)
    replay(tmp, record_batches(log, int(meta["restart_lsn"])), meta["cp_lsn"], cp_txids)
    # carry over what the log never held: non-persistent messages
    for key, m in live.mem.items():
        if not m.persistent and q.index.find(key) is None:
            tmp.add_message(q, key, m)
    q.attrs = dict(live.attrs)
    q.locked = {k: t for k, t in live.locked.items() if q.index.find(k) is not None}
    q.uncommitted = {k: t for k, t in live.uncommitted.items()
                     if q.index.find(k) is not None}
    q.present = sum(1 for _ in q.index.iter_order())
    q.file, q.file_qid, q.header_dirty = None, 0, True
    q.need_file = True  # the damaged file is replaced, whatever the queue holds
    q.media_lsn = live.media_lsn
    return q


def _read_meta(data: Volume, path: str) -> dict[str, Any]:
    """``img.meta``, checked: ValueError naming what is wrong with it (garbage, or a field
    missing or of the wrong type), never a KeyError from deep in the rebuild."""
    meta = json.loads(data.read_bytes(path))
    if not isinstance(meta, dict):
        raise ValueError("not a JSON object")
    for key in ("seq", "qid", "restart_lsn"):
        if not isinstance(meta.get(key), int) or isinstance(meta.get(key), bool):
            raise ValueError(f"'{key}' is missing or not a number")
    meta.setdefault("uows", [])
    meta.setdefault("cp_lsn", None)
    if not isinstance(meta["uows"], list) or not all(
            isinstance(d, dict) and isinstance(d.get("txid"), int) for d in meta["uows"]):
        raise ValueError("'uows' is not a list of units of work")
    return meta


def _damaged_image(queue: str, where: str, why: str) -> ObjectError:
    """AMQ7472 for a media image that cannot be trusted: rcrmqobj would rebuild the queue
    from it without some of its messages, so it rebuilds nothing and says what to do."""
    why = why.split(" (restore it with", 1)[0]
    return ObjectError(f"AMQ7472: the media image of queue '{queue}' is damaged ({where}: "
                       f"{why}); the queue was not recreated: restore the image from a "
                       "backup and run rcrmqobj again, or DELETE QLOCAL the queue",
                       amq="AMQ7472")
