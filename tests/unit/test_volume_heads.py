"""``Volume.read_heads``: the first bytes and the size of many files in one call (a
takeover's open reads its queues' file heads this way; the nfs4 backend sends them all
before awaiting the first answer, tested on the lab in tests/integration)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockfs import FileHead, VolumeIOError
from lockfs.posix import PosixVolume


def test_heads_of_files_that_exist_and_none_for_those_that_do_not(tmp_path: Path) -> None:
    vol = PosixVolume(str(tmp_path))
    vol.makedirs("d/sub")
    (tmp_path / "d" / "small").write_bytes(b"0123456789")
    (tmp_path / "d" / "empty").write_bytes(b"")
    heads = vol.read_heads([("d/small", 4), ("d/small", 100), ("d/missing", 4),
                            ("gone/x", 4), ("d/empty", 8), ("d/small", 0)])
    assert heads == [FileHead(10, b"0123"), FileHead(10, b"0123456789"), None, None,
                     FileHead(0, b""), FileHead(10, b"")]
    assert vol.read_heads([]) == []


def test_a_directory_among_them_is_an_error_not_a_head(tmp_path: Path) -> None:
    vol = PosixVolume(str(tmp_path))
    vol.makedirs("d/sub")
    (tmp_path / "d" / "small").write_bytes(b"0123456789")
    with pytest.raises(VolumeIOError, match="is a directory"):
        vol.read_heads([("d/small", 4), ("d/sub", 4)])
