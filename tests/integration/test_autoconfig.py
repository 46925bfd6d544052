"""Configuration without editing files by hand: ``setmqini`` and ``crtmqm -ii/-ic``
(AutoConfig applied at every start), through the real commands."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


class Env:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.env = dict(os.environ, MIQM_DATA_ROOT=str(root), MIQM_HOSTNAME="hostcfg")
        self.env.pop("MIQM_CONNECTION", None)

    def run(self, *argv: str, stdin: str | None = None, ok: bool = True
            ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(list(argv), env=self.env, input=stdin, capture_output=True,
                              text=True, timeout=120)
        assert "Traceback" not in proc.stdout + proc.stderr
        if ok:
            assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc

    def fails(self, *argv: str) -> str:
        proc = self.run(*argv, ok=False)
        assert proc.returncode != 0, proc.stdout
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1, proc.stderr
        return lines[0]

    def ini(self, qmgr: str) -> str:
        return (self.root / "qmgrs" / qmgr / "qm.ini").read_text()


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path / "root")
    try:
        yield e
    finally:
        for qm in ("QMAUTO", "QMSET"):
            e.run("endmqm", "-i", qm, ok=False)


def test_crtmqm_ii_ic_are_applied_at_every_start(env: Env, tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "10-tuning.ini").write_text("TuningParameters:\n   StandbyPollInterval=0.5\n")
    (conf / "app.mqsc").write_text("DEFINE QLOCAL(APP.IN) REPLACE MAXDEPTH(500)\n"
                                   "DEFINE QLOCAL(APP.ONCE)\n")
    out = env.run("crtmqm", "-ii", str(conf), "-ic", str(conf), "QMAUTO").stdout
    assert "Setup completed." in out
    ini = env.ini("QMAUTO")
    assert f"IniConfig={conf}" in ini and f"MQSCConfig={conf}" in ini
    env.run("strmqm", "QMAUTO")
    assert "StandbyPollInterval=0.5" in env.ini("QMAUTO")  # merged before validation
    show = env.run("runmqsc", "QMAUTO", stdin="DISPLAY QLOCAL(APP.IN) MAXDEPTH\n").stdout
    assert "MAXDEPTH(500)" in show
    env.run("endmqm", "-i", "QMAUTO")

    # a second start runs the scripts again: REPLACE applies the change, a plain DEFINE of
    # an existing queue fails and is reported in the error log; the start goes on
    (conf / "app.mqsc").write_text("DEFINE QLOCAL(APP.IN) REPLACE MAXDEPTH(700)\n"
                                   "DEFINE QLOCAL(APP.ONCE)\n")
    (conf / "20-more.ini").write_text("TuningParameters:\n   StandbyPollInterval=0.4\n")
    env.run("strmqm", "QMAUTO")
    assert "StandbyPollInterval=0.4" in env.ini("QMAUTO")
    show = env.run("runmqsc", "QMAUTO", stdin="DISPLAY QLOCAL(APP.IN) MAXDEPTH\n").stdout
    assert "MAXDEPTH(700)" in show
    log = (env.root / "qmgrs" / "QMAUTO" / "errors" / "AMQERR01.LOG").read_text()
    assert "2 MQSC commands" in log and "1 failed" in log and "APP.ONCE" in log
    env.run("endmqm", "-i", "QMAUTO")

    # the ini file made invalid: strmqm says which file and line, nothing starts
    (conf / "20-more.ini").write_text("TuningParameters\n")
    line = env.fails("strmqm", "QMAUTO")
    assert "20-more.ini line 1" in line


@pytest.mark.parametrize("argv,needle", [
    (["-ii", "/nonexistent/x.ini"], "does not exist"),
    (["-ic", "/nonexistent/x.mqsc"], "does not exist"),
])
def test_crtmqm_ii_ic_bad_input_creates_nothing(env: Env, argv: list[str],
                                                 needle: str) -> None:
    assert needle in env.fails("crtmqm", *argv, "QMAUTO")
    assert not (env.root / "qmgrs" / "QMAUTO").exists()


def test_crtmqm_ic_bad_mqsc_and_ii_bad_values_create_nothing(env: Env, tmp_path: Path
                                                              ) -> None:
    bad = tmp_path / "bad.mqsc"
    bad.write_text("DEFINE QLOCAL(X) MAXDEPTH(lots)\n")
    assert "not valid MQSC" in env.fails("crtmqm", "-ic", str(bad), "QMAUTO")
    ini = tmp_path / "bad.ini"
    ini.write_text("TuningParameters:\n   VerifyInterval=-1\n")
    assert "VerifyInterval" in env.fails("crtmqm", "-ii", str(ini), "QMAUTO")
    assert not (env.root / "qmgrs" / "QMAUTO").exists()


def test_setmqini_sets_and_deletes_and_refuses_an_invalid_result(env: Env) -> None:
    env.run("crtmqm", "QMSET")
    env.run("setmqini", "-m", "QMSET", "-s", "TuningParameters", "-k", "VerifyInterval",
            "-v", "3")
    env.run("setmqini", "-m", "QMSET", "-s", "Metrics", "-k", "Port", "-v", "0")
    assert "VerifyInterval=3" in env.ini("QMSET") and "Metrics:\n   Port=0" in env.ini("QMSET")
    env.run("setmqini", "-m", "QMSET", "-s", "Metrics", "-k", "Port", "-d")
    assert "Metrics" not in env.ini("QMSET")
    before = env.ini("QMSET")
    assert "FilesystemLease" in env.fails("setmqini", "-m", "QMSET", "-s", "TuningParameters",
                                          "-k", "MonitorStall", "-v", "100")
    assert "must be a number of seconds" in env.fails(
        "setmqini", "-m", "QMSET", "-s", "TuningParameters", "-k", "VerifyInterval", "-v",
        "soon")
    assert "exactly one" in env.fails("setmqini", "-m", "QMSET", "-s", "S", "-k", "K")
    assert "not valid" in env.fails("setmqini", "-m", "QMSET", "-s", "a b", "-k", "K",
                                    "-v", "1")
    assert "AMQ7048" in env.fails("setmqini", "-m", "NOSUCH", "-s", "S", "-k", "K", "-v", "1")
    assert env.ini("QMSET") == before
    env.run("strmqm", "QMSET")  # what setmqini wrote is what strmqm reads
    env.run("endmqm", "-i", "QMSET")
