"""The shipped alert rules (deploy/prometheus/): promtool accepts them and their unit
tests pass, every rule is tested firing and not firing, and every rule tells the person
paged what to run."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

DIR = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
RULES = DIR / "miqm-rules.yml"
TESTS = DIR / "miqm-rules.test.yml"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (Debian package prometheus: "
                             "make install-system)")


def _rules() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120,
                          cwd=DIR)


@needs_promtool
def test_promtool_checks_rules_and_config() -> None:
    for args in (("check", "rules", RULES.name), ("check", "config", "prometheus.yml")):
        proc = _promtool(*args)
        assert proc.returncode == 0, proc.stdout + proc.stderr


@needs_promtool
def test_promtool_unit_tests_pass() -> None:
    proc = _promtool("test", "rules", TESTS.name)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout + proc.stderr


@needs_promtool
def test_promtool_unit_tests_catch_a_changed_threshold(tmp_path: Path) -> None:
    """The unit tests can fail: the same tests against rules with one threshold moved."""
    text = RULES.read_text().replace("resets(miqm_failovers_total[1h])\n          )) > 3",
                                     "resets(miqm_failovers_total[1h])\n          )) > 30")
    assert text != RULES.read_text()
    (tmp_path / RULES.name).write_text(text)
    shutil.copy(TESTS, tmp_path / TESTS.name)
    proc = subprocess.run([str(PROMTOOL), "test", "rules", TESTS.name], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "MiqmFlapping" in proc.stdout + proc.stderr


# one threshold or matcher of each rule added for the SRE review, moved so that the rule
# must fire where it did not (or not where it did): its unit test must then fail
# ("Alert/what" keys: another threshold of the same alert)
MOVED = {
    "MiqmQueueNearlyFull": ("(miqm_queue_max_depth[1m]) > 0) > 0.8",
                            "(miqm_queue_max_depth[1m]) > 0) > 0.95"),
    "MiqmLockAttemptLatencyHigh": ("(0.5 * miqm_monitor_stall_seconds)",
                                   "(5 * miqm_monitor_stall_seconds)"),
    "MiqmInstanceTargetDown": ('instance) (up{job="miqm"}) == 0',
                               'instance) (up{job="miqm"}) == 1'),
    "MiqmAllInstancesDown": ('qmgr) (up{job="miqm"}) == 0', 'qmgr) (up{job="miqm"}) <= 1'),
    "MiqmNoStandby": ("unless on (qmgr, instance, job) (miqm_qmgr_status_available == 0)",
                      "unless on (qmgr, instance, job) (miqm_qmgr_status_available == 2)"),
    "MiqmQueueDamaged": ("(max_over_time(miqm_queues_damaged[1m]))",
                         "(miqm_queues_damaged)"),
    # the queues past QueueLimit read from their own gauge, not hidden by an exported one
    "MiqmQueueNearlyFull/unexported": (
        "max_over_time(miqm_queues_unexported_fullest_ratio[1m])) > 0.8",
        "max_over_time(miqm_queues_unexported_fullest_ratio[1m])) > 0.95"),
    # a damaged qmstatus.ini read in time is not "the shared files do not answer"
    "MiqmStatusNotAvailable": ("unless on (qmgr, instance, job) (miqm_qmgr_status_damaged == 1)",
                               "unless on (qmgr, instance, job) (miqm_qmgr_status_damaged == 2)"),
}


@needs_promtool
@pytest.mark.parametrize("key", sorted(MOVED))
def test_promtool_unit_tests_catch_a_moved_threshold_of_the_new_rules(
        key: str, tmp_path: Path) -> None:
    old, new = MOVED[key]
    alert = key.split("/")[0]  # "Alert/what": a second threshold of one alert
    assert RULES.read_text().count(old) == 1, old
    (tmp_path / RULES.name).write_text(RULES.read_text().replace(old, new))
    shutil.copy(TESTS, tmp_path / TESTS.name)
    proc = subprocess.run([str(PROMTOOL), "test", "rules", TESTS.name], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert f"alertname: {alert}," in proc.stdout + proc.stderr



@needs_promtool
def test_log_space_alert_is_not_raised_by_the_log_between_checkpoints(tmp_path: Path) -> None:
    """MiqmLogSpaceNearlyFull reads the log the oldest unit pins, not the log in use: on
    the rule that read the log in use (restart point to head), the unit tests' QM3 (every
    unit committed, the log in use at 94% of the limit before each checkpoint) fires."""
    old = "max_over_time(miqm_log_space_pinned_bytes[1m])"
    assert RULES.read_text().count(old) == 1
    (tmp_path / RULES.name).write_text(
        RULES.read_text().replace(old, "max_over_time(miqm_log_space_used_bytes[1m])"))
    shutil.copy(TESTS, tmp_path / TESTS.name)
    proc = subprocess.run([str(PROMTOOL), "test", "rules", TESTS.name], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert 'alertname="MiqmLogSpaceNearlyFull", qmgr="QM3"' in proc.stdout + proc.stderr

def test_every_rule_is_tested_firing_and_not_firing() -> None:
    names = {r["alert"] for r in _rules()}
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in yaml.safe_load(TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert names - firing == set(), "rules never tested firing"
    assert names - quiet == set(), "rules never tested not firing"


def test_every_rule_says_what_to_run() -> None:
    required = {"MiqmNoActiveInstance", "MiqmSplitBrain", "MiqmNoStandby", "MiqmFailover",
                "MiqmVerifyLatencyHigh", "MiqmLogWriteTimeHigh", "MiqmLogSpaceNearlyFull",
                "MiqmLivenessMarginLow", "MiqmFlapping", "MiqmQueueNearlyFull",
                "MiqmLockAttemptLatencyHigh", "MiqmInstanceTargetDown",
                "MiqmAllInstancesDown", "MiqmAuthenticationFailures",
                "MiqmStatusNotAvailable", "MiqmExporterDown", "MiqmStatusFileDamaged"}
    rules = {r["alert"]: r for r in _rules()}
    assert required <= set(rules)
    for name, rule in rules.items():
        ann = rule.get("annotations", {})
        assert ann.get("summary") and ann.get("description"), name
        assert any(cmd in ann["description"]
                   for cmd in ("dspmq -m", "amqldmpa", "amqmfsck", "AMQERR01.LOG")), name
        assert rule.get("labels", {}).get("severity") in ("critical", "warning"), name


def test_every_rule_points_at_its_runbook_section() -> None:
    """``runbook_url`` of each rule is docs/metrics.md#<alert>, a heading that exists."""
    doc = (DIR.parents[1] / "docs" / "metrics.md").read_text()
    anchors = {h.strip().lower() for h in re.findall(r"^#{2,4} (.+)$", doc, re.M)}
    for name, rule in {r["alert"]: r for r in _rules()}.items():
        url = rule.get("annotations", {}).get("runbook_url", "")
        assert url == f"docs/metrics.md#{name.lower()}", (name, url)
        assert name.lower() in anchors, f"docs/metrics.md has no section {name}"


def test_one_outage_pages_once_where_the_targets_name_their_queue_manager() -> None:
    """Every instance of a pair dead raised MiqmNoActiveInstance (the exporter) and
    MiqmAllInstancesDown (up of the job), two pages for one outage: the instance job's
    targets carry qmgr in the shipped configurations, MiqmAllInstancesDown keeps it, and
    Alertmanager inhibits it by MiqmNoActiveInstance of the same queue manager."""
    rules = {r["alert"]: r for r in _rules()}
    assert "qmgr" in re.search(r"by \(([^)]*)\)", rules["MiqmAllInstancesDown"]["expr"]
                               ).group(1)
    for config in ("prometheus.yml", "compose-prometheus.yml"):
        jobs = {j["job_name"]: j for j in yaml.safe_load((DIR / config).read_text())
                ["scrape_configs"]}
        for static in jobs["miqm"]["static_configs"]:
            assert static.get("labels", {}).get("qmgr"), config
    am = yaml.safe_load((DIR.parent / "alertmanager" / "alertmanager.yml").read_text())
    assert any(i["source_matchers"] == ['alertname="MiqmNoActiveInstance"']
               and i["target_matchers"] == ['alertname="MiqmAllInstancesDown"']
               and i["equal"] == ["qmgr"] for i in am["inhibit_rules"])
    # and every instance of one pair down holds back the target-down alerts of that pair
    # only, not those of another pair scraped by the same job
    assert "qmgr" in re.search(r"by \(([^)]*)\)", rules["MiqmInstanceTargetDown"]["expr"]
                               ).group(1)
    assert any(i["source_matchers"] == ['alertname="MiqmAllInstancesDown"']
               and i["target_matchers"] == ['alertname="MiqmInstanceTargetDown"']
               and set(i["equal"]) == {"job", "qmgr"} for i in am["inhibit_rules"])
