"""The NFSv4 lab (``tests/nfslab/lab.sh``, a test fixture) driven from Python.

The lab is a userspace NFSv4 server (nfs-ganesha) on 10.77.0.1 and two network
namespaces, ``miqm-a`` and ``miqm-b``, each a "host" whose link to the server can be cut.
The benchmarks (``miqm bench failover --fault partition|pause``) and the tests use it.
Its network names are fixed, so only one lab runs per machine: users of the lab take
turns on the lock file :data:`LAB_LOCK`.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import fcntl
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from miqm.errors import MiqmError

SERVER = "10.77.0.1"
HOST_ADDR = {"a": "10.77.0.2", "b": "10.77.0.3"}
LAB_LOCK = "/run/miqm-lab.lock"


class LabError(MiqmError):
    """The lab cannot run here, is busy, or one of its steps failed."""


def lab_script() -> Path:
    """``tests/nfslab/lab.sh`` of the source checkout (``MIQM_LAB_SH`` overrides).

    The lab is a test fixture, not part of the installed package: it is looked for next to
    the package (an editable install or a run from the checkout), then under the current
    directory (a checkout whose package was installed elsewhere).
    """
    override = os.environ.get("MIQM_LAB_SH")
    if override:
        return Path(override)
    rel = Path("tests") / "nfslab" / "lab.sh"
    candidates = [Path(__file__).resolve().parent.parent / rel, Path.cwd() / rel]
    for path in candidates:
        if path.exists():
            return path
    return candidates[0]


def lab_missing() -> str | None:
    """Why the lab cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, nfs-ganesha)"
    for tool in ("ganesha.nfsd", "ip"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (make install-system)"
    if not Path("/usr/lib/x86_64-linux-gnu/libnfs.so.13").exists() and not \
            ctypes.util.find_library("nfs"):
        return "libnfs13 not installed (make install-system)"
    if not lab_script().exists():
        return f"{lab_script()} not found (the lab runs from a source checkout)"
    return None


def _all_threads_stopped(pid: int) -> bool:
    """Whether every thread of ``pid`` is in the stopped state (T) by /proc."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        for tid in tasks:
            with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
            if state not in ("T", "t"):
                return False
    except OSError:
        return True  # gone: nothing of it runs
    return True


@dataclass
class NfsLab:
    """A running lab: server address, lease, and its directory on this host."""

    dir: Path
    server: str = SERVER
    lease: int = 5

    @property
    def url_base(self) -> str:
        """``nfs4://10.77.0.1/export``."""
        return f"nfs4://{self.server}/export"

    @property
    def export_dir(self) -> Path:
        """The exported directory as this host sees it (to check files directly)."""
        return self.dir / "export"

    def url(self, sub: str) -> str:
        """A volume URL for directory ``sub`` of the export, with the lab's lease."""
        return f"{self.url_base}/{sub.strip('/')}?lease={self.lease}"

    def lab(self, *args: str) -> str:
        """Run ``lab.sh ARGS``; returns its output."""
        res = subprocess.run([str(lab_script()), *args], capture_output=True, text=True,
                             timeout=60)
        if res.returncode != 0:
            tail = (res.stderr.strip() or res.stdout.strip()).splitlines()[-1:] or [""]
            raise LabError(f"lab.sh {' '.join(args)} failed: {tail[0]}")
        return res.stdout

    def cut(self, ns: str) -> None:
        """Cut namespace ``a`` or ``b`` off the server (its link goes down)."""
        self.lab("cut", ns)

    def heal(self, ns: str) -> None:
        """Bring its link back."""
        self.lab("heal", ns)

    def restart_server(self, grace: int = 0) -> None:
        """The server crashes (kill -9) and starts again, with a grace period of ``grace``
        seconds (0: none): every client's state is gone with the old server instance."""
        self.lab("restart", "--grace", str(grace))

    def server_pid(self) -> int:
        """The running ganesha's pid."""
        return int((self.dir / "ganesha.pid").read_text())

    def stop_server(self, settle: float = 5.0) -> int:
        """Freeze ganesha (SIGSTOP) and return its pid once every one of its threads is
        stopped: ``kill`` returns before a busy machine has stopped them all, and a
        thread still running may answer one more call. SIGCONT it afterwards."""
        pid = self.server_pid()
        os.kill(pid, signal.SIGSTOP)
        deadline = time.monotonic() + settle
        while time.monotonic() < deadline and not _all_threads_stopped(pid):
            time.sleep(0.005)
        return pid

    def slow_server(self, delay: float, seconds: float, gap: float = 0.01) -> None:
        """A slow server for ``seconds``: ganesha is stopped (SIGSTOP) for ``delay``
        seconds, runs ``gap`` seconds, and so on, so each call waits up to ``delay``.

        Stands in for a link delay (``tc netem``) where the kernel has no ``sch_netem``
        (this lab machine: "Specified qdisc kind is unknown"): what a client sees is the
        same, an answer that comes up to ``delay`` late. Always leaves ganesha running."""
        pid = self.server_pid()
        end = time.monotonic() + seconds
        try:
            while time.monotonic() < end:
                os.kill(pid, signal.SIGSTOP)
                time.sleep(min(delay, max(0.0, end - time.monotonic())))
                os.kill(pid, signal.SIGCONT)
                time.sleep(gap)
        finally:
            os.kill(pid, signal.SIGCONT)

    def run_in(self, ns: str, argv: list[str], env: dict[str, str] | None = None,
               **kw: Any) -> subprocess.Popen[str]:
        """Start ``argv`` inside namespace ``miqm-<ns>`` (``ip netns exec``), pipes on."""
        full_env = dict(os.environ)
        repo = str(lab_script().parent.parent)
        full_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (repo, full_env.get("PYTHONPATH", "")) if p)
        full_env.update(env or {})
        return subprocess.Popen(["ip", "netns", "exec", f"miqm-{ns}", *argv],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=full_env, **kw)


def running_lab(directory: Path) -> NfsLab:
    """The lab already up in ``directory`` (``tests/nfslab/lab.sh up DIR``), lease included."""
    conf = Path(directory) / "ganesha.conf"
    try:
        text = conf.read_text()
    except OSError:
        raise LabError(f"{directory} is not the directory of a lab (no ganesha.conf); "
                       "start one with tests/nfslab/lab.sh up DIR") from None
    found = re.search(r"Lease_Lifetime\s*=\s*(\d+)", text)
    if not found or not (Path(directory) / "export").is_dir():
        raise LabError(f"{conf} is not a lab's server configuration")
    return NfsLab(Path(directory), lease=int(found.group(1)))


def lab_leftovers(lab_dir: Path | None = None) -> list[str]:
    """What a torn-down lab left behind: namespaces, links, a live ganesha, NFS mounts."""
    left: list[str] = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    left += [f"namespace {line.split()[0]}" for line in netns.splitlines()
             if line.split() and line.split()[0] in ("miqm-a", "miqm-b")]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    for line in links.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if name in ("miqm-br0", "miqm-a-h", "miqm-b-h"):
            left.append(f"link {name}")
    if lab_dir is not None:
        pidfile = lab_dir / "ganesha.pid"
        if pidfile.exists() and pidfile.read_text().strip().isdigit():
            pid = int(pidfile.read_text())
            if Path(f"/proc/{pid}").exists():
                left.append(f"ganesha.nfsd pid {pid}")
        mounts = Path("/proc/mounts").read_text()
        left += [f"mount {line.split()[1]}" for line in mounts.splitlines()
                 if str(lab_dir) in line]
    return left


@contextlib.contextmanager
def lab_session(directory: Path, lease: int = 5, wait: float = 90.0) -> Iterator[NfsLab]:
    """Bring a lab up in ``directory`` (taking the machine's lab lock, waiting up to
    ``wait`` seconds for another user of the lab), yield it, and always tear it down."""
    why = lab_missing()
    if why:
        raise LabError(f"the NFSv4 lab cannot run here: {why}")
    with open(LAB_LOCK, "a+") as guard:  # held for the whole session
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(guard, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LabError(f"another user of the NFSv4 lab holds {LAB_LOCK}; try "
                                   "again when it has finished") from None
                time.sleep(0.5)
        lab = NfsLab(Path(directory), lease=lease)
        lab.lab("down")  # leftovers of an interrupted run
        try:
            lab.lab("up", str(lab.dir), "--lease", str(lab.lease))
            yield lab
        finally:
            for ns in HOST_ADDR:
                with contextlib.suppress(LabError):
                    lab.heal(ns)
            lab.lab("down", str(lab.dir))
            left = lab_leftovers(lab.dir)
            if left:
                raise LabError(f"lab.sh down left behind: {', '.join(left)}")
