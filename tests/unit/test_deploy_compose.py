"""docker-compose.yml and deploy/Dockerfile read as files: what the compose integration
test (tests/integration/test_compose.py) cannot show cheaply, checked without podman."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
QM_IMAGE = "localhost/miqm-qm:latest"


def _compose() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    return data


def test_the_qm_image_is_built_by_one_service_only() -> None:
    """qm-a, qm-b, the exporter and app run one image; a `build:` on qm-a and qm-b (through their
    shared anchor) built it twice per `up --build`."""
    services = _compose()["services"]
    users = sorted(n for n, s in services.items() if s.get("image") == QM_IMAGE)
    builders = sorted(n for n, s in services.items()
                      if s.get("image") == QM_IMAGE and "build" in s)
    assert users == ["app", "exporter", "qm-a", "qm-b"], users
    assert builders == ["qm-a"], builders


def test_stateful_paths_of_the_pulled_images_are_named_volumes() -> None:
    """prom/prometheus and prom/alertmanager declare VOLUME /prometheus and /alertmanager:
    left to themselves those are anonymous volumes, which podman-compose's `down -v`
    leaves behind; named in the file they are the project's and go with `down -v`."""
    data = _compose()
    declared = set(data["volumes"])
    for service, path in (("prometheus", "/prometheus"), ("alertmanager", "/alertmanager"),
                          ("nfs", "/export"), ("qm-a", "/var/mqm"), ("qm-b", "/var/mqm")):
        mounts = dict(reversed(v.split(":")[:2]) for v in data["services"][service]["volumes"])
        assert mounts.get(path) in declared, (service, path, mounts)


def test_nothing_runs_privileged_or_as_root_by_the_file() -> None:
    """The file asks for no privilege: no privileged mode, no user root, one capability
    (the NFS server's DAC_READ_SEARCH). The queue managers and the app drop to mqm in
    their entry point (tests/integration/test_deploy_entrypoint.py, and the compose test
    looks at the running processes)."""
    for name, service in _compose()["services"].items():
        assert not service.get("privileged"), name
        assert str(service.get("user", "")).split(":")[0] not in ("root", "0"), name
        assert set(service.get("cap_add", [])) <= ({"DAC_READ_SEARCH"} if name == "nfs"
                                                   else set()), name


def test_the_image_copies_configuration_files_not_the_whole_directory() -> None:
    """deploy/config/ was copied whole into the image: a TLS key or a credential an
    operator keeps beside the ini and MQSC files (they must be at the same path on both
    hosts, docs/runbook.md) was baked world-readable into a layer of every image."""
    lines = [ln for ln in (ROOT / "deploy" / "Dockerfile").read_text().splitlines()
             if ln.startswith("COPY") and "deploy/config" in ln]
    assert lines, "no COPY of the configuration files"
    for line in lines:
        sources = line.split()[1:-1]
        assert all(re.fullmatch(r"deploy/config/(ini/\*\.ini|mqsc/\*\.mqsc)", s)
                   for s in sources), line


def test_the_qm_and_nfs_users_agree() -> None:
    """The queue managers' uid (the image's build argument) is the one the nfs service
    gives the export to: the userspace NFSv4 client sends the process's uid."""
    services = _compose()["services"]
    args = services["qm-a"]["build"]["args"]
    env = services["nfs"]["environment"]
    for key in ("MIQM_UID", "MIQM_GID"):
        assert args[key] == env[key] == f"${{{key}:-999}}", (key, args, env)
