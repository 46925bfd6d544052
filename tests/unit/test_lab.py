"""The lab driver's own checks (no lab needed: only files and refusals)."""

from __future__ import annotations

from pathlib import Path

import pytest

from miqm.lab import LabError, running_lab


def test_running_lab_reads_the_lease_from_the_server_configuration(tmp_path: Path) -> None:
    (tmp_path / "export").mkdir()
    (tmp_path / "ganesha.conf").write_text("NFSV4 {\n    Lease_Lifetime = 7;\n}\n")
    lab = running_lab(tmp_path)
    assert lab.lease == 7 and lab.export_dir == tmp_path / "export"
    assert lab.url("qm/data") == "nfs4://10.77.0.1/export/qm/data?lease=7"


def test_running_lab_refuses_a_directory_that_is_not_a_lab(tmp_path: Path) -> None:
    with pytest.raises(LabError, match="not the directory of a lab"):
        running_lab(tmp_path)
    (tmp_path / "ganesha.conf").write_text("garbage")
    with pytest.raises(LabError, match="not a lab's server configuration"):
        running_lab(tmp_path)
