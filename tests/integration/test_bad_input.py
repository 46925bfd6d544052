"""Bad input through the real commands: one clear line with its AMQ number, a non-zero
exit, no traceback, and nothing lost or overwritten."""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


class Env:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.env = dict(os.environ, MIQM_DATA_ROOT=str(root), MIQM_HOSTNAME="hostbad")
        self.env.pop("MIQM_CONNECTION", None)

    def run(self, *argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(list(argv), env=self.env, input=stdin, capture_output=True,
                              text=True, timeout=60)
        assert "Traceback" not in proc.stdout + proc.stderr
        return proc

    def fails_with(self, amq: str, *argv: str) -> str:
        proc = self.run(*argv)
        assert proc.returncode != 0, proc.stdout
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1, proc.stderr
        assert amq in lines[0], lines[0]
        return lines[0]


@pytest.fixture
def qm(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path / "root")
    assert e.run("crtmqm", "QMBAD").returncode == 0
    try:
        yield e
    finally:
        e.run("endmqm", "-i", "QMBAD")


def _digest(d: Path) -> str:
    """The log directory's files and their bytes, but for ``active``: the lock an instance
    takes there as it starts (its holder record), before the log is read."""
    h = hashlib.sha256()
    for f in sorted(d.rglob("*")):
        if f.is_file() and f != d / "active":
            h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()


def test_corrupt_or_out_of_range_qm_ini(qm: Env) -> None:
    ini = qm.root / "qmgrs" / "QMBAD" / "qm.ini"
    good = ini.read_text()
    ini.write_text(good + "this is not a stanza line\n")
    assert "line" in qm.fails_with("AMQ7880", "strmqm", "QMBAD")
    ini.write_text(good.replace("LogPrimaryFiles=3", "LogPrimaryFiles=999"))
    assert "LogPrimaryFiles" in qm.fails_with("AMQ7880", "strmqm", "QMBAD")
    ini.write_text(good.replace("VerifyInterval=10", "VerifyInterval=80"))
    line = qm.fails_with("AMQ7880", "strmqm", "QMBAD")  # VerifyInterval + MonitorStall >= lease
    assert "VerifyInterval (80s) + MonitorStall" in line and "lease" in line, line
    ini.write_text(good)
    assert qm.run("strmqm", "QMBAD").returncode == 0


def test_corrupt_control_file_and_missing_extent(qm: Env) -> None:
    log = qm.root / "log" / "QMBAD"
    ctl = log / "amqhlctl.lfh"
    good = ctl.read_bytes()
    ctl.write_bytes(good[:20] + b"XX" + good[22:])
    before = _digest(log)
    assert "amqhlctl.lfh" in qm.fails_with("AMQ6118", "strmqm", "QMBAD")
    assert _digest(log) == before
    ctl.write_bytes(good)
    extent = log / "S0000000.LOG"
    extent.rename(log / "moved")
    assert "S0000000.LOG" in qm.fails_with("AMQ6767", "strmqm", "QMBAD")
    (log / "moved").rename(extent)
    assert qm.run("strmqm", "QMBAD").returncode == 0


def test_mid_log_corruption_stops_strmqm_naming_extent_and_offset(qm: Env) -> None:
    assert qm.run("strmqm", "QMBAD").returncode == 0
    assert qm.run("runmqsc", "QMBAD", stdin="DEFINE QLOCAL(Q)\n").returncode == 0
    lines = "".join(f"message {i:05d} " + "x" * 900 + "\n" for i in range(120))
    assert qm.run("amqsput", "QMBAD", "Q", stdin=lines).returncode == 0
    assert qm.run("endmqm", "-p", "QMBAD").returncode == 0  # no shutdown checkpoint
    log = qm.root / "log" / "QMBAD"
    extent = log / "S0000000.LOG"
    raw = bytearray(extent.read_bytes())
    bad = 2 * 4096 + 3 * 4096 + 100  # data page 3: forced long before the tail
    raw[bad] ^= 0xFF
    extent.write_bytes(bytes(raw))
    before = _digest(log)
    line = qm.fails_with("AMQ6118", "strmqm", "QMBAD")
    assert "S0000000.LOG" in line and f"offset {5 * 4096}" in line
    assert _digest(log) == before  # nothing overwritten


def test_wrong_flags_and_unknown_names(qm: Env) -> None:
    for argv in (("strmqm", "-z", "QMBAD"), ("endmqm", "-c", "-i", "QMBAD"),
                 ("dspmq", "-o", "bogus"), ("crtmqm", "-lf", "10", "QMX"),
                 ("amqsget",), ("miqm", "bench", "failover", "--fault", "nope"),
                 ("miqm", "bench", "failover", "--fault", "partition", "--lease", "2"),
                 ("miqm", "bench", "failover", "--fault", "pause", "--lab", str(qm.root)),
                 ("miqm", "bench", "failover", "--backlog", "0", "--rounds", "0"),
                 ("miqm", "bench", "failover", "--rounds", "2")):
        proc = qm.run(*argv)
        assert proc.returncode != 0
        assert len(proc.stderr.strip().splitlines()) == 1, (argv, proc.stderr)
    qm.fails_with("AMQ7048", "strmqm", "NOSUCHQM")
    qm.fails_with("AMQ7048", "dspmq", "-m", "NOSUCHQM")


def test_garbage_lock_file_and_qmstatus(qm: Env) -> None:
    data = qm.root / "qmgrs" / "QMBAD"
    (data / "master").write_bytes(os.urandom(700))
    assert qm.run("strmqm", "QMBAD").returncode == 0  # the record is rewritten
    out = qm.run("dspmq", "-x", "-f", "-m", "QMBAD").stdout
    assert "STATUS(Running)" in out and "master(hostbad," in out
    assert qm.run("endmqm", "-i", "QMBAD").returncode == 0
    (data / "qmstatus.ini").write_text("not an ini file\n")
    qm.fails_with("qmstatus.ini", "strmqm", "QMBAD")
    out = qm.run("dspmq", "-m", "QMBAD")
    assert out.returncode == 0 and "QMNAME(QMBAD)" in out.stdout


@pytest.mark.parametrize("value", ["abc", "0", "-5", "nan", "inf", "1e999"])
def test_bad_strmqm_timeout_names_the_variable(tmp_path: Path, value: str) -> None:
    e = Env(tmp_path / "root")
    e.env["MIQM_STRMQM_TIMEOUT"] = value
    proc = e.run("strmqm", "QMBAD")
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "MIQM_STRMQM_TIMEOUT" in lines[0], proc.stderr
    assert "positive number of seconds" in lines[0]


def test_nan_and_out_of_range_tuning_refused_by_setmqini_and_strmqm(qm: Env) -> None:
    ini = qm.root / "qmgrs" / "QMBAD" / "qm.ini"
    good = ini.read_text()
    for key, value in (("VerifyInterval", "nan"), ("StandbyPollInterval", "1e999"),
                       ("MonitorStall", "0")):
        line = qm.fails_with("AMQ7880", "setmqini", "-m", "QMBAD", "-s", "TuningParameters",
                             "-k", key, "-v", value)
        assert f"TuningParameters {key}={value}" in line and "greater than 0" in line, line
    line = qm.fails_with("AMQ7880", "setmqini", "-m", "QMBAD", "-s", "QueueManager",
                         "-k", "MaxUncommittedMsgs", "-v", "-1")
    assert "from 1 to 999999999" in line, line
    assert ini.read_text() == good  # nothing written
    ini.write_text(good.replace("StandbyPollInterval=", "StandbyPollInterval=nan#"))
    line = qm.fails_with("AMQ7880", "strmqm", "QMBAD")
    assert "StandbyPollInterval=nan" in line, line
    ini.write_text(good)


def test_empty_qm_ini_or_one_without_log_stanza_is_refused(tmp_path: Path) -> None:
    e = Env(tmp_path / "root")
    assert e.run("crtmqm", "-ll", "QMBAD").returncode == 0
    ini = e.root / "qmgrs" / "QMBAD" / "qm.ini"
    good = ini.read_text()
    before, log_and_rest = good.split("Log:\n")
    rest = "TuningParameters:" + log_and_rest.split("TuningParameters:")[1]
    try:
        ini.write_text("")
        line = e.fails_with("AMQ7880", "strmqm", "QMBAD")
        assert "empty or damaged" in line and "backup" in line, line
        ini.write_text(before + rest)
        assert "no Log stanza" in e.fails_with("AMQ7880", "strmqm", "QMBAD")
        ini.write_text(before + "Log:\n   LogType=LINEAR\n" + rest)
        assert "no Log stanza" in e.fails_with(  # setmqini -d would leave no Log stanza
            "AMQ7880", "setmqini", "-m", "QMBAD", "-s", "Log", "-k", "LogType", "-d")
        ini.write_text(good)
        assert e.run("strmqm", "QMBAD").returncode == 0
    finally:
        e.run("endmqm", "-i", "QMBAD")


@pytest.mark.parametrize("name", ["x" * 1000, "bad host,(x)", "a\nb", ""])
def test_bad_miqm_hostname_is_one_line(qm: Env, name: str) -> None:
    qm.env["MIQM_HOSTNAME"] = name
    for argv in (("strmqm", "QMBAD"), ("dspmq", "-x", "-f"), ("endmqm", "-i", "QMBAD")):
        proc = qm.run(*argv)
        assert proc.returncode != 0, argv
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "MIQM_HOSTNAME" in lines[0], (argv, proc.stderr)
    assert not list((qm.root / "qmgrs" / "QMBAD").glob("master"))  # no lock file written


@pytest.mark.parametrize("damage", ["garbage", "missing"])
def test_unreadable_run_record_leaves_the_instance_manageable(qm: Env, damage: str) -> None:
    assert qm.run("strmqm", "QMBAD").returncode == 0
    record = qm.root / "run" / "QMBAD.json"
    if damage == "garbage":
        record.write_text("garbage{{{\n")
    else:
        record.unlink()
    out = qm.run("dspmq", "-m", "QMBAD", "-x").stdout
    assert "STATUS(Running)" in out and "INSTANCE(hostbad) MODE(Active)" in out, out
    assert "elsewhere" not in out
    assert "AMQ1104" in qm.fails_with("AMQ1104", "strmqm", "QMBAD")
    assert "AMQ1109" in qm.fails_with("AMQ1109", "endmqm", "-x", "QMBAD")
    proc = qm.run("endmqm", "-i", "QMBAD")
    assert proc.returncode == 0, proc.stderr
    assert "STATUS(Ended" in qm.run("dspmq", "-m", "QMBAD").stdout


def test_runmqsc_huge_command_and_binary_input(tmp_path: Path) -> None:
    e = Env(tmp_path / "root")
    huge = "DEFINE QLOCAL(Q1) DESCR('" + "x" * 5_000_000 + "')\n"
    proc = subprocess.run(["runmqsc", "-v", "QMBAD"], env=e.env, capture_output=True,
                          input=huge.encode() + b"DEF QL(\xc8)\n\xff\n", timeout=60)
    out = proc.stdout.decode()
    assert proc.returncode == 10 and "Traceback" not in out + proc.stderr.decode()
    assert len(out) < 2000, len(out)
    assert "at most 32762 characters" in out
    # (6d24558: a byte that is not UTF-8 is named, with how to convert the script)
    assert "(the byte \\xff is not UTF-8" in out and "\\udc" not in out


def test_errors_directory_replaced_by_a_file_refuses_strmqm(qm: Env) -> None:
    errors = qm.root / "qmgrs" / "QMBAD" / "errors"
    for f in errors.iterdir():
        f.unlink()
    errors.rmdir()
    errors.write_text("a file where the error log's directory was\n")
    line = qm.fails_with("AMQ6062", "strmqm", "QMBAD")
    assert line.startswith("AMQ6062: ") and "errors/AMQERR01.LOG cannot be written" in line
    assert "is a file, not a directory" in line and "start the queue manager again" in line
    assert qm.run("strmqm", "QMBAD").returncode == 71
    assert errors.is_file()  # left for the administrator to move aside
    assert "STATUS(Ended" in qm.run("dspmq", "-m", "QMBAD").stdout  # nothing started


def test_a_missing_data_directory_is_status_not_available(qm: Env) -> None:
    data = qm.root / "qmgrs" / "QMBAD"
    data.rename(qm.root / "moved")
    out = qm.run("dspmq", "-m", "QMBAD", "-x", "-o", "all").stdout
    assert "STATUS(Status not available)" in out and "Ended" not in out, out
    assert "restore it" in qm.fails_with("AMQ7880", "strmqm", "QMBAD")
    (qm.root / "moved").rename(data)
    assert "STATUS(Ended normally)" in qm.run("dspmq", "-m", "QMBAD").stdout


def test_a_missing_log_directory_is_one_line_naming_it(tmp_path: Path) -> None:
    """A log directory of its own (crtmqm -ld) that is gone (an unmounted filesystem, a
    restore that left it out): one AMQ7017 line naming it, each time. strmqm had said
    'AMQ6119: the shared filesystem failed ... open .../active', or, when its look at the
    locks came before the refused controller had ended, AMQ1104 'an instance running on
    this host' naming that controller."""
    import shutil

    e = Env(tmp_path / "root")
    logs = tmp_path / "logs"
    assert e.run("crtmqm", "-ld", str(logs), "QMNOLOG").returncode == 0
    shutil.rmtree(logs / "QMNOLOG")
    try:
        for _ in range(3):
            line = e.fails_with("AMQ7017", "strmqm", "QMNOLOG")
            assert str(logs / "QMNOLOG") in line and "missing" in line, line
    finally:
        e.run("endmqm", "-i", "QMNOLOG")
    assert not (logs / "QMNOLOG").exists()  # nothing made up in its place


def test_dltmqm_refuses_while_the_log_directory_is_held(tmp_path: Path) -> None:
    """An active whose data directory was replaced under it holds 'active' in its log
    directory only: dltmqm saw no lock in the (new) data directory and deleted the log
    tree under the running instance. Now: AMQ8041, nothing deleted."""
    from lockfs.posix import PosixVolume
    from lockfs.volume import LockMode

    e = Env(tmp_path / "root")
    logs = tmp_path / "logs"
    assert e.run("crtmqm", "-ld", str(logs), "QMHELD").returncode == 0
    vol = PosixVolume(str(logs / "QMHELD"))
    f = vol.open("active", create=True)
    try:
        assert f.try_lock(LockMode.SHARED)
        line = e.fails_with("AMQ8041", "dltmqm", "QMHELD")
        assert "log directory" in line, line
        assert (logs / "QMHELD" / "amqhlctl.lfh").exists()
        assert (tmp_path / "root" / "qmgrs" / "QMHELD" / "qm.ini").exists()
    finally:
        f.close()
        vol.close()
    assert e.run("dltmqm", "QMHELD").returncode == 0  # released: deleted as before
    assert not (logs / "QMHELD").exists()
