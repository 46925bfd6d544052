"""``miqm bench analyze`` (the analysis benchmark, miqm.bench.analyze): bad sizes are one
line and exit 2, before anything is generated or started. The benchmark itself is long
(1M and 10M events) and prints figures; it is run by hand (docs/benchmarks.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize("sizes", ["abc", "10", ""])
def test_bad_sizes_are_one_line(sizes: str, tmp_path: Path) -> None:
    exe = os.path.join(os.path.dirname(sys.executable), "miqm")
    p = subprocess.run([exe, "bench", "analyze", "--sizes", sizes, "--dir",
                        str(tmp_path / "b")], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stdout + p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "sizes" in lines[0] and "Traceback" not in p.stderr
    assert not (tmp_path / "b").exists()


def test_a_history_is_reused_only_for_its_own_seed(tmp_path: Path) -> None:
    """The generated history was kept as DIR/<size> and reused whatever --seed asked for;
    one left half-made by a stopped run was refused ('not empty') at every later run."""
    from miqm.bench.analyze import _generate

    one = _generate(1000, 1, str(tmp_path))
    two = _generate(1000, 2, str(tmp_path))
    assert one != two
    texts = [sorted(p.read_text() for p in Path(d).rglob("*.jsonl")) for d in (one, two)]
    assert texts[0] and texts[0] != texts[1]
    assert _generate(1000, 1, str(tmp_path)) == one  # reused
    half = Path(_generate(1000, 3, str(tmp_path)))
    (half / ".generated.json").unlink()  # as a run stopped before the end leaves it
    assert _generate(1000, 3, str(tmp_path)) == str(half)
    assert (half / ".generated.json").exists()
