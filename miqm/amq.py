"""The one table of miqm's messages: number, severity, exit code and text.

Every console line and error-log entry with an ``AMQnnnn`` number takes its text from
:data:`MESSAGES`, so the terminal, the error log (``errors/AMQERR01.LOG``) and the event
history say the same thing. ``docs/messages.md`` is generated from this table (and a test
checks it is up to date): ``python -m miqm.amq > docs/messages.md``.

Numbers are IBM MQ's where MQ has a message for the situation, in MQ's wording, with this
product's name and version where MQ names itself (administrators' scripts grep the
numbers). Where MQ has no number for a situation (or prints its line without one),
miqm uses its own range **AMQ1000-AMQ1999**, which MQ does not use:

* AMQ1000-AMQ1099: console lines MQ prints without a number;
* AMQ1100-AMQ1199: situations MQ has no message for (multi-instance refusals, endmqm on
  a host with no instance, ...).

Adding a message is one line: ``"AMQnnnn": E(exit_code, "text with {fields}"),`` (or
``I("...")`` / ``W("...")`` / ``S(exit_code, "...")``); a plain string is accepted too and
means an informational message. ``text(number, **fields)`` fills the ``{field}``s
(``{product}`` and ``{version}`` are filled in for every message).

The exit code is what a control command exits with when it ends on that message
(0: the message does not end a command). Errors (:class:`miqm.errors.MiqmError`) with an
AMQ number take their exit code from here.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

PRODUCT = "miqm"


def _version() -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("miqm")
        except PackageNotFoundError:
            pass
    except ImportError:  # pragma: no cover
        pass
    from miqm import __version__

    return __version__


#: this product's version, as the package metadata says (miqm.__version__ otherwise)
VERSION = _version()


@dataclass(frozen=True)
class Message:
    """One entry of the table."""

    severity: str  # I informational, W warning, E error, S severe
    exit_code: int  # what a control command exits with when it ends on this message
    text: str


def I(text: str) -> Message:  # noqa: E743 - MQ's severity letters
    """An informational message (severity I, exit 0)."""
    return Message("I", 0, text)


def W(text: str, exit_code: int = 0) -> Message:
    """A warning."""
    return Message("W", exit_code, text)


def E(exit_code: int, text: str) -> Message:
    """An error: the command ends with ``exit_code``."""
    return Message("E", exit_code, text)


def S(exit_code: int, text: str) -> Message:
    """A severe error (the queue manager or the instance stops)."""
    return Message("S", exit_code, text)


MESSAGES: dict[str, str | Message] = {
    # ---- miqm's own range: console lines MQ prints without a number (AMQ1000-AMQ1099)
    "AMQ1001": I("{product} queue manager '{qmgr}' starting."),
    "AMQ1002": I("A standby instance of queue manager '{qmgr}' has been started. The active "
                 "instance is running elsewhere."),
    "AMQ1003": I("Quiesce request accepted. The queue manager will stop when all outstanding "
                 "work is complete."),
    "AMQ1004": I("{product} queue manager '{qmgr}' ending."),
    "AMQ1005": I("{product} queue manager '{qmgr}' ended, permitting switchover to a standby "
                 "instance."),
    "AMQ1006": I("{product} queue manager '{qmgr}' standby instance ended."),
    "AMQ1007": I("{product} configuration information added."),
    "AMQ1008": I("The standby instance of queue manager '{qmgr}' on {host} ended: {detail}"),
    # ---- miqm's own range: situations MQ has no message for (AMQ1100-AMQ1199)
    "AMQ1010": I("{product} connection stopped."),
    "AMQ1011": I("Display log details."),
    "AMQ1110": E(10, "Queue manager '{qmgr}' has no credentials file, so connection "
                     "authentication cannot be turned on: create one with "
                     "'miqm credential -m {qmgr}' and restart the queue manager."),
    "AMQ1101": E(5, "{product} queue manager '{qmgr}' is running elsewhere: its master lock "
                 "is held by another instance. Use strmqm -x to start a standby instance "
                 "here."),
    "AMQ1102": E(43, "{product} queue manager '{qmgr}' is running elsewhere without "
                 "permitting standby instances (it was started without -x); this instance "
                 "is not permitted to run as a standby."),
    "AMQ1103": E(47, "{product} queue manager '{qmgr}' already has an active instance and a "
                 "standby instance; a third instance is not permitted."),
    "AMQ1104": E(5, "{product} queue manager '{qmgr}' already has {what} running on this "
                 "host (pid {pid})."),
    "AMQ1105": E(5, "The instance of queue manager '{qmgr}' on {host} is a standby "
                 "instance; end it with endmqm -x, or end the active instance on its host."),
    "AMQ1106": E(40, "No instance of queue manager '{qmgr}' runs on this host ({host}); its "
                 "instances run on {where}. Run endmqm there, or add --remote to end them "
                 "from here."),
    "AMQ1107": E(71, "Queue manager '{qmgr}' did not end within {timeout}s."),
    "AMQ1108": E(71, "Queue manager '{qmgr}' did not report within {timeout}s; it is still "
                 "starting (pid {pid}): check dspmq and errors/AMQERR01.LOG."),
    "AMQ1109": E(40, "The instance of queue manager '{qmgr}' on {host} is not a standby "
                 "instance: end the active instance without -x."),
    "AMQ1120": I("No authority record matches the selection."),
    "AMQ1121": E(1, "The queue manager '{qmgr}' refused the operation: principal "
                 "'{principal}' lacks the {auth} authority on {objtype} '{name}' (MQRC 2035 "
                 "MQRC_NOT_AUTHORIZED). An administrator grants it with '{grant}'."),
    "AMQ1122": E(10, "No authority record for PROFILE({profile}) OBJTYPE({objtype}) "
                 "PRINCIPAL({principal})."),
    "AMQ1123": W("Principal '{principal}' has no credential for queue manager '{qmgr}', so "
                 "it cannot connect until it has one: run 'miqm credential -m {qmgr} --add "
                 "{principal}' to give it a secret."),
    "AMQ1130": W("The index file of queue {queue} cannot be used ({why}); the queue is "
                 "rebuilt from its queue file and the next checkpoint writes a new index."),
    "AMQ1131": W("The queue catalog cannot be used ({why}); every queue file is opened "
                 "instead (a queue that has none is reported damaged) and the next "
                 "checkpoint writes a new catalog."),
    "AMQ1132": W("The queue catalog cannot be used ({why}); its second copy is used and "
                 "the next checkpoint writes both again."),
    "AMQ1133": W("Queue manager '{qmgr}': {detail}."),
    "AMQ1134": W("Queue manager '{qmgr}' restarted from a log whose last page has an "
                 "unfinished image: {detail}."),
    "AMQ1300": W("The standby instance of queue manager '{qmgr}' cannot reach the shared "
                 "filesystem ({detail}); it keeps polling for the master lock."),
    "AMQ1301": I("The standby instance of queue manager '{qmgr}' reaches the shared "
                 "filesystem again."),
    # ---- IBM MQ's numbers
    "AMQ5051": I("The queue manager task '{task}' has started."),
    "AMQ5975": I("'{qmgr}' queue manager instance '{host}' is now the active instance."),
    "AMQ6062": E(71, "The DataPath {path} cannot be used: {detail}"),
    "AMQ6118": S(71, "An internal error was detected in the recovery log: {detail}"),
    "AMQ6119": S(71, "An internal {product} error has occurred ({detail})."),
    "AMQ6184": S(71, "An internal {product} error has occurred: {detail}"),
    "AMQ6708": S(71, "A disk full or I/O condition was encountered when writing the log: "
                 "{detail}"),
    "AMQ6767": E(71, "Log file {file} could not be opened for use: {detail}"),
    "AMQ7017": E(71, "Log not available for queue manager '{qmgr}': {detail}"),
    "AMQ7048": E(72, "The queue manager name '{qmgr}' is either not valid or not known."),
    "AMQ7077": E(71, "You are not authorized to perform the requested operation."),
    "AMQ7085": E(133, "Object {name}, type {objtype} not found."),
    "AMQ7086": I("Media image for object {name}, type queue recorded."),
    "AMQ7026": E(1, "A principal or group name was invalid: {detail}"),
    "AMQ7089": E(71, "Media recovery not allowed: queue manager '{qmgr}' uses circular "
                 "logging."),
    "AMQ7107": I("Object {name}, type queue recreated."),
    "AMQ7229": I("{count} log records accessed on queue manager '{qmgr}' during the log "
                 "replay phase."),
    "AMQ7230": I("Log replay for queue manager '{qmgr}' complete."),
    "AMQ7231": I("{count} log records accessed on queue manager '{qmgr}' during the recovery "
                 "phase."),
    "AMQ7232": I("Transaction manager state recovered for queue manager '{qmgr}'."),
    "AMQ7233": I("{count} out of {total} in-flight transactions resolved for queue manager "
                 "'{qmgr}'."),
    "AMQ7234": I("{count} messages from queue '{queue}' loaded on queue manager '{qmgr}'."),
    "AMQ7272": S(71, "The data for queue manager '{qmgr}' is owned by a different platform: "
                 "{platform}. This instance runs on {ours}."),
    "AMQ7279": S(71, "{product} queue manager '{qmgr}' lost ownership of data lock."),
    "AMQ7280": S(71, "{product} queue manager '{qmgr}' appears unresponsive."),
    "AMQ7463": E(71, "The log for queue manager '{qmgr}' is full."),
    # written once when a record goes into the log again after AMQ7463
    "AMQ7464": I("The log for queue manager '{qmgr}' is no longer full."),
    "AMQ7466": E(71, "Media recovery needs linear logging: queue manager '{qmgr}' uses "
                 "circular logging."),
    "AMQ7467": I("The oldest log file required to start queue manager {qmgr} is {extent}."),
    "AMQ7468": I("The oldest log file required to perform media recovery of queue manager "
                 "{qmgr} is {extent}."),
    "AMQ7469": W("Transactions rolled back to release log space."),
    "AMQ7472": E(10, "Object {name}, type queue damaged."),
    "AMQ7880": E(71, "Error code {code} starting {qmgr} queue manager: {detail}"),
    "AMQ8001": I("{product} queue manager created."),
    "AMQ8002": I("{product} queue manager '{qmgr}' deleted."),
    "AMQ8003": I("{product} queue manager '{qmgr}' started using V{version}."),
    "AMQ8004": I("{product} queue manager '{qmgr}' ended."),
    "AMQ8005": I("{product} queue manager changed."),
    "AMQ8006": I("{product} queue created."),
    "AMQ8007": I("{product} queue deleted."),
    "AMQ8008": I("{product} queue changed."),
    "AMQ8022": I("{product} queue cleared."),
    "AMQ8041": E(5, "The queue manager cannot be restarted or deleted because processes, "
                 "that were previously connected, are still running."),
    "AMQ8077": W("Entity '{entity}' has insufficient authority to access object '{name}' "
                 "({objtype}). The following requested permissions are unauthorized: "
                 "{auths}."),
    "AMQ8101": E(71, "{product} error ({code}) has occurred."),
    "AMQ8110": E(8, "{product} queue manager '{qmgr}' already exists."),
    "AMQ8135": E(10, "Not authorized. {detail}"),
    "AMQ8143": E(10, "{product} queue {name} not empty."),
    "AMQ8146": E(40, "{product} queue manager '{qmgr}' not available."),
    "AMQ8147": E(10, "{product} object {name} not found."),
    "AMQ8148": E(10, "{product} object {name} in use."),
    "AMQ8150": E(10, "{product} object already exists."),
    "AMQ8245": W("Entity '{entity}' has insufficient authority to display object '{name}' "
                 "({objtype})."),
    "AMQ8276": I("Display Connection details."),
    "AMQ8405": I("Syntax error detected at or near end of command segment below:-"),
    "AMQ8408": I("Display Queue Manager details."),
    "AMQ8409": I("Display Queue details."),
    "AMQ8415": I("Ping {product} Queue Manager command complete."),
    "AMQ8450": I("Display queue status details."),
    "AMQ8560": I("{product} security cache refreshed."),
    "AMQ8631": I("Display listener status details."),
    "AMQ8705": I("Display Queue Manager Status Details."),
    "AMQ8862": I("{product} authority record set."),
    "AMQ8863": I("{product} authority record deleted."),
    "AMQ8864": I("Display authority record details."),
    "AMQ9204": E(71, "Connection to host '{host}' rejected: {detail}"),
    "AMQ9218": E(71, "The TCP/IP listener program could not bind to {host}({port}): "
                 "{detail}"),
    # the listener (miqm/net): authentication, TLS, protocol errors
    "AMQ5534": E(1, "User ID '{principal}' authentication failed."),
    "AMQ5540": W("Application did not supply a user ID and password."),
    "AMQ9504": E(1, "A protocol error was detected: {detail}"),
    "AMQ9631": E(1, "The CipherSpec negotiated during the SSL handshake does not match: "
                 "{detail}"),
    "AMQ9637": E(1, "Channel is lacking a certificate: {detail}"),
}

_NUMBER = re.compile(r"AMQ\d{4}")


def message(number: str) -> Message:
    """The table entry for ``number`` (an unknown number: an error whose text is {detail})."""
    entry = MESSAGES.get(number)
    if entry is None:
        return Message("E", 0, "{detail}")
    if isinstance(entry, str):
        return Message("I", 0, entry)
    return entry


class _Fields(dict[str, object]):
    def __missing__(self, key: str) -> str:
        if key == "product":
            return PRODUCT
        if key == "version":
            return VERSION
        return "?"


def fields(number: str) -> set[str]:
    """The names of the fields the message text of ``number`` has."""
    import string

    return {name for _lit, name, _spec, _conv in string.Formatter().parse(message(number).text)
            if name}


def text(number: str, **fields: object) -> str:
    """The message text for ``number`` with its fields filled (missing fields shown as ?)."""
    return message(number).text.format_map(_Fields(fields))


def line(number: str, *, severity: bool = False, **fields: object) -> str:
    """``AMQnnnn: text`` (``AMQnnnnE: text`` with ``severity``, as runmqsc shows it)."""
    letter = message(number).severity if severity else ""
    return f"{number}{letter}: {text(number, **fields)}"


def exit_code(number: str | None) -> int:
    """The exit code a command ends with on ``number`` (0 if the table gives none)."""
    return message(number).exit_code if number else 0


def severity(number: str) -> str:
    """MQ's severity letter for ``number``: I, W, E or S."""
    return message(number).severity


_SEVERITY_NAMES = {"I": "informational", "W": "warning", "E": "error", "S": "severe"}


def markdown() -> str:
    """docs/messages.md: the table as a document (a test checks the file matches)."""
    out = [
        "# Messages",
        "",
        "Generated from `miqm/amq.py` by `python -m miqm.amq > docs/messages.md`; do not edit",
        "by hand (`tests/unit/test_amq.py` checks that this file matches the table).",
        "",
        "Every console line and error-log entry with an AMQ number comes from this one",
        "table. Numbers are IBM MQ's where MQ has a message for the situation, worded as MQ",
        f"words it but naming this product (`{PRODUCT}`) and its version where MQ names",
        "itself. **AMQ1000-AMQ1999 is miqm's own range**, which MQ does not use: AMQ10xx are",
        "console lines MQ prints without a number, AMQ11xx situations MQ has no message for.",
        "",
        "*Exit* is what a control command (crtmqm, strmqm, endmqm, dltmqm, dspmq, addmqinf,",
        "rcdmqimg, ...) exits with when it ends on that message; 0 means the message does not",
        "end a command. A running instance that stops itself (AMQ7279, AMQ7280, AMQ6708)",
        "exits 70, not the table's 71, which is what a start refused on that message exits",
        "with (`strmqm --foreground`'s codes are in docs/ha.md). `runmqsc` exits 10 or 20 as",
        "MQ's does, and the sample programs (amqsput, amqsget) exit 1 with MQ's reason code",
        "in their line, 2 for a usage error and 130 when interrupted. Fields in braces are",
        "filled in where the message is issued.",
        "",
        "| Number | Severity | Exit | Text |",
        "|---|---|---|---|",
    ]
    for number in sorted(MESSAGES):
        m = message(number)
        shown = m.text.replace("{product}", PRODUCT).replace("|", "\\|")
        out.append(f"| {number} | {_SEVERITY_NAMES.get(m.severity, m.severity)} | "
                   f"{m.exit_code} | {shown} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":  # pragma: no cover
    sys.stdout.write(markdown())
