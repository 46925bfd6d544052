"""``miqm bench failover``: repeated failovers between two local instances, timed from
the fault to the new active instance serving a client request."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import statistics
import time
from collections.abc import Callable
from typing import Any

from miqm.bench.clients import client_of, seconds_until_new_active
from miqm.localpair import Host, LocalPair


def _wait_serving(pair: LocalPair, old_host: str, t0: float, timeout: float = 120.0) -> float:
    """Seconds from ``t0`` until a client (in this process, bindings mode as the other
    host) gets an answer from a new active instance: no subprocess start-up in the
    measurement, 2 ms between attempts."""
    other = pair.b if old_host == pair.a.name else pair.a
    with client_of(other.root, other.name):
        took = seconds_until_new_active(pair.qmgr, old_host, t0, timeout,
                                        connect_timeout=0.5, pause=0.002)
    if took is None:
        raise TimeoutError(f"no new active instance of {pair.qmgr} within {timeout:g}s")
    return took


def bench_failover(cycles: int, fault: str = "kill",
                   echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Run ``cycles`` failovers; returns durations (seconds) and their p50/max."""
    durations: list[float] = []
    lost = 0
    with LocalPair(qmgr="QMBENCH") as pair:
        pair.create()
        pair.start(pair.a)
        pair.start(pair.b)
        pair.mqsc(pair.a, "DEFINE QLOCAL(BENCH.Q)\n")
        for i in range(cycles):
            before = pair.active() or pair.wait_active()
            old = pair.host(before["host"])
            pair.put(old, "BENCH.Q", [f"cycle {i}"])
            pid = int(before["pid"])
            t0 = time.monotonic()
            if fault == "kill":
                os.kill(pid, signal.SIGKILL)
            elif fault == "pause":
                os.kill(pid, signal.SIGSTOP)
            else:
                pair.run(old, "endmqm", "-s", pair.qmgr)
            took = _wait_serving(pair, before["host"], t0)
            new = pair.wait_active(not_host=before["host"], timeout=120, poll=0.01)
            durations.append(took)
            got = pair.get_all(pair.host(new["host"]), "BENCH.Q")
            lost += 0 if got == [f"cycle {i}"] else 1
            echo(f"cycle {i + 1}/{cycles}: {fault} on {before['host']} -> {new['host']} "
                 f"serving after {took:.3f}s")
            if fault == "pause":
                try:
                    os.kill(pid, signal.SIGCONT)
                except (ProcessLookupError, ValueError, KeyError):
                    pass
                time.sleep(0.5)
            pair.start(old)  # the old host comes back as the standby
    ds = sorted(durations)
    result = {
        "fault": fault,
        "cycles": cycles,
        "failover_seconds": {
            "p50": round(statistics.median(ds), 3),
            "max": round(ds[-1], 3),
            "all": [round(d, 3) for d in durations],
        },
        "cycles_losing_messages": lost,
    }
    echo(f"failover ({fault}) p50 {result['failover_seconds']['p50']}s "
         f"max {result['failover_seconds']['max']}s over {cycles} cycles")
    return result


# --------------------------------------------------------------------------- backlog
BACKLOG_QUEUE = "BACKLOG.Q"
DEFAULT_BACKLOG_CASES = ((0, 1), (100_000, 1), (1_000_000, 1), (0, 5000))
#: ``--backlog long``: the default cases and ten million messages
LONG_BACKLOG_CASES = (*DEFAULT_BACKLOG_CASES, (10_000_000, 1))
#: in a case of many queues, this many of the other queues hold LOADED_DEPTH messages
LOADED_QUEUES = 10
LOADED_DEPTH = 100


def parse_backlog(spec: str) -> list[tuple[int, int]]:
    """``DEPTH[xQUEUES],...`` (e.g. ``0,100000,1000000,0x5000``) as (depth, queues)
    cases; ValueError with a one-line reason when it does not parse."""
    cases = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        depth, _, queues = part.lower().partition("x")
        try:
            case = (int(depth.replace("_", "")), int(queues or 1))
        except ValueError:
            raise ValueError(f"{part!r} is not DEPTH or DEPTHxQUEUES (e.g. 1000000 or "
                             "0x5000)") from None
        if case[0] < 0 or not 1 <= case[1] <= 100_000:
            raise ValueError(f"{part!r}: the depth must be >= 0 and queues 1..100000")
        cases.append(case)
    if not cases:
        raise ValueError("no case given (e.g. 0,100000,1000000,0x5000)")
    return cases


def open_store_at(data_dir: str, qmgr: str) -> Any:
    """The store of queue manager ``qmgr`` whose data directory is ``data_dir`` (a path
    or an ``nfs4://`` URL; its qm.ini names the log) opened in this process, as the next
    generation. No instance may be running."""
    from lockfs.open import open_volume
    from miqm.config import parse_qm_ini
    from miqm.store.log import RecoveryLog
    from miqm.store.qmstore import QueueManagerStore

    data = open_volume(data_dir)
    cfg = parse_qm_ini(data.read_bytes("qm.ini").decode("utf-8"), f"{data_dir}/qm.ini")
    log = open_volume(cfg.log_path)
    return QueueManagerStore.open(
        data, log, qmgr, cfg.log, cfg.tuning,
        generation=RecoveryLog.recorded_generation(log) + 1, background=False)


def _open_store(pair: LocalPair) -> Any:
    return open_store_at(pair.data_dir(), pair.qmgr)


def fill_backlog(pair: LocalPair, depth: int, queues: int,
                 body: Callable[[int], bytes] = lambda i: b"backlog!",
                 echo: Callable[[str], None] | None = None) -> None:
    """Before any instance runs: define ``queues`` queues and put ``depth`` persistent
    messages (``body(i)``, 8 bytes by default; priorities 0-9 in turn) on the first,
    straight through the store (a client would take minutes for a million), then close
    it cleanly. ``echo`` gets a progress line per million messages."""
    fill_store(_open_store(pair), depth, queues, body, echo)


def fill_store(store: Any, depth: int, queues: int,
               body: Callable[[int], bytes] = lambda i: b"backlog!",
               echo: Callable[[str], None] | None = None,
               queue: str = BACKLOG_QUEUE) -> None:
    """:func:`fill_backlog` on an open store, which it closes (the deep queue named
    ``queue``)."""
    try:
        store.define_queue(queue, MAXDEPTH=999_999_999)
        for i in range(1, queues):
            store.define_queue(f"BACKLOG.Q{i:05d}")
        done = 0
        while done < depth:
            uow = store.begin()
            n = min(5000, depth - done)
            for k in range(n):
                store.put(queue, body(done + k), persistent=True,
                          priority=(done + k) % 10, uow=uow)
            store.commit(uow)
            done += n
            if echo is not None and (done % 1_000_000 == 0 or done == depth) and depth >= 1_000_000:
                echo(f"  filled {done:,} of {depth:,} messages")
    finally:
        store.close()


def define_on_active(pair: LocalPair, queues: int, loaded: int = LOADED_QUEUES,
                     per_loaded: int = LOADED_DEPTH) -> None:
    """On the running active instance, as an administrator would: DEFINE QLOCAL for
    ``queues - 1`` more queues (one runmqsc), then ``per_loaded`` persistent messages on
    each of the first ``loaded`` of them (amqsput), so that a few queues hold messages."""
    active = pair.active() or pair.wait_active()
    host = pair.host(active["host"])
    lines = "".join(f"DEFINE QLOCAL(BACKLOG.Q{i:05d})\n" for i in range(1, queues))
    pair.run(host, "runmqsc", pair.qmgr, stdin=lines, timeout=600)
    for i in range(1, min(loaded, queues - 1) + 1):
        pair.put(host, f"BACKLOG.Q{i:05d}", [f"m{k}" for k in range(per_loaded)])


def settle_fill(depth: int, echo: Callable[[str], None]) -> None:
    """Write the fill's dirty pages back before the takeovers (``sync``): ten million
    messages put in a few minutes leave a gigabyte for the kernel to write, and a takeover
    during that writeback waits for it at every fsync (measured: lock and open phases 3-5
    times slower than after it). A queue manager that has held its backlog for a while
    has none of it."""
    if depth >= 100_000:
        echo("  writing the fill back to disk ...")
        os.sync()


def _probe_put(pair: LocalPair, old_host: str, t0: float, timeout: float = 300.0) -> float:
    other = pair.b if old_host == pair.a.name else pair.a
    return probe_put(pair.qmgr, other.root, other.name, old_host, t0, timeout)


def probe_put(qmgr: str, root: str, hostname: str, old_host: str, t0: float,
              timeout: float = 300.0) -> float:
    """Seconds from ``t0`` until a persistent put to the backlog queue succeeds on an
    active instance on a host other than ``old_host`` (a client in this process, as host
    ``hostname`` whose data root is ``root``)."""
    from miqm.errors import MiqmError
    from miqm.net.client import connect

    with client_of(root, hostname):
        while time.monotonic() - t0 < timeout:
            try:
                with connect(qmgr, timeout=0.5) as conn:
                    if conn.server_host != old_host:
                        conn.call("put", queue=BACKLOG_QUEUE, body=b"probe", persistent=True)
                        return time.monotonic() - t0
            except MiqmError:
                pass
            time.sleep(0.002)
    raise TimeoutError(f"no put on a new active instance of {qmgr} within {timeout:g}s")


def rss_mb(pid: int) -> float | None:
    """Resident memory of process ``pid`` in MB (None if it cannot be read)."""
    try:
        import psutil

        return round(psutil.Process(pid).memory_info().rss / 1e6, 1)
    except Exception:
        return None


def host_events(root: str, qmgr: str, host: str, after: int = 0) -> list[dict[str, Any]]:
    """The events of ``host``'s instances of ``qmgr`` after the first ``after`` lines of
    its host-local event file (``<root>/events/<qmgr>/<host>.jsonl``)."""
    try:
        with open(os.path.join(root, "events", qmgr, f"{host}.jsonl"), "rb") as f:
            lines = f.read().splitlines()[after:]
    except OSError:
        return []
    out = []
    for line in lines:
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


def event_lines(root: str, qmgr: str, host: str) -> int:
    """Lines in ``host``'s event file so far."""
    try:
        with open(os.path.join(root, "events", qmgr, f"{host}.jsonl"), "rb") as f:
            return f.read().count(b"\n")
    except OSError:
        return 0


def wait_event(root: str, qmgr: str, host: str, name: str, after: int,
               timeout: float) -> dict[str, Any] | None:
    """The first event ``name`` of ``host`` after line ``after`` of its event file, waited
    for up to ``timeout`` seconds (events are written by a background thread)."""
    deadline = time.monotonic() + timeout
    while True:
        for ev in host_events(root, qmgr, host, after):
            if ev.get("event") == name:
                return ev
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)


def start_standby(pair: LocalPair, host: Host, read_ahead_wait: float = 300.0) -> bool:
    """Start ``host``'s instance as the standby and wait until it has read ahead what
    the active's last checkpoint names (its first ``readahead`` event): a standby that
    has been up a while has. False if it did not say so within ``read_ahead_wait``."""
    seen = event_lines(host.root, pair.qmgr, host.name)
    pair.start(host)
    return wait_event(host.root, pair.qmgr, host.name, "readahead", seen,
                      read_ahead_wait) is not None


#: seconds after the deferred index checkpoint is due, for it to be written
SETTLE_MARGIN = 0.5


def settle_after_takeover(took_at: float) -> None:
    """Wait until the new active has written what its takeover deferred: the index files
    of queues it had to scan or replay go to a checkpoint :data:`qmstore._INDEX_DELAY`
    after the takeover (a standby started before that would read ahead a checkpoint
    without them, and the next takeover would scan those queues: a benchmark artefact,
    not what a standby up for a while meets)."""
    from miqm.store import qmstore

    left = took_at + qmstore._INDEX_DELAY + SETTLE_MARGIN - time.monotonic()
    if left > 0:
        time.sleep(left)


def _kill_and_probe(pair: LocalPair) -> tuple[float, float | None, dict[str, Any]]:
    """kill -9 the active; (seconds until a put to the deep queue succeeds on the other
    instance, the new active's RSS in MB, its ``failover_end`` event or {}); the killed
    host comes back as the standby once the new active has settled, and has read ahead
    before this returns."""
    before = pair.active() or pair.wait_active()
    pid = int(before["pid"])
    other = pair.b if before["host"] == pair.a.name else pair.a
    seen = event_lines(other.root, pair.qmgr, other.name)
    t0 = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    took = _probe_put(pair, before["host"], t0)
    new = pair.wait_active(not_host=before["host"], timeout=300, poll=0.01)
    rss = rss_mb(int(new["pid"]))
    end = wait_event(other.root, pair.qmgr, other.name, "failover_end", seen, 10.0) or {}
    settle_after_takeover(t0 + took)
    start_standby(pair, pair.host(before["host"]))
    return took, rss, end


def bench_backlog(cases: list[tuple[int, int]], cycles: int = 3,
                  echo: Callable[[str], None] = print, rounds: int = 1) -> dict[str, Any]:
    """Takeover (kill -9 of the active, until a put to the deep queue succeeds on the
    other instance) with each (depth, queues) backlog, ``cycles`` times each, side by
    side in one run; the ratios are to the first case (normally depth 0, one queue).

    The deep queue is filled through the store before the instances start. In a case
    of several queues the others are defined on the running active (one runmqsc) and
    ten of them get 100 messages each; the takeover right after that, before any
    checkpoint has recorded them, is reported apart (``first_takeover``). Before each
    kill the standby has read ahead (its first ``readahead`` event), as one that has
    waited a while would have. After the cycles both instances are killed and the store
    is opened in this process: the restart time, and the bytes the data and log
    directories hold after that open's checkpoint (``store_bytes``; circular log extents
    are preallocated, so what grows per message is the queue files).

    ``rounds`` > 1 runs all the cases that many times in turn (a minute of noise on a
    shared machine then falls on every case alike) and pools each case's figures
    (:func:`merge_rounds`)."""
    rows = in_rounds(cases, rounds, echo,
                     lambda _n, _r, depth, queues: _backlog_case(depth, queues, cycles, echo))
    return {"cases": summarize_backlog(rows, echo), "cycles": cycles, "rounds": rounds,
            "standby_read_ahead": "waited for before each kill"}


def in_rounds(cases: list[tuple[int, int]], rounds: int, echo: Callable[[str], None],
              run_case: Callable[[int, int, int, int], dict[str, Any]]
              ) -> list[dict[str, Any]]:
    """``run_case(case number, round, depth, queues)`` for every case, the cases in turn
    ``rounds`` times; one row per case, its rounds pooled (:func:`merge_rounds`)."""
    runs: list[list[dict[str, Any]]] = [[] for _ in cases]
    for r in range(rounds):
        for n, (depth, queues) in enumerate(cases):
            if rounds > 1:
                echo(f"round {r + 1}/{rounds}:")
            runs[n].append(run_case(n, r, depth, queues))
    return [merge_rounds(parts) for parts in runs]


def serving_figures(recovery: list[float], read_ahead: int,
                    first_serving: float | None) -> dict[str, Any]:
    """A backlog row's lock-to-serving figures: every takeover's (sorted) and their
    median, the first takeover's after defining, and how many takeovers took their deep
    queue from the standby's read-ahead of its index."""
    return {"lock_to_serving_seconds": sorted(round(r, 4) for r in recovery),
            "lock_to_serving_p50": round(statistics.median(recovery), 4) if recovery else None,
            "read_ahead_takeovers": read_ahead,
            "first_lock_to_serving": first_serving}


def _backlog_case(depth: int, queues: int, cycles: int,
                  echo: Callable[[str], None]) -> dict[str, Any]:
    """One run of one backlog case on a new pair (see :func:`bench_backlog`)."""
    echo(f"depth {depth:,}, {queues:,} queue(s): filling ...")
    t_fill = time.monotonic()
    with LocalPair(qmgr="QMBACK") as pair:
        pair.create()
        fill_backlog(pair, depth, 1, echo=echo)
        filled = time.monotonic() - t_fill
        settle_fill(depth, echo)
        pair.start(pair.a)
        start_standby(pair, pair.b)
        first = first_serving = None
        if queues > 1:
            define_on_active(pair, queues)
            first, _rss, end = _kill_and_probe(pair)
            first_serving = end.get("recovery_s")
            echo(f"  first takeover after defining {queues - 1:,} queues: {first:.3f}s"
                 + served_line(end))
        took: list[float] = []
        recovery: list[float] = []
        read_ahead = 0
        rss = None
        for i in range(cycles):
            t, rss, end = _kill_and_probe(pair)
            took.append(t)
            if "recovery_s" in end:
                recovery.append(float(end["recovery_s"]))
            loaded = end.get("queues") or {}
            read_ahead += 1 if loaded.get("prefetched_queues") else 0
            echo(f"  takeover {i + 1}/{cycles}: {t:.3f}s" + served_line(end))
        pair.kill_all()
        t0 = time.monotonic()
        store = _open_store(pair)
        restart = time.monotonic() - t0
        store.close()
        size = dir_bytes(os.path.join(pair.data_dir(), "queues"))
        total = dir_bytes(pair.shared)
    row = backlog_row(depth, queues, took, first, filled, restart, rss, size, total, echo)
    row.update(serving_figures(recovery, read_ahead, first_serving))
    return row


def merge_rounds(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One backlog case's rows from several rounds (:func:`backlog_row` and what its
    bench adds) as one: the takeovers and lock-to-serving times pooled and their medians
    taken again; the first takeovers after defining, one a round, by their median (each
    listed); fill and restart times by their median; the largest RSS; the sizes of the
    last round. One row is returned as it is."""
    if len(parts) == 1:
        return parts[0]
    last = parts[-1]
    row = dict(last)
    took = sorted(t for p in parts for t in p["takeover_seconds"])
    row["takeover_seconds"], row["p50"] = took, round(statistics.median(took), 3)
    firsts = [p["first_takeover"] for p in parts if p.get("first_takeover") is not None]
    row["first_takeover"] = round(statistics.median(firsts), 3) if firsts else None
    row["first_takeovers"] = firsts
    for key in ("fill_seconds", "restart_seconds"):
        row[key] = round(statistics.median(p[key] for p in parts), 3)
    sizes = [p["rss_mb_after"] for p in parts if p.get("rss_mb_after") is not None]
    row["rss_mb_after"] = max(sizes) if sizes else None
    served = sorted(t for p in parts for t in p.get("lock_to_serving_seconds") or [])
    row["lock_to_serving_seconds"] = served
    row["lock_to_serving_p50"] = round(statistics.median(served), 4) if served else None
    row["read_ahead_takeovers"] = sum(p.get("read_ahead_takeovers") or 0 for p in parts)
    first_served = [p["first_lock_to_serving"] for p in parts
                    if p.get("first_lock_to_serving") is not None]
    row["first_lock_to_serving"] = (round(statistics.median(first_served), 4)
                                    if first_served else None)
    row["first_lock_to_serving_all"] = first_served
    row["rounds"] = len(parts)
    return row


def served_line(end: dict[str, Any]) -> str:
    """What a ``failover_end`` event says of lock-to-serving, for a progress line."""
    if "recovery_s" not in end:
        return ""
    phases = " ".join(f"{k} {v:.3f}" for k, v in (end.get("phases") or {}).items())
    inner = end.get("open_phases") or {}
    if inner:  # where the open went: loading the queues, replaying the log
        phases += " (" + " ".join(f"{k} {v:.3f}" for k, v in inner.items()) + ")"
    loaded = {k: v for k, v in (end.get("queues") or {}).items() if v}
    checkpoint = f"; checkpoint {end['checkpoint']}" if end.get("checkpoint") else ""
    return (f" (lock to serving {end['recovery_s']:.3f}s"
            + (f": {phases}" if phases else "") + f"; queues {loaded}{checkpoint})")


def backlog_row(depth: int, queues: int, took: list[float], first: float | None,
                filled: float, restart: float, rss: float | None, size: int, total: int,
                echo: Callable[[str], None]) -> dict[str, Any]:
    """One backlog case's figures (``size``: bytes of its queue files, ``total``: of its
    data and log directories), with its line on the terminal."""
    row = {"depth": depth, "queues": queues, "takeover_seconds": sorted(took),
           "p50": round(statistics.median(took), 3),
           "first_takeover": None if first is None else round(first, 3),
           "fill_seconds": round(filled, 1), "restart_seconds": round(restart, 3),
           "rss_mb_after": rss, "queue_dir_bytes": size, "store_bytes": total,
           "bytes_per_message": round(size / depth, 1) if depth else None}
    echo(f"depth {depth:>9,} queues {queues:>5}: takeover p50 {row['p50']:.3f}s "
         f"(all {', '.join(f'{t:.3f}' for t in took)}), new active RSS {rss} MB, "
         f"queue files {size / 1e6:.1f} MB, restart in process {restart:.3f}s")
    return row


def summarize_backlog(rows: list[dict[str, Any]],
                      echo: Callable[[str], None]) -> list[dict[str, Any]]:
    """Ratios of each backlog case to the first, and the closing table."""
    base = rows[0]
    for r in rows:
        r["ratio"] = round(r["p50"] / (base["p50"] or 1e-9), 2)
        if r["first_takeover"] is not None:
            r["first_ratio"] = round(r["first_takeover"] / (base["p50"] or 1e-9), 2)
        if r["depth"] and base["depth"] == 0:
            # what the data and log directories grew by, per message, against the empty case
            r["store_bytes_per_message"] = round(
                (r["store_bytes"] - base["store_bytes"]) / r["depth"], 1)
    echo("depth      queues  takeover p50  ratio  first  restart  store B/msg")
    for r in rows:
        first = f"{r['first_ratio']:>5.2f}" if r.get("first_ratio") is not None else "    -"
        per = r.get("store_bytes_per_message")
        echo(f"{r['depth']:>9,}  {r['queues']:>6}  {r['p50']:>10.3f}s  {r['ratio']:>5.2f}  "
             f"{first}  {r['restart_seconds']:>6.3f}s  {'-' if per is None else per:>10}")
    return rows


def dir_bytes(path: str) -> int:
    """Bytes of the files under ``path``."""
    total = 0
    for d, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(d, f))
            except OSError:
                pass
    return total
