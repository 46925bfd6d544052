"""The core of the analysis in one process, plain Python and pandas: the comparison for
the Spark benchmark (docs/analysis.md) and a cross-check in the tests. Same rules and the
same percentile definition (nearest rank) as :mod:`miqm.analysis.compute`: parsing and
de-duplication, takeovers and their causes, durations, latencies by host and hour, slow
windows. Everything is held in memory: fine for a few million events, not for a fleet's
year."""

from __future__ import annotations

import json
import math
import os
import re
from datetime import UTC, datetime
from typing import Any

from miqm.analysis.compute import (
    FLAP_TAKEOVERS,
    FLAP_WINDOW_S,
    GENERATION_GAP,
    HOST_ALIVE_S,
    SELF_STOP_SPURIOUS,
    SLOW_BUCKET_S,
    SLOW_FACTOR,
    SLOW_MIN_VERIFIES,
)
from miqm.analysis.history import KEEP, LINE_START, NON_NEGATIVE, TS_PATTERN

TS_FROM_S, TS_UNTIL_S = 0.0, 7_258_118_400.0  # history.TS_FROM, TS_UNTIL (UTC)


def _files(paths: list[str]) -> list[str]:
    out = []
    for p in paths:
        if os.path.isdir(p):
            for d, _, names in os.walk(p):
                out += [os.path.join(d, n) for n in sorted(names) if ".jsonl" in n]
        else:
            out.append(p)
    return out


def _pieces(lines: Any) -> Any:
    """Every line, a glued one (history.LINE_START past its start) split there."""
    for line in lines:
        if line.find(LINE_START, 1) > 0:
            yield from (x for x in re.split(r'(?=\{"v":)', line) if x)
        else:
            yield line


def _nr(values: Any, p: float) -> float | None:
    xs = sorted(values)
    return xs[max(1, math.ceil(p * len(xs))) - 1] if xs else None


def load(paths: list[str]) -> tuple[Any, dict[str, int]]:
    """Events as a pandas DataFrame (de-duplicated) and the line counts."""
    import pandas as pd

    rows: list[dict] = []
    bad = blank = unsupported = 0
    seen: set[tuple] = set()
    for f in _files(paths):
        with open(f, encoding="utf-8", errors="replace") as fh:
            for line in _pieces(fh):
                if not line.strip():
                    blank += 1
                    continue
                try:
                    e = json.loads(line)
                    when = datetime.fromisoformat(e["ts"])
                    if when.tzinfo is None:  # as Spark reads it (session time zone UTC),
                        when = when.replace(tzinfo=UTC)  # not in this machine's zone
                    ts = when.timestamp()
                    if not all(isinstance(e.get(k), str) for k in
                               ("qmgr", "host", "instance_id", "event")):
                        raise ValueError
                    # the same rules as miqm.analysis.history.parse
                    if not (isinstance(e["ts"], str) and re.match(TS_PATTERN, e["ts"])
                            and TS_FROM_S <= ts < TS_UNTIL_S):
                        raise ValueError
                    for k in NON_NEGATIVE:
                        x = e.get(k)
                        if x is not None and not (isinstance(x, int | float)
                                                  and 0 <= x < math.inf):
                            raise ValueError
                except (ValueError, KeyError, TypeError):
                    bad += 1
                    continue
                if e.get("v", 1) != 1:  # as Spark: a line without v is of version 1
                    unsupported += 1
                    continue
                key = (e["instance_id"], e.get("seq", e["ts"]), e["event"])
                if key in seen:
                    continue
                seen.add(key)
                r = {k: e.get(k) for k in KEEP}
                r["tsec"] = ts
                rows.append(r)
    df = pd.DataFrame(rows, columns=[*KEEP, "tsec"])
    return df, {"events": len(df), "malformed_lines": bad, "blank_lines": blank,
                "unsupported_version_lines": unsupported}


def analyze(paths: list[str]) -> dict[str, Any]:
    """The core figures, as summary.json names them, plus the takeovers table."""
    import pandas as pd

    df, counts = load(paths)
    ev = df.sort_values("tsec", kind="stable")
    g = ev.groupby("instance_id")
    inst = g.agg(qmgr=("qmgr", "first"), host=("host", "first"), last_s=("tsec", "max"))
    fat = ev[ev["event"] == "fatal"]
    fat = fat.assign(lease_out=pd.to_numeric(fat["lease_age_s"], errors="coerce")
                     >= pd.to_numeric(fat["lease_s"], errors="coerce"))
    fatal = fat.groupby("instance_id").agg(
        fatal_amq=("amq", "first"), fatal_s=("tsec", "first"),
        fatal_lease_out=("lease_out", "max"))
    ended = ev[(ev["event"] == "role") & (ev["role"] == "ended")].groupby(
        "instance_id").agg(ended_s=("tsec", "first"), switchover=("switchover", "max"))
    inst = inst.join(fatal).join(ended)
    act = ev[(ev["event"] == "role") & (ev["role"] == "active")].sort_values(
        ["qmgr", "tsec", "instance_id"])
    act = act.assign(prev=act.groupby("qmgr")["instance_id"].shift(),
                     prev_gen=act.groupby("qmgr")["generation"].shift())
    # the predecessor by generation (compute.takeovers: the hosts' clocks do not matter)
    by_qmgr = {q: list(zip(x["generation"], x["tsec"], x["instance_id"], strict=True))
               for q, x in act.groupby("qmgr")}

    def predecessor(r: Any) -> Any:
        g = r.generation
        if g is not None and g == g:
            cands = [(-pg, abs(pt - r.tsec), pi) for pg, pt, pi in by_qmgr[r.qmgr]
                     if pg is not None and pg == pg and g - GENERATION_GAP <= pg < g
                     and pi != r.instance_id]
            if cands:
                return min(cands)[2]
        if g is None or g != g or r.prev_gen is None or r.prev_gen != r.prev_gen:
            return r.prev
        return None
    fo_end = ev[ev["event"] == "failover_end"].groupby("instance_id").agg(
        end_s=("tsec", "first"), duration_s=("duration_s", "first"))
    by_host = {h: x["tsec"].to_numpy() for h, x in ev.groupby("host")}
    by_host_inst = {h: x["instance_id"].to_numpy() for h, x in ev.groupby("host")}
    tk = []
    for r in act[act["failover"].fillna(False).astype(bool)].itertuples():
        end = fo_end["end_s"].get(r.instance_id)
        dur = fo_end["duration_s"].get(r.instance_id)
        until = end if end is not None and end == end else r.tsec
        cause = "unknown"
        prev = predecessor(r)
        if isinstance(prev, str):
            p = inst.loc[prev]
            if p["switchover"] is True:
                cause = "switchover"
            elif isinstance(p["fatal_amq"], str) and p["fatal_lease_out"] == True:  # noqa: E712
                cause = "paused"
            elif p["fatal_amq"] in SELF_STOP_SPURIOUS:
                cause = "spurious"
            elif isinstance(p["fatal_amq"], str):
                cause = "self_stop"
            elif p["ended_s"] == p["ended_s"] and p["ended_s"] is not None:
                cause = "ended"
            else:
                ts, ids = by_host[p["host"]], by_host_inst[p["host"]]
                heard = ((ts > until) & (ts <= until + HOST_ALIVE_S) & (ids != prev)).any()
                cause = "kill" if heard else "host_loss"
        tk.append({"qmgr": r.qmgr, "active_s": r.tsec, "cause": cause, "duration_s": dur,
                   "kind": "switchover" if cause == "switchover" else "failover"})
    fo = [t["duration_s"] for t in tk if t["kind"] == "failover" and t["duration_s"] == t[
        "duration_s"] and t["duration_s"] is not None]
    causes: dict[str, int] = {}
    for t in tk:
        if t["kind"] == "failover":
            causes[t["cause"]] = causes.get(t["cause"], 0) + 1
    ver = ev[(ev["event"] == "verify") & (ev["ok"] == True) & ev["latency_s"].notna()]  # noqa: E712
    lock = ev[(ev["event"] == "lock_attempt") & ev["latency_s"].notna()]
    hours = (ver["tsec"] // 3600 % 24).astype(int)
    by_hh = {k: (_nr(x, 0.5), _nr(x, 0.99)) for k, x in
             ver["latency_s"].groupby([ver["host"], hours])}
    base = {h: _nr(x, 0.5) for h, x in ver.groupby("host")["latency_s"]}
    bucket = (ver["tsec"] // SLOW_BUCKET_S).astype(int)
    slow = sorted((h, b) for (h, b), x in ver["latency_s"].groupby([ver["host"], bucket])
                  if len(x) >= SLOW_MIN_VERIFIES and _nr(x, 0.5) >= base[h] * SLOW_FACTOR)
    windows = sum(1 for i, (h, b) in enumerate(slow)
                  if i == 0 or slow[i - 1] != (h, b - 1))
    flapping = []
    for q, x in (_df(tk).groupby("qmgr") if tk else []):
        s = sorted(x["active_s"])
        if any(sum(1 for u in s if t - FLAP_WINDOW_S <= u <= t) >= FLAP_TAKEOVERS for t in s):
            flapping.append(q)
    return {
        **counts,
        "failovers": len(fo) if len(fo) == sum(causes.values()) else sum(causes.values()),
        "failover_seconds": {"p50": _nr(fo, 0.5), "p95": _nr(fo, 0.95),
                             "max": max(fo) if fo else None},
        "spurious_failovers": causes.get("spurious", 0),
        "switchovers": sum(1 for t in tk if t["kind"] == "switchover"),
        "failovers_by_cause": causes,
        "lock_verify_seconds": {"p50": _nr(ver["latency_s"], 0.5),
                                "p99": _nr(ver["latency_s"], 0.99)},
        "lock_acquire_seconds": {"p50": _nr(lock["latency_s"], 0.5),
                                 "p99": _nr(lock["latency_s"], 0.99)},
        "slow_windows": windows, "flapping_qmgrs": sorted(flapping),
        "latency_by_host_hour": len(by_hh),
    }


def _df(rows: list[dict]) -> Any:
    import pandas as pd

    return pd.DataFrame(rows)
