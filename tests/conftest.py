"""Shared pytest configuration: root-only tests are skipped (and reported) when not root;
as root, a skip root must not meet fails the run (the skip policy, tests/skips.py)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from typing import Any

import pytest

from tests import skips
from tests.lab import nfs_lab  # noqa: F401 - one session-wide NFSv4 lab for every module

# Instances started by tests listen on any free port, never the default 1414: two
# instances on one machine (and other test runs beside this one) must not collide.
os.environ.setdefault("MIQM_LISTENER_PORT", "0")

# A test that forgets to name its own host root must not write into this machine's
# /var/mqm (an event history was once left there): every test run gets a scratch default,
# removed at its end; tests that set MIQM_DATA_ROOT themselves are unaffected.
if "MIQM_DATA_ROOT" not in os.environ:
    _SCRATCH_ROOT = tempfile.mkdtemp(prefix="miqm-test-root-")
    os.environ["MIQM_DATA_ROOT"] = _SCRATCH_ROOT
    atexit.register(shutil.rmtree, _SCRATCH_ROOT, True)


# Under pytest-xdist (``-n 2 --dist loadgroup``, what ``make test`` runs) the tests that
# share one thing of the machine run on one worker, one after another: the NFSv4 lab (its
# namespaces and server are one per machine), the compose (its containers and ports) and
# the Spark session (one JVM, started once per worker that needs it).
_GROUPS = (("nfs_lab", "nfslab"), ("spark", "spark"))
_GROUPED_MODULES = {"test_compose": "compose"}


def _xdist_group(item: pytest.Item) -> str | None:
    fixtures = getattr(item, "fixturenames", ())
    for fixture, group in _GROUPS:
        if fixture in fixtures:
            return group
    module = getattr(item, "module", None)
    return _GROUPED_MODULES.get(module.__name__.rsplit(".", 1)[-1]) if module else None


def pytest_itemcollected(item: pytest.Item) -> None:
    """Group the tests that share a machine-wide resource (see ``_GROUPS``). Marked as each
    is collected, so the marks are there before any plugin's
    ``pytest_collection_modifyitems``, where xdist reads them, whatever the hooks' order."""
    group = _xdist_group(item)
    if group:
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Check that xdist took the groups (after its own hook, which renames each grouped
    test ``id@group``), and skip tests marked ``root`` unless running as root (CI runs as
    root)."""
    if os.environ.get("PYTEST_XDIST_WORKER") and config.getvalue("loadgroup"):
        lost = [item.nodeid for item in items
                if item.get_closest_marker("xdist_group") and "@" not in item.nodeid]
        if lost:
            # pytest 9.2 keeps a test's id where pytest-xdist 3.8 no longer renames it
            why = (f"pytest-xdist did not group the tests that share the NFSv4 lab, the "
                   f"compose or Spark (e.g. {lost[0]}) under pytest {pytest.__version__}: "
                   "install '.[test]' again (it pins pytest below 9.2), or run "
                   "TEST_WORKERS=0 make test")
            os.write(2, f"\n{why}\n".encode())  # a worker's exception shows no text
            raise pytest.UsageError(why)
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="needs root (network namespaces / NFSv4 lab)")
    for item in items:
        if "root" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """Keep each phase's report on the item so fixtures can see whether the test failed
    (the multi-instance fixtures dump both error logs then)."""
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)


# ---------------------------------------------------------------- the skip policy
# (tests/skips.py): every skip is listed at the end of the run; as root, a skip for a
# reason root must not meet (the NFSv4 lab did not come up, a tool CI installs is missing)
# fails the run, so a green CI cannot hide the tests that prove the HA promises.
_SKIPS: list[tuple[str, str]] = []  # (test id, reason)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Collect every skip with its reason."""
    if report.skipped and not hasattr(report, "wasxfail"):
        _SKIPS.append((report.nodeid, skips.skip_reason(report)))


def _forbidden() -> list[tuple[str, str]]:
    return [(node, why) for node, why in _SKIPS if skips.root_must_not_meet(why)]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """As root, a skip root must not meet turns a passing run into a failing one."""
    if skips.policy_active() and _forbidden() and exitstatus in (
            pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config
                            ) -> None:
    """The skip summary, grouped by reason, and the policy's verdict."""
    tr = terminalreporter
    if not _SKIPS:
        tr.write_line(f"skip summary: no test skipped (as root: "
                      f"{'yes' if os.geteuid() == 0 else 'no'})")
        return
    tr.section("skip summary")
    by_reason: dict[str, list[str]] = {}
    for node, why in _SKIPS:
        by_reason.setdefault(why, []).append(node)
    for why, nodes in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
        mark = "FORBIDDEN AS ROOT " if skips.root_must_not_meet(why) else ""
        tr.write_line(f"{len(nodes):4d} {mark}{why}  (e.g. {nodes[0]})")
    bad = _forbidden()
    if bad and skips.policy_active():
        tr.write_line(f"skip policy: FAILED - running as root, {len(bad)} test(s) skipped for "
                      "a reason root must not meet (see tests/skips.py; "
                      f"{skips.ALLOW_ENV}=1 allows it for a run by hand)", red=True, bold=True)
    elif bad:
        why = "not root" if os.geteuid() != 0 else f"{skips.ALLOW_ENV} set"
        tr.write_line(f"skip policy: {len(bad)} skip(s) CI would refuse ({why}: allowed here)",
                      yellow=True)
    else:
        tr.write_line(f"skip policy: ok ({len(_SKIPS)} skip(s), none CI would refuse)")
