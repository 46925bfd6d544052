"""The error log refuses to start when errors/AMQERR01.LOG cannot be written (AMQ6062,
one line saying what to do, exit 71): a queue manager must not run with its error log,
where administrators look first, silently lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockfs.posix import PosixVolume
from miqm.errors import ConfigError
from miqm.ha.errlog import ErrorLog


@pytest.mark.parametrize("damage", ["errors-is-a-file", "log-is-a-directory"])
def test_an_unwritable_error_log_is_refused(tmp_path: Path, damage: str) -> None:
    if damage == "errors-is-a-file":
        (tmp_path / "errors").write_text("not a directory\n")
    else:
        (tmp_path / "errors" / "AMQERR01.LOG").mkdir(parents=True)
    volume = PosixVolume(str(tmp_path))
    with pytest.raises(ConfigError) as info:
        ErrorLog(volume, "QM1", "hosta")
    line = info.value.user_line()
    assert "\n" not in line and line.startswith(
        f"AMQ6062: The DataPath {tmp_path} cannot be used: its error log "
        "errors/AMQERR01.LOG cannot be written (")
    assert line.endswith("start the queue manager again.")
    if damage == "errors-is-a-file":
        assert f"({tmp_path}/errors is a file, not a directory)" in line
    assert info.value.amq == "AMQ6062" and info.value.exit_code == 71
    assert (tmp_path / "errors").is_file() == (damage == "errors-is-a-file")  # left as found
    volume.close()


def test_a_missing_errors_directory_is_created(tmp_path: Path) -> None:
    volume = PosixVolume(str(tmp_path))
    log = ErrorLog(volume, "QM1", "hosta")
    assert (tmp_path / "errors" / "AMQERR01.LOG").is_file()
    log.write("AMQ8003")
    log.close()
    assert "AMQ8003: " in (tmp_path / "errors" / "AMQERR01.LOG").read_text()
    volume.close()
