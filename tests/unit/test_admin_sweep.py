"""An MQ administrator's sweep of bad input across the control commands: each case gives
one clear line, a non-zero exit where something is wrong, and loses nothing."""

from __future__ import annotations

import errno
import io
import os
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest
import typer

from miqm import mqsc
from miqm.cli import common, crtmqm, dltmqm, endmqm, mqinf, runmqsc, setmqini, strmqm
from miqm.config import check_complete, render_qm_ini
from miqm.errors import ConfigError
from miqm.net.server import Listener
from miqm.net.service import QueueService
from miqm.paths import find
from miqm.store.settings import LogSettings
from tests.unit import test_cli_mqadmin
from tests.unit.test_cli_mqadmin import one_line, run, serve
from tests.unit.test_net import FakeStore

#: a data root with crtmqm's store stubbed (test_cli_mqadmin's fixture, shared by name)
root = test_cli_mqadmin.root


@pytest.fixture()
def store(tmp_path, monkeypatch) -> Iterator[Any]:
    """A FakeStore served as QM1 through a real listener (runmqsc reaches it through
    MIQM_CONNECTION)."""
    monkeypatch.setenv("MIQM_DATA_ROOT", str(tmp_path / "root"))
    yield from serve(FakeStore(), monkeypatch)


def test_a_script_cut_short_inside_a_continued_command_runs_none_of_it(
        store, capsys, monkeypatch) -> None:
    # the attributes after the '+' never came: DEFINE ... REPLACE alone would have put
    # every attribute of Q1 back to its default
    store.define_queue("Q1", MAXDEPTH=7)
    script = "DIS QL(Q1) MAXDEPTH\nDEFINE QLOCAL(Q1) REPLACE +\n"
    rc, out, err = run(runmqsc.main, ["runmqsc", "QM1"], capsys, monkeypatch, stdin=script)
    assert rc == 10, err
    assert store.queues["Q1"]["MAXDEPTH"] == 7
    lines = out.splitlines()
    at = lines.index("     2 : DEFINE QLOCAL(Q1) REPLACE")
    assert lines[at + 1].startswith("AMQ8405I")
    assert "continuation" in lines[at + 3] and "not run" in lines[at + 3], lines
    assert lines[-3:] == ["2 MQSC commands read.", "1 command has a syntax error.",
                          "All valid MQSC commands were processed."]


def test_a_continued_command_that_is_finished_still_runs(store, capsys, monkeypatch) -> None:
    script = "DEFINE QLOCAL(Q2) +\n   MAXDEPTH(9) -\nDESCR('x');\nDIS QL(Q2) -\n\n* c\nMAXDEPTH\n"
    rc, out, err = run(runmqsc.main, ["runmqsc", "-e", "QM1"], capsys, monkeypatch,
                       stdin=script)
    assert rc == 0, out + err
    assert store.queues["Q2"]["MAXDEPTH"] == 9 and "   MAXDEPTH(9)" in out


def test_verify_mode_reports_the_unfinished_command_too(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("MIQM_DATA_ROOT", str(tmp_path / "root"))
    rc, out, _ = run(runmqsc.main, ["runmqsc", "-v", "QM1"], capsys, monkeypatch,
                     stdin="DIS QMGR -")
    assert rc == 10 and "was not run" in out and "1 command has a syntax error." in out
    # the AutoConfig reader keeps what it had: the command as it stands
    assert mqsc.split_commands("DIS QMGR -") == ["DIS QMGR"]


@pytest.mark.parametrize("value", ["-1", "-999999999999"])
def test_a_negative_number_is_out_of_range_not_a_non_number(value: str) -> None:
    with pytest.raises(mqsc.MQSCSyntaxError) as info:
        mqsc.parse_command(f"ALTER QMGR MAXUMSGS({value})")
    assert info.value.reason == f"MAXUMSGS({int(value)}) is out of range 1 to 999999999"
    with pytest.raises(mqsc.MQSCSyntaxError) as info:
        mqsc.parse_command("ALTER QMGR MAXUMSGS(1e9)")
    assert info.value.reason == "MAXUMSGS needs a whole number"



def test_dltmqm_where_the_data_directory_is_not_there_says_what_it_removed(
        root, tmp_path, capsys, monkeypatch) -> None:
    # the other host deleted it, or the shared filesystem is not mounted here: only the
    # entry goes, and the line says so ('deleted' alone let an administrator think the
    # data on an unmounted NAS was gone)
    shared = tmp_path / "shared"
    rc, _, err = run(crtmqm.main, ["crtmqm", "-lf", "64", "-md", str(shared), "QM1"],
                     capsys, monkeypatch)
    assert rc == 0, err
    (shared / "QM1").rename(tmp_path / "elsewhere")  # an unmounted filesystem, say
    rc, out, err = run(dltmqm.main, ["dltmqm", "QM1"], capsys, monkeypatch)
    assert rc == 0 and not err, err
    line = one_line(out)
    assert "does not exist here" in line and "only this host's mqs.ini entry" in line, line
    assert str(shared / "QM1") in line
    assert (tmp_path / "elsewhere" / "qm.ini").exists()
    rc, _, err = run(dltmqm.main, ["dltmqm", "QM1"], capsys, monkeypatch)
    assert rc == 72 and "AMQ7048" in one_line(err)


def test_a_qm_ini_whose_log_stanza_lost_its_logpath_is_refused() -> None:
    # crtmqm -ld put the log elsewhere: started from this file, the queue manager looked
    # for it in the default directory ('amqhlctl.lfh is missing ... recreate the queue
    # manager'), or started on an old log found there
    whole = render_qm_ini("QM1", LogSettings(log_type="LINEAR"), "/MQHA/QM1/logs/QM1")
    check_complete(whole, "/d/qm.ini")
    without = whole.replace("   LogPath=/MQHA/QM1/logs/QM1\n", "")
    assert without != whole
    for text in (without, whole.replace("LogPath=/MQHA/QM1/logs/QM1", "LogPath=  ")):
        with pytest.raises(ConfigError, match="no LogPath") as err:
            check_complete(text, "/d/qm.ini")
        assert err.value.amq == "AMQ7880" and "setmqini -m QM1 -s Log -k LogPath" in str(
            err.value) and "\n" not in err.value.user_line()
    # an emptied qm.ini is rebuilt with setmqini, LogPath first
    check_complete("Log:\n   LogPath=/l/QM1\n", "/d/qm.ini")


def test_relative_md_ld_and_addmqinf_datapath_are_recorded_absolute(
        root, tmp_path, capsys, monkeypatch) -> None:
    # recorded as typed, 'rel/data/QM1' was found only from the directory crtmqm ran in,
    # and dspmqinf's addmqinf line for the other host carried it too
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    rc, out, err = run(crtmqm.main, ["crtmqm", "-lf", "64", "-md", "rel/data", "-ld",
                                     "rel/log", "QM1"], capsys, monkeypatch)
    assert rc == 0, err
    entry = find("QM1")
    assert entry.data_path == str(work / "rel" / "data" / "QM1")
    ini = (work / "rel" / "data" / "QM1" / "qm.ini").read_text()
    assert f"LogPath={work / 'rel' / 'log' / 'QM1'}\n" in ini, ini
    assert f"Directory '{work / 'rel' / 'data' / 'QM1'}' created." in out
    # the second host, in another root, given a relative DataPath
    monkeypatch.setenv("MIQM_DATA_ROOT", str(tmp_path / "hostb"))
    rc, _, err = run(mqinf.addmqinf_main, ["addmqinf", "-v", "Name=QM1", "-v",
                                           "DataPath=rel/data/QM1"], capsys, monkeypatch)
    assert rc == 0, err
    monkeypatch.chdir(tmp_path)
    assert find("QM1").data_path == str(work / "rel" / "data" / "QM1")


@pytest.mark.parametrize("argv,says", [
    (["crtmqm", "-u", "SYSTEM.DEAD.LETTER.QUEUE", "QM1"], "no dead-letter queue"),
    (["crtmqm", "-p", "1414", "QM1"], "setmqini -m QMgr -s Listener -k Port"),
    (["crtmqm", "-c", "Payments", "QM1"], "ALTER QMGR DESCR"),
    (["crtmqm", "-x", "5000", "QM1"], "MaxUncommittedMsgs"),
    (["crtmqm", "-sax", "QM1"], "systemd unit"),
    (["strmqm", "-c", "QM1"], "no default objects"),
    (["strmqm", "-a", "QM1"], "no backup queue managers"),
    (["endmqm", "-tp", "30", "QM1"], "endmqm -i QMgr"),
    (["endmqm", "-t", "30", "QM1"], "endmqm -w QMgr"),
])
def test_mq_flags_without_a_counterpart_say_what_to_do(
        root, capsys, monkeypatch, argv, says) -> None:
    # click said only 'No such option: -u (try crtmqm -h)'; nothing is created or ended
    main = {"crtmqm": crtmqm.main, "strmqm": strmqm.main, "endmqm": endmqm.main}[argv[0]]
    rc, out, err = run(main, argv, capsys, monkeypatch)
    line = one_line(err)
    assert rc == 2 and not out, out
    assert line.startswith(f"{argv[0]}: {argv[1]} is MQ's") and says in line, line
    assert not find_registry_entries()


def find_registry_entries() -> list[str]:
    """The queue managers this host's mqs.ini knows."""
    from miqm.paths import load_registry

    return sorted(load_registry())


@pytest.mark.parametrize("prog", sorted(common.MQ_ONLY_FLAGS))
def test_the_mq_only_flags_are_none_of_the_commands_own(prog: str) -> None:
    module = {"crtmqm": crtmqm, "strmqm": strmqm, "endmqm": endmqm}[prog]
    command = typer.main.get_command(module.app)
    own = {o for p in command.params for o in getattr(p, "opts", [])}
    assert not set(common.MQ_ONLY_FLAGS[prog]) & (own | set(common.HELP_OPTIONS))


def _script_ending_the_listener(listener: Any, first: list[str], rest: list[str]
                                ) -> Iterator[str]:
    """stdin for runmqsc: ``first``, then (once runmqsc asks for the next line, after the
    answers) the listener stops, as an instance that ends or fails over, then ``rest``."""
    yield from first
    listener.stop()
    yield from rest


def test_runmqsc_says_a_command_after_the_break_was_not_sent(
        tmp_path, capsys, monkeypatch) -> None:
    # it said the command 'may or may not have been done' (and quoted the client
    # library's 'connect(..., reconnect=True)') for a command it never sent
    monkeypatch.setenv("MIQM_DATA_ROOT", str(tmp_path / "root"))
    store = FakeStore()
    listener = Listener(QueueService(store, "QM1").handle)
    host, port = listener.start()
    monkeypatch.setenv("MIQM_CONNECTION", f"{host}({port})")
    try:
        monkeypatch.setattr(runmqsc, "_stdin_lines", lambda: _script_ending_the_listener(
            listener, ["DEFINE QLOCAL(A)\n"], ["DEFINE QLOCAL(B)\n", "DEFINE QLOCAL(C)\n"]))
        rc, out, err = run(runmqsc.main, ["runmqsc", "-e", "QM1"], capsys, monkeypatch)
    finally:
        listener.stop()
    assert rc == 10, out + err
    lost = [ln for ln in out.splitlines() if ln.startswith("AMQ8146E")]
    assert len(lost) == 1, out
    assert "broke before this command was sent (MQRC 2009 MQRC_CONNECTION_BROKEN)" in lost[0]
    assert "neither it nor the commands after it were run" in lost[0]
    assert "reconnect=True" not in out and "may or may not" not in out
    assert sorted(store.queues) == ["A"]
    assert out.splitlines()[-3] == "2 MQSC commands read."


def test_runmqsc_says_a_command_sent_when_the_break_came_is_in_doubt() -> None:
    line = runmqsc._lost_line("QM1", 2009, sent=True)
    assert line.startswith("AMQ8146E: miqm queue manager 'QM1' not available.")
    assert "broke during this command (MQRC 2009 MQRC_CONNECTION_BROKEN)" in line
    assert "may or may not have been done" in line and "Check it with DISPLAY" in line


class _Endless:
    """A binary stdin of ``size`` zero bytes then ``tail`` (a file that is not text, or
    /dev/zero), served without holding it: a read without a limit fails the test."""

    def __init__(self, size: int, tail: bytes) -> None:
        self.left, self.tail = size, tail

    def readline(self, limit: int = -1) -> bytes:
        assert limit > 0, "an unbounded readline: the whole line would be held"
        if self.left:
            n = min(limit, self.left)
            self.left -= n
            return bytes(n)
        line, _, self.tail = self.tail.partition(b"\n")
        return line + b"\n" if line or self.tail else b""


def test_a_line_without_end_is_refused_as_too_long_without_being_held(
        tmp_path, capsys, monkeypatch) -> None:
    # 'runmqsc QM1 < /dev/zero' (or a binary file) ended in MemoryError, an AMQ6184
    monkeypatch.setenv("MIQM_DATA_ROOT", str(tmp_path / "root"))
    stdin = _Endless(1 << 30, b"\nDIS QMGR\n")
    monkeypatch.setattr(sys, "stdin", types.SimpleNamespace(buffer=stdin))
    monkeypatch.setattr(sys, "argv", ["runmqsc", "-v", "QM1"])
    with pytest.raises(SystemExit) as info:
        runmqsc.main()
    out, err = capsys.readouterr()
    assert info.value.code == 10 and not err, err
    assert "(the command is longer than 32762 characters: an MQSC command may be at most " \
        "32762 characters; it was not run)" in out
    assert "     2 : DIS QMGR" in out and "2 MQSC commands read." in out
    assert len(out) < 2000  # the echo is the first characters only


def test_continuation_lines_without_end_are_not_all_kept() -> None:
    lines = ["DIS QMGR -\n", *(["x" * 1000 + "-\n"] * 200), "x\n", "PING QMGR\n"]
    got = list(mqsc.iter_input(lines))
    assert [k for k, _ in got] == ["toolong", "command"]
    assert len(got[0][1]) == mqsc.MAX_COMMAND_LENGTH + 1 and got[1][1] == "PING QMGR"
    # the AutoConfig reader gives it to parse_command, which refuses it
    with pytest.raises(mqsc.MQSCSyntaxError, match="32762"):
        mqsc.parse_command(mqsc.split_commands("".join(lines))[0])


def test_runmqsc_with_stdin_closed_reads_no_command(tmp_path, capsys, monkeypatch) -> None:
    # 'runmqsc -v QM1 <&-' was an AMQ6184 ('NoneType' object is not iterable)
    monkeypatch.setenv("MIQM_DATA_ROOT", str(tmp_path / "root"))
    monkeypatch.setattr(sys, "stdin", None)
    monkeypatch.setattr(sys, "argv", ["runmqsc", "-v", "QM1"])
    with pytest.raises(SystemExit) as info:
        runmqsc.main()
    out, err = capsys.readouterr()
    assert info.value.code == 0 and not err and "No MQSC commands read." in out


@pytest.mark.parametrize("stanza,key,value,says", [
    ("Listener", "Port", "abc", "Listener Port is 'abc'"),
    ("Listener", "Port", "99999", "a listener port is a number from 0 to 65535"),
    ("TCP", "Port", "-1", "TCP Port is '-1'"),
    ("Listener", "IdleTimeout", "-5", "IdleTimeout"),
    ("Metrics", "Port", "abc", "Metrics: Port='abc'"),
    ("Metrics", "BindAddress", "nowhere", "not an IP address"),
])
def test_setmqini_refuses_a_listener_or_metrics_value_strmqm_would_refuse(
        root, capsys, monkeypatch, stanza, key, value, says) -> None:
    # written without a word, it stopped the next strmqm
    rc, _, err = run(crtmqm.main, ["crtmqm", "-lf", "64", "QM1"], capsys, monkeypatch)
    assert rc == 0, err
    ini = find("QM1").data_path + "/qm.ini"
    with open(ini, encoding="utf-8") as f:
        before = f.read()
    monkeypatch.setenv("MIQM_LISTENER_PORT", "1414")  # the file is checked, not the shell
    rc, _, err = run(setmqini.main, ["setmqini", "-m", "QM1", "-s", stanza, "-k", key,
                                     "-v", value], capsys, monkeypatch)
    line = one_line(err)
    assert rc == 2 and line.startswith("AMQ7880: setmqini: not changed") and says in line
    with open(ini, encoding="utf-8") as f:
        assert f.read() == before


def test_setmqini_sets_tls_files_one_key_at_a_time(root, capsys, monkeypatch) -> None:
    # the rule that SSLCertFile and SSLKeyFile come together is strmqm's to apply
    run(crtmqm.main, ["crtmqm", "-lf", "64", "QM1"], capsys, monkeypatch)
    for key, value in (("SSLCertFile", "/etc/miqm/qm1.crt"), ("SSLKeyFile", "/k"),
                       ("Port", "1414")):
        rc, _, err = run(setmqini.main, ["setmqini", "-m", "QM1", "-s", "Listener", "-k",
                                         key, "-v", value], capsys, monkeypatch)
        assert rc == 0, err


@pytest.mark.parametrize("stdin", ["empty", "closed"])
def test_runmqsc_u_with_nothing_on_stdin_says_no_password_was_read(
        store, capsys, monkeypatch, stdin: str) -> None:
    # empty: sent as an empty password and refused as a wrong one (AMQ5534); closed
    # (<&-): an AMQ6184 ('NoneType' object has no attribute 'isatty')
    if stdin == "closed":
        monkeypatch.setattr(sys, "stdin", None)
        monkeypatch.setattr(sys, "argv", ["runmqsc", "-u", "APP1", "QM1"])
        with pytest.raises(SystemExit) as info:
            runmqsc.main()
        rc, (out, err) = info.value.code, capsys.readouterr()
    else:
        rc, out, err = run(runmqsc.main, ["runmqsc", "-u", "APP1", "QM1"], capsys,
                           monkeypatch, stdin="")
    line = one_line(err)
    assert rc == 20 and not out, out
    assert line.startswith("runmqsc: -u APP1: no password was read, stdin is empty"), line
    assert "AMQ5534" not in line and "AMQ6184" not in line


def test_a_command_started_with_stdout_closed_drops_its_output(
        store, capsys, monkeypatch) -> None:
    # runmqsc, setmqaut, dspmqaut and dmpmqaut wrote to sys.stdout themselves: with
    # stdout closed (>&-) they ended in AMQ6184 ('NoneType' object has no attribute
    # 'write'), where the other commands dropped their output
    from miqm.cli import authz

    monkeypatch.setattr(sys, "stdout", None)
    for main, argv in ((runmqsc.main, ["runmqsc", "-e", "QM1"]),
                       (authz.dmpmqaut_main, ["dmpmqaut", "-m", "QM1"])):
        monkeypatch.setattr(sys, "argv", argv)
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"DEFINE QL(Z1)\n")))
        try:
            main()
            code: object = 0
        except SystemExit as exc:
            code = exc.code or 0
        err = capsys.readouterr().err
        assert code == 0 and "AMQ6184" not in err, err
        monkeypatch.setattr(sys, "stdout", None)
    assert "Z1" in store.queues


def test_output_that_cannot_be_written_is_said_to_be_the_output() -> None:
    # '> /dev/full' said 'No space left on device: . Check the path and permissions.'
    line, code = common.error_line(OSError(errno.ENOSPC, "No space left on device"))
    assert code == 71 and line.startswith("No space left on device: the command's output "
                                          "could not be written. What it did before is done")
    line, code = common.error_line(PermissionError(errno.EACCES, "Permission denied", "/x"))
    assert line == "Permission denied: /x. Check the path and permissions." and code == 71


@pytest.mark.parametrize("flags,says", [
    (["--add", "APP1", "--remove", "APP1"], "give --add or --remove, not both."),
    (["--show", "--add", "APP2"], "--show prints the admin credential"),
    (["--rotate", "--remove", "APP1"], "does not go with --remove"),
])
def test_miqm_credential_flags_that_do_not_go_together_are_a_usage_error(
        root, capsys, monkeypatch, flags, says) -> None:
    # --add with --remove was AMQ7026 (a principal's name not valid), exit 1; --show with
    # --add and --rotate with --remove were silently ignored
    from miqm.cli import umbrella

    run(crtmqm.main, ["crtmqm", "-lf", "64", "QM1"], capsys, monkeypatch)
    rc, out, err = run(umbrella.main, ["miqm", "credential", "-m", "QM1", *flags], capsys,
                       monkeypatch)
    line = one_line(err)
    assert rc == 2 and not out and line.startswith("miqm credential: ") and says in line
    assert "AMQ7026" not in line


def test_a_qm_ini_that_is_not_utf8_is_refused_not_rewritten(root, capsys, monkeypatch) -> None:
    # setmqini read it with replacement characters and wrote it back changed: a path
    # holding an ISO-8859-1 byte became another path (strmqm read it the same way)
    run(crtmqm.main, ["crtmqm", "-lf", "64", "QM1"], capsys, monkeypatch)
    ini = find("QM1").data_path + "/qm.ini"
    with open(ini, "ab") as f:
        f.write(b"Extra:\n   Path=/data/caf\xe9\n")
    with open(ini, "rb") as f:
        before = f.read()
    for main, argv in ((setmqini.main, ["setmqini", "-m", "QM1", "-s", "Log", "-k",
                                        "LogBufferPages", "-v", "100"]),
                       (strmqm.main, ["strmqm", "QM1"])):
        rc, _, err = run(main, argv, capsys, monkeypatch)
        line = one_line(err)
        assert rc == 71 and line.startswith(f"AMQ7880: {ini} is damaged or not UTF-8: byte "
                                            "0xe9 at offset"), line
        with open(ini, "rb") as f:
            assert f.read() == before
    # a byte-order mark in front (a Windows editor) is taken
    with open(ini, "wb") as f:
        f.write(b"\xef\xbb\xbf" + before.replace(b"caf\xe9", b"cafe"))
    rc, _, err = run(setmqini.main, ["setmqini", "-m", "QM1", "-s", "Log", "-k",
                                     "LogBufferPages", "-v", "100"], capsys, monkeypatch)
    assert rc == 0, err


def test_strmqm_losing_a_race_on_its_own_host_says_the_instance_runs_here(
        monkeypatch, capsys) -> None:
    # two strmqm at once on one host: the one refused (master held) looked once, while
    # master still held the record of this host's previous, gone, instance, and said
    # AMQ1101 'running elsewhere ... use strmqm -x'; the winner writes its record next
    from miqm.cli import endmqm as endmqm_module
    from miqm.ha import runfile

    monkeypatch.setenv("MIQM_HOSTNAME", "hosta")
    old = {"held": True, "host": "hosta", "lock_id": 1, "pid": 111, "generation": 1}
    new = {"held": True, "host": "hosta", "lock_id": 2, "pid": 222, "generation": 2}
    free = {"held": False, "host": None, "lock_id": None, "pid": None, "generation": None}
    looks = iter([old, old, old, new])
    monkeypatch.setattr(endmqm_module, "lock_holders", lambda q: {
        "master": next(looks), "active": free, "standby": free})
    monkeypatch.setattr(runfile, "instance_alive", lambda pid: pid == 222)
    with pytest.raises(typer.Exit) as info:
        strmqm._refuse_if_running_here("QM1", settle=True)
    err = capsys.readouterr().err
    assert info.value.exit_code == 5 and "AMQ1104" in err and "(pid 222)" in err, err
    # without settle (before the controller ran) one look, as before
    looks = iter([old, new])
    strmqm._refuse_if_running_here("QM1")
    # another host's record: no wait
    other = dict(old, host="hostb")
    looks = iter([other])
    strmqm._refuse_if_running_here("QM1", settle=True)


def test_one_strmqm_at_a_time_per_host_and_queue_manager(tmp_path) -> None:
    # two 'strmqm -x QM1' at once on one host both passed the check for an instance here
    # and started an active and a standby on the same host
    from miqm.errors import MiqmError

    fd = strmqm._one_strmqm_at_a_time("QM1", str(tmp_path))
    assert fd is not None
    try:
        with pytest.raises(MiqmError) as info:
            strmqm._one_strmqm_at_a_time("QM1", str(tmp_path))
        line = info.value.user_line()
        assert info.value.exit_code == 5 and line.startswith("AMQ1104: ")
        assert f"another strmqm (pid {os.getpid()})" in line and "dspmq -x" in line, line
        other = strmqm._one_strmqm_at_a_time("QM2", str(tmp_path))  # another qmgr: free
        assert other is not None
        os.close(other)
    finally:
        os.close(fd)
    again = strmqm._one_strmqm_at_a_time("QM1", str(tmp_path))  # released with its fd
    assert again is not None
    os.close(again)


@pytest.mark.parametrize("mqrc,how", [(2161, "controlled"), (2162, "immediately")])
def test_commands_refused_by_an_ending_instance_say_it_is_ending(
        store, capsys, monkeypatch, mqrc: int, how: str) -> None:
    # they printed the client library's line for applications, 'the queue manager is
    # ending (controlled) ... end the unit of work and disconnect', runmqsc without an
    # AMQ number
    from miqm.cli import amqldmpa, authz
    from miqm.errors import NetError
    from miqm.net import client

    def ending(*_a: Any, **_k: Any) -> Any:
        raise NetError("the queue manager is ending (controlled) (MQRC 2161 "
                       "MQRC_Q_MGR_QUIESCING); end the unit of work and disconnect",
                       mqrc=mqrc)

    monkeypatch.setattr(client, "connect", ending)
    for main, argv, code in ((runmqsc.main, ["runmqsc", "QM1"], 20),
                             (amqldmpa.main, ["amqldmpa", "-m", "QM1"], 40),
                             (authz.dmpmqaut_main, ["dmpmqaut", "-m", "QM1"], 40)):
        rc, _out, err = run(main, argv, capsys, monkeypatch, stdin="DIS QMGR\n")
        line = one_line(err)
        assert rc == code, (argv, rc, err)
        assert line.startswith(f"AMQ8146: miqm queue manager not available: it is ending "
                               f"({how}, MQRC {mqrc}"), line
        assert "end the unit of work" not in line and "dspmq -x" in line


@pytest.mark.parametrize("flags,number,says", [
    (["-md", "{tmp}/d", "-ld", "{tmp}/d"], "AMQ7017", "is the data directory"),
    (["-md", "{root}/qmgrs/QM1"], "AMQ6062", "inside the data directory of queue manager "
     "'QM1'"),
    (["-ld", "{root}/qmgrs/QM1/logs"], "AMQ7017", "give -ld a directory of its own"),
])
def test_crtmqm_refuses_directories_another_dltmqm_would_delete(
        root, tmp_path, capsys, monkeypatch, flags, number, says) -> None:
    # accepted, QM2's data or log lay inside QM1's data directory (dltmqm QM1 deleted
    # them), or its log in its own data directory
    run(crtmqm.main, ["crtmqm", "-lf", "64", "QM1"], capsys, monkeypatch)
    argv = [f.format(tmp=tmp_path, root=root) for f in flags]
    rc, _out, err = run(crtmqm.main, ["crtmqm", "-lf", "64", *argv, "QM2"], capsys,
                        monkeypatch)
    line = one_line(err)
    assert rc == 71 and line.startswith(f"{number}: ") and says in line, line
    assert find_registry_entries() == ["QM1"]
    assert not os.path.exists(os.path.join(root, "qmgrs", "QM1", "QM2"))
    assert not os.path.exists(os.path.join(root, "qmgrs", "QM1", "logs"))
    assert not (tmp_path / "d" / "QM2").exists()
    # a sibling whose name starts the same is not inside
    rc, _, err = run(crtmqm.main, ["crtmqm", "-lf", "64", "-md", f"{root}/qmgrs/QM1X",
                                   "QM3"], capsys, monkeypatch)
    assert rc == 0, err
