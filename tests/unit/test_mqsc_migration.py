"""MQSC scripts written for IBM MQ, as an administrator migrating them feeds them to
runmqsc: what MQ accepts that miqm refused or crashed on (found by an MQ administrator's
session, issue: migrating MQSC scripts)."""

from __future__ import annotations

import io
import sys

import pytest

from miqm import mqsc


@pytest.mark.parametrize("word", ["END", "EXIT", "QUIT", "exit", "Quit"])
def test_exit_and_quit_end_the_input_as_end_does(word: str) -> None:
    """MQ's runmqsc takes END, EXIT and QUIT; EXIT and QUIT were syntax errors
    ('unknown command'), so a script ending in EXIT exited 10."""
    assert mqsc.parse_command(word).verb == "END"
    with pytest.raises(mqsc.MQSCSyntaxError):
        mqsc.parse_command(f"{word} NOW")


def test_like_the_default_local_queue_is_the_default_definition() -> None:
    """LIKE(SYSTEM.DEFAULT.LOCAL.QUEUE), in many MQ scripts, was sent as a LIKE of a
    queue miqm does not have: AMQ8147E 'not found' and the queue was not made."""
    cmd = mqsc.parse_command("DEFINE QLOCAL(Q1) LIKE(SYSTEM.DEFAULT.LOCAL.QUEUE) "
                             "MAXDEPTH(7)")
    assert cmd.like == ""
    assert cmd.attrs == {**mqsc.REPLACE_DEFAULTS["QLOCAL"], "MAXDEPTH": 7}
    # the order of LIKE and the attributes does not matter
    cmd = mqsc.parse_command("DEFINE QLOCAL(Q1) MAXDEPTH(7) like(system.default.local.queue)"
                             " REPLACE")
    assert cmd.like == "" and cmd.attrs["MAXDEPTH"] == 7 and cmd.options == ("REPLACE",)
    # another queue is still a LIKE the queue manager resolves
    assert mqsc.parse_command("DEFINE QLOCAL(Q1) LIKE(Q0)").like == "Q0"


@pytest.mark.parametrize("kind,default", [("QALIAS", "SYSTEM.DEFAULT.ALIAS.QUEUE"),
                                          ("QMODEL", "SYSTEM.DEFAULT.MODEL.QUEUE")])
def test_like_on_an_alias_or_model(kind: str, default: str) -> None:
    """LIKE on DEFINE QALIAS/QMODEL was 'not valid'. The type's default object means the
    defaults; another object goes to the queue manager, which copies its attributes
    (tests/integration/test_mqsc_like.py), and an alias LIKE another needs no TARGET."""
    target = " TARGET(Q1)" if kind == "QALIAS" else ""
    cmd = mqsc.parse_command(f"DEFINE {kind}(X){target} LIKE({default}) DESCR('d')")
    assert cmd.attrs["DESCR"] == "d" and cmd.like == ""
    assert cmd.attrs["PUT"] == "ENABLED" and cmd.attrs["DEFPSIST"] == "NO"
    other = mqsc.parse_command(f"DEFINE {kind}(X) LIKE(OTHER) DESCR('d')")
    assert other.like == "OTHER" and other.attrs == {"DESCR": "d"}
    if kind == "QALIAS":
        with pytest.raises(mqsc.MQSCSyntaxError, match="TARGET"):
            mqsc.parse_command("DEFINE QALIAS(X) DESCR('d')")


@pytest.mark.parametrize("text,word", [
    ("DEFINE QLOCAL(Q1) HARDENBO", "HARDENBO"),
    ("ALTER QLOCAL(Q1) TRIGGER", "TRIGGER"),
    ("DEFINE QMODEL(M1) NOSHARE", "NOSHARE"),
    ("DEFINE QALIAS(A1) TARGET(Q1) CLUSTER(C1)", "CLUSTER"),
])
def test_an_mq_attribute_miqm_lacks_is_named_as_such(text: str, word: str) -> None:
    """'TRIGGER is not valid on ALTER QLOCAL' read as if the script were wrong: the
    reason now says it is MQ's attribute that miqm's queues do not have."""
    with pytest.raises(mqsc.MQSCSyntaxError) as err:
        mqsc.parse_command(text)
    assert err.value.reason.startswith(f"{word} is an MQ queue attribute miqm does not have")
    assert "remove it" in err.value.reason
    with pytest.raises(mqsc.MQSCSyntaxError) as err:
        mqsc.parse_command("DEFINE QLOCAL(Q1) MAXDEPHT(3)")  # a typo stays a typo
    assert err.value.reason == "MAXDEPHT is not valid on DEFINE QLOCAL"


def test_a_byte_that_is_not_utf8_is_a_syntax_error_at_that_byte() -> None:
    """A script saved in ISO-8859-1 (DESCR('café')): the command reached the wire and
    runmqsc died with AMQ6184 (UnicodeEncodeError), running nothing after it."""
    text = b"DEFINE QLOCAL(Q1) DESCR('caf\xe9 au lait')".decode("utf-8", "surrogateescape")
    with pytest.raises(mqsc.MQSCSyntaxError) as err:
        mqsc.parse_command(text)
    assert err.value.reason.startswith("the byte \\xe9 is not UTF-8")
    assert "iconv" in err.value.reason
    lines = mqsc.syntax_error_lines(err.value)
    assert lines[1] == "DEFINE QLOCAL(Q1) DESCR('caf\\xe9"
    assert all(line.isprintable() for line in lines)


def test_runmqsc_goes_on_after_a_command_that_is_not_utf8(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The connection below frames each request with the real protocol encoder, as the
    client does: without the check, the ISO-8859-1 command raised UnicodeEncodeError
    there and runmqsc ended with an internal error."""
    from miqm.cli import runmqsc
    from miqm.net import client
    from miqm.net.protocol import encode

    sent: list[dict] = []

    class Conn:
        def call(self, op: str, **kw: object) -> dict:
            encode({"op": op, **kw})  # what the client's _write does
            sent.append(kw["command"])  # type: ignore[arg-type]
            return {"ok": True, "lines": [mqsc.MSG_CREATED]}

        def close(self) -> None:
            pass

    monkeypatch.setattr(client, "connect", lambda *_a, **_k: Conn())
    monkeypatch.setattr(sys, "argv", ["runmqsc", "QM1"])
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(
        b"DEFINE QLOCAL(Q1) DESCR('caf\xe9')\r\nDEFINE QLOCAL(Q2)\r\nEXIT\r\n")))
    with pytest.raises(SystemExit) as exit_:
        runmqsc.main()
    out = capsys.readouterr().out.splitlines()
    assert exit_.value.code == 10
    assert [c["name"] for c in sent] == ["Q2"]
    assert "     3 : EXIT" in out
    assert out[-3:] == ["2 MQSC commands read.", "1 command has a syntax error.",
                        "All valid MQSC commands were processed."]


@pytest.mark.parametrize("argv,says", [
    (["-w", "30", "QM1"], "indirect mode (-w, -x, -m) is not supported"),
    (["-m", "QMLOCAL", "QM1"], "indirect mode (-w, -x, -m) is not supported"),
    (["-w", "30", "-x", "QM1"], "indirect mode (-w, -x, -m) is not supported"),
    (["-n"], "-n (client channel definitions without a queue manager) is not supported"),
    ([], "name the queue manager (runmqsc QMgr): miqm has no default queue manager"),
    (["-z", "QM1"], "No such option: -z"),
    (["QM1", "script.mqsc"], "runmqsc reads its commands from stdin (runmqsc QM1 < "
                              "script.mqsc)"),
])
def test_flags_an_mq_administrator_types_get_one_line_and_exit_20(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        argv: list[str], says: str) -> None:
    """MQ's runmqsc exits 20 when it could not run. -w/-x/-m (indirect mode) and -n were
    'No such option', no QMgr 'Missing argument' and a script named after QMgr 'Got
    unexpected extra argument', all exit 2: a script checking for 20 took them for
    something else, and nothing said what to do instead."""
    from miqm.cli import runmqsc

    def no_connect(*_a: object, **_k: object) -> None:
        raise AssertionError("nothing may be run")

    monkeypatch.setattr("miqm.net.client.connect", no_connect)
    monkeypatch.setattr(sys, "argv", ["runmqsc", *argv])
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"DIS QMGR\n")))
    with pytest.raises(SystemExit) as exit_:
        runmqsc.main()
    captured = capsys.readouterr()
    assert exit_.value.code == 20
    assert captured.out == ""
    [line] = captured.err.splitlines()
    assert line.startswith("runmqsc: ") and says in line


class _FullDisk(io.StringIO):
    """stdout on a disk that fills after ``room`` flushes."""

    def __init__(self, room: int) -> None:
        super().__init__()
        self.room = room

    def flush(self) -> None:
        if self.room == 0:
            raise OSError(28, "No space left on device")
        self.room -= 1

    def fileno(self) -> int:
        raise ValueError("no file descriptor")  # _drop_stdout copes


def test_output_that_cannot_be_written_says_what_was_run(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """runmqsc > file on a full disk: it said 'No space left on device: . Check the path
    and permissions.' (exit 71), not that the commands before had been run."""
    from miqm.cli import runmqsc
    from miqm.net import client

    sent: list[str] = []

    class Conn:
        def call(self, op: str, **kw: object) -> dict:
            sent.append(kw["command"]["name"])  # type: ignore[index]
            return {"ok": True, "lines": [mqsc.MSG_CREATED]}

        def close(self) -> None:
            pass

    monkeypatch.setattr(client, "connect", lambda *_a, **_k: Conn())
    monkeypatch.setattr(sys, "argv", ["runmqsc", "QM1"])
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(
        b"DEFINE QLOCAL(Q1)\nDEFINE QLOCAL(Q2)\nDEFINE QLOCAL(Q3)\n")))
    monkeypatch.setattr(sys, "stdout", _FullDisk(room=2))  # the header and Q1's answer
    with pytest.raises(SystemExit) as exit_:
        runmqsc.main()
    assert exit_.value.code == 20
    assert sent == ["Q1", "Q2"]  # Q3 was not sent once the output failed
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("runmqsc: its output could not be written (No space left on "
                           "device): 2 commands were sent to the queue manager")
    assert "check with DISPLAY" in line


def test_f_reads_the_commands_from_a_file(monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str],
                                          tmp_path) -> None:
    """MQ 9.4's runmqsc -f Filepath: it was 'No such option: -f'. A missing file or a
    directory is one line, exit 20, before anything is run."""
    from miqm.cli import runmqsc
    from miqm.net import client

    sent: list[str] = []

    class Conn:
        def call(self, op: str, **kw: object) -> dict:
            sent.append(kw["command"]["name"])  # type: ignore[index]
            return {"ok": True, "lines": [mqsc.MSG_CREATED]}

        def close(self) -> None:
            pass

    script = tmp_path / "app.mqsc"
    script.write_bytes(b"\xef\xbb\xbfDEFINE QLOCAL(Q1)\r\nDEFINE QLOCAL(Q2) +\r\n  MAXDEPTH(5)\r\n")
    monkeypatch.setattr(client, "connect", lambda *_a, **_k: Conn())
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"DEFINE QLOCAL(STDIN)\n")))
    for path in (str(script), f"file://{script}"):
        monkeypatch.setattr(sys, "argv", ["runmqsc", "-f", path, "QM1"])
        with pytest.raises(SystemExit) as exit_:
            runmqsc.main()
        assert exit_.value.code == 0
        out = capsys.readouterr().out.splitlines()
        assert "     2 : DEFINE QLOCAL(Q2) MAXDEPTH(5)" in out
    assert sent == ["Q1", "Q2", "Q1", "Q2"]  # stdin was not read for commands
    for bad, why in ((tmp_path / "missing.mqsc", "No such file or directory"),
                     (tmp_path, "Is a directory")):
        monkeypatch.setattr(sys, "argv", ["runmqsc", "-f", str(bad), "QM1"])
        with pytest.raises(SystemExit) as exit_:
            runmqsc.main()
        assert exit_.value.code == 20
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err == f"runmqsc: -f {bad}: {why}: name a readable file of MQSC " \
                               "commands (or give them on stdin).\n"
    assert sent == ["Q1", "Q2", "Q1", "Q2"]


def test_u_with_a_wrong_password_says_where_it_was_read(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """runmqsc -u APP1 with a wrong first line: the client's refusal said to set
    MIQM_CREDENTIAL, which -u does not use; MQ's AMQ5534 now says where the password
    was read and what to give instead, and the password is not shown."""
    from miqm.cli import runmqsc
    from miqm.errors import NetError
    from miqm.net import client

    def refuse(*_a: object, **_k: object) -> None:
        raise NetError("AMQ5534: refused ... set MIQM_CREDENTIAL to principal 'APP1'",
                       mqrc=2035, amq="AMQ5534")

    monkeypatch.setattr(client, "connect", refuse)
    monkeypatch.setattr(sys, "argv", ["runmqsc", "-u", "APP1", "QM1"])
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"hunter2\nDIS QMGR\n")))
    with pytest.raises(SystemExit) as exit_:
        runmqsc.main()
    captured = capsys.readouterr()
    assert exit_.value.code == 20
    [line] = captured.err.splitlines()
    assert line.startswith("AMQ5534E: User ID 'APP1' authentication failed. The password "
                           "read as the first line of stdin is not the secret of principal "
                           "'APP1' on queue manager 'QM1'")
    assert "MIQM_CREDENTIAL" not in line and "hunter2" not in captured.err + captured.out


def test_comments_and_blank_lines_inside_a_continued_command_are_dropped() -> None:
    """MQ: 'any comments or blank lines are discarded when the command is reassembled';
    the command goes on at the next line that is neither. A blank line after '+' ended
    the command (and MAXDEPTH(5) became a syntax error of its own); a comment line was
    joined into the command."""
    script = ("DEFINE QLOCAL(Q1) +\n"
              "\n"
              "* the depth the application team asked for\n"
              "   MAXDEPTH(5) -\n"
              "\n"
              "DESCR('x')\n"
              "* a comment between commands\n"
              "DIS QL(Q1)\n")
    assert mqsc.split_commands(script) == ["DEFINE QLOCAL(Q1) MAXDEPTH(5) DESCR('x')",
                                           "DIS QL(Q1)"]
    # an asterisk that is not in the first position is not a comment
    assert mqsc.split_commands("DIS QL(Q1) +\n   *X\n") == ["DIS QL(Q1) *X"]


@pytest.mark.parametrize("text,says", [
    ("DEFINE CHANNEL(APP.SVRCONN) CHLTYPE(SVRCONN)", "miqm has no channels"),
    ("DISPLAY CHSTATUS(*)", "miqm has no channels"),
    ("DEFINE LISTENER(L1) TRPTYPE(TCP) PORT(1414)", "listener starts with strmqm"),
    ("DEFINE QREMOTE(R1) RNAME(X) RQMNAME(Y)", "no remote queues"),
    ("DEFINE TOPIC(T1) TOPICSTR('a/b')", "no publish/subscribe"),
    ("START LISTENER(L1)", "an MQ command miqm does not have (the listener starts"),
    ("SET CHLAUTH('*') TYPE(BLOCKUSER) USERLIST('nobody')", "miqm has no channels"),
    ("ALTER QMGR CHLAUTH(DISABLED)", "miqm's queue manager has only MAXUMSGS"),
])
def test_an_mq_object_or_command_miqm_lacks_says_so_and_what_instead(text: str,
                                                                     says: str) -> None:
    """AutoConfig scripts written for MQ define channels, listeners and CHLAUTH rules:
    the reason was 'use QLOCAL, QMGR or (DISPLAY) QMSTATUS' (out of date: aliases,
    models, status displays exist) or 'unknown command START'."""
    with pytest.raises(mqsc.MQSCSyntaxError) as err:
        mqsc.parse_command(text)
    assert says in err.value.reason
    assert "use QLOCAL, QMGR or (DISPLAY) QMSTATUS" not in err.value.reason
    # a plain typo is not dressed up as an MQ command
    with pytest.raises(mqsc.MQSCSyntaxError) as err:
        mqsc.parse_command("DEFIN QL(X)")
    assert err.value.reason == "unknown command DEFIN"


def test_where_compares_a_value_holding_parentheses_whole() -> None:
    """DESCR('Payroll (in)'): the reply was read back with a pattern stopping at the first
    ')', so WHERE(DESCR EQ 'Payroll (in)') found 'Payroll (in' and left the queue out."""
    block = [mqsc.MSG_DISPLAY_QUEUE, *mqsc.attr_columns([
        ("QUEUE", "PAY.IN"), ("TYPE", "QLOCAL"), ("DESCR", "Payroll (in) - x"),
        ("MAXDEPTH", 5), ("CURDEPTH", 0), ("ALTDATE", "2026-11-27"),
        ("LONG", "y" * 45), ("QTIME", " , ")])]
    other = [mqsc.MSG_DISPLAY_QUEUE, *mqsc.attr_columns([("QUEUE", "Q2"), ("TYPE", "QLOCAL"),
                                                         ("DESCR", "other"),
                                                         ("MAXDEPTH", 50)])]
    cmd = mqsc.parse_command("DIS QL(*) WHERE(DESCR EQ 'Payroll (in) - x')")
    assert mqsc.apply_where(cmd, block + other) == block
    cmd = mqsc.parse_command("DIS QL(*) WHERE(MAXDEPTH LT 10)")
    assert mqsc.apply_where(cmd, block + other) == block
    cmd = mqsc.parse_command("DIS QL(*) WHERE(CURDEPTH EQ 0)")
    assert mqsc.apply_where(cmd, block + other) == block


def test_display_qlocal_of_another_type_points_at_display_queue() -> None:
    """DIS QL(*) TYPE(QALIAS) said 'only local queues exist here', untrue since aliases
    and models exist."""
    with pytest.raises(mqsc.MQSCSyntaxError) as err:
        mqsc.parse_command("DIS QL(*) TYPE(QALIAS)")
    assert "DISPLAY QUEUE(name) TYPE(QALIAS" in err.value.reason
    assert mqsc.parse_command("DIS Q(*) TYPE(QALIAS)").attrs["TYPE"] == "QALIAS"


@pytest.mark.parametrize("flag", ["-h", "-?", "--help"])
def test_help_names_qmgr_alone(monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str], flag: str) -> None:
    """The usage line shows no placeholder for the arguments refused after QMgr (a hidden
    list argument printed 'runmqsc [OPTIONS] [QMgr] []...'), and -h and -? still work."""
    from miqm.cli import runmqsc

    monkeypatch.setattr(sys, "argv", ["runmqsc", flag])
    with pytest.raises(SystemExit) as exit_:
        runmqsc.main()
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "Usage: runmqsc [OPTIONS] [QMgr]"
    assert "-f Filepath" in out and "-w" not in out.split("Environment")[0]


def test_comment_lines_are_echoed_as_mq_echoes_them(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """MQ's runmqsc echoes a script's comment lines ('       : * text') where they are,
    so its report reads like the script; miqm's left them out. -e leaves them out."""
    from miqm.cli import runmqsc

    script = b"* Payroll queues\nDEFINE QLOCAL(Q1) +\n* its depth\n  MAXDEPTH(5)\nEND\n"
    for flags, echoed in ((["-v"], True), (["-v", "-e"], False)):
        monkeypatch.setattr(sys, "argv", ["runmqsc", *flags, "QM1"])
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(script)))
        with pytest.raises(SystemExit) as exit_:
            runmqsc.main()
        assert exit_.value.code == 0
        out = capsys.readouterr().out.splitlines()
        if echoed:
            assert out[2:6] == ["       : * Payroll queues", "       : * its depth",
                                "     1 : DEFINE QLOCAL(Q1) MAXDEPTH(5)", "     2 : END"]
        else:
            assert not any(line.startswith("       :") for line in out)
        assert out[-3] == "One MQSC command read."


@pytest.mark.parametrize("text", ["DEFINE QLOCAL(Q1) DESCR()", "ALTER QMGR DESCR(  )",
                                  "ALTER QMGR CONNAUTH()", "DEFINE QALIAS(A) TARGET(Q) DESCR()"])
def test_empty_parentheses_are_a_syntax_error_as_in_mq(text: str) -> None:
    """MQ: a pair of parentheses with nothing significant between them is not valid.
    DESCR() was taken as a blank description: a script verified here (-v) failed on MQ.
    A quoted blank is the way to say it, here as there."""
    with pytest.raises(mqsc.MQSCSyntaxError) as err:
        mqsc.parse_command(text)
    assert "() is empty: give a value, or ' ' for a blank one" in err.value.reason
    assert mqsc.parse_command("DEFINE QLOCAL(Q1) DESCR(' ')").attrs["DESCR"] == " "
    assert mqsc.parse_command("ALTER QMGR CONNAUTH(' ')").attrs["CONNAUTH"] == " "
