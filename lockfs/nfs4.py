"""The nfs4 backend: a userspace NFSv4.0 client (libnfs 4, ``libnfs.so.13``, via ctypes).

Location: ``nfs4://server[:port]/export[/dir...][?lease=N&timeout=N]``. The first path
component names the export (its NFSv4 pseudo path, e.g. ``/export``); the rest is the
volume's root directory inside it. The lease is read from the server at the first
connection (:mod:`lockfs.nfs4probe`: GETATTR lease_time); ``lease`` (or the constructor's
``lease_seconds``) may only shorten it, and stands in for it if the server does not
answer the probe (no lock is taken while the lease is unknown). ``timeout`` bounds every
call in whole seconds (default: about a third of the lease; libnfs may take a second
more).

How libnfs 4.0.0 is used, and why (docs/lockfs.md, facts.md):

* every libnfs context gets its own ``nfs4_set_client_name``: each is its own NFSv4
  client with its own lease, so nothing one file does disturbs another file's state;
* each open file has its own context (a failed OPEN or a LOCK leaves libnfs' open-owner
  sequence out of step with the server, so a context is never reused for a second OPEN);
  a lock attempt on a file whose context has already tried a lock opens the file again in
  a fresh context, which becomes the file's context if the lock is granted;
* metadata (stat, listdir, mkdir, rename, unlink) goes through one shared context per
  volume; it is replaced after a timeout or a broken connection;
* whole small files and file heads (``read_bytes``, ``read_head``: open, read, close at
  once, read-only, never locked) go through a second shared context, so that a takeover
  reading a checkpoint file and index heads does not pay a new connection and client per
  file (1 ms each on the lab, against 0.06 ms a round trip); after any failed call, or
  once idle for a third of the lease (its client state may have run out), it is replaced
  and the read tried once more on the new one;
* libnfs does not renew leases by itself: a daemon thread per locked file READs through
  the locked handle at least every lease/3 (GETATTR and COMMIT do not renew). The lock is
  taken as lost when the server says EXPIRED, or once the lease less a margin
  (:func:`lease_margin`: the server may count whole seconds) has passed since the last
  READ/WRITE/LOCK that succeeded was sent (the server cannot have let the lease run out
  earlier than that, so the holder gives up before anyone else can get the lock);
* the lease anchor (docs/lockfs.md): before a WRITE or size change through an unlocked
  file, the volume's ``lease_anchor`` (the instance's ``master`` lock) is renewed after
  that file's context last heard from the server, so every data lease ends at the
  server no later than the lock's and a WRITE sent after a takeover is refused there;
* namespace calls behind the lease: while a volume has an anchor on the same server, its
  rename/unlink/rmdir go out as one raw COMPOUND on the anchor's connection that starts
  with RENEW(the lock's client id), so the server refuses them once that lease expired;
* destroying a context does not release its locks: ``close`` unlocks first;
* libnfs reports NFS4ERR_DENIED/EXPIRED as -34 (ERANGE): the status name is read from
  ``nfs_get_error``; a timed-out call returns -EINTR and raises :class:`VolumeStalled`;
* reachability (``Nfs4File.reachability``): ``SUSPECT`` while calls on the file fail or
  time out or a renewal is overdue, ``LOST`` once the lock is lost; ``renew_now`` asks the
  server directly (a verify that does not trust the local belief).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import itertools
import os
import select
import socket
import stat as stat_mod
import struct
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from lockfs.errors import (
    BadLocation,
    LockFsError,
    LockLostError,
    VolumeIOError,
    VolumeNotFound,
    VolumePermissionError,
    VolumeStalled,
)
from lockfs.nfs4probe import LeaseProbeError, server_lease
from lockfs.volume import WHOLE_FILE, FileHead, FileStat, LockMode, Reachability, Volume, VolumeFile

DEFAULT_LEASE = 90.0
NFS_PORT = 2049
_ALL = 2**64 - 1  # NFSv4 lock length "to the end of the file" (l_len = 0 is rejected)
# libnfs 4.0.0 encodes a COMPOUND into a fixed 4 KiB buffer: larger WRITEs fail to encode
_WRITE_CHUNK = 3584
# servers cap a READ at their maximum read size (ganesha: 1 MiB); a larger one breaks the
# connection ("nfs_service failed") instead of returning a short read
_READ_CHUNK = 1 << 20

# enum nfs4_fcntl_op / nfs4_lock_op and struct nfs4_flock l_type values (libnfs.h)
_NFS4_F_SETLK = 0
_NFS4_F_TEST = 3
_F_RDLCK, _F_WRLCK, _F_UNLCK = 0, 1, 2

# NFSv4 statuses whose meaning is "the state this call named is gone"
_STATE_GONE = ("NFS4ERR_EXPIRED", "NFS4ERR_BAD_STATEID", "NFS4ERR_STALE_STATEID",
               "NFS4ERR_STALE_CLIENTID", "NFS4ERR_ADMIN_REVOKED")


# --------------------------------------------------------------------------- location
@dataclass(frozen=True)
class Nfs4Location:
    """A parsed ``nfs4://`` URL."""

    server: str
    port: int
    export: str  # "/export"
    root: str  # "" or "/dir/sub" inside the export
    lease: float | None  # from ?lease=, None when absent
    timeout: int | None  # from ?timeout=, None when absent


def parse_nfs4_url(url: str) -> Nfs4Location:
    """Split ``nfs4://server[:port]/export[/dir...][?lease=N&timeout=N]``.

    Raises :class:`BadLocation` for anything else (another scheme, no server, a path
    with ``..``, an unknown or malformed option).
    """
    if not url.startswith("nfs4://"):
        raise BadLocation(f"not an nfs4:// URL: {url!r}")
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # e.g. an unclosed [ of an IPv6 address
        raise BadLocation(f"{url}: {exc}") from None
    if parts.fragment:
        raise BadLocation(f"{url}: a URL fragment (#...) is not allowed")
    try:
        host = parts.hostname
        port = parts.port
    except ValueError as exc:
        raise BadLocation(f"{url}: bad server or port ({exc})") from None
    if not host:
        raise BadLocation(f"{url}: no server named")
    if parts.username is not None or parts.password is not None:
        raise BadLocation(f"{url}: user names are not supported")
    comps = [unquote(c) for c in parts.path.split("/") if c]
    if any(c in (".", "..") for c in comps):
        raise BadLocation(f"{url}: '.' and '..' are not allowed in the path")
    if not comps:
        raise BadLocation(f"{url}: no export named (nfs4://server/export/...)")
    lease: float | None = None
    timeout: int | None = None
    try:
        query = parse_qs(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError as exc:
        raise BadLocation(f"{url}: bad query ({exc})") from None
    for key, values in query.items():
        if len(values) != 1:
            raise BadLocation(f"{url}: option {key!r} given more than once")
        value = values[0]
        try:
            if key == "lease":
                lease = float(value)
                if not 0 < lease <= 3600:
                    raise ValueError("out of range")
            elif key == "timeout":
                timeout = int(value)
                if not 1 <= timeout <= 3600:
                    raise ValueError("out of range")
            else:
                raise BadLocation(f"{url}: unknown option {key!r} (lease, timeout)")
        except ValueError:
            raise BadLocation(f"{url}: bad {key} value {value!r}") from None
    return Nfs4Location(
        server=host,
        port=port if port is not None else NFS_PORT,
        export="/" + comps[0],
        root="".join("/" + c for c in comps[1:]),
        lease=lease,
        timeout=timeout,
    )


def lease_margin(lease: float) -> float:
    """Seconds of a lease the holder does not count on: 1 s because servers may keep lease
    times in whole seconds (nfs-ganesha stores ``time(NULL)`` at each renewal, so a lease
    can end up to a second early; seen here as a hand-off 0.1 s before the full lease
    after the last renewal was sent), plus 5% for clock rates and scheduling; at most
    half the lease."""
    return min(1.0 + 0.05 * lease, lease / 2)


def default_timeout(lease: float) -> int:
    """Seconds allowed per call: about a third of the lease, 1..30."""
    return int(max(1, min(30, round(lease / 3))))


# --------------------------------------------------------------------------- libnfs
class _NfsStat64(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "dev", "ino", "mode", "nlink", "uid", "gid", "rdev", "size", "blksize", "blocks",
        "atime", "mtime", "ctime", "atime_nsec", "mtime_nsec", "ctime_nsec", "used")]


class _NfsStatvfs64(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "bsize", "frsize", "blocks", "bfree", "bavail", "files", "ffree", "favail", "fsid",
        "flag", "namemax")]


class _Nfs4Flock(ctypes.Structure):
    _fields_ = [("l_type", ctypes.c_int), ("l_whence", ctypes.c_int),
                ("l_pid", ctypes.c_uint32), ("l_start", ctypes.c_uint64),
                ("l_len", ctypes.c_uint64)]


class _NfsDirent(ctypes.Structure):
    pass


_NfsDirent._fields_ = [("next", ctypes.POINTER(_NfsDirent)), ("name", ctypes.c_char_p)]

# ---------------------------------------------------------------- raw COMPOUNDs (fence)
# Namespace calls (RENAME, REMOVE) carry no stateid, so no lease can refuse them. A fenced
# one is sent as one COMPOUND that starts with RENEW(clientid of the anchor's lock): the
# server runs a COMPOUND's operations in order and stops at the first failure, so once the
# anchor's lease has expired (before anyone else can be granted its lock) the RENEW fails
# with NFS4ERR_EXPIRED and the RENAME or REMOVE behind it is never carried out.
# Layouts of libnfs 4.0.0's generated XDR structs (nfs4/libnfs-raw-nfs4.h, x86-64 LP64).
_OP_LOOKUP, _OP_PUTROOTFH, _OP_REMOVE, _OP_RENAME, _OP_RENEW, _OP_SAVEFH = 15, 24, 28, 29, 30, 32
_OP_GETATTR, _OP_READ = 9, 25
_OP_NAMES = {_OP_LOOKUP: "LOOKUP", _OP_PUTROOTFH: "PUTROOTFH", _OP_REMOVE: "REMOVE",
             _OP_RENAME: "RENAME", _OP_RENEW: "RENEW", _OP_SAVEFH: "SAVEFH",
             _OP_GETATTR: "GETATTR", _OP_READ: "READ"}
# GETATTR of a file's type and size (FATTR4_TYPE 1, FATTR4_SIZE 4: one bitmap word, the
# values XDR-encoded in bit order); NF4REG, a regular file
_TYPE_AND_SIZE = (1 << 1) | (1 << 4)
_NF4REG = 1
# nfsstat4 values the fence cares about (RFC 7530)
_NFS4_STATUS = {2: "NFS4ERR_NOENT", 13: "NFS4ERR_ACCESS", 17: "NFS4ERR_EXIST",
                20: "NFS4ERR_NOTDIR", 21: "NFS4ERR_ISDIR", 30: "NFS4ERR_ROFS",
                66: "NFS4ERR_NOTEMPTY", 10011: "NFS4ERR_EXPIRED",
                10022: "NFS4ERR_STALE_CLIENTID", 10047: "NFS4ERR_ADMIN_REVOKED",
                10008: "NFS4ERR_DELAY", 10013: "NFS4ERR_GRACE"}
_RESOP_SIZE = 160  # sizeof(nfs_resop4); its status is the union's first field (offset 8)


class _XdrOpaque(ctypes.Structure):
    """utf8string / component4 / nfs_fh4: a counted byte string."""

    _fields_ = [("len", ctypes.c_uint32), ("val", ctypes.c_void_p)]


class _ArgOp(ctypes.Structure):
    """nfs_argop4: the operation number, then the union of all operations' arguments."""

    _fields_ = [("argop", ctypes.c_uint32), ("_pad", ctypes.c_uint32),
                ("u", ctypes.c_uint8 * 128)]


class _ArgArray(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint32), ("val", ctypes.POINTER(_ArgOp))]


class _Compound4Args(ctypes.Structure):
    _fields_ = [("tag", _XdrOpaque), ("minorversion", ctypes.c_uint32),
                ("argarray", _ArgArray)]


assert ctypes.sizeof(_ArgOp) == 136 and ctypes.sizeof(_Compound4Args) == 40

# void (*rpc_cb)(struct rpc_context *rpc, int status, void *data, void *private_data)
_RpcCallback = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                ctypes.c_void_p)
# answers by request number; one callback for the process lifetime, since libnfs may call
# it for a request given up on (timed out) long after the caller returned
_answers: dict[int, Any] = {}
_answer_ids = itertools.count(1)


def _on_compound(_rpc: int | None, status: int, data: int | None, private: int | None) -> None:
    key = int(private or 0)
    if status != 0 or not data:  # RPC_STATUS_ERROR / CANCEL / TIMEOUT
        _answers[key] = (-1, -1, f"rpc status {status}")
        return
    nfs_status = ctypes.c_int32.from_address(data).value
    count = ctypes.c_uint32.from_address(data + 24).value
    ops = ctypes.c_void_p.from_address(data + 32).value
    last_op = last_status = -1
    if count and ops:
        last = ops + (count - 1) * _RESOP_SIZE
        last_op = ctypes.c_uint32.from_address(last).value
        last_status = ctypes.c_int32.from_address(last + 8).value
    _answers[key] = (nfs_status, last_op, _OP_NAMES.get(last_op, str(last_op))
                     if last_status != 0 or nfs_status != 0 else "")


_on_compound_c = _RpcCallback(_on_compound)


@dataclass(frozen=True)
class _HeadAnswer:
    """A read-head COMPOUND's answer (:meth:`Nfs4Volume.read_heads`): the COMPOUND's
    status (-1: no answer), and, where GETATTR and READ succeeded, the file's type and
    size and the bytes read."""

    status: int
    ftype: int | None = None
    size: int | None = None
    data: bytes | None = None


def _on_head(_rpc: int | None, status: int, data: int | None, private: int | None) -> None:
    key = int(private or 0)
    if status != 0 or not data:
        _answers[key] = _HeadAnswer(-1)
        return
    try:
        ftype = size = None
        payload = None
        count = ctypes.c_uint32.from_address(data + 24).value
        ops = ctypes.c_void_p.from_address(data + 32).value or 0
        for i in range(count if ops else 0):
            op = ops + i * _RESOP_SIZE
            if ctypes.c_int32.from_address(op + 8).value != 0:
                break
            num = ctypes.c_uint32.from_address(op).value
            if num == _OP_GETATTR:  # GETATTR4resok: fattr4 {bitmap4, attrlist4} at +16
                mask_len = ctypes.c_uint32.from_address(op + 16).value
                mask_at = ctypes.c_void_p.from_address(op + 24).value
                vals_len = ctypes.c_uint32.from_address(op + 32).value
                vals_at = ctypes.c_void_p.from_address(op + 40).value
                mask = ctypes.c_uint32.from_address(mask_at).value if mask_len and mask_at \
                    else 0
                if mask == _TYPE_AND_SIZE and vals_len >= 12 and vals_at:
                    ftype, size = struct.unpack(">IQ", ctypes.string_at(vals_at, 12))
            elif num == _OP_READ:  # READ4resok: eof, then data {len, val} at +24
                data_len = ctypes.c_uint32.from_address(op + 24).value
                data_at = ctypes.c_void_p.from_address(op + 32).value
                payload = ctypes.string_at(data_at, data_len) if data_len and data_at \
                    else b""
        _answers[key] = _HeadAnswer(ctypes.c_int32.from_address(data).value, ftype, size,
                                    payload)
    except Exception:  # nothing may escape into libnfs; the caller reads the file
        _answers[key] = _HeadAnswer(-1)  # the ordinary way instead


_on_head_c = _RpcCallback(_on_head)


class _Ops:
    """A COMPOUND being built; keeps every buffer its arguments point at alive."""

    def __init__(self) -> None:
        self.ops: list[tuple[int, bytes]] = []
        self._keep: list[object] = []

    def _opaque(self, raw: bytes) -> bytes:
        buf = ctypes.create_string_buffer(raw, len(raw) or 1)
        self._keep.append(buf)
        return bytes(_XdrOpaque(len(raw), ctypes.addressof(buf)))

    def renew(self, clientid: int) -> None:
        self.ops.append((_OP_RENEW, struct.pack("<Q", clientid)))

    def lookup_path(self, comps: list[str]) -> None:
        self.ops.append((_OP_PUTROOTFH, b""))
        for comp in comps:
            self.ops.append((_OP_LOOKUP, self._opaque(comp.encode("utf-8", "surrogateescape"))))

    def savefh(self) -> None:
        self.ops.append((_OP_SAVEFH, b""))

    def rename(self, old: str, new: str) -> None:
        self.ops.append((_OP_RENAME, self._opaque(old.encode("utf-8", "surrogateescape"))
                         + self._opaque(new.encode("utf-8", "surrogateescape"))))

    def remove(self, name: str) -> None:
        self.ops.append((_OP_REMOVE, self._opaque(name.encode("utf-8", "surrogateescape"))))

    def getattr(self, mask: int) -> None:
        words = (ctypes.c_uint32 * 1)(mask)
        self._keep.append(words)
        self.ops.append((_OP_GETATTR, struct.pack("<I4xQ", 1, ctypes.addressof(words))))

    def read(self, offset: int, count: int) -> None:
        # with the anonymous stateid (all zeros), which a READ may carry without an OPEN
        # (RFC 7530, 9.1.4.3): no open state to make and close for a few bytes
        self.ops.append((_OP_READ, struct.pack("<I12sQI", 0, bytes(12), offset, count)))

    def args(self) -> _Compound4Args:
        arr = (_ArgOp * len(self.ops))()
        for i, (num, raw) in enumerate(self.ops):
            arr[i].argop = num
            ctypes.memmove(ctypes.addressof(arr[i].u), raw, len(raw))
        self._keep.append(arr)
        return _Compound4Args(_XdrOpaque(0, None), 0,
                              _ArgArray(len(self.ops), ctypes.cast(arr, ctypes.POINTER(_ArgOp))))


_lib: ctypes.CDLL | None = None
_lib_lock = threading.Lock()


def _libnfs() -> ctypes.CDLL:
    """Load libnfs once and declare the functions used."""
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        name = os.environ.get("MIQM_LIBNFS") or "libnfs.so.13"
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            found = ctypes.util.find_library("nfs")
            if not found:
                raise BadLocation("libnfs (libnfs.so.13) is not installed: apt-get install "
                                  "libnfs13, or use a mounted path") from None
            lib = ctypes.CDLL(found)
        vp, cp, i, u64 = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint64
        sigs: dict[str, tuple[object, list[object]]] = {
            "nfs_init_context": (vp, []),
            "nfs_destroy_context": (None, [vp]),
            "nfs4_set_client_name": (None, [vp, cp]),
            "nfs_set_version": (i, [vp, i]),
            "nfs_set_timeout": (None, [vp, i]),
            "nfs_set_autoreconnect": (None, [vp, i]),
            "nfs_set_tcp_syncnt": (None, [vp, i]),
            "nfs_parse_url_incomplete": (vp, [vp, cp]),
            "nfs_destroy_url": (None, [vp]),
            "nfs_get_error": (cp, [vp]),
            "nfs_get_fd": (i, [vp]),
            "nfs_mount": (i, [vp, cp, cp]),
            "nfs_open2": (i, [vp, cp, i, i, ctypes.POINTER(vp)]),
            "nfs_close": (i, [vp, vp]),
            "nfs_pread": (i, [vp, vp, u64, u64, vp]),
            "nfs_pwrite": (i, [vp, vp, u64, u64, vp]),
            "nfs_fsync": (i, [vp, vp]),
            "nfs_fstat64": (i, [vp, vp, ctypes.POINTER(_NfsStat64)]),
            "nfs_ftruncate": (i, [vp, vp, u64]),
            "nfs_stat64": (i, [vp, cp, ctypes.POINTER(_NfsStat64)]),
            "nfs_statvfs64": (i, [vp, cp, ctypes.POINTER(_NfsStatvfs64)]),
            "nfs_opendir": (i, [vp, cp, ctypes.POINTER(vp)]),
            "nfs_readdir": (ctypes.POINTER(_NfsDirent), [vp, vp]),
            "nfs_closedir": (None, [vp, vp]),
            "nfs_mkdir2": (i, [vp, cp, i]),
            "nfs_rename": (i, [vp, cp, cp]),
            "nfs_unlink": (i, [vp, cp]),
            "nfs_rmdir": (i, [vp, cp]),
            "nfs_fcntl": (i, [vp, vp, i, ctypes.POINTER(_Nfs4Flock)]),
            "nfs_lockf": (i, [vp, vp, i, u64]),
            "nfs_get_rpc_context": (vp, [vp]),
            "rpc_nfs4_compound_async": (i, [vp, _RpcCallback, vp, vp]),
            "rpc_get_fd": (i, [vp]),
            "rpc_which_events": (i, [vp]),
            "rpc_service": (i, [vp, i]),
        }
        for fname, (restype, argtypes) in sigs.items():
            fn = getattr(lib, fname)
            fn.restype = restype
            fn.argtypes = argtypes
        _lib = lib
        return lib


def _abort_on_close(fd: int) -> None:
    """Make closing the connection (or the process dying) reset it, dropping unsent data.

    Otherwise the kernel keeps retransmitting a WRITE still queued when the process
    ended, and once a cut link heals it can reach the server after another instance has
    taken over. Socket options belong to the socket, so setting them on a duplicate
    descriptor is enough."""
    if fd < 0:
        return
    dup = os.dup(fd)
    try:
        sock = socket.socket(fileno=dup)
    except OSError:
        os.close(dup)
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    finally:
        sock.close()  # the duplicate only: the connection stays open on libnfs's descriptor


_names = itertools.count(1)
_host = socket.gethostname()
_boot = uuid.uuid4().hex[:12]


def _client_name() -> str:
    """A name no other context (of this or any process) uses: the NFSv4 client id."""
    return f"miqm/{_host}/{os.getpid()}/{_boot}/{next(_names)}"


class _Failure(Exception):
    """A libnfs call failed: ``status`` is its negative errno, ``text`` nfs_get_error."""

    def __init__(self, status: int, text: str, what: str) -> None:
        super().__init__(f"{what}: {text or os.strerror(-status)}")
        self.status = status
        self.text = text
        self.what = what

    @property
    def timed_out(self) -> bool:
        return self.status == -errno.EINTR

    @property
    def broken(self) -> bool:
        """The connection (not the operation) failed: the context is unusable."""
        return self.timed_out or self.status == -errno.EFAULT or (
            self.status == -errno.EIO and "nfs_service" in self.text)

    @property
    def denied(self) -> bool:
        return "NFS4ERR_DENIED" in self.text

    @property
    def state_gone(self) -> bool:
        return any(s in self.text for s in _STATE_GONE)

    def to_lockfs(self, path: str) -> LockFsError:
        """The lockfs exception for this failure."""
        msg = str(self)
        code = -self.status if self.status < 0 else None
        if self.timed_out:
            return VolumeStalled(f"{msg} (no answer from the NFS server in time)",
                                 errno=errno.ETIMEDOUT, path=path)
        if self.status == -errno.ENOENT or "NFS4ERR_NOENT" in self.text:
            return VolumeNotFound(msg, errno=errno.ENOENT, path=path)
        if self.status in (-errno.EACCES, -errno.EPERM, -errno.EROFS) or any(
                s in self.text for s in ("NFS4ERR_ACCESS", "NFS4ERR_PERM", "NFS4ERR_ROFS")):
            return VolumePermissionError(msg, errno=code, path=path)
        if self.state_gone:
            return LockLostError(msg, errno=code, path=path)
        return VolumeIOError(msg, errno=code, path=path)


class _IdleStateGone(Exception):
    """A first lock on an idle file met client state that had run out (try_lock opens
    the file again and retries once)."""


class _Context:
    """One libnfs context: one NFSv4 client, one TCP connection, mounted on the export.

    libnfs contexts are not thread-safe: every call goes through :meth:`call`, which holds
    ``mutex`` (ctypes drops the GIL during the call).
    """

    def __init__(self, loc: Nfs4Location, timeout: int) -> None:
        lib = _libnfs()
        self.lib = lib
        self.mutex = threading.Lock()
        self.name = _client_name()
        self.lock_tried = False
        #: monotonic time the last reply on this context came in (the server's lease for
        #: this client was renewed no later than that); set once mounted, then per call
        self.answered = time.monotonic()
        ptr = lib.nfs_init_context()
        if not ptr:
            raise VolumeIOError("libnfs: cannot create a context")
        self.ptr: int | None = ptr
        try:
            lib.nfs4_set_client_name(ptr, self.name.encode())
            if lib.nfs_set_version(ptr, 4) != 0:
                raise VolumeIOError("libnfs: NFSv4 not supported by this libnfs")
            lib.nfs_set_timeout(ptr, timeout * 1000)
            lib.nfs_set_autoreconnect(ptr, 0)
            lib.nfs_set_tcp_syncnt(ptr, 1 if timeout <= 3 else 2)
            if loc.port != NFS_PORT:
                url = lib.nfs_parse_url_incomplete(
                    ptr, f"nfs://{loc.server}/?nfsport={loc.port}".encode())
                if url:
                    lib.nfs_destroy_url(url)
            host = loc.server.encode()
            self.check(lib.nfs_mount(ptr, host, loc.export.encode()),
                       f"mount {loc.server}:{loc.export}")
            _abort_on_close(lib.nfs_get_fd(ptr))
            self.answered = time.monotonic()
        except _Failure as exc:
            self.destroy()
            raise exc.to_lockfs(f"{loc.server}:{loc.export}") from None
        except BaseException:
            self.destroy()
            raise

    def check(self, rc: int, what: str) -> int:
        """``rc`` if it is not an error, else raise :class:`_Failure`."""
        if rc < 0:
            text = ""
            if self.ptr:
                raw = self.lib.nfs_get_error(self.ptr)
                text = raw.decode("utf-8", "replace") if raw else ""
            raise _Failure(rc, text, what)
        return rc

    def call(self, what: str, fn_name: str, *args: object) -> int:
        """Call libnfs ``fn_name(ctx, *args)`` under the mutex; raise on failure."""
        with self.mutex:
            if not self.ptr:
                raise _Failure(-errno.EBADF, "context closed", what)
            try:
                rc = getattr(self.lib, fn_name)(self.ptr, *args)
            finally:
                self.answered = time.monotonic()
            return self.check(rc, what)

    def clientid(self) -> int | None:
        """The NFSv4 client id the server gave this context, or None if it cannot be read.

        libnfs 4.0.0 has no getter: it is read from ``struct nfs_context`` at the offset of
        that version (client_name at 120, clientid at 128), and trusted only if the
        client name found next to it is the one this context set."""
        with self.mutex:
            if not self.ptr:
                return None
            try:
                name_ptr = ctypes.c_void_p.from_address(self.ptr + 120).value
                if not name_ptr or ctypes.string_at(name_ptr) != self.name.encode():
                    return None
                return int(ctypes.c_uint64.from_address(self.ptr + 128).value) or None
            except (ValueError, OSError):
                return None

    def exchange(self, what: str, batch: list[_Ops], callback: object,
                 timeout: float) -> list[Any]:
        """Send every COMPOUND of ``batch`` on this context's connection, one after the
        other without waiting (the server answers them in one round trip's time), and
        wait for all their answers (what ``callback`` left in ``_answers``), in order;
        :class:`_Failure` if they do not all come in time (-EINTR, as libnfs' own calls
        do) or the connection fails."""
        lib = self.lib
        keys = [next(_answer_ids) for _ in batch]
        args = [ops.args() for ops in batch]
        with self.mutex:
            if not self.ptr:
                raise _Failure(-errno.EBADF, "context closed", what)
            try:
                rpc = lib.nfs_get_rpc_context(self.ptr)
                for key, arg in zip(keys, args, strict=True):
                    if lib.rpc_nfs4_compound_async(rpc, callback, ctypes.byref(arg), key) != 0:
                        raise _Failure(-errno.EIO, "cannot queue the COMPOUND", what)
                deadline = time.monotonic() + timeout
                waiting = len(keys) - 1
                while waiting >= 0:
                    if keys[waiting] in _answers:
                        waiting -= 1
                        continue
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise _Failure(-errno.EINTR, "no answer in time", what)
                    poller = select.poll()
                    poller.register(lib.rpc_get_fd(rpc), lib.rpc_which_events(rpc))
                    got = poller.poll(min(100, max(1, int(left * 1000))))
                    if lib.rpc_service(rpc, got[0][1] if got else 0) < 0:
                        raise _Failure(-errno.EIO, "nfs_service failed", what)
            except BaseException:
                for key in keys:
                    _answers.pop(key, None)
                raise
            finally:
                self.answered = time.monotonic()
        return [_answers.pop(key) for key in keys]

    def compound(self, what: str, ops: _Ops, timeout: float) -> None:
        """Send ``ops`` as one COMPOUND on this context's connection and wait for the
        answer; raise :class:`_Failure` (text naming the failed operation's status) if any
        operation failed, or the call timed out (-EINTR, as libnfs' own calls do)."""
        status, _op, failed_op = self.exchange(what, [ops], _on_compound_c, timeout)[0]
        if status != 0:
            name = _NFS4_STATUS.get(status, f"status {status}")
            rc = -errno.ENOENT if status == 2 else -errno.ERANGE
            if status == -1:
                raise _Failure(-errno.EIO, f"nfs_service failed ({failed_op})", what)
            raise _Failure(rc, f"{failed_op} failed: {name}", what)

    def destroy(self) -> None:
        """Free the context (no RPC is sent; state on the server expires with the lease)."""
        with self.mutex:
            ptr, self.ptr = self.ptr, None
            if ptr:
                self.lib.nfs_destroy_context(ptr)


# --------------------------------------------------------------------------- files
class Nfs4File(VolumeFile):
    """A file opened over NFSv4 in a context of its own; see the module docstring."""

    def __init__(self, volume: Nfs4Volume, rel: str, full: str, ctx: _Context,
                 fh: int) -> None:
        self.volume = volume
        self.path = rel
        self._full = full
        self._ctx = ctx
        self._fh: int | None = fh
        self._mutex = threading.RLock()  # guards _ctx/_fh swaps and the lock state
        self._locks: dict[tuple[int, int], LockMode] = {}
        self._lost = False
        self._lost_why = ""
        self._last_ok = 0.0  # monotonic send time of the last call that renewed the lease
        self._trouble: float | None = None  # since when calls time out or fail (SUSPECT)
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._ino: int | None = None  # the server's file id, once known
        #: the NFSv4 client id that holds this file's lock (fenced namespace calls renew it)
        self._lock_clientid: int | None = None

    # ---------------------------------------------------------------- helpers
    def _ensure_open(self) -> tuple[_Context, int]:
        if self._fh is None:
            raise VolumeIOError(f"{self._full}: file is closed", errno=errno.EBADF,
                                path=self._full)
        if self._locks and self.lock_lost():
            raise LockLostError(f"the lock on {self._full} was lost ({self._lost_why})",
                                path=self._full)
        return self._ctx, self._fh

    def _anchor(self, ctx: _Context, send: tuple[int, bytes] | None) -> None:
        """Before a write through an unlocked file: the volume's ``lease_anchor`` renewed
        at the server after this context's last reply (so this file's client lease ends
        no later than the anchor's lock), then the test-only ``before_send`` hook."""
        anchor = self.volume.lease_anchor
        if anchor is not None and not self._locks:
            anchor.renew_after(ctx.answered)
        hook = self.volume.before_send
        if hook is not None and send is not None:
            hook("pwrite", self.path, send[0], send[1])

    def _io(self, what: str, fn_name: str, *args: object, renews: bool = False,
            writes: bool = False, anchored: bool = False,
            send: tuple[int, bytes] | None = None) -> int:
        """One call on the file's handle with its error mapping and lease bookkeeping.

        An unlocked file whose client state is gone is opened again and the call retried
        once; for a write (``writes``) the volume's ``write_fence`` must pass first: state
        that ran out while this process was stopped is exactly when another process may
        have taken the data over, and the new state would let the late write land.
        An ``anchored`` call (one that writes data: WRITE, SETATTR size) first has the
        volume's lease anchor renewed after this file's previous reply (:meth:`_anchor`)."""
        with self._mutex:
            ctx, fh = self._ensure_open()
            if anchored:
                self._anchor(ctx, send)
            sent = time.monotonic()
            try:
                rc = ctx.call(f"{what} {self._full}", fn_name, fh, *args)
            except _Failure as exc:
                if exc.broken and self._trouble is None:
                    self._trouble = time.monotonic()
                if self._locks and exc.state_gone:
                    raise self._lost_lock(exc) from None
                if self._idle_state_gone(exc):
                    # an idle unlocked file's client lease ran out: open it again, retry once
                    if writes and self.volume.write_fence is not None:
                        self.volume.write_fence()
                    self._reopen()
                    if anchored:
                        self._anchor(self._ctx, send)
                    try:
                        return self._ctx.call(f"{what} {self._full}", fn_name, self._fh,
                                              *args)
                    except _Failure as again:
                        raise again.to_lockfs(self._full) from None
                raise exc.to_lockfs(self._full) from None
            if renews and self._locks:
                self._last_ok = max(self._last_ok, sent)
            self._trouble = None
            return rc

    def _lost_lock(self, exc: _Failure) -> LockLostError:
        """The server no longer knows the state this file's locks hang on: mark them lost;
        the error to raise."""
        self._mark_lost(exc.text)
        return LockLostError(f"the lock on {self._full} was lost: {exc.text}", path=self._full)

    def _idle_state_gone(self, exc: _Failure) -> bool:
        """Whether a failed call on this file, which holds no lock, met client state
        that ran out while the file was idle (or a connection that broke): worth one
        retry on a new open. A timeout is not: the server may be stalled."""
        return not self._locks and (exc.state_gone or exc.broken) and not exc.timed_out

    def _reopen(self) -> None:
        ctx, fh = self.volume._open_ctx(self._full, create=False)
        if self._ino is not None:
            st = _NfsStat64()
            try:
                ctx.call(f"stat {self._full}", "nfs_fstat64", fh, ctypes.byref(st))
            except _Failure as exc:
                ctx.destroy()
                raise exc.to_lockfs(self._full) from None
            if int(st.ino) != self._ino:
                # the path now names another file: reading it would be reading a stranger
                ctx.destroy()
                raise VolumeIOError(f"{self._full}: the open file was replaced or removed "
                                    "while its client state had expired",
                                    errno=errno.ESTALE, path=self._full)
        old = self._ctx
        self._ctx, self._fh = ctx, fh
        old.destroy()

    def remember_identity(self) -> None:
        """Note the file's id, so that opening it again by path can tell it is the same."""
        st = _NfsStat64()
        try:
            with self._mutex:
                ctx, fh = self._ensure_open()
                ctx.call(f"stat {self._full}", "nfs_fstat64", fh, ctypes.byref(st))
        except _Failure:
            return  # unknown: a reopen then trusts the path, as before
        self._ino = int(st.ino)

    def file_id(self) -> int | None:
        """The server's fileid, noted when the file was opened (None if that stat
        failed): the server keeps an open file's id from being reused."""
        return self._ino

    def follow_rename(self, src_full: str, dst_full: str, src: str, dst: str) -> None:
        """The file (or a directory above it) was renamed: carry its paths along."""
        with self._mutex:
            self._full = dst_full + self._full[len(src_full):]
            if self.path == src or self.path.startswith(src + "/"):
                self.path = dst + self.path[len(src):]

    def _mark_lost(self, why: str) -> None:
        if not self._lost:
            self._lost = True
            self._lost_why = why
        self._stop.set()

    # ---------------------------------------------------------------- data
    def pread(self, size: int, offset: int) -> bytes:
        # one buffer for every call of this read, each piece copied once
        buf = ctypes.create_string_buffer(min(size, _READ_CHUNK))
        n = self._io("read", "nfs_pread", offset, len(buf), buf, renews=True) if size else 0
        if n <= 0:
            return b""
        if n >= size:  # the common case: one call
            return ctypes.string_at(buf, size)
        out = bytearray(memoryview(buf)[:n])
        while len(out) < size:
            want = min(size - len(out), _READ_CHUNK)
            n = self._io("read", "nfs_pread", offset + len(out), want, buf, renews=True)
            if n <= 0:
                break
            out += memoryview(buf)[:n]
        return bytes(out)

    def pwrite(self, data: bytes | bytearray | memoryview, offset: int) -> None:
        raw = bytes(data)
        done = 0
        while done < len(raw):
            chunk = raw[done:done + _WRITE_CHUNK]
            n = self._io("write", "nfs_pwrite", offset + done, len(chunk), chunk,
                         renews=True, writes=True, anchored=True,
                         send=(offset + done, chunk))
            if n <= 0:
                raise VolumeIOError(f"write {self._full}: server wrote nothing",
                                    errno=errno.EIO, path=self._full)
            done += n

    def fdatasync(self) -> None:
        # COMMIT succeeds even after the lease ran out: _ensure_open checks the lock first
        self._io("fdatasync", "nfs_fsync", writes=True)

    def size(self) -> int:
        st = _NfsStat64()
        self._io("stat", "nfs_fstat64", ctypes.byref(st))
        return int(st.size)

    def truncate(self, size: int) -> None:
        self._io("truncate", "nfs_ftruncate", size, writes=True, anchored=True)

    # ---------------------------------------------------------------- locks
    def try_lock(self, mode: LockMode, start: int = 0, length: int = WHOLE_FILE) -> bool:
        ltype = _F_WRLCK if mode is LockMode.EXCLUSIVE else _F_RDLCK
        span = _ALL if length == WHOLE_FILE else length
        if not self.volume.lease_trusted():
            raise VolumeIOError(
                f"lock {self._full}: the server did not tell its lease and none is "
                f"configured ({self.volume.lease_note}); add ?lease=N (the server's lease "
                "in seconds) to the nfs4:// URL", errno=errno.EIO, path=self._full)
        with self._mutex:
            self._ensure_open()
            if self._locks:
                # convert or add a range through the context that holds the others
                return self._lock_in(self._ctx, self._fh, ltype, start, span, mode, length)
            if mode is LockMode.EXCLUSIVE and self._ctx.lock_tried and self.conflicting_lock(
                    mode, start, length):
                return False  # LOCKT: refused without spending a fresh context
            if not self._ctx.lock_tried:
                try:
                    return self._lock_in(self._ctx, self._fh, ltype, start, span, mode,
                                         length, idle_retry=True)
                except _IdleStateGone:
                    # the open's state ran out while idle: a new open takes the lock
                    self._reopen()
                    return self._lock_in(self._ctx, self._fh, ltype, start, span, mode,
                                         length)
            ctx, fh = self.volume._open_ctx(self._full, create=False)
            try:
                got = self._lock_in(ctx, fh, ltype, start, span, mode, length)
            except BaseException:
                ctx.destroy()
                raise
            if not got:
                ctx.destroy()  # its open state expires with its lease
                return False
            old = self._ctx
            self._ctx, self._fh = ctx, fh
            old.destroy()
            return True

    def _lock_in(self, ctx: _Context, fh: int | None, ltype: int, start: int, span: int,
                 mode: LockMode, length: int, idle_retry: bool = False) -> bool:
        ctx.lock_tried = True
        fl = _Nfs4Flock(ltype, os.SEEK_SET, 0, start, span)
        sent = time.monotonic()
        try:
            ctx.call(f"lock {self._full}", "nfs_fcntl", fh, _NFS4_F_SETLK, ctypes.byref(fl))
        except _Failure as exc:
            if exc.denied:
                return False
            if idle_retry and self._idle_state_gone(exc):
                raise _IdleStateGone() from None
            if self._locks and exc.state_gone:
                self._mark_lost(exc.text)
            raise exc.to_lockfs(self._full) from None
        if not self._locks:
            self._lost = False
            self._lost_why = ""
            self._lock_clientid = ctx.clientid()
        self._last_ok = sent
        self._trouble = None
        self._locks[(start, length)] = mode
        self._start_renewer()
        return True

    def unlock(self, start: int = 0, length: int = WHOLE_FILE) -> None:
        span = _ALL if length == WHOLE_FILE else length
        with self._mutex:
            if self._fh is None or (start, length) not in self._locks:
                return
            del self._locks[(start, length)]
            if not self._locks:
                self._stop.set()
            if self._lost:
                return  # nothing to release: the server already dropped it
            fl = _Nfs4Flock(_F_UNLCK, os.SEEK_SET, 0, start, span)
            try:
                self._ctx.call(f"unlock {self._full}", "nfs_fcntl", self._fh, _NFS4_F_SETLK,
                               ctypes.byref(fl))
            except _Failure as exc:
                if exc.state_gone:
                    return  # expired: released all the same
                raise exc.to_lockfs(self._full) from None

    def lease_age(self) -> float | None:
        if not self._locks:
            return None
        return time.monotonic() - self._last_ok

    def lock_lost(self) -> bool:
        if not self._lost and self._locks:
            trusted = self.volume.trusted_lease
            if time.monotonic() - self._last_ok >= trusted:
                self._mark_lost(f"no lease renewal answered for {trusted:g}s (lease "
                                f"{self.volume.lease_seconds:g}s less the safety margin)")
        return self._lost

    def reachability(self) -> Reachability:
        """``LOST`` once the lock is lost; ``SUSPECT`` while calls on this file fail or
        time out, or a lease renewal is overdue (no renewal answered for lease/3 plus a
        margin) although the lease may still hold; else ``OK``. Never blocks."""
        if self.lock_lost():
            return Reachability.LOST
        if self._trouble is not None:
            return Reachability.SUSPECT
        if self._locks:
            period = (self.volume.lease_seconds or DEFAULT_LEASE) / 3
            if time.monotonic() - self._last_ok > period + min(period / 2, 2.0):
                return Reachability.SUSPECT
        return Reachability.OK

    def renew_now(self) -> bool:
        """Send one READ with the lock's stateid now, whatever this side believes, and
        return True if the server accepted it (the lease is renewed).

        False when no lock is held. Raises :class:`LockLostError` when the server says
        the lock state is gone (NFS4ERR_EXPIRED...), :class:`VolumeStalled` when it does
        not answer in time. A lock already taken as lost stays lost even if the server
        still answers: the holder gave up first, and may have told others so.
        """
        with self._mutex:
            if self._fh is None or not self._locks:
                return False
            ctx, fh = self._ctx, self._fh
        buf = ctypes.create_string_buffer(1)
        sent = time.monotonic()
        try:
            ctx.call(f"renew {self._full}", "nfs_pread", fh, 0, 1, buf)
        except _Failure as exc:
            with self._mutex:
                if exc.broken and self._trouble is None:
                    self._trouble = time.monotonic()
                if exc.state_gone:
                    self._mark_lost(exc.text)
                    raise LockLostError(f"the lock on {self._full} was lost: {exc.text}",
                                        path=self._full) from None
            raise exc.to_lockfs(self._full) from None
        with self._mutex:
            if not self._lost:
                self._last_ok = max(self._last_ok, sent)
                self._trouble = None
        return True

    def renew_after(self, since: float) -> None:
        """As :meth:`VolumeFile.renew_after`: nothing to send when a renewal sent after
        ``since`` has already been answered (the renewal thread's, or a READ/WRITE/LOCK
        through this file); else one READ now (:meth:`renew_now`)."""
        with self._mutex:
            fresh = bool(self._locks) and self._last_ok > since
        if fresh and not self.lock_lost():
            return
        if not self.renew_now():
            raise LockLostError(f"{self._full}: the lease anchor holds no lock",
                                path=self._full)
        if self.lock_lost():
            raise LockLostError(f"the lock on {self._full} was lost ({self._lost_why})",
                                path=self._full)

    def can_fence(self) -> bool:
        """True when namespace calls can be fenced by this file's lock (:meth:`fenced`):
        a lock is held and its client id could be read from libnfs."""
        with self._mutex:
            return bool(self._locks) and self._lock_clientid is not None

    def fenced(self, what: str, path: str, build: Callable[[_Ops], None]) -> None:
        """Send the operations ``build`` adds as one COMPOUND behind a RENEW of the
        client that holds this file's lock: once that lease has expired at the server
        (before anyone else can be granted the lock) the server refuses the RENEW and
        carries out nothing behind it. Raises :class:`LockLostError` then."""
        with self._mutex:
            if not self._locks or self._lock_clientid is None:
                raise LockLostError(f"{what}: the lease anchor holds no lock", path=path)
            if self.lock_lost():
                raise LockLostError(f"the lock on {self._full} was lost ({self._lost_why})",
                                    path=path)
            ctx, clientid = self._ctx, self._lock_clientid
        ops = _Ops()
        ops.renew(clientid)
        build(ops)
        timeout = float(self.volume.timeout or 10)
        sent = time.monotonic()
        try:
            ctx.compound(what, ops, timeout)
        except _Failure as exc:
            if exc.text.startswith("RENEW failed") and exc.state_gone:
                with self._mutex:
                    self._mark_lost(exc.text)
                raise LockLostError(f"{what} refused by the server: the lease of the lock on "
                                    f"{self._full} has expired ({exc.text})",
                                    path=path) from None
            if exc.broken:
                with self._mutex:
                    if self._trouble is None:
                        self._trouble = time.monotonic()
            raise exc.to_lockfs(path) from None
        with self._mutex:
            if not self._lost:
                self._last_ok = max(self._last_ok, sent)
                self._trouble = None

    def conflicting_lock(self, mode: LockMode, start: int = 0, length: int = WHOLE_FILE) -> bool:
        """True if a lock held by another client conflicts with ``mode`` (NFSv4 LOCKT).

        libnfs only tests for a write lock, so a SHARED query also reports other shared
        holders as conflicting; callers ask with EXCLUSIVE ("is it held at all?").
        """
        span = _ALL if length == WHOLE_FILE else length
        with self._mutex:
            self._ensure_open()
            if start != 0:
                raise VolumeIOError("conflicting_lock: only ranges from offset 0 are supported")
            try:
                return self._lock_test(span)
            except _Failure as exc:
                if not self._idle_state_gone(exc):
                    raise exc.to_lockfs(self._full) from None
            # an idle file's client state ran out: a new open asks again, once
            self._reopen()
            try:
                return self._lock_test(span)
            except _Failure as exc:
                raise exc.to_lockfs(self._full) from None

    def _lock_test(self, span: int) -> bool:
        """One LOCKT through the file's context (under ``_mutex``): True if another
        client's lock conflicts; the _Failure itself for anything but a refusal or a held
        lock lost (LockLostError)."""
        try:
            self._ctx.call(f"lock test {self._full}", "nfs_lockf", self._fh, _NFS4_F_TEST,
                           span)
        except _Failure as exc:
            if exc.denied:
                return True
            if self._locks and exc.state_gone:
                raise self._lost_lock(exc) from None
            raise
        return False

    # ---------------------------------------------------------------- renewal
    def _start_renewer(self) -> None:
        if self._renewer is not None and self._renewer.is_alive() and not self._stop.is_set():
            return
        self._stop = threading.Event()
        t = threading.Thread(target=self._renew_loop, args=(self._stop,),
                             name=f"nfs4-renew {self.path}", daemon=True)
        self._renewer = t
        t.start()

    def _renew_loop(self, stop: threading.Event) -> None:
        """READ through the locked handle every lease/3 (sooner after a failure)."""
        lease = self.volume.lease_seconds or DEFAULT_LEASE
        period = lease / 3
        retry = min(period, 0.5)
        buf = ctypes.create_string_buffer(1)
        while not stop.is_set():
            with self._mutex:
                due = self._last_ok + period
            if stop.wait(max(0.0, due - time.monotonic())):
                return
            with self._mutex:
                if stop.is_set() or not self._locks or self._fh is None:
                    return
                if self.lock_lost():
                    return
                ctx, fh = self._ctx, self._fh
            sent = time.monotonic()
            try:
                ctx.call(f"renew {self._full}", "nfs_pread", fh, 0, 1, buf)
            except _Failure as exc:
                with self._mutex:
                    if self._trouble is None:
                        self._trouble = time.monotonic()
                    if exc.state_gone and not stop.is_set():
                        self._mark_lost(exc.text)
                        return
                    self.lock_lost()
                if stop.wait(retry):
                    return
                continue
            with self._mutex:
                if not stop.is_set():
                    self._last_ok = max(self._last_ok, sent)
                    self._trouble = None

    # ---------------------------------------------------------------- close
    def close(self) -> None:
        with self._mutex:
            if self._fh is None:
                return
            self._stop.set()
            if self._locks and not self._lost:
                for (start, length) in list(self._locks):
                    try:
                        self.unlock(start, length)
                    except LockFsError:
                        break  # the lease runs out instead
            self._locks.clear()
            ctx, fh, self._fh = self._ctx, self._fh, None
            try:
                ctx.call(f"close {self._full}", "nfs_close", fh)
            except _Failure:
                pass
            finally:
                ctx.destroy()


# --------------------------------------------------------------------------- volume
class Nfs4Volume(Volume):
    """A volume rooted at a directory of an NFSv4 export, reached through libnfs."""

    concurrent_opens = True  # each open file is a context of its own

    #: seconds between attempts to ask the server its lease while it does not answer
    LEASE_PROBE_RETRY = 5.0

    def __init__(self, location: str, *, lease_seconds: float | None = None,
                 timeout: int | None = None) -> None:
        self.url = location
        self.location = parse_nfs4_url(location)
        configured = self.location.lease or lease_seconds
        self._configured_lease = float(configured) if configured else None
        self._lease = self._configured_lease or DEFAULT_LEASE
        #: where the lease in force came from: "url", "argument", "server" or "default"
        self.lease_source = ("url" if self.location.lease else "argument" if lease_seconds
                             else "default")
        #: a note when the server's lease overrode the configured one, or could not be read
        self.lease_note = ""
        self._lease_known = False  # the server told its lease (or was asked and answered)
        self._probe_at: float | None = None
        self._probe_lock = threading.Lock()
        self._timeout = timeout or self.location.timeout
        self._meta: _Context | None = None
        self._meta_lock = threading.Lock()
        self._meta_trouble: float | None = None
        self._reader: _Context | None = None  # read_bytes / read_head: see the docstring
        self._reader_lock = threading.Lock()
        # open files, so a RENAME can carry their paths along as POSIX fds follow theirs
        # (a file whose client state expired is opened again by path)
        self._open_files: weakref.WeakSet[Nfs4File] = weakref.WeakSet()
        self._open_files_lock = threading.Lock()

    # ---------------------------------------------------------------- lease
    @property  # type: ignore[override]
    def lease_seconds(self) -> float:  # type: ignore[override]
        """The lease locks are held under: the server's own (read over the wire at the
        first connection) unless a shorter one is configured (``?lease=N`` or the
        constructor); the configured one, else 90, until the server has answered."""
        return self._lease

    @lease_seconds.setter
    def lease_seconds(self, value: float) -> None:
        self._configured_lease = float(value)
        self._lease = min(self._lease, float(value)) if self._lease_known else float(value)

    @property
    def trusted_lease(self) -> float:
        """How long after sending a renewal the holder still trusts its lock: the lease
        less :func:`lease_margin` (the server may count from up to a second earlier)."""
        return self._lease - lease_margin(self._lease)

    @property
    def timeout(self) -> int:
        """Seconds allowed per libnfs call (explicit, else about a third of the lease)."""
        return self._timeout or default_timeout(self._lease)

    def learn_lease(self) -> bool:
        """Ask the server its lease (at most every few seconds until it answers) and keep
        the shorter of it and the configured one. True once the server's lease is known.

        A configured lease longer than the server's would let this side trust a lock the
        server has already given away, so the server's wins and ``lease_note`` says so.
        """
        if self._lease_known:
            return True
        with self._probe_lock:
            if self._lease_known:
                return True
            now = time.monotonic()
            if self._probe_at is not None and now - self._probe_at < self.LEASE_PROBE_RETRY:
                return False
            self._probe_at = now
            try:
                server = float(server_lease(self.location.server, self.location.port,
                                            timeout=min(self.timeout, 5)))
            except LeaseProbeError as exc:
                self.lease_note = f"the server did not tell its lease ({exc})"
                return False
            configured = self._configured_lease
            if configured is None:
                self._lease, self.lease_source = server, "server"
                self.lease_note = ""
            elif configured > server:
                self._lease, self.lease_source = server, "server"
                self.lease_note = (f"configured lease {configured:g}s is longer than the "
                                   f"server's {server:g}s: using {server:g}s")
            else:
                self._lease = configured
                self.lease_note = ("" if configured == server else
                                   f"configured lease {configured:g}s is shorter than the "
                                   f"server's {server:g}s: using {configured:g}s")
            self._lease_known = True
            return True

    def lease_trusted(self) -> bool:
        """True when locks may be taken: the server told its lease, or one was configured."""
        return self.learn_lease() or self._configured_lease is not None

    # ---------------------------------------------------------------- helpers
    def _p(self, path: str) -> str:
        if path.startswith("/") or ".." in path.split("/"):
            raise BadLocation(f"path {path!r} escapes the volume {self.url}")
        rel = "/".join(c for c in path.split("/") if c)
        full = f"{self.location.root}/{rel}" if rel else self.location.root
        return full or "/"

    def _new_ctx(self) -> _Context:
        self.learn_lease()
        return _Context(self.location, self.timeout)

    def _meta_ctx(self) -> _Context:
        """The shared metadata context, connected first if need be."""
        with self._meta_lock:
            if self._meta is None:
                try:
                    self._meta = self._new_ctx()
                except (VolumeStalled, VolumeIOError):
                    if self._meta_trouble is None:
                        self._meta_trouble = time.monotonic()
                    raise
            return self._meta

    def _meta_failed(self, ctx: _Context, exc: _Failure) -> None:
        """Bookkeeping after a failed metadata call: a broken context is replaced next
        time and the volume is SUSPECT until a call succeeds."""
        if exc.broken:
            if self._meta_trouble is None:
                self._meta_trouble = time.monotonic()
            with self._meta_lock:
                if self._meta is ctx:
                    self._meta = None
            ctx.destroy()

    def _meta_call(self, what: str, path: str, fn_name: str, *args: object) -> int:
        """A metadata call on the shared context; a broken context is replaced next time."""
        ctx = self._meta_ctx()
        try:
            rc = ctx.call(what, fn_name, *args)
        except _Failure as exc:
            self._meta_failed(ctx, exc)
            raise exc.to_lockfs(path) from None
        self._meta_trouble = None
        return rc

    def reachability(self) -> Reachability:
        """``SUSPECT`` from a metadata call that timed out or broke the connection until
        one succeeds; else ``OK`` (lock state is per file)."""
        return Reachability.OK if self._meta_trouble is None else Reachability.SUSPECT

    def _open_ctx(self, full: str, *, create: bool) -> tuple[_Context, int]:
        """Open ``full`` in a new context; returns (context, file handle)."""
        ctx = self._new_ctx()
        fh = ctypes.c_void_p()
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        try:
            ctx.call(f"open {full}", "nfs_open2", full.encode(), flags, 0o660,
                     ctypes.byref(fh))
        except _Failure as exc:
            ctx.destroy()
            raise exc.to_lockfs(full) from None
        except BaseException:
            ctx.destroy()
            raise
        if not fh.value:
            ctx.destroy()
            raise VolumeIOError(f"open {full}: no file handle", path=full)
        return ctx, fh.value

    # ---------------------------------------------------------------- Volume
    def open(self, path: str, *, create: bool = False, exclusive: bool = False) -> VolumeFile:
        full = self._p(path)
        try:
            st = self.stat(path)
        except VolumeNotFound:
            if not create:
                raise
            try:
                ctx, fh = self._open_ctx(full, create=True)
            except VolumeIOError:
                # created by someone else in between (O_CREAT on an existing file fails)
                if exclusive or not self.exists(path):
                    raise
                ctx, fh = self._open_ctx(full, create=False)
            return self._track(Nfs4File(self, path, full, ctx, fh))
        if create and exclusive:
            raise VolumeIOError(f"open {full}: file exists", errno=errno.EEXIST, path=full)
        if st.is_dir:
            raise VolumeIOError(f"open {full}: is a directory", errno=errno.EISDIR, path=full)
        ctx, fh = self._open_ctx(full, create=False)
        return self._track(Nfs4File(self, path, full, ctx, fh))

    def _track(self, f: Nfs4File) -> Nfs4File:
        f.remember_identity()
        with self._open_files_lock:
            self._open_files.add(f)
        return f

    def stat(self, path: str) -> FileStat:
        full = self._p(path)
        st = _NfsStat64()
        self._meta_call(f"stat {full}", full, "nfs_stat64", full.encode(), ctypes.byref(st))
        return FileStat(size=int(st.size), mtime=st.mtime + st.mtime_nsec / 1e9,
                        is_dir=stat_mod.S_ISDIR(st.mode), file_id=int(st.ino))

    def available_bytes(self) -> int | None:
        full = self._p("")
        st = _NfsStatvfs64()
        try:  # the server's figures for the export (GETATTR space_avail)
            self._meta_call(f"statvfs {full}", full, "nfs_statvfs64", full.encode(),
                            ctypes.byref(st))
        except LockFsError:
            return None
        return int(st.bavail) * int(st.frsize or st.bsize)

    def listdir(self, path: str = "") -> list[str]:
        full = self._p(path)
        lib = _libnfs()
        ctx = self._meta_ctx()
        handle = ctypes.c_void_p()
        try:
            ctx.call(f"list {full}", "nfs_opendir", full.encode(), ctypes.byref(handle))
        except _Failure as exc:
            self._meta_failed(ctx, exc)
            raise exc.to_lockfs(full) from None
        self._meta_trouble = None
        names: list[str] = []
        with ctx.mutex:
            try:
                while ctx.ptr:
                    ent = lib.nfs_readdir(ctx.ptr, handle)
                    if not ent:
                        break
                    name = ent.contents.name.decode("utf-8", "surrogateescape")
                    if name not in (".", ".."):
                        names.append(name)
            finally:
                if ctx.ptr:
                    lib.nfs_closedir(ctx.ptr, handle)
        return sorted(names)

    def makedirs(self, path: str) -> None:
        self._p(path)
        comps = [c for c in path.split("/") if c]
        root_parts = [c for c in self.location.root.split("/") if c]
        prefix = ""
        for comp in root_parts + comps:
            prefix = f"{prefix}/{comp}"
            try:
                self._meta_call(f"mkdir {prefix}", prefix, "nfs_mkdir2", prefix.encode(), 0o770)
            except VolumeIOError as exc:
                if exc.errno != errno.EEXIST and "NFS4ERR_EXIST" not in str(exc):
                    raise

    def _fence(self) -> Nfs4File | None:
        """The lease anchor, when namespace calls can be fenced by it: an nfs4 lock on
        this volume's server whose client id is known (:meth:`Nfs4File.fenced`)."""
        anchor = self.lease_anchor
        while anchor is not None and not isinstance(anchor, Nfs4File):
            anchor = getattr(anchor, "inner", None)  # a fault-injecting wrapper
        if anchor is None or not anchor.can_fence():
            return None
        loc = anchor.volume.location
        if (loc.server, loc.port) != (self.location.server, self.location.port):
            return None
        return anchor

    def _comps(self, full: str) -> list[str]:
        """Path components from the server's pseudo root (export, then the path)."""
        return [c for c in self.location.export.split("/") if c] + \
            [c for c in full.split("/") if c]

    def _namespace_call(self, what: str, full: str, fn_name: str, args: tuple[object, ...],
                        build: Callable[[_Ops], None], path: str) -> None:
        """A RENAME or REMOVE: fenced by the lease anchor when there is one (the server
        then refuses it once the anchor's lease is gone), else on the shared context."""
        anchor = self._fence()
        if self.before_send is not None:
            self.before_send(fn_name[4:], path, 0, full.encode())
        if anchor is None:
            self._meta_call(what, full, fn_name, *args)
            return
        anchor.fenced(what, full, build)
        self._meta_trouble = None

    def rename(self, src: str, dst: str) -> None:
        s, d = self._p(src), self._p(dst)
        sc, dc = self._comps(s), self._comps(d)

        def build(ops: _Ops) -> None:
            ops.lookup_path(sc[:-1])
            ops.savefh()
            ops.lookup_path(dc[:-1])
            ops.rename(sc[-1], dc[-1])

        self._namespace_call(f"rename {s} -> {d}", f"{s} -> {d}", "nfs_rename",
                             (s.encode(), d.encode()), build, dst)
        with self._open_files_lock:
            moved = [f for f in self._open_files
                     if f._full == s or f._full.startswith(s + "/")]
        for f in moved:
            f.follow_rename(s, d, src, dst)

    def _remove(self, kind: str, path: str) -> None:
        full = self._p(path)
        comps = self._comps(full)

        def build(ops: _Ops) -> None:
            ops.lookup_path(comps[:-1])
            ops.remove(comps[-1])

        try:
            self._namespace_call(f"{kind} {full}", full, f"nfs_{kind}", (full.encode(),),
                                 build, path)
        except VolumeNotFound:
            pass

    def unlink(self, path: str) -> None:
        self._remove("unlink", path)

    def rmdir(self, path: str) -> None:
        self._remove("rmdir", path)

    def read_bytes(self, path: str) -> bytes:
        return self._read_small(path, None)

    def read_head(self, path: str, size: int) -> bytes:
        return self._read_small(path, size)

    def read_heads(self, wanted: Sequence[tuple[str, int]]) -> list[FileHead | None]:
        """One COMPOUND per file (LOOKUP the path, GETATTR type and size, READ the head
        with the anonymous stateid), all sent before the first answer is awaited: a
        takeover reading the heads of ten queues' files waits one round trip, not some
        fifty. A file the server will not read that way is read the ordinary way."""
        if len(wanted) < 2:
            return super().read_heads(wanted)
        batch = []
        for path, size in wanted:
            ops = _Ops()
            ops.lookup_path(self._comps(self._p(path)))
            ops.getattr(_TYPE_AND_SIZE)
            ops.read(0, size)
            batch.append(ops)
        ctx = self._meta_ctx()
        try:
            answers = ctx.exchange(f"read {len(batch)} file heads", batch, _on_head_c,
                                   self.timeout)
        except _Failure as exc:
            self._meta_failed(ctx, exc)
            raise exc.to_lockfs(self._p(wanted[0][0])) from None
        self._meta_trouble = None
        heads: list[FileHead | None] = []
        for (path, size), got in zip(wanted, answers, strict=True):
            if got.status == 2:  # NFS4ERR_NOENT: the file or a directory above it
                heads.append(None)
            elif got.status == 0 and got.ftype == _NF4REG and got.size is not None and \
                    got.data is not None and len(got.data) == min(size, got.size):
                heads.append(FileHead(got.size, got.data))
            else:  # refused, a directory, a short read: the ordinary way says why
                heads.extend(super().read_heads([(path, size)]))
        return heads

    def _read_small(self, path: str, size: int | None) -> bytes:
        """Open ``path`` read-only in the shared reader context, read its first ``size``
        bytes (all of them if None) and close it; on a failure, once more in a new one."""
        full = self._p(path)
        st = self.stat(path)  # a missing file: VolumeNotFound, no failed OPEN below
        if st.is_dir:
            raise VolumeIOError(f"open {full}: is a directory", errno=errno.EISDIR, path=full)
        want = st.size if size is None else size
        for attempt in (1, 2):
            ctx = self._reader_ctx(fresh=attempt == 2)
            try:
                return self._read_in(ctx, full, want, to_end=size is None)
            except _Failure as exc:
                with self._reader_lock:  # an OPEN that failed may leave its sequence
                    if self._reader is ctx:  # out of step: never used again
                        self._reader = None
                ctx.destroy()
                if attempt == 2 or exc.timed_out or exc.status == -errno.ENOENT \
                        or "NFS4ERR_NOENT" in exc.text:
                    raise exc.to_lockfs(full) from None
        raise AssertionError("unreachable")

    def _reader_ctx(self, fresh: bool) -> _Context:
        with self._reader_lock:
            ctx = self._reader
            if ctx is not None and (fresh or time.monotonic() - ctx.answered
                                    > self._lease / 3):
                self._reader = None
                ctx.destroy()
                ctx = None
            if ctx is None:
                ctx = self._reader = self._new_ctx()
            return ctx

    @staticmethod
    def _read_in(ctx: _Context, full: str, size: int, to_end: bool) -> bytes:
        """``size`` bytes from the start of ``full``, or (``to_end``) all of it: a file
        replaced after the stat that sized the buffer may be longer, so reads go on until
        one comes back short."""
        fh = ctypes.c_void_p()
        ctx.call(f"open {full}", "nfs_open2", full.encode(), os.O_RDONLY, 0, ctypes.byref(fh))
        try:
            out = bytearray()
            room = size + 4096 if to_end else size  # a short first read ends it
            buf = ctypes.create_string_buffer(max(1, min(room, _READ_CHUNK)))
            while to_end or len(out) < size:
                want = len(buf) if to_end else min(size - len(out), len(buf))
                n = ctx.call(f"read {full}", "nfs_pread", fh, len(out), want, buf)
                if n > 0:
                    out += memoryview(buf)[:n]
                if n < want:
                    break
            return bytes(out)
        finally:
            ctx.call(f"close {full}", "nfs_close", fh)

    def write_atomic(self, path: str, data: bytes) -> None:
        """Write a uniquely named temporary file, sync it, then RENAME it over ``path``."""
        base = path.rsplit("/", 1)
        name = base[-1]
        tmp_name = f".{name}.{os.getpid()}.{next(_names)}.tmp"
        tmp = f"{base[0]}/{tmp_name}" if len(base) == 2 else tmp_name
        try:
            with self.open(tmp, create=True, exclusive=True) as f:
                f.pwrite(data, 0)
                f.fdatasync()
            self.rename(tmp, path)
        except BaseException:
            try:
                self.unlink(tmp)
            except LockFsError:
                pass
            raise

    def close(self) -> None:
        with self._meta_lock:
            ctx, self._meta = self._meta, None
        if ctx is not None:
            ctx.destroy()
        with self._reader_lock:
            reader, self._reader = self._reader, None
        if reader is not None:
            reader.destroy()

    def describe(self) -> str:
        return f"{self.url} (NFSv4, lease {self.lease_seconds:g}s from {self.lease_source})"
