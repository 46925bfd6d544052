"""crtmqm, dltmqm, dspmqinf/addmqinf, runmqsc, the samples and amqldmpa, run in-process
through their console-script entry points (one line + exit code on every failure).

The store is replaced by a stub where a command would create one, so these tests pin the
command-line behaviour; tests/integration/test_single_instance.py runs the real thing."""

from __future__ import annotations

import io
import os
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import pytest

from lockfs.posix import PosixVolume
from lockfs.volume import LockMode
from miqm.cli import amqldmpa, crtmqm, dltmqm, media, mqinf, runmqsc, samples
from miqm.net.server import Listener
from miqm.net.service import QueueService
from tests.unit.test_net import FakeStore


@pytest.fixture()
def root(tmp_path, monkeypatch) -> str:
    r = str(tmp_path / "root")
    monkeypatch.setenv("MIQM_DATA_ROOT", r)
    monkeypatch.delenv("MIQM_CONNECTION", raising=False)
    stub = types.ModuleType("miqm.store.qmstore")

    class QueueManagerStore:
        created: ClassVar[list[str]] = []

        @staticmethod
        def create(data: Any, log: Any, qmgr: str, settings: Any) -> None:
            log.write_atomic("amqhlctl.lfh", b"stub")
            QueueManagerStore.created.append(qmgr)

    stub.QueueManagerStore = QueueManagerStore  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "miqm.store.qmstore", stub)
    return r


def run(main: Callable[[], None], argv: list[str], capsys, monkeypatch,
        stdin: str = "") -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", [argv[0], *argv[1:]])
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    with pytest.raises(SystemExit) as info:
        main()
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return int(info.value.code or 0), out, err


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_crtmqm_creates_registers_and_refuses_a_second_time(root, capsys, monkeypatch) -> None:
    rc, out, err = run(crtmqm.main, ["crtmqm", "-lf", "64", "-ll", "QM1"], capsys, monkeypatch)
    assert rc == 0, err
    assert out.splitlines()[0] == "miqm queue manager created."
    assert f"Directory '{root}/qmgrs/QM1' created." in out
    assert out.splitlines()[-1] == "Setup completed."
    ini = open(os.path.join(root, "qmgrs", "QM1", "qm.ini")).read()
    assert "LogFilePages=64" in ini and "LogType=LINEAR" in ini
    assert f"LogPath={root}/log/QM1" in ini
    assert os.path.isdir(os.path.join(root, "qmgrs", "QM1", "queues"))
    assert os.path.exists(os.path.join(root, "log", "QM1", "amqhlctl.lfh"))
    assert "Name=QM1" in open(os.path.join(root, "mqs.ini")).read()
    rc, out, err = run(crtmqm.main, ["crtmqm", "QM1"], capsys, monkeypatch)
    assert rc == 8 and "AMQ8110" in one_line(err)


def test_crtmqm_with_md_ld_and_a_dotted_name(root, tmp_path, capsys, monkeypatch) -> None:
    md, ld = str(tmp_path / "shared" / "data"), str(tmp_path / "shared" / "log")
    rc, _out, err = run(crtmqm.main, ["crtmqm", "-md", md, "-ld", ld, "-lf", "64", "A.B"],
                       capsys, monkeypatch)
    assert rc == 0, err
    assert os.path.exists(os.path.join(md, "A!B", "qm.ini"))
    assert os.path.exists(os.path.join(ld, "A!B", "amqhlctl.lfh"))


@pytest.mark.parametrize("argv, code, needle", [
    (["-lf", "10", "QM1"], 2, "LogFilePages=10"),
    (["-lf", "70000", "QM1"], 2, "LogFilePages"),
    (["-lp", "1", "QM1"], 2, "LogPrimaryFiles=1"),
    (["-ls", "600", "QM1"], 2, "LogSecondaryFiles=600"),
    (["-lp", "500", "-ls", "100", "QM1"], 2, "511"),
    (["-lc", "-ll", "QM1"], 2, "-lc and -ll"),
    (["-lf", "abc", "QM1"], 2, "-lf"),
    (["-zz", "QM1"], 2, "No such option"),
    (["bad name!"], 72, "AMQ7048"),
    ([], 2, "QMgr"),
])
def test_crtmqm_bad_input_is_one_line(root, capsys, monkeypatch, argv, code, needle) -> None:
    rc, _out, err = run(crtmqm.main, ["crtmqm", *argv], capsys, monkeypatch)
    assert rc == code
    assert needle in one_line(err)
    assert not os.path.exists(os.path.join(root, "qmgrs", "QM1"))


@pytest.mark.parametrize("flag, number", [("-md", "AMQ6062"), ("-ld", "AMQ7017")])
def test_crtmqm_on_a_location_that_cannot_be_made_names_it_with_its_number(
        root, capsys, monkeypatch, flag, number) -> None:
    rc, _out, err = run(crtmqm.main, ["crtmqm", flag, "/proc/nonexistent", "-lf", "64", "QM1"],
                        capsys, monkeypatch)
    line = one_line(err)
    assert rc == 71 and line.startswith(f"{number}: ") and "/proc/nonexistent" in line, line
    assert flag in line
    assert not os.path.exists(os.path.join(root, "qmgrs", "QM1"))


def test_crtmqm_flag_out_of_range_is_a_usage_error_without_amq8101(
        root, capsys, monkeypatch) -> None:
    rc, _out, err = run(crtmqm.main, ["crtmqm", "-lf", "10", "QM1"], capsys, monkeypatch)
    line = one_line(err)
    assert rc == 2 and "LogFilePages=10" in line and "AMQ8101" not in line, line


def test_crtmqm_an_ic_script_value_out_of_range_is_not_blamed_on_the_log_flags(
        root, tmp_path, capsys, monkeypatch) -> None:
    """Only the log sizes are -lf/-lp/-ls's: an -ic script's MAXDEPTH(-5) is also 'out of
    range', and was told to 'Correct -lf, -lp or -ls' (exit 2)."""
    script = tmp_path / "s.mqsc"
    script.write_text("DEFINE QLOCAL(A) MAXDEPTH(-5)\n")
    rc, _out, err = run(crtmqm.main, ["crtmqm", "-ic", str(script), "QM1"], capsys,
                        monkeypatch)
    line = one_line(err)
    assert rc != 0 and "MAXDEPTH(-5)" in line and "-lf" not in line, line


def test_crtmqm_cleans_up_after_a_store_failure(root, capsys, monkeypatch) -> None:
    def boom(*a: Any) -> None:
        from miqm.errors import LogWriteError

        raise LogWriteError("disk full writing S0000000.LOG")

    monkeypatch.setattr(sys.modules["miqm.store.qmstore"].QueueManagerStore, "create", boom)
    rc, _out, err = run(crtmqm.main, ["crtmqm", "-lf", "64", "QM1"], capsys, monkeypatch)
    assert rc != 0 and "disk full" in one_line(err)
    assert not os.path.exists(os.path.join(root, "qmgrs", "QM1"))
    assert not os.path.exists(os.path.join(root, "log", "QM1"))
    rc, _, err = run(crtmqm.main, ["crtmqm", "-lf", "64", "QM1"], capsys, monkeypatch)
    assert "disk full" in err and "AMQ8110" not in err  # nothing half-made blocks a retry


def test_dspmqinf_addmqinf_on_a_second_host(root, tmp_path, capsys, monkeypatch) -> None:
    md = str(tmp_path / "shared")
    run(crtmqm.main, ["crtmqm", "-md", md, "-lf", "64", "QM1"], capsys, monkeypatch)
    rc, out, err = run(mqinf.dspmqinf_main, ["dspmqinf", "-o", "command", "QM1"], capsys,
                       monkeypatch)
    assert rc == 0
    line = out.strip()
    assert line == (f"addmqinf -s QueueManager -v Name=QM1 -v Directory=QM1 -v Prefix={root} "
                    f"-v DataPath={md}/QM1")
    rc, out, _ = run(mqinf.dspmqinf_main, ["dspmqinf", "QM1"], capsys, monkeypatch)
    assert out.splitlines()[0] == "QueueManager:" and f"   DataPath={md}/QM1" in out
    monkeypatch.setenv("MIQM_DATA_ROOT", str(tmp_path / "hostb"))
    rc, out, err = run(mqinf.addmqinf_main, line.split(), capsys, monkeypatch)
    assert rc == 0 and "miqm configuration information added." in out
    rc, out, err = run(mqinf.addmqinf_main, line.split(), capsys, monkeypatch)
    assert rc != 0 and "AMQ8110" in one_line(err)
    rc, out, err = run(mqinf.addmqinf_main, ["addmqinf", "-v", "Name=QM2", "-v",
                                             f"DataPath={tmp_path}"], capsys, monkeypatch)
    assert rc != 0 and "no qm.ini" in one_line(err)
    rc, out, err = run(mqinf.addmqinf_main, ["addmqinf", "-v", "Name=QM2"], capsys, monkeypatch)
    assert rc == 2 and "DataPath" in one_line(err)
    rc, out, err = run(mqinf.addmqinf_main, ["addmqinf", "-v", "Colour=red"], capsys,
                       monkeypatch)
    assert rc == 2 and "Colour" in one_line(err)
    rc, out, err = run(mqinf.dspmqinf_main, ["dspmqinf", "NOSUCH"], capsys, monkeypatch)
    assert rc != 0 and "AMQ7048" in one_line(err)


def test_addmqinf_refuses_another_queue_managers_data_or_a_missing_prefix(
        root, tmp_path, capsys, monkeypatch) -> None:
    md = str(tmp_path / "shared")
    run(crtmqm.main, ["crtmqm", "-md", md, "-lf", "64", "QM1"], capsys, monkeypatch)
    monkeypatch.setenv("MIQM_DATA_ROOT", str(tmp_path / "hostb"))
    rc, _, err = run(mqinf.addmqinf_main, ["addmqinf", "-v", "Name=QM7", "-v",
                                           "Directory=QM7", "-v", f"Prefix={root}", "-v",
                                           f"DataPath={md}/QM1"], capsys, monkeypatch)
    line = one_line(err)
    assert rc != 0 and "AMQ6062" in line and "'QM1', not 'QM7'" in line, line
    rc, _, err = run(mqinf.addmqinf_main, ["addmqinf", "-v", "Name=QM1", "-v",
                                           f"Prefix={tmp_path}/nonexistent", "-v",
                                           f"DataPath={md}/QM1"], capsys, monkeypatch)
    line = one_line(err)
    assert rc == 2 and "Prefix" in line and "nonexistent" in line, line
    assert not os.path.exists(tmp_path / "hostb" / "mqs.ini")  # nothing registered
    rc, _, err = run(mqinf.addmqinf_main, ["addmqinf", "-v", "Name=QM1", "-v",
                                           f"DataPath={md}/QM1"], capsys, monkeypatch)
    assert rc == 0, err


def test_dltmqm_refuses_while_running_then_deletes(root, capsys, monkeypatch) -> None:
    run(crtmqm.main, ["crtmqm", "-lf", "64", "QM1"], capsys, monkeypatch)
    data = PosixVolume(os.path.join(root, "qmgrs", "QM1"))
    master = data.open("master", create=True)
    assert master.try_lock(LockMode.EXCLUSIVE)
    rc, out, err = run(dltmqm.main, ["dltmqm", "QM1"], capsys, monkeypatch)
    assert rc == 5 and "running" in one_line(err) and "master" in err
    master.close()
    # a corrupt qm.ini does not stop deletion: the LogPath line is still found
    with open(os.path.join(root, "qmgrs", "QM1", "qm.ini"), "a") as f:
        f.write("this is not ini\n")
    rc, out, err = run(dltmqm.main, ["dltmqm", "QM1"], capsys, monkeypatch)
    assert rc == 0, err
    assert out.strip() == "miqm queue manager 'QM1' deleted."
    assert not os.path.exists(os.path.join(root, "qmgrs", "QM1"))
    assert not os.path.exists(os.path.join(root, "log", "QM1"))
    rc, _, err = run(dltmqm.main, ["dltmqm", "QM1"], capsys, monkeypatch)
    assert rc != 0 and "AMQ7048" in one_line(err)


def test_commands_against_a_stopped_queue_manager(root, capsys, monkeypatch) -> None:
    run(crtmqm.main, ["crtmqm", "-lf", "64", "QM1"], capsys, monkeypatch)
    rc, _, err = run(runmqsc.main, ["runmqsc", "QM1"], capsys, monkeypatch,
                       stdin="DIS QL(*)\n")
    assert rc == 20 and "AMQ8146" in one_line(err) and "QM1" in err
    rc, _, err = run(samples.amqsput_main, ["amqsput", "QM1", "Q1"], capsys, monkeypatch,
                       stdin="x\n")
    assert rc == 1 and "reason code 2059" in one_line(err)
    rc, _, err = run(samples.amqsget_main, ["amqsget", "QM1", "Q1"], capsys, monkeypatch)
    assert rc == 1 and "2059" in one_line(err)
    rc, _, err = run(amqldmpa.main, ["amqldmpa", "-m", "QM1"], capsys, monkeypatch)
    assert rc != 0 and "AMQ8146" in one_line(err)
    rc, _, err = run(runmqsc.main, ["runmqsc", "NOSUCH"], capsys, monkeypatch)
    assert rc == 20 and "AMQ7048" in one_line(err)
    # circular logging: media recovery refused before any connection is tried
    rc, _out, err = run(media.rcdmqimg_main, ["rcdmqimg", "-m", "QM1", "-t", "queue", "Q1"],
                       capsys, monkeypatch)
    assert rc != 0 and "circular" in one_line(err)
    rc, _out, err = run(media.rcrmqobj_main, ["rcrmqobj", "-m", "QM1", "-t", "channel", "Q1"],
                       capsys, monkeypatch)
    assert rc == 2 and "-t channel" in one_line(err)


def test_runmqsc_verify_mode_reports_syntax_like_mq(root, capsys, monkeypatch) -> None:
    script = "* comment\nDEFINE QLOCAL(Q1) +\n  MAXDEPTH(5)\nDEFIN QL(Q2)\nEND\nDIS QL(*)\n"
    rc, out, _err = run(runmqsc.main, ["runmqsc", "-v", "QM1"], capsys, monkeypatch,
                       stdin=script)
    assert rc == 10
    lines = out.splitlines()
    assert lines[0] == "Starting MQSC for queue manager QM1."
    assert "     1 : DEFINE QLOCAL(Q1) MAXDEPTH(5)" in lines
    assert "     2 : DEFIN QL(Q2)" in lines
    assert "AMQ8405I: Syntax error detected at or near end of command segment below:-" in lines
    assert lines[-3:] == ["2 MQSC commands read.", "1 command has a syntax error.",
                          "All valid MQSC commands were processed."]
    assert "DIS QL" not in out  # END stopped reading


def serve(store: Any, monkeypatch: Any) -> Iterator[Any]:
    """``store`` served as QM1 by a listener the commands reach through MIQM_CONNECTION
    (a fixture's body: yields the store, stops the listener after)."""
    listener = Listener(QueueService(store, "QM1").handle)
    host, port = listener.start()
    monkeypatch.setenv("MIQM_CONNECTION", f"{host}({port})")
    yield store
    listener.stop()


@pytest.fixture()
def served(root, monkeypatch):
    yield from serve(FakeStore(), monkeypatch)


def test_runmqsc_and_samples_against_a_listener(served, capsys, monkeypatch) -> None:
    script = ("DEFINE QLOCAL(Q1) MAXDEPTH(100)\nDEFINE QLOCAL(Q1)\nDISPLAY QLOCAL(Q1) CURDEPTH\n"
              "ALTER QMGR MAXUMSGS(50)\nPING QMGR\n")
    rc, out, err = run(runmqsc.main, ["runmqsc", "QM1"], capsys, monkeypatch, stdin=script)
    assert rc == 10, err  # the second DEFINE fails (object exists)
    assert "AMQ8006I: miqm queue created." in out
    assert "AMQ8150E: miqm object already exists." in out
    assert "   CURDEPTH(0)" in out and "AMQ8005I" in out and "AMQ8415I" in out
    assert out.splitlines()[-1] == "One valid MQSC command could not be processed."
    assert served.qmgr["MAXUMSGS"] == 50

    rc, out, err = run(samples.amqsput_main, ["amqsput", "QM1", "Q1", "--syncpoint", "2"],
                       capsys, monkeypatch, stdin="one\ntwo\nthree\n\nnot put\n")
    assert rc == 0, err
    assert out.splitlines() == ["Sample AMQSPUT0 start", "target queue is Q1",
                                "Sample AMQSPUT0 end"]
    rc, out, err = run(samples.amqsput_main, ["amqsput", "QM1", "Q1", "--non-persistent"],
                       capsys, monkeypatch, stdin="four\n")
    assert [m.persistent for m in served.msgs["Q1"]] == [True, True, True, False]
    rc, out, err = run(samples.amqsget_main, ["amqsget", "QM1", "Q1", "--wait", "0"],
                       capsys, monkeypatch)
    assert rc == 0, err
    assert out == "one\ntwo\nthree\nfour\n"
    rc, out, err = run(samples.amqsput_main, ["amqsput", "QM1", "NOPE"], capsys, monkeypatch,
                       stdin="x\n")
    assert rc == 1 and "MQOPEN ended with reason code 2085" in one_line(err)
    rc, out, err = run(amqldmpa.main, ["amqldmpa", "-m", "QM1", "-c", "H"], capsys, monkeypatch)
    assert rc == 0 and "logactive:\t3" in out and "filenum\t[0,1,2]" in out


def test_amqldmpa_layout_follows_the_logger_seed() -> None:
    dump = {"logactive": 3, "loginactive": 47, "FileCount": 37, "filenum": list(range(20)),
            "logBufSz": 512, "WriteSizeShort": 16941, "WriteSizeLong": 78059,
            "WriteSizeMax": 2072576, "WriteTimeShort": 611, "WriteTimeLong": 2722,
            "WriteTimeShortMax": 200000, "WriteTimeLongMax": 150000, "WriteTimeMax": 2757339,
            "WriteTimeMaxAt": "2015-09-16 11:23:23.122",
            "WriteTimeMaxFiles": [2757339, 57664, 77320, 249737, 314304, 2713306, 341761,
                                  541377]}
    lines = amqldmpa.format_dump("QM1", dump)
    assert lines[2:5] == ["logactive:\t3", "loginactive:\t47", "FileCount:\t37"]
    assert lines[5] == "filenum\t[0,1,2,3,4,5,6,7,"
    assert lines[7] == "\t16,17,18,19]"
    assert "WriteTimeMax :\t2757339 at 2015-09-16 11:23:23.122" in lines
    assert "WriteTimeMax[7]:\t541377" in lines
