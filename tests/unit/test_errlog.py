"""The error log: MQ-style entries written off the caller's thread, rotated 01 -> 02 -> 03."""

from __future__ import annotations

from pathlib import Path

from lockfs.posix import PosixVolume
from miqm.ha.errlog import ErrorLog, format_entry


def test_entries_and_rotation(tmp_path: Path) -> None:
    log = ErrorLog(PosixVolume(str(tmp_path)), "QM1", "hosta", max_bytes=2000)
    for i in range(40):
        log.write("AMQ7229", f"{i} log records accessed on queue manager 'QM1'.")
    assert log.flush(5)
    log.close()
    errors = tmp_path / "errors"
    names = sorted(p.name for p in errors.iterdir())
    assert names == ["AMQERR01.LOG", "AMQERR02.LOG", "AMQERR03.LOG"]
    newest = (errors / "AMQERR01.LOG").read_text()
    assert "AMQ7229: 39 log records" in newest and "Host(hosta) QMgr(QM1)" in newest
    assert all((errors / n).stat().st_size <= 2000 for n in names)


def test_format_entry() -> None:
    text = format_entry("AMQ7279", "lost ownership", qmgr="QM1", host="h", pid=7, now=0.0)
    lines = text.splitlines()
    assert lines[0] == "01/01/1970 12:00:00 AM - Process(7) Host(h) QMgr(QM1)"
    assert lines[1] == "AMQ7279: lost ownership"


def test_an_entry_can_come_from_the_message_table(tmp_path) -> None:
    from lockfs.volume import open_volume

    vol = open_volume(str(tmp_path))
    log = ErrorLog(vol, "QM1", "hosta")
    log.write("AMQ8003")
    log.write("AMQ1008", host="hostb", detail="ended by endmqm -x")
    log.close()
    text = (tmp_path / "errors" / "AMQERR01.LOG").read_text()
    assert "AMQ8003: miqm queue manager 'QM1' started using V" in text
    assert "AMQ1008: The standby instance of queue manager 'QM1' on hostb ended: ended by" in text
    vol.close()


def test_an_entry_is_one_line_whatever_its_text_carries() -> None:
    """A queue name or principal with a line break, written raw, forged whole entries of
    its own in AMQERR01.LOG; every entry's text is now one line, tabs kept."""
    from miqm.ha.errlog import format_entry

    entry = format_entry("AMQ8077", "put to 'Q\nAMQ8004: ended\x1b[2J'\tby \u202eAPP",
                         qmgr="QM1", host="hosta", pid=7, now=0)
    lines = entry.splitlines()
    assert len(lines) == 3 and lines[2].startswith("----- miqm")
    assert lines[1] == "AMQ8077: put to 'Q\\x0aAMQ8004: ended\\x1b[2J'\tby \\u202eAPP"
