"""Damaged store files at restart each give one line with an AMQ number and what to do
(found by exploratory testing: a corrupt or missing amqalchk.fil printed a bare
'checkpoint file ... is corrupt: bad checksum or header', no AMQ number, no remedy)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockfs.posix import PosixVolume
from miqm.errors import StoreError
from miqm.store import checkpoint as ckpt


def _written(tmp_path: Path) -> PosixVolume:
    vol = PosixVolume(str(tmp_path))
    ckpt.write(vol, ckpt.CheckpointInfo(seq=3, cp_lsn=100, restart_lsn=50, queues={"Q": 2}))
    return vol


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "garbage"])
def test_a_damaged_checkpoint_file_is_amq6118_saying_restore(tmp_path: Path,
                                                              damage: str) -> None:
    vol = _written(tmp_path)
    path = tmp_path / ckpt.NAME
    raw = bytearray(path.read_bytes())
    if damage == "flip":
        raw[30] ^= 0xFF
    elif damage == "truncate":
        raw = raw[:len(raw) // 2]
    elif damage == "empty":
        raw = bytearray()
    else:
        raw = bytearray(b"not a checkpoint file at all, just text\n" * 3)
    path.write_bytes(bytes(raw))
    with pytest.raises(StoreError) as info:
        ckpt.read(vol)
    err = info.value
    assert err.amq == "AMQ6118"
    line = str(err)
    assert line.startswith("AMQ6118: ") and "\n" not in line
    assert "amqalchk.fil is corrupt" in line and "restore" in line and "backup" in line


def test_a_missing_checkpoint_file_is_amq6118_saying_restore(tmp_path: Path) -> None:
    vol = _written(tmp_path)
    (tmp_path / ckpt.NAME).unlink()
    with pytest.raises(StoreError) as info:
        ckpt.read(vol)
    assert info.value.amq == "AMQ6118"
    assert "missing" in str(info.value) and "restore" in str(info.value)


@pytest.mark.parametrize("linear", [True, False])
def test_a_missing_queue_file_is_reported_with_what_to_do(tmp_path: Path,
                                                           linear: bool) -> None:
    """AMQ7472 for a queue file gone while the queue manager was down names the remedy:
    rcrmqobj on a linear log, a restore or DELETE QLOCAL on a circular one (it said only
    'queue file ... is missing')."""
    from miqm.store.qmstore import QueueManagerStore
    from tests.unit.test_store_units import LINEAR, SETTINGS, Harness

    settings = LINEAR if linear else SETTINGS
    h = Harness(tmp_path)
    s = QueueManagerStore.open(h.data, None, "QM", settings, h.tuning, generation=1,
                               recovery_log=h.log, background=False)
    s.define_queue("Q", DEFPSIST="YES")
    s.put("Q", b"a")
    s.close()
    (tmp_path / "queues/Q/q").unlink()
    lines: list[tuple[str, str]] = []
    s = QueueManagerStore.open(h.data, None, "QM", settings, h.tuning, generation=2,
                               recovery_log=h.log, background=False,
                               errlog=lambda a, t: lines.append((a, t)))
    try:
        damaged = [t for a, t in lines if a == "AMQ7472"]
        assert len(damaged) == 1 and "is missing" in damaged[0], lines
        if linear:
            assert "rcrmqobj -m QM -t qlocal Q" in damaged[0]
        else:
            assert "DELETE QLOCAL" in damaged[0] and "rcrmqobj" not in damaged[0]
    finally:
        s.close()


@pytest.mark.parametrize("linear", [True, False])
def test_a_corrupt_message_found_by_a_get_makes_the_queue_damaged(tmp_path: Path,
                                                                  linear: bool) -> None:
    """A message body damaged in the queue file while the queue manager was down is not
    read at restart (the index is trusted); the get that reads it made it MQRC 2102 on
    every get, the queue's other messages stuck behind it, nothing in the error log and
    'rcrmqobj' advised on a circular log too. Now the queue is damaged from that get on:
    AMQ7472 once in the error log with the remedy for its log type, MQRC 2101, and on a
    linear log rcrmqobj brings every message back."""
    from tests.unit.test_store_units import (
        LINEAR,
        SETTINGS,
        _file_records,
        _harness_with_messages,
        _reopen,
        drain,
    )

    settings = LINEAR if linear else SETTINGS
    h, lines = _harness_with_messages(tmp_path, 300, settings)
    assert (tmp_path / "queues/Q/idx").exists()  # restart trusts it: no body is read
    at, _stored = _file_records(tmp_path)[5]
    path = tmp_path / "queues/Q/q"
    raw = bytearray(path.read_bytes())
    raw[at + 40] ^= 0xFF
    path.write_bytes(bytes(raw))
    s = _reopen(h, lines, settings)
    try:
        assert not [t for t in lines if "AMQ7472" in t]
        got = [s.get("Q").body for _ in range(5)]  # type: ignore[union-attr]
        assert got[0].startswith(b"message 00")
        for _ in range(2):
            with pytest.raises(StoreError) as info:
                s.get("Q")
            assert getattr(info.value, "mqrc", None) == 2101, info.value
        damaged = [t for t in lines if t.startswith("AMQ7472")]
        assert len(damaged) == 1 and "corrupt" in damaged[0], lines
        assert "Q" in s.damaged()
        if linear:
            assert "rcrmqobj -m QM -t qlocal Q" in damaged[0]
            s.recreate_object("Q")
            assert len(drain(s)) == 295
        else:
            assert "rcrmqobj" not in damaged[0] and "DELETE QLOCAL" in damaged[0]
    finally:
        s.close()


@pytest.mark.parametrize("linear", [True, False])
def test_a_queue_file_with_no_valid_header_names_the_remedy_for_its_log(
        tmp_path: Path, linear: bool) -> None:
    """A queue file emptied while the queue manager was down: AMQ7472 advised rcrmqobj
    whatever the log type, and rcrmqobj is refused on a circular log (AMQ7089)."""
    from tests.unit.test_store_units import LINEAR, SETTINGS, _harness_with_messages, _reopen

    settings = LINEAR if linear else SETTINGS
    h, lines = _harness_with_messages(tmp_path, 3, settings)
    (tmp_path / "queues/Q/q").write_bytes(b"")
    s = _reopen(h, lines, settings)
    try:
        damaged = [t for t in lines if t.startswith("AMQ7472")]
        assert len(damaged) == 1 and "no valid header" in damaged[0], lines
        assert ("rcrmqobj" in damaged[0]) is linear
        assert "DELETE QLOCAL" in damaged[0]
    finally:
        s.close()


def test_a_unit_backed_out_by_amq7469_answers_2003_until_it_is_ended(tmp_path: Path
                                                                     ) -> None:
    """After AMQ7469 backs a unit out, every call in it answers MQRC 2003 (MQ's
    MQRC_BACKED_OUT) until the application commits or backs out; the second put
    answered 2017 (handle not available), as if the unit had vanished."""
    from miqm.errors import MessagingError
    from miqm.store.settings import StoreTuning
    from tests.unit.test_store_units import Harness

    h = Harness(tmp_path, StoreTuning(uow_log_space_limit=0.1))
    s = h.open()
    try:
        s.define_queue("Q", DEFPSIST="YES", MAXDEPTH=100000)
        old = s.begin()
        s.put("Q", b"old", uow=old)
        for _ in range(int(s._capacity * 0.15 / 4000) + 2):
            s.put("Q", b"z" * 4000)
        reasons = []
        for call in (lambda: s.put("Q", b"more", uow=old),
                     lambda: s.put("Q", b"again", uow=old),
                     lambda: s.get("Q", uow=old),
                     lambda: s.commit(old)):
            with pytest.raises(MessagingError) as e:
                call()
            reasons.append(e.value.mqrc)
        assert reasons == [2003, 2003, 2003, 2003]
        s.backout(old)  # ended: a backout after the failed commit is harmless
    finally:
        s.close()
