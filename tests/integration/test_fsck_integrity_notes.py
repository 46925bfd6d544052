"""-i on a file that holds one generation only passed with 'The tests on the directory
completed successfully.' alone: no takeover was there to check (one writer wrote, or the
survivor wrote a whole lap over the pages around the takeover)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests import fsckutil as fu

pytestmark = pytest.mark.integration

WORDS = "no takeover is left to check"


def test_one_generation_is_said_to_test_no_outage(tmp_path: Path) -> None:
    assert fu.run("-f", "-p", "4096", str(tmp_path)).returncode == 0
    writer = fu.start("-a", str(tmp_path), interruptible=True)
    try:
        fu.wait_state(tmp_path, "a", "writing", proc=writer)
        time.sleep(0.2)
        writer.send_signal(signal.SIGINT)
        code, _, err = fu.finish(writer, timeout=60)
    finally:
        writer.kill()
    assert code == 0, err
    res = fu.run("-i", str(tmp_path))
    assert res.returncode == 0, res.stderr
    assert WORDS in res.stdout and res.stdout.strip().endswith("successfully."), res.stdout
    assert fu.run("-x", str(tmp_path)).returncode == 0
