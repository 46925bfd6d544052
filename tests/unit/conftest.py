"""Fixtures shared by the store's unit tests."""

from __future__ import annotations

import pytest

from miqm.store.logbuffer import native_available
from tests.skips import c_part_missing


@pytest.fixture(params=["c-parts", "python-twins"])
def c_parts_or_python(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test once over the store's C parts (append buffer, force queue, ...) and once
    over their pure-Python twins: the one switch, ``MIQM_NATIVE_LOG``."""
    if request.param == "c-parts":
        if not native_available():
            pytest.skip(c_part_missing("the C parts"))
        monkeypatch.setenv("MIQM_NATIVE_LOG", "1")
    else:
        monkeypatch.setenv("MIQM_NATIVE_LOG", "0")
    return str(request.param)
