"""One exception root for miqm, one subclass per subsystem.

Every error that can reach a user carries one line saying what is wrong and what to do.
The CLI prints ``str(err)`` (prefixed by the AMQ number when there is one) and exits with
``err.exit_code``; nothing else (no traceback) reaches the user. An error with an AMQ
number takes its exit code from the message table (:mod:`miqm.amq`); one without falls
back to its subsystem's ``default_exit``.
"""

from __future__ import annotations

import re

#: the AMQ number a user's line starts with: ``AMQ7026: ...`` (or ``AMQ7026E: ...``)
_LEADING_AMQ = re.compile(r"(AMQ\d{4})[IWES]?: ")


class MiqmError(Exception):
    """Root of every miqm error.

    ``amq`` is an MQ message number such as ``"AMQ7279"`` (see :mod:`miqm.amq`): given
    explicitly, else the table's number the message starts with (``ConfigError("AMQ7026:
    ...")`` is an AMQ7026, not its class's AMQ7880), else the class's;
    ``exit_code`` is what the command exits with: given explicitly, else the table's exit
    code for ``amq``, else the subsystem's ``default_exit``.
    """

    amq: str | None = None
    default_exit: int = 1
    _exit: int | None = None

    def __init__(
        self, message: str, *, amq: str | None = None, exit_code: int | None = None
    ) -> None:
        super().__init__(message)
        if amq is None:
            amq = leading_number(message)
        if amq is not None:
            self.amq = amq
        if exit_code is not None:
            self.exit_code = exit_code

    @property
    def exit_code(self) -> int:
        """The exit code of a command that ends on this error."""
        if self._exit is not None:
            return self._exit
        from miqm import amq as table

        return table.exit_code(self.amq) or self.default_exit

    @exit_code.setter
    def exit_code(self, value: int) -> None:
        self._exit = value

    def user_line(self) -> str:
        """The one line shown to a user."""
        text = str(self)
        return f"{self.amq}: {text}" if self.amq and not text.startswith("AMQ") else text


def leading_number(message: object) -> str | None:
    """The message table's number that ``message`` starts with (``AMQ8146: ...`` or
    ``AMQ8146E: ...``), or None."""
    m = _LEADING_AMQ.match(message) if isinstance(message, str) else None
    if m is None:
        return None
    from miqm import amq as table

    return m.group(1) if m.group(1) in table.MESSAGES else None


class UsageError(MiqmError):
    """Wrong flags or arguments on a command line."""

    default_exit = 2


class ConfigError(MiqmError):
    """A configuration file (mqs.ini, qm.ini) or value is missing, corrupt or out of range."""

    amq = "AMQ7880"


class QMgrNotFound(MiqmError):
    """No queue manager of that name is defined on this host."""

    amq = "AMQ7048"


class StoreError(MiqmError):
    """The log-and-queue store failed."""

    default_exit = 71


class LogCorruptError(StoreError):
    """The recovery log is damaged before its end (not a torn tail)."""

    amq = "AMQ6118"


class LogFullError(StoreError):
    """No log space is left for a record (AMQ7463 is MQ's 'log full')."""

    amq = "AMQ7463"


class LogWriteError(StoreError):
    """A log write or force failed (disk full, EIO): nothing after it is durable."""

    amq = "AMQ6708"


class ObjectError(StoreError):
    """A queue or other object is missing, already exists, or is in the wrong state."""

    default_exit = 10


class MessagingError(StoreError):
    """An MQI-style call failed with a reason code (``mqrc``), e.g. 2033 no message."""

    def __init__(self, message: str, *, mqrc: int, amq: str | None = None) -> None:
        super().__init__(message, amq=amq)
        self.mqrc = mqrc


class HAError(MiqmError):
    """The execution controller's multi-instance logic failed."""

    default_exit = 71


class OwnershipLostError(HAError):
    """This instance lost (or may have lost) the master lock: it must stop writing now."""

    amq = "AMQ7279"


class UnresponsiveError(HAError):
    """The liveness check found the logger making no progress."""

    amq = "AMQ7280"


class NetError(MiqmError):
    """A client could not reach or talk to a queue manager. ``mqrc`` is MQ's reason code."""

    def __init__(self, message: str, *, mqrc: int = 2059, amq: str | None = None) -> None:
        super().__init__(message, amq=amq)
        self.mqrc = mqrc


class AnalysisError(MiqmError):
    """``miqm analyze`` could not read its input or write its output (bad path, no Spark,
    nothing to analyse)."""

    exit_code = 1

class MetricsError(MiqmError):
    """The metrics endpoint cannot be served as configured (qm.ini ``Metrics:`` stanza,
    ``MIQM_METRICS_PORT``, ``miqm exporter --port``): a bad port, or one in use."""

    amq = "AMQ7880"
    exit_code = 71
