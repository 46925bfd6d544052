"""The C log buffer against its pure-Python twin: the same bytes for any sequence of
appends and forces, the same checksums, and a failed native write surfacing as the
volume's error with the log stopped."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import crc32c
import pytest

from lockfs.posix import PosixVolume
from miqm.errors import LogWriteError
from miqm.store import framing as F
from miqm.store.log import LogRecord, RecoveryLog
from miqm.store.logbuffer import NativeLogBuffer, PyLogBuffer, buffer_class, native_available
from miqm.store.settings import LogSettings
from tests.skips import c_part_missing

pytestmark = pytest.mark.skipif(not native_available(),
                                reason=c_part_missing("the C log buffer"))


def test_the_c_checksum_is_crc32c() -> None:
    from miqm.store._logbuffer import crc32c as native_crc

    for n in (0, 1, 7, 8, 9, 31, 100, 4064, 4096, 10_000):
        data = os.urandom(n)
        assert native_crc(data) == crc32c.crc32c(data)


@pytest.mark.parametrize("seed", range(6))
def test_both_buffers_frame_and_seal_the_same_bytes(seed: int) -> None:
    rng = random.Random(seed)
    for _trial in range(40):
        first = rng.randrange(0, 5000)
        # the seed is the forced head of the tail page: whole fragments
        size = rng.choice([None, 0, 10, 4000, F.DATA - 16, F.DATA - 8])
        head = b"" if size is None else F.frag_header(size, F.FULL, 2) + os.urandom(size)
        py, c = PyLogBuffer(first, 3, head), NativeLogBuffer(first, 3, head)
        for _step in range(rng.randrange(1, 50)):
            size = rng.choice([0, 1, 8, 1024, F.DATA - 8, F.DATA - 7, F.DATA,
                               rng.randrange(0, 20_000)])
            record = os.urandom(size)
            if rng.random() < 0.5:
                assert py.append(record) == c.append(record)
            else:  # appends only without a new page or past the buffer limit
                durable = py.append_lsn - rng.choice([0, 100, 5000, 50_000])
                limit = rng.choice([4096, 20_000, 1 << 30])
                # a page limit at, just past or well past the last page, or none
                last = py.first_page + py.count - 1
                page_limit = rng.choice([last, last + 1, last + 2, last + 6, 1 << 62])
                assert py.try_append(record, durable, limit, page_limit) == \
                    c.try_append(record, durable, limit, page_limit)
            assert (py.append_lsn, py.count, py.last_used, py.first_page) == \
                (c.append_lsn, c.count, c.last_used, c.first_page)
            if rng.random() < 0.3:
                batch = rng.randrange(0, 1 << 40)
                assert py.seal(batch) == c.seal(batch)
                assert [(g, bytes(image), s) for g, image, s in py.captured()] == c.captured()
                if rng.random() < 0.7:
                    assert py.release_written() == c.release_written()
        for i in range(py.count):
            assert py.page(i) == c.page(i)
        # every sealed image is a valid page whose fragments parse
        py.seal(0)
        for g, image, _sealed in py.captured():
            info = F.check_page(bytes(image), 0, g)
            assert info is not None
            F.parse_fragments(memoryview(bytes(image))[F.PAGE_HEADER:], info.used)


def test_both_buffers_keep_the_same_write_figures() -> None:
    py, c = PyLogBuffer(0, 1, b""), NativeLogBuffer(0, 1, b"")
    for size, micros, extent in [(4096, 120.0, 0), (8192, 90.5, 0), (4096, 300.0, 1),
                                 (12288, 80.0, 2)] * 5:
        py.note(size, micros, extent)
        c.note(size, micros, extent)
    a, b = py.write_stats(), c.write_stats()
    assert a.pop("time_max_at") > 0 and b.pop("time_max_at") > 0
    assert a == b
    # a new entry per change of file, the maximum within one; the last 8 files kept
    assert a["per_file"] == ([(0, 120.0), (1, 300.0), (2, 80.0)] * 5)[-8:]
    assert py.forces == c.forces == 20


def test_a_failed_native_write_stops_the_log_with_the_volume_error(tmp_path: Path) -> None:
    settings = LogSettings(file_pages=64, primary_files=2, secondary_files=2)
    vol = PosixVolume(str(tmp_path / "log"))
    RecoveryLog.create(vol, settings)
    log = RecoveryLog.open(vol, settings, generation=1)
    list(log.records(log.first_lsn()))
    log.append_and_force(b"kept")
    f = log._files[0]
    # the extent's descriptors (the plain one and the O_DSYNC one a one-write force goes
    # through) now refuse writes, as a file gone read-only would
    sync_fd = f.direct_sync_fd()
    assert sync_fd is not None
    ro = os.open(f.path, os.O_RDONLY)
    for fd in (f.direct_fd(), sync_fd):
        os.dup2(ro, fd)
    os.close(ro)
    with pytest.raises(LogWriteError, match="must stop") as err:
        log.append_and_force(b"never acknowledged")
    assert "S0000000.LOG" in str(err.value)
    with pytest.raises(LogWriteError):
        log.append(b"after the failure")
    log.close()
    log = RecoveryLog.open(vol, settings, generation=2)
    assert [r.payload for r in log.records(log.first_lsn())] == [b"kept"]
    log.close()


@pytest.mark.parametrize("integrity", ["TripleWrite", "SingleWrite"])
def test_one_write_forces_go_through_the_o_dsync_descriptor(tmp_path: Path,
                                                            integrity: str) -> None:
    """A force that is a single write with no fdatasync inside it goes through the
    extent's O_DSYNC descriptor (one system call, durable on return); a force of several
    writes (sealed pages in place and the partial page's image in a slot) does not."""
    if buffer_class() is not NativeLogBuffer:
        pytest.skip("the log writes through the Python buffer (MIQM_NATIVE_LOG=0)")
    settings = LogSettings(file_pages=256, primary_files=2, secondary_files=2,
                           write_integrity=integrity)
    vol = PosixVolume(str(tmp_path / "log"))
    RecoveryLog.create(vol, settings)
    log = RecoveryLog.open(vol, settings, generation=1)
    list(log.records(log.first_lsn()))
    rng = random.Random(7)
    sent: list[bytes] = [b"first"]
    log.append_and_force(sent[0])  # the log's first write: its buffer exists from here

    def forces(n: int, size: int) -> int:
        before = log._buf.write_stats()["dsync_forces"]
        for _ in range(n):
            sent.append(rng.randbytes(size))
            log.append_and_force(sent[-1])
        return int(log._buf.write_stats()["dsync_forces"] - before)

    small = forces(60, 200)
    large = forces(10, 20_000)
    if integrity == "SingleWrite":  # every force is one run of pages at their own place
        assert small == 60 and large == 10
    else:
        assert small >= 45  # not those sealing a page right after its first image
        assert large == 0  # the partial last page goes to a slot: two writes
    log.close()
    log = RecoveryLog.open(vol, settings, generation=2)
    assert [r.payload for r in log.records(log.first_lsn())] == sent
    log.close()


def test_the_c_scanner_reads_full_fragments_and_stops_at_anything_else() -> None:
    from miqm.store._logbuffer import scan_full

    data = b"".join([F.frag_header(3, F.FULL, 5) + b"abc", F.frag_header(0, F.FULL, 5),
                     F.frag_header(2, F.FIRST, 5) + b"xy", F.frag_header(1, F.FULL, 6) + b"z"])
    page = F.page_image(data, 7, 5, 0, False)
    base = F.page_lsn(7)
    recs, foff = scan_full(LogRecord, page, F.PAGE_HEADER, 0, len(data), base, 1 << 62, 5, 5, 0)
    assert recs == [(base, 5, b"abc", base + 11), (base + 11, 5, b"", base + 19)]
    assert isinstance(recs[0], LogRecord) and recs[0].payload == b"abc"
    assert foff == 19  # the FIRST fragment is left to the Python reader
    # a generation change, the end of what may be read, and a stale generation after
    # the newer one began are left to the Python reader too
    assert scan_full(LogRecord, page, F.PAGE_HEADER, 29, len(data), base, 1 << 62, 5, 5,
                     0) == ([], 29)
    assert scan_full(LogRecord, page, F.PAGE_HEADER, 0, len(data), base, base + 11, 5, 5,
                     0) == ([(base, 5, b"abc", base + 11)], 11)
    assert scan_full(LogRecord, page, F.PAGE_HEADER, 0, len(data), base, 1 << 62, 5, 6,
                     base + 11) == ([(base, 5, b"abc", base + 11)], 11)
    # a fragment longer than the page's used bytes is not a record
    assert scan_full(LogRecord, page, F.PAGE_HEADER, 0, 10, base, 1 << 62, 5, 5, 0) == ([], 0)


class _ThroughPython:
    """A posix file whose writes must go through Python (no direct descriptor)."""

    def __init__(self, inner):  # type: ignore[no-untyped-def]
        self._inner = inner

    def direct_fd(self) -> None:
        return None

    def __getattr__(self, name):  # type: ignore[no-untyped-def]
        return getattr(self._inner, name)


@pytest.mark.parametrize("integrity", ["TripleWrite", "SingleWrite"])
def test_the_c_force_leaves_the_disk_as_the_python_writes_do(tmp_path: Path,
                                                             integrity: str) -> None:
    """After every force, the extent written by the C buffer's own I/O is byte for byte
    the extent written page by page through the volume (the path the crash harness
    checks at a thousand crash points), across page, extent and slot changes."""
    settings = LogSettings(file_pages=64, primary_files=3, secondary_files=2,
                           write_integrity=integrity)
    logs = []
    for name in ("c", "python"):
        vol = PosixVolume(str(tmp_path / name))
        RecoveryLog.create(vol, settings)
        log = RecoveryLog.open(vol, settings, generation=1)
        list(log.records(log.first_lsn()))
        log._make_ready()
        logs.append((log, tmp_path / name))
    c_log, py_log = logs[0][0], logs[1][0]
    rng = random.Random(7)
    for step in range(120):
        for k, f in list(py_log._files.items()):
            if not isinstance(f, _ThroughPython):
                py_log._files[k] = _ThroughPython(f)  # type: ignore[assignment]
        records = [os.urandom(rng.choice([0, 40, 1024, 3000, 9000])) for _ in range(
            rng.randrange(1, 4))]
        for log in (c_log, py_log):
            for r in records:
                log.append(r)
            log.force(log._append_lsn)
        if step % 40 == 39:
            for log in (c_log, py_log):
                log.set_restart_lsn(log._durable)
        for name in sorted(os.listdir(logs[0][1])):
            if name.endswith(".LOG"):
                assert (logs[0][1] / name).read_bytes() == (logs[1][1] / name).read_bytes(), \
                    (step, name)
    assert c_log.stats()["Forces"] == py_log.stats()["Forces"] == 120
    for log, _ in logs:
        log.close()


def test_a_misused_c_buffer_raises_instead_of_touching_memory() -> None:
    blank = NativeLogBuffer.__new__(NativeLogBuffer)  # never initialised
    for call in (lambda: blank.append(b"x"), lambda: blank.seal(0),
                 lambda: blank.release_written(), lambda: blank.last_used,
                 lambda: blank.force_extent(0, 0, 62, 0, True, 0, -1)):
        with pytest.raises(RuntimeError, match="not initialised"):
            call()
    buf = NativeLogBuffer(0, 1, b"")
    with pytest.raises(RuntimeError, match="already initialised"):
        buf.__init__(5, 1, b"")
    with pytest.raises(ValueError):
        NativeLogBuffer(0, 1, bytes(F.DATA + 1))


_REFUSE_DIRECT = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/uio.h>
/* pwritev refusing O_DIRECT descriptors, as a filesystem that cannot write one would */
static ssize_t refuse(int fd, const struct iovec *iov, int n, off_t off, const char *name)
{
    ssize_t (*real)(int, const struct iovec *, int, off_t) = dlsym(RTLD_NEXT, name);
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0 && (fl & O_DIRECT)) {
        errno = EINVAL;
        return -1;
    }
    return real(fd, iov, n, off);
}
ssize_t pwritev(int fd, const struct iovec *iov, int n, off_t off)
{ return refuse(fd, iov, n, off, "pwritev"); }
ssize_t pwritev64(int fd, const struct iovec *iov, int n, off_t off)
{ return refuse(fd, iov, n, off, "pwritev64"); }
"""

_FORCES_UNDER_REFUSAL = r"""
import json, sys
from lockfs.posix import PosixVolume
from miqm.store.log import RecoveryLog
from miqm.store.settings import LogSettings
settings = LogSettings(file_pages=256, primary_files=2, secondary_files=2,
                       write_integrity="SingleWrite")
vol = PosixVolume(sys.argv[1])
RecoveryLog.create(vol, settings)
log = RecoveryLog.open(vol, settings, generation=1)
list(log.records(log.first_lsn()))
sent = [bytes([i]) * 300 for i in range(40)]
for s in sent:
    log.append_and_force(s)
stats = log._buf.write_stats()
log.close()
log = RecoveryLog.open(vol, settings, generation=2)
back = [r.payload for r in log.records(log.first_lsn())]
log.close()
print(json.dumps({"same": back == sent, "dsync": stats["dsync_forces"],
                  "forces": stats["forces"]}))
"""


def test_a_refused_direct_write_goes_the_buffered_way_and_loses_nothing(
        tmp_path: Path) -> None:
    """The O_DSYNC descriptor is O_DIRECT too where the filesystem allows; where a write
    through it is refused (EINVAL), that force and every later one are written through
    the file's own descriptor and fdatasync'ed, and every record is there on reopen."""
    if buffer_class() is not NativeLogBuffer:
        pytest.skip("the log writes through the Python buffer (MIQM_NATIVE_LOG=0)")
    if not hasattr(os, "O_DIRECT") or shutil.which("gcc") is None:
        pytest.skip("needs O_DIRECT and gcc for the refusing shim")
    probe = os.open(tmp_path / "probe", os.O_RDWR | os.O_CREAT | os.O_DIRECT)
    os.close(probe)  # this filesystem has O_DIRECT: the log's descriptor will be direct
    src = tmp_path / "refuse.c"
    src.write_text(_REFUSE_DIRECT)
    shim = tmp_path / "refuse.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(shim), str(src), "-ldl"],
                   check=True)
    (tmp_path / "log").mkdir()
    script = tmp_path / "forces.py"
    script.write_text(_FORCES_UNDER_REFUSAL)

    def run(preload: bool) -> dict[str, object]:
        env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
        if preload:
            env["LD_PRELOAD"] = str(shim)
        out = subprocess.run([sys.executable, str(script), str(tmp_path / "log")],
                             env=env, capture_output=True, text=True, check=True)
        shutil.rmtree(tmp_path / "log")
        (tmp_path / "log").mkdir()
        return json.loads(out.stdout.strip().splitlines()[-1])

    plain = run(False)
    assert plain["same"] and plain["dsync"] == plain["forces"]  # all direct + O_DSYNC
    refused = run(True)
    assert refused["same"] and refused["dsync"] == 0 and refused["forces"] == plain["forces"]
