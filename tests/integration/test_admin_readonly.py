"""A queue manager whose data directory is on a filesystem mounted read-only, for real (a
tmpfs remounted ro; root only), through the real commands: each says the filesystem is
read-only, in one line, and nothing is lost; dspmq still shows how it ended."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_bad_input import Env

pytestmark = [pytest.mark.integration, pytest.mark.root]


@pytest.fixture
def ro_qm(tmp_path: Path) -> Iterator[tuple[Env, Path]]:
    """QMRO created on a tmpfs, its data directory remounted read-only once it ended."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], check=True)
    e = Env(tmp_path / "root")
    try:
        proc = e.run("crtmqm", "-lf", "64", "-md", str(mnt / "data"), "-ld",
                     str(tmp_path / "log"), "QMRO")
        assert proc.returncode == 0, proc.stderr
        assert e.run("strmqm", "QMRO").returncode == 0
        assert e.run("endmqm", "-i", "QMRO").returncode == 0
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        yield e, mnt / "data" / "QMRO"
    finally:
        e.run("endmqm", "-i", "QMRO")
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_commands_on_a_read_only_data_directory(ro_qm: tuple[Env, Path]) -> None:
    e, data = ro_qm
    before = sorted(p.name for p in data.iterdir())
    # dspmq reads the status without writing: it was 'Status not available'
    out = e.run("dspmq", "-m", "QMRO").stdout
    assert "STATUS(Ended immediately)" in out, out
    # dltmqm: the lock files could not be opened to ask, which read as 'running'
    line = e.fails_with("AMQ6062", "dltmqm", "QMRO")
    assert "read-only" in line and "nothing was deleted" in line and "AMQ8041" not in line
    # setmqini: not a permission chmod could fix
    line = e.fails_with("read-only", "setmqini", "-m", "QMRO", "-s", "Log", "-k",
                        "LogBufferPages", "-v", "100")
    assert "AMQ7077" not in line and "Remount it read-write" in line, line
    line = e.fails_with("AMQ6062", "strmqm", "QMRO")
    assert "read-only" in line, line
    assert sorted(p.name for p in data.iterdir()) == before
    assert "QMRO" in e.run("dspmq").stdout  # still registered
