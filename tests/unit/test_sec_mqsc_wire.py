"""MQSC commands that come over the wire as a dict a client may write itself: the queue
service holds them to what the MQSC parser could have made (names, printable text,
authority record profiles and principals), and never lets a new queue be named so that
its files would leave its own directory."""

from __future__ import annotations

import pytest

from miqm import mqsc
from miqm.net.service import wire_command_error
from miqm.store.qmstore import unfiled_queue_name


def _cmd(verb: str, objtype: str, name: str, **kw) -> mqsc.Command:
    return mqsc.Command.from_dict({"verb": verb, "objtype": objtype, "name": name, **kw})


@pytest.mark.parametrize("text", [
    "DEFINE QLOCAL(APP1.Q) MAXDEPTH(10) DESCR('a b')", "DISPLAY QLOCAL(*) CURDEPTH",
    "DISPLAY QSTATUS(APP*) TYPE(HANDLE)", "RESET QSTATS(APP.*)", "STOP CONN(ABCDEF0000000001)",
    "DISPLAY CONN(*)", "SET AUTHREC PROFILE('APP1.**') OBJTYPE(QUEUE) PRINCIPAL('APP1') "
    "AUTHADD(PUT, GET)", "DISPLAY AUTHREC", "REFRESH SECURITY", "ALTER QMGR MAXUMSGS(10)",
    "DEFINE QLOCAL('lower.case%name') LIKE(APP1.Q)", "DISPLAY QLOCAL(*) WHERE(CURDEPTH GT 1)",
    "DEFINE QMODEL(M1)", "DELETE QLOCAL(APP1.Q) PURGE", "CLEAR QLOCAL(APP1.Q)",
])
def test_what_the_parser_makes_passes(text: str) -> None:
    cmd = mqsc.parse_command(text)
    assert wire_command_error(mqsc.Command.from_dict(cmd.to_dict())) is None


@pytest.mark.parametrize("cmd", [
    _cmd("DEFINE", "QLOCAL", "A\0B"),
    _cmd("DEFINE", "QLOCAL", "Q\nAMQ8006I: fake"),
    _cmd("DEFINE", "QLOCAL", "A" * 49),
    _cmd("DEFINE", "QLOCAL", ""),
    _cmd("DEFINE", "QLOCAL", "Q*"),
    _cmd("DELETE", "QLOCAL", "A b"),
    _cmd("DEFINE", "QLOCAL", "OK", like="../../\0"),
    _cmd("DEFINE", "QLOCAL", "OK", attrs={"DESCR": "line\nbreak"}),
    _cmd("DEFINE", "QLOCAL", "OK", attrs={"descr) USERID(root": "x"}),
    _cmd("SET", "AUTHREC", "APP1.**", attrs={"OBJTYPE": "QUEUE", "PRINCIPAL": "a b\n"}),
    _cmd("SET", "AUTHREC", "A.**.**", attrs={"OBJTYPE": "QUEUE", "PRINCIPAL": "APP1"}),
    _cmd("STOP", "CONN", "../x"),
])
def test_what_the_parser_would_refuse_is_refused(cmd: mqsc.Command) -> None:
    assert wire_command_error(cmd) is not None


@pytest.mark.parametrize("name", ["../../y", "/etc/passwd", "Q1/q", "A/B", ".", ".."])
def test_a_new_queue_may_not_name_a_path(name: str) -> None:
    assert unfiled_queue_name(name) is not None
    assert wire_command_error(_cmd("DEFINE", "QLOCAL", name)) is not None
    # the names are MQ's, so they may still be displayed (a queue made before the check)
    assert wire_command_error(_cmd("DISPLAY", "QLOCAL", name)) is None


@pytest.mark.parametrize("name", ["...", "A..B", "%Q%", "Q_1.2"])
def test_dots_and_percent_signs_are_fine(name: str) -> None:
    assert unfiled_queue_name(name) is None


def test_a_field_that_is_not_base64_is_a_bad_request_not_a_broken_connection() -> None:
    """A put whose msgid is not base64 was answered 2009 (MQRC_CONNECTION_BROKEN) on a
    connection that went on: a reconnecting client takes 2009 for a failover."""
    from miqm.net.service import QueueService

    class Store:
        def __getattr__(self, name: str):
            raise AssertionError(f"the store was reached ({name})")

        def queues_with(self, *_a):
            return []

    service = QueueService(Store(), "QM1")
    for field in ("msgid", "correlid"):
        reply = service.handle({"op": "get", "queue": "Q1", field: "!!!"}, None)
        assert reply["mqrc"] == 2046 and "base64" in reply["error"]
