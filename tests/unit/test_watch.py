"""lockfs/watch.py: the standby's early wake when a lock file is closed or changed."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from lockfs.watch import watch_local

HOLDER = """
import fcntl, struct, sys, time
f = open(sys.argv[1], "r+b")
fcntl.fcntl(f, fcntl.F_OFD_SETLK, struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 0, 0))
print("locked", flush=True)
sys.stdin.readline()
"""


def test_a_killed_holder_wakes_the_watcher_at_once(tmp_path: Path) -> None:
    (tmp_path / "master").write_bytes(b"\0" * 512)
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path / "master")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    wake = threading.Event()
    watch = None
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        watch = watch_local(str(tmp_path), {"master", "active"}, wake)
        assert watch is not None
        time.sleep(0.2)
        wake.clear()
        t0 = time.monotonic()
        proc.kill()  # the kernel closes its descriptor of master
        proc.wait()
        assert wake.wait(2.0), "the close of master by a killed holder did not wake us"
        assert time.monotonic() - t0 < 2.0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if watch is not None:
            watch.stop()


def test_other_files_do_not_wake_and_urls_are_not_watched(tmp_path: Path) -> None:
    wake = threading.Event()
    watch = watch_local(str(tmp_path), {"master"}, wake)
    assert watch is not None
    try:
        time.sleep(0.2)
        (tmp_path / "qm.ini").write_text("x")
        assert not wake.wait(0.5)
        (tmp_path / "master").write_bytes(b"record")
        assert wake.wait(2.0)
    finally:
        watch.stop()
    assert watch_local("nfs4://server/export/qm", {"master"}, wake) is None
    assert watch_local(str(tmp_path / "missing"), {"master"}, wake) is None
