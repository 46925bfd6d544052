"""The checkpoint file ``amqalchk.fil``: where restart begins.

Layout: ``magic "MIQK", version u16, reserved u16, crc32c u32, length u32`` then a JSON
object (``seq``, ``cp_lsn``, ``restart_lsn``, ``next_key``, ``next_txid``, ``queues``
{name: qid}, ``uows`` (the in-flight table), ``qmgr`` attributes, ``media`` {name: lsn},
``authrecs`` [{objtype, profile, principal, auths}]: the authority records,
``idx`` {name: checkpoint of its index file}, ``idxd`` {name: [checkpoint of its index
file, checkpoint of its delta file]}, ``idxd2`` {name: [the same, checkpoint of its
second delta file]}, ``aborted`` [checkpoints never completed],
``catalog`` (the checkpoint of the queue catalog, below), ``filed`` [queues of that
catalog which hold records in their files now]).
It is replaced with write-temp + fdatasync + rename, so a crash leaves the old or the new
file, never a mix; the checksum catches any other damage, reported as one line.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, Protocol

from crc32c import crc32c

from lockfs.errors import LockFsError, VolumeNotFound
from lockfs.volume import Volume
from miqm.errors import StoreError

NAME = "amqalchk.fil"
VERSION = 1
#: the version of a file whose ``filed`` list is not empty: an older miqm, which would
#: take those queues as empty (the catalog defines them) and so lose their messages,
#: refuses it with one line instead
VERSION_FILED = 2
VERSIONS = (VERSION, VERSION_FILED)
_HDR = struct.Struct("<4sHHII")
_MAGIC = b"MIQK"


@dataclass
class CheckpointInfo:
    """The content of amqalchk.fil."""

    seq: int = 0
    cp_lsn: int | None = None
    restart_lsn: int | None = None
    next_key: int = 1
    next_txid: int = 1
    queues: dict[str, int] = field(default_factory=dict)
    uows: list[dict[str, Any]] = field(default_factory=list)
    qmgr: dict[str, Any] = field(default_factory=dict)
    media: dict[str, int] = field(default_factory=dict)
    authrecs: list[dict[str, Any]] = field(default_factory=list)
    #: per queue, the checkpoint whose index file is current (queues without one: absent)
    idx: dict[str, int] = field(default_factory=dict)
    #: per queue whose index file has a delta file: [checkpoint of the index, checkpoint
    #: of the delta] (such a queue is not in ``idx``: an older miqm scans its file)
    idxd: dict[str, list[int]] = field(default_factory=dict)
    #: per queue whose delta file has a second one (``idx.d2``): [checkpoint of the index,
    #: of the delta, of the second delta] (such a queue is in neither ``idx`` nor
    #: ``idxd``: an older miqm scans its file)
    idxd2: dict[str, list[int]] = field(default_factory=dict)
    #: checkpoints that started writing queue files and never completed (their records
    #: may still be in files loaded from an index: a scan must never take them as live)
    aborted: list[int] = field(default_factory=list)
    #: the checkpoint whose queue catalog (amqalcat.fil) is current; 0: none
    catalog: int = 0
    #: queues that catalog defines but that hold records in their files now: loaded from
    #: their files. A few queues that came to hold messages since the catalog was
    #: written are named here instead of writing the whole catalog (both copies) again
    filed: list[str] = field(default_factory=list)

    def index_of(self, name: str) -> tuple[int, int, int]:
        """(checkpoint of queue ``name``'s index file, of its delta file, of its second
        delta file); 0 for none."""
        trio = self.idxd2.get(name)
        if trio:
            return int(trio[0]), int(trio[1]), int(trio[2])
        pair = self.idxd.get(name)
        if pair:
            return int(pair[0]), int(pair[1]), 0
        return int(self.idx.get(name, 0)), 0, 0

    def indexed(self) -> dict[str, tuple[int, int, int]]:
        """{queue: (qid, checkpoint of its index file, of its delta file or 0)} of every
        queue that has an index file."""
        return {n: (qid, *trio[:2]) for n, qid in self.queues.items()
                if (trio := self.index_of(n))[0]}

    def encode(self) -> bytes:
        """The file's bytes."""
        fields = dict(self.__dict__)
        for name in ("authrecs", "idxd2", "filed"):  # left out when empty
            if not fields[name]:
                del fields[name]
        queues = fields.pop("queues")
        text = json.dumps(fields, separators=(",", ":"), sort_keys=True)
        body = f'{text[:-1]},"queues":{_queues_json(queues)}}}'.encode()
        version = VERSION_FILED if self.filed else VERSION
        return _HDR.pack(_MAGIC, version, 0, crc32c(body), len(body)) + body


# the last queue table encoded, and its JSON: the store hands every checkpoint the same
# dict until a queue comes or goes (QueueTable.qids), and with thousands of queues the
# encoding was a millisecond of every checkpoint (the dict is held here, so its identity
# cannot be reused by another)
_last_queues: tuple[dict[str, int], str] | None = None


def _queues_json(queues: dict[str, int]) -> str:
    global _last_queues
    last = _last_queues
    if last is not None and last[0] is queues:
        return last[1]
    text = json.dumps(queues, separators=(",", ":"))
    if len(queues) >= 64:
        _last_queues = (queues, text)
    return text


class ReadAhead(Protocol):
    """Files a standby decoded ahead of a takeover (:class:`miqm.store.qindex.IndexCache`)."""

    def known_file(self, name: str, raw: bytes) -> Any: ...
    def keep_file(self, name: str, raw: bytes, decoded: Any) -> None: ...
    def take_file(self, name: str, raw: bytes) -> Any: ...


def read(volume: Volume, ahead: ReadAhead | None = None) -> CheckpointInfo:
    """Read and check the checkpoint file; StoreError (one line naming it) if damaged.
    ``ahead``: what a standby decoded, used if the file is still exactly those bytes."""
    where = f"{volume.describe()}/{NAME}"
    try:
        data = volume.read_bytes(NAME)
    except VolumeNotFound as exc:
        raise StoreError(f"AMQ6118: checkpoint file {where} is missing: the queue manager "
                         "data is incomplete; restore the data directory from a backup (or "
                         "recreate the queue manager)", amq="AMQ6118") from exc
    except LockFsError as exc:
        raise StoreError(f"AMQ6118: cannot read checkpoint file {where}: {exc}; check the "
                         "data directory's filesystem and start the queue manager again",
                         amq="AMQ6118") from exc
    if ahead is not None:
        known = ahead.take_file(NAME, data)
        if isinstance(known, CheckpointInfo):
            return known
    return decode(data, where)


def read_ahead(volume: Volume, ahead: ReadAhead) -> CheckpointInfo:
    """A standby's read of the checkpoint file and the catalog it names, decoded into
    ``ahead`` unless ``ahead`` holds those very bytes already; the checkpoint file's
    content (for the caller to read ahead the indexes it names). Only reads."""
    raw = volume.read_bytes(NAME)
    info = ahead.known_file(NAME, raw)
    if not isinstance(info, CheckpointInfo):
        info = decode(raw, f"{volume.describe()}/{NAME}")
        ahead.keep_file(NAME, raw, info)
    if info.catalog:
        for name in CATALOGS:
            try:
                craw = volume.read_bytes(name)
                known = ahead.known_file(name, craw)
                if known is None:
                    known = _decode_catalog(craw)
                    ahead.keep_file(name, craw, known)
                if known[0] == info.catalog:
                    split_catalog(info, known[1])  # the takeover's, made while waiting
                break
            except (LockFsError, _Unusable):
                continue
    return info


@dataclass(frozen=True)
class CatalogSplit:
    """The queues of a checkpoint as an open loads them (:func:`split_catalog`)."""

    #: name -> (qid, attributes) of the queues the catalog alone defines (no file read)
    dormant: dict[str, tuple[int, dict[str, Any]]]
    #: the other queues of the checkpoint, sorted: loaded from their index or queue file
    loaded: list[str]
    #: how many queues of the catalog the checkpoint names in ``filed`` (loaded from
    #: their files instead)
    filed: int


# the last split made, and what from: a standby makes the split of the checkpoint and
# catalog it read ahead, and the takeover that then reads the same files (the same
# decoded objects, checked byte for byte) uses it. With thousands of queues it is a
# millisecond or two of dict work the takeover need not wait for. The objects are held
# here, so their identities cannot be reused by others; neither is changed after decoding.
_last_split: tuple[CheckpointInfo, dict[str, Any], CatalogSplit] | None = None


def split_catalog(info: CheckpointInfo, catalog: dict[str, tuple[int, dict[str, Any]]]
                  ) -> CatalogSplit:
    """Which queues of checkpoint ``info`` its ``catalog`` (as read, {} if none) defines
    alone: those whose entry has the checkpoint's qid and that ``filed`` does not name
    (they hold records in their files). The result is shared: never change it."""
    global _last_split
    last = _last_split
    if last is not None and last[0] is info and last[1] is catalog:
        return last[2]
    split = _split(info, catalog)
    if len(info.queues) >= 64:
        _last_split = (info, catalog, split)
    return split


def _split(info: CheckpointInfo, catalog: dict[str, tuple[int, dict[str, Any]]]
           ) -> CatalogSplit:
    filed = 0
    if info.filed and catalog:
        catalog = dict(catalog)
        for name in info.filed:
            if catalog.pop(name, None) is not None:
                filed += 1
    cat_qids = dict(zip(catalog, map(itemgetter(0), catalog.values()), strict=True))
    if cat_qids.items() <= info.queues.items():  # the usual case, checked in C
        dormant = catalog
    else:
        dormant = {name: entry for name, qid in info.queues.items()
                   if (entry := catalog.get(name)) is not None and entry[0] == qid}
    return CatalogSplit(dormant, sorted(info.queues.keys() - dormant.keys()), filed)


def decode(data: bytes, where: str) -> CheckpointInfo:
    """The checkpoint file's content from its bytes ``data``; StoreError (one line
    naming ``where``) if damaged."""
    if len(data) < _HDR.size:
        raise _corrupt(where, "truncated")
    magic, ver, _r, crc, n = _HDR.unpack_from(data, 0)
    body = data[_HDR.size:_HDR.size + n]
    if magic != _MAGIC or len(body) != n or crc32c(body) != crc:
        raise _corrupt(where, "bad checksum or header")
    if ver not in VERSIONS:
        raise StoreError(f"AMQ6118: checkpoint file {where} has format version {ver}; this "
                         f"miqm reads versions {', '.join(map(str, VERSIONS))}: start the "
                         "queue manager with the miqm that wrote it", amq="AMQ6118")
    try:
        obj = _decode(body)
        # fields a newer version added are left out (it keeps version 1 for them)
        known = CheckpointInfo.__dataclass_fields__
        return CheckpointInfo(**{k: v for k, v in obj.items() if k in known})
    except (ValueError, TypeError) as exc:
        raise _corrupt(where, str(exc)) from exc


def _corrupt(where: str, why: str) -> StoreError:
    """The one line for a damaged checkpoint file: what is wrong and what to do. Restart
    cannot begin without it (it names the restart point, the queues and the units of
    work), and nothing here guesses: the queue manager does not start until it is
    restored."""
    return StoreError(f"AMQ6118: checkpoint file {where} is corrupt ({why}); restore the "
                      "queue manager's data directory from a backup taken with it ended",
                      amq="AMQ6118")


_QUEUES_AT_END = b',"queues":{'


def _decode(body: bytes) -> dict[str, Any]:
    """The file's JSON. Written by :meth:`CheckpointInfo.encode`, the queue table comes
    last: it is decoded on its own and its text kept as the one :func:`_queues_json`
    last encoded, so the checkpoint ending this open does not encode it again. (The
    text ``,"queues":{`` cannot occur inside a JSON string, whose quotes are escaped,
    nor in the table after it, whose keys are queue names.)"""
    global _last_queues
    at = body.rfind(_QUEUES_AT_END)
    if at > 0 and body.endswith(b"}}"):
        try:
            obj = json.loads(body[:at] + b"}")
            text = body[at + len(_QUEUES_AT_END) - 1:-1].decode()
            queues = json.loads(text)
        except ValueError:  # not in that order (an older miqm sorted the keys)
            pass
        else:
            if isinstance(obj, dict) and isinstance(queues, dict) and "queues" not in obj:
                obj["queues"] = queues
                if len(queues) >= 64:
                    _last_queues = (queues, text)
                return obj
    return dict(json.loads(body))


def write(volume: Volume, info: CheckpointInfo) -> None:
    """Durably replace the checkpoint file."""
    volume.write_atomic(NAME, info.encode())


# ------------------------------------------------------------------ queue catalog
CATALOG = "amqalcat.fil"
#: the catalog's second copy: a queue that holds nothing has no file, so the catalog is
#: its only definition and one damaged file must not lose it
CATALOG_COPY = "amqalca2.fil"
CATALOGS = (CATALOG, CATALOG_COPY)
_CMAGIC = b"MIQC"


def encode_catalog(seq: int, queues: dict[str, tuple[int, dict[str, Any]]]) -> bytes:
    """The queue catalog as of checkpoint ``seq``: the definition (qid, attributes) of
    every queue that held no live record at that checkpoint. A takeover creates those
    queues from it without opening any file. Each distinct set of attributes is written
    once (``attrs``) and each queue names its set by number: thousands of queues defined
    together share one, which a takeover then parses once."""
    sets: dict[Any, int] = {}
    by_id: dict[int, int] = {}  # queues sharing one dict (the usual case): looked up once
    attrs: list[dict[str, Any]] = []
    set_of: list[int] = []
    for _qid, a in queues.values():
        k = by_id.get(id(a))
        if k is None:
            try:
                key: Any = tuple(a.items())
                hash(key)
            except TypeError:  # an unhashable value: compared by its JSON text instead
                key = json.dumps(a, sort_keys=True)
            k = sets.get(key)
            if k is None:
                k = sets[key] = len(attrs)
                attrs.append(a)
            by_id[id(a)] = k
        set_of.append(k)
    # three parallel lists, not an object per queue: a takeover parses them and builds
    # its table without a Python step per queue
    body = json.dumps({"seq": seq, "attrs": attrs, "names": list(queues),
                       "qids": [e[0] for e in queues.values()], "sets": set_of},
                      separators=(",", ":")).encode()
    return _HDR.pack(_CMAGIC, VERSION, 0, crc32c(body), len(body)) + body


def read_catalog(volume: Volume, seq: int, ahead: ReadAhead | None = None
                 ) -> tuple[dict[str, tuple[int, dict[str, Any]]] | None, str]:
    """The catalog of checkpoint ``seq`` from ``amqalcat.fil`` or, when the checkpoint
    completed before its rename, ``amqalcat.fil.new``, else from the second copy
    (``amqalca2.fil``, ``.new``): (catalog, why the first copy could not be used, "" when
    it could); (None, why) when no copy is usable."""
    whys = []
    for first in (CATALOG, CATALOG_COPY):
        for name in (first, first + ".new"):
            try:
                found = _catalog_file(volume, name, seq, ahead)
            except _Unusable as exc:
                whys.append(f"{name}: {exc}")
                continue
            # the first copy's ``.new`` after a crash before its rename is that copy
            return found, "" if first == CATALOG else "; ".join(whys)
    return None, "; ".join(whys)


class _Unusable(Exception):
    pass


def _catalog_file(volume: Volume, name: str, seq: int, ahead: ReadAhead | None = None
                  ) -> dict[str, tuple[int, dict[str, Any]]]:
    try:
        data = volume.read_bytes(name)
    except LockFsError as exc:
        raise _Unusable(str(exc)) from exc
    known = ahead.take_file(name, data) if ahead is not None else None
    file_seq, out = known if isinstance(known, tuple) else _decode_catalog(data)
    if file_seq != seq:
        raise _Unusable(f"of checkpoint {file_seq}, not {seq}")
    return out


def _decode_catalog(data: bytes) -> tuple[int, dict[str, tuple[int, dict[str, Any]]]]:
    """(the checkpoint a catalog file's bytes ``data`` belong to, its queues)."""
    if len(data) < _HDR.size:
        raise _Unusable("truncated")
    magic, ver, _r, crc, n = _HDR.unpack_from(data, 0)
    body = data[_HDR.size:_HDR.size + n]
    if magic != _CMAGIC or ver != VERSION or len(body) != n or crc32c(body) != crc:
        raise _Unusable("bad checksum or header")
    try:
        obj = json.loads(body)
        file_seq = int(obj["seq"])
        if "attrs" not in obj:  # written before attribute sets were shared
            return file_seq, {str(k): (int(v[0]), dict(v[1]))
                              for k, v in obj["queues"].items()}
        # shared by the queues naming them: never changed (a queue replaces its own)
        sets = [dict(a) for a in obj["attrs"]]
        if "names" not in obj:  # an object per queue (written before the lists)
            out = {}
            for k, (qid, i) in obj["queues"].items():
                if not 0 <= i < len(sets):
                    raise _Unusable(f"queue {k} names attribute set {i} of {len(sets)}")
                out[str(k)] = (int(qid), sets[i])
            return file_seq, out
        names, qids, set_of = obj["names"], obj["qids"], obj["sets"]
        if not len(names) == len(qids) == len(set_of):
            raise _Unusable(f"{len(names)} names, {len(qids)} qids, {len(set_of)} sets")
        if set_of and not (0 <= min(set_of) and max(set_of) < len(sets)):
            raise _Unusable(f"a queue names an attribute set outside 0..{len(sets) - 1}")
        if not set(map(type, names)) <= {str} or not set(map(type, qids)) <= {int}:
            raise _Unusable("a queue name that is not text or a qid that is not a number")
        return file_seq, dict(zip(names, zip(qids, map(sets.__getitem__, set_of),
                                             strict=True), strict=True))
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise _Unusable(str(exc)) from exc
