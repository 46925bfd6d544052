"""What ``miqm analyze run`` prints after the job (the summary's figures are made by
Spark elsewhere; here only their wording): counts in the singular where they are one,
and report.html named only when it was written."""

from __future__ import annotations

from miqm.cli.umbrella import summary_lines


def _summary(**counts: int) -> dict:
    base = {"events": 12, "failovers": 3, "spurious_failovers": 0, "switchovers": 2,
            "malformed_lines": 0,
            "failover_seconds": {"p50": 1.5, "p95": 2.0, "max": 2.5},
            "lock_verify_seconds": {"p50": 0.001, "p99": None}}
    return {**base, **counts}


def test_counts_of_one_are_singular_and_others_plural() -> None:
    one = summary_lines(_summary(events=1, failovers=1, switchovers=1, malformed_lines=1),
                        "/o", report=True)[0]
    assert one.startswith("1 event: 1 failover (p50 1.5s")
    assert "1 switchover;" in one and "1 malformed line skipped" in one
    many = summary_lines(_summary(events=12_000, malformed_lines=0), "/o", report=True)[0]
    assert many.startswith("12,000 events: 3 failovers")
    assert "2 switchovers;" in many and "0 malformed lines skipped" in many
    assert "p99 -s" in many  # no figure: a dash, not None


def test_no_report_names_no_report_file() -> None:
    with_report = summary_lines(_summary(), "/out", report=True)[1]
    assert with_report.startswith("report: /out/report.html  summary: /out/summary.json")
    without = summary_lines(_summary(), "/out", report=False)[1]
    assert "report.html" not in without
    assert without == "summary: /out/summary.json  tables: /out/tables/"


def test_what_only_some_histories_have_is_said_only_when_present() -> None:
    plain = summary_lines(_summary(), "/o", report=True)[0]
    assert "without a measured" not in plain and "by itself" not in plain
    assert "torn" not in plain
    odd = summary_lines(_summary(failovers_unmeasured=1, glued_lines=2)
                        | {"active_self_stops": {"AMQ7279": 1, "AMQ7280": 2}},
                        "/o", report=True)[0]
    assert "3 failovers (p50" in odd and ", 1 without a measured duration" in odd
    assert "; 3 stops of an active by itself with no standby to take over" in odd
    assert "; 2 torn lines split where the next event was glued on" in odd
