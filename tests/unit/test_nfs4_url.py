"""nfs4:// URL parsing (pure: no server, no libnfs call)."""

from __future__ import annotations

import pytest

from lockfs.errors import BadLocation
from lockfs.nfs4 import NFS_PORT, Nfs4Location, Nfs4Volume, default_timeout, parse_nfs4_url


def test_export_and_root() -> None:
    loc = parse_nfs4_url("nfs4://10.77.0.1/export/qm1/data")
    assert loc == Nfs4Location("10.77.0.1", NFS_PORT, "/export", "/qm1/data", None, None)


def test_export_only_and_trailing_slashes() -> None:
    assert parse_nfs4_url("nfs4://srv/export/").root == ""
    assert parse_nfs4_url("nfs4://srv//export//a//").root == "/a"


def test_port_lease_timeout() -> None:
    loc = parse_nfs4_url("nfs4://nas.example:12049/vol/mq?lease=30&timeout=4")
    assert (loc.server, loc.port, loc.export, loc.root) == ("nas.example", 12049, "/vol", "/mq")
    assert loc.lease == 30.0 and loc.timeout == 4


def test_ipv6_server() -> None:
    loc = parse_nfs4_url("nfs4://[fd00::1]:2050/export")
    assert (loc.server, loc.port) == ("fd00::1", 2050)


def test_percent_decoded_path() -> None:
    assert parse_nfs4_url("nfs4://s/export/q%20m").root == "/q m"


@pytest.mark.parametrize("url", [
    "nfs://srv/export",
    "nfs4://",
    "nfs4:///export",
    "nfs4://srv",
    "nfs4://srv/",
    "nfs4://srv/export/../etc",
    "nfs4://srv:notaport/export",
    "nfs4://srv/export?lease=abc",
    "nfs4://srv/export?lease=0",
    "nfs4://srv/export?lease=5&lease=6",
    "nfs4://srv/export?timeout=0",
    "nfs4://srv/export?mode=fast",
    "nfs4://user@srv/export",
    "nfs4://srv/export#frag",
    "nfs4://[::1/x",  # urlsplit's own ValueError: was an internal error in every tool
])
def test_bad_urls(url: str) -> None:
    with pytest.raises(BadLocation):
        parse_nfs4_url(url)


def test_volume_lease_from_url_then_argument_then_default() -> None:
    # constructing a volume connects lazily: no server is needed here
    assert Nfs4Volume("nfs4://s/export?lease=7").lease_seconds == 7.0
    assert Nfs4Volume("nfs4://s/export?lease=7", lease_seconds=20).lease_seconds == 7.0
    assert Nfs4Volume("nfs4://s/export", lease_seconds=20).lease_seconds == 20.0
    assert Nfs4Volume("nfs4://s/export").lease_seconds == 90.0


def test_timeout_defaults_to_a_third_of_the_lease() -> None:
    assert default_timeout(90) == 30
    assert default_timeout(5) == 2
    assert default_timeout(1) == 1
    assert default_timeout(600) == 30
    assert Nfs4Volume("nfs4://s/export?lease=9").timeout == 3
    assert Nfs4Volume("nfs4://s/export?lease=9&timeout=5").timeout == 5


def test_paths_cannot_escape() -> None:
    vol = Nfs4Volume("nfs4://s/export/qm")
    assert vol._p("a/b") == "/qm/a/b"
    assert vol._p("") == "/qm"
    assert Nfs4Volume("nfs4://s/export")._p("") == "/"
    for bad in ("/etc", "a/../../x"):
        with pytest.raises(BadLocation):
            vol._p(bad)
