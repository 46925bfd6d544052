"""Multi-instance on a real NFSv4 server (the lab: nfs-ganesha with a 5 s lease, hosts A
and B in their own network namespaces, the built-in nfs4:// client).

Cut the active host's link: the active stops itself before its lease can expire, the
standby becomes active after the lease, and when the link comes back the old active has
written nothing (the log holds no record of the old generation after the new one began).
Every committed message is still there. Then ``miqm analyze`` over the shared and the
host-local event copies finds that failover, with the duration the new active measured,
and classifies it by the old active's last words, which only its host-local copy has.
Root only; dumps both error logs on failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests import lab

pytestmark = [pytest.mark.integration, pytest.mark.root]

ADDR = {"a": "10.77.0.2", "b": "10.77.0.3"}
TUNING = {"StandbyPollInterval": "0.2", "VerifyInterval": "1", "MonitorStall": "2",
          "LivenessInterval": "10", "FilesystemLease": str(lab.LEASE)}


@dataclass
class NsHost:
    ns: str
    root: Path
    extra: dict[str, str] = field(default_factory=dict)  # more environment (MIQM_FAULTS)

    def env(self) -> dict[str, str]:
        return {"MIQM_DATA_ROOT": str(self.root), "MIQM_HOSTNAME": f"host{self.ns}",
                "MIQM_LISTENER_HOST": ADDR[self.ns], "MIQM_LISTENER_PORT": "0",
                "PYTHONUNBUFFERED": "1", **self.extra}


def _run(labx: lab.NfsLab, host: NsHost, *argv: str, stdin: str | None = None,
         timeout: float = 60, ok: bool = True) -> tuple[int, str, str]:
    exe = os.path.join(os.path.dirname(sys.executable), argv[0])
    proc = labx.run_in(host.ns, [exe, *argv[1:]], env=host.env())
    out, err = proc.communicate(stdin, timeout=timeout)
    assert "Traceback" not in out + err, out + err
    if ok:
        assert proc.returncode == 0, f"{' '.join(argv)} on {host.ns}: {out}{err}"
    return proc.returncode, out, err


def _pid(host: NsHost, qmgr: str) -> int | None:
    try:
        return int(json.loads((host.root / "run" / f"{qmgr}.json").read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except (ProcessLookupError, FileNotFoundError):
        return False


@pytest.fixture
def hosts(nfs_lab: lab.NfsLab, tmp_path: Path, request: pytest.FixtureRequest
          ) -> Iterator[tuple[NsHost, NsHost]]:
    a, b = NsHost("a", tmp_path / "hosta"), NsHost("b", tmp_path / "hostb")
    for h in (a, b):
        h.root.mkdir()
    try:
        yield a, b
    finally:
        rep = getattr(request.node, "rep_call", None)
        errors = nfs_lab.export_dir / "qm" / "data" / "QMNFS" / "errors"
        if rep is not None and rep.failed:
            for f in sorted(errors.glob("AMQERR0*.LOG")) if errors.is_dir() else []:
                print(f"===== {f}\n{f.read_text(errors='replace')[-6000:]}")
            for h in (a, b):
                for f in (h.root / "run").glob("*.out"):
                    print(f"===== {f}\n{f.read_text(errors='replace')[-3000:]}")
        for h in (a, b):
            pid = _pid(h, "QMNFS")
            if pid and _alive(pid):
                os.kill(pid, 9)
        for ns in ("a", "b"):
            try:
                nfs_lab.heal(ns)
            except RuntimeError:
                pass


def test_partitioned_active_fences_itself_and_the_standby_takes_over(
        nfs_lab: lab.NfsLab, hosts: tuple[NsHost, NsHost], tmp_path: Path) -> None:
    a, b = hosts
    (nfs_lab.export_dir / "qm" / "data").mkdir(parents=True, exist_ok=True)
    (nfs_lab.export_dir / "qm" / "log").mkdir(parents=True, exist_ok=True)
    data, log = nfs_lab.url("qm/data"), nfs_lab.url("qm/log")
    _run(nfs_lab, a, "crtmqm", "-md", data, "-ld", log, "-lf", "256", "QMNFS")
    ini = nfs_lab.export_dir / "qm" / "data" / "QMNFS" / "qm.ini"
    text = ini.read_text()
    for key, value in TUNING.items():
        text = "\n".join(f"   {key}={value}" if line.strip().startswith(f"{key}=") else line
                         for line in text.splitlines()) + "\n"
    ini.write_text(text)
    _, line, _ = _run(nfs_lab, a, "dspmqinf", "-o", "command", "QMNFS")
    _run(nfs_lab, b, *line.split())
    _, out, _ = _run(nfs_lab, a, "strmqm", "-x", "QMNFS", timeout=120)
    assert "started" in out
    _, out, _ = _run(nfs_lab, b, "strmqm", "-x", "QMNFS", timeout=120)
    assert "standby" in out
    _run(nfs_lab, a, "runmqsc", "QMNFS", stdin="DEFINE QLOCAL(NFS.Q)\n")
    lines = [f"nfs message {i:03d}" for i in range(20)]
    _run(nfs_lab, a, "amqsput", "QMNFS", "NFS.Q", stdin="\n".join(lines) + "\n")
    old_pid = _pid(a, "QMNFS")
    assert old_pid and _alive(old_pid)

    nfs_lab.cut("a")
    cut = time.monotonic()
    cut_wall = time.time()
    gone: list[float] = []

    def watch() -> None:  # the old active's end, to 10 ms
        while _alive(old_pid) and time.monotonic() - cut < 60:
            time.sleep(0.01)
        gone.append(time.monotonic() - cut)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    active = None
    while time.monotonic() - cut < 60 and active is None:
        rc, _, _ = _run(nfs_lab, b, "runmqsc", "QMNFS", stdin="PING QMGR\n", ok=False,
                        timeout=30)
        if rc == 0:
            active = time.monotonic() - cut
        else:
            time.sleep(0.05)
    watcher.join(60)
    stopped = gone[0] if gone else None
    events = nfs_lab.export_dir / "qm" / "data" / "QMNFS" / "events" / "hostb.jsonl"
    took = granted = measured = None
    for raw in events.read_text().splitlines() if events.exists() else []:
        ev = json.loads(raw)
        at = datetime.fromisoformat(ev["ts"]).timestamp() - cut_wall
        if ev["event"] == "failover_start":
            granted = at
        elif ev["event"] == "failover_end":
            took = at
            measured = ev["duration_s"]
    print(f"lease {nfs_lab.lease}s: old active stopped {stopped}s after the cut; the "
          f"standby got master after {granted}s, was serving after {took}s (its events), "
          f"and a client there (a new process) got an answer after {active}s")
    assert granted is not None and stopped is not None and granted > stopped
    assert stopped is not None and stopped < nfs_lab.lease, "the cut-off active did not " \
        "stop itself before its lease could expire"
    assert active is not None, "the standby never took over"
    assert active > stopped

    nfs_lab.heal("a")
    time.sleep(1)
    _, out, _ = _run(nfs_lab, b, "amqsget", "QMNFS", "NFS.Q", "--wait", "1")
    assert [ln for ln in out.splitlines() if ln] == lines

    # the log, read straight from the export: the new generation is the last one, and
    # no record of the old one follows it (the reader refuses that as a stale writer)
    from lockfs.posix import PosixVolume
    from miqm.store.log import RecoveryLog
    from miqm.store.settings import LogSettings

    logv = PosixVolume(str(nfs_lab.export_dir / "qm" / "log" / "QMNFS"))
    gen = RecoveryLog.recorded_generation(logv)
    reader = RecoveryLog.open(logv, LogSettings(file_pages=256), generation=gen)
    gens = [r.generation for r in reader.records(reader.first_lsn())]
    reader.close()
    assert gens and gens == sorted(gens) and gens[-1] == gen >= 2

    _analysis_finds_the_partition(nfs_lab, a, b, measured, tmp_path)


def _analysis_finds_the_partition(labx: lab.NfsLab, a: NsHost, b: NsHost,
                                  measured: float | None, tmp_path: Path) -> None:
    """``miqm analyze run`` over the shared events/ and both hosts' local copies: one
    failover, from hosta to hostb, with the duration hostb measured, cause ``spurious``
    (the old active stopped itself with AMQ7279/AMQ7280: host and process alive) because
    its last words are in its host-local copy, though not in the shared one."""
    pytest.importorskip("pyspark", reason="pyspark is not installed (pip install -e "
                        "'.[test]')")
    import pandas as pd
    from pyspark.sql import SparkSession

    from miqm.analysis.run import analyze
    from miqm.analysis.spark import session

    shared = labx.export_dir / "qm" / "data" / "QMNFS" / "events"
    local = [h.root / "events" / "QMNFS" for h in (a, b)]
    assert all(d.is_dir() for d in local), "each host keeps its own copy of the history"
    assert not lab.last_words(shared, host="hosta"), \
        "the cut-off active's last words reached the share"
    words = sorted(lab.last_words(local[0], host="hosta"), key=lambda w: w["ts"])
    assert words and {w["amq"] for w in words} <= {"AMQ7279", "AMQ7280"}, words
    assert measured is not None
    running = SparkSession.getActiveSession()
    # a small history: the quick JIT alone (most of Spark's CPU would go to compiling it)
    spark = running or session("local[2]", shuffle_partitions=2,
                               java_options="-XX:TieredStopAtLevel=1")
    try:
        s = analyze([str(shared), *map(str, local)], str(tmp_path / "analysis"),
                    spark=spark, report=False)
    finally:
        if running is None:
            spark.stop()
    print("analysis:", {k: s[k] for k in ("failovers", "failovers_by_cause",
                                          "failover_seconds", "duplicates_removed")})
    assert s["failovers"] == 1 and s["switchovers"] == 0
    assert s["failovers_by_cause"] == {"spurious": 1}
    assert s["spurious_failovers"] == 1
    assert s["duplicates_removed"] > 0 and s["malformed_lines"] == 0
    assert s["failover_seconds"]["max"] == measured
    tk = pd.read_csv(tmp_path / "analysis" / "tables" / "takeovers.csv")
    assert len(tk) == 1
    row = tk.iloc[0]
    assert (row["prev_host"], row["host"], row["cause"]) == ("hosta", "hostb", "spurious")
    assert row["prev_fatal_amq"] == words[0]["amq"]
    assert row["duration_s"] == measured
    sp = pd.read_csv(tmp_path / "analysis" / "tables" / "spurious.csv")
    assert list(sp["prev_host"]) == ["hosta"] and list(sp["new_host"]) == ["hostb"]


@pytest.mark.parametrize("fault", ["partition", "pause"])
def test_bench_failover_on_the_lab(nfs_lab: lab.NfsLab, fault: str) -> None:
    """``miqm bench failover --fault partition|pause`` on the lab this session runs: one
    cycle each way of reporting, every figure present and within the lease's bounds."""
    exe = os.path.join(os.path.dirname(sys.executable), "miqm")
    proc = subprocess.run([exe, "bench", "failover", "--fault", fault, "--cycles", "1",
                           "--lab", str(nfs_lab.dir), "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    print(result)
    assert result["fault"] == fault and result["lease_seconds"] == nfs_lab.lease
    assert result["cycles_losing_messages"] == 0
    took = result["failover_seconds"]["max"]
    # the standby cannot get the lock before the lease runs out, and should soon after
    assert nfs_lab.lease * 0.5 < took < nfs_lab.lease + 10
    if fault == "partition":
        assert result["old_active_stopped_seconds"]["max"] < nfs_lab.lease
    else:
        assert result["old_active_ended_after_resume_seconds"][0] is not None
    assert not list((nfs_lab.export_dir).glob("bench-*")), "the bench left its data behind"


def test_short_fault_campaign_on_the_lab_audits_clean(nfs_lab: lab.NfsLab) -> None:
    """``miqm bench campaign --nfs-lab`` in short: a partition and a pause of the active
    host under two committing producers, then every message audited."""
    result = _lab_campaign(nfs_lab, "--faults", "partition,pause", "--cycles", "2",
                           "--seed", "1")
    assert result["faults"] == {"partition": 1, "pause": 1}


def test_server_faults_campaign_on_the_lab_audits_clean(nfs_lab: lab.NfsLab) -> None:
    """The NFS server's own faults, each once under two committing producers: it crashes
    and comes back without and with a grace period while both instances run (the
    standby keeps polling and takes over), answers up to 50-500 ms late for two leases
    (no failover), stalls longer than MonitorStall (the active stops itself, the standby
    takes over); then every message audited."""
    faults = "restart,slow,stall,restart-grace"
    result = _lab_campaign(nfs_lab, "--faults", faults, "--in-turn", "--cycles", "4")
    assert result["faults"] == dict.fromkeys(faults.split(","), 1)
    by_fault = result["failover_by_fault"]
    assert by_fault["slow"]["failovers"] == 0, result  # never a spurious failover
    for fault in ("restart", "restart-grace", "stall"):
        assert by_fault[fault]["failovers"] == 1, result
    assert result["spurious_failovers"] == {}


def _lab_campaign(nfs_lab: lab.NfsLab, *args: str) -> dict[str, Any]:
    """``miqm bench campaign --nfs-lab`` with two producers and two consumers on the
    session's lab; checks the audit is clean and nothing is left on the export."""
    exe = os.path.join(os.path.dirname(sys.executable), "miqm")
    proc = subprocess.run([exe, "bench", "campaign", "--nfs-lab", "--lab", str(nfs_lab.dir),
                           *args, "--producers", "2", "--consumers", "2", "--json"],
                          capture_output=True, text=True, timeout=600)
    assert "Traceback" not in proc.stdout + proc.stderr
    assert proc.stdout.strip(), (f"the campaign printed no result (exit {proc.returncode}); "
                                 f"its stderr ends:\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    print(result)
    assert proc.returncode == 0, (result, proc.stderr)
    assert result["units"]["committed"] > 0 and result["gets"]["delivered"] > 0, result
    for damage in ("lost", "duplicated", "resurrected", "torn_units", "torn_gets",
                   "phantoms", "two_owners", "stale_writes"):
        assert result[damage] == 0, result
    assert not list(nfs_lab.export_dir.glob("bench-*")), "the campaign left its data behind"
    return result
