"""The computations, in Spark SQL functions only (no Python UDF, nothing raw collected):
every function takes the de-duplicated events (:func:`miqm.analysis.history.parse`) and
returns small aggregate DataFrames. Percentiles by nearest rank (``percentile_disc``; see
:mod:`miqm.analysis`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: a 5-minute bucket of verify latencies is slow at this many times its host's median
SLOW_FACTOR = 5.0
SLOW_BUCKET_S = 300
#: and needs at least this many verifies to be judged
SLOW_MIN_VERIFIES = 2
#: this many takeovers of one queue manager within FLAP_WINDOW_S: flapping
FLAP_TAKEOVERS = 3
FLAP_WINDOW_S = 3600
#: what preceded a spurious failover: the old active's verifies in these seconds before
BEFORE_S = 300
#: a host heard from (another instance) within this long after the new active served was
#: alive (the old active's process was killed); not heard from: the host was lost
HOST_ALIVE_S = 600
SELF_STOP_SPURIOUS = ("AMQ7279", "AMQ7280")
#: a takeover's predecessor is the activation with the nearest generation below its own,
#: at most this many below (an activation that failed after taking its number leaves a
#: gap; further back, the predecessor's activation is not in the history)
GENERATION_GAP = 3


@dataclass
class Tables:
    """Name -> small Spark DataFrame, in output order."""

    frames: dict[str, Any] = field(default_factory=dict)


def pct(column: str, p: float) -> Any:
    """The nearest-rank p-th percentile of ``column`` (an aggregate expression)."""
    from pyspark.sql import functions as F

    return F.expr(f"percentile_disc({p}) WITHIN GROUP (ORDER BY `{column}`)")


def percentiles(df: Any, groups: list[str], column: str, ps: dict[str, float],
                rollups: list[dict[str, Any]] | None = None) -> Any:
    """Exact nearest-rank percentiles of ``column`` per group, without holding every value
    of a group in one buffer: the values are counted per (group, value) in a hash
    aggregate, the counts accumulated in value order, and the p-th percentile is the
    smallest value whose cumulative count reaches ``max(1, ceil(p * n))`` (the same
    formula as :func:`miqm.analysis.nearest_rank`). ``ps`` names the output columns;
    also ``count`` and ``max_s``-style ``max`` come out. ``rollups``: coarser groupings
    computed from the same counts, each a {group column: constant} replacement (e.g.
    ``{"hour": -1}`` for "every hour"), their rows added to the result."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    counted = (df.where(F.col(column).isNotNull()).groupBy(*groups, column)
               .agg(F.count(F.lit(1)).alias("_c")))
    frames = [counted]
    for r in rollups or []:
        frames.append(counted.groupBy(*[g for g in groups if g not in r], column)
                      .agg(F.sum("_c").alias("_c"))
                      .select(*[F.lit(r[g]).alias(g) if g in r else F.col(g) for g in groups],
                              column, "_c"))
    c = frames[0]
    for f in frames[1:]:
        c = c.unionByName(f)
    cum = Window.partitionBy(*groups).orderBy(column).rowsBetween(
        Window.unboundedPreceding, Window.currentRow)
    c = (c.withColumn("_cum", F.sum("_c").over(cum))
         .withColumn("_n", F.sum("_c").over(Window.partitionBy(*groups))))
    aggs = [F.first("_n").alias("count")]
    for name, p in ps.items():
        rank = F.greatest(F.lit(1), F.ceil(F.lit(float(p)) * F.col("_n")))
        aggs.append(F.min(F.when(F.col("_cum") >= rank, F.col(column))).alias(name))
    aggs.append(F.max(column).alias("max"))
    return c.groupBy(*groups).agg(*aggs)


def _iso(col: Any) -> Any:
    from pyspark.sql import functions as F

    return F.date_format(col, "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'")


def instances(ev: Any) -> Any:
    """One row per instance: where, when, and how it ended (its last words, if any)."""
    from pyspark.sql import functions as F

    is_role = F.col("event") == "role"
    is_fatal = F.col("event") == "fatal"
    ended = is_role & (F.col("role") == "ended")
    return ev.groupBy("instance_id").agg(
        F.first("qmgr").alias("qmgr"), F.first("host").alias("host"),
        F.min("tsec").alias("first_s"), F.max("tsec").alias("last_s"),
        F.count(F.lit(1)).alias("events"),
        F.min(F.when(is_role & (F.col("role") == "active"), F.col("tsec"))).alias("active_s"),
        F.min(F.when(ended, F.col("tsec"))).alias("ended_s"),
        F.max(F.when(ended, F.coalesce(F.col("switchover"), F.lit(False)))).alias(
            "switchover"),
        F.min(F.when(is_fatal, F.col("tsec"))).alias("fatal_s"),
        F.min_by(F.when(is_fatal, F.col("amq")), F.when(is_fatal, F.col("tsec"))).alias(
            "fatal_amq"),
        F.min_by(F.when(is_fatal, F.col("detail")), F.when(is_fatal, F.col("tsec"))).alias(
            "fatal_detail"),
        # its lease had run out when it stopped itself: it could not run (see takeovers)
        F.max(F.when(is_fatal, F.col("lease_age_s") >= F.col("lease_s"))).alias(
            "fatal_lease_out"),
    )


def takeovers(ev: Any, inst: Any) -> Any:
    """Every activation after the first of a queue manager, with the instance it took over
    from and a cause: switchover, paused (the old active stopped itself once it ran again,
    its lease already run out: paused or frozen past the lease, it could not run while the
    standby took over), spurious (the old active stopped itself with AMQ7279 or AMQ7280:
    alive, yet it gave up), self_stop (it stopped itself for another reason),
    kill (no last words; its host carried on), host_loss (no last words; its host went
    silent), ended (the old one ended without permitting switchover), unknown."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    act = (ev.where((F.col("event") == "role") & (F.col("role") == "active"))
           .select("qmgr", "instance_id", "host", F.col("tsec").alias("active_s"),
                   F.coalesce(F.col("failover"), F.lit(False)).alias("failover"),
                   "generation"))
    # the instance taken over from: the activation of the generation before (a number
    # the master lock's record carries, so the hosts' clocks do not matter: ordered by
    # time, a new active whose host's clock ran minutes behind came "before" the one it
    # took over from and was a takeover from nobody). An activation that failed after
    # taking its number leaves a gap: the nearest generation below, up to GENERATION_GAP
    # back; of several with it (a queue manager deleted and re-created), the nearest in
    # time. Lines without a generation: the activation before in time.
    w = Window.partitionBy("qmgr").orderBy("active_s", "instance_id")
    act = (act.withColumn("_lag_instance", F.lag("instance_id").over(w))
           .withColumn("_lag_generation", F.lag("generation").over(w)))
    cand = act.select("qmgr", F.col("instance_id").alias("_gen_instance"),
                      F.col("generation").alias("_gen"),
                      F.col("active_s").alias("_gen_active_s"))
    nearest = Window.partitionBy("instance_id").orderBy(
        F.desc("_gen"), F.abs(F.col("_gen_active_s") - F.col("active_s")), "_gen_instance")
    below = F.array(*[F.col("generation") - i for i in range(1, GENERATION_GAP + 1)])
    gen_prev = (act.where(F.col("failover") & F.col("generation").isNotNull())
                .select("qmgr", "instance_id", "active_s", F.explode(below).alias("_gen"))
                .join(cand, ["qmgr", "_gen"])  # an equi-join: linear in the activations
                .where(F.col("_gen_instance") != F.col("instance_id"))
                .withColumn("_r", F.row_number().over(nearest)).where(F.col("_r") == 1)
                .select("instance_id", "_gen_instance"))
    act = (act.join(gen_prev, "instance_id", "left")
           .withColumn("prev_instance", F.coalesce(
               F.col("_gen_instance"),
               F.when(F.col("generation").isNull() | F.col("_lag_generation").isNull(),
                      F.col("_lag_instance"))))
           .drop("_lag_instance", "_lag_generation", "_gen_instance"))
    fo = ev.where(F.col("event").isin("failover_start", "failover_end")).groupBy(
        "instance_id").agg(
        F.min(F.when(F.col("event") == "failover_start", F.col("tsec"))).alias("start_s"),
        F.min(F.when(F.col("event") == "failover_end", F.col("tsec"))).alias("end_s"),
        F.min_by(F.col("duration_s"), F.when(F.col("event") == "failover_end",
                                             F.col("tsec"))).alias("duration_s"),
        F.min_by(F.col("recovery_s"), F.when(F.col("event") == "failover_end",
                                             F.col("tsec"))).alias("recovery_s"))
    prev = inst.select(
        F.col("instance_id").alias("prev_instance"), F.col("host").alias("prev_host"),
        F.col("last_s").alias("prev_last_s"), F.col("ended_s").alias("prev_ended_s"),
        F.col("switchover").alias("prev_switchover"), F.col("fatal_s").alias("prev_fatal_s"),
        F.col("fatal_amq").alias("prev_fatal_amq"),
        F.col("fatal_detail").alias("prev_fatal_detail"),
        F.col("fatal_lease_out").alias("prev_fatal_lease_out"))
    tk = (act.where(F.col("failover")).join(fo, "instance_id", "left")
          .join(prev, "prev_instance", "left"))
    # was the old active's host heard from (another instance) after its last event?
    # an equi-join on (host, HOST_ALIVE_S bucket): each takeover probes the two buckets
    # its window [until, until + HOST_ALIVE_S] touches, so an event meets only the
    # takeovers of its host near its own time (linear in the events, not events x
    # takeovers per host)
    probe = (tk.select("instance_id", "prev_instance", "prev_host",
                       F.coalesce("end_s", "active_s").alias("until_s"))
             .withColumn("_b0", F.floor(F.col("until_s") / HOST_ALIVE_S))
             .withColumn("_b", F.explode(F.array(F.col("_b0"), F.col("_b0") + 1)))
             .drop("_b0"))
    heard = (ev.select(F.col("host").alias("prev_host"), F.col("instance_id").alias("other"),
                       "tsec", F.floor(F.col("tsec") / HOST_ALIVE_S).alias("_b"))
             .join(F.broadcast(probe), ["prev_host", "_b"])
             .where((F.col("other") != F.col("prev_instance"))
                    & (F.col("tsec") > F.col("until_s"))
                    & (F.col("tsec") <= F.col("until_s") + HOST_ALIVE_S))
             .groupBy("instance_id").agg(F.min("tsec").alias("host_heard_s")))
    tk = tk.join(heard, "instance_id", "left")
    cause = (F.when(F.col("prev_instance").isNull(), "unknown")
             .when(F.coalesce(F.col("prev_switchover"), F.lit(False)), "switchover")
             .when(F.col("prev_fatal_amq").isNotNull()
                   & F.coalesce(F.col("prev_fatal_lease_out"), F.lit(False)), "paused")
             .when(F.col("prev_fatal_amq").isin(*SELF_STOP_SPURIOUS), "spurious")
             .when(F.col("prev_fatal_s").isNotNull(), "self_stop")
             .when(F.col("prev_ended_s").isNotNull(), "ended")
             .when(F.col("host_heard_s").isNotNull(), "kill")
             .otherwise("host_loss"))
    serving = F.coalesce(F.col("end_s"), F.col("active_s"))
    return (tk.withColumn("cause", cause)
            .withColumn("kind", F.when(F.col("cause") == "switchover", "switchover")
                        .otherwise("failover"))
            # serving on one host's clock minus the old active's last event on another's:
            # below zero the clocks disagree by more than the outage, and no figure is
            # better than a wrong one
            .withColumn("outage_s", F.when(serving >= F.col("prev_last_s"),
                                           F.round(serving - F.col("prev_last_s"), 6)))
            .withColumn("at", _iso(F.col("active_s").cast("timestamp")))
            .select("qmgr", "at", "kind", "cause", "instance_id", "host", "prev_instance",
                    "prev_host", "duration_s", "recovery_s", "outage_s", "generation",
                    "prev_fatal_amq", "prev_fatal_detail", "active_s", "start_s", "end_s",
                    "prev_last_s", "prev_fatal_s", "host_heard_s")
            .orderBy("active_s", "qmgr"))


def duration_stats(tk: Any) -> Any:
    """Durations (instance-measured ``duration_s``) per queue manager and kind, and over
    all of them (qmgr ``*``)."""
    from pyspark.sql import functions as F

    # measured: those with a duration (a failover_end); a new active that died before
    # serving wrote none, and the percentiles are of the measured ones only
    aggs = [F.count(F.lit(1)).alias("count"), F.count("duration_s").alias("measured"),
            pct("duration_s", 0.5).alias("p50_s"),
            pct("duration_s", 0.95).alias("p95_s"), F.max("duration_s").alias("max_s"),
            pct("outage_s", 0.5).alias("outage_p50_s"), F.max("outage_s").alias("outage_max_s")]
    per = tk.groupBy("qmgr", "kind").agg(*aggs)
    every = tk.groupBy("kind").agg(*aggs).withColumn("qmgr", F.lit("*"))
    return per.unionByName(every).orderBy("qmgr", "kind")


def latencies(ev: Any) -> Any:
    """Lock acquire and verify latency percentiles by host and hour of day (UTC), by host
    (hour -1) and over the fleet (host ``*``, hour -1), all from one count per value."""
    from pyspark.sql import functions as F

    lat = ev.where(((F.col("event") == "verify") & F.coalesce(F.col("ok"), F.lit(False)))
                   | (F.col("event") == "lock_attempt")).where(
        F.col("latency_s").isNotNull()).select(
        F.when(F.col("event") == "verify", "verify").otherwise("lock_acquire").alias("kind"),
        "host", F.hour("t").alias("hour"), "latency_s")
    out = percentiles(lat, ["kind", "host", "hour"], "latency_s",
                      {"p50_s": 0.5, "p99_s": 0.99},
                      rollups=[{"hour": -1}, {"host": "*", "hour": -1}])
    return (out.select("kind", "host", "hour", "count", "p50_s", "p99_s",
                       F.col("max").alias("max_s"))
            .orderBy("kind", "host", "hour"))


def slow_windows(ev: Any, lat: Any) -> Any:
    """Windows of slow I/O found from the verify latencies themselves: 5-minute buckets
    whose median verify latency on a host is at least SLOW_FACTOR times that host's median
    over the whole history, consecutive buckets merged into one window."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    base = lat.where((F.col("kind") == "verify") & (F.col("hour") == -1)
                     & (F.col("host") != "*")).select(
        "host", F.col("p50_s").alias("baseline_p50_s"))
    v = (ev.where((F.col("event") == "verify") & F.coalesce(F.col("ok"), F.lit(False))
                  & F.col("latency_s").isNotNull())
         .select("host", F.floor(F.col("tsec") / SLOW_BUCKET_S).alias("bucket"), "latency_s"))
    b = (percentiles(v, ["host", "bucket"], "latency_s", {"p50_s": 0.5})
         .select("host", "bucket", F.col("count").alias("n"), "p50_s",
                 F.col("max").alias("max_s"))
         .join(F.broadcast(base), "host")
         .where((F.col("n") >= SLOW_MIN_VERIFIES)
                & (F.col("p50_s") >= F.col("baseline_p50_s") * SLOW_FACTOR)))
    w = Window.partitionBy("host").orderBy("bucket")
    b = b.withColumn("island", F.col("bucket") - F.row_number().over(w))
    win = b.groupBy("host", "island").agg(
        F.min("bucket").alias("b0"), F.max("bucket").alias("b1"),
        F.max("p50_s").alias("peak_p50_s"), F.max("max_s").alias("max_s"),
        F.sum("n").alias("verifies"), F.first("baseline_p50_s").alias("baseline_p50_s"))
    start = (F.col("b0") * SLOW_BUCKET_S).cast("timestamp")
    return (win.select(
        "host", _iso(start).alias("start"),
        _iso(((F.col("b1") + 1) * SLOW_BUCKET_S).cast("timestamp")).alias("end"),
        ((F.col("b1") - F.col("b0") + 1) * SLOW_BUCKET_S / 60).alias("minutes"),
        F.hour(start).alias("start_hour"), "verifies", "baseline_p50_s", "peak_p50_s",
        F.round(F.col("peak_p50_s") / F.col("baseline_p50_s"), 1).alias("factor"), "max_s",
        (F.col("b0") * SLOW_BUCKET_S).alias("start_s"),
        ((F.col("b1") + 1) * SLOW_BUCKET_S).alias("end_s"))
        .orderBy("start_s", "host"))


def spurious(ev: Any, tk: Any, windows: Any) -> Any:
    """Each spurious failover with what preceded it: the old active's verifies in the
    BEFORE_S seconds before it stopped (count, failures, p50, max), its longest monitor
    stall, and the slow window of its host it fell in."""
    from pyspark.sql import functions as F

    sp = tk.where(F.col("cause") == "spurious").select(
        "qmgr", "at", "instance_id", "host", "prev_instance", "prev_host", "prev_fatal_amq",
        "prev_fatal_detail", "prev_fatal_s", "duration_s", "active_s")
    probe = sp.select("prev_instance", "prev_fatal_s")
    before = (ev.where(F.col("event").isin("verify", "monitor_stall"))
              .select(F.col("instance_id").alias("prev_instance"), "tsec", "event", "ok",
                      "latency_s", "stalled_s")
              .join(F.broadcast(probe), "prev_instance")
              .where((F.col("tsec") <= F.col("prev_fatal_s"))
                     & (F.col("tsec") > F.col("prev_fatal_s") - BEFORE_S))
              .groupBy("prev_instance").agg(
                  F.count(F.when(F.col("event") == "verify", 1)).alias("verifies_before"),
                  F.count(F.when((F.col("event") == "verify") & ~F.col("ok"), 1)).alias(
                      "failed_verifies_before"),
                  pct("latency_s", 0.5).alias("verify_p50_before_s"),
                  F.max("latency_s").alias("verify_max_before_s"),
                  F.max("stalled_s").alias("stall_before_s")))
    inwin = (sp.select("prev_instance", "prev_host", "prev_fatal_s")
             .join(F.broadcast(windows.select(F.col("host").alias("prev_host"),
                                              F.col("start").alias("slow_window_start"),
                                              F.col("end").alias("slow_window_end"),
                                              F.col("factor").alias("slow_window_factor"),
                                              "start_s", "end_s")), "prev_host")
             .where((F.col("prev_fatal_s") >= F.col("start_s"))
                    & (F.col("prev_fatal_s") <= F.col("end_s") + SLOW_BUCKET_S))
             .groupBy("prev_instance").agg(
                 F.min("slow_window_start").alias("slow_window_start"),
                 F.max("slow_window_end").alias("slow_window_end"),
                 F.max("slow_window_factor").alias("slow_window_factor")))
    return (sp.join(before, "prev_instance", "left").join(inwin, "prev_instance", "left")
            .withColumn("stopped_at", _iso(F.col("prev_fatal_s").cast("timestamp")))
            .select("qmgr", "stopped_at", "prev_host", "prev_instance", "prev_fatal_amq",
                    "prev_fatal_detail", "verifies_before", "failed_verifies_before",
                    "verify_p50_before_s", "verify_max_before_s", "stall_before_s",
                    "slow_window_start", "slow_window_end", "slow_window_factor",
                    F.col("host").alias("new_host"), "duration_s", "prev_fatal_s")
            .orderBy("prev_fatal_s", "qmgr"))


def log_write_hwm(ev: Any) -> Any:
    """Per queue manager and hour: the peak log write time (moving average of about 8
    forces, from liveness events) and its high-water mark so far."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    hourly = (ev.where((F.col("event") == "liveness") & F.col("write_time_us").isNotNull())
              .groupBy("qmgr", F.date_trunc("hour", "t").alias("hour_t"))
              .agg(F.max("write_time_us").alias("peak_write_us"),
                   F.max("write_time_max_us").alias("longest_write_us")))
    w = (Window.partitionBy("qmgr").orderBy("hour_t")
         .rowsBetween(Window.unboundedPreceding, Window.currentRow))
    return (hourly.withColumn("hwm_write_us", F.max("peak_write_us").over(w))
            .withColumn("hour", _iso(F.col("hour_t")))
            .withColumn("hour_s", F.col("hour_t").cast("double"))
            .select("qmgr", "hour", "peak_write_us", "hwm_write_us", "longest_write_us",
                    "hour_s")
            .orderBy("qmgr", "hour_s"))


def flapping(tk: Any) -> Any:
    """Queue managers with FLAP_TAKEOVERS or more takeovers (failovers or switchovers)
    within FLAP_WINDOW_S seconds."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy("qmgr").orderBy("active_s").rangeBetween(-FLAP_WINDOW_S, 0)
    x = tk.withColumn("in_window", F.count(F.lit(1)).over(w))
    return (x.groupBy("qmgr").agg(
        F.count(F.lit(1)).alias("takeovers"), F.max("in_window").alias("max_in_window"),
        F.min(F.when(F.col("in_window") >= FLAP_TAKEOVERS, F.col("active_s"))).alias(
            "first_flap_s"))
        .where(F.col("max_in_window") >= FLAP_TAKEOVERS)
        .withColumn("first_flap", _iso(F.col("first_flap_s").cast("timestamp")))
        .orderBy(F.desc("max_in_window"), "qmgr"))


def timeline(inst: Any, tk: Any) -> Any:
    """Active periods per queue manager: from an instance's activation to its last event
    or the next activation, whichever is first (for the report's role timeline)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy("qmgr").orderBy("active_s", "instance_id")
    a = inst.where(F.col("active_s").isNotNull()).select(
        "qmgr", "instance_id", "host", "active_s", "last_s")
    a = a.withColumn("next_s", F.lead("active_s").over(w))
    return (a.withColumn("until_s", F.least(F.col("last_s"),
                                            F.coalesce(F.col("next_s"), F.col("last_s"))))
            .select("qmgr", "instance_id", "host", "active_s", "until_s")
            .orderBy("qmgr", "active_s"))
