"""The systemd units in deploy/systemd/: ``systemd-analyze verify`` accepts them, and each
unit's ExecStart= command line, run for real with the unit's environment, does what the
unit's settings rely on (Type=notify: READY=1 as active or standby; KillSignal SIGTERM:
exit 0, which Restart=on-failure does not restart).

No systemd runs here (and CI may not run one either): the command line is taken from the
unit file, ``%I`` and ``${VAR}`` expanded as systemd does, and run as a child process with
a notify socket of the test's own.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from miqm.localpair import LocalPair

pytestmark = pytest.mark.integration

UNITS = Path(__file__).resolve().parents[2] / "deploy" / "systemd"
BIN = os.path.dirname(sys.executable)
TUNING = {"StandbyPollInterval": "0.2", "VerifyInterval": "0.5", "MonitorStall": "2",
          "LivenessInterval": "5", "FilesystemLease": "90"}


def _unit(name: str) -> dict[str, list[str]]:
    """The unit's settings (key -> values in order), comments and sections dropped."""
    out: dict[str, list[str]] = {}
    for raw in (UNITS / name).read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#;[":
            continue
        key, _, value = line.partition("=")
        out.setdefault(key.strip(), []).append(value.strip())
    return out


def _local(text: str) -> str:
    """The unit with its commands taken from this test's environment."""
    return text.replace("/usr/local/bin/", BIN + "/")


def _verify(tmp: Path, files: dict[str, str]) -> subprocess.CompletedProcess[str]:
    for name, text in files.items():
        (tmp / name).write_text(text)
    return subprocess.run(["systemd-analyze", "verify", *files], cwd=tmp,
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def analyze() -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (make install-system)")


def test_the_units_verify(analyze: None, tmp_path: Path) -> None:
    units = sorted(UNITS.glob("*@.service"))
    assert {u.name for u in units} == {"miqm@.service", "miqm-exporter@.service"}
    files = {u.name.replace("@.", "@QM1."): _local(u.read_text()) for u in units}
    res = _verify(tmp_path, files)
    assert res.returncode == 0 and not (res.stdout + res.stderr).strip(), \
        res.stdout + res.stderr
    # the check can fail: a bad setting or a missing command is reported
    broken = {"miqm@QM2.service": files["miqm@QM1.service"].replace(
        "Type=notify", "Type=notifyy").replace(BIN + "/strmqm", "/nonexistent/strmqm")}
    res = _verify(tmp_path, broken)
    assert "notifyy" in res.stderr and "/nonexistent/strmqm" in res.stderr


def test_the_units_are_sandboxed(analyze: None, tmp_path: Path) -> None:
    """``systemd-analyze security`` rates both units' exposure OK (below 5.0): they ran
    with every privilege systemd can take away kept (9.2, UNSAFE), though the instance
    and the exporter need none of them; the rating can fail (the units as they were)."""
    probe = subprocess.run(["systemd-analyze", "security", "--help"], capture_output=True,
                           text=True, timeout=60)
    if "--offline" not in probe.stdout:
        pytest.skip("this systemd-analyze has no 'security --offline' (systemd < 252)")

    def exposure(name: str, text: str) -> subprocess.CompletedProcess[str]:
        (tmp_path / name).write_text(text)
        return subprocess.run(["systemd-analyze", "security", "--offline=yes",
                               "--threshold=49", name], cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)

    for unit in sorted(UNITS.glob("*@.service")):
        text = _local(unit.read_text())
        res = exposure(unit.name.replace("@.", "@QM1."), text)
        assert res.returncode == 0, res.stdout[-600:] + res.stderr
        assert "OK" in res.stdout.splitlines()[-1], res.stdout[-300:]
        # without its sandboxing lines the same unit is refused
        bare = "\n".join(ln for ln in text.splitlines()
                         if not ln.startswith(("NoNewPrivileges", "CapabilityBoundingSet",
                                               "PrivateTmp", "ProtectSystem",
                                               "ProtectKernel", "ProtectControlGroups",
                                               "ProtectClock", "ProtectHostname",
                                               "Restrict", "LockPersonality",
                                               "SystemCallArchitectures")))
        assert exposure("bare@QM1.service", bare).returncode != 0


def _command(unit: dict[str, list[str]], instance: str, env: dict[str, str]) -> list[str]:
    """ExecStart= as systemd would run it for ``instance`` with ``env``."""
    (line,) = unit["ExecStart"]
    words = _local(line).replace("%I", instance).replace("%i", instance).split()
    return [re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], w) for w in words]


def _environment(unit: dict[str, list[str]], **over: str) -> dict[str, str]:
    env = dict(os.environ)
    for value in unit.get("Environment", []):
        for pair in value.split():
            k, _, v = pair.partition("=")
            env[k] = v
    env.update(over)
    return env


class Notify:
    """A notify socket like systemd's: collects what the service sends."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="miqm-notify-")
        self.path = os.path.join(self.dir, "n")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.2)
        self.got: list[str] = []

    def wait_for(self, needle: str, timeout: float = 60.0, whole_line: bool = False) -> str:
        """The first message holding ``needle`` (``whole_line``: as one of its lines)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for msg in self.got:
                if (needle in msg.splitlines()) if whole_line else (needle in msg):
                    return msg
            try:
                self.got.append(self.sock.recv(4096).decode())
            except TimeoutError:
                pass
        raise AssertionError(f"{needle!r} never notified; got {self.got}")

    def close(self) -> None:
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[LocalPair]:
    p = LocalPair(qmgr="QMUNIT", base=str(tmp_path / "pair"), tuning=dict(TUNING))
    p.create()
    try:
        yield p
    finally:
        p.close()


def test_the_queue_manager_units_command_line_runs_as_the_unit_expects(
        pair: LocalPair, tmp_path: Path) -> None:
    unit = _unit("miqm@.service")
    assert unit["Type"] == ["notify"] and unit["Restart"] == ["on-failure"]
    procs: list[subprocess.Popen[bytes]] = []
    notes = {h: Notify() for h in ("a", "b")}
    try:
        for h, host in (("a", pair.a), ("b", pair.b)):
            env = _environment(unit, MIQM_DATA_ROOT=host.root, MIQM_HOSTNAME=host.name,
                               NOTIFY_SOCKET=notes[h].path)
            argv = _command(unit, pair.qmgr, env)
            assert argv[1:] == ["-x", "--foreground", pair.qmgr]
            with open(tmp_path / f"{h}.out", "wb") as out:
                procs.append(subprocess.Popen(argv, env=env, stdout=out,
                                              stderr=subprocess.STDOUT))
            wanted = "STATUS=Running as standby" if h == "b" else "STATUS=Running"
            assert "READY=1" in notes[h].wait_for(wanted)
        a, b = procs
        assert pair.serving(pair.a)
        # systemctl stop: SIGTERM; 0 is success, so Restart=on-failure leaves it stopped
        for proc, h in ((b, "b"), (a, "a")):
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == 0, (tmp_path / f"{h}.out").read_text()
            notes[h].wait_for("STOPPING=1")
        from miqm.ha.foreground import EXIT_CODES, NO_RESTART

        prevent = [int(x) for x in unit["RestartPreventExitStatus"][0].split()]
        assert sorted(prevent) == sorted(NO_RESTART) and set(prevent) <= set(EXIT_CODES)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        for n in notes.values():
            n.close()


def test_the_unit_restarts_a_killed_instance_as_standby_and_stop_ends_both(
        pair: LocalPair, tmp_path: Path) -> None:
    """What docs/runbook.md section 6 and the unit's comments promise, on the unit's own
    command line: a killed instance (kill -9: Restart=on-failure restarts it) comes back as
    the standby once the other has taken over; ``systemctl stop`` of the active (SIGTERM)
    exits 0 and the standby then ends by itself with 0 (MQ's rule), so neither unit is
    restarted."""
    unit = _unit("miqm@.service")
    prevent = {int(x) for x in unit["RestartPreventExitStatus"][0].split()}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    notes: list[Notify] = []

    def start(h: str, host: object, wanted: str) -> None:
        note = Notify()
        notes.append(note)
        env = _environment(unit, MIQM_DATA_ROOT=host.root,  # type: ignore[attr-defined]
                           MIQM_HOSTNAME=host.name,  # type: ignore[attr-defined]
                           NOTIFY_SOCKET=note.path)
        with open(tmp_path / f"{h}.out", "ab") as out:
            procs[h] = subprocess.Popen(_command(unit, pair.qmgr, env), env=env, stdout=out,
                                        stderr=subprocess.STDOUT)
        msg = note.wait_for("READY=1")
        assert f"STATUS={wanted}" in msg.splitlines(), (msg, log(h))

    def log(h: str) -> str:
        return (tmp_path / f"{h}.out").read_text()

    try:
        start("a", pair.a, "Running")
        start("b", pair.b, "Running as standby")
        procs["a"].send_signal(signal.SIGKILL)  # a crash: systemd restarts it
        assert procs["a"].wait(30) == -signal.SIGKILL
        pair.wait_active(not_host=pair.a.name, timeout=60)
        # the standby that took over tells systemd it runs as the active now
        notes[1].wait_for("STATUS=Running", timeout=30, whole_line=True)
        start("a", pair.a, "Running as standby")  # what the restart runs, as the docs say
        assert pair.active()["host"] == pair.b.name  # type: ignore[index]
        procs["b"].send_signal(signal.SIGTERM)  # systemctl stop on the active host
        assert procs["b"].wait(60) == 0, log("b")
        assert procs["a"].wait(60) == 0, log("a")  # the standby ended with it: not restarted
        assert 0 not in prevent  # (0 is success: Restart=on-failure leaves it stopped)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        for n in notes:
            n.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_exporter_units_command_line_serves_metrics(pair: LocalPair,
                                                         tmp_path: Path) -> None:
    probe = subprocess.run([os.path.join(BIN, "miqm"), "exporter", "--help"],
                           capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        pytest.skip("this build has no 'miqm exporter' (issue 14)")
    unit = _unit("miqm-exporter@.service")
    port = _free_port()
    env = _environment(unit, MIQM_DATA_ROOT=pair.a.root, MIQM_HOSTNAME=pair.a.name,
                       MIQM_EXPORTER_PORT=str(port))
    argv = _command(unit, pair.qmgr, env)
    with open(tmp_path / "exporter.out", "wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        body = ""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                            timeout=5) as r:
                    body = r.read().decode()
                break
            except OSError:
                time.sleep(0.2)
        assert "miqm_" in body, (tmp_path / "exporter.out").read_text()
        assert pair.qmgr in body
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
