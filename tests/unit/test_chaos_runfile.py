"""Chaos: a run record tampered with by hand (``$MIQM_DATA_ROOT/run/<QM>.json``).

The record is this host's note of its running instance; local commands read it first.
A pid written over with one no process can have must make the record stale (ignored),
never an internal error in every local command (strmqm could not start the queue
manager at all)."""

from __future__ import annotations

import os

import pytest

from miqm.ha import runfile


@pytest.mark.parametrize("pid", [10**30, 2**63, -1, 0, -(10**30)])
def test_a_pid_no_process_can_have_is_not_alive(pid: int) -> None:
    assert runfile.alive(pid) is False
    assert runfile.instance_alive(pid) is False


@pytest.mark.parametrize("pid", [10**30, "100000000000000000000000", -1, 0])
def test_a_record_with_an_impossible_pid_is_stale(tmp_path, monkeypatch,  # type: ignore[no-untyped-def]
                                                  pid: object) -> None:
    monkeypatch.setenv("MIQM_DATA_ROOT", str(tmp_path))
    runfile.write("QM1", {"pid": pid, "mode": "active", "address": ["127.0.0.1", 1]})
    assert runfile.read("QM1") is None
    runfile.remove("QM1", os.getpid())  # not ours: stays
    assert runfile.read("QM1", check_alive=False) is not None


def test_this_process_is_alive() -> None:
    assert runfile.alive(os.getpid()) is True
