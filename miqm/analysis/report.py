"""The HTML report: one self-contained file, charts drawn with matplotlib (Agg) and
embedded as base64 PNGs, tables as HTML. Input: the small aggregate tables."""

from __future__ import annotations

import base64
import datetime as dt
import html
import io
from typing import Any

CAUSE_COLOURS = {"kill": "#1f77b4", "host_loss": "#9467bd", "spurious": "#d62728",
                 "self_stop": "#ff7f0e", "switchover": "#2ca02c", "ended": "#7f7f7f",
                 "unknown": "#bcbd22", "paused": "#e377c2"}
#: queue managers drawn in the role timeline (those with the most takeovers)
TIMELINE_QMGRS = 12


def _png(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return ('<img alt="chart" src="data:image/png;base64,'
            + base64.b64encode(buf.getvalue()).decode() + '">')


def _when(sec: float) -> Any:
    return dt.datetime.fromtimestamp(float(sec), dt.UTC).replace(tzinfo=None)


def chart_durations(tk: Any) -> str:
    """Histogram of failover and switchover durations, stacked by cause."""
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(8, 3.2))
    d = tk[tk["duration_s"].notna()]
    if d.empty:
        ax.text(0.5, 0.5, "no takeovers in the history", ha="center", va="center")
        ax.set_axis_off()
        return _png(fig)
    bins = np.linspace(0, max(float(d["duration_s"].max()), 0.1) * 1.05, 30)
    causes = [c for c in CAUSE_COLOURS if (d["cause"] == c).any()]
    ax.hist([d[d["cause"] == c]["duration_s"] for c in causes], bins=bins, stacked=True,
            color=[CAUSE_COLOURS[c] for c in causes], label=causes)
    ax.set_xlabel("duration (s): master lock granted to serving, as the instance measured")
    ax.set_ylabel("takeovers")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # a count: no 0.2 takeovers
    ax.legend(fontsize=8)
    ax.set_title("Failover and switchover durations")
    return _png(fig)


def chart_heatmap(lat: Any, kind: str = "verify") -> str:
    """p99 latency by host (rows) and hour of day (columns), log colour scale."""
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.colors import LogNorm

    x = lat[(lat["kind"] == kind) & (lat["host"] != "*") & (lat["hour"] >= 0)]
    fig, ax = plt.subplots(figsize=(9, 0.35 * max(4, x["host"].nunique()) + 1.2))
    if x.empty:
        ax.text(0.5, 0.5, f"no {kind} latencies", ha="center", va="center")
        ax.set_axis_off()
        return _png(fig)
    hosts = sorted(x["host"].unique())
    grid = np.full((len(hosts), 24), np.nan)
    row = {h: i for i, h in enumerate(hosts)}
    for h, hr, v in zip(x["host"], x["hour"], x["p99_s"], strict=False):
        grid[row[h], int(hr)] = max(float(v), 1e-6)
    im = ax.imshow(grid * 1000, aspect="auto", cmap="magma_r",
                   norm=LogNorm(vmin=max(np.nanmin(grid) * 1000, 1e-3),
                                vmax=max(np.nanmax(grid) * 1000, 1e-3)))
    ax.set_yticks(range(len(hosts)), hosts, fontsize=7)
    ax.set_xticks(range(24))
    ax.set_xlabel("hour of day (UTC)")
    ax.set_title(f"{kind} latency p99 (ms) by host and hour of day")
    fig.colorbar(im, ax=ax, label="ms")
    return _png(fig)


def chart_timeline(line: Any, tk: Any) -> str:
    """Active periods per queue manager (colour: host), takeovers marked by cause."""
    import matplotlib.pyplot as plt

    if line.empty:
        fig, ax = plt.subplots(figsize=(8, 1.5))
        ax.text(0.5, 0.5, "no active instances in the history", ha="center", va="center")
        ax.set_axis_off()
        return _png(fig)
    qmgrs = _timeline_qmgrs(line, tk)
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(qmgrs) + 1.5))
    hosts = sorted(line["host"].unique())
    cmap = plt.get_cmap("tab20")
    colour = {h: cmap(i % 20) for i, h in enumerate(hosts)}
    for y, q in enumerate(qmgrs):
        for _, r in line[line["qmgr"] == q].iterrows():
            a, b = _when(r["active_s"]), _when(max(r["until_s"], r["active_s"]))
            ax.barh(y, b - a, left=a, height=0.6, color=colour[r["host"]], linewidth=0)
        for _, r in tk[tk["qmgr"] == q].iterrows():
            ax.plot(_when(r["active_s"]), y, marker="x" if r["cause"] == "spurious" else "|",
                    color=CAUSE_COLOURS.get(r["cause"], "k"), markersize=9, mew=2)
    ax.set_yticks(range(len(qmgrs)), qmgrs, fontsize=8)
    ax.set_title("Active instance per queue manager (bar colour: host); takeovers marked "
                 "(x: spurious)")
    handles = [plt.Line2D([], [], color=c, marker="|", linestyle="", mew=2, label=k)
               for k, c in CAUSE_COLOURS.items() if (tk["cause"] == k).any()]
    if handles:
        ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1, 1))
    fig.autofmt_xdate()
    return _png(fig)


def _timeline_qmgrs(line: Any, tk: Any) -> list[str]:
    """The queue managers the role timeline draws: those with the most takeovers."""
    counts = tk["qmgr"].value_counts()
    return sorted(list(counts.index[:TIMELINE_QMGRS])
                  or list(line["qmgr"].unique()[:TIMELINE_QMGRS]))


def timeline_key(line: Any, tk: Any) -> str:
    """Which bar colour is which host in the role timeline (chart_timeline's colours), as
    HTML under the chart: the chart said "bar colour: host" and named none, so who was
    active could not be read from it."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    if line.empty:
        return ""
    cmap = plt.get_cmap("tab20")
    hosts = sorted(line["host"].unique())  # the colours as chart_timeline gives them
    drawn = set(line[line["qmgr"].isin(_timeline_qmgrs(line, tk))]["host"])
    return ('<p class="key">active host: ' + " ".join(
        f'<span style="display:inline-block;width:10px;height:10px;background:'
        f'{to_hex(cmap(i % 20))}"></span> {html.escape(str(h))}'
        for i, h in enumerate(hosts) if h in drawn) + "</p>")


def chart_spurious(sp: Any) -> str:
    """For each spurious failover: the old active's verify latency (p50, max) in the
    minutes before it stopped itself."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3))
    if sp.empty:
        ax.text(0.5, 0.5, "no spurious failovers", ha="center", va="center")
        ax.set_axis_off()
        return _png(fig)
    s = sp.head(40)
    xs = range(len(s))
    ax.bar(xs, s["verify_max_before_s"].fillna(0), color="#d62728", label="max")
    ax.bar(xs, s["verify_p50_before_s"].fillna(0), color="#ff9896", label="p50")
    labels = [f"{q}\n{str(t)[5:16]}" for q, t in zip(s["qmgr"], s["stopped_at"], strict=True)]
    ax.set_xticks(list(xs), labels, fontsize=6, rotation=90)
    ax.set_ylabel("verify latency (s)")
    ax.set_title("Spurious failovers: the old active's verifies in the 5 minutes before")
    ax.legend(fontsize=8)
    return _png(fig)


def chart_hwm(hwm: Any) -> str:
    """Fleet-wide hourly peak log write time and its high-water mark."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 2.8))
    if hwm.empty:
        ax.text(0.5, 0.5, "no log write times (liveness events)", ha="center", va="center")
        ax.set_axis_off()
        return _png(fig)
    g = hwm.groupby("hour_s")["peak_write_us"].max().sort_index()
    xs = [_when(s) for s in g.index]
    ax.plot(xs, g.values / 1000, lw=0.8, label="hourly peak (any qmgr)")
    ax.plot(xs, g.cummax().values / 1000, lw=1.5, color="#d62728", label="high-water mark")
    ax.set_ylabel("log write (ms)")
    ax.set_title("Log write time (moving average of ~8 forces)")
    ax.legend(fontsize=8)
    fig.autofmt_xdate()
    return _png(fig)


def _table(df: Any, cols: list[str], limit: int = 50) -> str:
    if df.empty:
        return "<p><i>none</i></p>"
    cols = [c for c in cols if c in df.columns]
    more = f"<p>{len(df) - limit} more rows in the CSV/Parquet table.</p>" \
        if len(df) > limit else ""
    return df[cols].head(limit).to_html(index=False, na_rep="", float_format=lambda v:
                                        f"{v:.6g}", border=0, classes="t") + more


def render(tables: dict, summary: dict, path: str) -> None:
    """Write the report to ``path``."""
    import warnings

    # numpy's and matplotlib's RuntimeWarnings (overflow on huge but finite values) would
    # be printed on stderr, piped or not; the chart is drawn all the same
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _render(tables, summary, path)


def _render(tables: dict, summary: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    tk, lat = tables["takeovers"], tables["latency"]
    s = summary

    def fmt(d: dict | None) -> str:
        return ", ".join(f"{k} {'-' if v is None else f'{v:.4g}'}" for k, v in (d or {}).items())

    cards = [("failovers", s["failovers"]), ("spurious", s["spurious_failovers"]),
             ("switchovers", s["switchovers"]),
             ("active self-stops", ", ".join(f"{k} {v}" for k, v in
                                             s.get("active_self_stops", {}).items()) or "0"),
             ("failover s", fmt(s["failover_seconds"])),
             ("verify s", fmt(s["lock_verify_seconds"])),
             ("slow windows", s["slow_windows"]),
             ("flapping", ", ".join(s["flapping_qmgrs"]) or "none")]
    body = [
        "<h1>miqm failover and lock-latency analysis</h1>",
        f"<p>{s['events']:,} events ({s['lines']:,} lines; {s['malformed_lines']} malformed "
        f"and {s['unsupported_version_lines']} of a newer version skipped, "
        f"{s.get('glued_lines', 0)} torn lines with the next event glued on split, "
        f"{s['duplicates_removed']} duplicate copies merged) from {s['qmgrs']} queue "
        f"managers on {s['hosts']} hosts, {html.escape(str(s['from']))} to "
        f"{html.escape(str(s['to']))}. Percentiles: {html.escape(s['percentile'])}.</p>",
        '<div class="cards">' + "".join(
            f'<div class="card"><b>{html.escape(str(v))}</b><br>{html.escape(k)}</div>'
            for k, v in cards) + "</div>",
        "<h2>Failover durations</h2>", chart_durations(tk),
        _table(tables["durations"][tables["durations"]["qmgr"] == "*"],
               ["kind", "count", "measured", "p50_s", "p95_s", "max_s", "outage_p50_s",
                "outage_max_s"]),
        "<p>measured: takeovers with a duration (the new active wrote failover_end); one "
        "that stopped before it served has none, and the percentiles are of the measured "
        "ones.</p>",
        "<h2>Verify latency by host and hour of day</h2>", chart_heatmap(lat),
        "<h2>Roles over time</h2>", chart_timeline(tables["timeline"], tk),
        timeline_key(tables["timeline"], tk),
        "<h2>Spurious failovers and what preceded them</h2>",
        "<p>The active stopped itself (AMQ7279 lost lock / AMQ7280 stalled verify) although "
        "its host and process were alive.</p>",
        chart_spurious(tables["spurious"]),
        _table(tables["spurious"], ["qmgr", "stopped_at", "prev_host", "prev_fatal_amq",
                                    "verifies_before", "failed_verifies_before",
                                    "verify_p50_before_s", "verify_max_before_s",
                                    "stall_before_s", "slow_window_start",
                                    "slow_window_factor", "new_host", "duration_s"]),
        "<h2>Slow-I/O windows (found from the verify latencies)</h2>",
        _table(tables["slow_windows"], ["host", "start", "end", "minutes", "baseline_p50_s",
                                        "peak_p50_s", "factor", "verifies"]),
        "<h2>Log write time</h2>", chart_hwm(tables["log_write_hwm"]),
        "<h2>Flapping queue managers</h2>",
        _table(tables["flapping"], ["qmgr", "takeovers", "max_in_window", "first_flap"]),
        "<h2>All takeovers</h2>",
        _table(tk, ["at", "qmgr", "kind", "cause", "prev_host", "host", "duration_s",
                    "outage_s", "prev_fatal_amq"], limit=200),
    ]
    style = ("body{font-family:sans-serif;max-width:1100px;margin:auto;color:#222}"
             ".cards{display:flex;flex-wrap:wrap;gap:8px}.card{border:1px solid #ccc;"
             "border-radius:6px;padding:8px 12px;min-width:110px}table.t{border-collapse:"
             "collapse;font-size:12px}table.t td,table.t th{padding:2px 6px;border-bottom:"
             "1px solid #eee}img{max-width:100%}")
    doc = ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>miqm analysis</title>"
           f"<style>{style}</style></head><body>" + "\n".join(body) + "</body></html>\n")
    with open(path, "w", encoding="utf-8") as f:
        f.write(doc)
