"""``miqm bench failover --fault partition|pause``: failovers on the NFSv4 lab.

On a local directory a paused or cut-off active keeps its lock, so there is nothing to
time; on NFSv4 its lease runs out. Each cycle puts a message through the active instance,
then cuts the active host's link (``partition``) or SIGSTOPs its process (``pause``) and
times, from the fault:

* ``failover_seconds``: until a client gets an answer from the other instance;
* ``old_active_stopped_seconds`` (partition): until the cut-off active has ended itself
  (it must, before its lease can expire, and before the standby is granted the lock);
* for ``pause``, after SIGCONT the old active must find that its ownership is gone and
  end without writing (``old_active_ended_after_resume``).

Then the link is healed (or the process resumed), the message is checked on the new
active, the old host restarts as the standby, and the roles swap for the next cycle.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from miqm.bench.clients import client_of, seconds_until_new_active
from miqm.ha.runfile import alive as _alive
from miqm.lab import HOST_ADDR, LabError, NfsLab, lab_session, running_lab

QMGR = "QMLAB"
QUEUE = "BENCH.Q"


@dataclass
class _Host:
    ns: str
    root: Path

    @property
    def name(self) -> str:
        return f"host{self.ns}"

    def env(self) -> dict[str, str]:
        return {"MIQM_DATA_ROOT": str(self.root), "MIQM_HOSTNAME": self.name,
                "MIQM_LISTENER_HOST": HOST_ADDR[self.ns], "MIQM_LISTENER_PORT": "0",
                "PYTHONUNBUFFERED": "1"}


class _Bench:
    def __init__(self, lab: NfsLab, work: Path, echo: Callable[[str], None]) -> None:
        self.lab = lab
        self.echo = echo
        self.hosts = {ns: _Host(ns, work / f"host{ns}") for ns in ("a", "b")}
        for h in self.hosts.values():
            h.root.mkdir(parents=True)
        self.sub = f"bench-{uuid.uuid4().hex[:8]}"

    # -------------------------------------------------------------- commands
    def run(self, host: _Host, *argv: str, stdin: str | None = None,
            timeout: float = 60, ok: bool = True) -> tuple[int, str]:
        exe = os.path.join(os.path.dirname(sys.executable), argv[0])
        proc = self.lab.run_in(host.ns, [exe, *argv[1:]], env=host.env())
        try:
            out, err = proc.communicate(stdin, timeout=timeout)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        if ok and proc.returncode != 0:
            line = (err.strip() or out.strip()).splitlines()[-1:] or [""]
            raise LabError(f"{' '.join(argv)} on {host.name} failed: {line[0]}")
        return proc.returncode, out

    def pid(self, host: _Host) -> int | None:
        try:
            return int(json.loads((host.root / "run" / f"{QMGR}.json").read_text())["pid"])
        except (OSError, ValueError, KeyError):
            return None

    # -------------------------------------------------------------- set-up
    def create(self) -> None:
        """The queue manager on the lab, both instances running, the queue defined."""
        self.create_qmgr()
        self.start(self.hosts["a"], "started")
        self.start(self.hosts["b"], "standby")
        self.run(self.hosts["a"], "runmqsc", QMGR, stdin=f"DEFINE QLOCAL({QUEUE})\n")

    def data_url(self) -> str:
        """The queue manager's data directory on the lab."""
        return self.lab.url(f"{self.sub}/data/{QMGR}")

    def create_qmgr(self) -> None:
        """crtmqm on host a with data and log on the lab, tuned to its lease; addmqinf on
        host b. No instance runs yet."""
        a, b = self.hosts["a"], self.hosts["b"]
        for part in ("data", "log"):
            (self.lab.export_dir / self.sub / part).mkdir(parents=True)
        data, log = self.lab.url(f"{self.sub}/data"), self.lab.url(f"{self.sub}/log")
        self.run(a, "crtmqm", "-md", data, "-ld", log, "-lf", "256", QMGR)
        lease = self.lab.lease
        # verify + monitor stall must stay under the lease (the controller refuses more)
        verify = max(0.5, lease / 5)
        tuning = {"StandbyPollInterval": "0.2", "VerifyInterval": f"{verify:g}",
                  "MonitorStall": f"{2 * verify:g}", "LivenessInterval": "10",
                  "FilesystemLease": str(lease)}
        ini = self.lab.export_dir / self.sub / "data" / QMGR / "qm.ini"
        lines = ini.read_text().splitlines()
        for key, value in tuning.items():
            lines = [f"   {key}={value}" if ln.strip().startswith(f"{key}=") else ln
                     for ln in lines]
        ini.write_text("\n".join(lines) + "\n")
        _, line = self.run(a, "dspmqinf", "-o", "command", QMGR)
        self.run(b, *line.split())

    def start(self, host: _Host, expect: str) -> None:
        _, out = self.run(host, "strmqm", "-x", QMGR, timeout=120)
        if expect not in out:
            raise LabError(f"strmqm -x on {host.name} did not report '{expect}': "
                           f"{out.strip().splitlines()[-1:]}")

    # -------------------------------------------------------------- one cycle
    def serving_after(self, new: _Host, old: _Host, t0: float, timeout: float = 120.0
                      ) -> float:
        """Seconds from ``t0`` until a client (in this process, bindings mode as host
        ``new``) gets an answer from an instance other than ``old``."""
        with client_of(str(new.root), new.name):
            took = seconds_until_new_active(QMGR, old.name, t0, timeout,
                                            connect_timeout=0.25, pause=0.01)
        if took is None:
            raise LabError(f"no new active instance of {QMGR} within {timeout:g}s")
        return took

    def cycle(self, i: int, fault: str, old: _Host, new: _Host) -> dict[str, Any]:
        body = f"cycle {i}"
        self.run(old, "amqsput", QMGR, QUEUE, stdin=body + "\n")
        pid = self.pid(old)
        if pid is None or not _alive(pid):
            raise LabError(f"the active instance on {old.name} is not running")
        ended: list[float] = []
        t0 = time.monotonic()

        def watch() -> None:  # the old active's end, to 10 ms
            while _alive(pid) and time.monotonic() - t0 < 180:
                time.sleep(0.01)
            ended.append(time.monotonic() - t0)

        if fault == "partition":
            self.lab.cut(old.ns)
        else:
            os.kill(pid, signal.SIGSTOP)
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        row: dict[str, Any] = {"from": old.name, "to": new.name}
        try:
            row["failover_seconds"] = self.serving_after(new, old, t0)
            if fault == "partition":
                watcher.join(60)
                row["old_active_stopped_seconds"] = ended[0] if ended else None
        finally:
            if fault == "partition":
                self.lab.heal(old.ns)
            else:
                resumed = time.monotonic()
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
                watcher.join(60)
                row["old_active_ended_after_resume"] = (
                    round(ended[0] - (resumed - t0), 3) if ended else None)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
            raise LabError(f"the old active instance on {old.name} (pid {pid}) did not end "
                           "itself after losing ownership")
        _, out = self.run(new, "amqsget", QMGR, QUEUE, "--wait", "1")
        row["messages_ok"] = [ln for ln in out.splitlines() if ln] == [body]
        self.start(old, "standby")
        return row

    def stop(self) -> None:
        """kill -9 both instances and wait until they are gone."""
        pids = [p for h in self.hosts.values() if (p := self.pid(h)) and _alive(p)]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.01)

    def failover_end(self, host: _Host, after: int) -> dict[str, Any] | None:
        """The ``failover_end`` event ``host``'s instance recorded after the first
        ``after`` lines of its event file: ``recovery_s``, from holding the master lock
        to serving (the part of a takeover the lease does not decide), where that time
        went and how its open loaded the queues."""
        from miqm.bench.failover import wait_event

        return wait_event(str(host.root), QMGR, host.name, "failover_end", after, 5.0)

    def event_lines(self, host: _Host) -> int:
        """Lines in ``host``'s event file so far."""
        from miqm.bench.failover import event_lines

        return event_lines(str(host.root), QMGR, host.name)

    def kill_and_probe(self, old: _Host, new: _Host
                       ) -> tuple[float, float | None, dict[str, Any] | None]:
        """kill -9 the active on ``old``; (seconds until a persistent put to the deep
        queue succeeds on ``new``, the new active's RSS in MB, its ``failover_end``
        event); ``old`` comes back as the
        standby once the new active has settled, and has read ahead before this
        returns."""
        from miqm.bench.failover import probe_put, rss_mb, settle_after_takeover, wait_event

        pid = self.pid(old)
        if pid is None or not _alive(pid):
            raise LabError(f"the active instance on {old.name} is not running")
        seen = self.event_lines(new)
        t0 = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        took = probe_put(QMGR, str(new.root), new.name, old.name, t0)
        new_pid = self.pid(new)
        rss = rss_mb(new_pid) if new_pid else None
        while _alive(pid):
            time.sleep(0.01)
        ended = self.failover_end(new, seen)
        settle_after_takeover(t0 + took)
        before = self.event_lines(old)
        self.start(old, "standby")
        wait_event(str(old.root), QMGR, old.name, "readahead", before, 300.0)
        return took, rss, ended


def bench_failover_lab(cycles: int, fault: str, *, lab_dir: str | None = None,
                       lease: int = 5, echo: Callable[[str], None] = print
                       ) -> dict[str, Any]:
    """Run ``cycles`` failovers on the NFSv4 lab (one already up in ``lab_dir``, whose
    lease is used, or a new one with ``lease``); returns the figures."""
    if fault not in ("partition", "pause"):
        raise LabError(f"--fault {fault} is not a lab fault (partition, pause)")
    return _on_lab(lab_dir, lease, lambda lab, work: _run(lab, work, cycles, fault, echo))


def _on_lab(lab_dir: str | None, lease: int,
            run: Callable[[NfsLab, Path], dict[str, Any]]) -> dict[str, Any]:
    """``run(lab, work)`` on the lab up in ``lab_dir`` or on a new one with ``lease``
    (brought down after), with a scratch directory removed after."""
    work = Path(tempfile.mkdtemp(prefix="miqm-bench-lab-"))
    try:
        if lab_dir is not None:
            return run(running_lab(Path(lab_dir)), work)
        with lab_session(work / "lab", lease) as lab:
            return run(lab, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(lab: NfsLab, work: Path, cycles: int, fault: str,
         echo: Callable[[str], None]) -> dict[str, Any]:
    bench = _Bench(lab, work, echo)
    rows: list[dict[str, Any]] = []
    try:
        bench.create()
        old, new = bench.hosts["a"], bench.hosts["b"]
        for i in range(cycles):
            row = bench.cycle(i, fault, old, new)
            rows.append(row)
            echo(f"cycle {i + 1}/{cycles}: {fault} of {row['from']} -> {row['to']} serving "
                 f"after {row['failover_seconds']:.2f}s (lease {lab.lease}s)"
                 + (f"; the old active ended itself after {row['old_active_stopped_seconds']:.2f}s"
                    if row.get("old_active_stopped_seconds") is not None else ""))
            old, new = new, old
    finally:
        bench.stop()
        shutil.rmtree(lab.export_dir / bench.sub, ignore_errors=True)
    durations = sorted(r["failover_seconds"] for r in rows)
    result: dict[str, Any] = {
        "fault": fault,
        "cycles": cycles,
        "lease_seconds": lab.lease,
        "failover_seconds": {
            "p50": round(statistics.median(durations), 3),
            "max": round(durations[-1], 3),
            "all": [round(r["failover_seconds"], 3) for r in rows],
        },
        "cycles_losing_messages": sum(1 for r in rows if not r["messages_ok"]),
    }
    if fault == "partition":
        stopped = [r["old_active_stopped_seconds"] for r in rows]
        known = sorted(s for s in stopped if s is not None)
        result["old_active_stopped_seconds"] = {
            "max": round(known[-1], 3) if known else None,
            "all": [None if s is None else round(s, 3) for s in stopped],
        }
    else:
        result["old_active_ended_after_resume_seconds"] = [
            r["old_active_ended_after_resume"] for r in rows]
    echo(f"failover ({fault}, lease {lab.lease}s) p50 {result['failover_seconds']['p50']}s "
         f"max {result['failover_seconds']['max']}s over {cycles} cycles")
    return result


# --------------------------------------------------------------------------- backlog
def bench_backlog_lab(cases: list[tuple[int, int]], cycles: int, *,
                      lab_dir: str | None = None, lease: int = 5,
                      echo: Callable[[str], None] = print, rounds: int = 1
                      ) -> dict[str, Any]:
    """``miqm bench failover --backlog CASES --nfs-lab``: the backlog cases of
    :func:`miqm.bench.failover.bench_backlog` with the queue manager's data and log on
    the NFSv4 lab, each instance in its namespace reading them over NFS. The deep queue is
    filled through the store over NFS from this process before the instances start; the
    restart is timed in this process over NFS too. ``rounds``: as in
    :func:`miqm.bench.failover.bench_backlog`."""
    return _on_lab(lab_dir, lease,
                   lambda lab, work: _run_backlog(lab, work, cases, cycles, echo, rounds))


def _run_backlog(lab: NfsLab, work: Path, cases: list[tuple[int, int]], cycles: int,
                 echo: Callable[[str], None], rounds: int = 1) -> dict[str, Any]:
    from miqm.bench.failover import in_rounds, summarize_backlog

    rows = summarize_backlog(in_rounds(
        cases, rounds, echo, lambda n, r, depth, queues: _lab_backlog_case(
            lab, work / f"case{n}-{r}", depth, queues, cycles, echo)), echo)
    base = rows[0].get("lock_to_serving_p50")
    for row in rows:
        if base and row.get("lock_to_serving_p50") is not None:
            row["lock_to_serving_ratio"] = round(row["lock_to_serving_p50"] / base, 2)
    echo("depth      queues  lock to serving p50  ratio")
    for row in rows:
        p50, ratio = row.get("lock_to_serving_p50"), row.get("lock_to_serving_ratio")
        echo(f"{row['depth']:>9,}  {row['queues']:>6}  "
             f"{'-' if p50 is None else f'{p50:.3f}s':>19}  {'-' if ratio is None else ratio:>5}")
    return {"cases": rows, "cycles": cycles, "rounds": rounds,
            "filesystem": f"NFSv4 lab (nfs-ganesha, lease {lab.lease}s)"}


def _lab_backlog_case(lab: NfsLab, where: Path, depth: int, queues: int, cycles: int,
                      echo: Callable[[str], None]) -> dict[str, Any]:
    """One run of one backlog case on the lab, in the work directory ``where``."""
    from miqm.bench.failover import (
        LOADED_DEPTH,
        LOADED_QUEUES,
        backlog_row,
        dir_bytes,
        fill_store,
        open_store_at,
        served_line,
        serving_figures,
        settle_fill,
    )

    echo(f"depth {depth:,}, {queues:,} queue(s) on the NFSv4 lab: filling ...")
    bench = _Bench(lab, where, echo)
    try:
        t_fill = time.monotonic()
        bench.create_qmgr()
        fill_store(open_store_at(bench.data_url(), QMGR), depth, 1, echo=echo)
        filled = time.monotonic() - t_fill
        settle_fill(depth, echo)
        old, new = bench.hosts["a"], bench.hosts["b"]
        bench.start(old, "started")
        bench.start(new, "standby")
        first = first_rec = None
        if queues > 1:
            lines = "".join(f"DEFINE QLOCAL(BACKLOG.Q{i:05d})\n" for i in range(1, queues))
            bench.run(old, "runmqsc", QMGR, stdin=lines, timeout=900)
            for i in range(1, min(LOADED_QUEUES, queues - 1) + 1):
                body = "".join(f"m{k}\n" for k in range(LOADED_DEPTH))
                bench.run(old, "amqsput", QMGR, f"BACKLOG.Q{i:05d}", stdin=body)
            first, _rss, got = bench.kill_and_probe(old, new)
            first_rec = float(got["recovery_s"]) if got is not None else None
            old, new = new, old
            echo(f"  first takeover after defining {queues - 1:,} queues: {first:.3f}s"
                 + (served_line(got) if got is not None else ""))
        took: list[float] = []
        recovery: list[float] = []
        read_ahead = 0
        rss = None
        for i in range(cycles):
            t, rss, got = bench.kill_and_probe(old, new)
            old, new = new, old
            took.append(t)
            if got is not None:
                recovery.append(float(got["recovery_s"]))
                read_ahead += 1 if (got.get("queues") or {}).get("prefetched_queues") \
                    else 0
            echo(f"  takeover {i + 1}/{cycles}: {t:.3f}s"
                 + (served_line(got) if got is not None else ""))
        bench.stop()
        t0 = time.monotonic()
        open_store_at(bench.data_url(), QMGR).close()
        restart = time.monotonic() - t0
        root = lab.export_dir / bench.sub
        size = dir_bytes(str(root / "data" / QMGR / "queues"))
        total = dir_bytes(str(root))
    finally:
        bench.stop()
        shutil.rmtree(lab.export_dir / bench.sub, ignore_errors=True)
    row = backlog_row(depth, queues, took, first, filled, restart, rss, size, total,
                      echo)
    # the lease decides most of a takeover on NFS: lock to serving is the rest
    row.update(serving_figures(recovery, read_ahead,
                               None if first_rec is None else round(first_rec, 4)))
    return row
