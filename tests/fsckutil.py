"""Helpers for the amqmfsck tests: run it, start two at once, watch their state files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = str(Path(__file__).resolve().parent.parent)


def argv(*args: str) -> list[str]:
    """The command line of ``amqmfsck ARGS`` from this source tree."""
    return [sys.executable, "-m", "fsck", *args]


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, e.get("PYTHONPATH", "")) if p)
    return e


def run(*args: str, prefix: list[str] | None = None,
        timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """Run amqmfsck to the end."""
    return subprocess.run([*(prefix or []), *argv(*args)], capture_output=True, text=True,
                          timeout=timeout, env=env())


def start(*args: str, interruptible: bool = False) -> subprocess.Popen[str]:
    """Start amqmfsck in the background; ``interruptible``: with SIGINT's default action
    restored, as at a terminal (a shell's background job, such as a test run from a
    script, starts its children with SIGINT ignored)."""
    return subprocess.Popen(argv(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env(),
                            preexec_fn=_default_sigint if interruptible else None)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def finish(proc: subprocess.Popen[str], timeout: float = 240) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of a started amqmfsck."""
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def reap(*procs: subprocess.Popen[str] | None) -> None:
    """Resume (a test may have stopped them), kill and wait for whichever of ``procs``
    still run: none is left behind whatever a test met."""
    for p in procs:
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.kill()
            p.communicate()


def states(directory: Path, test: str) -> list[dict[str, Any]]:
    """The state records of the parties of ``test`` in ``directory``."""
    found = []
    for p in directory.glob(f"amqmfsck.{test}.*.state"):
        try:
            found.append(json.loads(p.read_bytes().decode().strip()))
        except (OSError, ValueError):
            continue
    return found


def wait_state(directory: Path, test: str, state: str, timeout: float = 60.0,
               proc: subprocess.Popen[str] | None = None) -> dict[str, Any]:
    """The first party record of ``test`` in ``state`` (``proc``'s own when given; fails
    after ``timeout`` or when ``proc`` ends)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for rec in states(directory, test):
            if rec.get("state") == state and (proc is None or rec.get("pid") == proc.pid):
                return rec
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"amqmfsck ended ({proc.returncode}) before {state}: "
                                 f"{proc.stderr.read() if proc.stderr else ''}")
        time.sleep(0.05)
    raise AssertionError(f"no {test} party reached {state} in {timeout}s: "
                         f"{states(directory, test)}")


def result(out: str) -> dict[str, Any]:
    """The --json document printed on stdout."""
    return json.loads(out)


def test_of(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in doc["tests"] if t["name"] == name)


@contextmanager
def tmpfs(directory: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (mount's notation: ``64k``, ``4m``) mounted on ``directory``
    (made if missing) for the block: a small or full filesystem of its own (root only)."""
    directory.mkdir(exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)],
                   check=True)
    try:
        yield directory
    finally:
        subprocess.run(["umount", str(directory)], check=False)
