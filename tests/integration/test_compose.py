"""docker-compose.yml brought up for real with rootful podman and podman-compose.

One test, in phases, each printing its time: local stand-ins for the pulled images
(tests/compose/images.sh: a debootstrapped Debian base, cached in podman's storage between
runs), ``podman-compose build`` (the layer cache makes a rebuild fast), ``up``; both hosts
healthy (the compose's health check, run with ``podman healthcheck run``: without systemd
podman does not schedule it), ``dspmq -x`` one instance active and one standby, Prometheus
scraping both hosts and the exporter (an instance active, as the shared files say) with the
shipped rules loaded, the app moving messages; ``podman kill``
of the active host's container: the standby serves within the lease plus a few seconds, the
app's counts show 0 lost and messages moving again, MiqmFailover fires in Prometheus and
reaches Alertmanager, and the exporter names the new active's host; the killed host
started again comes back as standby. Everything is
torn down (containers, anonymous and named volumes, the network) also when a phase fails,
and each service's log is printed on failure.

Runs as root only (rootful podman). The build copies the host's CA bundle into the build
context's ``deploy/ca/`` (pip reaches PyPI through a TLS-intercepting proxy here); only the
build stage sees it. ``MIQM_COMPOSE_KEEP_IMAGES=0`` removes the built images at the end.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import resource
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.ports import free_port

pytestmark = [pytest.mark.integration, pytest.mark.root]

ROOT = Path(__file__).resolve().parents[2]
IMAGES_SH = ROOT / "tests" / "compose" / "images.sh"
LEASE = 10  # the compose's default MIQM_NFS_LEASE
QMGR = "QM1"
SERVICES = ("nfs", "qm-a", "qm-b", "exporter", "prometheus", "alertmanager", "app")
LOCK = "/run/miqm-compose.lock"  # one compose test per machine (image tags are shared)
HOST_CA = "/etc/ssl/certs/ca-certificates.crt"
APP_LINE = re.compile(r"app: sent=(\d+) received=(\d+) lost=(\d+) duplicates=(\d+) "
                      r"uncertain=(\d+) errors=(\d+)")


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root (rootful podman)"
    for tool in ("podman", "podman-compose", "runc"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (make install-system)"
    return None


def _podman_broken(env: dict[str, str]) -> str | None:
    """Why podman cannot run here (its own first error line), or None."""
    proc = subprocess.run(["podman", "info"], env=env, capture_output=True, text=True,
                          timeout=120)
    if proc.returncode != 0:
        line = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return f"podman cannot run here: {line}"
    return None


def _containers_conf(path: Path) -> Path:
    """podman's settings for this kernel: runc (crun refuses its hybrid cgroups), cgroupfs,
    ulimits at or below the host's (the runtime's setrlimit fails above them)."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nofile = 65536 if nofile == resource.RLIM_INFINITY else min(nofile, 65536)
    path.write_text(
        "[containers]\n"
        f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc=4096:4096"]\n'
        "[engine]\n"
        'runtime = "runc"\n'
        'cgroup_manager = "cgroupfs"\n'
        'events_logger = "file"\n')
    return path


def _copy_context(dest: Path) -> None:
    """The compose file and what its builds and mounts read, without build artefacts."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.egg-info", "build")
    for name in ("docker-compose.yml", "pyproject.toml", "setup.py", "README.md",
                 ".dockerignore"):
        shutil.copy2(ROOT / name, dest / name)
    for name in ("deploy", "miqm", "lockfs", "fsck"):
        shutil.copytree(ROOT / name, dest / name, ignore=ignore)
    if os.path.exists(HOST_CA):
        shutil.copy2(HOST_CA, dest / "deploy" / "ca" / "host-ca.crt")


class Stack:
    """One compose project: commands, logs, HTTP, teardown."""

    def __init__(self, ctx: Path, env: dict[str, str], say: Callable[[str], None]) -> None:
        self.ctx = ctx
        self.env = env
        self.say = say
        self.project = f"miqmtest{os.getpid()}"
        self.log = ctx / "compose.log"

    def compose(self, *args: str, timeout: float = 900) -> None:
        with open(self.log, "a") as out:
            out.write(f"\n$ podman-compose {' '.join(args)}\n")
            out.flush()
            proc = subprocess.run(["podman-compose", "-p", self.project, *args], cwd=self.ctx,
                                  env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=timeout)
        if proc.returncode != 0:
            tail = self.log.read_text().splitlines()[-30:]
            raise AssertionError(f"podman-compose {args[0]} failed:\n" + "\n".join(tail))

    def podman(self, *args: str, check: bool = True, timeout: float = 120) -> str:
        proc = subprocess.run(["podman", *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout

    def image_id(self, image: str) -> str:
        """The image's id, or "" if there is none."""
        return self.podman("image", "inspect", "--format", "{{.Id}}", image,
                           check=False).strip()

    def name(self, service: str) -> str:
        return f"{self.project}_{service}_1"

    def exec(self, service: str, *cmd: str) -> tuple[int, str]:
        proc = subprocess.run(["podman", "exec", self.name(service), *cmd], env=self.env,
                              capture_output=True, text=True, timeout=60)
        return proc.returncode, proc.stdout + proc.stderr

    def healthy(self, service: str) -> bool:
        proc = subprocess.run(["podman", "healthcheck", "run", self.name(service)],
                              env=self.env, capture_output=True, text=True, timeout=60)
        return proc.returncode == 0

    def logs(self, service: str, tail: int | None = None) -> str:
        args = ["logs", *(["--tail", str(tail)] if tail else []), self.name(service)]
        proc = subprocess.run(["podman", *args], env=self.env, capture_output=True,
                              text=True, timeout=60)
        return proc.stdout + proc.stderr

    def app_counts(self) -> dict[str, int] | None:
        lines = APP_LINE.findall(self.logs("app", tail=20))
        if not lines:
            return None
        keys = ("sent", "received", "lost", "duplicates", "uncertain", "errors")
        return dict(zip(keys, map(int, lines[-1]), strict=True))

    def http(self, port_var: str, path: str) -> Any:
        url = f"http://127.0.0.1:{self.env[port_var]}{path}"
        with urllib.request.urlopen(url, timeout=5) as resp:
            body = resp.read()
        return json.loads(body) if body[:1] in (b"{", b"[") else body.decode()

    def leftovers(self) -> list[str]:
        label = f"label=io.podman.compose.project={self.project}"
        left = [f"container {c}" for c in self.podman(
            "ps", "-a", "--filter", label, "--format", "{{.Names}}", check=False).split()]
        left += [f"volume {v}" for v in self.podman(
            "volume", "ls", "--filter", label, "--format", "{{.Name}}", check=False).split()]
        left += [f"network {n}" for n in self.podman(
            "network", "ls", "--format", "{{.Name}}", check=False).split()
            if n.startswith(self.project + "_")]
        return left

    def down(self) -> None:
        """Containers (with their anonymous volumes), named volumes, the network."""
        with contextlib.suppress(Exception):
            self.compose("down", "-v", timeout=300)
        label = f"label=io.podman.compose.project={self.project}"
        for c in self.podman("ps", "-a", "-q", "--filter", label, check=False).split():
            self.podman("rm", "-f", "-v", c, check=False)
        for v in self.podman("volume", "ls", "-q", "--filter", label, check=False).split():
            self.podman("volume", "rm", "-f", v, check=False)
        for n in self.podman("network", "ls", "--format", "{{.Name}}", check=False).split():
            if n.startswith(self.project + "_"):
                self.podman("network", "rm", "-f", n, check=False)


def _exporter_active(stack: Stack) -> str | None:
    """The host the exporter says holds the master lock (``miqm_qmgr_active 1`` and the
    instance series in mode Active), or None."""
    try:
        text = stack.http("MIQM_EXPORTER_PORT", "/metrics")
    except OSError:
        return None
    if not isinstance(text, str) or not re.search(r"^miqm_qmgr_active(\{[^}]*\})? 1(\.0)?$",
                                                  text, re.M):
        return None
    m = re.search(r'^miqm_qmgr_instance\{[^}]*host="([^"]+)"[^}]*mode="[Aa]ctive"[^}]*\} 1',
                  text, re.M)
    return m.group(1) if m else None


def _wait(what: str, timeout: float, cond: Callable[[], Any], poll: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = cond()
        except Exception as exc:  # not up yet
            last = f"{type(exc).__name__}: {exc}"
        else:
            if last:
                return last
        time.sleep(poll)
    raise AssertionError(f"{what}: not within {timeout:g}s (last: {last!r})")


def _instances(stack: Stack, service: str) -> dict[str, str]:
    """dspmq -x run in ``service``: {host: Active|Standby}."""
    _rc, out = stack.exec(service, "dspmq", "-x", "-m", QMGR)
    return dict(re.findall(r"INSTANCE\((\w+)\) MODE\((\w+)\)", out))


@pytest.fixture
def say(capsys: pytest.CaptureFixture[str]) -> Iterator[Callable[[str], None]]:
    """Progress lines on the terminal while the test runs (capture off for them)."""
    start = time.monotonic()

    def _say(line: str) -> None:
        with capsys.disabled():
            print(f"\n  compose [{time.monotonic() - start:6.1f}s] {line}", end="", flush=True)
    yield _say
    with capsys.disabled():
        print()


def test_images_sh_without_podman_says_so_at_once(tmp_path: Path) -> None:
    """tests/compose/images.sh where podman is missing: one line and exit 2 before
    anything is made (it ran debootstrap for minutes, then failed at 'podman import')."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # debootstrap left out too: against the old script the test fails at once, not after
    # minutes of debootstrap as root
    for tool in ("sh", "dirname", "sed", "head", "date", "mktemp", "tar", "rm", "cat"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    proc = subprocess.run(["sh", str(IMAGES_SH)], env={"PATH": str(bin_dir)},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "podman is missing" in proc.stderr


def test_the_app_refuses_a_bad_rate_in_one_line() -> None:
    """deploy/app.py with MIQM_APP_RATE or MIQM_APP_REPORT not a positive number: one
    line naming it and exit 2, before it connects (a traceback before, or a division by
    zero in the producer for 0, repeated by ``restart: on-failure``)."""
    import sys

    for name, value in (("MIQM_APP_RATE", "abc"), ("MIQM_APP_RATE", "0"),
                        ("MIQM_APP_RATE", "nan"), ("MIQM_APP_REPORT", "-2"),
                        ("MIQM_APP_CALL_TIMEOUT", "0")):
        env = {k: v for k, v in os.environ.items() if not k.startswith("MIQM_")}
        env.update({name: value, "MIQM_CONNECTION": "127.0.0.1(1)"})
        proc = subprocess.run([sys.executable, str(ROOT / "deploy" / "app.py")], env=env,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, (name, value, proc.stdout + proc.stderr)
        assert proc.stderr.strip().splitlines() == [proc.stderr.strip()], proc.stderr
        assert f"{name}={value!r}" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.timeout(1500)  # a cold cache: debootstrap and both image builds come first
def test_compose_up_failover_alert_teardown(tmp_path: Path, say: Callable[[str], None]) -> None:
    """The compose runs as documented: see the module's docstring for the phases."""
    why = _missing()
    if why:
        pytest.skip(why)
    env = dict(os.environ)
    env["CONTAINERS_CONF"] = str(_containers_conf(tmp_path / "containers.conf"))
    for var in ("MIQM_PORT_A", "MIQM_PORT_B", "MIQM_METRICS_PORT_A", "MIQM_METRICS_PORT_B",
                "MIQM_EXPORTER_PORT", "MIQM_PROMETHEUS_PORT", "MIQM_ALERTMANAGER_PORT"):
        env[var] = str(free_port())
    env["MIQM_NFS_LEASE"] = str(LEASE)
    why = _podman_broken(env)
    if why:
        pytest.skip(why)
    times: dict[str, float] = {}

    with open(LOCK, "a+") as guard:
        t = time.monotonic()
        fcntl.flock(guard, fcntl.LOCK_EX)  # another compose test: wait for it
        if time.monotonic() - t > 1:
            say(f"waited {time.monotonic() - t:.0f}s for {LOCK}")

        # 1. the pulled images' local stand-ins (the base is cached between runs)
        t = time.monotonic()
        proc = subprocess.Popen([str(IMAGES_SH)], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        assert proc.stderr is not None
        for line in proc.stderr:
            say(line.rstrip())
        out = proc.stdout.read() if proc.stdout else ""
        assert proc.wait() == 0, f"tests/compose/images.sh failed: {out}"
        for name, value in re.findall(r"(MIQM_\w+_IMAGE)=(\S+)", out):
            env[name] = value
        times["images"] = time.monotonic() - t

        ctx = tmp_path / "ctx"
        ctx.mkdir()
        _copy_context(ctx)
        stack = Stack(ctx, env, say)
        failed = True
        try:
            t = time.monotonic()
            say("podman-compose build")
            built = ("localhost/miqm-qm:latest", "localhost/miqm-nfs:latest")
            previous = {i: stack.image_id(i) for i in built}
            stack.compose("build")
            # one build of the qm image for its three services (each service's own
            # `build:` built it once per service: the slowest build of the file, twice)
            builds = re.findall(r"^podman build .*-t localhost/miqm-qm:latest ",
                                stack.log.read_text(), re.M)
            assert len(builds) == 1, builds
            for image, old in previous.items():  # the build just superseded it: ~0.4-1 GB a run
                if old and stack.image_id(image) != old:
                    stack.podman("rmi", old, check=False)
            # and the qm image's build stage, untagged, ~700 MB a build: the newest is the
            # next build's cache, the older ones are nobody's (about 10 GB of them had piled
            # up on this project's shared machine)
            stages = stack.podman("images", "--sort", "created", "--filter", "dangling=true",
                                  "--filter", "label=io.miqm.stage=qm-build",
                                  "--format", "{{.ID}}", check=False).split()
            for stale in stages[1:]:
                stack.podman("rmi", stale, check=False)
            left = stack.podman("images", "--filter", "dangling=true", "--filter",
                                "label=io.miqm.stage=qm-build", "--format", "{{.ID}}",
                                check=False).split()
            assert len(left) <= 1, f"superseded build stages left: {left}"
            times["build"] = time.monotonic() - t
            say(f"built in {times['build']:.0f}s; podman-compose up -d")
            t = time.monotonic()
            stack.compose("up", "-d")
            times["up"] = time.monotonic() - t

            # 2. healthy, one active and one standby, Prometheus, the app moving messages
            t = time.monotonic()
            for service in ("qm-a", "qm-b"):
                _wait(f"{service}'s health check (dspmq)", 240,
                      lambda s=service: stack.healthy(s), poll=2)
            roles = _wait("dspmq -x: one Active and one Standby instance", 120, lambda: (
                r if sorted((r := _instances(stack, "qm-b")).values()) == ["Active", "Standby"]
                else None))
            times["healthy"] = time.monotonic() - t
            say(f"healthy after {times['healthy']:.0f}s: {roles}")
            for var in ("MIQM_METRICS_PORT_A", "MIQM_METRICS_PORT_B"):
                _wait(f"miqm metrics on the host port {var}", 60,
                      lambda v=var: "miqm_instance_role" in stack.http(v, "/metrics"))
            restarts = {s: stack.podman("inspect", "--format", "{{.RestartCount}}",
                                        stack.name(s)).strip() for s in ("qm-a", "qm-b")}
            say(f"metrics on both host ports; restarts so far: {restarts}")
            for service in ("qm-a", "qm-b"):  # the NFS server's name resolved once per start
                _rc, hosts = stack.exec(service, "cat", "/etc/hosts")
                assert re.search(r"^\S+ nfs # miqm-entrypoint$", hosts, re.M), hosts
            # nothing of the queue manager's runs as root, and its secret is its user's only
            for service in ("qm-a", "qm-b", "exporter", "app"):
                users = stack.podman("top", stack.name(service), "user").split()[1:]
                assert users and set(users) == {"mqm"}, (service, users)
            _rc, mode = stack.exec("nfs", "stat", "-c", "%a %u",
                                   f"/export/data/{QMGR}/credentials")
            assert mode.split() == ["600", "999"], mode

            def targets_up() -> list[str] | None:
                data = stack.http("MIQM_PROMETHEUS_PORT", "/api/v1/targets")["data"]
                up = sorted(t["labels"]["instance"] if "instance" in t["labels"]
                            else t["scrapeUrl"] for t in data["activeTargets"]
                            if t["health"] == "up")
                return up if len(up) == 3 else None
            say(f"Prometheus targets up: "
                f"{_wait('both hosts and the exporter up in Prometheus', 90, targets_up)}")
            # the exporter on its own host: an instance active, on the host dspmq names
            active_host = next(h for h, m in roles.items() if m == "Active")
            _wait("the exporter reporting the active instance", 60,
                  lambda: _exporter_active(stack) == active_host)
            rules = stack.http("MIQM_PROMETHEUS_PORT", "/api/v1/rules")["data"]["groups"]
            names = {r["name"] for g in rules for r in g["rules"]}
            assert {"MiqmFailover", "MiqmNoActiveInstance", "MiqmSplitBrain"} <= names, names
            ams = stack.http("MIQM_PROMETHEUS_PORT", "/api/v1/alertmanagers")["data"]
            assert any("alertmanager:9093" in a["url"] for a in ams["activeAlertmanagers"]), ams
            say(f"{len(names)} rules loaded, Alertmanager discovered")
            before = _wait("the app moving messages", 120, lambda: (
                c if (c := stack.app_counts()) and c["received"] >= 40 else None))
            assert before["lost"] == 0, before
            say(f"app before the kill: {before}")

            # 3. kill the active host's container: the standby takes over
            active = next(h for h, m in roles.items() if m == "Active")
            victim, survivor = ("qm-a", "qm-b") if active == "hosta" else ("qm-b", "qm-a")
            at_kill = stack.app_counts() or before
            t = time.monotonic()
            stack.podman("kill", stack.name(victim))
            say(f"podman kill {victim} (active on {active})")
            _wait(f"{survivor} active after the kill", LEASE + 20, lambda: (
                "STATUS(Running)\n" in stack.exec(survivor, "dspmq", "-m", QMGR)[1] + "\n"),
                poll=0.5)
            times["failover"] = time.monotonic() - t
            say(f"{survivor} active {times['failover']:.1f}s after the kill (lease {LEASE}s)")
            new_host = "hostb" if survivor == "qm-b" else "hosta"
            _wait("the exporter naming the new active's host", 60,
                  lambda: _exporter_active(stack) == new_host)
            after = _wait("the app moving messages again after the failover", 90, lambda: (
                c if (c := stack.app_counts()) and c["received"] >= at_kill["received"] + 40
                else None))
            assert after["lost"] == 0, f"messages lost across the failover: {after}"
            say(f"app after the failover: {after}")

            # the failover alert: firing in Prometheus, then received by Alertmanager
            def firing() -> bool:
                alerts = stack.http("MIQM_PROMETHEUS_PORT", "/api/v1/alerts")["data"]["alerts"]
                return any(a["labels"]["alertname"] == "MiqmFailover"
                           and a["state"] == "firing" for a in alerts)
            _wait("MiqmFailover firing in Prometheus", 60, firing, poll=2)
            say("MiqmFailover firing in Prometheus")
            _wait("MiqmFailover received by Alertmanager", 150, lambda: any(
                a["labels"]["alertname"] == "MiqmFailover"
                for a in stack.http("MIQM_ALERTMANAGER_PORT", "/api/v2/alerts")), poll=2)
            times["alert"] = time.monotonic() - t
            say(f"MiqmFailover in Alertmanager {times['alert']:.0f}s after the kill")

            # 4. the killed host started again comes back as standby
            t = time.monotonic()
            stack.podman("start", stack.name(victim))
            _wait(f"{victim} back as standby", 180, lambda: (
                "STATUS(Running as standby)" in stack.exec(victim, "dspmq", "-m", QMGR)[1]),
                poll=2)
            _wait(f"{victim}'s health check after its restart", 60,
                  lambda: stack.healthy(victim), poll=2)
            roles = _instances(stack, survivor)
            assert sorted(roles.values()) == ["Active", "Standby"], roles
            times["rejoin"] = time.monotonic() - t
            final = stack.app_counts()
            assert final is not None and final["lost"] == 0, final
            say(f"{victim} back as standby in {times['rejoin']:.0f}s; app: {final}")

            # 5. the active hangs (podman pause): the standby takes over once the lease
            # runs out, and the app moves messages again while the hung one is still
            # paused (its calls give up on the hung connection: MIQM_APP_CALL_TIMEOUT);
            # resumed, the old active finds its lock gone, stops itself (exit 70) and
            # `restart: on-failure` brings it back as the standby
            victim, survivor = survivor, victim  # the survivor of the kill is active now
            at_pause = stack.app_counts() or final
            t = time.monotonic()
            stack.podman("pause", stack.name(victim))
            say(f"podman pause {victim}")
            try:
                _wait(f"{survivor} active after the pause", LEASE + 20, lambda: (
                    "STATUS(Running)\n" in stack.exec(survivor, "dspmq", "-m", QMGR)[1]
                    + "\n"), poll=0.5)
                times["pause failover"] = time.monotonic() - t
                say(f"{survivor} active {times['pause failover']:.1f}s after the pause")
                # 45 s: the app moved 6 s after the takeover; with the client's default
                # call_timeout (60 s from the pause) it did not before this ran out
                paused = _wait("the app moving messages while the old active is paused", 45,
                               lambda: (c if (c := stack.app_counts())
                                        and c["received"] >= at_pause["received"] + 40
                                        else None))
                say(f"app with {victim} paused: {paused}")
            finally:
                stack.podman("unpause", stack.name(victim), check=False)
            _wait(f"{victim} back as standby after the pause", 120, lambda: (
                "STATUS(Running as standby)" in stack.exec(victim, "dspmq", "-m", QMGR)[1]),
                poll=2)
            code = stack.podman("inspect", "--format", "{{.RestartCount}}",
                                stack.name(victim)).strip()
            say(f"{victim} resumed, stopped itself and came back as standby (restarts {code})")

            # 6. the NFS server's container restarts (podman gives it another address):
            # both hosts follow it, one instance active and one standby, both healthy
            ip = "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}"
            old_ip = stack.podman("inspect", "--format", ip, stack.name("nfs")).strip()
            at_restart = stack.app_counts() or paused
            t = time.monotonic()
            stack.podman("restart", stack.name("nfs"))
            new_ip = stack.podman("inspect", "--format", ip, stack.name("nfs")).strip()
            say(f"podman restart nfs ({old_ip} -> {new_ip})")

            def both_serving() -> dict[str, str] | None:
                status = {s: re.findall(r"STATUS\(([^)]*)\)",
                                        stack.exec(s, "dspmq", "-m", QMGR)[1])
                          for s in ("qm-a", "qm-b")}
                got = sorted(v[0] for v in status.values() if v)
                if got == ["Running", "Running as standby"] and all(
                        stack.healthy(s) for s in ("qm-a", "qm-b")):
                    return {s: v[0] for s, v in status.items()}
                return None
            serving = _wait("one active and one standby instance, both healthy, after the "
                            "NFS server's restart", 120, both_serving, poll=2)
            times["nfs restart"] = time.monotonic() - t
            for service in ("qm-a", "qm-b"):
                _rc, hosts = stack.exec(service, "cat", "/etc/hosts")
                assert f"{new_ip} nfs # miqm-entrypoint" in hosts, (service, hosts)
            again = _wait("the app moving messages after the NFS server's restart", 90,
                          lambda: (c if (c := stack.app_counts())
                                   and c["received"] >= at_restart["received"] + 40
                                   else None))
            assert again["lost"] == 0, again
            say(f"after the NFS server's restart ({times['nfs restart']:.0f}s): {serving}; "
                f"app: {again}")
            _wait("the exporter following the NFS server", 60,
                  lambda: _exporter_active(stack) is not None)

            # 7. both hosts killed: their own endpoints are gone with them, and the exporter
            # (on its own host) sees the master lock free once the lease runs out, so
            # MiqmNoActiveInstance fires (its `for: 1m` after that)
            t = time.monotonic()
            stack.podman("kill", stack.name("qm-a"), stack.name("qm-b"))
            say("podman kill qm-a qm-b")

            def no_active() -> bool:
                alerts = stack.http("MIQM_PROMETHEUS_PORT", "/api/v1/alerts")["data"]["alerts"]
                return any(a["labels"]["alertname"] == "MiqmNoActiveInstance"
                           and a["state"] == "firing" for a in alerts)
            _wait("MiqmNoActiveInstance firing with both hosts dead", LEASE + 120, no_active,
                  poll=2)
            times["no active"] = time.monotonic() - t
            say(f"MiqmNoActiveInstance firing {times['no active']:.0f}s after both hosts died")
            failed = False
        finally:
            if failed:
                for service in SERVICES:
                    print(f"===== log of {service} =====\n{stack.logs(service, tail=80)}")
                print(f"===== podman-compose =====\n{stack.log.read_text()[-6000:]}")
            t = time.monotonic()
            stack.down()
            times["down"] = time.monotonic() - t
            if os.environ.get("MIQM_COMPOSE_KEEP_IMAGES", "1") == "0":
                for image in ("localhost/miqm-qm:latest", "localhost/miqm-nfs:latest"):
                    stack.podman("rmi", "-f", image, check=False)
            say("times: " + ", ".join(f"{k} {v:.0f}s" for k, v in times.items()))
    left = stack.leftovers()
    assert not left, f"the teardown left: {left}"
