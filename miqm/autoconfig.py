"""Configuration without a mount: ``setmqini`` edits, ``AutoConfig``, timings that fit a lease.

* :func:`set_key` / :func:`delete_key`: what ``setmqini -s Stanza -k Key (-v V | -d)`` does
  to qm.ini's stanzas (the file may live on an ``nfs4://`` volume nobody has mounted).
* ``AutoConfig:`` stanza of qm.ini (``crtmqm -ii`` / ``-ic`` write it):
  ``IniConfig=FILE|DIR`` names ini files merged into qm.ini at every start, before it is
  validated (:func:`apply_ini`); ``MQSCConfig=FILE|DIR`` names MQSC scripts run at every
  start once the store is open, through the same MQSC code runmqsc uses
  (:func:`run_mqsc`). A directory means its ``*.ini`` / ``*.mqsc`` files in name order.
* :func:`fit_lease`: VerifyInterval and MonitorStall for a filesystem whose lease can be
  measured (the nfs4:// backend asks the server), so ``strmqm`` does not stop with
  AMQ7880 on a short lease.

No store and no HA here: the controller and the commands call these.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

from miqm.config import HATuning, Stanza, format_ini, parse_ini
from miqm.errors import ConfigError

STANZA = "AutoConfig"
INI_KEY = "IniConfig"
MQSC_KEY = "MQSCConfig"
_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


# --------------------------------------------------------------------------- setmqini
def check_name(what: str, name: str) -> None:
    """A stanza or key name qm.ini can hold, else ConfigError naming it."""
    if not _NAME_RE.match(name or ""):
        raise ConfigError(f"setmqini: {what} {name!r} is not valid: use letters, digits and "
                          "'_', starting with a letter.", exit_code=2)


def set_key(stanzas: list[Stanza], stanza: str, key: str, value: str) -> None:
    """Set ``key=value`` in the first stanza called ``stanza`` (added at the end if none)."""
    check_name("stanza", stanza)
    check_name("key", key)
    if "\n" in value or "#" in value or ";" in value:
        raise ConfigError(f"setmqini: value {value!r} cannot be stored in qm.ini: it may "
                          "not hold a newline, '#' or ';'.", exit_code=2)
    found = next((s for s in stanzas if s.name == stanza), None)
    if found is None:
        found = Stanza(stanza)
        stanzas.append(found)
    found.values[key] = value.strip()


def delete_key(stanzas: list[Stanza], stanza: str, key: str) -> bool:
    """Remove ``key`` from every stanza called ``stanza`` (and a stanza left empty).
    False if there was nothing to remove."""
    check_name("stanza", stanza)
    check_name("key", key)
    removed = False
    for s in list(stanzas):
        if s.name == stanza and key in s.values:
            del s.values[key]
            removed = True
            if not s.values:
                stanzas.remove(s)
    return removed


# --------------------------------------------------------------------------- AutoConfig
def _files(location: str, suffix: str, what: str) -> list[str]:
    """The files ``location`` names: itself, or its ``*suffix`` files in name order."""
    if os.path.isdir(location):
        found = sorted(os.path.join(location, n) for n in os.listdir(location)
                       if n.endswith(suffix) and os.path.isfile(os.path.join(location, n)))
        if not found:
            raise ConfigError(f"{what} directory {location} holds no *{suffix} file.")
        return found
    if os.path.isfile(location):
        return [location]
    raise ConfigError(f"{what} {location} does not exist on this host: create it (both "
                      "hosts need it at the same path) or remove it with setmqini -d.")


def _read(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc}") from None


def ini_files(location: str) -> list[str]:
    """The ini files ``-ii`` / ``IniConfig`` names (a file, or a directory's ``*.ini``)."""
    return _files(location, ".ini", "IniConfig")


def mqsc_files(location: str) -> list[str]:
    """The MQSC scripts ``-ic`` / ``MQSCConfig`` names (a file, or a directory's ``*.mqsc``)."""
    return _files(location, ".mqsc", "MQSCConfig")


def autoconfig(stanzas: list[Stanza]) -> dict[str, str]:
    """The ``AutoConfig`` keys of qm.ini's stanzas (the last value of each wins)."""
    out: dict[str, str] = {}
    for s in stanzas:
        if s.name == STANZA:
            out.update(s.values)
    return out


def merge(base: list[Stanza], overlay: list[Stanza]) -> bool:
    """Merge ``overlay`` into ``base`` key by key (new stanzas appended); True if changed.
    An overlay's own ``AutoConfig`` stanza is ignored: qm.ini says where config comes from."""
    changed = False
    for o in overlay:
        if o.name == STANZA:
            continue
        target = next((s for s in base if s.name == o.name), None)
        if target is None:
            base.append(Stanza(o.name, dict(o.values)))
            changed = True
            continue
        for key, value in o.values.items():
            if target.values.get(key) != value:
                target.values[key] = value
                changed = True
    return changed


def apply_ini(text: str, source: str) -> tuple[str, bool]:
    """qm.ini ``text`` with the files of its ``AutoConfig IniConfig`` merged in, and
    whether anything changed. Raises ConfigError naming the file on any problem."""
    stanzas = parse_ini(text, source)
    location = autoconfig(stanzas).get(INI_KEY)
    if not location:
        return text, False
    before = format_ini(stanzas)
    for path in ini_files(location):
        merge(stanzas, parse_ini(_read(path, "IniConfig file"), path))
    after = format_ini(stanzas)
    return (after, True) if after != before else (text, False)


def _script_commands(path: str) -> Iterator[tuple[str, str | None]]:
    """(command text, None) for each command of the MQSC file ``path``, or (its text, why
    it is not run) for one the file leaves unfinished after a continuation character:
    running what was read of a script cut short would do part of a command (``DEFINE
    ... REPLACE +`` without the attributes after it puts every one back to its default),
    so it is refused as runmqsc refuses it. A command over MQ's length limit comes as it
    is: parse_command refuses it."""
    from miqm import mqsc

    for kind, text in mqsc.iter_input(_read(path, "MQSCConfig file").splitlines()):
        if kind == "comment":
            continue
        yield text, (mqsc.UNFINISHED if kind == "unfinished" else None)


def check_mqsc(location: str) -> int:
    """Syntax-check the MQSC files ``location`` names; the number of commands. Raises
    ConfigError with MQ's reason for the first command that is not valid."""
    from miqm import mqsc

    count = 0
    for path in mqsc_files(location):
        for text, unfinished in _script_commands(path):
            if unfinished:
                raise ConfigError(f"MQSCConfig file {path}: {text.strip()[:60]!r}: "
                                  f"{unfinished}", amq="AMQ8405")
            try:
                cmd = mqsc.parse_command(text)
            except mqsc.MQSCSyntaxError as err:
                raise ConfigError(f"MQSCConfig file {path}: {text.strip()[:60]!r} is not "
                                  f"valid MQSC: {err.reason}", amq="AMQ8405") from None
            if cmd.verb == "END":
                break
            count += 1
    return count


def run_mqsc(location: str, execute: Callable[[dict[str, Any]], dict[str, Any]]
             ) -> tuple[int, list[str]]:
    """Run the MQSC files ``location`` names through ``execute`` (a queue service's
    ``mqsc`` op: command dict in, reply out). Returns (commands run, lines of the
    commands that failed, each prefixed with its file and command)."""
    from miqm import mqsc

    count = 0
    failures: list[str] = []
    for path in mqsc_files(location):
        for text, unfinished in _script_commands(path):
            if unfinished:
                failures.append(f"{os.path.basename(path)}: {text.strip()[:60]}: {unfinished}")
                continue
            try:
                cmd = mqsc.parse_command(text)
            except mqsc.MQSCSyntaxError as err:
                failures.append(f"{os.path.basename(path)}: {text.strip()[:60]}: {err.reason}")
                continue
            if cmd.verb == "END":
                break
            count += 1
            reply = execute(cmd.to_dict())
            if not reply.get("ok", False) or reply.get("failed"):
                why = "; ".join(str(x) for x in reply.get("lines", [])) \
                    or str(reply.get("error", "failed"))
                failures.append(f"{os.path.basename(path)}: {text.strip()[:60]}: {why}")
    return count, failures


# --------------------------------------------------------------------------- the lease
def measured_lease(volume: Any) -> float | None:
    """The lease of ``volume``'s filesystem when it can be measured (the nfs4:// backend
    asks the server), else None (a local path: no lease to fit)."""
    learn = getattr(volume, "learn_lease", None)
    if learn is None:
        return None
    try:
        if not learn():
            return None
    except Exception:  # a probe that fails is a lease not measured, not a failure
        return None
    return float(volume.lease_seconds)


def fit_lease(lease: float, ha: HATuning | None = None) -> tuple[HATuning, str]:
    """HA timings that fit ``lease`` and the one line saying what was chosen.

    The defaults stay when VerifyInterval + MonitorStall is at most half the lease;
    otherwise VerifyInterval becomes a sixth of it and MonitorStall a third (rounded down
    to 0.1 s), so an instance cut off from the filesystem stops well before the server can
    give its lock to the other instance. FilesystemLease records the lease.
    """
    ha = ha or HATuning(lease=max(lease, 31.0))
    if ha.verify_interval + ha.monitor_stall <= lease / 2:
        fitted = HATuning(ha.standby_poll, ha.verify_interval, ha.monitor_stall,
                          ha.liveness_interval, lease, ha.read_ahead)
        return fitted, (f"The filesystem's lease is {lease:g}s: VerifyInterval "
                        f"{fitted.verify_interval:g}s and MonitorStall "
                        f"{fitted.monitor_stall:g}s fit it.")
    verify = max(0.1, math.floor(lease / 6 * 10) / 10)
    stall = max(0.1, math.floor(lease / 3 * 10) / 10)
    fitted = HATuning(min(ha.standby_poll, verify), verify, stall, ha.liveness_interval,
                      lease, ha.read_ahead)
    return fitted, (f"The filesystem's lease is {lease:g}s: VerifyInterval={verify:g} and "
                    f"MonitorStall={stall:g} chosen in qm.ini (TuningParameters) so an "
                    "instance cut off from it stops before its lock can pass to another.")
