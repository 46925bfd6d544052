"""Every failure a command can meet becomes one line on stderr and a non-zero exit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import sys
from miqm.cli.common import make_app, run_typer
from miqm.errors import ConfigError
from lockfs.errors import VolumeIOError
app = make_app("t")
@app.command()
def main(kind: str) -> None:
    if kind == "config":
        raise ConfigError("qm.ini is corrupt: restore it")
    if kind == "io":
        raise VolumeIOError("write /x: No space left on device")
    if kind == "bug":
        raise ZeroDivisionError("oops")
    print("fine")
run_typer(app, "t")
"""


def run(*args: str, tmp: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if tmp is not None:  # the internal-error report goes here, not into the real /tmp
        env["TMPDIR"] = str(tmp)
    return subprocess.run([sys.executable, "-c", SCRIPT, *args], capture_output=True, text=True,
                          env=env)


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [(["config"], 71, "AMQ7880: qm.ini is corrupt"), (["io"], 71, "No space left"),
     (["bug"], 71, "AMQ6184"), (["--bogus"], 2, "No such option"), ([], 2, "Missing argument")],
)
def test_one_line_no_traceback(args: list[str], code: int, needle: str,
                               tmp_path: Path) -> None:
    proc = run(*args, tmp=tmp_path)
    assert proc.returncode == code
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert needle in lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout
    reports = list(tmp_path.glob("miqm-fdc-*.txt"))
    if args == ["bug"]:  # the traceback is kept for the report, named in the line
        assert len(reports) == 1 and str(reports[0]) in lines[0]
        assert "ZeroDivisionError: oops" in reports[0].read_text()
    else:
        assert reports == []


def test_success_exits_zero() -> None:
    proc = run("ok")
    assert proc.returncode == 0 and proc.stdout.strip() == "fine"


def _console_scripts() -> list[tuple[str, str]]:
    import tomllib

    root = Path(__file__).resolve().parents[2]
    with open(root / "pyproject.toml", "rb") as f:
        return sorted(tomllib.load(f)["project"]["scripts"].items())


@pytest.mark.parametrize(("name", "target"), _console_scripts())
def test_every_command_takes_dash_question_and_names_its_environment(
        name: str, target: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    module, func = target.split(":")
    main = getattr(importlib.import_module(module), func)
    outputs = []
    for flag in ("-?", "--help"):
        monkeypatch.setattr(sys, "argv", [name, flag])
        with pytest.raises(SystemExit) as exit_:
            main()
        out, err = capsys.readouterr()
        assert exit_.value.code in (0, None), (flag, err)
        outputs.append(out)
    assert outputs[0] == outputs[1]
    for needle in ("MIQM_DATA_ROOT", "MIQM_HOSTNAME", "MIQM_CONNECTION", "/var/mqm", "-?"):
        assert needle in outputs[0], (name, needle)


@pytest.mark.parametrize("raw", ["abc", "0", "-5", "nan", "inf", "-inf", "1e999"])
def test_env_seconds_refuses_what_is_not_a_positive_finite_number(
        raw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from miqm.cli.common import env_seconds
    from miqm.errors import UsageError

    monkeypatch.setenv("MIQM_TEST_SECONDS", raw)
    with pytest.raises(UsageError, match="MIQM_TEST_SECONDS"):
        env_seconds("MIQM_TEST_SECONDS", 5.0)


def test_env_seconds_default_and_value(monkeypatch: pytest.MonkeyPatch) -> None:
    from miqm.cli.common import env_seconds

    monkeypatch.delenv("MIQM_TEST_SECONDS", raising=False)
    assert env_seconds("MIQM_TEST_SECONDS", 5.0) == 5.0
    monkeypatch.setenv("MIQM_TEST_SECONDS", " 2.5 ")
    assert env_seconds("MIQM_TEST_SECONDS", 5.0) == 2.5


@pytest.mark.parametrize(("argv", "prefix"), [
    (["bench", "store", "--bogus"], "miqm bench store: No such option: --bogus"),
    (["bench", "store", "--producers", "abc"], "miqm bench store: --producers 'abc'"),
    (["bench", "failover", "--fault", "nope"], "miqm bench failover: --fault 'nope'"),
])
def test_subcommand_errors_name_the_subcommand(argv: list[str], prefix: str) -> None:
    proc = subprocess.run(["miqm", *argv], capture_output=True, text=True, timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(prefix), lines[0]
    if "No such option" in lines[0]:
        assert lines[0].endswith("(try 'miqm bench store -h')")


def test_ctrl_c_in_a_command_is_one_line_and_exit_130(capsys, monkeypatch) -> None:
    """Typer turns a KeyboardInterrupt into a silent exit 130; a command (or subcommand)
    run by run_typer says in one line that it was interrupted. A command that handles
    Ctrl-C itself (the demo) keeps its own line and code."""
    import signal

    import typer

    from miqm.cli.common import Stopped, make_app, run_typer

    app = make_app("test app")

    @app.command("wait")
    def wait() -> None:
        raise KeyboardInterrupt

    @app.command("own")
    def own() -> None:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            typer.echo("== interrupted: cleaning up", err=True)
            raise typer.Exit(130) from None

    @app.command("term")
    def term() -> None:
        raise Stopped(signal.SIGTERM)  # what unwind_on_stop_signals makes of SIGTERM

    for sub, line, code in (
            ("wait", "sample: interrupted (Ctrl-C): the command did not complete", 130),
            ("own", "== interrupted: cleaning up", 130),
            ("term", "sample: stopped by SIGTERM: the command did not complete", 143)):
        monkeypatch.setattr(sys, "argv", ["sample", sub])
        with pytest.raises(SystemExit) as exit_:
            run_typer(app)
        assert exit_.value.code == code
        assert capsys.readouterr().err.strip().splitlines() == [line]
