"""The event history's host-local copy: same lines as the shared copy, written even when
the shared write hangs, rotated by size."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from lockfs.errors import LockFsError
from miqm.ha.events import LOCAL_KEEP, EventLog


class HangingVolume:
    """A volume whose writes block until released (a partitioned NFS mount)."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def makedirs(self, path: str) -> None:
        self.release.wait(10)

    def open(self, *a: object, **k: object) -> None:
        raise LockFsError("the mount came back read-only")


def test_local_copy_written_while_the_shared_write_hangs(tmp_path: Path) -> None:
    vol = HangingVolume()
    log = EventLog(vol, "QM1", "hosta", "hosta-1-2", local=str(tmp_path))  # type: ignore[arg-type]
    log.emit("verify", ok=False, error="timed out")
    log.emit("fatal", amq="AMQ7279", detail="verify failed")
    log.close(0.5)  # the fatal path's short deadline: the local copy is done by then
    lines = [json.loads(x) for x in (tmp_path / "hosta.jsonl").read_text().splitlines()]
    assert [e["event"] for e in lines] == ["verify", "fatal"]
    assert [e["seq"] for e in lines] == [1, 2]
    assert lines[1]["amq"] == "AMQ7279" and lines[0]["instance_id"] == "hosta-1-2"
    vol.release.set()


def test_local_copy_rotates_by_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIQM_EVENTS_LOCAL_MAX_BYTES", "1000")
    for round_ in range(6):
        log = EventLog(None, "QM1", "hosta", f"hosta-{round_}-1", local=str(tmp_path))
        for i in range(8):
            log.emit("verify", ok=True, latency_s=0.001 * i)
        log.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["hosta.jsonl"] + [f"hosta.jsonl.{i}" for i in range(1, LOCAL_KEEP + 1)]
    for p in tmp_path.iterdir():
        assert p.stat().st_size < 1000 + 8 * 200
        for line in p.read_text().splitlines():
            json.loads(line)


def test_no_local_copy_when_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIQM_EVENTS_LOCAL_MAX_BYTES", "0")
    log = EventLog(None, "QM1", "hosta", "i", local=str(tmp_path))
    log.emit("verify", ok=True, latency_s=0.001)
    log.close()
    assert list(tmp_path.iterdir()) == []


def test_a_torn_last_line_is_not_glued_to_the_next(tmp_path: Path) -> None:
    """A crash mid-write leaves half a line; the next event went straight onto it and
    the analysis lost both lines (it splits glued lines since, but they should not be)."""
    (tmp_path / "hosta.jsonl").write_text('{"v":1,"event":"verify","ok":tr')
    log = EventLog(None, "QM1", "hosta", "i", local=str(tmp_path))
    log.emit("fatal", amq="AMQ7280")
    log.close()
    lines = (tmp_path / "hosta.jsonl").read_text().splitlines()
    assert lines[0] == '{"v":1,"event":"verify","ok":tr'
    assert json.loads(lines[1])["event"] == "fatal"


def test_a_short_write_on_a_full_disk_leaves_no_half_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno
    import os

    from miqm.ha import events

    (tmp_path / "hosta.jsonl").write_text('{"v":1,"event":"verify"}\n')
    real = os.write
    calls = {"n": 0}

    def short_then_full(fd: int, data) -> int:  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 1:
            return real(fd, bytes(data[:10]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(events.os, "write", short_then_full)
    log = EventLog(None, "QM1", "hosta", "i", local=str(tmp_path))
    log.emit("fatal", amq="AMQ7280")
    log.close()
    assert calls["n"] == 2
    assert (tmp_path / "hosta.jsonl").read_text() == '{"v":1,"event":"verify"}\n'


def test_the_shared_copy_starts_a_new_line_after_a_torn_one(tmp_path: Path) -> None:
    from lockfs.posix import PosixVolume

    shared = tmp_path / "data"
    (shared / "events").mkdir(parents=True)
    (shared / "events" / "hosta.jsonl").write_text('{"v":1,"event":"ver')
    log = EventLog(PosixVolume(str(shared)), "QM1", "hosta", "i", local=None)
    log.emit("fatal", amq="AMQ7280")
    log.close()
    lines = (shared / "events" / "hosta.jsonl").read_text().splitlines()
    assert lines[0] == '{"v":1,"event":"ver' and json.loads(lines[1])["event"] == "fatal"
