"""Reading event histories into Spark: an explicit schema, malformed and torn lines counted
and skipped, the shared and host-local copies of the same events merged (format:
docs/events.md)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from miqm.errors import AnalysisError

#: (name, Spark SQL type) of every field the analysis reads; others (``file``, ``mode``,
#: ``reason``, ``text``, ...) are ignored, and not parsing them is part of the speed
FIELDS: list[tuple[str, str]] = [
    ("v", "int"), ("ts", "string"), ("qmgr", "string"), ("host", "string"),
    ("instance_id", "string"), ("seq", "bigint"), ("event", "string"),
    ("latency_s", "double"), ("role", "string"), ("generation", "bigint"),
    ("failover", "boolean"), ("switchover", "boolean"), ("duration_s", "double"),
    ("recovery_s", "double"), ("ok", "boolean"), ("stalled_s", "double"), ("amq", "string"),
    ("detail", "string"), ("write_time_us", "double"), ("write_time_max_us", "double"),
    ("lease_age_s", "double"), ("lease_s", "double"),
]
#: the columns kept after parsing
KEEP = [n for n, _ in FIELDS if n not in ("v", "ts")]
SUPPORTED_VERSION = 1
#: times and sizes: a line where one is present but not a finite number >= 0 (NaN,
#: Infinity, 1e999, -5: what no instance measures) is malformed, so that no NaN or
#: infinity reaches a percentile, summary.json or a chart
NON_NEGATIVE = ("latency_s", "duration_s", "recovery_s", "stalled_s", "write_time_us",
                "write_time_max_us", "lease_age_s", "lease_s")
#: ``ts`` must be ISO-8601 text (a JSON number reads as text, and Spark takes "12345" for
#: the year 12345) within these bounds, which every clock that wrote a history is in and
#: the report's dates (years 1-9999) can draw
TS_PATTERN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}"
TS_FROM, TS_UNTIL = "1970-01-01 00:00:00", "2200-01-01 00:00:00"
#: how every event line begins (miqm.ha.events writes ``v`` first, no spaces). A line
#: with it again further on is a torn line (a crash or a full disk cut a write short)
#: that the next write, by the same instance or the next one on that host, appended to:
#: it is split there, so the whole event after the tear is kept (it was one malformed
#: line, and the event lost was often the new instance's first, its role). No event
#: holds it inside: a string escapes the quotes, and no field is an object keyed "v".
LINE_START = '{"v":'


def schema_ddl() -> str:
    """The explicit schema, as Spark DDL."""
    return ", ".join(f"`{n}` {t}" for n, t in FIELDS)


@dataclass
class Loaded:
    """The parsed, de-duplicated events (a Spark DataFrame) and the line counts."""

    events: Any
    counts: dict[str, int]

    def unpersist(self) -> None:
        """Drop the cached events."""
        self.events.unpersist()


def _is_remote(path: str) -> bool:
    return "://" in path and not path.startswith("file:")


def _literal(path: str) -> str:
    """A local path as Spark must be given it to read that path and no other: Spark
    (Hadoop) takes every path for a glob, so a directory named ``hist[1]`` was 'Path does
    not exist' (the pattern matches ``hist1``)."""
    return "".join("\\" + c if c in "\\*?[]{}" else c for c in path)


#: the history files a directory is searched for: ``<host>.jsonl`` and its rotations
FILE_PATTERN = "*.jsonl*"


def _walk(top: str) -> list[str]:
    """Every history file under the local directory ``top``, found here rather than by
    Spark: Spark's listing leaves out every file and directory whose name begins with
    ``_`` or ``.``, and ``_QM1`` is a queue manager name (its events/ directory was
    skipped whole, silently), ``_h`` or ``.h`` a host name. Symbolic links to
    directories are followed, each directory once."""
    import fnmatch

    out: list[str] = []
    seen: set[str] = set()

    def refuse(exc: OSError) -> None:  # os.walk would skip the directory, silently
        raise AnalysisError(f"cannot list {exc.filename}: {exc.strerror}: make it readable "
                            "(or name the directories beside it instead)")

    for d, subdirs, names in os.walk(top, onerror=refuse, followlinks=True):
        real = os.path.realpath(d)
        if real in seen:
            subdirs[:] = []
            continue
        seen.add(real)
        subdirs.sort()
        out += [os.path.join(d, n) for n in sorted(names)
                if fnmatch.fnmatchcase(n, FILE_PATTERN) and os.path.isfile(os.path.join(d, n))]
    return out


def split_inputs(paths: list[str]) -> tuple[list[str], list[str]]:
    """(remote directories, files) to read: a local directory's history files are
    listed here; local paths are checked here, with one clear line."""
    dirs: list[str] = []
    files: list[str] = []
    if not paths:
        raise AnalysisError("no history given: name files or directories of event "
                            "histories (events/*.jsonl)")
    for p in paths:
        if _is_remote(p):
            (dirs if p.endswith("/") else files).append(p)
            continue
        local = p[len("file:"):] if p.startswith("file:") else p
        if os.path.isdir(local):
            files += [_literal(f) for f in _walk(os.path.abspath(local))]
        elif os.path.isfile(local):
            files.append(_literal(os.path.abspath(local)))
        elif os.path.exists(local):  # a pipe (<(zcat ...)), a device, a socket
            raise AnalysisError(f"history {p} is not a file or directory (a pipe or a "
                                "device): Spark reads files; save it to a file and name "
                                "that")
        else:
            raise AnalysisError(f"history {p} does not exist: name a file or directory of "
                                "event histories (events/*.jsonl)")
    return dirs, files


def _hidden(name: str) -> bool:
    """A file name Spark leaves out even when it is named (Hadoop's hidden files)."""
    return name.startswith(("_", "."))


def _unhide(files: list[str], link_dir: str | None) -> list[str]:
    """``files`` with each one Spark would leave out replaced by a symbolic link to it in
    ``link_dir`` under a name it reads (``_h.jsonl`` is the history of host ``_h``)."""
    if link_dir is None or not any(_hidden(os.path.basename(f)) for f in files):
        return files
    os.makedirs(link_dir, exist_ok=True)
    out = []
    for i, f in enumerate(files):
        name = os.path.basename(f)
        if not _hidden(name):
            out.append(f)
            continue
        # the link's name keeps the file's ending, so a .gz is still read as one
        link = os.path.join(link_dir, f"h{i}-{name.lstrip('._')}")
        os.symlink(re.sub(r"\\(.)", r"\1", f), link)  # f was escaped for Spark
        out.append(_literal(link))
    return out


def read_lines(spark: Any, paths: list[str], link_dir: str | None = None) -> Any:
    """One row per line (``value``) of every history file under ``paths``: directories are
    searched recursively for ``*.jsonl`` files and their rotations (``*.jsonl.N``).
    ``link_dir``: where links to files Spark would leave out (names beginning with ``_``
    or ``.``) are made; it must stay until the analysis is done."""
    dirs, files = split_inputs(paths)
    files = _unhide(files, link_dir)
    frames = []
    try:
        if dirs:
            frames.append(spark.read.option("recursiveFileLookup", "true")
                          .option("pathGlobFilter", FILE_PATTERN).text(dirs))
        if files:
            frames.append(spark.read.text(files))
    except Exception as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise AnalysisError(f"cannot read the histories: {msg}") from None
    if not frames:  # local directories without a history file: "no events" follows
        return spark.createDataFrame([], "value string")
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out


def parse(lines: Any) -> Loaded:
    """Parse and validate lines; count what is skipped; drop duplicate copies.

    One pass over the text and one shuffle: every line is parsed once (``from_json``
    against the explicit schema, in the JVM, only the fields the analysis uses), tagged
    ok / blank / malformed / unsupported_version and cached; the counts come from the
    cache, the copies of one event (instance, seq, event) are dropped in one shuffle,
    and the result is cached for every computation to read."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    # a glued line (LINE_START again past its start) becomes its pieces; _first marks
    # the piece that begins a line as read, so the line count stays the file's
    glued = F.locate(LINE_START, F.col("value"), 2) > 0
    pieces = F.when(glued, F.split(F.col("value"), r'(?=\{"v":)')).otherwise(
        F.array(F.col("value")))
    lines = lines.select(glued.alias("_glued"), F.posexplode(pieces).alias("_pos", "value"))
    blank = F.trim(F.col("value")) == ""
    e = F.from_json(F.col("value"), schema_ddl(), {"mode": "PERMISSIVE"})
    parsed = lines.select(F.col("value"), e.alias("e"), "_glued", "_pos")
    t = F.to_timestamp(F.col("e.ts"))
    required = (F.col("e").isNotNull() & F.col("e.qmgr").isNotNull()
                & F.col("e.host").isNotNull() & F.col("e.instance_id").isNotNull()
                & F.col("e.event").isNotNull() & t.isNotNull()
                & F.col("e.ts").rlike(TS_PATTERN)
                & (t >= F.lit(TS_FROM).cast("timestamp"))
                & (t < F.lit(TS_UNTIL).cast("timestamp")))
    for c in NON_NEGATIVE:  # Spark orders NaN above +Infinity: "< inf" excludes both
        x = F.col(f"e.{c}")
        required = required & (x.isNull() | ((x >= 0) & (x < F.lit(float("inf")))))
    status = (F.when(blank, "blank")
              .when(~F.coalesce(required, F.lit(False)), "malformed")
              .when(F.col("e.v") != SUPPORTED_VERSION, "unsupported_version")
              .otherwise("ok"))
    tagged = parsed.select(status.alias("status"), t.alias("t"),
                           (F.col("_pos") == 0).alias("_first"), "_glued",
                           *[F.col(f"e.{c}").alias(c) for c in KEEP])
    # parsed once, cached in memory (columnar, spilling to disk): the counts and the
    # de-duplication both read the cache, then it is dropped
    tagged = tagged.persist(StorageLevel.MEMORY_AND_DISK)
    rows = tagged.groupBy("status").agg(
        F.count(F.lit(1)).alias("count"),
        F.count(F.when(F.col("_first"), 1)).alias("lines"),
        F.count(F.when(F.col("_first") & F.col("_glued"), 1)).alias("glued")).collect()
    counts = {r["status"]: int(r["count"]) for r in rows}
    physical = sum(int(r["lines"]) for r in rows)
    glued_lines = sum(int(r["glued"]) for r in rows)
    # the same event in the shared and the host-local copy: one instance never reuses a
    # seq; lines from before seq existed fall back to (ts, event)
    key = F.coalesce(F.col("seq").cast("string"),
                     F.date_format("t", "yyyy-MM-dd'T'HH:mm:ss.SSSSSS"))
    deduped = (tagged.where(F.col("status") == "ok").drop("status", "_first", "_glued")
               .withColumn("_key", key)
               .dropDuplicates(["instance_id", "_key", "event"]).drop("_key")
               .withColumn("tsec", F.col("t").cast("double"))
               .persist(StorageLevel.MEMORY_AND_DISK))
    events = deduped.count()
    tagged.unpersist()
    valid = counts.get("ok", 0)
    return Loaded(deduped, {
        "events": events,
        "duplicates_removed": valid - events,
        "lines": physical,
        "glued_lines": glued_lines,
        "blank_lines": counts.get("blank", 0),
        "malformed_lines": counts.get("malformed", 0),
        "unsupported_version_lines": counts.get("unsupported_version", 0),
        "valid_lines": valid,
    })
