"""amqmfsck's options as an administrator types them: an option the chosen test does not
use is refused in one line (it was silently ignored), and --json answers with a document
even when the command cannot run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import fsckutil as fu

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("args, words", [
    (["-p", "4096"], "-p gives the size of the test file that -f formats"),
    (["-a", "-p", "64"], "-p gives the size"),
    (["-c", "--hold", "1"], "--hold belongs to -w"),
    (["--handoff-limit", "5"], "--handoff-limit belongs to -w"),
    (["-w", "--count", "10"], "--count belongs to -c"),
])
def test_an_option_of_another_test_is_refused(tmp_path: Path, args: list[str],
                                              words: str) -> None:
    """'amqmfsck -p 4096 DIR' (the -f forgotten) ran the plain tests and said they
    completed successfully, with no test file formatted."""
    res = fu.run(*args, str(tmp_path), timeout=60)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert words in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "completed successfully" not in res.stdout
    assert list(tmp_path.iterdir()) == []


def test_json_answers_a_command_that_cannot_run(tmp_path: Path) -> None:
    """--json printed nothing on stdout for a command that cannot run (exit 2): a program
    reading the document found none."""
    res = fu.run("--json", "-i", str(tmp_path / "nope"))
    assert res.returncode == 2
    doc = json.loads(res.stdout)
    assert doc["ok"] is False and doc["mode"] == "-i" and doc["exit_code"] == 2
    assert "does not exist" in doc["error"] and "does not exist" in res.stderr
    res = fu.run("--json", "-i", str(tmp_path))  # no test file
    doc = json.loads(res.stdout)
    assert res.returncode == 2 and "amqmfsck -f" in doc["error"]


@pytest.mark.parametrize("args", [["--bogus"], ["-f", "4096"]])
def test_json_answers_a_command_line_refused_before_it_runs(tmp_path: Path,
                                                            args: list[str]) -> None:
    """A flag the command does not know, or MQ's older '-f NumberOfPages': the line was
    on stderr and stdout had no document, as docs/fsck.md promises for exit 2."""
    res = fu.run("--json", *args, str(tmp_path))
    assert res.returncode == 2, res.stderr
    doc = json.loads(res.stdout)
    assert doc["ok"] is False and doc["exit_code"] == 2 and doc["tests"] == []
    assert doc["directory"] == str(tmp_path) and doc["error"] in res.stderr


def test_json_answers_an_unknown_queue_manager(tmp_path: Path) -> None:
    """-m naming no queue manager here ends with MQ's AMQ7048 (exit 72): --json printed
    nothing on stdout for it."""
    res = fu.run("--json", "--lease", "-m", "NOSUCHQM", "--wait", "1", str(tmp_path))
    assert res.returncode == 72 and "AMQ7048" in res.stderr, res.stderr
    doc = json.loads(res.stdout)
    assert doc["ok"] is False and "AMQ7048" in doc["error"] and doc["exit_code"] == 72
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("directory, words", [
    ("", "no Directory given"),
    ("bad\nname", "'bad\\nname' does not exist"),
    ("nfs4://[::1/x", "bad Directory"),  # urlsplit's ValueError: AMQ6184, exit 71
])
def test_odd_directories_are_one_line(tmp_path: Path, directory: str, words: str) -> None:
    res = fu.run(directory)
    assert res.returncode == 2, res.stderr
    assert words in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "AMQ6184" not in res.stderr


def test_a_failure_on_a_directory_with_a_line_break_is_three_lines(tmp_path: Path) -> None:
    d = tmp_path / "two\nlines"
    d.mkdir()
    res = fu.run("-c", "--wait", "0", str(d))
    assert res.returncode == 1
    assert len(res.stderr.strip().splitlines()) == 3, res.stderr
