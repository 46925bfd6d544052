"""``miqm analyze generate``: a synthetic fleet history in exactly the event-history format
(docs/events.md), for the analysis and its benchmark.

The fleet: queue managers in pairs of hosts over days. Active instances verify, monitor
and check liveness (with log write times) every tick; standbys poll the master lock. The
shared NAS slows down every night during the backup (01:00-01:45 UTC, latencies x25) and
some afternoons for an ETL job (x8, a few hosts). Takeovers: weekly switchovers, killed
processes, lost hosts (every instance on the host goes silent, back as standbys later),
spurious failovers during the backup (the active stops itself: AMQ7280 after a stalled
verify, its last words reaching the shared directory late; or AMQ7279 after a failed
verify, its last words only in its host-local copy), and one flapping queue manager.

Layout written: ``OUT/shared/<QM>/events/<host>.jsonl`` (each queue manager's data
directory) and ``OUT/local/<host>/events/<QM>/<host>.jsonl`` (host-local copies: the tail
of the instances whose last words never reached the shared directory). Numbers are drawn
with numpy and lines written in bulk per file, so 10M events take well under a minute.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from miqm import amq

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
BACKUP = (3600.0, 3600.0 + 45 * 60)  # seconds of the day
BACKUP_FACTOR = 25.0
ETL = (14 * 3600.0, 14 * 3600.0 + 30 * 60)
ETL_FACTOR = 8.0


@dataclass
class _Inst:
    iid: str
    qmgr: str
    host: str
    t: list[Any] = field(default_factory=list)       # numpy arrays of times
    payload: list[Any] = field(default_factory=list)  # numpy arrays of payload strings
    local_tail: float | None = None  # last words only on the host: from this time


def _fmt(fmt: str, values: Any) -> Any:
    import numpy as np

    return np.char.mod(fmt, values)


class _Fleet:
    def __init__(self, n: int, seed: int) -> None:
        import numpy as np

        self.rng = np.random.default_rng(seed)
        self.q = int(min(200, max(4, round(n / 100_000))))
        self.h = max(4, self.q // 2)
        self.days = int(min(30, max(3, round(n / 70_000))))
        self.span = self.days * 86400.0
        self.tick = self.span * self.q * 4 / max(n, 1)
        self.base = self.rng.lognormal(math.log(0.002), 0.3, self.h)  # verify median / host
        self.etl_days = {(int(d), int(h)) for d, h in zip(
            self.rng.integers(0, self.days, self.days), self.rng.integers(0, self.h, self.days),
            strict=True)}
        self.losses: dict[int, list[tuple[float, float]]] = {}
        for host in range(self.h):
            k = self.rng.poisson(self.days / 45)
            for t in sorted(self.rng.uniform(86400, self.span - 7200, k)):
                self.losses.setdefault(host, []).append((T0 + float(t), float(
                    self.rng.uniform(1800, 5400))))
        if not any(t < T0 + 2 * 86400 for t, _ in self.losses.get(self.h - 1, [])):
            self.losses.setdefault(self.h - 1, []).insert(0, (T0 + 1.8 * 86400, 3600.0))
        self.pid = 1000

    def host_name(self, i: int) -> str:
        return f"mqhost{i:03d}"

    def factor(self, host: int, t: Any) -> Any:
        import numpy as np

        tod = np.mod(t - T0, 86400.0)
        day = ((t - T0) // 86400).astype(int)
        f = np.where((tod >= BACKUP[0]) & (tod < BACKUP[1]), BACKUP_FACTOR, 1.0)
        if any(h == host for _, h in self.etl_days):
            days = [d for d, h in self.etl_days if h == host]
            etl = np.isin(day, days) & (tod >= ETL[0]) & (tod < ETL[1])
            f = np.where(etl, np.maximum(f, ETL_FACTOR), f)
        return f

    def new_instance(self, qmgr: str, host: int) -> _Inst:
        self.pid += int(self.rng.integers(1, 500))
        lock = int(self.rng.integers(10**9, 10**10))
        name = self.host_name(host)
        return _Inst(f"{name}-{self.pid}-{lock}", qmgr, name)


def _ev(inst: _Inst, t: float, event: str, **fields: Any) -> None:
    import numpy as np

    body = json.dumps({"event": event, **fields}, separators=(",", ":"))[1:-1]
    inst.t.append(np.array([t]))
    inst.payload.append(np.array([body], dtype=object))


def _periodic_active(f: _Fleet, inst: _Inst, host: int, a: float, b: float) -> None:
    import numpy as np

    if b <= a:
        return
    t = np.arange(a + f.rng.uniform(0, f.tick), b, f.tick)
    if len(t) == 0:
        return
    k = f.factor(host, t)
    lat = f.base[host] * f.rng.lognormal(0, 0.35, len(t)) * k
    wt = 600.0 * f.rng.lognormal(0, 0.3, len(t)) * k
    wmax = np.maximum.accumulate(wt * f.rng.uniform(1.5, 4.0, len(t)))
    forces = np.cumsum(f.rng.integers(50, 5000, len(t)))
    verify = np.char.add(np.char.add('"event":"verify","ok":true,"latency_s":',
                                     _fmt("%.6f", lat)), "")
    monitor = np.full(len(t), '"event":"monitor","ok":true,"verify_running_s":null',
                      dtype=object)
    live = np.char.add(np.char.add(np.char.add(
        np.char.add('"event":"liveness","forces":', forces.astype(str)),
        ',"waiting":0,"ok":true,"write_time_us":'), _fmt("%.1f", wt)),
        np.char.add(',"write_time_max_us":', _fmt("%.1f", wmax)))
    inst.t += [t, t + 0.000013, t + 0.4]
    inst.payload += [verify.astype(object), monitor, live.astype(object)]


def _periodic_standby(f: _Fleet, inst: _Inst, host: int, a: float, b: float) -> None:
    import numpy as np

    if b <= a:
        return
    t = np.arange(a + f.rng.uniform(0, f.tick), b, f.tick)
    if len(t) == 0:
        return
    lat = 0.4 * f.base[host] * f.rng.lognormal(0, 0.4, len(t)) * f.factor(host, t)
    p = np.char.add('"event":"lock_attempt","file":"master","mode":"exclusive",'
                    '"granted":false,"latency_s":', _fmt("%.6f", lat))
    inst.t.append(t)
    inst.payload.append(p.astype(object))


def _start_standby(f: _Fleet, qmgr: str, host: int, t: float) -> _Inst:
    s = f.new_instance(qmgr, host)
    _ev(s, t, "lock_attempt", file="master", mode="exclusive", granted=False,
        latency_s=round(float(f.base[host]), 6))
    _ev(s, t + 0.01, "lock_attempt", file="standby", mode="exclusive", granted=True,
        latency_s=round(float(f.base[host]), 6))
    _ev(s, t + 0.02, "role", role="standby")
    _ev(s, t + 0.03, "amq_message", amq="AMQ5051",
        text=f"A standby instance of queue manager '{qmgr}' has been started on {s.host}.")
    return s


def _take_over(f: _Fleet, s: _Inst, t: float, duration: float, gen: int, status: str) -> None:
    _ev(s, t, "lock_attempt", file="master", mode="exclusive", granted=True,
        latency_s=round(float(f.base[0]), 6))
    _ev(s, t + 0.001, "failover_start", from_status=status)
    _ev(s, t + 0.01, "role", role="active", generation=gen, failover=True)
    _ev(s, t + duration, "amq_message", amq="AMQ5975",
        text=f"Queue manager '{s.qmgr}' is now active on {s.host}.")
    _ev(s, t + duration + 0.0001, "failover_end", duration_s=round(duration, 4),
        recovery_s=round(duration * 0.7, 4))


def _simulate(f: _Fleet, qi: int) -> list[_Inst]:
    rng = f.rng
    qmgr = f"QM{qi:03d}"
    pair = [qi % f.h, (qi + 1 + qi // f.h) % f.h]
    if pair[1] == pair[0]:
        pair[1] = (pair[0] + 1) % f.h
    incidents: list[tuple[float, str]] = []
    for d in range(f.days):
        day = T0 + d * 86400
        if d % 7 == 6 and rng.random() < 0.5:
            incidents.append((day + 3 * 3600 + rng.uniform(0, 1800), "switchover"))
        if rng.random() < 0.05:
            incidents.append((day + rng.uniform(0, 86400), "kill"))
        r = rng.random()
        if r < 0.03:
            incidents.append((day + BACKUP[0] + rng.uniform(600, 2400), "stall"))
        elif r < 0.045:
            incidents.append((day + BACKUP[0] + rng.uniform(600, 2400), "partition"))
    # every fleet, however small, has one of each
    last = T0 + (f.days - 1) * 86400
    if qi == 0:
        incidents.append((last + BACKUP[0] + 1200, "partition"))
    elif qi == 2:
        incidents.append((T0 + 86400 + 12 * 3600, "kill"))
    elif qi == 3:
        incidents.append((T0 + 2 * 86400 + 3 * 3600, "switchover"))
    if qi == 1 and f.days >= 3:  # the flapping one: a bad hour
        day = T0 + (f.days // 2) * 86400 + BACKUP[0] + 300
        incidents += [(day + k * 600, "stall") for k in range(4)]
    for h in pair:
        incidents += [(t, f"loss:{h}:{down}") for t, down in f.losses.get(h, [])]
    incidents.sort()
    active_h, standby_h = pair[0], pair[1]
    insts: list[_Inst] = []
    t = T0 + rng.uniform(0, 60)
    act = f.new_instance(qmgr, active_h)
    _ev(act, t, "lock_attempt", file="master", mode="exclusive", granted=True,
        latency_s=0.001)
    _ev(act, t + 0.01, "role", role="active", generation=1, failover=False)
    _ev(act, t + 0.5, "amq_message", amq="AMQ8003", text=amq.text("AMQ8003", qmgr=qmgr))
    insts.append(act)
    sb: _Inst | None = _start_standby(f, qmgr, standby_h, t + 5)
    insts.append(sb)
    act_from, sb_from = t + 1, t + 6
    gen = 1
    sb_back: float | None = None  # when a restarted standby appears
    end = T0 + f.span
    for when, kind in incidents:
        if when <= act_from + 120:
            continue
        if sb is None and sb_back is not None and when > sb_back:
            sb = _start_standby(f, qmgr, standby_h, sb_back)
            insts.append(sb)
            sb_from, sb_back = sb_back + 1, None
        if kind.startswith("loss:"):
            _, h, down = kind.split(":")
            if int(h) == standby_h and sb is not None:
                _periodic_standby(f, sb, standby_h, sb_from, when)
                sb, sb_back = None, when + float(down)
                continue
            if int(h) != active_h:
                continue
        if sb is None:
            continue  # no standby: nothing to fail over to
        _periodic_active(f, act, active_h, act_from, when)
        _periodic_standby(f, sb, standby_h, sb_from, when)
        slow = float(f.factor(active_h, __import__("numpy").array([when]))[0])
        if kind == "switchover":
            _ev(act, when, "amq_message", amq="AMQ1005", text=amq.text("AMQ1005", qmgr=qmgr))
            _ev(act, when + 0.01, "role", role="ended", mode="immediate", switchover=True)
            gap, status, back = 0.3, "Ended immediately", when + rng.uniform(60, 600)
            dur = rng.lognormal(math.log(1.0), 0.3)
        elif kind == "kill":
            gap, status, back = rng.uniform(0.2, 1.5), "Running", when + rng.uniform(30, 300)
            dur = rng.lognormal(math.log(1.5), 0.3)
        elif kind.startswith("loss:"):
            down = float(kind.split(":")[2])
            gap, status, back = rng.uniform(20, 45), "Running", when + down
            dur = rng.lognormal(math.log(2.0), 0.3)
        else:  # stall / partition: the active stops itself, alive
            lat = round(float(f.base[active_h] * slow * rng.uniform(3, 8)), 6)
            _ev(act, when - 40, "verify", ok=True, latency_s=lat)
            if kind == "stall":
                stalled = round(float(rng.uniform(30.5, 40)), 3)
                _ev(act, when - 1, "monitor_stall", stalled_s=stalled)
                detail = f"the verify of the master lock has been stalled for {stalled:.1f}s"
                _ev(act, when, "fatal", amq="AMQ7280", detail=detail)
            else:
                act.local_tail = when - 1
                _ev(act, when - 1, "verify", ok=False, error="NFS4ERR_EXPIRED: timed out")
                _ev(act, when, "fatal", amq="AMQ7279", detail="verify of the master lock "
                    "failed: NFS4ERR_EXPIRED: timed out")
            gap, status, back = rng.uniform(5, 30), "Running", when + rng.uniform(60, 300)
            dur = rng.lognormal(math.log(2.5 * max(1.0, slow / 5)), 0.3)
        gen += 1
        _take_over(f, sb, when + gap, float(dur), gen, status)
        act, active_h, act_from = sb, standby_h, when + gap + float(dur) + 0.01
        standby_h = pair[1] if active_h == pair[0] else pair[0]
        sb, sb_back = None, back
    if sb is None and sb_back is not None and sb_back < end:
        sb = _start_standby(f, qmgr, standby_h, sb_back)
        insts.append(sb)
        sb_from = sb_back + 1
    _periodic_active(f, act, active_h, act_from, end)
    if sb is not None:
        _periodic_standby(f, sb, standby_h, sb_from, end)
    seen = {id(i) for i in insts}
    insts += [i for i in _all_seen(act, sb) if id(i) not in seen]
    return insts


def _all_seen(*xs: _Inst | None) -> list[_Inst]:
    return [x for x in xs if x is not None]


def _lines(inst: _Inst) -> tuple[Any, Any]:
    """(times, lines) of one instance, in time order, seq from 1."""
    import numpy as np

    t = np.concatenate(inst.t)
    pay = np.concatenate(inst.payload)
    order = np.argsort(t, kind="stable")
    t, pay = t[order], pay[order]
    ts = np.datetime_as_string((t * 1e6).astype("int64").astype("datetime64[us]"), unit="us")
    seq = np.arange(1, len(t) + 1).astype(str).astype(object)
    pre = '{"v":1,"ts":"'
    mid = (f'+00:00","qmgr":"{inst.qmgr}","host":"{inst.host}",'
           f'"instance_id":"{inst.iid}","seq":')
    return t, pre + ts.astype(object) + mid + seq + "," + pay + "}\n"


def _write(path: str, parts: list[tuple[Any, Any]]) -> int:
    import numpy as np

    if not parts:
        return 0
    t = np.concatenate([p[0] for p in parts])
    lines = np.concatenate([p[1] for p in parts])
    order = np.argsort(t, kind="stable")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write("".join(lines[order].tolist()))
    return len(t)


#: the most events one call writes (about 230 bytes each on disk)
MAX_EVENTS = 100_000_000


def generate(events: int, out: str, seed: int = 1,
             echo: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Write about ``events`` events under ``out``; returns what was written."""
    from miqm.errors import AnalysisError

    if events < 1000:
        raise AnalysisError(f"--events {events}: generate at least 1000 events (a fleet "
                            "needs some history)")
    if events > MAX_EVENTS:  # beyond it the arrays alone exhaust memory (MemoryError)
        raise AnalysisError(f"--events {events}: generate at most {MAX_EVENTS:,} events "
                            "(about 23 GB of history) at once; for more, generate several "
                            "histories with different --seed and --out and name them all "
                            "to miqm analyze run")
    if os.path.exists(out) and os.listdir(out):
        raise AnalysisError(f"{out} is not empty: generate into a new or empty directory")
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as exc:
        raise AnalysisError(f"cannot create {out}: {exc.strerror}") from None
    t0 = time.monotonic()
    f = _Fleet(events, seed)
    written = local = 0
    for qi in range(f.q):
        files: dict[str, list[tuple[Any, Any]]] = {}
        for inst in _simulate(f, qi):
            if not inst.t:
                continue
            t, lines = _lines(inst)
            if inst.local_tail is not None:
                keep = t < inst.local_tail
                lpath = os.path.join(out, "local", inst.host, "events", inst.qmgr,
                                     f"{inst.host}.jsonl")
                local += _write(lpath, [(t[-12:], lines[-12:])])
                t, lines = t[keep], lines[keep]
            files.setdefault(inst.host, []).append((t, lines))
        for host, parts in files.items():
            written += _write(os.path.join(out, "shared", f"QM{qi:03d}", "events",
                                           f"{host}.jsonl"), parts)
        if echo is not None and (qi + 1) % max(1, f.q // 10) == 0:
            echo(f"generate: {qi + 1}/{f.q} queue managers, {written:,} events "
                 f"({time.monotonic() - t0:.1f}s)")
    took = time.monotonic() - t0
    return {"events": written, "local_copy_lines": local, "qmgrs": f.q, "hosts": f.h,
            "days": f.days, "tick_s": round(f.tick, 3), "seconds": round(took, 3),
            "events_per_s": round(written / took) if took > 0 else None, "out": out}
