"""Shared pytest configuration: root-only tests are skipped (and reported) when not root."""

from __future__ import annotations

import os

import pytest

from tests.lab import nfs_lab  # noqa: F401 - one session-wide NFSv4 lab for every module

# Instances started by tests listen on any free port, never the default 1414: two
# instances on one machine (and other test runs beside this one) must not collide.
os.environ.setdefault("MIQM_LISTENER_PORT", "0")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip tests marked ``root`` unless running as root (CI runs as root)."""
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
