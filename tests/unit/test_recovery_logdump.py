"""The log dump (MQ's dmpmqlog; miqm had none: amqldmpa shows the logger's state of a
running queue manager only, so a queue manager that would not start because of its log
could not be looked into): every record from the restart point, or from an older LSN of
a linear log, read without writing a byte; on damage, the records before it, then the
reader's one-line error."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockfs.posix import PosixVolume
from miqm.errors import StoreError
from miqm.store import logdump
from miqm.store.settings import LogSettings
from tests.unit.storedirs import create_store, open_store

pytestmark = pytest.mark.usefixtures("c_parts_or_python")

LINEAR = LogSettings(log_type="LINEAR", file_pages=64, primary_files=3, secondary_files=1)


def _crashed_store(tmp: Path) -> None:
    """A linear queue manager that defined Q, committed two puts, got one, left a unit
    in flight, and was killed (no checkpoint after them)."""
    create_store(tmp, LINEAR)
    s = open_store(tmp, LINEAR, 1)
    s.define_queue("Q", DEFPSIST="YES")
    s.checkpoint()
    u = s.begin()
    s.put("Q", b"one", uow=u)
    s.put("Q", b"two", uow=u)
    s.commit(u)
    s.get("Q")
    v = s.begin()
    s.put("Q", b"in flight", uow=v)
    s.log.force(s.log.end_lsn())
    s._closed = True  # killed: nothing more written
    s._close_files()
    s.log.close()


def _files(root: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(root.iterdir())}


def test_the_dump_shows_every_record_and_writes_nothing(tmp_path: Path) -> None:
    _crashed_store(tmp_path)
    before = _files(tmp_path / "log")
    log = logdump.open_log(PosixVolume(str(tmp_path / "log")), LINEAR)
    try:
        head = logdump.header(log)
        got = list(logdump.entries(log))
        tail = logdump.trailer(log)
    finally:
        log.close()
    assert _files(tmp_path / "log") == before
    assert head["LogType"] == "LINEAR" and head["Active"] == ["S0000000.LOG"]
    types = [e.type for e in got]
    assert types[0] == "CHECKPOINT" and got[0].lsn == head["RestartLSN"]
    assert types[1:] == ["PUT", "PUT", "COMMIT", "GET", "PUT"]
    puts = [e for e in got if e.type == "PUT"]
    assert all("queue Q" in e.detail for e in puts)
    assert puts[0].txid == puts[1].txid != puts[2].txid  # the unit, then the one in flight
    assert "body 9 bytes" in puts[2].detail
    assert tail["EndLSN"] > got[-1].lsn and tail["TornTail"] is None
    for e in got:
        assert "\n" not in e.line() and e.line().startswith("LSN ")
        assert e.as_dict()["type"] == e.type


def test_a_damaged_page_is_shown_after_what_came_before(tmp_path: Path) -> None:
    """The log's last page damaged in every image (in place and both slots): the dump
    shows the records before it and says where the log now ends and why (the text of
    restart's AMQ1134), or stops with the reader's one line."""
    _crashed_store(tmp_path)
    log = logdump.open_log(PosixVolume(str(tmp_path / "log")), LINEAR)
    try:
        first = list(logdump.entries(log))
    finally:
        log.close()
    extent = tmp_path / "log" / "S0000000.LOG"
    raw = bytearray(extent.read_bytes())
    page = first[-1].lsn // 4096
    for base in ((2 + page) * 4096, 4096, 0):  # in place and both slots
        if raw[base:base + 4] == b"MQLP":
            raw[base + 40] ^= 0xFF
    extent.write_bytes(bytes(raw))
    log = logdump.open_log(PosixVolume(str(tmp_path / "log")), LINEAR)
    shown: list[logdump.LogEntry] = []
    error: StoreError | None = None
    try:
        try:
            for e in logdump.entries(log):
                shown.append(e)
        except StoreError as exc:
            error = exc
        tail = None if error else logdump.trailer(log)
    finally:
        log.close()
    assert shown == first[:len(shown)] and len(shown) < len(first)
    if error is not None:
        assert "\n" not in str(error) and error.amq in ("AMQ6118", "AMQ7017")
    else:
        assert tail is not None and "S0000000.LOG" in str(tail["TornTail"])


def test_an_undecodable_record_is_shown_not_raised() -> None:
    e = logdump.entry(96, 3, bytes([99]) + (7).to_bytes(8, "little") + b"junk")
    assert e.type == "TYPE99" and e.txid == 7 and e.detail == "undecodable record"
