"""``miqm analyze run``: read histories, compute, write tables (Parquet + CSV),
``summary.json`` and ``report.html``. Spark does the work over the events; only the small
aggregate tables come back to the driver to be written and drawn."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from miqm.analysis import PERCENTILE_DEFINITION
from miqm.errors import AnalysisError

#: tables written, in this order (DIR/tables/<name>.parquet and DIR/tables/<name>.csv)
TABLES = ("takeovers", "durations", "latency", "slow_windows", "spurious", "flapping",
          "log_write_hwm", "instances", "timeline")


class Progress:
    """Stage lines ``analyze [i/n] what (elapsed)`` on stderr, only when it is a terminal
    and the output is not JSON."""

    def __init__(self, total: int, enabled: bool | None = None,
                 echo: Callable[[str], None] | None = None) -> None:
        self.total = total
        self.i = 0
        self.t0 = time.monotonic()
        if enabled is None:
            enabled = sys.stderr.isatty()
        self._echo = echo or (lambda s: print(s, file=sys.stderr, flush=True))
        self.enabled = enabled
        self.times: dict[str, float] = {}
        #: JVM CPU seconds per stage (local masters), when :attr:`cpu` is set
        self.cpu_times: dict[str, float] = {}
        self.cpu: Callable[[], float | None] | None = None
        self._last: tuple[str, float] | None = None
        self._last_cpu: float | None = None

    def stage(self, what: str) -> None:
        """Announce the next stage (and note how long the previous one took)."""
        now = time.monotonic()
        cpu = self.cpu() if self.cpu is not None else None
        if self._last is not None:
            self.times[self._last[0]] = round(now - self._last[1], 3)
            if cpu is not None and self._last_cpu is not None:
                self.cpu_times[self._last[0]] = round(cpu - self._last_cpu, 2)
        self._last = (what.split(" (")[0], now)
        self._last_cpu = cpu
        self.i += 1
        if self.enabled:
            self._echo(f"analyze [{self.i}/{self.total}] {what} "
                       f"({time.monotonic() - self.t0:.1f}s)")


def _pd(df: Any) -> Any:
    """A small aggregate to pandas (never called on raw events)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pyspark's notes about the pandas version
        return df.toPandas()


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float (at any depth) made None: summary.json
    and ``--json`` stay JSON (Python writes NaN and Infinity, which no JSON reader takes)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def _three(values: dict[str, Any], keys: tuple[str, ...]) -> dict[str, float | None]:
    return {k: (None if values.get(k) is None else float(values[k])) for k in keys}


def compute_all(spark: Any, paths: list[str], progress: Progress,
                link_dir: str | None = None) -> tuple[dict, dict]:
    """(tables as pandas DataFrames, summary dict). ``link_dir``: see
    :func:`miqm.analysis.history.read_lines`."""
    from miqm.analysis import compute as C
    from miqm.analysis.history import parse, read_lines

    progress.stage("reading and parsing the histories")
    loaded = parse(read_lines(spark, paths, link_dir))
    ev = loaded.events
    counts = loaded.counts
    if counts["events"] == 0:
        raise AnalysisError(f"no events in {', '.join(paths)} ({counts['lines']} lines, "
                            f"{counts['malformed_lines']} malformed): is this an event "
                            "history (events/*.jsonl)?")
    tables: dict[str, Any] = {}
    progress.stage("instances and takeovers")
    inst = C.instances(ev).cache()
    tk = C.takeovers(ev, inst).cache()
    tables["instances"] = _pd(inst.orderBy("qmgr", "first_s"))
    tables["takeovers"] = _pd(tk)
    tables["timeline"] = _pd(C.timeline(inst, tk))
    tables["flapping"] = _pd(C.flapping(tk))
    progress.stage("failover and switchover durations")
    tables["durations"] = _pd(C.duration_stats(tk))
    progress.stage("lock and verify latencies by host and hour")
    lat = C.latencies(ev).cache()
    tables["latency"] = _pd(lat)
    progress.stage("slow-I/O windows")
    windows = C.slow_windows(ev, lat).cache()
    tables["slow_windows"] = _pd(windows)
    progress.stage("spurious failovers and what preceded them")
    tables["spurious"] = _pd(C.spurious(ev, tk, windows))
    progress.stage("log write high-water marks")
    tables["log_write_hwm"] = _pd(C.log_write_hwm(ev))
    it = tables["instances"]  # one row per instance: the span without another pass
    span = {"a": it["first_s"].min(), "b": it["last_s"].max(), "q": it["qmgr"].nunique(),
            "h": it["host"].nunique(), "i": len(it)}
    # the summary's percentiles over all failovers / switchovers: the durations table's
    # qmgr "*" rows, computed in Spark like the rest
    d = tables["durations"]

    def over_all(kind: str) -> dict:
        row = d[(d["qmgr"] == "*") & (d["kind"] == kind)]
        if row.empty:
            return {}
        r = row.iloc[0]
        return {"p50": r["p50_s"], "p95": r["p95_s"], "max": r["max_s"]}

    fo, so = over_all("failover"), over_all("switchover")
    summary = build_summary(tables, counts, span, fo, so)
    for df in (inst, tk, lat, windows):
        df.unpersist()
    loaded.unpersist()
    return tables, summary


def _utc(sec: Any) -> str | None:
    import datetime as dt

    if sec is None or sec != sec:
        return None
    return dt.datetime.fromtimestamp(float(sec), dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def build_summary(tables: dict, counts: dict, span: Any, fo: dict, so: dict) -> dict:
    """summary.json (keys documented in docs/analysis.md)."""
    tk = tables["takeovers"]
    lat = tables["latency"]

    def fleet(kind: str) -> dict[str, float | None]:
        row = lat[(lat["kind"] == kind) & (lat["host"] == "*") & (lat["hour"] == -1)]
        if row.empty:
            return {"p50": None, "p99": None}
        r = row.iloc[0]
        return {"p50": float(r["p50_s"]), "p99": float(r["p99_s"])}

    failovers = tk[tk["kind"] == "failover"]
    causes = {str(k): int(v) for k, v in failovers["cause"].value_counts().items()}
    win = tables["slow_windows"]
    hours = (win["start_hour"].value_counts().head(3).index.tolist() if len(win) else [])
    hwm = tables["log_write_hwm"]
    # every active that stopped itself, taken over or not: with no standby running, its
    # stop is no takeover (the restart by hand is a first activation) and the failover
    # figures never showed it
    it = tables["instances"]
    stops = it[it["active_s"].notna() & it["fatal_s"].notna()]
    self_stops = {str(k): int(v) for k, v in stops["fatal_amq"].fillna("none")
                  .value_counts().sort_index().items()}
    return {
        "failovers": len(failovers),
        "failover_seconds": _three(fo, ("p50", "p95", "max")),
        # failovers with no failover_end (the new active stopped before it served): in
        # "failovers", not in "failover_seconds"
        "failovers_unmeasured": int(failovers["duration_s"].isna().sum()),
        "lock_verify_seconds": fleet("verify"),
        "spurious_failovers": int(causes.get("spurious", 0)),
        "switchovers": int((tk["kind"] == "switchover").sum()),
        "switchover_seconds": _three(so, ("p50", "p95", "max")),
        "failovers_by_cause": causes,
        "active_self_stops": self_stops,
        "lock_acquire_seconds": fleet("lock_acquire"),
        "slow_windows": len(win),
        "slow_window_start_hours": [int(h) for h in hours],
        "flapping_qmgrs": [str(q) for q in tables["flapping"]["qmgr"].tolist()],
        "log_write_hwm_us": (None if hwm.empty else float(hwm["hwm_write_us"].max())),
        "qmgrs": int(span["q"]), "hosts": int(span["h"]), "instances": int(span["i"]),
        "from": _utc(span["a"]), "to": _utc(span["b"]),
        **counts,
        "percentile": PERCENTILE_DEFINITION,
    }


def write_tables(tables: dict, out: str) -> None:
    """DIR/tables/<name>.parquet and .csv (small aggregates, written by the driver)."""
    d = os.path.join(out, "tables")
    os.makedirs(d, exist_ok=True)
    for name in TABLES:
        df = tables[name]
        df.to_parquet(os.path.join(d, f"{name}.parquet"), index=False)
        df.to_csv(os.path.join(d, f"{name}.csv"), index=False)


#: how report.html begins (render): a stale one of an earlier run is recognised by it
REPORT_HEAD = "<!DOCTYPE html><html><head><meta charset='utf-8'><title>miqm analysis</title>"


def prepare_out(out: str) -> tuple[str, bool]:
    """Make ``out`` if need be and a staging directory in it, before any Spark work: a
    directory that cannot be written is one line now, not after the whole job (it was a
    PermissionError traceback after the analysis had run). Returns (staging directory,
    whether ``out`` was made here)."""
    import tempfile

    made = not os.path.isdir(out)
    try:
        os.makedirs(out, exist_ok=True)
        staging = tempfile.mkdtemp(prefix=".miqm-analyze-", dir=out)
    except OSError as exc:
        if made:
            _rmdir_quietly(out)
        raise AnalysisError(f"cannot write the output directory {out}: "
                            f"{exc.strerror or exc}: name a directory this user can "
                            "write with --out") from None
    return staging, made


def _rmdir_quietly(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass


def publish(staging: str, out: str, report: bool) -> None:
    """Move what was written in ``staging`` into ``out``, file by file (each rename
    replaces the earlier run's file whole: a reader never sees half a summary.json, and
    a write that failed, the disk full, left the earlier run's outputs as they were).
    Without a report, an earlier run's report.html is removed: it would describe another
    history beside this summary."""
    d = os.path.join(out, "tables")
    os.makedirs(d, exist_ok=True)
    for name in sorted(os.listdir(os.path.join(staging, "tables"))):
        os.replace(os.path.join(staging, "tables", name), os.path.join(d, name))
    names = ["summary.json", *(["report.html"] if report else [])]
    for name in names:
        os.replace(os.path.join(staging, name), os.path.join(out, name))
    old = os.path.join(out, "report.html")
    if not report and os.path.isfile(old):
        with open(old, encoding="utf-8", errors="replace") as f:
            ours = f.read(len(REPORT_HEAD)) == REPORT_HEAD
        if ours:
            os.unlink(old)


def spark_failure_line(exc: BaseException) -> str:
    """One line for a failed Spark job (the JVM's stack trace stays out of it)."""
    import re

    from miqm.analysis.spark import _reason, spark_log_path

    text = str(exc)
    bad = re.search(r"FAILED_READ_FILE\S* Encountered error while reading file (\S+?)\.?\s",
                    text)
    if bad:  # one file Spark could not read (a .gz cut short): name it and why
        path = re.sub(r"^file:(//)?", "", bad.group(1))
        cause = re.findall(r"Caused by: [\w.$]+(?:: (.*))?", text)
        why = next((c.strip() for c in reversed(cause) if c.strip()), "unreadable")
        hint = (" (a compressed file cut short? check it with gzip -t, or leave it out)"
                if path.endswith((".gz", ".bz2", ".zst", ".lz4", ".snappy", ".deflate"))
                else "")
        return f"cannot read the history file {path}: {why[:200]}{hint}"
    if "OutOfMemoryError" in text:
        return ("Spark ran out of memory: set MIQM_SPARK_DRIVER_MEMORY higher (default 4g) "
                "or run on a cluster with --master")
    return f"the Spark job failed: {_reason(exc)[:300]} (Spark's log: {spark_log_path()})"


def jvm_cpu_seconds(spark: Any) -> float | None:
    """User + system CPU seconds of the driver JVM so far (local masters, Linux)."""
    try:
        if not str(spark.sparkContext.master).startswith("local"):
            return None
        pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except Exception:
        return None


def analyze(paths: list[str], out: str, master: str | None = None,
            progress: Progress | None = None, spark: Any = None,
            report: bool = True) -> dict:
    """The whole ``miqm analyze run``; returns the summary (also in DIR/summary.json)."""
    from miqm.analysis.history import split_inputs

    split_inputs(paths)  # a missing path is one clear line before Spark starts
    staging, made = prepare_out(out)
    try:
        return _analyze(paths, out, staging, master, progress, spark, report)
    except BaseException:
        if made:  # nothing of this run is left behind; an earlier run's outputs stay
            import shutil

            shutil.rmtree(out, ignore_errors=True)
        raise
    finally:
        import shutil

        shutil.rmtree(staging, ignore_errors=True)


def _analyze(paths: list[str], out: str, staging: str, master: str | None,
             progress: Progress | None, spark: Any, report: bool) -> dict:
    progress = progress or Progress(9, enabled=False)
    if spark is None:
        from miqm.analysis.spark import session

        progress.stage(f"starting Spark ({master or 'local[*]'})")
        t0 = time.monotonic()
        spark = session(master)
        startup = time.monotonic() - t0
    else:
        progress.stage("Spark already running")
        startup = 0.0
    t1 = time.monotonic()
    cpu0 = jvm_cpu_seconds(spark)
    if cpu0 is not None:
        progress.cpu = lambda: jvm_cpu_seconds(spark)
    try:
        tables, summary = compute_all(spark, paths, progress,
                                      link_dir=os.path.join(staging, "inputs"))
    except AnalysisError:
        raise
    except Exception as exc:
        raise AnalysisError(spark_failure_line(exc)) from None
    cpu1 = jvm_cpu_seconds(spark)
    summary["spark_master"] = spark.sparkContext.master
    summary["spark_startup_s"] = round(startup, 3)
    summary["analysis_s"] = round(time.monotonic() - t1, 3)
    # CPU the local JVM used for the analysis: a figure the other load on the machine
    # does not inflate (None on a cluster)
    summary["analysis_jvm_cpu_s"] = (round(cpu1 - cpu0, 2) if cpu0 is not None
                                     and cpu1 is not None else None)
    progress.stage("writing tables, summary.json and report.html" if report else
                   "writing tables and summary.json")
    summary["stage_s"] = dict(progress.times)
    summary["stage_jvm_cpu_s"] = dict(progress.cpu_times)
    summary = finite(summary)
    try:
        write_tables(tables, staging)
        with open(os.path.join(staging, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2, default=str, allow_nan=False)
            f.write("\n")
        if report:
            from miqm.analysis.report import render

            render(tables, summary, os.path.join(staging, "report.html"))
        publish(staging, out, report)
    except OSError as exc:
        raise AnalysisError(f"cannot write the results in {out}: {exc.strerror or exc}: "
                            "free space there or name another directory with --out") \
            from None
    return summary
