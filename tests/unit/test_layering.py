"""The import structure the layering rules ask for (docs/architecture.md): each checked
in a fresh interpreter, so what another test imported cannot hide a dependency."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _fresh(code: str) -> None:
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_the_volume_interface_names_none_of_its_backends() -> None:
    imported, _ = _imports_and_private_uses((ROOT / "lockfs/volume.py").read_text())
    assert not imported & {"lockfs.posix", "lockfs.nfs4", "lockfs.faults", "lockfs.recording"}
    _fresh("import sys, lockfs.volume\n"
           "found = [m for m in ('lockfs.posix', 'lockfs.nfs4') if m in sys.modules]\n"
           "assert not found, found")


def test_open_volume_keeps_its_import_paths(tmp_path: Path) -> None:
    _fresh("import lockfs, lockfs.open, lockfs.volume\n"
           "from lockfs.volume import open_volume\n"
           "assert open_volume is lockfs.open_volume is lockfs.open.open_volume\n"
           f"v = open_volume({str(tmp_path)!r})\n"
           "assert type(v).__name__ == 'PosixVolume', v")


def _imports_and_private_uses(source: str) -> tuple[set[str], set[str]]:
    """Modules ``source`` imports anywhere (function bodies too), and the private
    attributes it reads of a name ``store``."""
    tree = ast.parse(source)
    imported = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    private = {f"{n.value.id}.{n.attr}" for n in ast.walk(tree)
               if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
               and n.value.id == "store" and n.attr.startswith("_")}
    return imported, private


def test_media_recovery_needs_nothing_private_of_the_store() -> None:
    imported, private = _imports_and_private_uses((ROOT / "miqm/store/media.py").read_text())
    assert "miqm.store.qmstore" not in imported
    assert private == set()
    # what the check would have found before media recovery had its own interface
    imported, private = _imports_and_private_uses(
        "def f(store):\n    from miqm.store.qmstore import X\n    store._append(store._lock)\n")
    assert "miqm.store.qmstore" in imported and private == {"store._append", "store._lock"}
