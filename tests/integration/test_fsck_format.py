"""amqmfsck -f on a filesystem with less room than the test file wants (root: a small
tmpfs): the file is reduced to fit, as MQ's amqmfsck does, instead of filling the
filesystem and failing at the end of a long format."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import fsckutil as fu

pytestmark = [pytest.mark.integration, pytest.mark.root]


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    with fu.tmpfs(tmp_path / "small", "4m") as d:
        yield d


def test_format_is_reduced_to_the_free_space(small_fs: Path) -> None:
    """-f (1 GiB by default) on a filesystem with 4 MiB free filled it and failed with
    'filesystem full'; the test could not be run at all without guessing -p."""
    res = fu.run("-f", str(small_fs))
    assert res.returncode == 0, res.stderr
    assert "reduced from 262144 to" in res.stdout, res.stdout
    size = (small_fs / "amqmfsck.dat").stat().st_size
    assert 0 < size <= 4 * 1024 * 1024 * 0.9 and size % (16 * 4096) == 0
    # the reduced file is a whole test file: a writer can use it and -i analyse it
    writer = fu.start("-a", "--json", str(small_fs), interruptible=True)
    try:
        fu.wait_state(small_fs, "a", "writing", proc=writer)
    finally:
        writer.send_signal(2)
        code, _, err = fu.finish(writer, timeout=60)
    assert code == 0, err
    res = fu.run("-i", str(small_fs))
    assert res.returncode == 0, res.stderr
    assert fu.run("-x", str(small_fs)).returncode == 0
    assert list(small_fs.iterdir()) == []
