"""The README's by-hand section runs as written, from start to teardown.

The fenced block under "Trying it by hand" is taken from README.md as it is, its
``/tmp/miqm-`` paths pointed into this test's temporary directory, and run with ``sh -e``:
every command must succeed, the switchover must deliver the messages on the other host,
and the teardown must leave nothing behind.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parents[2] / "README.md"


def by_hand_block() -> str:
    """The first ```sh block after the 'Trying it by hand' heading."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Trying it by hand"):]
    m = re.search(r"```sh\n(.*?)```", section, re.S)
    assert m, "README.md: no ```sh block under 'Trying it by hand'"
    return m.group(1)


def _kill_leftovers(base: Path) -> None:
    for record in base.glob("*/run/*.json"):
        try:
            os.kill(int(json.loads(record.read_text())["pid"]), signal.SIGKILL)
        except (OSError, ValueError, KeyError):
            pass


def test_the_readme_by_hand_section_runs_as_written(tmp_path: Path) -> None:
    script = by_hand_block()
    assert "endmqm" in script and "rm -rf" in script  # it tears down what it made
    script = script.replace("/tmp/miqm-", f"{tmp_path}/miqm-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MIQM_")}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    try:
        proc = subprocess.run(["sh", "-e", "-c", script], env=env, capture_output=True,
                              text=True, timeout=240, cwd=tmp_path)
    finally:
        _kill_leftovers(tmp_path)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    out = proc.stdout
    assert "started using V" in out and "A standby instance of queue manager 'QM1'" in out
    assert "INSTANCE(hosta) MODE(Active)" in out and "INSTANCE(hostb) MODE(Standby)" in out
    assert re.search(r"master\(hosta,\d+\)", out) and re.search(r"standby\(hostb,\d+\)", out)
    status = next(json.loads(line) for line in out.splitlines() if line.startswith("{"))
    assert all(isinstance(i["pid"], int) for i in status["instances"])
    assert "hello\nworld\n" in out  # got back from hostb after the switchover
    assert "miqm queue manager 'QM1' deleted." in out
    assert sorted(os.listdir(tmp_path)) == []  # the teardown removed everything
