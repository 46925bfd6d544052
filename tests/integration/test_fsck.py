"""amqmfsck on real filesystems: a local directory, FUSE (bindfs) mounts, read-only and
foreign-owned directories. The NFSv4 lab runs are in test_fsck_lab.py."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fsck.report import SUCCESS
from tests import fsckutil as fu

pytestmark = pytest.mark.integration


def test_plain_passes_on_a_local_directory(tmp_path: Path) -> None:
    res = fu.run("--json", str(tmp_path))
    assert res.returncode == 0, res.stderr
    doc = fu.result(res.stdout)
    names = [t["name"] for t in doc["tests"]]
    for name in ("access", "exclusive lock", "shared locks", "byte ranges", "second process",
                 "close trap", "create, write, sync, rename, remove"):
        assert name in names
    assert "cannot be shared" in fu.test_of(doc, "mount options")["notes"][0]
    res = fu.run(str(tmp_path))
    assert res.returncode == 0 and res.stdout.strip().endswith(SUCCESS)
    assert list(tmp_path.iterdir()) == []  # plain mode leaves nothing behind


def test_two_processes_w_and_c_pass_on_a_local_directory(tmp_path: Path) -> None:
    first = fu.start("-w", "--hold", "0.5", "--json", "--wait", "60", str(tmp_path))
    fu.wait_state(tmp_path, "w", "holding", proc=first)
    code2, out2, err2 = fu.finish(fu.start("-w", "--json", "--wait", "60", str(tmp_path)))
    code1, out1, err1 = fu.finish(first)
    assert (code1, code2) == (0, 0), (err1, err2)
    second = fu.test_of(fu.result(out2), "waiting and releasing locks")
    assert second["details"]["role"] == "second"
    assert second["details"]["handoff"]["after"] == "release"
    assert fu.test_of(fu.result(out1), "waiting and releasing locks")["details"]["role"] == \
        "first"
    a = fu.start("-c", "--count", "60", "--json", str(tmp_path))
    code2, out2, err2 = fu.finish(fu.start("-c", "--count", "60", "--json", str(tmp_path)))
    code1, out1, err1 = fu.finish(a)
    assert (code1, code2) == (0, 0), (err1, err2)
    conc = fu.test_of(fu.result(out2), "concurrent writes")
    assert conc["details"]["records"] == 120
    lat = fu.test_of(fu.result(out2), "latency profile")["details"]["latency"]
    assert lat["write+fdatasync"]["count"] == 60


def test_w_hands_off_when_the_holder_is_killed(tmp_path: Path) -> None:
    first = fu.start("-w", "--hold", "600", str(tmp_path))
    try:
        fu.wait_state(tmp_path, "w", "holding", proc=first)
        second = fu.start("-w", "--json", "--wait", "60", str(tmp_path))
        fu.wait_state(tmp_path, "w", "waiting", proc=second)
        time.sleep(0.3)
        first.kill()
        code, out, err = fu.finish(second)
    finally:
        first.kill()
        first.communicate()
    assert code == 0, err
    hand = fu.test_of(fu.result(out), "waiting and releasing locks")["details"]["handoff"]
    assert hand["after"] == "silent" and hand["seconds"] < 5.0
    print(f"\nlocal -w hand-off after kill -9: {hand['seconds']:.3f} s")


def test_integrity_phases_on_a_local_directory(tmp_path: Path) -> None:
    assert fu.run("-f", "-p", "20", str(tmp_path)).returncode == 0
    assert (tmp_path / "amqmfsck.dat").stat().st_size == 32 * 4096  # rounded up to 16s
    # no lap in the test: the second writer syncs a page at a time until it is stopped,
    # and at 2,048 pages (a CI run under load, 2026-11-26) it once wrote a whole lap over
    # the first writer's pages before the test got to stop it
    assert fu.run("-f", "-p", "32768", str(tmp_path)).returncode == 0
    a = fu.start("-a", "--json", str(tmp_path))
    fu.wait_state(tmp_path, "a", "writing", proc=a)
    b = fu.start("-a", "--json", str(tmp_path))
    fu.wait_state(tmp_path, "a", "waiting", proc=b)
    a.kill()
    a.communicate()
    fu.wait_state(tmp_path, "a", "writing", proc=b)
    time.sleep(0.1)
    b.terminate()
    code, out, err = fu.finish(b)
    assert code == 0, err
    wrote = fu.test_of(fu.result(out), "logger-style writes")["details"]
    assert wrote["generation"] == 2 and wrote["written"] > 0
    res = fu.run("-i", "--json", str(tmp_path))
    assert res.returncode == 0, res.stderr
    verdict = fu.test_of(fu.result(res.stdout), "integrity analysis")["details"]
    assert set(verdict["generations"]) == {"1", "2"}
    assert fu.run("-x", str(tmp_path)).returncode == 0
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, words", [
    (["-w", "-c"], "choose one of"),
    (["-p", "0"], "-p 0"),
    (["-m", "QM1"], "-m names"),
    (["--count", "x"], "--count"),
])
def test_bad_input_is_one_line(tmp_path: Path, args: list[str], words: str) -> None:
    res = fu.run(*args, str(tmp_path))
    assert res.returncode == 2
    assert words in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert "Traceback" not in res.stderr


def test_missing_directory_and_missing_test_file(tmp_path: Path) -> None:
    res = fu.run(str(tmp_path / "nope"))
    assert res.returncode == 2 and "does not exist" in res.stderr
    assert res.stderr.startswith("amqmfsck: ")
    # a file is not "missing": say what it is
    (tmp_path / "afile").write_text("x")
    res = fu.run(str(tmp_path / "afile"))
    assert res.returncode == 2 and "is a file, not a directory" in res.stderr, res.stderr
    res = fu.run("-i", str(tmp_path))
    assert res.returncode == 2 and "amqmfsck -f" in res.stderr
    # -a without a test file says so and leaves no writer's state file behind
    res = fu.run("-a", str(tmp_path))
    assert res.returncode == 2 and "amqmfsck -f" in res.stderr
    assert not list(tmp_path.glob("amqmfsck.a.*"))
    res = fu.run("nfs4://", )
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args", [["--wait", "nan", "-w"], ["--hold", "inf", "-w"],
                                  ["--handoff-limit", "-1", "-w"]])
def test_numbers_that_are_no_seconds_are_refused(tmp_path: Path, args: list[str]) -> None:
    # --wait nan waited for ever: every comparison with nan is false
    res = fu.run(*args, str(tmp_path), timeout=30)
    assert res.returncode == 2 and "give a number of seconds" in res.stderr


def test_analysis_of_a_file_no_writer_wrote_is_refused(tmp_path: Path) -> None:
    """-i right after -f found nothing wrong and said 'completed successfully' though
    nothing had been tested."""
    assert fu.run("-f", "-p", "16", str(tmp_path)).returncode == 0
    res = fu.run("-i", str(tmp_path))
    assert res.returncode == 2 and "no page written by amqmfsck -a" in res.stderr
    assert "completed successfully" not in res.stdout
    # -x leaves a directory that only looks like a test file alone, and says so
    (tmp_path / "amqmfsck.adir").mkdir()
    res = fu.run("-x", "-v", str(tmp_path))
    assert res.returncode == 0, res.stderr
    assert "is a directory, not a test file" in res.stdout
    assert [p.name for p in tmp_path.iterdir()] == ["amqmfsck.adir"]


def test_a_running_writer_is_not_analysed_formatted_or_deleted(tmp_path: Path) -> None:
    """-i while an -a writer was still writing reported 'hole' after 'hole' (pages of the
    lap it was overwriting) as failed writes landed after an outage; -f and -x pulled the
    file from under the writer and said the tests completed successfully."""
    assert fu.run("-f", "-p", "4096", str(tmp_path)).returncode == 0
    writer = fu.start("-a", str(tmp_path))
    try:
        fu.wait_state(tmp_path, "a", "writing", proc=writer)
        res = fu.run("-i", str(tmp_path))
        assert res.returncode == 2 and "is still running" in res.stderr, res.stderr
        assert "Stop every amqmfsck -a first".lower() in res.stderr.lower()
        res = fu.run("-f", "-p", "16", str(tmp_path))
        assert res.returncode == 2 and "is still running" in res.stderr, res.stderr
        res = fu.run("-x", "--wait", "1", str(tmp_path))
        assert res.returncode == 1, res.stderr
        assert "Likely cause: another amqmfsck at work" in res.stderr
        assert (tmp_path / "amqmfsck.dat").exists()
        writer.terminate()
        code, _, err = fu.finish(writer)
    finally:
        writer.kill()
    assert code == 0, err
    res = fu.run("-i", str(tmp_path))
    assert res.returncode == 0, res.stderr


def _interrupt(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    proc.send_signal(signal.SIGINT)
    return fu.finish(proc, timeout=60)


def test_ctrl_c_says_so_and_cleans_up(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT) ended amqmfsck with exit code 130 and not a word."""
    first = fu.start("-w", "--wait", "60", str(tmp_path), interruptible=True)
    fu.wait_state(tmp_path, "w", "holding", proc=first)
    code, out, err = _interrupt(first)
    assert code == 130
    assert err.strip() == (f"amqmfsck: interrupted (Ctrl-C): the tests on {tmp_path} did "
                           "not complete"), err
    assert not list(tmp_path.glob("amqmfsck.w.*.state"))
    # -a: Ctrl-C is how an administrator stops the surviving writer: it stops writing,
    # reports, and keeps what it synced for -i
    assert fu.run("-f", "-p", "4096", str(tmp_path)).returncode == 0
    writer = fu.start("-a", "--json", str(tmp_path), interruptible=True)
    fu.wait_state(tmp_path, "a", "writing", proc=writer)
    time.sleep(0.2)
    code, out, err = _interrupt(writer)
    assert code == 0, err
    wrote = fu.test_of(fu.result(out), "logger-style writes")
    assert wrote["details"]["written"] > 0
    assert any("stopped by SIGINT" in n for n in wrote["notes"])
    assert len(list(tmp_path.glob("amqmfsck.a.*.state"))) == 1
    assert fu.run("-i", str(tmp_path)).returncode == 0


def test_a_third_c_process_leaves_a_running_pair_alone(tmp_path: Path) -> None:
    """A third -c process arriving while two were writing joined them: it wrote records
    they did not expect, and the run failed with 'records lost' and 'locks not enforced
    across hosts' on a filesystem that enforces them."""
    a = fu.start("-c", "--count", "4000", "--json", str(tmp_path))
    b = fu.start("-c", "--count", "4000", "--json", str(tmp_path))
    try:
        fu.wait_state(tmp_path, "c", "running", proc=a)
        fu.wait_state(tmp_path, "c", "running", proc=b)
        res = fu.run("-c", "--count", "20", "--wait", "1.5", str(tmp_path))
        code_a, out_a, err_a = fu.finish(a)
        code_b, _, err_b = fu.finish(b)
    finally:
        a.kill()
        b.kill()
    assert (code_a, code_b) == (0, 0), (err_a, err_b)
    assert fu.test_of(fu.result(out_a), "concurrent writes")["details"]["records"] == 8000
    assert res.returncode == 1
    assert "no second process arrived" in res.stderr and "under way here" in res.stderr
    assert not list(tmp_path.glob("amqmfsck.c.*"))


def test_w_takes_the_verdict_only_from_the_process_that_waited(tmp_path: Path) -> None:
    """The holder of -w took any 'done' record that appeared after the waiter arrived as
    the waiter's verdict: a file left by another run (or garbage) decided the test."""
    first = fu.start("-w", "--hold", "1.5", "--wait", "60", str(tmp_path))
    fu.wait_state(tmp_path, "w", "holding", proc=first)
    second = fu.start("-w", "--wait", "60", str(tmp_path))
    try:
        fu.wait_state(tmp_path, "w", "waiting", proc=second)
        time.sleep(0.3)
        (tmp_path / "amqmfsck.w.intruder.state").write_text(json.dumps(
            {"token": "intruder", "hb": 1, "state": "done",
             "verdict": {"ok": False, "reason": "FAKE verdict", "cause": "x"}}))
        code2, _, err2 = fu.finish(second)
        code1, _, err1 = fu.finish(first)
    finally:
        first.kill()
        second.kill()
    assert (code1, code2) == (0, 0), (err1, err2)


# ------------------------------------------------------------------ root: real failures
def _without_root_powers() -> list[str]:
    """Run as root but without the capabilities that bypass file permissions, so root is
    an ordinary user that owns nothing here (running as ``nobody`` would also lose read
    access to a Python installed under /root)."""
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner"]


@pytest.mark.root
def test_permission_denied_for_another_users_directory(tmp_path: Path) -> None:
    d = tmp_path / "shared"
    d.mkdir(mode=0o755)
    os.chown(d, 65534, 65534)  # nobody's, not writable by others
    res = fu.run(str(d), prefix=_without_root_powers())
    assert res.returncode == 1, res.stderr
    lines = res.stderr.strip().splitlines()
    assert lines[0].startswith("amqmfsck: test 'access' failed")
    assert "permission denied" in lines[1] and "uid 65534" in lines[1]
    assert "this process runs as uid 0" in lines[1]
    assert lines[2].startswith("Likely cause: permissions")
    # owned by a uid no user here has: a uid/gid mismatch between hosts
    os.chown(d, 54321, 54321)
    res = fu.run("-v", str(d), prefix=_without_root_powers())
    assert res.returncode == 1
    assert "Likely cause: uid/gid mismatch" in res.stderr


@pytest.fixture
def ro_mount(tmp_path: Path) -> Iterator[Path]:
    src, mnt = tmp_path / "src", tmp_path / "ro"
    src.mkdir()
    mnt.mkdir()
    subprocess.run(["mount", "--bind", str(src), str(mnt)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(mnt)], check=True)
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


@pytest.mark.root
def test_directory_that_cannot_be_listed_fails_access(tmp_path: Path) -> None:
    """Files could be created in a directory mode 0333 (write, no read), so 'access'
    passed and the next test failed on a 'list ... Permission denied' named as a fault of
    create/write/sync/rename/remove: the queue manager lists its directories too."""
    d = tmp_path / "shared"
    d.mkdir(mode=0o333)
    d.chmod(0o333)
    os.chown(d, 65534, 65534)
    res = fu.run(str(d), prefix=_without_root_powers())
    assert res.returncode == 1, res.stderr
    lines = res.stderr.strip().splitlines()
    assert lines[0].startswith("amqmfsck: test 'access' failed"), lines
    assert "cannot list the files" in lines[1] and "mode 0333" in lines[1]
    assert lines[2].startswith("Likely cause: permissions")


@pytest.fixture
def full_fs(tmp_path: Path) -> Iterator[Path]:
    with fu.tmpfs(tmp_path / "full", "64k") as d:
        yield d


@pytest.mark.root
def test_full_filesystem_is_named_and_no_half_test_file_is_left(full_fs: Path) -> None:
    """A full filesystem was 'Likely cause: I/O error (check the mount and the server's
    logs)', and -f left half a test file that -a and -i then called damaged."""
    res = fu.run("-f", str(full_fs))
    assert res.returncode == 1
    assert "Likely cause: filesystem full" in res.stderr, res.stderr
    assert not list(full_fs.iterdir())
    (full_fs / "fill").write_bytes(b"\0" * 60 * 1024)
    res = fu.run(str(full_fs))
    assert res.returncode == 1 and "Likely cause: filesystem full" in res.stderr


@pytest.mark.root
def test_read_only_directory_fails_with_read_only(ro_mount: Path) -> None:
    res = fu.run(str(ro_mount))
    assert res.returncode == 1, res.stderr
    assert "read-only" in res.stderr and "Likely cause: read-only" in res.stderr


@pytest.fixture
def two_bindfs_mounts(tmp_path: Path) -> Iterator[tuple[Path, Path, Path]]:
    if shutil.which("bindfs") is None:
        pytest.skip("bindfs not installed (make install-system)")
    src, m1, m2 = tmp_path / "src", tmp_path / "m1", tmp_path / "m2"
    for d in (src, m1, m2):
        d.mkdir()
    mounted = []
    try:
        for m in (m1, m2):
            res = subprocess.run(["bindfs", str(src), str(m)], capture_output=True, text=True)
            if res.returncode != 0:
                pytest.skip(f"bindfs cannot mount here (no /dev/fuse?): {res.stderr.strip()}")
            mounted.append(m)
        yield src, m1, m2
    finally:
        for m in mounted:
            subprocess.run(["fusermount", "-u", str(m)], check=False)
            subprocess.run(["umount", "-l", str(m)], check=False, capture_output=True)


@pytest.mark.root
def test_w_fails_across_two_fuse_mounts_that_do_not_forward_locks(
        two_bindfs_mounts: tuple[Path, Path, Path]) -> None:
    src, m1, m2 = two_bindfs_mounts
    # plain mode passes: within one mount, the kernel keeps the locks
    assert fu.run(str(m1)).returncode == 0
    first = fu.start("-w", "--hold", "2", "--wait", "30", str(m1))
    fu.wait_state(src, "w", "holding", proc=first)
    code2, _, err2 = fu.finish(fu.start("-w", "--wait", "30", str(m2)))
    code1, _, err1 = fu.finish(first)
    assert code1 == 1 and code2 == 1, (err1, err2)
    for err in (err1, err2):
        assert "the filesystem does not enforce locks across hosts" in err
        assert "Likely cause: locks not enforced across hosts" in err


@pytest.mark.root
def test_c_fails_across_two_fuse_mounts_on_both_sides(
        two_bindfs_mounts: tuple[Path, Path, Path]) -> None:
    # the writers take turns (a pause after each unlock): without a lock between the
    # mounts their appends race within a few records (they once ran one after the other,
    # and an idle machine passed); both sides name the lost writes - the first to find
    # them left at once, and the other called it "stopped before it finished"
    src, m1, m2 = two_bindfs_mounts
    first = fu.start("-c", "--wait", "30", str(m1))
    code2, _, err2 = fu.finish(fu.start("-c", "--wait", "30", str(m2)))
    code1, _, err1 = fu.finish(first)
    assert code1 == 1 and code2 == 1, (err1, err2)
    for err in (err1, err2):
        assert "concurrent writes under locks were lost or interleaved" in err, err
        assert "checked after the other process stopped" not in err, err
        assert "Likely cause: locks not enforced across hosts" in err
    # the records are kept as the evidence (-x removes them); no state file is left
    left = sorted(p.name for p in src.iterdir())
    assert len(left) == 1 and left[0].endswith(".dat"), left


def test_format_shows_its_progress_on_a_terminal_and_not_when_piped(tmp_path: Path) -> None:
    """-f of a large test file wrote and synced it in silence: a GiB over a slow NFS link
    takes minutes. At a terminal it now says how far it is, step by step; piped, nothing."""
    import pty

    pages = 40000  # 156 MiB: three steps
    (tmp_path / "tty").mkdir()
    (tmp_path / "piped").mkdir()
    primary, secondary = pty.openpty()
    try:
        proc = subprocess.run(fu.argv("-f", "-p", str(pages), str(tmp_path / "tty")),
                              stdout=subprocess.PIPE, stderr=secondary, env=fu.env(),
                              timeout=240)
        os.close(secondary)
        secondary = -1
        chunks = []
        while True:
            try:
                data = os.read(primary, 65536)
            except OSError:  # EIO: the terminal's other end is closed and drained
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(primary)
        if secondary >= 0:
            os.close(secondary)
    shown = b"".join(chunks).decode()
    assert proc.returncode == 0, shown
    steps = [line for line in shown.splitlines() if "written and synced" in line]
    assert [s.split()[0] for s in steps] == ["64", "128", "156"], shown
    piped = fu.run("-f", "-p", str(pages), str(tmp_path / "piped"))
    assert piped.returncode == 0 and "written and synced" not in piped.stderr, piped.stderr
