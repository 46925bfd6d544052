"""deploy/qm-entrypoint.sh run for real on this machine (no container): started as root,
as the image starts it, whatever it runs runs as MIQM_USER (mqm in the image), never as
root."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ENTRYPOINT = Path(__file__).resolve().parents[2] / "deploy" / "qm-entrypoint.sh"


def _run(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env}
    return subprocess.run(["sh", str(ENTRYPOINT), *argv], env=full, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (the image starts as root)")
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv (util-linux) missing")
def test_a_command_given_to_the_image_runs_as_the_unprivileged_user(tmp_path: Path) -> None:
    """The compose's app (``command: python3 /opt/miqm/deploy/app.py``) went straight to
    ``exec "$@"`` as root: it now runs as MIQM_USER, groups and all, with its HOME in the
    data root."""
    proc = _run("sh", "-c", 'echo "$(id -u) $(id -g) $(id -G) $HOME"', MIQM_USER="nobody",
                MIQM_DATA_ROOT=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    uid = subprocess.run(["id", "-u", "nobody"], capture_output=True, text=True).stdout
    gid = subprocess.run(["id", "-g", "nobody"], capture_output=True, text=True).stdout
    assert proc.stdout.split() == [uid.strip(), gid.strip(), gid.strip(), str(tmp_path)], \
        proc.stdout
    # the exit status is the command's
    assert _run("sh", "-c", "exit 3", MIQM_USER="nobody").returncode == 3
    # MIQM_USER=root keeps root, for whoever needs it (and says so in the compose)
    assert _run("id", "-u", MIQM_USER="root").stdout.strip() == "0"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (the image starts as root)")
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv (util-linux) missing")
def test_an_unknown_user_is_one_line_and_runs_nothing(tmp_path: Path) -> None:
    """A MIQM_USER the image does not have: the command does not run (as root or at all);
    id's own line names the user."""
    marker = tmp_path / "ran"
    proc = _run("touch", str(marker), MIQM_USER="no-such-user-miqm")
    assert proc.returncode != 0 and not marker.exists()
    assert "no-such-user-miqm" in proc.stderr and "Traceback" not in proc.stderr
