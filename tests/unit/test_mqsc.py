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
    assert mqsc.trailer(1, 1, 1) == ["1 MQSC command read.", "1 command has a syntax error.",
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
    a = parse("DEF QA(A1) TARGET(q1) PUT(DISABLED) REPLACE")
    assert (a.verb, a.objtype, a.attrs, a.options) == (
        "DEFINE", "QALIAS", {"TARGET": "Q1", "PUT": "DISABLED"}, ("REPLACE",))
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
    assert "unexpected character '\\xc8'" in err.value.reason
    assert mqsc.echo(1, text) == "     1 : \\xc8\\x00 DIS QMGR"
    assert all(line.isprintable() for line in mqsc.syntax_error_lines(err.value))
