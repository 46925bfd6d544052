"""``miqm analyze run --out DIR`` when DIR cannot be written, already holds an earlier
run, or the run fails. Before: an unwritable DIR was found only after the whole Spark job,
as a PermissionError traceback; a --no-report run into an earlier run's DIR left that
run's report.html beside the new summary (a report of another history); a failed run left
an empty DIR behind. Unwritable directories are made with ``chattr +i`` (root can write
anywhere else); without it those tests are skipped."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
pytestmark = pytest.mark.timeout(900)

LINES = [
    '{"v":1,"ts":"2026-01-05T00:00:00Z","qmgr":"QM1","host":"hosta","instance_id":"a1",'
    '"seq":1,"event":"role","role":"active","generation":1,"failover":false}',
    '{"v":1,"ts":"2026-01-05T00:00:10Z","qmgr":"QM1","host":"hosta","instance_id":"a1",'
    '"seq":2,"event":"verify","ok":true,"latency_s":0.002}',
]


def _history(root: Path, verifies: int = 1) -> Path:
    d = root / "events"
    d.mkdir(parents=True, exist_ok=True)
    extra = [LINES[1].replace('"seq":2', f'"seq":{3 + i}').replace(":10Z", f":{11 + i}Z")
             for i in range(verifies - 1)]
    (d / "hosta.jsonl").write_text("\n".join(LINES + extra) + "\n")
    return d


@pytest.fixture
def immutable() -> Iterator[list[Path]]:
    """Directories made unwritable (even by root) with chattr +i; undone afterwards."""
    if shutil.which("chattr") is None:
        pytest.skip("no chattr")
    made: list[Path] = []
    yield made
    for d in made:
        subprocess.run(["chattr", "-i", str(d)], check=False)


def _freeze(d: Path, made: list[Path]) -> None:
    if subprocess.run(["chattr", "+i", str(d)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is refused here (not root, or the filesystem)")
    made.append(d)
    try:
        (d / "probe").touch()
    except OSError:
        return
    (d / "probe").unlink()
    pytest.skip("an immutable directory is writable here")


def test_an_unwritable_output_directory_is_one_line_before_spark(
        tmp_path: Path, immutable: list[Path]) -> None:
    hist = _history(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    _freeze(out, immutable)
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # Spark's log would be made here
    proc = subprocess.run(["miqm", "analyze", "run", str(hist), "--out", str(out)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"cannot write the output directory {out}: Operation not permitted: name a "
        "directory this user can write with --out"], proc.stderr
    assert not list(tmp_path.glob("miqm-spark-*.log"))  # no JVM was started


def test_a_rerun_replaces_the_earlier_outputs_and_keeps_the_users_files(
        spark: object, tmp_path: Path) -> None:
    from miqm.analysis.run import Progress, analyze

    out = tmp_path / "out"
    analyze([str(_history(tmp_path / "h1"))], str(out), spark=spark)
    assert (out / "report.html").exists()
    (out / "notes.txt").write_text("mine")
    said: list[str] = []
    s = analyze([str(_history(tmp_path / "h2", verifies=3))], str(out), spark=spark,
                report=False, progress=Progress(9, enabled=True, echo=said.append))
    assert s["events"] == 4
    # the stage lines say what this run writes (the last one named report.html)
    assert said[-1].startswith("analyze [9/9] writing tables and summary.json (")
    assert json.loads((out / "summary.json").read_text())["events"] == 4
    # the earlier report described another history: gone; the user's file: kept
    assert not (out / "report.html").exists()
    assert (out / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "summary.json", "tables"]


def test_a_write_that_fails_after_the_job_is_one_line_and_keeps_the_earlier_run(
        spark: object, tmp_path: Path, immutable: list[Path]) -> None:
    from miqm.analysis.run import analyze
    from miqm.errors import AnalysisError

    out = tmp_path / "out"
    analyze([str(_history(tmp_path / "h1"))], str(out), spark=spark, report=False)
    before = (out / "summary.json").read_text()
    _freeze(out / "tables", immutable)
    with pytest.raises(AnalysisError) as err:
        analyze([str(_history(tmp_path / "h2", verifies=3))], str(out), spark=spark,
                report=False)
    assert str(err.value) == (f"cannot write the results in {out}: Operation not "
                              "permitted: free space there or name another directory "
                              "with --out")
    assert (out / "summary.json").read_text() == before
    assert sorted(p.name for p in out.iterdir()) == ["summary.json", "tables"]


def test_a_failed_run_leaves_no_output_directory(spark: object, tmp_path: Path) -> None:
    from miqm.analysis.run import analyze
    from miqm.errors import AnalysisError

    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    out = tmp_path / "out"
    with pytest.raises(AnalysisError, match="no events"):
        analyze([str(empty)], str(out), spark=spark)
    assert not out.exists()
