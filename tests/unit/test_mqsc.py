"""MQSC parsing and runmqsc output formatting (pure)."""

from __future__ import annotations

import pytest

from miqm import mqsc


def parse(text: str) -> mqsc.Command:
    return mqsc.parse_command(text)


def test_define_folds_unquoted_names_and_keeps_quoted_case() -> None:
    cmd = parse("def ql(q1) maxdepth(10) defpsist(yes) descr('My ''queue''') put(disabled)")
    assert (cmd.verb, cmd.objtype, cmd.name) == ("DEFINE", "QLOCAL", "Q1")
    assert cmd.attrs == {"MAXDEPTH": 10, "DEFPSIST": "YES", "DESCR": "My 'queue'",
                         "PUT": "DISABLED"}
    assert parse("DEFINE QLOCAL('lower.q')").name == "lower.q"


def test_define_options_like_and_replace() -> None:
    cmd = parse("DEFINE QLOCAL(Q2) LIKE(Q1) REPLACE DEFPRTY(9) MAXMSGL(1024) GET(ENABLED)")
    assert cmd.like == "Q1" and cmd.options == ("REPLACE",)
    assert cmd.attrs == {"DEFPRTY": 9, "MAXMSGL": 1024, "GET": "ENABLED"}


def test_display_defaults_all_for_a_name_and_queue_type_for_generic() -> None:
    assert parse("DISPLAY QLOCAL(Q1)").show == ("ALL",)
    assert parse("DIS QL(*)").show == ("QUEUE", "TYPE")
    assert parse("DIS QUEUE(Q*) CURDEPTH").show == ("CURDEPTH",)
    assert parse("DIS QL(Q1) ALL").show == ("ALL",)
    assert parse("DIS QL(Q*)").generic


def test_qmgr_and_qmstatus_commands() -> None:
    assert parse("ALTER QMGR MAXUMSGS(500)").attrs == {"MAXUMSGS": 500}
    assert parse("DISPLAY QMSTATUS ALL").objtype == "QMSTATUS"
    assert parse("dis qmstatus").show == ("ALL",)
    assert parse("PING QMGR").verb == "PING"
    assert parse("END").verb == "END"


@pytest.mark.parametrize("text, near", [
    ("DEFIN QLOCAL(Q1)", "DEFIN"),
    ("DEFINE QLOCAL(Q1) MAXDEPTH(abc)", "DEFINE QLOCAL(Q1) MAXDEPTH(abc)"),
    ("DEFINE QLOCAL(Q1) DEFPRTY(10)", "DEFINE QLOCAL(Q1) DEFPRTY(10)"),
    ("DEFINE QLOCAL(Q1) DEFPSIST(MAYBE)", "DEFINE QLOCAL(Q1) DEFPSIST(MAYBE)"),
    ("DEFINE QLOCAL(Q1) BOGUS(1)", "DEFINE QLOCAL(Q1) BOGUS(1)"),
    ("DEFINE QLOCAL(Q*)", "DEFINE QLOCAL(Q*)"),
    ("DEFINE QLOCAL(Q1) DESCR('unterminated)", None),
    ("DEFINE QLOCAL(Q1", None),
    ("DEFINE", None),
    ("DEFINE CHANNEL(X)", "DEFINE CHANNEL(X)"),
    ("ALTER QMGR MAXUMSGS(0)", "ALTER QMGR MAXUMSGS(0)"),
    ("DISPLAY QL(Q1) NOTANATTR", "DISPLAY QL(Q1) NOTANATTR"),
])
def test_syntax_errors_name_the_segment(text: str, near: str | None) -> None:
    with pytest.raises(mqsc.MQSCSyntaxError) as info:
        parse(text)
    if near is not None:
        assert info.value.segment == near
    assert info.value.reason


def test_split_handles_comments_blank_lines_and_both_continuations() -> None:
    script = (
        "* a comment\n"
        "\n"
        "DEFINE QLOCAL(Q1) +\n"
        "      MAXDEPTH(5)\n"
        "DEFINE QLOCAL(Q2) DESCR('ab-\n"
        "  cd')\n"
        "DISPLAY QLOCAL(Q1)\n"
    )
    cmds = mqsc.split_commands(script)
    assert cmds == ["DEFINE QLOCAL(Q1) MAXDEPTH(5)", "DEFINE QLOCAL(Q2) DESCR('ab  cd')",
                    "DISPLAY QLOCAL(Q1)"]
    assert parse(cmds[1]).attrs["DESCR"] == "ab  cd"


def test_command_round_trips_through_a_dict() -> None:
    cmd = parse("DEFINE QLOCAL(Q1) LIKE(Q0) NOREPLACE MAXDEPTH(7)")
    assert mqsc.Command.from_dict(cmd.to_dict()) == cmd
    with pytest.raises(ValueError):
        mqsc.Command.from_dict({"objtype": "QLOCAL"})


def test_echo_header_and_trailer_use_mq_wording() -> None:
    assert mqsc.echo(1, "DEFINE QLOCAL(Q1)") == "     1 : DEFINE QLOCAL(Q1)"
    assert mqsc.header("QM1") == "Starting MQSC for queue manager QM1."
    assert mqsc.trailer(2, 0, 0) == ["2 MQSC commands read.", "No commands have a syntax error.",
                                     "All valid MQSC commands were processed."]
    assert mqsc.trailer(0, 0, 0)[0] == "No MQSC commands read."  # empty input, or END first
    assert mqsc.trailer(1, 1, 1) == ["One MQSC command read.", "1 command has a syntax error.",
                                     "One valid MQSC command could not be processed."]


def test_queue_display_two_columns() -> None:
    lines = mqsc.queue_display({"QUEUE": "Q1", "CURDEPTH": 3, "MAXDEPTH": 5000,
                                "DEFPSIST": True, "GET": False}, ("ALL",))
    assert lines[0] == "AMQ8409I: Display Queue details."
    assert lines[1] == "   QUEUE(Q1)" + " " * 31 + "TYPE(QLOCAL)"
    assert "CURDEPTH(3)" in lines[2] and "DEFPSIST(YES)" in lines[2]
    assert "GET(DISABLED)" in lines[3]
    only = mqsc.queue_display({"QUEUE": "Q1", "CURDEPTH": 3, "MAXDEPTH": 5}, ("CURDEPTH",))
    assert only[1:] == ["   QUEUE(Q1)" + " " * 31 + "TYPE(QLOCAL)", "   CURDEPTH(3)"]


def test_qmstatus_display_puts_mq_fields_first() -> None:
    lines = mqsc.qmstatus_display("QM1", {"reclog": "S0000002.LOG", "medialog": "S0000000.LOG",
                                          "currlog": "S0000003.LOG"}, ("ALL",))
    assert lines[0] == "AMQ8705I: Display Queue Manager Status Details."
    text = "\n".join(lines)
    assert "QMNAME(QM1)" in lines[1]
    assert text.index("CURRLOG") < text.index("RECLOG") < text.index("MEDIALOG")
    assert "RECLOG(S0000002.LOG)" in text


# -- daily administration (issue 24) ------------------------------------------------------


def test_admin_commands_parse_with_mq_synonyms() -> None:
    clear = parse("clear ql(q1)")
    assert (clear.verb, clear.objtype, clear.name) == ("CLEAR", "QLOCAL", "Q1")
    qs = parse("DIS QS(Q*) TYPE(HANDLE) PID APPLTAG")
    assert (qs.objtype, qs.name, qs.attrs, qs.show) == (
        "QSTATUS", "Q*", {"TYPE": "HANDLE"}, ("PID", "APPLTAG"))
    assert parse("DISPLAY QSTATUS(Q1)").attrs == {"TYPE": "QUEUE"}
    assert parse("DISPLAY QSTATUS(Q1)").show == ("ALL",)
    conn = parse("DIS CONN(*) TYPE(ALL) CONNAME USERID")
    assert (conn.objtype, conn.name, conn.attrs["TYPE"]) == ("CONN", "*", "ALL")
    assert parse("stop conn(00ab00cd00ef0011)").name == "00AB00CD00EF0011"
    assert parse("RESET QSTATS(Q*)").generic
    assert parse("DIS LSSTATUS(*) PORT").show == ("PORT",)
    assert parse("DIS LOG").objtype == "LOG"
    alter = parse("ALTER QMGR DESCR('Daily') MAXMSGL(40000) MONQ(off)")
    assert alter.attrs == {"DESCR": "Daily", "MAXMSGL": 40000, "MONQ": "OFF"}


def test_alias_and_model_definitions() -> None:
    a = parse("DEF QA(A1) TARGET(q1) PUT(DISABLED) NOREPLACE")
    assert (a.verb, a.objtype, a.attrs, a.options) == (
        "DEFINE", "QALIAS", {"TARGET": "Q1", "PUT": "DISABLED"}, ("NOREPLACE",))
    m = parse("DEFINE QMODEL(M1) DEFTYPE(PERMDYN) MAXDEPTH(10) DEFPSIST(YES)")
    assert m.attrs == {"DEFTYPE": "PERMDYN", "MAXDEPTH": 10, "DEFPSIST": "YES"}
    assert parse("DIS QMODEL(M*)").show == ("QUEUE", "TYPE")
    assert parse("DIS QA(A1)").show == ("ALL",)
    assert parse("DELETE QALIAS(A1)").verb == "DELETE"
    assert mqsc.Command.from_dict(m.to_dict()) == m


@pytest.mark.parametrize("text, near", [
    ("CLEAR QLOCAL(Q*)", "CLEAR QLOCAL(Q*)"),
    ("CLEAR QLOCAL(Q1) PURGE", "CLEAR QLOCAL(Q1) PURGE"),
    ("CLEAR QMODEL(M1)", "CLEAR QMODEL(M1)"),
    ("DIS QSTATUS(Q1) TYPE(BOTH)", "DIS QSTATUS(Q1) TYPE(BOTH)"),
    ("DIS QSTATUS(Q1) PID", "DIS QSTATUS(Q1) PID"),            # a handle attribute
    ("DIS QSTATUS(Q1) TYPE(HANDLE) MSGAGE", "DIS QSTATUS(Q1) TYPE(HANDLE) MSGAGE"),
    ("STOP CONN(*)", "STOP CONN(*)"),
    ("STOP CONN(XYZ)", "STOP CONN(XYZ)"),
    ("STOP QLOCAL(Q1)", "STOP QLOCAL(Q1)"),
    ("RESET QSTATS(Q1) ALL", "RESET QSTATS(Q1) ALL"),
    ("DIS LSSTATUS", "DIS LSSTATUS"),
    ("DIS LOG(X)", "DIS LOG(X)"),
    ("DEFINE QALIAS(A1)", None),                                # no TARGET
    ("DEFINE QALIAS(A1) TARGET(Q1) MAXDEPTH(5)", "DEFINE QALIAS(A1) TARGET(Q1) MAXDEPTH(5)"),
    ("DEFINE QMODEL(M1) DEFTYPE(SOMETIMES)", "DEFINE QMODEL(M1) DEFTYPE(SOMETIMES)"),
    ("ALTER QMGR MAXMSGL(100)", "ALTER QMGR MAXMSGL(100)"),
    ("ALTER QMGR MONQ(LOUD)", "ALTER QMGR MONQ(LOUD)"),
    ("PING QSTATUS(Q1)", "PING QSTATUS(Q1)"),
])
def test_admin_syntax_errors_name_where(text: str, near: str | None) -> None:
    with pytest.raises(mqsc.MQSCSyntaxError) as info:
        parse(text)
    if near is not None:
        assert info.value.segment == near
    assert info.value.reason


def test_status_display_and_dates() -> None:
    lines = mqsc.status_display(mqsc.MSG_DISPLAY_QSTATUS, [("QUEUE", "Q1"), ("TYPE", "QUEUE")],
                                {"UNCOM": 0, "CURDEPTH": 2, "MSGAGE": "", "EXTRA": 1},
                                mqsc.QSTATUS_QUEUE_ATTRS, ("ALL",))
    assert lines[0] == "AMQ8450I: Display queue status details."
    assert lines[1] == "   QUEUE(Q1)" + " " * 31 + "TYPE(QUEUE)"
    assert lines[2] == "   CURDEPTH(2)" + " " * 29 + "MSGAGE( )"
    assert lines[3] == "   UNCOM(0)" + " " * 32 + "EXTRA(1)"  # unknown fields last
    only = mqsc.status_display(mqsc.MSG_DISPLAY_QSTATUS, [("QUEUE", "Q1")],
                               {"CURDEPTH": 2, "UNCOM": 0}, mqsc.QSTATUS_QUEUE_ATTRS,
                               ("UNCOM",))
    assert only[1:] == ["   QUEUE(Q1)" + " " * 31 + "UNCOM(0)"]
    assert mqsc.mq_date_time(0) == ("", "")
    assert mqsc.mq_date_time(86400 + 3661) == ("1970-01-02", "01.01.01")
    alias = mqsc.object_display("QALIAS", {"QUEUE": "A1", "TARGET": "Q1", "PUT": "ENABLED"},
                                ("QUEUE", "TYPE"))
    assert alias[1:] == ["   QUEUE(A1)" + " " * 31 + "TYPE(QALIAS)"]
    assert "TARGET(Q1)" in "\n".join(mqsc.object_display("QALIAS", {"QUEUE": "A1",
                                                                     "TARGET": "Q1"},
                                                         ("ALL",)))


def test_display_queue_covers_every_type() -> None:
    every = parse("DIS Q(*)")
    assert (every.objtype, every.attrs, every.show) == ("QUEUE", {"TYPE": "ALL"},
                                                         ("QUEUE", "TYPE"))
    only = parse("DISPLAY QUEUE(A*) TYPE(QA) TARGET")
    assert (only.attrs, only.show) == ({"TYPE": "QALIAS"}, ("TARGET",))
    assert parse("DIS QL(Q*)").objtype == "QLOCAL"
    with pytest.raises(mqsc.MQSCSyntaxError) as info:
        parse("DIS Q(*) TYPE(QREMOTE)")
    assert info.value.segment == "DIS Q(*) TYPE(QREMOTE)"


def test_a_command_over_mqs_limit_is_a_syntax_error_echoed_shortened() -> None:
    text = "DEFINE QLOCAL(Q1) DESCR('" + "x" * 5_000_000 + "')"
    with pytest.raises(mqsc.MQSCSyntaxError) as err:
        mqsc.parse_command(text)
    assert "32762" in err.value.reason and "5000027" in err.value.reason
    lines = [mqsc.echo(1, text), *mqsc.syntax_error_lines(err.value)]
    assert sum(len(x) for x in lines) < 1000
    assert "5000027 characters" in lines[0]
    at_limit = "DIS QMGR" + " " * (mqsc.MAX_COMMAND_LENGTH - 8)
    assert mqsc.parse_command(at_limit).verb == "DISPLAY"
    assert mqsc.echo(1, at_limit).endswith(at_limit)


def test_undecodable_bytes_and_control_characters_are_shown_as_hex() -> None:
    script = b"\xc8\x00 DIS QMGR\n".decode("utf-8", "surrogateescape")
    [text] = mqsc.split_commands(script)
    with pytest.raises(mqsc.MQSCSyntaxError) as err:
        mqsc.parse_command(text)
    assert err.value.reason.startswith("the byte \\xc8 is not UTF-8")
    assert mqsc.echo(1, text) == "     1 : \\xc8\\x00 DIS QMGR"
    assert all(line.isprintable() for line in mqsc.syntax_error_lines(err.value))


# -- found by an administrator's session (issue: daily MQSC) ------------------------------


def test_each_command_is_yielded_before_the_next_line_is_read() -> None:
    """runmqsc at a terminal, or driven through a pipe by a program waiting for each
    answer: a command must be parsed and run as soon as its last line is in."""
    read: list[str] = []

    def lines():
        for line in ["DEFINE QLOCAL(Q1) +", "  MAXDEPTH(5)", "DISPLAY QLOCAL(Q1)"]:
            read.append(line)
            yield line

    commands = mqsc.iter_commands(lines())
    assert next(commands) == "DEFINE QLOCAL(Q1) MAXDEPTH(5)"
    assert read == ["DEFINE QLOCAL(Q1) +", "  MAXDEPTH(5)"]
    assert next(commands) == "DISPLAY QLOCAL(Q1)"


def test_runmqsc_answers_a_command_while_its_input_is_still_open() -> None:
    """The answer to the first command comes before stdin ends (it was read whole
    first: an interactive runmqsc printed nothing until Ctrl-D)."""
    import os
    import selectors
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "from miqm.cli.runmqsc import main; main()",
                             "-v", "QM1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env={**os.environ, "MIQM_DATA_ROOT": "/nonexistent"})
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b"DEFINE QLOCAL(Q1)\n")
        proc.stdin.flush()
        seen = b""
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            # a generous bound, only so that a runmqsc that waits for the end of its
            # input fails the test instead of hanging it
            while b"1 : DEFINE QLOCAL(Q1)" not in seen and sel.select(timeout=60):
                chunk = os.read(proc.stdout.fileno(), 4096)
                if not chunk:
                    break
                seen += chunk
        assert b"     1 : DEFINE QLOCAL(Q1)" in seen
        proc.stdin.write(b"END\n")
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_semicolon_ends_a_command_even_after_plus_continuations() -> None:
    script = ("DEFINE QLOCAL(ORANGE.LOCAL.QUEUE) REPLACE +\n"
              "       DESCR(' ') +\n"
              "       MAXDEPTH(5000);\n"
              "DISPLAY QLOCAL(ORANGE.LOCAL.QUEUE) MAXDEPTH ;\n")
    cmds = mqsc.split_commands(script)
    assert cmds == ["DEFINE QLOCAL(ORANGE.LOCAL.QUEUE) REPLACE DESCR(' ') MAXDEPTH(5000)",
                    "DISPLAY QLOCAL(ORANGE.LOCAL.QUEUE) MAXDEPTH"]
    assert parse(cmds[0]).attrs["DESCR"] == " "


@pytest.mark.parametrize("text, near", [
    ("DEFINE QLOCAL(Q1) MAXDEPTH(5) MAXDEPTH(6)", "DEFINE QLOCAL(Q1) MAXDEPTH(5) MAXDEPTH(6)"),
    ("DEFINE QLOCAL(Q1) REPLACE NOREPLACE", "DEFINE QLOCAL(Q1) REPLACE NOREPLACE"),
    ("DELETE QLOCAL(Q1) NOPURGE PURGE", "DELETE QLOCAL(Q1) NOPURGE PURGE"),
    ("DEFINE QALIAS(A) TARGET(Q1) TARGQ(Q2)", "DEFINE QALIAS(A) TARGET(Q1) TARGQ(Q2)"),
])
def test_repeated_parameters_are_syntax_errors_as_in_mq(text: str, near: str) -> None:
    with pytest.raises(mqsc.MQSCSyntaxError) as info:
        parse(text)
    assert info.value.segment == near


def test_targq_is_accepted_as_targets_older_name() -> None:
    cmd = parse("def qa(QA.A) targq(QL.A) defpsist(no) replace")
    assert (cmd.attrs["TARGET"], cmd.attrs["DEFPSIST"]) == ("QL.A", "NO")


def test_refresh_security_forms_mq_accepts() -> None:
    for text in ("REFRESH SECURITY", "refresh security(*)", "REFRESH SECURITY TYPE(CONNAUTH)",
                 "REFRESH SECURITY(*) TYPE(AUTHSERV)"):
        assert (parse(text).verb, parse(text).objtype) == ("REFRESH", "SECURITY"), text
    with pytest.raises(mqsc.MQSCSyntaxError):
        parse("REFRESH SECURITY TYPE(SSL)")


def test_where_filters_parse_and_show_their_keyword() -> None:
    cmd = parse("DIS QL(*) WHERE(CURDEPTH GT 0)")
    assert cmd.attrs["WHERE"] == ["CURDEPTH", "GT", "0"]
    assert cmd.show == ("QUEUE", "TYPE", "CURDEPTH")
    assert parse("DIS QL(*) ALL WHERE(MAXDEPTH EQ 10)").show == ("ALL",)
    quoted = parse("DISPLAY QUEUE(*) WHERE(DESCR EQ 'Pay (daily)')")
    assert quoted.attrs["WHERE"] == ["DESCR", "EQ", "Pay (daily)"]
    assert parse("DIS QS(*) WHERE(msgage gt 60)").attrs["WHERE"] == ["MSGAGE", "GT", "60"]
    assert mqsc.Command.from_dict(cmd.to_dict()) == cmd


@pytest.mark.parametrize("text", [
    "DIS QL(*) WHERE(NOSUCH GT 0)", "DIS QL(*) WHERE(CURDEPTH ZZ 0)",
    "DIS QL(*) WHERE(CURDEPTH)", "DEFINE QLOCAL(Q1) WHERE(CURDEPTH GT 0)",
    "DIS QS(*) WHERE(QTIME GT 0)", "DIS QL(*) WHERE(DESCR EQ 'open)",
    "DIS QL(*) WHERE(CURDEPTH GT 0) WHERE(CURDEPTH LT 5)",
])
def test_bad_where_filters_are_syntax_errors(text: str) -> None:
    with pytest.raises(mqsc.MQSCSyntaxError):
        parse(text)


def test_apply_where_keeps_the_objects_that_match() -> None:
    lines = (mqsc.queue_display({"QUEUE": "A", "CURDEPTH": 0}, ("CURDEPTH",))
             + mqsc.queue_display({"QUEUE": "B", "CURDEPTH": 12}, ("CURDEPTH",))
             + mqsc.queue_display({"QUEUE": "C", "CURDEPTH": 3}, ("CURDEPTH",)))
    shown = mqsc.apply_where(parse("DIS QL(*) WHERE(CURDEPTH GT 2)"), lines)
    assert [x for x in shown if "QUEUE(" in x] == [lines[4], lines[7]]
    assert mqsc.apply_where(parse("DIS QL(*) WHERE(CURDEPTH GT 100)"), lines) == []
    assert mqsc.apply_where(parse("DIS QL(*)"), lines) == lines  # no WHERE: all
    described = mqsc.queue_display({"QUEUE": "B", "DESCR": "Bx"}, ("DESCR",))
    assert mqsc.apply_where(parse("DIS QL(*) WHERE(DESCR LK B*)"), described) == described
    failed = [mqsc.not_found("Z*")]
    assert mqsc.apply_where(parse("DIS QL(Z*) WHERE(CURDEPTH GT 0)"), failed) == failed


@pytest.mark.parametrize("shown, op, value, hit", [
    ("12", "GT", "2", True), ("12", "LT", "2", False), ("5", "GE", "5", True),
    ("ENABLED", "EQ", "ENABLED", True), ("DISABLED", "NE", "ENABLED", True),
    ("PAY.IN", "LK", "PAY.*", True), ("PAY.IN", "NL", "PAY.*", False),
    (" ", "GT", "60", False), (" ", "NE", "60", True),
    (" ", "EQ", " ", True), ("orders", "EQ", " ", False),  # WHERE(DESCR EQ ' ')
    ("MQOO_INPUT_SHARED,MQOO_BROWSE", "CT", "MQOO_BROWSE", True),
    ("MQOO_INPUT_SHARED", "EX", "MQOO_BROWSE", True),
    ("MQOO_INPUT_SHARED", "CTG", "MQOO_IN*", True),
])
def test_where_comparisons(shown: str, op: str, value: str, hit: bool) -> None:
    assert mqsc.where_matches(shown, op, value) is hit


def test_define_replace_sets_what_it_does_not_name_to_the_defaults() -> None:
    """MQ: with REPLACE, unspecified parameters come from LIKE or the default definition,
    never from the object replaced. An AutoConfig script that no longer says
    DESCR('old') must not leave the old description (it was kept: REPLACE was an ALTER)."""
    cmd = parse("DEFINE QLOCAL(Q1) REPLACE MAXDEPTH(10)")
    assert cmd.attrs == {**mqsc.REPLACE_DEFAULTS["QLOCAL"], "MAXDEPTH": 10}
    assert cmd.attrs["DESCR"] == "" and cmd.attrs["PUT"] == "ENABLED"
    # LIKE names where the rest comes from (the queue manager takes it from that queue)
    assert parse("DEFINE QLOCAL(Q1) LIKE(Q0) REPLACE MAXDEPTH(10)").attrs == {"MAXDEPTH": 10}
    assert parse("DEFINE QLOCAL(Q1) MAXDEPTH(10)").attrs == {"MAXDEPTH": 10}
    alias = parse("DEFINE QALIAS(A1) TARGET(Q1) REPLACE")
    assert alias.attrs == {**mqsc.REPLACE_DEFAULTS["QALIAS"], "TARGET": "Q1"}
    model = parse("DEFINE QMODEL(M1) REPLACE MAXDEPTH(7)")
    assert model.attrs == {**mqsc.REPLACE_DEFAULTS["QMODEL"], "MAXDEPTH": 7}


def test_the_replace_defaults_of_a_local_queue_are_the_stores() -> None:
    from miqm.store.queues import DEFAULT_ATTRS

    assert mqsc.REPLACE_DEFAULTS["QLOCAL"] == DEFAULT_ATTRS


def test_display_qmgr_refuses_an_attribute_it_does_not_have() -> None:
    """DIS QMGR DEADQ showed QMNAME alone, as if DEADQ were blank."""
    assert parse("DIS QMGR MAXUMSGS CONNAUTH").show == ("MAXUMSGS", "CONNAUTH")
    with pytest.raises(mqsc.MQSCSyntaxError) as info:
        parse("DIS QMGR DEADQ")
    assert info.value.segment == "DIS QMGR DEADQ" and "MAXUMSGS" in info.value.reason


def test_runmqsc_ignores_a_byte_order_mark_at_the_start_of_its_input() -> None:
    """A script saved by a Windows editor starts with a UTF-8 byte-order mark: its first
    command was a syntax error ('unexpected character')."""
    import os
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", "from miqm.cli.runmqsc import main; main()",
                           "-v", "QM1"], input=b"\xef\xbb\xbfDEFINE QLOCAL(Q1)\r\nEND\r\n",
                          capture_output=True, timeout=120,
                          env={**os.environ, "MIQM_DATA_ROOT": "/nonexistent"})
    assert proc.returncode == 0, proc.stdout
    assert b"     1 : DEFINE QLOCAL(Q1)\n" in proc.stdout


def test_runmqsc_says_what_became_of_a_command_whose_connection_broke(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The active instance failed under a command: runmqsc printed only the client's
    'the connection is closed'; MQ's AMQ8146 with what is known and what to do now."""
    import io
    import sys

    from miqm.cli import runmqsc
    from miqm.errors import NetError
    from miqm.net import client

    class Conn:
        calls = 0

        def call(self, op: str, **_k: object) -> dict:
            Conn.calls += 1
            if Conn.calls == 1:
                return {"ok": True, "lines": [mqsc.MSG_PING]}
            raise NetError("the connection is closed", mqrc=2009)

        def close(self) -> None:
            pass

    monkeypatch.setattr(client, "connect", lambda *_a, **_k: Conn())
    monkeypatch.setattr(sys, "argv", ["runmqsc", "QM1"])
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(
        b"PING QMGR\nDEFINE QLOCAL(Q1)\nDEFINE QLOCAL(Q2)\n")))
    with pytest.raises(SystemExit) as exit_:
        runmqsc.main()
    out = capsys.readouterr().out.splitlines()
    assert exit_.value.code == 10
    broke = out[out.index("     2 : DEFINE QLOCAL(Q1)") + 1]
    assert broke.startswith("AMQ8146E: miqm queue manager 'QM1' not available.")
    assert "MQRC 2009" in broke and "may or may not have been done" in broke
    assert "DEFINE QLOCAL(Q2)" not in "\n".join(out)
    assert out[-3:] == ["2 MQSC commands read.", "No commands have a syntax error.",
                        "One valid MQSC command could not be processed."]


def test_runmqsc_u_reads_the_secret_from_the_first_line_and_never_echoes_it(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """MQ's `runmqsc -u UserId QMgr < script`: the password is the script's first line.
    There was no -u (an administrator could not run MQSC as an application principal)."""
    import io
    import sys

    from miqm.cli import runmqsc
    from miqm.net import client

    used: list[object] = []

    class Conn:
        def call(self, op: str, **_k: object) -> dict:
            return {"ok": True, "lines": [mqsc.MSG_PING]}

        def close(self) -> None:
            pass

    def connect(qmgr: str, **kwargs: object) -> Conn:
        used.append(kwargs.get("credential"))
        return Conn()

    monkeypatch.setattr(client, "connect", connect)
    monkeypatch.setattr(sys, "argv", ["runmqsc", "-u", "app1", "QM1"])
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(
        b"s3cret-value\nPING QMGR\n")))
    with pytest.raises(SystemExit) as exit_:
        runmqsc.main()
    out = capsys.readouterr().out
    assert exit_.value.code == 0 and used == ["app1:s3cret-value"]
    assert "s3cret" not in out and "One MQSC command read." in out
