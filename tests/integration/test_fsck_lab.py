"""amqmfsck on the NFSv4 lab (nfs-ganesha, lease 5 s): processes in the two namespaces
meet through nfs4:// URLs, as two hosts would; links are cut and processes killed or
stopped for real. Figures are printed (run with -s to see them)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fsck.report import SUCCESS
from tests import fsckutil as fu
from tests import lab

pytestmark = [pytest.mark.root, pytest.mark.integration]


def _dir(nfs_lab: lab.NfsLab, sub: str) -> tuple[str, Path]:
    d = nfs_lab.export_dir / sub
    d.mkdir(parents=True, exist_ok=True)
    return nfs_lab.url(sub), d


def _in(nfs_lab: lab.NfsLab, ns: str, *args: str,
        env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return nfs_lab.run_in(ns, [sys.executable, "-m", "fsck", *args], env=env)


def _finish(proc: subprocess.Popen[str], timeout: float = 120) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def test_plain_w_and_c_pass_between_the_two_hosts(nfs_lab: lab.NfsLab) -> None:
    url, d = _dir(nfs_lab, "fsck-pass")
    t0 = time.monotonic()
    code, out, err = _finish(_in(nfs_lab, "a", url))
    plain = time.monotonic() - t0
    assert code == 0 and out.strip() == SUCCESS, err
    # a missing directory, or a file, is a command that cannot run (exit 2), as for a
    # local path: it was a failed 'access' test blaming 'permissions'
    (d / "afile").write_text("x")
    for sub, words in (("fsck-pass/nope", "does not exist"),
                       ("fsck-pass/afile", "is a file, not a directory")):
        code, _, err = _finish(_in(nfs_lab, "a", nfs_lab.url(sub)))
        assert code == 2 and words in err and "permissions" not in err, err
    (d / "afile").unlink()
    t0 = time.monotonic()
    first = _in(nfs_lab, "a", "-w", "--hold", "1", "--json", "--wait", "60", url)
    fu.wait_state(d, "w", "holding", proc=first)
    second = _in(nfs_lab, "b", "-w", "--json", "--wait", "60", url)
    code2, out2, err2 = _finish(second)
    code1, _, err1 = _finish(first)
    wtime = time.monotonic() - t0
    assert (code1, code2) == (0, 0), (err1, err2)
    hand = fu.test_of(fu.result(out2), "waiting and releasing locks")["details"]["handoff"]
    assert hand["after"] == "release"
    t0 = time.monotonic()
    a = _in(nfs_lab, "a", "-c", "--count", "100", "--json", url)
    code2, out2, err2 = _finish(_in(nfs_lab, "b", "-c", "--count", "100", "--json", url))
    code1, _, err1 = _finish(a)
    ctime = time.monotonic() - t0
    assert (code1, code2) == (0, 0), (err1, err2)
    doc = fu.result(out2)
    assert fu.test_of(doc, "concurrent writes")["details"]["records"] == 200
    lat = fu.test_of(doc, "latency profile")["details"]["latency"]
    print(f"\nlab: plain {plain:.1f} s, -w {wtime:.1f} s (release hand-off "
          f"{hand['seconds'] * 1000:.0f} ms), -c {ctime:.1f} s (100 records each)")
    for k, v in lat.items():
        print(f"lab -c latency {k}: p50 {v['p50'] * 1000:.2f} ms p99 {v['p99'] * 1000:.2f} ms "
              f"max {v['max'] * 1000:.2f} ms (n={v['count']})")
    assert not list(d.glob("amqmfsck.*.state"))


def _holder_and_waiter(nfs_lab: lab.NfsLab, url: str, d: Path, *extra: str,
                       env: dict[str, str] | None = None
                       ) -> tuple[subprocess.Popen[str], subprocess.Popen[str]]:
    test = "lease" if "--lease" in extra else "w"
    first = _in(nfs_lab, "a", "-w" if test == "w" else "--lease", "--hold", "600",
                "--json", "--wait", "120", url)
    fu.wait_state(d, test, "holding", proc=first)
    second = _in(nfs_lab, "b", *(extra or ["-w"]), "--json", "--wait", "60", url, env=env)
    fu.wait_state(d, test, "waiting", proc=second)
    time.sleep(0.5)
    return first, second


def test_w_hand_off_after_kill_and_after_a_cut_link(nfs_lab: lab.NfsLab) -> None:
    url, d = _dir(nfs_lab, "fsck-kill")
    first, second = _holder_and_waiter(nfs_lab, url, d)
    try:
        first.kill()
        code, out, err = _finish(second)
    finally:
        first.kill()
        _finish(first)
    assert code == 0, err
    killed = fu.test_of(fu.result(out), "waiting and releasing locks")["details"]["handoff"]
    assert killed["after"] == "silent"
    # the server frees a dead client's lock when its lease ends, not before (the lease
    # runs from the holder's last renewal, up to a third of it before its last heartbeat)
    assert nfs_lab.lease * 0.6 <= killed["seconds"] <= nfs_lab.lease * 1.5 + 5
    url, d = _dir(nfs_lab, "fsck-cut")
    first, second = _holder_and_waiter(nfs_lab, url, d, "--lease")
    try:
        nfs_lab.cut("a")
        code, out, err = _finish(second)
    finally:
        nfs_lab.heal("a")
        first.kill()
        _finish(first)
    cut = fu.test_of(fu.result(out), "lease hand-off")
    assert cut["details"]["handoff"]["after"] == "silent"
    # default VerifyInterval + MonitorStall (30 s) is longer than the lab's 5 s lease:
    # an instance cut off would still be writing when the lock passed - the right failure
    assert code == 1 and cut["cause"] == "lease not honoured", err
    assert "sooner than VerifyInterval + MonitorStall" in err
    print(f"\nlab (lease {nfs_lab.lease} s): hand-off after kill -9 {killed['seconds']:.2f} s, "
          f"after a cut link {cut['details']['handoff']['seconds']:.2f} s")


def test_w_fails_when_the_lease_expires_under_a_stopped_holder(nfs_lab: lab.NfsLab) -> None:
    url, d = _dir(nfs_lab, "fsck-stop")
    first, second = _holder_and_waiter(nfs_lab, url, d)
    try:
        first.send_signal(signal.SIGSTOP)
        fu.wait_state(d, "w", "granted", timeout=nfs_lab.lease * 4 + 10, proc=second)
        first.send_signal(signal.SIGCONT)
        code1, _, err1 = _finish(first)
        code2, _, err2 = _finish(second)
    finally:
        first.send_signal(signal.SIGCONT)
        first.kill()
        second.kill()
    assert code1 == 1, err1
    assert "lease expired under a live holder" in err1
    assert "Likely cause: lease not honoured" in err1
    # the new holder saw the old one come back having lost it
    assert code2 == 1 and "lease expired under a live holder" in err2, err2


def test_integrity_after_the_writer_is_cut_off(nfs_lab: lab.NfsLab) -> None:
    url, d = _dir(nfs_lab, "fsck-integrity")
    # 16,384 pages: b must not write a whole lap and overwrite every page of generation 1
    # in the 1.5 s it writes below (seen: 3,800 pages/s on a fast machine's idle lab)
    code, _, err = _finish(_in(nfs_lab, "a", "-f", "-p", "16384", url))
    assert code == 0, err
    a = _in(nfs_lab, "a", "-a", "--json", url)
    b = None
    try:
        fu.wait_state(d, "a", "writing", proc=a)
        b = _in(nfs_lab, "b", "-a", "--json", url)
        fu.wait_state(d, "a", "waiting", proc=b)
        time.sleep(0.5)
        nfs_lab.cut("a")  # mid-write: the writer's next page never gets an answer
        fu.wait_state(d, "a", "writing", timeout=nfs_lab.lease * 4 + 10, proc=b)
        time.sleep(0.5)
        nfs_lab.heal("a")  # anything a's client still had in flight may land now
        time.sleep(1.0)  # short against a lap of the file (above)
        b.terminate()
        code_b, out_b, err_b = _finish(b)
    finally:
        nfs_lab.heal("a")
        a.kill()
        _finish(a)
        if b is not None:
            b.kill()
    assert code_b == 0, err_b
    took = fu.test_of(fu.result(out_b), "logger-style writes")["details"]
    assert took["generation"] == 2 and took["written"] > 0
    code, out, err = _finish(_in(nfs_lab, "b", "-i", "--json", url))
    verdict = fu.test_of(fu.result(out), "integrity analysis")["details"]
    # ganesha refuses the cut client's late writes (its state expired): no hole
    assert code == 0, (err, verdict)
    assert set(verdict["generations"]) == {"1", "2"}, (took, verdict["summary"])
    # every page the cut writer saw synced is in the file: generation 2 began after them
    cut_writer = [r for r in fu.states(d, "a") if r.get("gen") == 1]
    assert cut_writer and took["first_seq"] > cut_writer[0]["acked"] > 0
    print(f"\nlab -a/-i: {verdict['summary']}")
    code, _, err = _finish(_in(nfs_lab, "b", "-x", url))
    assert code == 0 and not list(d.iterdir()), err


def test_lease_against_a_queue_managers_timings(nfs_lab: lab.NfsLab, tmp_path: Path) -> None:
    root = tmp_path / "mqroot"
    root.mkdir()
    env = {"MIQM_DATA_ROOT": str(root)}
    crtmqm = str(Path(sys.executable).with_name("crtmqm"))
    subprocess.run([crtmqm, "QM1"], check=True, capture_output=True,
                   env={**fu.env(), **env})
    ini = root / "qmgrs" / "QM1" / "qm.ini"
    ini.write_text(ini.read_text().replace("VerifyInterval=10", "VerifyInterval=1")
                   .replace("MonitorStall=20", "MonitorStall=1.5"))
    url, d = _dir(nfs_lab, "fsck-lease")
    first, second = _holder_and_waiter(nfs_lab, url, d, "--lease", "-m", "QM1", env=env)
    try:
        nfs_lab.cut("a")
        code, out, err = _finish(second)
    finally:
        nfs_lab.heal("a")
        first.kill()
        _finish(first)
    doc = fu.result(out)
    assert "VerifyInterval + MonitorStall = 2.5 s (qm.ini of QM1)" in doc["notes"]
    hand = fu.test_of(doc, "lease hand-off")["details"]["handoff"]
    # 2.5 s of verify + stall ends well inside the 5 s lease: the instance stops first
    assert code == 0 and hand["budget"] == 2.5 and hand["seconds"] > 2.5, err
