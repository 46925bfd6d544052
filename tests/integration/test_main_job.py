"""The README's main job and the benchmark commands, run as a user runs them."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

pytestmark = pytest.mark.integration


def test_demo_fails_over_and_keeps_every_message() -> None:
    """A producer and a consumer run through a kill -9 of the active instance: plain lines
    when piped, the failover as the application saw it, and nothing lost."""
    import re

    proc = subprocess.run(["miqm", "demo", "--seconds", "1.5"], capture_output=True,
                          text=True, timeout=240, stdin=subprocess.DEVNULL)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Traceback" not in out and "\r" not in out  # piped: plain lines, no live line
    assert re.search(r"kill -9 \d+ +\(the active instance, on hosta\)", out), out
    assert "the application runs again on hostb" in out, out
    m = re.search(r"Failover as the application saw it .*: producer ([\d.]+)s, consumer "
                  r"([\d.]+)s", out)
    assert m and 0 < float(m.group(1)) < 60 and 0 < float(m.group(2)) < 60, out
    assert re.search(r"new active's own record: master lock granted to serving in [\d.]+s", out)
    m = re.search(r"Sent (\d+) \(committed\), received (\d+) \((\d+) distinct\), lost "
                  r"(\d+), duplicates (\d+)", out)
    assert m, out
    sent, received, distinct, lost, dupes = map(int, m.groups())
    assert sent > 0 and lost == 0 and distinct == sent and received == sent + dupes, out
    assert "== PASS: nothing lost" in out
    # counts went on while it ran: more than one plain progress line, rising
    counts = [int(c) for c in re.findall(r"sent +(\d+) \(", out)]
    assert len(counts) >= 3 and counts == sorted(counts) and counts[-1] == sent, out


def _processes_under(path: str) -> list[int]:
    """Processes whose environment names ``path`` (the demo's instances and commands)."""
    import os

    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if path.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_demo_interrupted_says_so_and_leaves_nothing(tmp_path, how: str) -> None:
    """Ctrl-C (SIGINT to the terminal's process group) or SIGTERM to the demo (timeout,
    kill) while the application runs: one line, exit 128 + the signal, no traceback (the
    client threads printed two as the instances were ended under Ctrl-C; SIGTERM killed the
    demo and left both instances running and its directory), nothing left behind."""
    import os
    import signal
    import time

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp))
    proc = subprocess.Popen(["miqm", "demo", "--seconds", "60"], env=env, text=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:  # wait for the application to be running
            lines.append(line)
            if re.search(r"sent +[1-9]\d* \(", line):
                break
        else:
            raise AssertionError("".join(lines))
        time.sleep(1)
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        left = _processes_under(str(tmp))
        for pid in left:  # the test failing must not leave instances running either
            os.kill(pid, signal.SIGKILL)
    out = "".join(lines) + out
    signum, why = ((signal.SIGINT, "interrupted") if how == "ctrl-c"
                   else (signal.SIGTERM, "stopped by SIGTERM"))
    assert proc.returncode == 128 + signum, out + err
    assert "Traceback" not in out + err and "Exception in thread" not in out + err, out + err
    assert re.search(rf"== {why}: ending the instances and removing \S+", out), out
    assert left == [], "an instance was left running"
    assert os.listdir(tmp) == [], "the demo's directory was left behind"


def test_demo_refuses_bad_options_in_one_line() -> None:
    proc = subprocess.run(["miqm", "demo", "--seconds", "-1"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "--seconds" in proc.stderr


def test_bench_store_prints_contract_json() -> None:
    proc = subprocess.run(
        ["miqm", "bench", "store", "--json", "--seconds", "0.3", "--producers", "1,4"],
        capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["baseline"]["fdatasync_per_s"] > 0
    assert [r["producers"] for r in result["runs"]] == [1, 4]
    from miqm.store.logbuffer import native_available

    assert result["native_log"] is native_available()  # which store was measured
    for run in result["runs"]:
        assert run["commits_per_s"] > 0 and run["p99_commit_ms"] > 0
        assert run["bare_python_commits_per_s"] > 0 and run["log_alone_commits_per_s"] > 0
        assert "errors" not in run, run


def test_bench_rejects_bad_flags_in_one_line() -> None:
    proc = subprocess.run(["miqm", "bench", "failover", "--fault", "meteor"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "meteor" in proc.stderr


def test_bench_store_runs_on_the_cpus_it_is_given_and_refuses_others() -> None:
    """--cpus pins the benchmark (as taskset -c) and the JSON says where it ran; a CPU
    this process may not use, or a list that is not one, is one line and exit 2."""
    import os

    allowed = sorted(os.sched_getaffinity(0))
    one = allowed[-1]
    proc = subprocess.run(
        ["miqm", "bench", "store", "--json", "--seconds", "0.2", "--producers", "2",
         "--cpus", str(one)],
        capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["cpus"] == [one] and result["runs"][0]["commits_per_s"] > 0
    for bad in (str(max(allowed) + 1), "one"):
        proc = subprocess.run(["miqm", "bench", "store", "--cpus", bad],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2
        assert len(proc.stderr.strip().splitlines()) == 1 and bad in proc.stderr


def test_bench_store_gathers_force_waiters_where_it_is_told() -> None:
    """--group-commit-cpu sets the store's GroupCommitCPU and each row says where the
    threads waiting for forces went (none: nowhere); a bad value is one line, exit 2."""
    import os

    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("gathering needs two CPUs to choose from")
    for value, expect in ((str(allowed[-1]), allowed[-1]), ("none", -1)):
        proc = subprocess.run(
            ["miqm", "bench", "store", "--json", "--seconds", "0.3", "--producers", "8",
             "--group-commit-cpu", value],
            capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL,
        )
        assert proc.returncode == 0, proc.stderr
        row = json.loads(proc.stdout.strip().splitlines()[-1])["runs"][0]
        assert row["group_commit_cpu"] == expect and row["commits_per_s"] > 0
    proc = subprocess.run(["miqm", "bench", "store", "--group-commit-cpu", "sideways"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "sideways" in proc.stderr
