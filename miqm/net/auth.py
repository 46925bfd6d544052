"""Who may use a queue manager's listener: principals with their own secrets.

``crtmqm`` writes ``<datadir>/credentials`` (mode 0600) holding one principal, ``admin``,
with a random 256-bit secret::

    {"version": 1, "principals": {"admin": {"secret": "<64 hex digits>", "created": T}}}

More principals are added with ``miqm credential -m QM --add NAME`` (each application
its own principal, which authority records name: docs/mqsc.md, "Authorization"); the
``admin`` principal is the privileged one (every authority, like MQ's ``mqm`` group).
A running listener reads the file again when a client presents a principal or secret it
does not know (at most once a second), before it lets a client in when it last read the
file more than a second ago, and on REFRESH SECURITY, so added, rotated and removed
principals take effect without a restart (a removed one within a second). A client presents
``principal:secret``; a bare secret means the ``admin`` principal. Secrets are compared
in constant time (:func:`hmac.compare_digest` on their SHA-256 digests, so even the
length does not leak).

Where a client's credential comes from (:func:`client_credential`): the ``credential``
argument, else ``MIQM_CREDENTIAL`` (the credential itself, or ``@path`` of a file holding
it), else — on a host whose mqs.ini knows the queue manager — the credentials file in its
data directory, which a local user allowed to read it may use as the admin.

A queue manager created before credentials existed has no credentials file: its listener
accepts every client, as before, and says so once in the error log at start. Creating
the file (``miqm credential -m QM``) turns authentication on at the next start.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from miqm.errors import ConfigError, MiqmError
from miqm.text import one_line

#: credential files a warning about their mode was printed for (once per file)
_warned: set[str] = set()

CREDENTIALS_FILE = "credentials"
ADMIN = "admin"
#: How many characters of a name a client presented a log line shows (then "...").
LOGGED_NAME = 64
#: Names longer than this never get a per-name re-read of the credentials file.
_LONGEST_NAME = 256
#: Re-reads for names not in the table, at most this many a second whatever the names:
#: a flood of attempts each with a new name read the file once per attempt (a thousand
#: reads a second of the shared filesystem, an NFS server the instance's lease and verify
#: reads depend on).
_UNKNOWN_RELOADS_PER_SECOND = 10


class RateLimit:
    """At most ``limit`` of something in each window of ``seconds``: the lines bad input
    and refused requests write to the error log (a flood must not rotate the log's other
    entries away), the credentials file's re-reads for unknown names."""

    def __init__(self, limit: int, clock: Callable[[], float] = time.monotonic,
                 seconds: float = 60.0) -> None:
        self.limit = limit
        self.seconds = seconds
        self._clock = clock
        self._window = (float("-inf"), 0, 0)  # (start, taken, left out)
        self._lock = threading.Lock()

    def take(self) -> tuple[bool, int]:
        """(whether this one may go, how many were left out in the window before it): the
        first that goes after some were left out can say how many."""
        with self._lock:
            now = self._clock()
            start, taken, left = self._window
            more = 0
            if now - start >= self.seconds:
                more, start, taken, left = left, now, 0, 0
            ok = taken < self.limit
            self._window = (start, taken + 1, left) if ok else (start, taken, left + 1)
        return ok, more


def loggable(name: str, limit: int = LOGGED_NAME) -> str:
    """A name a client presented (a principal, before it is known to be valid), made safe
    for one line of the error log (:func:`miqm.text.one_line`, strict: a backslash
    doubled, so that no name looks like another's escape), cut at ``limit``
    characters. So a credential cannot forge log entries, or fill and rotate the log
    with one line."""
    return one_line(name, limit, strict=True)


def new_secret() -> str:
    """A fresh random secret (64 hex digits)."""
    return secrets.token_hex(32)


def render(principals: dict[str, str]) -> bytes:
    """The credentials file's content for ``{principal: secret}``."""
    now = int(time.time())
    return (json.dumps({"version": 1, "principals": {
        p: {"secret": s, "created": now} for p, s in principals.items()}}, indent=1)
        + "\n").encode()


def parse(raw: bytes, source: str = CREDENTIALS_FILE) -> dict[str, str]:
    """``{principal: secret}`` from the credentials file; ConfigError if unreadable."""
    try:
        doc = json.loads(raw.decode("utf-8"))
        principals = doc["principals"]
        out = {str(p): str(v["secret"]) for p, v in principals.items()}
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError):
        raise ConfigError(f"{source} is not a valid credentials file; restore it or "
                          "recreate it with 'miqm credential -m QMgr'.", amq="AMQ9204") from None
    if not out or any(not s for s in out.values()):
        raise ConfigError(f"{source} holds no principal with a secret; recreate it with "
                          "'miqm credential -m QMgr'.", amq="AMQ9204")
    return out


def write(volume: Any, principals: dict[str, str]) -> None:
    """Write the credentials file durably, readable by its owner only where the volume is
    a local path (an ``nfs4://`` volume gets the server's default mode)."""
    from lockfs.posix import PosixVolume

    data = render(principals)
    if not isinstance(volume, PosixVolume):
        volume.write_atomic(CREDENTIALS_FILE, data)
        return
    path = os.path.join(volume.root, CREDENTIALS_FILE)
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)


def exposed(path: str) -> int | None:
    """The permission bits of file ``path`` when users other than its owner may read or
    write it (a secret in it is not secret), else None (also when it cannot be looked
    at: reading it says why)."""
    try:
        mode = os.stat(path).st_mode & 0o777
    except OSError:
        return None
    return mode if mode & 0o077 else None


def exposed_warning(path: str, what: str) -> str | None:
    """One line saying that ``what`` (the file ``path``) is open to other users and how
    to fix it, or None when only its owner can use it."""
    mode = exposed(path)
    if mode is None:
        return None
    return (f"{what} {path} has mode {mode:04o}: users other than its owner can read or "
            f"change the secrets in it. Make it private to its owner (the documented mode "
            f"0600): chmod 600 {path}")


def warn_exposed(path: str, what: str) -> None:
    """Say once per file, on stderr, that a client's secret file ``path`` (``what``) is
    open to other users: accepted (the documented mode is what crtmqm makes, not a
    condition), but said where the person who made the file sees it."""
    warning = exposed_warning(path, what)
    if warning is not None and path not in _warned:
        _warned.add(path)
        print(f"{warning}.", file=sys.stderr)


def local_credentials_path(volume: Any) -> str | None:
    """The credentials file's path when ``volume`` is a local directory (its mode means
    something there; an ``nfs4://`` volume has the server's), else None."""
    root = getattr(volume, "root", None)
    if not isinstance(root, str) or not os.path.isdir(root):
        return None
    return os.path.join(root, CREDENTIALS_FILE)


def read(volume: Any) -> dict[str, str] | None:
    """The principals in ``volume``'s credentials file; None if there is none."""
    from lockfs.errors import VolumeNotFound

    try:
        raw = volume.read_bytes(CREDENTIALS_FILE)
    except VolumeNotFound:
        return None
    return parse(raw, f"{getattr(volume, 'url', '')}/{CREDENTIALS_FILE}")


def split(credential: str) -> tuple[str, str]:
    """``(principal, secret)`` of a presented credential (a bare secret is ``admin``'s)."""
    credential = credential.strip()
    if ":" in credential:
        principal, secret = credential.split(":", 1)
        return principal.strip() or ADMIN, secret.strip()
    return ADMIN, credential


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


class Authenticator:
    """Checks presented credentials against a principal table.

    ``principals=None`` means authentication is off (a queue manager without a
    credentials file): every client is accepted as ``admin``. Failures are counted and
    reported through ``on_failure(peer, principal)``, rate-limited so that a flood of bad
    attempts cannot fill the error log or slow the listener. The principal reported is
    the presented name made safe for a log line (:func:`loggable`).
    """

    def __init__(self, principals: dict[str, str] | None,
                 on_failure: Callable[[str, str, int], None] | None = None,
                 *, log_per_minute: int = 20, clock: Callable[[], float] = time.monotonic,
                 source: Callable[[], dict[str, str] | None] | None = None) -> None:
        self.required = principals is not None
        self._digests = {p: _digest(s) for p, s in (principals or {}).items()}
        #: where :meth:`reload` reads the principals again (the credentials file)
        self._source = source
        self._last_reload = clock()
        # principal -> when a refusal of it last read the source again (bounded)
        self._unknown_reload: dict[str, float] = {}
        # reads for unknown names: at most ten a second
        self._unknown_reads = RateLimit(_UNKNOWN_RELOADS_PER_SECOND, clock, seconds=1.0)
        self._dummy = _digest(new_secret())
        self.failures = 0
        self._on_failure = on_failure
        self._log_per_minute = log_per_minute
        self._clock = clock
        self._window = (0.0, 0, 0)  # (window start, logged, suppressed)
        self._lock = threading.Lock()

    def check(self, credential: Any, peer: str = "") -> str | None:
        """The principal a credential authenticates, or None (counted and reported)."""
        if not self.required:
            return ADMIN
        principal, secret = split(credential) if isinstance(credential, str) else ("", "")
        want = self._digests.get(principal, self._dummy)
        ok = hmac.compare_digest(_digest(secret), want) and principal in self._digests
        if not ok and principal and self._reload_due(principal):
            want = self._digests.get(principal, self._dummy)
            ok = hmac.compare_digest(_digest(secret), want) and principal in self._digests
        elif ok and self._source is not None and self._clock() - self._last_reload >= 1.0:
            # a table read more than a second ago may hold a principal since removed or
            # a secret since rotated: read it again (at most once a second, whatever the
            # number of hellos) before letting the client in. Only failures read it
            # before, so a revoked credential was let in until REFRESH SECURITY or a
            # restart, and by the standby that took over too.
            if self.reload():
                want = self._digests.get(principal, self._dummy)
                ok = (hmac.compare_digest(_digest(secret), want)
                      and principal in self._digests)
        if ok:
            return principal
        self._failed(peer, loggable(principal) if principal else "(none)")
        return None

    def _reload_due(self, principal: str) -> bool:
        """Read the principals again (an application added by ``miqm credential --add``
        after the listener started) if a second has passed since the last read, or if
        ``principal`` is not in the table, no refusal of it read them in the last second
        and fewer than ten such reads were made in the last second: a principal added
        just after any read is let in at its first try (in a flood of attempts with new
        names, at a try a second later), while a flood reads the file at most ten times
        a second."""
        if self._source is None:
            return False
        now = self._clock()
        if now - self._last_reload < 1.0:
            if principal in self._digests or len(principal) > _LONGEST_NAME or (
                    now - self._unknown_reload.get(principal, -1e9) < 1.0):
                return False
            if not self._unknown_reads.take()[0]:
                return False
            if len(self._unknown_reload) >= 1024:
                self._unknown_reload.clear()
            self._unknown_reload[principal] = now
        return self.reload()

    def reload(self) -> bool:
        """Read the principals from the source again (REFRESH SECURITY); False if it
        could not be read (the current ones stay)."""
        if self._source is None:
            return False
        self._last_reload = self._clock()
        try:
            principals = self._source()
        except Exception:  # an unreadable or bad file keeps the current table
            return False
        if principals is None:
            return False
        self._digests = {p: _digest(s) for p, s in principals.items()}
        return True

    def _failed(self, peer: str, principal: str) -> None:
        with self._lock:
            self.failures += 1
            now = self._clock()
            start, logged, suppressed = self._window
            if now - start >= 60.0:
                report_suppressed = suppressed
                start, logged, suppressed = now, 0, 0
            else:
                report_suppressed = 0
            log = logged < self._log_per_minute
            if log:
                logged += 1
            else:
                suppressed += 1
            self._window = (start, logged, suppressed)
        if log and self._on_failure is not None:
            self._on_failure(peer, principal, report_suppressed)


def client_credential(qmgr: str, explicit: str | None = None,
                      bindings: bool = True) -> str | None:
    """The credential a client presents (see the module docstring); ConfigError with one
    line if ``MIQM_CREDENTIAL`` names a file that cannot be read."""
    if explicit:
        return _deref(explicit, "the credential argument")
    env = os.environ.get("MIQM_CREDENTIAL", "").strip()
    if env:
        return _deref(env, "MIQM_CREDENTIAL")
    if not bindings:
        return None
    try:
        from lockfs.errors import LockFsError
        from lockfs.volume import open_volume
        from miqm.paths import find

        volume = open_volume(find(qmgr).data_path)
        try:
            principals = read(volume)
        finally:
            volume.close()
    except (LockFsError, MiqmError, OSError):
        return None
    if not principals:
        return None
    if ADMIN in principals:
        return f"{ADMIN}:{principals[ADMIN]}"
    p, s = next(iter(principals.items()))
    return f"{p}:{s}"


def _deref(value: str, what: str) -> str:
    if not value.startswith("@"):
        return value
    path = value[1:]
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read().strip()
    except OSError as exc:
        raise ConfigError(f"{what} names the file {path!r}, which cannot be read "
                          f"({exc.strerror or exc}); fix the path or its permissions.",
                          amq="AMQ9204") from None
    warn_exposed(path, f"AMQ1133W: {what} names the file")
    if text.startswith("{"):  # a copy of the queue manager's credentials file
        principals = parse(text.encode(), path)
        p = ADMIN if ADMIN in principals else next(iter(principals))
        return f"{p}:{principals[p]}"
    return text
