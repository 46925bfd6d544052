"""miqm.autoconfig: setmqini's edits, AutoConfig merging and MQSC runs, lease fitting."""

from __future__ import annotations

from pathlib import Path

import pytest

from miqm import autoconfig
from miqm.config import HATuning, Stanza, format_ini, parse_ini, parse_qm_ini
from miqm.errors import ConfigError

BASE = "QueueManager:\n   Name=QM1\nTuningParameters:\n   VerifyInterval=10\n"


def test_set_key_changes_the_first_stanza_or_adds_one() -> None:
    stanzas = parse_ini(BASE, "qm.ini")
    autoconfig.set_key(stanzas, "TuningParameters", "VerifyInterval", "2")
    autoconfig.set_key(stanzas, "Metrics", "Port", "9157")
    text = format_ini(stanzas)
    assert "VerifyInterval=2" in text and "VerifyInterval=10" not in text
    assert text.endswith("Metrics:\n   Port=9157\n")


def test_delete_key_removes_an_emptied_stanza() -> None:
    stanzas = parse_ini(BASE, "qm.ini")
    assert autoconfig.delete_key(stanzas, "TuningParameters", "VerifyInterval")
    assert [s.name for s in stanzas] == ["QueueManager"]
    assert not autoconfig.delete_key(stanzas, "TuningParameters", "VerifyInterval")


@pytest.mark.parametrize("stanza,key,value", [("Bad Stanza", "K", "1"), ("S", "1K", "1"),
                                              ("S", "K", "a#b"), ("S", "K", "a\nb")])
def test_bad_names_and_values_are_refused(stanza: str, key: str, value: str) -> None:
    with pytest.raises(ConfigError):
        autoconfig.set_key([], stanza, key, value)


def test_apply_ini_merges_files_in_name_order_and_ignores_their_autoconfig(
        tmp_path: Path) -> None:
    (tmp_path / "b.ini").write_text("TuningParameters:\n   VerifyInterval=3\n")
    (tmp_path / "a.ini").write_text("TuningParameters:\n   VerifyInterval=2\n"
                                    "AutoConfig:\n   IniConfig=/elsewhere\n"
                                    "Channels:\n   MaxChannels=5\n")
    (tmp_path / "notes.txt").write_text("not ini")
    text = BASE + f"AutoConfig:\n   IniConfig={tmp_path}\n"
    merged, changed = autoconfig.apply_ini(text, "qm.ini")
    assert changed
    cfg = parse_qm_ini(merged)
    assert cfg.ha.verify_interval == 3  # b.ini after a.ini
    assert "MaxChannels=5" in merged and "/elsewhere" not in merged
    assert autoconfig.apply_ini(merged, "qm.ini") == (merged, False)  # idempotent


def test_apply_ini_names_a_missing_or_bad_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        autoconfig.apply_ini(BASE + f"AutoConfig:\n   IniConfig={tmp_path}/nope.ini\n", "q")
    (tmp_path / "bad.ini").write_text("no stanza here\n")
    with pytest.raises(ConfigError, match=r"bad\.ini line 1"):
        autoconfig.apply_ini(BASE + f"AutoConfig:\n   IniConfig={tmp_path}\n", "q")
    (tmp_path / "bad.ini").unlink()
    with pytest.raises(ConfigError, match="holds no"):
        autoconfig.apply_ini(BASE + f"AutoConfig:\n   IniConfig={tmp_path}\n", "q")


def test_mqsc_is_checked_and_run_command_by_command(tmp_path: Path) -> None:
    script = tmp_path / "q.mqsc"
    script.write_text("* comment\nDEFINE QLOCAL(A) REPLACE\nDEFINE QLOCAL(B)\nEND\n"
                      "DEFINE QLOCAL(C)\n")
    assert autoconfig.check_mqsc(str(script)) == 2
    seen: list[str] = []

    def execute(cmd: dict) -> dict:
        seen.append(cmd["name"])
        if cmd["name"] == "B":
            return {"ok": True, "failed": True, "lines": ["AMQ8150E: object exists"]}
        return {"ok": True, "failed": False, "lines": ["AMQ8006I: created"]}

    count, failures = autoconfig.run_mqsc(str(script), execute)
    assert seen == ["A", "B"] and count == 2
    assert len(failures) == 1 and "AMQ8150E" in failures[0] and "q.mqsc" in failures[0]
    script.write_text("DEFINE QLOCAL(A) MAXDEPTH(x)\n")
    with pytest.raises(ConfigError, match="not valid MQSC"):
        autoconfig.check_mqsc(str(script))


def test_a_script_cut_short_after_a_continuation_runs_no_part_of_its_command(
        tmp_path: Path) -> None:
    """'DEFINE QLOCAL(A) REPLACE +' at the end of the file: run as it stood it would put
    every attribute of A back to its default; refused as runmqsc refuses it."""
    script = tmp_path / "cut.mqsc"
    script.write_text("DEFINE QLOCAL(B)\nDEFINE QLOCAL(A) REPLACE +\n")
    with pytest.raises(ConfigError, match="incomplete and was not run"):
        autoconfig.check_mqsc(str(script))
    seen: list[str] = []

    def execute(cmd: dict) -> dict:
        seen.append(cmd["name"])
        return {"ok": True, "failed": False, "lines": ["AMQ8006I: created"]}

    count, failures = autoconfig.run_mqsc(str(script), execute)
    assert seen == ["B"] and count == 1
    assert len(failures) == 1 and "incomplete" in failures[0] and "cut.mqsc" in failures[0]


@pytest.mark.parametrize("lease", [1, 5, 10, 20, 45, 59, 60, 90, 120])
def test_fit_lease_always_fits_and_keeps_defaults_when_they_do(lease: int) -> None:
    ha, line = autoconfig.fit_lease(float(lease))
    assert ha.verify_interval + ha.monitor_stall <= lease / 2
    assert ha.lease == lease and f"{lease}s" in line
    HATuning(ha.standby_poll, ha.verify_interval, ha.monitor_stall, ha.liveness_interval,
             ha.lease)  # valid
    if lease >= 60:
        assert (ha.verify_interval, ha.monitor_stall) == (10, 20)
    else:
        assert ha.verify_interval < 10 and "chosen" in line


def test_measured_lease_only_where_it_can_be_measured() -> None:
    class Local:
        lease_seconds = None

    class Nfs:
        lease_seconds = 7.0

        def __init__(self, answers: bool) -> None:
            self.answers = answers

        def learn_lease(self) -> bool:
            return self.answers

    assert autoconfig.measured_lease(Local()) is None
    assert autoconfig.measured_lease(Nfs(True)) == 7.0
    assert autoconfig.measured_lease(Nfs(False)) is None


def test_autoconfig_keys_last_wins() -> None:
    stanzas = [Stanza("AutoConfig", {"IniConfig": "/a"}), Stanza("AutoConfig",
                                                                   {"IniConfig": "/b"})]
    assert autoconfig.autoconfig(stanzas) == {"IniConfig": "/b"}
