"""rcdmqimg and rcrmqobj given a queue that does not exist, a name no queue can have, or
a generic name that matches nothing, against a real linear-logging queue manager: one
line with MQ's AMQ8147 (exit 10) or a usage line (exit 2), as rcrmqobj already said of a
queue that does not exist."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_bad_input import Env

pytestmark = pytest.mark.integration


@pytest.fixture
def linear(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path / "root")
    e.env["MIQM_LISTENER_PORT"] = "0"
    assert e.run("crtmqm", "-ll", "-lf", "64", "QMLIN").returncode == 0
    try:
        assert e.run("strmqm", "QMLIN").returncode == 0
        assert e.run("runmqsc", "QMLIN", stdin="DEFINE QLOCAL(L1)\n").returncode == 0
        yield e
    finally:
        e.run("endmqm", "-i", "QMLIN")


@pytest.mark.parametrize("op", ["rcdmqimg", "rcrmqobj"])
def test_media_commands_on_names_that_reach_no_queue(linear: Env, op: str) -> None:
    for name in ("NOPE", "NOPE*") if op == "rcdmqimg" else ("NOPE",):
        proc = linear.run(op, "-m", "QMLIN", "-t", "queue", name)
        line = linear.fails_with("AMQ8147", op, "-m", "QMLIN", "-t", "queue", name)
        assert proc.returncode == 10 and f"object {name} not found" in line, line
    proc = linear.run(op, "-m", "QMLIN", "-t", "queue", "bad name!")
    assert proc.returncode == 2 and "not a valid queue name" in proc.stderr, proc.stderr
    if op == "rcrmqobj":  # no image of L1 yet: said as it was (AMQ7472), not AMQ8147
        line = linear.fails_with("AMQ7472", op, "-m", "QMLIN", "-t", "queue", "L*")
        assert "no media image of queue 'L1'" in line, line
        assert linear.run("rcdmqimg", "-m", "QMLIN", "-t", "queue", "L1").returncode == 0
    assert linear.run(op, "-m", "QMLIN", "-t", "queue", "L*").returncode == 0
