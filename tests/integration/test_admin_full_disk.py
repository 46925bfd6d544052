"""crtmqm on a filesystem with no room for the log, for real (a small tmpfs; root only):
one line saying how much room the log needs and which flags ask for less, exit 71, and
nothing half-made left behind (the same crtmqm then works with smaller flags)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_bad_input import Env

pytestmark = [pytest.mark.integration, pytest.mark.root]


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_crtmqm_without_room_for_the_log_says_how_much_it_needs(
        small_fs: Path, tmp_path: Path) -> None:
    e = Env(tmp_path / "root")
    argv = ["crtmqm", "-md", str(small_fs / "data"), "-ld", str(small_fs / "log")]
    line = e.fails_with("AMQ6708", *argv, "QMFULL")
    # the defaults: 3 x 16 MiB primary files, 2 secondary
    assert "No space left on device" in line and "needs 48 MiB now" in line, line
    assert "32 MiB more for its 2 secondary files" in line and "-lf/-lp/-ls" in line, line
    assert not list((small_fs / "data").iterdir()) and not list((small_fs / "log").iterdir())
    assert "QMFULL" not in e.run("dspmq").stdout
    proc = e.run(*argv, "-lf", "64", "-lp", "2", "-ls", "1", "QMFULL")
    assert proc.returncode == 0, proc.stderr
