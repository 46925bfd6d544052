"""Plain mode: basic POSIX locking and file operations on the directory.

The tests, in order (the first that cannot run stops the rest):

* ``access`` - this user can create a file in the directory and list it; a refusal is
  explained (read-only filesystem, permissions, a uid/gid that no user here has); a
  Directory that does not exist or is a file is a command that cannot run (exit 2);
* ``create, write, sync, rename, remove`` - the calls the queue manager makes;
* ``exclusive lock`` / ``shared locks`` / ``byte ranges`` - through two open files
  (two open file descriptions; two NFSv4 clients on the ``nfs4`` backend), locks conflict
  as POSIX says;
* ``second process`` - another process is refused a lock this one holds, and granted it
  once released;
* ``close trap`` - a lock survives another descriptor of the same file being opened,
  read and closed (classic POSIX locks are dropped by any close: lockfs uses
  open-file-description locks, and the filesystem must not drop them either);
* ``unlock`` - released locks are granted to others at once.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import subprocess
import sys
import time

from fsck.report import (
    CAUSE_PERMISSIONS,
    CAUSE_POSIX,
    CAUSE_READONLY,
    CAUSE_UIDGID,
    Failed,
    FsckError,
    TestResult,
    run_test,
)
from lockfs.errors import LockFsError, VolumeNotFound, VolumePermissionError
from lockfs.volume import LockMode, Volume

PREFIX = "amqmfsck"
LOCK_ADVICE = ("this filesystem's locks cannot guard queue manager files: use an NFSv4 "
               "filesystem that implements POSIX byte-range locks")


def _name(kind: str) -> str:
    return f"{PREFIX}.{kind}.{os.getpid()}"


def describe_access(directory: str, exc: LockFsError,
                    verb: str = "create") -> tuple[str, str, str]:
    """(reason, cause, advice) for a refused create (or list: ``verb``) in a local or
    mounted ``directory``."""
    text = str(exc)
    if exc.errno == 30 or "ROFS" in text or "Read-only" in text:  # EROFS
        return (f"cannot {verb} files in {directory}: the filesystem is read-only",
                CAUSE_READONLY, "mount it read-write (rw) and export it rw on the server")
    uid, gid = os.geteuid(), os.getegid()
    me = _user(uid)
    if directory.startswith("nfs4://"):
        return (f"cannot {verb} files in {directory}: the server refused this user "
                f"(uid {uid} {me}, gid {gid}): {text}", CAUSE_PERMISSIONS,
                "give the queue manager's user (mqm) the same uid and gid on every host and "
                "ownership of the directory on the server")
    try:
        st = os.stat(directory)
    except OSError:
        return (f"cannot {verb} files in {directory}: {text}", CAUSE_PERMISSIONS,
                "check the directory's ownership and permissions")
    owner, group = _user(st.st_uid), _group(st.st_gid)
    mode = f"{st.st_mode & 0o7777:04o}"
    where = (f"{directory} is owned by uid {st.st_uid} {owner}, gid {st.st_gid} {group}, "
             f"mode {mode}; this process runs as uid {uid} {me}, gid {gid}")
    if verb != "create":
        where = f"cannot {verb} the files in the directory: {where}"
    if owner == "(no such user here)" or group == "(no such group here)":
        return (f"permission denied: {where}", CAUSE_UIDGID,
                "the directory belongs to a uid or gid that no user or group on this host "
                "has: give the mqm user and group the same uid and gid on every host")
    return (f"permission denied: {where}", CAUSE_PERMISSIONS,
            "make the directory owned by the queue manager's user and group (mqm:mqm) with "
            "mode 2775, or run as that user")


def _user(uid: int) -> str:
    try:
        return f"({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return "(no such user here)"


def _group(gid: int) -> str:
    try:
        return f"({grp.getgrgid(gid).gr_name})"
    except KeyError:
        return "(no such group here)"


def check_access(vol: Volume, results: list[TestResult]) -> bool:
    """The ``access`` test; False when nothing more can be tried."""
    with run_test(results, "access") as res:
        name = _name("access")
        try:
            st = vol.stat("")
        except VolumeNotFound:  # a command that cannot run, as for a local path
            raise FsckError(f"the directory {vol.url} does not exist: create it (and "
                            "export it)") from None
        if not st.is_dir:
            raise FsckError(f"{vol.url} is a file, not a directory: give the directory "
                            "the queue manager's data will be in")
        try:
            f = vol.open(name, create=True)
        except VolumePermissionError as exc:
            raise Failed(*describe_access(vol.url, exc)) from None
        f.close()
        vol.unlink(name)
        res.step(f"created and removed {name} as uid {os.geteuid()} gid {os.getegid()}")
        try:  # the queue manager lists its directories too (queues/, errors/, log extents)
            vol.listdir("")
        except VolumePermissionError as exc:
            raise Failed(*describe_access(vol.url, exc, "list")) from None
        res.step("listed the directory")
    return results[-1].ok


def check_files(vol: Volume, results: list[TestResult]) -> None:
    """``create, write, sync, rename, remove``."""
    with run_test(results, "create, write, sync, rename, remove") as res:
        a, b = _name("file"), _name("renamed")
        data = os.urandom(65536)
        try:
            with vol.open(a, create=True, exclusive=True) as f:
                f.pwrite(data, 0)
                f.fdatasync()
                if f.size() != len(data):
                    raise Failed(f"a file written with {len(data)} bytes reports size "
                                 f"{f.size()}", CAUSE_POSIX, "check the filesystem")
            res.step(f"created {a}, wrote and synced {len(data)} bytes")
            with vol.open(a) as g:
                back = g.pread(len(data), 0)
            if back != data:
                raise Failed("data read back through a new open differs from what was "
                             "written and synced", CAUSE_POSIX,
                             "the filesystem loses or caches writes: mount with sync, noac")
            res.step("read back the data through a second open: identical")
            with vol.open(b, create=True) as g:
                g.pwrite(b"old", 0)
                g.fdatasync()
            vol.rename(a, b)
            if vol.exists(a) or vol.read_bytes(b) != data:
                raise Failed("rename did not atomically replace the target", CAUSE_POSIX,
                             "the filesystem must support atomic rename over a file")
            res.step(f"renamed {a} over an existing {b}: replaced atomically")
            vol.unlink(b)
            if b in vol.listdir(""):
                raise Failed(f"{b} is still listed after it was removed", CAUSE_POSIX,
                             "attribute/directory caching hides changes: mount with noac")
            res.step(f"removed {b}")
        finally:
            for n in (a, b):
                try:
                    vol.unlink(n)
                except LockFsError:
                    pass


def _refused(ok: bool, what: str) -> None:
    if ok:
        raise Failed(f"{what} was granted although a conflicting lock is held",
                     CAUSE_POSIX, LOCK_ADVICE)


def _granted(ok: bool, what: str) -> None:
    if not ok:
        raise Failed(f"{what} was refused although no conflicting lock is held",
                     CAUSE_POSIX, "locks are not released or not granted: " + LOCK_ADVICE)


def check_locks(vol: Volume, results: list[TestResult], *, child: bool = True) -> None:
    """The lock tests through separate open files (and a second process)."""
    name = _name("lock")
    try:
        files = [vol.open(name, create=True) for _ in range(3)]
    except LockFsError:
        raise
    a, b, c = files
    try:
        with run_test(results, "exclusive lock") as res:
            _granted(a.try_lock(LockMode.EXCLUSIVE), "an exclusive lock on a free file")
            _refused(b.try_lock(LockMode.EXCLUSIVE), "a second exclusive lock (another open)")
            _refused(b.try_lock(LockMode.SHARED), "a shared lock (another open)")
            res.step("an exclusive lock refuses exclusive and shared locks from another open")
            a.unlock()
            _granted(b.try_lock(LockMode.EXCLUSIVE), "the exclusive lock after unlock")
            b.unlock()
            res.step("unlocked: the other open is granted the lock at once")
        with run_test(results, "shared locks") as res:
            _granted(a.try_lock(LockMode.SHARED), "a shared lock")
            _granted(b.try_lock(LockMode.SHARED), "a second shared lock (another open)")
            _refused(c.try_lock(LockMode.EXCLUSIVE), "an exclusive lock over two shared locks")
            a.unlock()
            _refused(c.try_lock(LockMode.EXCLUSIVE), "an exclusive lock over one shared lock")
            b.unlock()
            _granted(c.try_lock(LockMode.EXCLUSIVE), "an exclusive lock once shared ones went")
            c.unlock()
            res.step("shared locks coexist and keep out an exclusive lock until all go")
        with run_test(results, "byte ranges") as res:
            # fresh opens: a range lock is the first lock attempt of each (the nfs4 backend
            # tests a refused lock from offset 0 only)
            r = [vol.open(name) for _ in range(3)]
            files += r
            _granted(r[0].try_lock(LockMode.EXCLUSIVE, 0, 4096),
                     "an exclusive lock on [0, 4096)")
            _granted(r[1].try_lock(LockMode.EXCLUSIVE, 4096, 4096),
                     "an exclusive lock on [4096, 8192) (disjoint)")
            _refused(r[2].try_lock(LockMode.EXCLUSIVE, 0, 4096),
                     "an overlapping exclusive lock")
            r[0].unlock(0, 4096)
            r[1].unlock(4096, 4096)
            res.step("disjoint ranges are independent; overlapping ranges conflict")
        if child:
            with run_test(results, "second process") as res:
                _granted(a.try_lock(LockMode.EXCLUSIVE), "an exclusive lock")
                got = probe_in_child(vol.url, name, "exclusive")
                _refused(got, "an exclusive lock in a second process")
                res.step("a second process is refused the lock this one holds")
                a.unlock()
                got = probe_in_child(vol.url, name, "exclusive")
                _granted(got, "the lock in a second process after unlock")
                res.step("and is granted it once released")
        with run_test(results, "close trap") as res:
            _granted(a.try_lock(LockMode.EXCLUSIVE), "an exclusive lock")
            d = vol.open(name)
            d.pread(16, 0)
            d.close()
            res.step("opened, read and closed another descriptor of the locked file")
            if c.try_lock(LockMode.EXCLUSIVE):
                raise Failed("closing another descriptor of a locked file dropped the lock "
                             "(the classic POSIX trap)", CAUSE_POSIX,
                             "the filesystem or its locking must keep locks per open file: "
                             + LOCK_ADVICE)
            if child and probe_in_child(vol.url, name, "exclusive"):
                raise Failed("after another descriptor was closed, a second process was "
                             "granted the lock this one holds", CAUSE_POSIX, LOCK_ADVICE)
            res.step("the lock is still held: another open and another process are refused")
            a.unlock()
    finally:
        for f in files:
            f.close()
        try:
            vol.unlink(name)
        except LockFsError:
            pass


def probe_in_child(url: str, name: str, mode: str, timeout: float = 60.0) -> bool:
    """Ask a fresh process to try a lock once: True if it was granted."""
    argv = [sys.executable, "-m", "fsck.probe", url, name, mode]
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise Failed(f"a second process trying the lock did not answer in {timeout:g} s",
                     CAUSE_POSIX, "the filesystem blocks lock attempts: check the server") \
            from None
    try:
        answer = json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise Failed(f"the second process failed: {res.stderr.strip()[-300:]}", CAUSE_POSIX,
                     "check the filesystem") from None
    if "error" in answer:
        raise Failed(f"the second process could not try the lock: {answer['error']}",
                     CAUSE_POSIX, "check the filesystem")
    return bool(answer["granted"])


def run_plain(vol: Volume, results: list[TestResult]) -> None:
    """Plain mode's tests."""
    t0 = time.monotonic()
    if not check_access(vol, results):
        return
    check_files(vol, results)
    check_locks(vol, results)
    results[-1].details.setdefault("plain_seconds", round(time.monotonic() - t0, 3))
