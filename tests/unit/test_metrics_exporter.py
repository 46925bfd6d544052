"""``miqm exporter``'s collector on a real data directory that goes away and comes back:
the failed reads are counted (``miqm_qmgr_probe_errors_total``) and said once, with the
reason, instead of showing only as "Status not available", as a slow read does."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from miqm.metrics.exporter import QMgrCollector


def _exposition(collector: QMgrCollector) -> str:
    from prometheus_client import CollectorRegistry

    from miqm.metrics.server import exposition

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return exposition(registry).decode()


def scratch_collector(tmp_path: Path) -> tuple[Path, list[str], QMgrCollector]:
    """A data directory QMX with a qm.ini and no instance, and the exporter's collector of
    it on host hostc, whose warnings go to the list returned."""
    data = tmp_path / "QMX"
    data.mkdir()
    (data / "qm.ini").write_text("Log:\n   LogPath=/x\n")
    said: list[str] = []
    collector = QMgrCollector("QMX", str(data), "hostc", deadline=10.0,
                              local=lambda: None, warn=said.append)
    return data, said, collector


def _one(text: str, name: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.startswith(name) and ln.endswith(" 1.0")]
    assert len(lines) == 1, lines
    return lines[0]


def test_a_missing_data_directory_is_counted_and_said_once_then_its_return(
        tmp_path: Path) -> None:
    data, said, collector = scratch_collector(tmp_path)
    text = _exposition(collector)
    assert 'status="Status not available"' not in _one(text, "miqm_qmgr_status{")
    assert 'miqm_qmgr_probe_errors_total{instance="hostc",qmgr="QMX"} 0.0' in text
    assert said == []

    shutil.move(str(data), str(tmp_path / "moved"))  # removed, or unmounted
    for _ in range(3):
        text = _exposition(collector)
    assert 'status="Status not available"' in _one(text, "miqm_qmgr_status{")
    assert re.search(r'miqm_qmgr_probe_errors_total\{[^}]*\} 3\.0', text), text
    assert len(said) == 1, said  # once, not once a scrape
    assert "cannot read the shared files of 'QMX'" in said[0] and str(data) in said[0]
    assert "\n" not in said[0]

    shutil.move(str(tmp_path / "moved"), str(data))
    text = _exposition(collector)
    assert 'status="Status not available"' not in _one(text, "miqm_qmgr_status{")
    assert len(said) == 2 and "can be read again" in said[1]
