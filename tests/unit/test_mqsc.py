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
