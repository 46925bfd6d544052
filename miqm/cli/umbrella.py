"""``miqm``: the umbrella command (demo, bench, and the control commands by name)."""

from __future__ import annotations

import json
from typing import Any

import typer

from miqm.cli import credential
from miqm.cli.common import fail, fail_usage, make_app, run_typer, unwind_on_stop_signals

app = make_app("miqm: multi-instance queue manager tools.")
bench_app = make_app("Benchmarks: figures measured side by side in one run.")
app.add_typer(bench_app, name="bench")


@bench_app.callback()
def bench_signals() -> None:
    """Benchmarks: figures measured side by side in one run."""
    # SIGTERM (timeout, a CI's limit) and SIGHUP end a benchmark as Ctrl-C does: the
    # instances and processes it started are ended by its cleanup, not left running
    unwind_on_stop_signals()
credential.register(app)


@app.command()
def demo(
    seconds: float = typer.Option(3.0, help="seconds of load before the kill, and again "
                                  "after the takeover"),
    rate: float = typer.Option(200.0, help="the producer's units of work a second at most "
                               "(0: as fast as it goes)"),
    messages: int = typer.Option(0, help="stop the producer once it has sent this many "
                                 "messages and run through the failover (0: after "
                                 "--seconds)"),
    keep: bool = typer.Option(False, help="keep the temporary directories for inspection"),
) -> None:
    """Two instances on this machine; a producer and a consumer run through a kill -9 of
    the active instance; the failover as they saw it and the accounting after."""
    from miqm.demo import check_options, run_demo

    check_options(seconds, rate, messages)  # one line naming the option that is wrong
    raise typer.Exit(run_demo(messages=messages, keep=keep, seconds=seconds, rate=rate))


@bench_app.command("store")
def bench_store(
    as_json: bool = typer.Option(False, "--json", help="print the figures as JSON (last line)"),
    seconds: float = typer.Option(3.0, help="seconds per producer count"),
    producers: str = typer.Option("1,8,64", help="comma-separated producer counts"),
    directory: str = typer.Option(None, "--dir", help="directory on the disk to measure"),
    recovery_records: int = typer.Option(
        0, help="also time restart recovery after this many records (e.g. 1000000)"),
    memory_messages: int = typer.Option(
        0, help="also measure resident bytes per message with this many queued"),
    cpus: str = typer.Option("", help="comma-separated CPU numbers to run on, as "
                             "taskset -c (default: every CPU this process may use)"),
    group_commit_cpu: str = typer.Option(
        "auto", help="the store's GroupCommitCPU (qm.ini TuningParameters): auto, none or "
        "a CPU number"),
) -> None:
    """Persistent 1 KiB put+commit at 1, 8, 64 producers against raw fdatasync."""
    import os

    from miqm.bench.store import bench_store as run
    from miqm.config import parse_cpu
    from miqm.errors import ConfigError
    from miqm.store.settings import StoreTuning

    try:
        counts = tuple(int(x) for x in producers.split(",") if x.strip())
    except ValueError:
        fail_usage(f"--producers {producers!r} is not a comma-separated list of numbers", 2)
    if not counts or min(counts) < 1:
        fail_usage("--producers needs at least one positive count", 2)
    try:
        chosen = tuple(int(x) for x in cpus.split(",") if x.strip())
    except ValueError:
        fail_usage(f"--cpus {cpus!r} is not a comma-separated list of CPU numbers", 2)
    allowed = os.sched_getaffinity(0)
    if not set(chosen) <= allowed:
        fail_usage(f"--cpus {cpus}: this process may run on CPUs "
             f"{','.join(map(str, sorted(allowed)))} only", 2)
    try:
        gather = StoreTuning(group_commit_cpu=parse_cpu(
            group_commit_cpu, "--group-commit-cpu")).group_commit_cpu  # range checked there
    except ConfigError as exc:
        fail_usage(str(exc), 2)
    result = run(directory, counts, seconds, recovery_records, memory_messages,
                 echo=(lambda s: None) if as_json else print, cpus=chosen,
                 group_commit_cpu=gather)
    if as_json:
        print(json.dumps(result))


@bench_app.command("net")
def bench_net(
    as_json: bool = typer.Option(False, "--json", help="print the figures as JSON (last line)"),
    messages: int = typer.Option(2000, help="messages per producer per run"),
    directory: str = typer.Option(None, "--dir", help="directory for the scratch queue "
                                  "manager (default: the system temp directory)"),
    authrecs: int = typer.Option(0, "--authrecs", metavar="N",
                                 help="instead: the cost of authorization, with N authority "
                                 "records (generic profiles) against none, side by side"),
    rounds: int | None = typer.Option(None, "--rounds", help="alternations of the in-process "
                               "store and 8 connections (default 1); with --authrecs: "
                               "rounds of each run (default 2)"),
) -> None:
    """Client path (1/8 connections put+commit, 100 per commit, streaming consume) beside
    the in-process store, in one run; or (--authrecs N) with and without authorization."""
    from miqm.bench.net import bench_authz
    from miqm.bench.net import bench_net as run

    if messages < 1:
        fail_usage("--messages must be at least 1", 2)
    if rounds is not None and not 1 <= rounds <= 100:
        fail_usage("--rounds must be from 1 to 100", 2)
    if authrecs and (authrecs < 2 or authrecs > 100_000):
        fail_usage("--authrecs must be from 2 to 100000", 2)
    echo = (lambda s: None) if as_json else print
    if authrecs:
        result = bench_authz(messages, authrecs, rounds or 2, echo=echo, directory=directory)
    else:
        result = run(messages, echo=echo, directory=directory, rounds=rounds or 1)
    if as_json:
        print(json.dumps(result))


@bench_app.command("failover")
def bench_failover(
    cycles: int = typer.Option(5, help="number of failovers to measure"),
    fault: str = typer.Option("kill", help="kill | switchover (two local instances) | "
                              "partition | pause (on the NFSv4 lab: root, nfs-ganesha; a "
                              "local directory has no lease to run out)"),
    lab: str = typer.Option("", help="partition/pause: use the lab already up in this "
                            "directory (tests/nfslab/lab.sh up DIR) instead of starting one"),
    lease: int = typer.Option(5, help="partition/pause: the lease of the lab it starts, "
                              "in seconds"),
    backlog: str = typer.Option("", help="takeover with a backlog: comma-separated cases "
                                "DEPTH or DEPTHxQUEUES ('default': 0,100000,1000000,0x5000; "
                                "'long' adds 10000000), "
                                "--cycles kills each, ratios to the first case"),
    on_lab: bool = typer.Option(False, "--nfs-lab", help="with --backlog: data and log on "
                                "the NFSv4 lab (root, nfs-ganesha) instead of a local "
                                "directory"),
    rounds: int = typer.Option(1, help="with --backlog: run all the cases this many times "
                               "in turn and pool each case's takeovers (a noisy minute "
                               "then falls on every case alike)"),
    as_json: bool = typer.Option(False, "--json", help="print the figures as JSON (last line)"),
) -> None:
    """Fail over ``cycles`` times between two instances and report the durations."""
    if fault not in ("kill", "switchover", "pause", "partition"):
        fail_usage(f"--fault {fault!r} is not one of kill, switchover, pause, partition", 2)
    if cycles < 1:
        fail_usage("--cycles must be at least 1", 2)
    if rounds < 1:
        fail_usage("--rounds must be at least 1", 2)
    if rounds > 1 and not backlog:
        fail_usage("--rounds goes with --backlog (it repeats the backlog cases in turn)", 2)
    echo = (lambda s: None) if as_json else print
    if backlog:
        from miqm.bench.failover import (
            DEFAULT_BACKLOG_CASES,
            LONG_BACKLOG_CASES,
            bench_backlog,
            parse_backlog,
        )

        if fault != "kill":
            fail_usage("--backlog measures kill -9 takeovers (on a local directory or, with "
                 "--nfs-lab, on the NFSv4 lab): leave --fault "
                 "at kill", 2)
        try:
            presets = {"default": DEFAULT_BACKLOG_CASES, "long": LONG_BACKLOG_CASES}
            cases = (list(presets[backlog]) if backlog in presets
                     else parse_backlog(backlog))
        except ValueError as exc:
            fail_usage(f"--backlog: {exc}", 2)
        if on_lab:
            from miqm.bench.failover_lab import bench_backlog_lab
            from miqm.lab import lab_missing

            why = lab_missing()
            if why:
                fail_usage(f"--nfs-lab runs on the NFSv4 lab, which {why}", 2)
            result = bench_backlog_lab(cases, cycles, lab_dir=lab or None, lease=lease,
                                       echo=echo, rounds=rounds)
        else:
            result = bench_backlog(cases, cycles, echo=echo, rounds=rounds)
        if as_json:
            print(json.dumps(result))
        return
    if on_lab and fault == "kill":
        fail_usage("--nfs-lab goes with --backlog (partition and pause always run on the lab)", 2)
    if fault in ("pause", "partition"):
        from miqm.bench.failover_lab import bench_failover_lab
        from miqm.lab import lab_missing

        if not 4 <= lease <= 120:
            fail_usage("--lease must be 4..120 seconds (verify and monitor intervals must fit "
                 "under it)", 2)
        why = lab_missing()
        if why:
            fail_usage(f"--fault {fault} runs on the NFSv4 lab, which {why}; on a local directory "
                 "a paused or cut-off active keeps its lock and the standby rightly never "
                 "takes over", 2)
        result = bench_failover_lab(cycles, fault, lab_dir=lab or None, lease=lease,
                                    echo=echo)
    else:
        from miqm.bench.failover import bench_failover as run

        result = run(cycles, fault, echo=echo)
    if as_json:
        print(json.dumps(result))


@bench_app.command("campaign")
def bench_campaign(
    cycles: int = typer.Option(10, help="number of faults to inject"),
    faults: str = typer.Option("", help="comma-separated faults to draw from: kill, "
                               "switchover (default: both) and, when named, kill-both, "
                               "pause-standby, kill-checkpoint, kill-extent, "
                               "kill-switchover, kill-takeover, third; on the lab kill, "
                               "switchover, partition, pause (default: all four) and, when "
                               "named, restart, restart-grace, slow, stall, pause-short, "
                               "pause-lease, partition-short, partition-lease, "
                               "server-pause, pause-standby, partition-standby, kill-both, "
                               "third"),
    producers: int = typer.Option(4, help="producer threads committing during the faults"),
    consumers: int = typer.Option(2, help="consumer threads getting during the faults "
                                  "(alternately under syncpoint and outside it)"),
    seed: int = typer.Option(-1, help="random seed (-1: a new one each run)"),
    on_lab: bool = typer.Option(False, "--nfs-lab", help="run on the NFSv4 lab (root, "
                                "nfs-ganesha) instead of a local directory"),
    lab: str = typer.Option("", help="with --nfs-lab: use the lab already up in this "
                            "directory instead of starting one"),
    lease: int = typer.Option(5, help="with --nfs-lab: the lease of the lab it starts"),
    as_json: bool = typer.Option(False, "--json", help="print the figures as JSON (last line)"),
    in_turn: bool = typer.Option(False, "--in-turn", help="take the faults in turn instead "
                                 "of at random (a short run that meets each one)"),
) -> None:
    """Inject random faults into two instances under load, then audit every message."""
    from miqm.bench.campaign import (
        FAULTS,
        LAB_CHAOS_FAULTS,
        LAB_EXTRA_FAULTS,
        LAB_FAULTS,
        LOCAL_EXTRA_FAULTS,
    )
    from miqm.bench.campaign import bench_campaign as run

    allowed = (LAB_FAULTS + LAB_EXTRA_FAULTS + LAB_CHAOS_FAULTS if on_lab
               else FAULTS + LOCAL_EXTRA_FAULTS)
    drawn = tuple(f.strip() for f in faults.split(",") if f.strip()) or (
        LAB_FAULTS if on_lab else FAULTS)
    unknown = [f for f in drawn if f not in allowed]
    if unknown:
        where = "on the NFSv4 lab" if on_lab else "on a local directory (partition and " \
            "pause need --nfs-lab)"
        fail_usage(f"--faults {faults!r}: {', '.join(unknown)} cannot be injected {where}; "
             f"choose from {', '.join(allowed)}", 2)
    if cycles < 1 or producers < 1:
        fail_usage("--cycles and --producers must be at least 1", 2)
    if consumers < 0:
        fail_usage("--consumers must be 0 or more", 2)
    if on_lab:
        from miqm.lab import lab_missing

        if not 4 <= lease <= 120:
            fail_usage("--lease must be 4..120 seconds", 2)
        why = lab_missing()
        if why:
            fail_usage(f"--nfs-lab: the NFSv4 lab {why}", 2)
    result = run(cycles, drawn, producers=producers, seed=None if seed < 0 else seed,
                 lab=on_lab, lab_dir=lab or None, lease=lease,
                 echo=(lambda s: None) if as_json else print, round_robin=in_turn,
                 consumers=consumers)
    if as_json:
        print(json.dumps(result))
    bad = [k for k in ("lost", "duplicated", "resurrected", "torn_units", "torn_gets",
                       "phantoms", "two_owners", "stale_writes", "spurious_failovers",
                       "violations")
           if result.get(k)]
    if bad:
        kept = " and ".join(result.get("kept") or []) or "the figures above"
        fail_usage(f"the audit found {', '.join(f'{k}={result[k]}' for k in bad)}: both "
             f"instances' error logs and event histories are kept in {kept}", 1)


def summary_lines(summary: dict[str, Any], out: str, report: bool) -> list[str]:
    """What ``miqm analyze run`` prints for ``summary`` (without ``--json``): the counts
    and percentiles, then the files it wrote in ``out`` (no report.html with
    ``--no-report``)."""
    fs = summary["failover_seconds"]
    vs = summary["lock_verify_seconds"]

    def g(v: float | None) -> str:
        return "-" if v is None else f"{v:.4g}"

    def n(count: int, word: str) -> str:
        return f"{count:,} {word}{'' if count == 1 else 's'}"

    written = f"report: {out}/report.html  " if report else ""
    # what only some histories have, said only when there is some of it
    unmeasured = summary.get("failovers_unmeasured") or 0
    stops = sum((summary.get("active_self_stops") or {}).values())
    glued = summary.get("glued_lines") or 0
    extra = "".join((
        f", {unmeasured:,} without a measured duration" if unmeasured else "",
        f"; {n(stops, 'stop')} of an active by itself with no standby to take over"
        if stops else "",
        f"; {n(glued, 'torn line')} split where the next event was glued on"
        if glued else ""))
    return [f"{n(summary['events'], 'event')}: {n(summary['failovers'], 'failover')} "
            f"(p50 {g(fs['p50'])}s, p95 {g(fs['p95'])}s, max {g(fs['max'])}s), "
            f"{summary['spurious_failovers']:,} spurious, "
            f"{n(summary['switchovers'], 'switchover')}; verify p50 {g(vs['p50'])}s "
            f"p99 {g(vs['p99'])}s; {n(summary['malformed_lines'], 'malformed line')} "
            f"skipped{extra}",
            f"{written}summary: {out}/summary.json  tables: {out}/tables/"]


analyze_app = make_app("Analysis of event histories (Spark): failovers, latencies, a report.")
app.add_typer(analyze_app, name="analyze")


@analyze_app.command("generate")
def analyze_generate(
    events: int = typer.Option(1_000_000, "--events", help="about this many events"),
    out: str = typer.Option(..., "--out", help="directory to write (new or empty)"),
    seed: int = typer.Option(1, "--seed", help="random seed (the same seed, the same fleet)"),
    as_json: bool = typer.Option(False, "--json", help="print what was written as JSON"),
) -> None:
    """Write a synthetic fleet history in the event-history format (docs/analysis.md)."""
    import sys

    from miqm.analysis.generate import generate

    quiet = as_json or not sys.stderr.isatty()
    result = generate(events, out, seed=seed,
                      echo=None if quiet else (lambda s: print(s, file=sys.stderr)))
    if as_json:
        print(json.dumps(result))
    else:
        print(f"{result['events']:,} events from {result['qmgrs']} queue managers on "
              f"{result['hosts']} hosts over {result['days']} days in {out} "
              f"({result['seconds']:.1f}s, {result['events_per_s']:,} events/s)")


@analyze_app.command("run")
def analyze_run(
    history: list[str] = typer.Argument(..., help="event history files or directories "
                                        "(local paths or any path Spark reads)"),
    out: str = typer.Option(..., "--out", help="directory for summary.json, report.html "
                            "and tables/"),
    master: str = typer.Option(None, "--master", help="Spark master URL (default local[*])"),
    no_report: bool = typer.Option(False, "--no-report", help="skip report.html"),
    as_json: bool = typer.Option(False, "--json", help="print summary.json's content"),
) -> None:
    """Analyse event histories with Spark; DIR/summary.json, DIR/report.html, DIR/tables."""
    import sys

    from miqm.analysis.run import Progress, analyze

    progress = Progress(9, enabled=not as_json and sys.stderr.isatty())
    summary = analyze(list(history), out, master=master, progress=progress,
                      report=not no_report)
    if as_json:
        print(json.dumps(summary))
    else:
        print("\n".join(summary_lines(summary, out, report=not no_report)))

@bench_app.command("metrics")
def bench_metrics(
    seconds: float = typer.Option(10.0, help="seconds of scraping under load (the store "
                                  "slices are a quarter of it)"),
    rounds: int = typer.Option(4, help="alternating store slices without/with a scraper"),
    producers: int = typer.Option(64, help="producer threads"),
    as_json: bool = typer.Option(False, "--json", help="print the figures as JSON (last line)"),
) -> None:
    """Scrape latency of an active instance under load; store commits/s with and without a
    scraper every second, side by side."""
    from miqm.metrics.bench import bench_metrics as run

    if seconds <= 0 or rounds < 1 or producers < 1:
        fail_usage("--seconds must be positive, --rounds and --producers at least 1", 2)
    result = run(seconds, rounds, producers, echo=(lambda s: None) if as_json else print)
    if as_json:
        print(json.dumps(result))


@bench_app.command("analyze")
def bench_analyze(
    sizes: str = typer.Option("1000000,10000000", help="event counts, comma-separated"),
    directory: str = typer.Option(None, "--dir", help="where the histories are generated "
                                  "(and reused) and analysed (default: the temp directory)"),
    master: str = typer.Option("local[2]", "--master", help="Spark master URL"),
    seed: int = typer.Option(1, help="the generator's seed"),
    pandas_max: int = typer.Option(1_000_000, "--pandas-max", help="run the pandas "
                                   "reference for sizes up to this"),
    as_json: bool = typer.Option(False, "--json", help="print the figures as one JSON object"),
) -> None:
    """miqm analyze on Spark at each size (1M and 10M events by default) beside the pandas
    reference: wall time, events/s, JVM CPU per stage, the largest/smallest ratio."""
    from miqm.bench.analyze import main

    argv = ["--sizes", sizes, "--master", master, "--seed", str(seed),
            "--pandas-max", str(pandas_max), *(["--dir", directory] if directory else []),
            *(["--json"] if as_json else [])]
    raise typer.Exit(main(argv))


@app.command()
def exporter(
    qmgr: str = typer.Option(..., "-m", metavar="QMgr", help="queue manager name"),
    port: int = typer.Option(9465, "--port", help="port to serve /metrics on"),
    bind: str = typer.Option("127.0.0.1", "--bind", help="address to listen on (0.0.0.0: "
                             "every interface)"),
) -> None:
    """Serve the queue manager's status as dspmq -x sees it, for Prometheus (foreground)."""
    import ipaddress

    from miqm.metrics.exporter import run_exporter

    if not 1 <= port <= 65535:
        fail(f"miqm exporter: --port {port} is not a port number: use 1-65535", 2)
    try:
        ipaddress.ip_address(bind)
    except ValueError:
        fail(f"miqm exporter: --bind {bind!r} is not an IP address (127.0.0.1: this host "
             "only, 0.0.0.0: every interface)", 2)
    raise typer.Exit(run_exporter(qmgr, port, bind))


def main() -> None:
    """Console-script entry point."""
    run_typer(app, "miqm")
