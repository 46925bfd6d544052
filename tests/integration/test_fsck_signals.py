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


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_stop_signals_unwind_like_ctrl_c(tmp_path: Path, sig: signal.Signals) -> None:
    first = fu.start("-w", "--hold", "60", "--wait", "60", str(tmp_path))
    try:
        fu.wait_state(tmp_path, "w", "holding", proc=first)
        first.send_signal(sig)
        code, _, err = fu.finish(first, timeout=60)
    finally:
        first.kill()
    assert code == 128 + sig, err
    assert err.strip() == (f"amqmfsck: stopped by {sig.name}: the tests on {tmp_path} did "
                           "not complete"), err
    assert not list(tmp_path.glob("amqmfsck.w.*.state"))
    waiter = fu.start("-c", "--wait", "60", str(tmp_path))
    try:
        fu.wait_state(tmp_path, "c", "ready", proc=waiter)
        waiter.send_signal(sig)
        code, _, err = fu.finish(waiter, timeout=60)
    finally:
        waiter.kill()
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
