"""Shared pytest configuration: root-only tests are skipped (and reported) when not root."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip tests marked ``root`` unless running as root (CI runs as root)."""
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="needs root (network namespaces / NFSv4 lab)")
    for item in items:
        if "root" in item.keywords:
            item.add_marker(skip)
