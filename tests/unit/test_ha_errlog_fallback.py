"""The error log and event history when the shared data directory is gone (removed, or a
filesystem unmounted under it): the entry is kept on this host, as MQ's system error log
/var/mqm/errors keeps it, and the data directory is not made again."""

from __future__ import annotations

import os
import shutil

from lockfs.posix import PosixVolume
from miqm.ha.errlog import ErrorLog
from miqm.ha.events import EventLog
from tests.waiting import wait_until


def test_an_entry_the_shared_log_cannot_take_goes_to_this_hosts_log(tmp_path) -> None:
    data = tmp_path / "shared" / "QM1"
    data.mkdir(parents=True)
    local = tmp_path / "hosta" / "errors"
    log = ErrorLog(PosixVolume(str(data)), "QM1", "hosta", local_dir=str(local))
    log.write("AMQ8003", "started")
    assert log.flush(5)
    shutil.rmtree(data)
    log.write("AMQ7279", "lost ownership")
    assert log.flush(5)
    log.close()
    assert not data.exists(), "the writer made the removed data directory again"
    text = (local / "AMQERR01.LOG").read_text()
    assert "AMQ7279: lost ownership (Written on this host: the queue manager's error log " \
        f"{data}/errors/AMQERR01.LOG could not be written.)" in text
    assert "AMQ8003" not in text and "Host(hosta) QMgr(QM1)" in text


def test_write_local_is_synchronous_and_optional(tmp_path) -> None:
    data = tmp_path / "QM1"
    data.mkdir()
    log = ErrorLog(PosixVolume(str(data)), "QM1", "hosta", local_dir=str(tmp_path / "e"))
    assert log.write_local("AMQ7280", "appears unresponsive")
    assert "AMQ7280: appears unresponsive" in (tmp_path / "e" / "AMQERR01.LOG").read_text()
    log.close()
    bare = ErrorLog(PosixVolume(str(data)), "QM1", "hosta")
    assert not bare.write_local("AMQ7280", "x")
    bare.close()


def test_the_event_history_does_not_make_the_data_directory_again(tmp_path) -> None:
    data = tmp_path / "QM1"
    data.mkdir()
    events = EventLog(PosixVolume(str(data)), "QM1", "hosta", "hosta-1-2", local=None)
    events.emit("role", role="active")
    written = data / "events" / "hosta.jsonl"
    wait_until(lambda: written.exists() and written.stat().st_size > 0,
               "the first event written", timeout=10, poll=0.01)
    shutil.rmtree(data)  # after it: a write racing the removal made it fail (ENOTEMPTY)
    events.emit("verify", ok=False)
    events.close(5)
    assert not os.path.exists(data)
