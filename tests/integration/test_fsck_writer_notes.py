"""-a says, without -v, why it stopped writing and what comes next; a writer stopped
(SIGSTOP) or cut off past the lease is not a server that stopped answering.

An -a writer stopped by SIGTERM printed 'The tests on the directory completed
successfully.' alone (the note 'stopped by SIGTERM after N pages; now run amqmfsck -i'
only with -v); one stopped 9 s on the NFSv4 lab (lease 5 s) noted that 'the filesystem
stopped answering' ('fsync call failed with "Command timed out"'), when it was the writer
that had stood still and lost its lock as NFSv4 says it must."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from fsck.integrity import writer_stopped_why
from lockfs.errors import LockLostError, VolumeIOError, VolumeStalled
from tests import fsckutil as fu

pytestmark = pytest.mark.integration


def test_a_writer_stopped_says_so_and_names_the_next_step(tmp_path: Path) -> None:
    assert fu.run("-f", "-p", "64", str(tmp_path)).returncode == 0
    writer = fu.start("-a", str(tmp_path))
    try:
        fu.wait_state(tmp_path, "a", "writing", proc=writer)
        writer.send_signal(signal.SIGTERM)
        code, out, err = fu.finish(writer, timeout=60)
    finally:
        writer.kill()
        writer.communicate()
    assert code == 0, err
    assert "Note: stopped by SIGTERM after" in out and "now run amqmfsck -i" in out, out
    assert out.strip().endswith("successfully."), out
    assert fu.run("-x", str(tmp_path)).returncode == 0


def test_a_call_failing_after_the_writer_stood_still_past_the_lease() -> None:
    timed_out = VolumeStalled('fsync call failed with "Command timed out"')
    why = writer_stopped_why(timed_out, 9.2, 5.0)
    assert "this process was stopped or cut off for 9.2 s" in why and "lease" in why
    # while it ran, the call's own failure stands
    assert writer_stopped_why(timed_out, 0.1, 5.0) == "the filesystem stopped answering"
    assert writer_stopped_why(LockLostError("lost"), 0.1, 5.0) == "its lock was lost"
    assert writer_stopped_why(VolumeIOError("EIO"), 30.0, None) == "a write failed"
