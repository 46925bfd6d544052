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


def test_the_posix_reads_answer_as_the_file_by_file_ones(tmp_path: Path) -> None:
    """The posix backend's own reads (open read-only, fstat, pread) give what the base
    class's stat and read of each file give, errors included."""
    from lockfs.errors import VolumeNotFound
    from lockfs.volume import Volume

    vol = PosixVolume(str(tmp_path))
    vol.makedirs("d/sub")
    (tmp_path / "d" / "small").write_bytes(b"0123456789")
    (tmp_path / "d" / "big").write_bytes(bytes(range(256)) * 64)
    wanted = [("d/small", 4), ("d/big", 4096), ("d/big", 0), ("d/missing", 4),
              ("gone/x", 4), ("d/big", 1 << 20)]
    assert vol.read_heads(wanted) == Volume.read_heads(vol, wanted)
    for bad in ([("d/small/x", 4)], [("d/sub", 4)]):  # through a file; a directory
        with pytest.raises(VolumeIOError) as got:
            vol.read_heads(bad)
        with pytest.raises(VolumeIOError) as ref:
            Volume.read_heads(vol, bad)
        assert got.value.errno == ref.value.errno and not isinstance(got.value, VolumeNotFound)
