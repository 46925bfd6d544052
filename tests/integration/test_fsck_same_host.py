"""-w and -c with both processes on one host through a kernel mount (a local directory
here): the pass is told to say nothing about locks across hosts (it said only 'The tests
on the directory completed successfully.', as it would on an NFS mount whose locks never
reach the server)."""

from __future__ import annotations

import socket
from pathlib import Path
from types import SimpleNamespace

import pytest

from fsck.meet import same_host_note
from tests import fsckutil as fu

pytestmark = pytest.mark.integration

WORDS = "ran on this host"


def test_w_and_c_on_one_host_say_so(tmp_path: Path) -> None:
    first = fu.start("-w", "--hold", "0.5", "--wait", "60", str(tmp_path))
    fu.wait_state(tmp_path, "w", "holding", proc=first)
    code2, out2, err2 = fu.finish(fu.start("-w", "--json", "--wait", "60", str(tmp_path)))
    code1, out1, err1 = fu.finish(first)
    assert (code1, code2) == (0, 0), (err1, err2)
    assert WORDS in out1 and out1.strip().endswith("completed successfully."), out1
    doc = fu.result(out2)
    assert any(WORDS in n for n in fu.test_of(doc, "waiting and releasing locks")["notes"])
    a = fu.start("-c", "--count", "20", str(tmp_path))
    code2, out2, err2 = fu.finish(fu.start("-c", "--count", "20", str(tmp_path)))
    code1, out1, err1 = fu.finish(a)
    assert (code1, code2) == (0, 0), (err1, err2)
    assert WORDS in out1 and WORDS in out2, (out1, out2)


def test_nfs4_urls_are_clients_of_their_own() -> None:
    """Through nfs4:// each process is a separate NFSv4 client: no such note (the lab's
    two namespaces share one host name)."""
    rec = {"host": socket.gethostname()}
    assert same_host_note(SimpleNamespace(url="nfs4://srv/export/x"), [rec]) is None  # type: ignore[arg-type]
    assert same_host_note(SimpleNamespace(url="/mnt/x"), [{"host": "elsewhere"}]) is None  # type: ignore[arg-type]
    assert WORDS in (same_host_note(SimpleNamespace(url="/mnt/x"), [rec]) or "")  # type: ignore[arg-type]
