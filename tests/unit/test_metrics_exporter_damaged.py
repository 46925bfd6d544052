"""``miqm exporter`` with a damaged ``qmstatus.ini`` and no instance running: dspmq shows
"Status not available" and names the file and the remedy; the exporter served the same
status with its reads working (``miqm_qmgr_status_available 1``, no probe error, nothing
said), so MiqmStatusNotAvailable sent the operator to the mount and the NFS server. It now
exports ``miqm_qmgr_status_damaged`` and says dspmq's line once on its output."""

from __future__ import annotations

from pathlib import Path

from tests.unit.test_metrics_exporter import _exposition, scratch_collector


def test_a_damaged_status_file_is_exported_and_said_once_then_its_repair(
        tmp_path: Path) -> None:
    data, said, collector = scratch_collector(tmp_path)
    text = _exposition(collector)
    assert 'miqm_qmgr_status_damaged{instance="hostc",qmgr="QMX"} 0.0' in text
    assert said == []

    (data / "qmstatus.ini").write_text("garbage[[[\n")
    for _ in range(3):
        text = _exposition(collector)
    assert ('miqm_qmgr_status{instance="hostc",qmgr="QMX",status="Status not available"} '
            '1.0') in text
    assert 'miqm_qmgr_status_available{instance="hostc",qmgr="QMX"} 1.0' in text
    assert 'miqm_qmgr_status_damaged{instance="hostc",qmgr="QMX"} 1.0' in text
    assert len(said) == 1, said  # once, not once a scrape
    assert "qmstatus.ini" in said[0] and "damaged" in said[0] and "\n" not in said[0]
    assert "rename it" in said[0]  # dspmq's remedy, not "check the mount"

    (data / "qmstatus.ini").unlink()  # renamed away, as dspmq says
    text = _exposition(collector)
    assert 'miqm_qmgr_status_damaged{instance="hostc",qmgr="QMX"} 0.0' in text
    assert len(said) == 2 and "can be read again" in said[1]
