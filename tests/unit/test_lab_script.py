"""Where ``miqm.lab`` finds the NFSv4 lab script: a test fixture of the source checkout
(``tests/nfslab/lab.sh``), not something ``deploy/`` ships."""

from __future__ import annotations

from pathlib import Path

import pytest

from miqm import lab

ROOT = Path(__file__).resolve().parents[2]


def test_found_in_the_checkout_from_any_directory(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MIQM_LAB_SH", raising=False)
    monkeypatch.chdir(tmp_path)
    script = lab.lab_script()
    assert script == ROOT / "tests" / "nfslab" / "lab.sh"
    assert script.exists() and (script.parent / "ganesha.conf.in").exists()
    assert not (ROOT / "deploy" / "lab.sh").exists()


def test_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIQM_LAB_SH", str(tmp_path / "lab.sh"))
    assert lab.lab_script() == tmp_path / "lab.sh"
