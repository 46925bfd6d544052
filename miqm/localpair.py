"""Two instances of one queue manager on this machine, driven through the real console
commands (crtmqm, strmqm -x, dspmq, endmqm, amqsput, amqsget, runmqsc) as separate
processes: two data roots and two host names sharing one data and log directory.

Used by ``miqm demo`` and ``miqm bench failover``; the integration tests use the same
commands. Nothing here needs root.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field

from miqm.config import Stanza, format_ini, parse_ini
from miqm.errors import MiqmError
from miqm.ha.runfile import alive

#: Timings that make a failover watchable in seconds (all validated by config.HATuning).
DEMO_TUNING = {
    "StandbyPollInterval": "0.2",
    "VerifyInterval": "1",
    "MonitorStall": "3",
    "LivenessInterval": "10",
    "FilesystemLease": "90",
}

#: A client's settings for reaching a queue manager elsewhere: the pair's commands are
#: local (bindings mode, the data directory's own credential), so a user's exported ones
#: (e.g. from the README's client section) are not theirs.
CLIENT_ONLY_VARS = ("MIQM_CONNECTION", "MIQM_CREDENTIAL", "MIQM_TLS_CA", "MIQM_TLS_CERT",
                    "MIQM_TLS_KEY")
#: This machine's instance settings a user may have exported for a real queue manager: an
#: address the pair's loopback instances cannot bind, or one metrics port both would want.
HOST_ONLY_VARS = ("MIQM_LISTENER_HOST", "MIQM_METRICS_PORT", "MIQM_FAULTS")


class PairError(MiqmError):
    """A step of the two-instance driver failed (the command's own line is included)."""


def command_path(name: str) -> str:
    """Where the console command ``name`` is: on PATH, else where this Python installs
    scripts (``python -m`` of a venv not activated, or ``pip install --user`` whose
    ``~/.local/bin`` is not on PATH); PairError saying so if it is nowhere."""
    if os.sep in name:
        return name
    found = shutil.which(name)
    if found:
        return found
    for scheme in (None, f"{os.name}_user"):
        try:
            where = sysconfig.get_path("scripts", scheme) if scheme else \
                sysconfig.get_path("scripts")
        except KeyError:
            continue
        candidate = os.path.join(where, name)
        if os.access(candidate, os.X_OK):
            return candidate
    raise PairError(f"the miqm command {name} is not on PATH nor in "
                    f"{sysconfig.get_path('scripts')}: install miqm (pip install miqm, or "
                    "make install in its source) and put its scripts directory on PATH")


@dataclass
class Host:
    """One 'host': its data root and host name."""

    name: str
    root: str
    #: extra environment for this host's commands (tests inject MIQM_FAULTS this way)
    extra: dict[str, str] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        """The environment a command for this host runs with."""
        env = dict(os.environ)
        env["MIQM_DATA_ROOT"] = self.root
        env["MIQM_HOSTNAME"] = self.name
        # two instances on one machine: each listens on a free port, never both on 1414
        env["MIQM_LISTENER_PORT"] = "0"
        for name in CLIENT_ONLY_VARS + HOST_ONLY_VARS:
            env.pop(name, None)
        env.update(self.extra)
        return env


@dataclass
class LocalPair:
    """A queue manager ``qmgr`` with instances on hosts ``a`` and ``b`` of this machine."""

    qmgr: str = "QMDEMO"
    base: str = ""
    tuning: dict[str, str] = field(default_factory=lambda: dict(DEMO_TUNING))
    keep: bool = False

    def __post_init__(self) -> None:
        self._own_base = not self.base
        self.base = self.base or tempfile.mkdtemp(prefix="miqm-pair-")
        self.shared = os.path.join(self.base, "shared")
        self.a = Host("hosta", os.path.join(self.base, "hosta"))
        self.b = Host("hostb", os.path.join(self.base, "hostb"))
        for d in (self.shared, self.a.root, self.b.root):
            os.makedirs(d, exist_ok=True)

    # -- commands -------------------------------------------------------------------
    def run(self, host: Host, *argv: str, stdin: str | None = None, check: bool = True,
            timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run a console command as ``host``; raise PairError with its line if it fails."""
        try:
            proc = subprocess.run(
                [command_path(argv[0]), *argv[1:]], env=host.env(), input=stdin,
                capture_output=True, text=True, timeout=timeout,
                stdin=None if stdin is not None else subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise PairError(f"{' '.join(argv)} (on {host.name}) did not finish within "
                            f"{timeout:g}s") from None
        except OSError as exc:
            raise PairError(f"{argv[0]} (on {host.name}) could not be run: {exc.strerror}") \
                from None
        if check and proc.returncode != 0:
            line = (proc.stderr.strip() or proc.stdout.strip() or "no output").splitlines()[-1]
            raise PairError(f"{' '.join(argv)} (on {host.name}) failed: {line}")
        return proc

    def create(self) -> None:
        """crtmqm on host A with the shared data/log paths, then addmqinf on host B."""
        data = os.path.join(self.shared, "data")
        log = os.path.join(self.shared, "log")
        os.makedirs(data, exist_ok=True)
        os.makedirs(log, exist_ok=True)
        self.run(self.a, "crtmqm", "-md", data, "-ld", log, "-lf", "1024", self.qmgr)
        self._tune()
        line = self.run(self.a, "dspmqinf", "-o", "command", self.qmgr).stdout.strip()
        argv = line.split()
        if not argv or argv[0] != "addmqinf":
            raise PairError(f"dspmqinf printed {line!r}, not an addmqinf command")
        self.run(self.b, *argv)

    def data_dir(self) -> str:
        """The shared data directory of the queue manager."""
        return os.path.join(self.shared, "data", self.qmgr)

    def _tune(self) -> None:
        path = os.path.join(self.data_dir(), "qm.ini")
        with open(path, encoding="utf-8") as f:
            stanzas = parse_ini(f.read(), path)
        tuning = next((s for s in stanzas if s.name == "TuningParameters"), None)
        if tuning is None:
            tuning = Stanza("TuningParameters")
            stanzas.append(tuning)
        tuning.values.update(self.tuning)
        with open(path, "w", encoding="utf-8") as f:
            f.write(format_ini(stanzas))

    def start(self, host: Host) -> str:
        """strmqm -x on ``host``; returns its console output."""
        return self.run(host, "strmqm", "-x", self.qmgr).stdout

    def status(self, host: Host | None = None) -> dict:
        """dspmq --json for the queue manager, as seen from ``host`` (default A)."""
        out = self.run(host or self.a, "dspmq", "-m", self.qmgr, "-x", "--json",
                       check=False, timeout=10).stdout.strip()
        for line in out.splitlines():
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                return obj
        return {}

    def active(self) -> dict | None:
        """The active instance ({host, mode, pid}) or None."""
        for inst in self.status().get("instances", []):
            if str(inst.get("mode", "")).lower() == "active":
                return inst
        return None

    def host(self, name: str) -> Host:
        """The Host called ``name``."""
        return self.a if name == self.a.name else self.b

    def wait_active(self, not_host: str | None = None, timeout: float = 30.0,
                    poll: float = 0.02) -> dict:
        """Wait until an instance other than ``not_host`` is active and serving requests."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            inst = self.active()
            if inst and inst.get("host") != not_host and self.serving(self.host(inst["host"])):
                return inst
            time.sleep(poll)
        raise PairError(f"no instance of {self.qmgr} became active within {timeout:g}s")

    def serving(self, host: Host) -> bool:
        """True if a client on ``host`` can reach the active instance (runmqsc ping)."""
        proc = self.run(host, "runmqsc", self.qmgr, stdin="PING QMGR\n", check=False,
                        timeout=10)
        return proc.returncode == 0

    def mqsc(self, host: Host, text: str) -> str:
        """Run MQSC commands on the active instance."""
        return self.run(host, "runmqsc", self.qmgr, stdin=text).stdout

    def put(self, host: Host, queue: str, lines: list[str]) -> None:
        """amqsput the lines as persistent messages."""
        self.run(host, "amqsput", self.qmgr, queue, stdin="\n".join(lines) + "\n")

    def get_all(self, host: Host, queue: str) -> list[str]:
        """amqsget until the queue is drained."""
        out = self.run(host, "amqsget", self.qmgr, queue, "--wait", "1").stdout
        return [line for line in out.splitlines() if line]

    def kill_active(self, sig: int = signal.SIGKILL) -> dict:
        """Send ``sig`` to the active instance's controller process."""
        inst = self.active()
        if not inst or not inst.get("pid"):
            raise PairError("there is no active instance to kill")
        os.kill(int(inst["pid"]), sig)
        return inst

    def kill_all(self, timeout: float = 5.0) -> None:
        """kill -9 every instance of the pair (active and standby), as a host crash does,
        and return once they are gone (or ``timeout`` seconds passed)."""
        pids = self._controller_pids()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.01)

    # -- cleanup --------------------------------------------------------------------
    def close(self) -> None:
        """End every instance (immediately) and kill leftovers; remove the temp tree."""
        for host in (self.a, self.b):
            for argv in (("endmqm", "-i", "-x", self.qmgr), ("endmqm", "-i", self.qmgr)):
                try:
                    self.run(host, *argv, check=False, timeout=20)
                except PairError:
                    pass  # cleanup goes on: kill_all() below ends what endmqm could not
        self.kill_all()
        if self._own_base and not self.keep:
            shutil.rmtree(self.base, ignore_errors=True)

    def _controller_pids(self) -> list[int]:
        pids = []
        for host in (self.a, self.b):
            run_dir = os.path.join(host.root, "run")
            if not os.path.isdir(run_dir):
                continue
            for name in os.listdir(run_dir):
                try:
                    with open(os.path.join(run_dir, name), encoding="utf-8") as f:
                        pids.append(int(json.load(f)["pid"]))
                except (OSError, ValueError, KeyError, TypeError):
                    continue
        return pids

    def __enter__(self) -> LocalPair:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
