"""HA promises on the real NFSv4 server (the lab: nfs-ganesha, 5 s lease, hosts A and B in
network namespaces, the built-in nfs4:// client), not the project's fault injector:

* a real lost lock: the active is paused (SIGSTOP) past its lease, the server expires its
  state and the standby takes the lock; resumed, the old active ends with AMQ7279 and its
  activation wrote nothing after the new one began;
* a write held up after every check and sent after the standby took over (the
  ``stop`` fault: the active stops right before the WRITE goes on the wire) is refused by
  the server: its bytes are not in the file on the export, and the log has no record of
  the old generation after the new one;
* ``dspmq`` answers within a second (plus interpreter start) while the real server is
  frozen (SIGSTOP of ganesha) and an instance is running on it.

Root only; uses the session's lab (tests/lab.py), dumps both error logs on failure.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import lab
from tests.integration.test_nfs4_failover import TUNING, NsHost, _alive, _pid, _run

pytestmark = [pytest.mark.integration, pytest.mark.root]

QM = "QMNFSHA"


@pytest.fixture
def a_env(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """More environment for host A's queue manager: parametrize indirectly with
    ``"stop-log-write"`` for the late-write pause point (lockfs.faults kind ``stop``), or
    ``"stop-log-rename"`` for the late RENAME of the log control file."""
    param = getattr(request, "param", None)
    if param == "stop-log-rename":
        # the RENAME that puts a new log control file in place stops before it is sent
        fault = {"volume": "log", "op": "rename", "path": "amqhlctl.lfh", "kind": "stop",
                 "times": 1, "armed": str(tmp_path / "arm"),
                 "report": str(tmp_path / "stopped.json")}
        return {"MIQM_FAULTS": json.dumps([fault]), "VerifyInterval": "2"}
    if param != "stop-log-write":
        return {}
    # the second piece of the put's log write stops: the first has just renewed the log
    # file's own state; verifies every 2 s leave the master lock's renewal older
    fault = {"volume": "log", "op": "pwrite", "path": "S*.LOG", "kind": "stop",
             "times": 1, "skip": 1,
             "contains": " held-up ",
             "armed": str(tmp_path / "arm"), "report": str(tmp_path / "stopped.json")}
    return {"MIQM_FAULTS": json.dumps([fault]), "VerifyInterval": "2"}


@pytest.fixture
def qm(nfs_lab: lab.NfsLab, tmp_path: Path, request: pytest.FixtureRequest,
       a_env: dict[str, str]) -> Iterator[tuple[NsHost, NsHost, Path]]:
    """QMNFSHA created on the lab, active on A and standby on B; everything killed after."""
    a, b = NsHost("a", tmp_path / "hosta", a_env), NsHost("b", tmp_path / "hostb")
    for h in (a, b):
        h.root.mkdir()
    sub = f"ha-{os.getpid()}-{int(time.time())}"
    base = nfs_lab.export_dir / sub
    (base / "data").mkdir(parents=True)
    (base / "log").mkdir(parents=True)
    ganesha = nfs_lab.server_pid()
    try:
        _run(nfs_lab, a, "crtmqm", "-md", nfs_lab.url(f"{sub}/data"), "-ld",
             nfs_lab.url(f"{sub}/log"), "-lf", "256", QM)
        ini = base / "data" / QM / "qm.ini"
        text = ini.read_text()
        tuning = dict(TUNING)
        tuning.update({k: v for k, v in a_env.items() if k in TUNING})
        a.extra = {k: v for k, v in a_env.items() if k not in TUNING}
        for key, value in tuning.items():
            text = "\n".join(f"   {key}={value}" if line.strip().startswith(f"{key}=")
                             else line for line in text.splitlines()) + "\n"
        ini.write_text(text)
        _, line, _ = _run(nfs_lab, a, "dspmqinf", "-o", "command", QM)
        _run(nfs_lab, b, *line.split())
        _, out, _ = _run(nfs_lab, a, "strmqm", "-x", QM, timeout=120)
        assert "started" in out
        _, out, _ = _run(nfs_lab, b, "strmqm", "-x", QM, timeout=120)
        assert "standby" in out
        _run(nfs_lab, a, "runmqsc", QM, stdin="DEFINE QLOCAL(HA.Q)\n")
        yield a, b, base
    finally:
        os.kill(ganesha, signal.SIGCONT)  # never leave the server frozen
        rep = getattr(request.node, "rep_call", None)
        errors = base / "data" / QM / "errors"
        if rep is not None and rep.failed:
            for f in sorted(errors.glob("AMQERR0*.LOG")) if errors.is_dir() else []:
                print(f"===== {f}\n{f.read_text(errors='replace')[-6000:]}")
        for h in (a, b):
            pid = _pid(h, QM)
            if pid and _alive(pid):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
        for ns in ("a", "b"):
            try:
                nfs_lab.heal(ns)
            except Exception:  # best effort
                pass
        shutil.rmtree(base, ignore_errors=True)


def _arm_and_put(labx: lab.NfsLab, a: NsHost, a_env: dict[str, str],
                 logdir: Path) -> tuple[int, int, Path, subprocess.Popen[str]]:
    """Arm the ``stop`` fault of ``a_env`` and start an amqsput on host A: returns the
    active's pid, the log generation it writes, the fault's report path and the put."""
    from lockfs.posix import PosixVolume
    from miqm.store.log import RecoveryLog

    fault = json.loads(a_env["MIQM_FAULTS"])[0]
    old = _pid(a, QM)
    assert old and _alive(old)
    old_gen = RecoveryLog.recorded_generation(PosixVolume(str(logdir)))
    Path(fault["armed"]).touch()
    exe = os.path.join(os.path.dirname(sys.executable), "amqsput")
    return old, old_gen, Path(fault["report"]), labx.run_in("a", [exe, QM, "HA.Q"],
                                                            env=a.env())


def _await_takeover(labx: lab.NfsLab, base: Path, logdir: Path, old_gen: int,
                    stopped: float) -> float:
    """Seconds from ``stopped`` until hostb holds master (read on the export) and the log
    records a generation above ``old_gen``."""
    from lockfs.posix import PosixVolume
    from miqm.store.log import RecoveryLog

    deadline = stopped + 6 * labx.lease + 30
    while not (_master_names(base, "hostb", old_gen)
               and RecoveryLog.recorded_generation(PosixVolume(str(logdir))) > old_gen):
        assert time.monotonic() < deadline, "the standby never took over"
        time.sleep(0.01)
    return time.monotonic() - stopped


def _await_end(pid: int) -> float:
    """After SIGCONT of a resumed old active: seconds until it has ended (at most 30)."""
    resumed = time.monotonic()
    while _alive(pid):
        assert time.monotonic() - resumed < 30, "the resumed old active kept running"
        time.sleep(0.02)
    return time.monotonic() - resumed


def _reap(put: subprocess.Popen[str]) -> None:
    """The held-up client: told of a failure or never answered (not our concern here)."""
    try:
        put.wait(timeout=30)
    except subprocess.TimeoutExpired:
        put.kill()
        put.wait()
    for pipe in (put.stdout, put.stderr):
        if pipe is not None:
            pipe.close()


def _serving(labx: lab.NfsLab, host: NsHost) -> bool:
    rc, _, _ = _run(labx, host, "runmqsc", QM, stdin="PING QMGR\n", ok=False, timeout=30)
    return rc == 0


def test_a_paused_active_that_lost_its_lease_ends_with_amq7279_and_writes_nothing(
        nfs_lab: lab.NfsLab, qm: tuple[NsHost, NsHost, Path]) -> None:
    a, b, base = qm
    lines = [f"before pause {i:02d}" for i in range(10)]
    _run(nfs_lab, a, "amqsput", QM, "HA.Q", stdin="\n".join(lines) + "\n")
    old = _pid(a, QM)
    assert old and _alive(old)
    os.kill(old, signal.SIGSTOP)  # no renewals: the server expires its lease for real
    paused = time.monotonic()
    try:
        deadline = paused + 6 * nfs_lab.lease + 30
        while not _serving(nfs_lab, b):
            assert time.monotonic() < deadline, "the standby never took over"
            time.sleep(0.2)
        took = time.monotonic() - paused
        assert took > nfs_lab.lease * 0.5, f"the lock was handed over after {took:.1f}s, " \
            f"before the {nfs_lab.lease}s lease could expire"
    finally:
        os.kill(old, signal.SIGCONT)
    ended = _await_end(old)
    print(f"lease {nfs_lab.lease}s: standby serving {took:.1f}s after the pause; the old "
          f"active ended {ended:.2f}s after it was resumed")
    errlog = (base / "data" / QM / "errors" / "AMQERR01.LOG").read_text(errors="replace")
    hosta = [block for block in errlog.split("-----") if "Host(hosta)" in block]
    assert any("AMQ7279" in block for block in hosta), errlog[-3000:]
    # its last words (in the shared events or its host's own copy) say the lease had run
    # out before it could stop itself: the analysis calls that failover "paused"
    fatal = lab.last_words(base / "data" / QM / "events", a.root, host="hosta")
    assert fatal and fatal[-1]["lease_age_s"] >= fatal[-1]["lease_s"] > 0, fatal
    _, out, _ = _run(nfs_lab, b, "amqsget", QM, "HA.Q", "--wait", "1")
    assert [ln for ln in out.splitlines() if ln] == lines
    # the log, read from the export: no record of the old generation after the new began
    from lockfs.posix import PosixVolume
    from miqm.store.log import RecoveryLog
    from miqm.store.settings import LogSettings

    logv = PosixVolume(str(base / "log" / QM))
    gen = RecoveryLog.recorded_generation(logv)
    reader = RecoveryLog.open(logv, LogSettings(file_pages=256), generation=gen)
    gens = [r.generation for r in reader.records(reader.first_lsn())]
    reader.close()
    assert gens and gens == sorted(gens) and gens[-1] == gen >= 2


def test_a_master_copied_back_byte_for_byte_ends_the_active_on_the_real_server(
        nfs_lab: lab.NfsLab, qm: tuple[NsHost, NsHost, Path]) -> None:
    """A 'stale lock' clean-up that saves master, removes it and puts the same bytes back
    (on an NFS client, as an administrator on a host would): the record reads the same, but
    the active's lock is on a file nobody opens any more. Over nfs4:// there is no kernel
    descriptor to compare, so the server's fileid tells the files apart: the active ends
    with AMQ7279 at its next verify and the standby takes over through the new file."""
    a, b, base = qm
    lines = [f"before copy {i:02d}" for i in range(5)]
    _run(nfs_lab, a, "amqsput", QM, "HA.Q", stdin="\n".join(lines) + "\n")
    old = _pid(a, QM)
    assert old and _alive(old)
    # through an NFS client, as on a host's mount (a change made on the export's own
    # filesystem, behind the server's back, is not seen by its clients for a while)
    from lockfs import open_volume

    admin = open_volume(nfs_lab.url(f"{base.name}/data"))
    try:
        saved = admin.read_bytes(f"{QM}/master")
        admin.unlink(f"{QM}/master")
        with admin.open(f"{QM}/master", create=True) as copy:
            copy.pwrite(saved, 0)
            copy.fdatasync()
    finally:
        admin.close()
    ended = _await_end(old)
    deadline = time.monotonic() + 6 * nfs_lab.lease + 30
    while not _serving(nfs_lab, b):
        assert time.monotonic() < deadline, "the standby never took over"
        time.sleep(0.2)
    print(f"the active ended {ended:.2f}s after master was copied back")
    fatal = lab.last_words(base / "data" / QM / "events", a.root, host="hosta")
    assert fatal and "removed or replaced" in fatal[-1].get("detail", ""), fatal
    assert _master_names(base, "hostb", 0)
    _, out, _ = _run(nfs_lab, b, "amqsget", QM, "HA.Q", "--wait", "1")
    assert [ln for ln in out.splitlines() if ln] == lines


def test_dspmq_answers_within_a_second_while_the_real_server_is_frozen(
        nfs_lab: lab.NfsLab, qm: tuple[NsHost, NsHost, Path]) -> None:
    a, b, _ = qm
    ganesha = nfs_lab.server_pid()
    _, before, _ = _run(nfs_lab, b, "dspmq", "-x", "-m", QM)
    assert "Running" in before
    try:
        nfs_lab.stop_server()
        timings = []
        for host in (a, b):
            t0 = time.monotonic()
            rc, out, err = _run(nfs_lab, host, "dspmq", "-x", "-m", QM, ok=False, timeout=30)
            timings.append(time.monotonic() - t0)
            assert rc == 0, out + err
            assert "Status not available" in out, out
            assert f"INSTANCE(host{host.ns})" in out, out  # what this host knows itself
    finally:
        os.kill(ganesha, signal.SIGCONT)
    print(f"dspmq with the NFSv4 server frozen: {timings[0]:.2f}s on the active's host, "
          f"{timings[1]:.2f}s on the standby's (about 1 s of probing plus interpreter start)")
    assert max(timings) < 3.0, timings


def _master_names(base: Path, host: str, above: int) -> bool:
    """The master record on the export (read at the server) names ``host`` with a
    generation above ``above``."""
    from lockfs.lockfile import RECORD_SIZE, HolderRecord

    try:
        raw = (base / "data" / QM / "master").read_bytes()[:RECORD_SIZE]
    except OSError:
        return False
    rec = HolderRecord.decode(raw)
    return rec is not None and rec.host == host and rec.generation > above


@pytest.mark.parametrize("a_env", ["stop-log-write"], indirect=True)
def test_a_late_write_after_the_lease_passed_on_is_refused_by_the_server(
        nfs_lab: lab.NfsLab, a_env: dict[str, str], qm: tuple[NsHost, NsHost, Path]) -> None:
    """The window of issue 18, forced: the active passes every check for a log write
    (write guard, lease anchor), one piece of the write goes out (renewing the log file's
    own NFSv4 state at the server) and the process stops (SIGSTOP) right before the next
    piece is sent. The test waits until the standby holds master and has written its own
    generation (both read on the export), resumes the old active, and reads the export:
    the held-up bytes did not land, and no old-generation record follows the new ones."""
    from lockfs.posix import PosixVolume
    from miqm.errors import LogCorruptError
    from miqm.store.log import RecoveryLog
    from miqm.store.settings import LogSettings

    a, b, base = qm
    logdir = base / "log" / QM
    _run(nfs_lab, a, "amqsput", QM, "HA.Q", stdin="before 00\n")
    old, old_gen, report, put = _arm_and_put(nfs_lab, a, a_env, logdir)
    try:
        # one message longer than a page: the held-up piece is record bytes, not padding
        # (no two pieces alike, and every piece carries the marker the fault looks for)
        body = "".join(f" held-up {i:05d}" for i in range(700))
        put.stdin.write(body + "\n")  # type: ignore[union-attr]
        put.stdin.close()  # type: ignore[union-attr]
        deadline = time.monotonic() + 30
        while not report.exists():
            assert time.monotonic() < deadline, "the stop fault never fired"
            time.sleep(0.01)
        stopped = time.monotonic()
        held = json.loads(report.read_text())
        assert held["pid"] == old
        with open(logdir / held["path"], "rb") as f:
            f.seek(held["offset"])
            before = f.read(len(held["data"]) // 2)
        assert before != bytes.fromhex(held["data"]), "the held-up write would change nothing"
        took = _await_takeover(nfs_lab, base, logdir, old_gen, stopped)
    finally:
        os.kill(old, signal.SIGCONT)
    ended = _await_end(old)
    _reap(put)
    # what the server holds where the held-up piece was to go
    data = bytes.fromhex(held["data"])
    with open(logdir / held["path"], "rb") as f:
        f.seek(held["offset"])
        there = f.read(len(data))
    assert data.strip(b"\0"), "the held-up piece is padding: it would prove nothing"
    landed = there == data
    new_gen = RecoveryLog.recorded_generation(PosixVolume(str(logdir)))
    try:
        reader = RecoveryLog.open(PosixVolume(str(logdir)), LogSettings(file_pages=256),
                                  generation=new_gen)
        gens = [r.generation for r in reader.records(reader.first_lsn())]
        reader.close()
    except LogCorruptError as exc:  # what main did: the late write landed after the new
        pytest.fail(f"the late WRITE landed at the server (range now holds it: {landed}): "
                    f"{exc}")
    print(f"lease {nfs_lab.lease}s: held-up WRITE of {len(data)} bytes at "
          f"{held['path']}+{held['offset']} (generation {old_gen}); standby held master and "
          f"had logged generation {new_gen} {took:.2f}s after the stop; old active ended "
          f"{ended:.2f}s after SIGCONT; at the server the range "
          f"{'HOLDS THE LATE WRITE' if landed else 'does not hold the late write'}; "
          f"log generations {sorted(set(gens))}")
    assert not landed, "the late WRITE landed on the export after the standby took over"
    assert gens and gens == sorted(gens) and gens[-1] == new_gen > old_gen, gens
    _, out, _ = _run(nfs_lab, b, "amqsget", QM, "HA.Q", "--wait", "1")
    assert "before 00" in out.splitlines()


@pytest.mark.parametrize("a_env", ["stop-log-rename"], indirect=True)
def test_a_late_rename_after_the_lease_passed_on_is_refused_by_the_server(
        nfs_lab: lab.NfsLab, a_env: dict[str, str], qm: tuple[NsHost, NsHost, Path]) -> None:
    """A RENAME carries no stateid, so no lease refuses it by itself: the active stops
    (SIGSTOP) right before the RENAME that puts a new log control file in place (its log
    grew into a new extent); the standby takes over and records its own generation in the
    control file; the old active is resumed. Its RENAME goes out behind a RENEW of the
    master lock's expired client, so the server refuses it: the control file on the export
    still holds the new generation, and the new active's log is intact."""
    from lockfs.posix import PosixVolume
    from miqm.store.log import RecoveryLog
    from miqm.store.settings import LogSettings

    a, _b, base = qm
    logdir = base / "log" / QM
    old, old_gen, report, put = _arm_and_put(nfs_lab, a, a_env, logdir)
    try:
        # 2 MB through a log of 1 MiB extents: the log takes a new extent, recorded in a
        # new control file put in place by RENAME
        body = "x" * 8000

        def feed() -> None:
            try:
                put.stdin.write("".join(f"{i:04d} {body}\n" for i in range(250)))  # type: ignore[union-attr]
                put.stdin.close()  # type: ignore[union-attr]
            except (BrokenPipeError, ValueError):  # the put gave up once the instance stopped
                pass

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        deadline = time.monotonic() + 60
        while not report.exists():
            assert put.poll() is None or feeder.is_alive(), \
                f"amqsput ended: {put.stderr.read()}"  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the stop fault never fired"
            time.sleep(0.01)
        stopped = time.monotonic()
        held = json.loads(report.read_text())
        assert held["pid"] == old and held["op"] == "rename", held
        took = _await_takeover(nfs_lab, base, logdir, old_gen, stopped)
        control = (logdir / "amqhlctl.lfh").read_bytes()
    finally:
        os.kill(old, signal.SIGCONT)
    ended = _await_end(old)
    _reap(put)
    feeder.join(timeout=30)
    after = (logdir / "amqhlctl.lfh").read_bytes()
    new_gen = RecoveryLog.recorded_generation(PosixVolume(str(logdir)))
    renamed = bytes.fromhex(held["data"]).decode()
    source = logdir / renamed.split(" -> ")[0].rsplit("/", 1)[-1]
    carried_out = not source.exists()
    print(f"lease {nfs_lab.lease}s: held-up RENAME {renamed} (generation {old_gen}); standby "
          f"recorded generation {new_gen} {took:.2f}s after the stop; old active ended "
          f"{ended:.2f}s after SIGCONT; the control file on the export "
          f"{'is unchanged' if after == control else 'changed'} and records generation "
          f"{new_gen}; the RENAME's source is {'GONE' if carried_out else 'still there'}")
    # read at the server: the held-up RENAME was not carried out, its source is still there
    assert not carried_out, "the late RENAME was carried out after the standby took over"
    assert new_gen > old_gen, "the late RENAME put the old active's log control file back"
    reader = RecoveryLog.open(PosixVolume(str(logdir)), LogSettings(file_pages=256),
                              generation=new_gen)
    gens = [r.generation for r in reader.records(reader.first_lsn())]
    reader.close()
    assert gens and gens == sorted(gens) and gens[-1] == new_gen, sorted(set(gens))
    errlog = (base / "data" / QM / "errors" / "AMQERR01.LOG").read_text(errors="replace")
    assert any("AMQ7279" in block or "AMQ6708" in block
               for block in errlog.split("-----") if "Host(hosta)" in block), errlog[-3000:]
