"""amqmfsck's pure logic: the mount audit, record and page checks, the hole verdict."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fsck import concurrent, integrity, meet, mounts
from fsck.report import CAUSE_MOUNT, percentiles
from fsck.report import TestResult as Result

NFS_GOOD = ("36 25 0:44 / /shared rw,sync,relatime shared:1 - nfs4 srv:/export "
            "rw,sync,vers=4.2,rsize=1048576,hard,noac,proto=tcp,sec=sys,local_lock=none")
NFS_BAD = ("37 25 0:45 / /old rw,relatime shared:2 - nfs srv:/exp "
           "rw,vers=3,soft,nolock,local_lock=all,proto=tcp")
LOCAL = "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard"
FUSE = "40 22 0:50 / /mnt/my\\040dir rw,nosuid - fuse.bindfs bindfs rw,user_id=0"


def audit(line: str, path: str) -> Result:
    ms = mounts.parse_mountinfo("\n".join([LOCAL, line]))
    res = Result("mount options")
    m = mounts.mount_of(path, ms)
    assert m is not None
    mounts.audit(m, res, kernel="6.1.0")
    return res


def test_good_nfs_mount_passes_with_no_notes() -> None:
    res = audit(NFS_GOOD, "/shared/qm")
    assert res.ok, res.reason
    assert res.notes == []


def test_bad_nfs_mount_fails_with_each_reason() -> None:
    res = audit(NFS_BAD, "/old/x")
    assert not res.ok and res.cause == CAUSE_MOUNT
    for word in ("NFSv3", "soft", "nolock", "local_lock=all"):
        assert word in res.reason
    assert any("noac" in n for n in res.notes)


def test_local_and_fuse_mounts_pass_with_a_note() -> None:
    res = audit(FUSE, "/mnt/my dir/q")
    assert res.ok and res.details["mount"]["mount_point"] == "/mnt/my dir"
    assert "FUSE" in res.notes[0]
    res = audit(FUSE, "/var/tmp")
    assert res.ok and "cannot be shared" in res.notes[0]


def test_concurrent_records_detect_loss_and_overwrite() -> None:
    a, b = concurrent.writer_id("a"), concurrent.writer_id("b")
    recs, prev = [], 0
    for wid, seq in ((a, 1), (b, 1), (a, 2), (b, 2)):
        r = concurrent.make_record(wid, seq, prev)
        prev = concurrent.parse_record(r)[3]  # type: ignore[index]
        recs.append(r)
    assert concurrent.verify(b"".join(recs), {a: 2, b: 2}) == []
    # b's second append overwrote a's second (no lock): a record lost, chain broken
    lost = concurrent.verify(b"".join([recs[0], recs[1], recs[3]]), {a: 2, b: 2})
    assert any("lost" in p for p in lost) and any("does not follow" in p for p in lost)
    torn = bytearray(b"".join(recs))
    torn[300] ^= 0xFF
    assert any("damaged" in p for p in concurrent.verify(bytes(torn), {a: 2, b: 2}))


def _write(path: Path, pages: int, writes: list[tuple[int, int]]) -> None:
    """A test file with (generation, seq) pages written in order."""
    data = bytearray(pages * integrity.PAGE)
    starts: dict[int, int] = {}
    for gen, seq in writes:
        idx = integrity.index_of(seq, pages)
        start = starts.setdefault(gen, seq)
        data[idx * integrity.PAGE:(idx + 1) * integrity.PAGE] = integrity.make_page(
            gen, seq, idx, b"w" * 8, start)
    path.write_bytes(bytes(data))


def _analyse(data: bytes, pages: int,
             acked: dict[int, int] | None = None) -> dict[str, object]:
    layout = [integrity.parse_page(i, data[i * integrity.PAGE:(i + 1) * integrity.PAGE])
              for i in range(1, pages)]
    return integrity.analyse(pages, layout, acked)


def test_integrity_verdicts(tmp_path: Path) -> None:
    pages = 16
    f = tmp_path / "dat"
    # generation 1 wrote 1..20 (wrapping), generation 2 took over at 21
    good = [(1, s) for s in range(1, 21)] + [(2, s) for s in range(21, 30)]
    _write(f, pages, good)
    v = _analyse(f.read_bytes(), pages)
    assert v["ok"], v["problems"]
    # generation 1 said it had synced up to 22, but generation 2 found the end at 20
    v = _analyse(f.read_bytes(), pages, {1: 22})
    assert not v["ok"] and "acknowledged" in v["problems"][0]  # type: ignore[index]
    assert _analyse(f.read_bytes(), pages, {1: 20, 2: 29})["ok"]
    # a failed write of generation 1 (seq 21) lands after generation 2 wrote 21..29
    _write(f, pages, [*good, (1, 21)])
    v = _analyse(f.read_bytes(), pages)
    assert not v["ok"] and "hole" in v["problems"][0]  # type: ignore[index]
    # a page of the last lap missing (torn in the middle)
    data = bytearray(f.read_bytes())
    _write(f, pages, good)
    data = bytearray(f.read_bytes())
    idx = integrity.index_of(25, pages)
    data[idx * integrity.PAGE + 100] ^= 0xFF
    v = _analyse(bytes(data), pages)
    assert not v["ok"] and any("25" in p for p in v["problems"])  # type: ignore[union-attr]
    # a torn page right after the last is the last writer stopped mid-write: allowed
    data = bytearray(f.read_bytes())
    idx = integrity.index_of(30, pages)
    data[idx * integrity.PAGE:idx * integrity.PAGE + 10] = b"x" * 10
    v = _analyse(bytes(data), pages)
    assert v["ok"], v["problems"]
    assert integrity.round_pages(1) == 16 and integrity.round_pages(17) == 32


def test_percentiles() -> None:
    p = percentiles([0.001 * i for i in range(1, 101)])
    assert p["count"] == 100 and p["max"] == 0.1 and 0.049 <= p["p50"] <= 0.051
    assert percentiles([])["count"] == 0


# ------------------------------------------------------------ hostile files, odd inputs
GARBAGE_RECORDS = [
    b"\x00\xff" * 300,  # binary junk
    b'{"hb": 1e400, "token": "t", "state": "ready"}',  # int(inf): OverflowError
    b'{"hb": null, "token": "t", "state": "ready"}',  # int(None): TypeError
    b'{"hb": "abc", "token": "t", "state": "ready"}',  # int("abc"): ValueError
    b'{"hb": true, "token": "t", "state": "ready"}',  # a bool is no heartbeat
    b'{"hb": 3, "token": 5, "state": "ready"}',  # a token that is no string
    b"[1, 2]",
    b"[" * 5000,  # nesting deep enough for json's recursion limit
]


def test_garbage_state_files_are_no_parties(tmp_path: Path) -> None:
    """A state file that is not a party's record (garbage, a torn write, another
    program's file, a directory) is ignored, not an internal error (it was
    OverflowError/TypeError: 'AMQ6184: An internal miqm error' from -w and -c)."""
    from lockfs import open_volume

    for i, raw in enumerate(GARBAGE_RECORDS):
        assert meet.parse_record(raw) is None, raw[:40]
        (tmp_path / f"amqmfsck.w.junk{i}.state").write_bytes(raw)
    (tmp_path / "amqmfsck.w.adir.state").mkdir()
    good = meet.parse_record(b'{"hb": 2, "token": "h.1.ab", "state": "ready", '
                             b'"partners": 7}')
    assert good is not None and good["partners"] == []  # never a non-list
    vol = open_volume(str(tmp_path))
    party = meet.Party(vol, "w")
    try:
        assert party.look() == {}
        assert meet.live_parties(vol, watch=0.3) == []
    finally:
        party.close()
        vol.close()


def test_garbage_writer_records_are_ignored_by_the_analysis(tmp_path: Path) -> None:
    """-i reads what each -a writer had synced from its state file: garbage there (a
    float too big for an int was an OverflowError) counts for nothing."""
    from lockfs import open_volume

    for i, raw in enumerate([b'{"gen": 1e400, "acked": 3}', b'{"gen": 1, "acked": "x"}',
                             b'{"gen": -1, "acked": 5}', b"junk", b'{"gen": 2}']):
        (tmp_path / f"amqmfsck.a.junk{i}.state").write_bytes(raw)
    (tmp_path / "amqmfsck.a.good.state").write_bytes(b'{"gen": 2, "acked": 40}')
    vol = open_volume(str(tmp_path))
    try:
        assert integrity.acked_by_generation(vol) == {2: 40}
    finally:
        vol.close()


def test_a_writer_waits_for_the_lock_until_stopped_by_default(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """-a's second writer waits for the lock until the first is done something dreadful
    to, which may take the administrator minutes: without --wait it must not give up
    after -w's 120 s (it did, and then reported success having written nothing)."""
    from fsck import cli

    seen: dict[str, object] = {}

    def fake_writer(vol: object, results: object, *, wait: object, quiet: bool) -> None:
        seen["wait"] = wait

    monkeypatch.setattr(integrity, "run_writer", fake_writer)
    assert cli.run(str(tmp_path), "-a", as_json=True) == 0
    assert seen["wait"] is None
    assert cli.run(str(tmp_path), "-a", as_json=True, wait=7.0) == 0
    assert seen["wait"] == 7.0


def test_full_filesystem_is_named_as_such() -> None:
    from fsck.report import CAUSE_FULL, from_error
    from lockfs.errors import VolumeIOError

    exc = VolumeIOError("write /x/amqmfsck.dat: No space left on device", errno=28)
    reason, cause, advice = from_error(exc, "format test file")
    assert cause == CAUSE_FULL and "full" in reason and "free space" in advice
    nfs = VolumeIOError("pwrite call failed with NFS4ERR_NOSPC", errno=None)
    assert from_error(nfs, "w")[1] == CAUSE_FULL


def test_a_stop_inside_a_call_counts_once_the_process_was_continued(tmp_path: Path) -> None:
    """A stop that falls in a lock or write call overruns no sleep: the silence of the
    heartbeat counts as this process's stop only once SIGCONT has been seen (without it,
    a slow call is the filesystem's, not a stop)."""
    import signal

    from lockfs import open_volume

    now = [100.0]
    vol = open_volume(str(tmp_path))
    old = meet.note_resumes()
    party = meet.Party(vol, "c", clock=lambda: now[0], sleep=lambda s: None)
    try:
        party.publish()
        now[0] += 7.5  # a call that took 7.5 s between two heartbeats
        party.publish()
        assert party.longest_silence == 7.5 and party.stopped_for() == 0.0
        os.kill(os.getpid(), signal.SIGCONT)  # handled at the next bytecode
        assert party.stopped_for() == 7.5
    finally:
        party.close()
        vol.close()
        signal.signal(signal.SIGCONT, old)


# ---- -c's latency profile: a writer's own stop is not the filesystem's slowness

_LOCK_WAIT_OF_THE_STOP = {
    "lock": {"p50": 0.002, "p99": 0.01, "max": 15.0, "count": 40},  # spanned the stop
    "write+fdatasync": {"p50": 0.001, "p99": 0.004, "max": 0.006, "count": 40},
}


def _judged(stopped: float, lat: dict | None = None) -> Result:  # type: ignore[type-arg]
    results: list[Result] = []
    concurrent.judge_latency(results, lat or _LOCK_WAIT_OF_THE_STOP, monitor_stall=20.0,
                             stall_source="qm.ini", stopped=stopped)
    assert [r.name for r in results] == ["latency profile"]
    return results[0]


def test_a_slowest_lock_wait_that_spanned_the_writers_own_stop_is_noted_not_judged() -> None:
    res = _judged(stopped=14.8)
    assert res.ok, res.reason
    assert len(res.notes) == 1 and "stopped or stalled for 14.8 s" in res.notes[0]
    assert "lock (15.00 s) includes the stop" in res.notes[0]


def test_the_same_lock_wait_in_a_writer_that_never_stopped_fails_as_slow() -> None:
    from fsck.report import CAUSE_SLOW

    res = _judged(stopped=meet.STOPPED_GAP)  # up to the gap counts as not stopped
    assert not res.ok and res.cause == CAUSE_SLOW
    assert "a lock took 15.00 s, half or more of MonitorStall (20 s, qm.ini)" in res.reason


def test_operations_under_half_of_monitor_stall_pass_stopped_or_not() -> None:
    fast = {"lock": {"p50": 0.002, "p99": 0.01, "max": 9.9, "count": 40}}
    for stopped in (0.0, 30.0):
        res = _judged(stopped, fast)
        assert res.ok and res.notes == []
        assert "every operation took under half of MonitorStall" in res.steps[-1]


def test_a_c_run_judges_its_latency_with_how_long_its_party_stood_still(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """run_concurrent hands the party's stop to the judgement (read before it closes)."""

    class StoppedParty:
        def __init__(self, vol: object, test: str) -> None:
            self.closed = False

        def stopped_for(self) -> float:
            assert not self.closed
            return 14.8

        def close(self) -> None:
            self.closed = True

    def run(vol: object, party: object, res: Result, *args: object) -> None:
        res.details["latency"] = _LOCK_WAIT_OF_THE_STOP

    monkeypatch.setattr(concurrent, "Party", StoppedParty)
    monkeypatch.setattr(concurrent, "_run", run)
    results: list[Result] = []
    concurrent.run_concurrent(object(), results, count=40, wait=1.0,  # type: ignore[arg-type]
                              monitor_stall=20.0, stall_source="qm.ini", quiet=True)
    assert [(r.name, r.ok) for r in results] == [("concurrent writes", True),
                                                 ("latency profile", True)]
    assert "includes the stop" in results[1].notes[0]
