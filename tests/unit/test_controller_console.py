"""What a start prints on the console about damaged objects."""

from miqm.ha.controller import CONSOLE_DAMAGE, console_damage


def test_a_few_damaged_objects_are_named_one_by_one() -> None:
    lines = [f"Object Q{i}, type queue damaged: gone" for i in range(CONSOLE_DAMAGE)]
    assert console_damage(lines) == lines


def test_thousands_of_damaged_objects_are_counted_not_listed() -> None:
    """A queue catalog lost in both copies named 3,000 queues, a line each, on the
    console: now the first ones and a count (the error log still names each)."""
    lines = [f"Object Q{i}, type queue damaged: gone" for i in range(3000)]
    out = console_damage(lines)
    assert len(out) == CONSOLE_DAMAGE
    assert out[:-1] == lines[:CONSOLE_DAMAGE - 1]
    assert out[-1].startswith(f"... and {3000 - CONSOLE_DAMAGE + 1} more objects damaged")
    assert "AMQERR01.LOG" in out[-1]


def test_a_data_directory_that_cannot_be_written_or_is_full_is_the_admins_to_fix() -> None:
    """A read-only or full data directory at start is said to be one (AMQ6062, with
    what to do), not reported as an internal error (AMQ6119); other failures still are."""
    import errno

    from lockfs.errors import LockFsError
    from miqm.ha.controller import filesystem_failure

    number, text = filesystem_failure("QM1", LockFsError("open master: Read-only file "
                                                         "system", errno=errno.EROFS))
    assert number == "AMQ6062" and "cannot be written" in text and "read-write" in text
    number, text = filesystem_failure("QM1", LockFsError("write: No space left on device",
                                                         errno=errno.ENOSPC))
    assert number == "AMQ6062" and "is full" in text
    number, text = filesystem_failure("QM1", LockFsError("stale file handle",
                                                         errno=errno.ESTALE))
    assert number == "AMQ6119" and "shared filesystem failed" in text
    # a lock file replaced by a directory (it was AMQ6119 'the shared filesystem failed')
    number, text = filesystem_failure("QM1", LockFsError("open /d/QM1/standby: Is a "
                                                         "directory", errno=errno.EISDIR))
    assert number == "AMQ6062" and "standby: Is a directory" in text and "move it" in text


def test_an_ending_active_instance_keeps_answering_until_its_service_refuses() -> None:
    """Between the status turning to Quiescing (or Ending) and the service refusing with
    2161/2162, requests used to get 2543 'this instance is a standby': clients saw it on
    their commits during endmqm. They reach the service now."""
    from miqm.ha.controller import Controller

    class Service:
        quiescing = None

        def handle(self, request: dict, session: object) -> dict:
            return {"ok": True, "served": request["op"]}

    ctl = Controller.__new__(Controller)
    ctl.mode, ctl.service, ctl.host = "active", Service(), "hosta"
    for status in ("Running", "Quiescing", "Ending immediately", "Ending pre-emptively"):
        ctl.status = status
        assert ctl.handle({"op": "commit"}, None) == {"ok": True, "served": "commit"}, status
    ctl.status = "Starting"
    assert ctl.handle({"op": "commit"}, None)["mqrc"] == 2543
