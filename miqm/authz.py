"""Authority records: who may do what to which object (MQ's object authority manager).

Pure: no I/O, no store, no network. The store keeps the records (log + checkpoint, so
they survive restart and failover); :class:`AuthTable` answers "which authorities does
principal P hold on object O" from them, with a cache; the queue service asks it before
each operation of a remote identity (docs/mqsc.md, "Authorization").

An authority record is ``(objtype, profile, principal) -> authorities``. ``objtype`` is
``QUEUE`` or ``QMGR``; a ``QMGR`` record's profile is always ``self`` (the queue manager
itself, as MQ displays it). A queue profile is a queue name or a generic profile, with
MQ's wildcards:

* ``?`` any one character (within a qualifier: qualifiers are the parts between dots);
* ``*`` zero or more characters within a qualifier; a qualifier that is just ``*`` is
  exactly one qualifier (``ABC.*.JKL`` matches ``ABC.DEF.JKL``, not ``ABC.JKL``);
* ``**`` (once per profile, a whole qualifier) zero or more qualifiers; ``**`` alone
  matches every name.

When several of a principal's profiles match an object, only the most specific applies
(MQ's rule): exact names first; otherwise the profiles are compared left to right and,
where they first differ, a plain character beats ``?``, which beats ``*``, which beats
``**``. Authorities of different profiles are not added together.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from miqm.text import one_line

QUEUE = "QUEUE"
QMGR = "QMGR"
OBJTYPES = (QUEUE, QMGR)
#: the profile of every QMGR record
SELF = "self"

#: the authorities each object type has, in the order DISPLAY AUTHREC lists them
AUTHORITIES: dict[str, tuple[str, ...]] = {
    QUEUE: ("BROWSE", "CHG", "CLR", "CRT", "DLT", "DSP", "GET", "INQ", "PUT", "SET"),
    QMGR: ("CHG", "CONNECT", "DLT", "DSP", "INQ", "SET"),
}
#: MQ's group names: administration, the MQI, everything, nothing
_ALLADM = frozenset({"CHG", "CLR", "CRT", "DLT", "DSP"})
_ALLMQI = frozenset({"BROWSE", "CONNECT", "GET", "INQ", "PUT", "SET"})
GROUPS = ("ALL", "ALLADM", "ALLMQI", "NONE")

#: the principal crtmqm creates (miqm.net.auth.ADMIN): always has every authority, as
#: members of MQ's mqm group do
PRIVILEGED = "admin"

#: MQ's longest object name
MAX_NAME = 48
_NAME_CHARS = re.compile(r"^[A-Za-z0-9._/%?*]{1,48}$")
_PRINCIPAL_RE = re.compile(r"^[A-Za-z0-9._@-]{1,64}$")


class AuthzError(ValueError):
    """A profile, authority or principal that cannot be used (the text says which)."""


def expand(objtype: str, names: Iterable[str]) -> frozenset[str]:
    """The authorities that ``names`` (single ones and ALL/ALLADM/ALLMQI/NONE) stand for
    on ``objtype``; AuthzError naming the first one the object type does not have."""
    valid = AUTHORITIES[objtype]
    out: set[str] = set()
    for raw in names:
        name = raw.strip().upper()
        if name == "ALL":
            out.update(valid)
        elif name == "ALLADM":
            out.update(a for a in valid if a in _ALLADM)
        elif name == "ALLMQI":
            out.update(a for a in valid if a in _ALLMQI)
        elif name == "NONE":
            continue
        elif name in valid:
            out.add(name)
        else:
            raise AuthzError(f"{one_line(name, 64)} is not an authority of OBJTYPE({objtype}): use "
                             f"{', '.join(valid)}, ALL, ALLADM, ALLMQI or NONE")
    return frozenset(out)


def ordered(objtype: str, auths: Iterable[str]) -> list[str]:
    """``auths`` in the order MQ lists them."""
    have = set(auths)
    return [a for a in AUTHORITIES.get(objtype, ()) if a in have]


def check_principal(principal: str) -> str:
    """The principal name if usable, else AuthzError."""
    if not _PRINCIPAL_RE.match(principal):
        raise AuthzError(f"'{one_line(principal, 64)}' is not a valid principal name "
                         "(1-64 characters: letters, digits, . _ @ -)")
    return principal


def is_generic(profile: str) -> bool:
    """True if ``profile`` has a wildcard."""
    return any(c in profile for c in "?*")


def check_profile(profile: str) -> str:
    """``profile`` if it is a valid queue name or generic profile, else AuthzError."""
    if not _NAME_CHARS.match(profile):
        raise AuthzError(f"'{one_line(profile, 64)}' is not a valid profile name "
                         "(1-48 characters of a queue name, with the wildcards ? * **)")
    quals = profile.split(".")
    if sum(q == "**" for q in quals) > 1:
        raise AuthzError(f"'{profile}': ** may be used only once in a profile")
    if any("**" in q and q != "**" for q in quals):
        raise AuthzError(f"'{profile}': ** must be a whole qualifier (A.**, **.B, A.**.B)")
    return profile


def _qualifier_re(q: str) -> str:
    return "".join("[^.]*" if c == "*" else "[^.]" if c == "?" else re.escape(c) for c in q)


def compile_profile(profile: str) -> re.Pattern[str]:
    """A regular expression matching exactly the names ``profile`` applies to."""
    quals = profile.split(".")
    if "**" not in quals:
        return re.compile(r"\.".join(_qualifier_re(q) for q in quals))
    k = quals.index("**")
    left = r"\.".join(_qualifier_re(q) for q in quals[:k])
    right = r"\.".join(_qualifier_re(q) for q in quals[k + 1:])
    if left and right:
        body = left + r"(?:\.[^.]*)*\." + right
    elif left:
        body = left + r"(?:\.[^.]*)*"
    elif right:
        body = r"(?:[^.]*\.)*" + right
    else:
        body = ".*"
    return re.compile(body, re.DOTALL)


def matches(profile: str, name: str) -> bool:
    """True if ``profile`` applies to the object called ``name``."""
    return compile_profile(profile).fullmatch(name) is not None


def specificity(profile: str) -> tuple[int, tuple[int, ...], str]:
    """A sort key: the most specific profile has the largest key (see the module
    docstring: exact names first, then plain > ? > * > ** left to right)."""
    if not is_generic(profile):
        return (1, (), profile)
    ranks: list[int] = []
    i = 0
    while i < len(profile):
        if profile.startswith("**", i):
            ranks.append(0)
            i += 2
            continue
        ranks.append({"*": 1, "?": 2}.get(profile[i], 3))
        i += 1
    return (0, tuple(ranks), profile)


@dataclass(frozen=True)
class AuthRec:
    """One authority record."""

    objtype: str
    profile: str
    principal: str
    auths: frozenset[str]

    def as_dict(self) -> dict[str, object]:
        """The record as the store keeps it (JSON)."""
        return {"objtype": self.objtype, "profile": self.profile,
                "principal": self.principal, "auths": ordered(self.objtype, self.auths)}

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> AuthRec:
        """A record from the store's JSON form."""
        auths = d.get("auths") or []
        return cls(str(d["objtype"]), str(d["profile"]), str(d["principal"]),
                   frozenset(str(a) for a in auths))  # type: ignore[union-attr]


class AuthTable:
    """The authority records of one queue manager, compiled for lookups.

    :meth:`authorities` caches its answer per (principal, objtype, name); the whole cache
    is dropped when the records change (:meth:`load` with a new serial) or on
    :meth:`refresh` (REFRESH SECURITY). Thread-safe: lookups read immutable snapshots.
    """

    #: the cache is cleared when it grows past this many answers
    CACHE_LIMIT = 50_000

    def __init__(self, records: Iterable[AuthRec] = (), serial: int = 0) -> None:
        self._lock = threading.Lock()
        self.serial = -1
        self._by_principal: dict[tuple[str, str], list[tuple[re.Pattern[str], AuthRec]]] = {}
        self._cache: dict[tuple[str, str, str], tuple[frozenset[str], str | None]] = {}
        self.records: tuple[AuthRec, ...] = ()
        self.load(records, serial)

    def load(self, records: Iterable[AuthRec], serial: int) -> None:
        """Replace the records (compiled per principal, most specific profile first)."""
        by: dict[tuple[str, str], list[tuple[re.Pattern[str], AuthRec]]] = {}
        recs = tuple(records)
        for r in recs:
            by.setdefault((r.principal, r.objtype), []).append(
                (compile_profile(r.profile), r))
        for lst in by.values():
            lst.sort(key=lambda pr: specificity(pr[1].profile), reverse=True)
        with self._lock:
            self.records = recs
            self._by_principal = by
            self._cache = {}
            self.serial = serial

    def refresh(self) -> None:
        """Drop every cached answer (REFRESH SECURITY)."""
        with self._lock:
            self._cache = {}

    def lookup(self, principal: str, objtype: str, name: str) -> tuple[frozenset[str], str | None]:
        """(authorities, the profile that gave them or None) of ``principal`` on the
        object; the privileged principal has every authority."""
        key = (principal, objtype, name)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        if principal == PRIVILEGED:
            ans: tuple[frozenset[str], str | None] = (frozenset(AUTHORITIES[objtype]), None)
        else:
            ans = (frozenset(), None)
            for rx, rec in self._by_principal.get((principal, objtype), ()):
                if rx.fullmatch(name) is not None:
                    ans = (rec.auths, rec.profile)
                    break
        if len(name) > MAX_NAME:
            # no object is called that (MQ's names are 48 characters at most): not kept,
            # as 50,000 answers for 250 KiB names a client made up would be 12 GiB
            return ans
        cache = self._cache
        if len(cache) >= self.CACHE_LIMIT:
            cache = self._cache = {}
        cache[key] = ans
        return ans

    def authorities(self, principal: str, objtype: str, name: str) -> frozenset[str]:
        """The authorities ``principal`` holds on object ``name`` of ``objtype``."""
        return self.lookup(principal, objtype, name)[0]

    def allows(self, principal: str, objtype: str, name: str, auth: str) -> bool:
        """True if ``principal`` holds ``auth`` on the object."""
        return auth in self.lookup(principal, objtype, name)[0]

    def select(self, *, profile: str = "", objtype: str = "", principal: str = "",
               match: str = "PROFILE") -> list[AuthRec]:
        """The records DISPLAY AUTHREC shows: ``match`` PROFILE (every profile that applies
        to the name ``profile``, itself included), EXACT (that profile only); an empty
        filter selects all."""
        out = []
        for r in self.records:
            if objtype and r.objtype != objtype:
                continue
            if principal and r.principal != principal:
                continue
            if profile:
                if match == "EXACT" or r.objtype == QMGR:
                    if r.profile != profile:
                        continue
                elif r.profile != profile and not matches(r.profile, profile):
                    continue
            out.append(r)
        out.sort(key=lambda r: (r.objtype != QMGR, r.objtype, r.profile, r.principal))
        return out
