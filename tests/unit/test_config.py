"""qm.ini / mqs.ini parsing, MQ's ranges, and the HA timing rule checked at load."""

from __future__ import annotations

import pytest

from miqm import paths
from miqm.config import HATuning, format_ini, parse_ini, parse_qm_ini, render_qm_ini
from miqm.errors import ConfigError, QMgrNotFound, UsageError
from miqm.store.settings import GATHER_AUTO, GATHER_NONE, LogSettings, StoreTuning


def test_round_trip_keeps_every_value() -> None:
    log = LogSettings(log_type="LINEAR", file_pages=128, primary_files=4, secondary_files=3,
                      buffer_pages=64, write_integrity="SingleWrite")
    ha = HATuning(standby_poll=0.5, verify_interval=1, monitor_stall=2, liveness_interval=5,
                  lease=10)
    cfg = parse_qm_ini(render_qm_ini("QM1", log, "/l/QM1", ha))
    assert cfg.name == "QM1"
    assert cfg.log == log
    assert cfg.log_path == "/l/QM1"
    assert cfg.ha == ha


def test_defaults_are_mqs() -> None:
    cfg = parse_qm_ini("")
    assert (cfg.log.primary_files, cfg.log.secondary_files, cfg.log.file_pages) == (3, 2, 4096)
    assert cfg.log.log_type == "CIRCULAR" and cfg.log.triple_write
    assert cfg.log.effective_buffer_pages == 512
    assert (cfg.ha.standby_poll, cfg.ha.verify_interval, cfg.ha.monitor_stall) == (2, 10, 20)
    assert (cfg.ha.liveness_interval, cfg.ha.lease) == (60, 90)
    assert cfg.tuning.checkpoint_log_recd_max == 50000


@pytest.mark.parametrize(
    ("key", "value"),
    [("LogFilePages", "63"), ("LogFilePages", "65536"), ("LogPrimaryFiles", "1"),
     ("LogPrimaryFiles", "511"), ("LogSecondaryFiles", "0"), ("LogBufferPages", "17"),
     ("LogType", "SPIRAL"), ("LogWriteIntegrity", "QuadWrite"), ("LogFilePages", "many")],
)
def test_out_of_range_log_values_are_refused_with_one_line(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_qm_ini(f"Log:\n   {key}={value}\n", "/d/qm.ini")
    line = err.value.user_line()
    assert "\n" not in line and "/d/qm.ini" in line and key in line


@pytest.mark.parametrize(("text", "cpu"), [("auto", GATHER_AUTO), ("AUTO", GATHER_AUTO),
                                           ("none", GATHER_NONE), ("0", 0), ("7", 7)])
def test_group_commit_cpu_values_round_trip(text: str, cpu: int) -> None:
    cfg = parse_qm_ini(f"TuningParameters:\n   GroupCommitCPU={text}\n")
    assert cfg.tuning.group_commit_cpu == cpu
    again = parse_qm_ini(render_qm_ini("QM1", LogSettings(), "/l", None, cfg.tuning))
    assert again.tuning.group_commit_cpu == cpu
    assert parse_qm_ini("").tuning.group_commit_cpu == GATHER_AUTO  # the default
    # crtmqm writes the queue manager's default, not the embedded store's (none)
    fresh = render_qm_ini("QM1", LogSettings(), "/l")
    assert "GroupCommitCPU=auto" in fresh.replace(" ", "")


@pytest.mark.parametrize("value", ["-1", "1024", "two", "1,2", ""])
def test_bad_group_commit_cpu_is_refused_with_one_line(value: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_qm_ini(f"TuningParameters:\n   GroupCommitCPU={value}\n", "/d/qm.ini")
    line = err.value.user_line()
    assert "\n" not in line and "/d/qm.ini" in line and "GroupCommitCPU" in line
    with pytest.raises(ConfigError):
        StoreTuning(group_commit_cpu=-3)


def test_too_many_active_files_refused() -> None:
    with pytest.raises(ConfigError, match="511"):
        parse_qm_ini("Log:\n   LogPrimaryFiles=400\n   LogSecondaryFiles=200\n")


def test_timing_rule_verify_plus_monitor_below_lease() -> None:
    HATuning(verify_interval=10, monitor_stall=20, lease=31)
    with pytest.raises(ConfigError, match="FilesystemLease"):
        HATuning(verify_interval=10, monitor_stall=20, lease=30)
    with pytest.raises(ConfigError, match="FilesystemLease"):
        parse_qm_ini("TuningParameters:\n   VerifyInterval=60\n   MonitorStall=40\n")


def test_corrupt_ini_names_file_and_line() -> None:
    with pytest.raises(ConfigError, match=r"qm.ini line 2"):
        parse_qm_ini("Log:\n\x00\x01garbage\n", "qm.ini")
    with pytest.raises(ConfigError):
        parse_ini("   Orphan=1\n", "x")


def test_comments_and_blank_lines_ignored() -> None:
    stanzas = parse_ini("# c\nLog:\n   LogPrimaryFiles=4 ; note\n\n", "x")
    assert stanzas[0].values == {"LogPrimaryFiles": "4"}


def test_registry_round_trip(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MIQM_DATA_ROOT", str(tmp_path))
    entry = paths.QMgrEntry("QM.A", paths.directory_name("QM.A"), str(tmp_path), "/s/QM!A")
    paths.register(entry)
    assert paths.find("QM.A") == entry
    with pytest.raises(ConfigError):
        paths.register(entry)
    paths.unregister("QM.A")
    with pytest.raises(QMgrNotFound):
        paths.find("QM.A")


def test_bad_qmgr_name_refused() -> None:
    with pytest.raises(UsageError):
        paths.check_qmgr_name("has space")
    with pytest.raises(UsageError):
        paths.check_qmgr_name("x" * 49)


def test_corrupt_mqs_ini_is_one_clear_error(tmp_path) -> None:
    (tmp_path / "mqs.ini").write_bytes(b"\xff\xfe garbage")
    with pytest.raises(ConfigError, match=r"mqs\.ini"):
        paths.load_registry(str(tmp_path))


def test_standby_read_ahead_is_yes_unless_turned_off() -> None:
    assert parse_qm_ini("").ha.read_ahead
    off = parse_qm_ini("TuningParameters:\n   StandbyReadAhead=no\n")
    assert not off.ha.read_ahead
    assert parse_qm_ini("TuningParameters:\n   StandbyReadAhead=YES\n").ha.read_ahead
    with pytest.raises(ConfigError, match="StandbyReadAhead=maybe is not valid: use Yes or No"):
        parse_qm_ini("TuningParameters:\n   StandbyReadAhead=maybe\n", "QM1/qm.ini")
    # kept through crtmqm's rendering and the lease fitting
    text = render_qm_ini("QM1", LogSettings(), "/l", off.ha)
    assert "StandbyReadAhead=No" in text and not parse_qm_ini(text).ha.read_ahead
    assert "StandbyReadAhead" not in render_qm_ini("QM1", LogSettings(), "/l")
    from miqm.autoconfig import fit_lease

    assert not fit_lease(12.0, off.ha)[0].read_ahead
    assert not fit_lease(400.0, off.ha)[0].read_ahead


@pytest.mark.parametrize(
    ("stanza", "key", "value"),
    [("TuningParameters", "VerifyInterval", "nan"), ("TuningParameters", "VerifyInterval", "0"),
     ("TuningParameters", "StandbyPollInterval", "nan"),
     ("TuningParameters", "StandbyPollInterval", "1e999"),
     ("TuningParameters", "MonitorStall", "inf"), ("TuningParameters", "MonitorStall", "0"),
     ("TuningParameters", "LivenessInterval", "-1"),
     ("TuningParameters", "FilesystemLease", "100000"),
     ("TuningParameters", "CheckPointWaitLen", "nan"),
     ("TuningParameters", "CheckPointLogRecdMax", "0"),
     ("TuningParameters", "CheckPointLogRecdMin", "-1"),
     ("QueueManager", "MaxUncommittedMsgs", "-1"),
     ("QueueManager", "MaxUncommittedMsgs", "1000000000"),
     ("QueueManager", "MaxUncommittedMsgs", "ten")],
)
def test_non_finite_and_out_of_range_values_name_stanza_key_and_range(
        stanza: str, key: str, value: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_qm_ini(f"{stanza}:\n   {key}={value}\n", "/d/qm.ini")
    line = err.value.user_line()
    assert "\n" not in line and "/d/qm.ini" in line and f"{stanza} {key}={value}" in line
    assert "must be" in line
    assert "_" not in line.split("/d/qm.ini", 1)[1]  # qm.ini's key names, not internal ones


def test_ha_tuning_names_the_qm_ini_key() -> None:
    with pytest.raises(ConfigError, match="TuningParameters MonitorStall=0 is not valid"):
        HATuning(monitor_stall=0)
    with pytest.raises(ConfigError, match="StandbyPollInterval=nan"):
        HATuning(standby_poll=float("nan"))


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n"])
def test_empty_qm_ini_is_refused_as_damaged(text: str) -> None:
    from miqm.config import check_complete

    with pytest.raises(ConfigError, match=r"/d/qm.ini is empty or damaged.*backup") as err:
        check_complete(text, "/d/qm.ini")
    assert "\n" not in err.value.user_line()


def test_qm_ini_without_log_stanza_is_refused() -> None:
    from miqm.config import check_complete

    whole = render_qm_ini("QM1", LogSettings(log_type="LINEAR"), "/l/QM1")
    check_complete(whole, "/d/qm.ini")
    without_log = format_ini([s for s in parse_ini(whole, "x") if s.name != "Log"])
    with pytest.raises(ConfigError, match="no Log stanza"):
        check_complete(without_log, "/d/qm.ini")


@pytest.mark.parametrize("name", ["x" * 65, "bad host,(x)", "a\nb", "hosta\n", "", "h/st",
                                  "hösta"])
def test_bad_miqm_hostname_is_refused_naming_the_variable(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIQM_HOSTNAME", name)
    with pytest.raises(UsageError, match="MIQM_HOSTNAME") as err:
        paths.hostname()
    assert "\n" not in err.value.user_line()


@pytest.mark.parametrize("name", ["hosta", "x" * 64, "qm-b.example.com", "node_1"])
def test_dns_like_miqm_hostname_is_taken(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIQM_HOSTNAME", name)
    assert paths.hostname() == name


def test_os_host_name_is_checked_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MIQM_HOSTNAME", raising=False)
    monkeypatch.setattr(paths.socket, "gethostname", lambda: "bad name")
    with pytest.raises(UsageError, match="set MIQM_HOSTNAME"):
        paths.hostname()


def test_mqs_ini_that_is_not_text_says_so_and_how_to_recover(tmp_path) -> None:
    (tmp_path / "mqs.ini").write_bytes(b"QueueManager:\n   Name=\x9bQ\n")
    with pytest.raises(ConfigError) as err:
        paths.load_registry(str(tmp_path))
    line = err.value.user_line()
    assert "not valid text" in line and "0x9b" in line and "backup" in line, line
    assert "codec" not in line and "permissions" not in line


@pytest.mark.parametrize("stanza", ["   Name=QM1\n", "   Name=QM1\n   Prefix=/var/mqm\n",
                                    "   Name=QM1\n   Directory=QM1\n"])
def test_a_stanza_without_prefix_directory_or_datapath_is_refused(tmp_path,
                                                                  stanza: str) -> None:
    """MQ's QueueManager stanza needs Prefix and Directory (or a DataPath): without them
    the data's place was made up, and dltmqm said 'deleted' of a running manager."""
    (tmp_path / "mqs.ini").write_text("QueueManager:\n" + stanza)
    with pytest.raises(ConfigError) as err:
        paths.load_registry(str(tmp_path))
    line = err.value.user_line()
    assert "QM1" in line and "DataPath" in line and "addmqinf" in line, line
    (tmp_path / "mqs.ini").write_text("QueueManager:\n" + stanza + "   DataPath=/d/QM1\n")
    assert paths.load_registry(str(tmp_path))["QM1"].data_path == "/d/QM1"


def test_a_relative_data_root_is_made_absolute(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MIQM_DATA_ROOT", "host")
    assert paths.data_root() == str(tmp_path / "host")


@pytest.mark.parametrize("name", ["QM1\n", "QM1\r", "\nQM1", "QM 1", ""])
def test_qmgr_name_with_a_newline_or_space_is_refused(name: str) -> None:
    with pytest.raises(UsageError, match="AMQ7048") as err:
        paths.check_qmgr_name(name)
    assert "\n" not in err.value.user_line()


# ---- read_qm_ini: the one reader of qm.ini (strmqm's controller, dmpmqlog, dltmqm)

def _data_dir(tmp_path, body: bytes | None):  # type: ignore[no-untyped-def]
    from lockfs.posix import PosixVolume

    if body is not None:
        (tmp_path / "qm.ini").write_bytes(body)
    return PosixVolume(str(tmp_path))


_GOOD = render_qm_ini("QM1", LogSettings(), "/l/QM1").encode()


def test_read_qm_ini_parses_and_lets_the_caller_edit_the_text_first(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from miqm.config import read_qm_ini

    seen: list[str] = []

    def edit(text: str, source: str) -> str:
        seen.append(source)
        return text.replace("/l/QM1", "/m/QM1")

    cfg = read_qm_ini(_data_dir(tmp_path, _GOOD), "/d/QM1", "QM1", edit=edit)
    assert cfg.name == "QM1" and cfg.log_path == "/m/QM1"
    assert seen == ["/d/QM1/qm.ini"]


def test_read_qm_ini_says_what_is_wrong_in_one_amq7880_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from miqm.config import read_qm_ini

    with pytest.raises(ConfigError) as missing:
        read_qm_ini(_data_dir(tmp_path, None), "/d/QM1", "QM1")
    assert missing.value.amq == "AMQ7880" and "missing from /d/QM1" in str(missing.value)
    (tmp_path / "qm.ini").mkdir()  # cannot be read as a file
    with pytest.raises(ConfigError) as unreadable:
        read_qm_ini(_data_dir(tmp_path, None), "/d/QM1", "QM1")
    assert unreadable.value.amq == "AMQ7880" and "cannot read qm.ini" in str(unreadable.value)
    (tmp_path / "qm.ini").rmdir()
    with pytest.raises(ConfigError) as latin1:  # never read with replacement characters
        read_qm_ini(_data_dir(tmp_path, b"Log:\n   LogPath=/l/Q\xe9\n"), "/d/QM1", "QM1")
    assert "/d/QM1/qm.ini is damaged or not UTF-8" in str(latin1.value)
    with pytest.raises(ConfigError) as bad:
        read_qm_ini(_data_dir(tmp_path, b"Log:\n   LogPrimaryFiles=x\n"), "/d/QM1", "QM1")
    assert "/d/QM1/qm.ini" in str(bad.value)
    for exc in (missing, unreadable, latin1, bad):
        assert len(exc.value.user_line().splitlines()) == 1


def test_read_qm_ini_for_dltmqm_finds_the_log_path_of_a_damaged_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from miqm.config import read_qm_ini

    assert read_qm_ini(_data_dir(tmp_path, None), "/d/QM1", "QM1", damaged_ok=True) is None
    damaged = b"Log:\n   LogPrimaryFiles=x\n   LogPath=/l/Q\xe9\n"
    cfg = read_qm_ini(_data_dir(tmp_path, damaged), "/d/QM1", "QM1", damaged_ok=True)
    assert cfg is not None and cfg.log_path == "/l/Q\ufffd"
    cfg = read_qm_ini(_data_dir(tmp_path, _GOOD), "/d/QM1", "QM1", damaged_ok=True)
    assert cfg is not None and cfg.log_path == "/l/QM1"
