"""The analysis benchmark: ``python -m miqm.bench.analyze [--sizes 1000000,10000000]``.

For each size: a synthetic fleet history (``miqm analyze generate``, kept under ``--dir``
and reused when it is there), then ``miqm analyze run`` on Spark (``--master``, default
``local[2]``) in a fresh process, so every size pays its own JVM start-up, reported
apart; and for sizes up to ``--pandas-max`` the same analysis in plain pandas, one
process (:mod:`miqm.analysis.pyref`). Prints progress lines on stderr (the analysis'
stage lines included) and the figures: wall time, events per second, JVM CPU seconds
per stage, the ratio of the largest run to the smallest (target <= 12 for 10M/1M), the
load average before and after. ``--json``: one JSON object on stdout at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any


def _say(msg: str) -> None:
    print(f"bench analyze: {msg}", file=sys.stderr, flush=True)


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _generate(n: int, seed: int, root: str) -> str:
    """The history of ``n`` events and ``seed`` under ``root``: reused when an earlier run
    finished generating it (its directory names the seed: a history of another seed was
    reused as this one's), made again when an earlier run was stopped half-way (the
    generator refused the directory it left, "not empty", at every later run)."""
    import shutil

    out = os.path.join(root, f"{n}-seed{seed}")
    done = os.path.join(out, ".generated.json")
    if os.path.exists(done):
        _say(f"{n:,} events: reusing {out}")
        return out
    from miqm.analysis.generate import generate

    if os.path.isdir(out):
        _say(f"{n:,} events: {out} was left half-made by an earlier run: made again")
        shutil.rmtree(out)
    _say(f"{n:,} events: generating into {out} ...")
    r = generate(n, out, seed=seed)
    _say(f"{n:,} events: generated {r['events']:,} in {r['seconds']:.1f}s")
    with open(done, "w") as f:
        json.dump(r, f)
    return out


def _one_spark(history: str, out: str, master: str) -> None:
    """In the child: the analysis with stage lines on stderr, the summary on stdout."""
    from miqm.analysis.run import Progress, analyze

    progress = Progress(9, enabled=True,
                        echo=lambda s: print(f"bench analyze:   {s}", file=sys.stderr,
                                             flush=True))
    s = analyze([history], out, master=master, progress=progress, report=False)
    print(json.dumps(s, default=str))


def _one_pandas(history: str) -> None:
    """In the child: the pandas reference, its wall and CPU time and peak memory."""
    from miqm.analysis.pyref import analyze

    t0 = time.monotonic()
    r = analyze([history])
    wall = time.monotonic() - t0
    ru = resource.getrusage(resource.RUSAGE_SELF)
    keep = {k: r[k] for k in ("events", "failovers", "failover_seconds",
                              "spurious_failovers", "lock_verify_seconds") if k in r}
    print(json.dumps({"wall_s": round(wall, 3), "cpu_s": round(ru.ru_utime + ru.ru_stime, 2),
                      "max_rss_mb": round(ru.ru_maxrss / 1024), **keep}, default=str))


def _child(args: list[str]) -> dict[str, Any]:
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "miqm.bench.analyze", *args],
                       stdout=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise SystemExit(f"bench analyze: {' '.join(args[:2])} failed (exit "
                         f"{p.returncode}); see the lines above")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    r["process_wall_s"] = round(time.monotonic() - t0, 3)
    return r


def run(sizes: list[int], root: str, master: str, seed: int, pandas_max: int) -> dict:
    """Every size, Spark then (small enough) pandas; the figures as a dict."""
    results: dict[str, Any] = {"master": master, "cpus": os.cpu_count(),
                               "load_before": _load(), "runs": []}
    for n in sizes:
        hist = _generate(n, seed, root)
        _say(f"{n:,} events: Spark {master} (load {_load()}) ...")
        s = _child(["--one-spark", hist, os.path.join(root, f"out-{n}"), master])
        row: dict[str, Any] = {
            "size": n, "events": s["events"], "lines": s["lines"],
            "spark_startup_s": s["spark_startup_s"], "spark_analysis_s": s["analysis_s"],
            "spark_events_per_s": round(s["events"] / s["analysis_s"]),
            "spark_jvm_cpu_s": s.get("analysis_jvm_cpu_s"),
            "stage_s": s.get("stage_s"), "stage_jvm_cpu_s": s.get("stage_jvm_cpu_s"),
            "failovers": s["failovers"], "failover_seconds": s["failover_seconds"],
            "spurious_failovers": s["spurious_failovers"],
            "lock_verify_seconds": s["lock_verify_seconds"], "load_after_spark": _load()}
        _say(f"{n:,} events: Spark start-up {row['spark_startup_s']:.1f}s, analysis "
             f"{row['spark_analysis_s']:.1f}s ({row['spark_events_per_s']:,} events/s, "
             f"JVM CPU {row['spark_jvm_cpu_s']}s), load {row['load_after_spark']}")
        if n <= pandas_max:
            _say(f"{n:,} events: pandas, one process ...")
            p = _child(["--one-pandas", hist])
            row["pandas_s"] = p["wall_s"]
            row["pandas_cpu_s"] = p["cpu_s"]
            row["pandas_max_rss_mb"] = p["max_rss_mb"]
            row["pandas_events_per_s"] = round(p["events"] / p["wall_s"])
            row["pandas_agrees"] = all(p.get(k) == s.get(k) for k in (
                "events", "failovers", "failover_seconds", "spurious_failovers",
                "lock_verify_seconds"))
            row["load_after_pandas"] = _load()
            _say(f"{n:,} events: pandas {p['wall_s']:.1f}s (CPU {p['cpu_s']}s, "
                 f"{p['max_rss_mb']} MB), same answers: {row['pandas_agrees']}")
        results["runs"].append(row)
    runs = results["runs"]
    if len(runs) >= 2:
        a, b = runs[0], runs[-1]
        results["ratio"] = {
            "sizes": f"{b['size']}/{a['size']}",
            "events": round(b["events"] / a["events"], 2),
            "analysis_wall": round(b["spark_analysis_s"] / a["spark_analysis_s"], 2),
            "analysis_jvm_cpu": (round(b["spark_jvm_cpu_s"] / a["spark_jvm_cpu_s"], 2)
                                 if a["spark_jvm_cpu_s"] and b["spark_jvm_cpu_s"] else None)}
        _say(f"ratio {results['ratio']}")
    results["load_after"] = _load()
    return results


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module's docstring)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--one-spark":
        _one_spark(*argv[1:4])
        return 0
    if argv and argv[0] == "--one-pandas":
        _one_pandas(argv[1])
        return 0
    ap = argparse.ArgumentParser(prog="python -m miqm.bench.analyze",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000000,10000000",
                    help="event counts, comma-separated, smallest first")
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(),
                                                  "miqm-bench-analyze"),
                    help="where the histories are generated (and reused) and analysed")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--pandas-max", type=int, default=1_000_000,
                    help="run the pandas reference for sizes up to this")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    try:
        sizes = sorted(int(x) for x in a.sizes.split(",") if x.strip())
    except ValueError:
        print(f"bench analyze: --sizes {a.sizes!r} is not a list of numbers: give e.g. "
              "1000000,10000000", file=sys.stderr)
        return 2
    if not sizes or min(sizes) < 1000:
        print("bench analyze: give sizes of at least 1000 events", file=sys.stderr)
        return 2
    r = run(sizes, a.dir, a.master, a.seed, a.pandas_max)
    if a.json:
        print(json.dumps(r, default=str))
    else:
        for row in r["runs"]:
            print(json.dumps(row, default=str))
        print(json.dumps({k: v for k, v in r.items() if k != "runs"}, default=str))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
