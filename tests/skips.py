"""The skip policy: which skips a run as root must not meet, and the skip summary.

CI runs as root on a machine where ``make install-system`` installed everything: there a
test that skips because the NFSv4 lab did not come up, a network namespace could not be
made, or podman / FUSE / promtool / nfs-ganesha is missing proves nothing, and a green run
would hide it. :func:`root_must_not_meet` recognises those reasons; ``tests/conftest.py``
turns a run as root that met one into a failing run (exit status 1) and prints every skip,
grouped by reason, at the end of every run.

Skips that are legitimate anywhere (one CPU, the C parts switched off with
``MIQM_NATIVE_LOG=0``) do not match. A test that needs something CI always provides can
say so explicitly with :func:`skip_unavailable` (its reason starts with ``unavailable:``).
``MIQM_ALLOW_SKIPS=1`` turns the policy off for a run by hand as root on a machine
without the lab.
"""

from __future__ import annotations

import os
import re
from typing import NoReturn

import pytest

#: Reasons a run as root (CI) must never meet. Case-insensitive, searched in the reason.
ROOT_MUST_NOT_MEET = (
    r"unavailable:",
    r"NFSv4 lab",
    r"needs root",
    r"namespace",
    r"netns",
    r"ganesha",
    r"libnfs",
    r"podman",
    r"\bfuse",
    r"bindfs",
    r"promtool",
    r"prometheus",
    r"alertmanager",
    r"iptables",
    r"not installed",
    r"install-system",
    r"not built",
    r"cannot mount",
    r"loop device",
)
_PATTERN = re.compile("|".join(ROOT_MUST_NOT_MEET), re.IGNORECASE)
ALLOW_ENV = "MIQM_ALLOW_SKIPS"


def root_must_not_meet(reason: str) -> bool:
    """True if a skip with ``reason`` is one a run as root (CI) must not meet."""
    return bool(_PATTERN.search(reason))


def policy_active() -> bool:
    """True when skips root must not meet fail the run: as root, unless MIQM_ALLOW_SKIPS=1."""
    return os.geteuid() == 0 and os.environ.get(ALLOW_ENV, "") not in ("1", "yes", "true")


def skip_unavailable(what: str) -> NoReturn:
    """Skip because ``what`` (something CI provides, e.g. a tool installed by
    ``make install-system``) is missing: as root this fails the run."""
    pytest.skip(f"unavailable: {what}")


def c_part_missing(what: str) -> str:
    """The skip reason when the C part ``what`` is None: switched off with
    ``MIQM_NATIVE_LOG=0`` (the run on the pure-Python twins), or really not built."""
    if os.environ.get("MIQM_NATIVE_LOG", "1") == "0":
        return f"{what}: the C parts are switched off (MIQM_NATIVE_LOG=0)"
    return f"{what} is not built (pip install -e . builds it)"


def skip_reason(report: pytest.TestReport) -> str:
    """The reason of a skipped report (``longrepr`` is (file, line, "Skipped: reason"))."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        reason = str(longrepr[2])
    else:
        reason = str(longrepr)
    return reason.removeprefix("Skipped: ")
