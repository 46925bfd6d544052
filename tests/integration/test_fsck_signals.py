"""amqmfsck stopped by SIGTERM (kill, timeout, systemd) or SIGHUP (the administrator's
ssh session dropped): one line, exit 128+signal, and nothing left behind. Both ended it
at once: no word, the state files left, half a test file from -f."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests import fsckutil as fu

pytestmark = pytest.mark.integration


def _signalled(directory: Path, test: str, state: str, sig: signal.Signals,
               *args: str) -> tuple[int, str]:
    """amqmfsck -``test`` started on ``directory``, sent ``sig`` once in ``state``:
    (exit code, stderr)."""
    proc = fu.start(f"-{test}", *args, "--wait", "60", str(directory))
    try:
        fu.wait_state(directory, test, state, proc=proc)
        proc.send_signal(sig)
        code, _, err = fu.finish(proc, timeout=60)
    finally:
        proc.kill()
    return code, err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_stop_signals_unwind_like_ctrl_c(tmp_path: Path, sig: signal.Signals) -> None:
    code, err = _signalled(tmp_path, "w", "holding", sig, "--hold", "60")
    assert code == 128 + sig, err
    assert err.strip() == (f"amqmfsck: stopped by {sig.name}: the tests on {tmp_path} did "
                           "not complete"), err
    assert not list(tmp_path.glob("amqmfsck.w.*.state"))
    code, err = _signalled(tmp_path, "c", "ready", sig)
    assert code == 128 + sig and not list(tmp_path.glob("amqmfsck.c.*")), err


def test_format_stopped_by_sigterm_leaves_no_half_test_file(tmp_path: Path) -> None:
    fmt = fu.start("-f", "-p", "1000000", str(tmp_path))
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "amqmfsck.dat").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        fmt.send_signal(signal.SIGTERM)
        code, _, err = fu.finish(fmt, timeout=60)
    finally:
        fmt.kill()
    assert code == 143 and "stopped by SIGTERM" in err, err
    assert not (tmp_path / "amqmfsck.dat").exists()
