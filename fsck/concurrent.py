"""``-c``: concurrent writes under locks by two processes, and the latency profile.

Both processes meet through state files (:mod:`fsck.meet`), then each appends ``--count``
records to one data file, one record per turn of an exclusive lock: lock, find the end,
read and check the last record, append its own record chained to it (its CRC names the
previous record's), ``fdatasync``, unlock. Afterwards each reads the whole file and checks
every record of both processes: intact (checksummed), each process's sequence complete,
and the chain unbroken (an append that overwrote or interleaved with another breaks it).

The latency profile (p50, p99, max of lock calls, write+fdatasync, reads) is judged against
``MonitorStall``: one operation taking half of it or more fails the test, since a stall that
long on a live queue manager is a spurious failover in waiting.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import struct
from typing import Any

import crc32c

from fsck.meet import PERIOD, STOPPED_GAP, Party, progress, same_host_note
from fsck.report import (
    CAUSE_LEASE,
    CAUSE_LOCKS,
    CAUSE_PARTNER,
    CAUSE_SLOW,
    CAUSE_STOPPED,
    Failed,
    TestResult,
    percentiles,
    run_test,
)
from lockfs.errors import LockFsError
from lockfs.volume import LockMode, Volume

REC = 256
_HEAD = struct.Struct("<4s8sIII")  # magic, writer id, seq, prev crc, crc
MAGIC = b"FSCC"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}")
POLL_GAP = 0.001  # seconds between two attempts at a data file lock that was refused
#: fewer lock hand-offs than this between the writers and a pass says little about
#: contended locks (a note says so)
FEW_HANDOFFS = 10


def writer_id(token: str) -> bytes:
    """8 bytes naming a writer inside the records."""
    return hashlib.blake2b(token.encode(), digest_size=8).digest()


def make_record(wid: bytes, seq: int, prev: int) -> bytes:
    """One record: header, then a payload derived from writer and sequence."""
    fill = (wid + struct.pack("<I", seq)) * ((REC - _HEAD.size) // 12 + 1)
    body = fill[:REC - _HEAD.size]
    crc = crc32c.crc32c(_HEAD.pack(MAGIC, wid, seq, prev, 0) + body)
    return _HEAD.pack(MAGIC, wid, seq, prev, crc) + body


def parse_record(raw: bytes) -> tuple[bytes, int, int, int] | None:
    """(writer id, seq, prev, crc) of an intact record, else None."""
    if len(raw) != REC:
        return None
    magic, wid, seq, prev, crc = _HEAD.unpack_from(raw)
    body = raw[_HEAD.size:]
    if magic != MAGIC or crc32c.crc32c(_HEAD.pack(magic, wid, seq, prev, 0) + body) != crc:
        return None
    return wid, seq, prev, crc


def verify(data: bytes, counts: dict[bytes, int],
           names: dict[bytes, str] | None = None) -> list[str]:
    """Everything wrong with a data file expected to hold ``counts`` records per writer
    (``names``: how to call each writer in a problem, its process token)."""
    problems: list[str] = []
    if len(data) % REC:
        problems.append(f"the file is {len(data)} bytes, not a whole number of records "
                        "(a write was torn or interleaved)")
    prev = 0
    next_seq = dict.fromkeys(counts, 1)
    for i in range(len(data) // REC):
        rec = parse_record(data[i * REC:(i + 1) * REC])
        if rec is None:
            problems.append(f"record {i} is damaged (two writes overlapped or interleaved)")
            prev = -1
            continue
        wid, seq, p, crc = rec
        if prev != -1 and p != prev:
            problems.append(f"record {i} does not follow record {i - 1} (an append overwrote "
                            "another or saw a stale end of file)")
        prev = crc
        if wid not in next_seq:
            problems.append(f"record {i} was written by an unknown process")
        elif seq != next_seq[wid]:
            problems.append(f"record {i}: sequence {seq} where {next_seq[wid]} was expected "
                            "(a record was lost)")
            next_seq[wid] = seq + 1
        else:
            next_seq[wid] += 1
    for wid, n in counts.items():
        if next_seq.get(wid, 1) - 1 < n:
            who = (names or {}).get(wid, wid.hex())
            problems.append(f"process {who} wrote {n} records but "
                            f"{next_seq.get(wid, 1) - 1} are in the file (records lost)")
    return problems[:5]


def run_concurrent(vol: Volume, results: list[TestResult], *, count: int, wait: float,
                   monitor_stall: float, stall_source: str, quiet: bool) -> None:
    """Run -c as one of the two processes."""
    with run_test(results, "concurrent writes") as res:
        party = Party(vol, "c")
        try:
            try:
                _run(vol, party, res, count, wait, quiet)
            except Failed as exc:
                stood = party.stopped_for()
                if exc.cause not in (CAUSE_PARTNER, CAUSE_SLOW) or stood <= STOPPED_GAP:
                    raise
                # it was this process that stopped: the partner that gave up and ended
                # meanwhile (or the lock it kept while this one stood still) is no fault
                # of the other's or of the filesystem's
                raise Failed(f"this process was stopped or stalled for "
                             f"{stood:.1f} s during the run, which no "
                             f"filesystem answers for (what followed: {exc.reason})",
                             CAUSE_STOPPED,
                             "let both processes run to the end (do not stop either), "
                             "then run the test again") from None
        except BaseException:
            _drop_data_file(vol, party, res)
            raise
        finally:
            stopped = party.stopped_for()
            party.close()
    conc = results[-1]
    if "latency" in conc.details:
        judge_latency(results, conc.details["latency"], monitor_stall=monitor_stall,
                      stall_source=stall_source, stopped=stopped)


def judge_latency(results: list[TestResult], lat: dict[str, dict[str, Any]], *,
                  monitor_stall: float, stall_source: str, stopped: float) -> None:
    """The "latency profile" test of a -c run: each operation's p50/p99/max from ``lat``
    (operation -> percentiles and count), failed if the slowest took half of MonitorStall
    or more, unless this process stood still for ``stopped`` seconds (more than
    STOPPED_GAP) during the run: then that slowest one is noted, not judged."""
    with run_test(results, "latency profile") as res:
        res.details.update(latency=lat, monitor_stall=monitor_stall, source=stall_source)
        worst = max((v["max"], k) for k, v in lat.items() if v["count"])
        for k, v in lat.items():
            res.step(f"{k}: p50 {v['p50'] * 1000:.2f} ms, p99 {v['p99'] * 1000:.2f} ms, "
                     f"max {v['max'] * 1000:.2f} ms ({v['count']})")
        if worst[0] < monitor_stall / 2:
            res.step(f"every operation took under half of MonitorStall "
                     f"({monitor_stall:g} s, {stall_source})")
        elif stopped > STOPPED_GAP:
            # a lock wait (or a call) that spanned this process's own stop measured
            # the stop, not the filesystem
            res.notes.append(f"this process was stopped or stalled for {stopped:.1f} s "
                             f"during the run: its slowest {worst[1]} "
                             f"({worst[0]:.2f} s) includes the stop and was not judged")
        else:
            raise Failed(f"a {worst[1]} took {worst[0]:.2f} s, half or more of MonitorStall "
                         f"({monitor_stall:g} s, {stall_source})", CAUSE_SLOW,
                         "a filesystem this slow causes spurious failovers: tune the "
                         "NFS client, server and network, or raise MonitorStall")

def _meet(party: Party, wait: float, deadline: float) -> tuple[str, list[str]]:
    """(session, partners): the run this process joins, and the others writing in it.

    A party that has moved on to writing and names this one as a partner has chosen it:
    that invitation is taken as it stands (two processes started at the same instant may
    see each other's heartbeat move only once, after the faster one has met the slower
    one). Otherwise the partners are the parties waiting ("ready") now. A run already
    under way between other processes is left alone: joining it would put records its
    writers do not expect into their file."""
    clock = party.clock
    busy: set[str] = set()
    while True:
        view = party.look()
        invites = [(str(s.record.get("session")), tok, s) for tok, s in view.items()
                   if party.token in s.record["partners"]
                   and _safe(s.record.get("session"))]
        if invites:
            session, tok, s = min(invites)
            return session, sorted({tok, *s.record["partners"]} - {party.token})
        ready = sorted(tok for tok, s in view.items()
                       if party.alive(s) and s.record.get("state") == "ready")
        if ready:
            return min([party.token, *ready]), ready
        busy |= {tok for tok, s in view.items() if party.alive(s)
                 and s.record.get("state") in ("running", "finished", "verified")}
        if clock() > deadline:
            other = (f" (a -c run of {', '.join(sorted(busy))} was under way here: run "
                     "the test again once it has ended)" if busy else "")
            raise Failed(f"no second process arrived within {wait:g} s{other}",
                         CAUSE_PARTNER, "run the same command on another host at the same "
                         "time")
        party.publish()
        party.sleep(PERIOD)


def _confirm(party: Party, session: str, partners: list[str],
             deadline: float) -> list[str]:
    """The partners that joined ``session`` (before anything is written): a partner that
    chose another run (three or more processes met at once) or went away is dropped."""
    clock = party.clock
    while True:
        view = party.look()
        joined = [tok for tok in partners if view[tok].record.get("session") == session]
        gone = [tok for tok in partners if tok not in joined and (
            _safe(view[tok].record.get("session")) or party.silent(view[tok], 5.0))]
        if len(joined) + len(gone) == len(partners) or clock() > deadline:
            return joined
        party.publish()
        party.sleep(PERIOD)


def _safe(name: object) -> bool:
    """A party token or session that can name a file."""
    return isinstance(name, str) and bool(_NAME.fullmatch(name))


def _run(vol: Volume, party: Party, res: TestResult, count: int, wait: float,
         quiet: bool) -> None:
    clock = party.clock
    party.publish("ready")
    progress("Waiting for a second copy of this program (amqmfsck -c) on another host...",
             quiet)
    deadline = clock() + wait
    while True:
        session, partners = _meet(party, wait, deadline)
        party.publish("running", session=session, partners=partners)
        partners = _confirm(party, session, partners, deadline)
        if partners:
            break
        party.publish("ready", session=None, partners=[])  # each went elsewhere: again
    data_name = f"amqmfsck.c.{session}.dat"
    res.details["data_file"] = data_name
    res.step(f"met {', '.join(partners)}; writing {count} records to {data_name}")
    me = writer_id(party.token)
    lock_t: list[float] = []
    wait_t: list[float] = []
    write_t: list[float] = []
    read_t: list[float] = []
    f = None
    for _ in range(50):  # whoever is first creates the file
        try:
            f = vol.open(data_name, create=True)
            break
        except LockFsError:  # created by the other at the same time
            party.sleep(0.05)
    if f is None:
        f = vol.open(data_name)
    last_pub = clock()
    # when a call on the data file last completed: a gap longer than the lease (this
    # process stopped or cut off, in a call or between two) means its lease ran out
    t_run = t0 = answered = clock()
    yielding = True  # until every partner has finished its records
    try:
        for seq in range(1, count + 1):
            t_wait = clock()
            while True:
                t0 = clock()
                got = f.try_lock(LockMode.EXCLUSIVE)
                answered = clock()
                lock_t.append(answered - t0)
                if got:
                    break
                if clock() - t_wait > wait:
                    raise _lock_timeout(party, partners, wait)
                if clock() - last_pub >= PERIOD:
                    party.publish()
                    party.look()  # whether the holder is alive, should the wait fail
                    last_pub = clock()
                party.sleep(POLL_GAP)
            wait_t.append(clock() - t_wait)
            size = f.size()
            prev = 0
            if size % REC:
                raise Failed(f"the data file is {size} bytes under the lock: not whole "
                             "records (a write was torn or interleaved)", CAUSE_LOCKS,
                             "writes under a lock must be seen whole by the next holder")
            if size:
                t0 = clock()
                raw = f.pread(REC, size - REC)
                answered = clock()
                read_t.append(answered - t0)
                rec = parse_record(raw)
                if rec is None:
                    raise Failed("the last record, read under the lock, is damaged "
                                 "(another process's write interleaved or is not yet "
                                 "visible)", CAUSE_LOCKS, "writes made under a lock must be "
                                 "visible whole to the next holder: mount with sync, noac")
                prev = rec[3]
            t0 = clock()
            f.pwrite(make_record(me, seq, prev), size)
            f.fdatasync()
            write_t.append(clock() - t0)
            f.unlock()
            answered = clock()
            if clock() - last_pub >= PERIOD:
                party.publish()
                if yielding:
                    yielding = not _partners_finished(party, partners)
                last_pub = clock()
            if yielding and seq < count:
                # give a polling partner its turn: relocking at once won the lock nearly
                # every time where lock calls are fast (a local disk, FUSE), so one
                # process wrote all its records and then the other - one hand-off, and
                # the test of writes under contended locks was hollow
                party.sleep(_turn(lock_t))
    except LockFsError as exc:
        # a call that failed with no call answered for longer than the lease: this process
        # was stopped (SIGSTOP) or cut off, in that call or before it, and its lease ran
        # out - the RPC "timing out", or the server no longer knowing its state
        # (NFS4ERR_STALE, EXPIRED), on resuming is that, not a server that does not answer
        lease, took = vol.lease_seconds, clock() - answered
        if not lease or took <= lease:
            raise
        raise Failed(f"lease expired under a live writer: no call on the data file was "
                     f"answered for {took:.1f} s, longer than the lease ({lease:g} s): this "
                     f"process was stopped or cut off, and its lock may have passed to the "
                     f"other ({exc})", CAUSE_LEASE, "a writer stopped or cut off longer than the "
                     "lease loses its lock: the queue manager must stop itself within "
                     "VerifyInterval + MonitorStall, which must be shorter than the lease") \
            from None
    finally:
        f.close()
    res.details["write_seconds"] = round(clock() - t_run, 3)
    res.details["latency"] = {"lock": percentiles(lock_t), "lock wait": percentiles(wait_t),
                              "write+fdatasync": percentiles(write_t),
                              "read": percentiles(read_t)}
    party.publish("finished", count=count)
    # wait for the others of this run to finish, then check the whole file, every
    # process's records; a partner that went into another run (three processes met at
    # once) wrote nothing here and is not waited for
    try:
        writers = _finish(party, session, partners, wait)
    except _PartnerGone as gone:
        # what the run wrote before the other stopped must still be intact: a killed or
        # cut-off writer's late write landing over the survivor's records shows here
        _check_after_partner_gone(vol, data_name, me, count, party.token, gone, res)
        raise
    if not writers:
        vol.unlink(data_name)
        raise Failed(f"the other process ({', '.join(partners)}) joined another amqmfsck -c "
                     "run (three or more were started at once): nothing was tested",
                     CAUSE_PARTNER, "run the test again with one process on each host")
    counts = {me: count}
    names = {me: party.token}
    for tok, n in writers.items():
        counts[writer_id(tok)] = n
        names[writer_id(tok)] = tok
    partners = sorted(writers)
    data = vol.read_bytes(data_name)
    problems = verify(data, counts, names)
    res.details["records"] = len(data) // REC
    handoffs = interleavings(data)
    res.details["handoffs"] = handoffs
    party.publish("verified", ok=not problems)
    # let the partner finish reading (and see this verdict) before the file or this
    # record goes: a failed check that left at once was seen by the partner as a
    # process that "stopped before it finished"
    end = clock() + 5.0
    while clock() < end:
        if all(party.seen[t].record.get("state") == "verified" or not party.alive(
                party.seen[t], 1.0) for t in partners):
            break
        party.publish()
        party.sleep(PERIOD)
        party.look()
    if problems:
        res.details["keep_data_file"] = True  # the evidence: -x removes it
        raise Failed("concurrent writes under locks were lost or interleaved: "
                     + "; ".join(problems) + f" (the records are kept in {data_name})",
                     CAUSE_LOCKS,
                     "the filesystem does not enforce locks across hosts, or shows data "
                     "late: use NFSv4 with hard, sync, noac, local_lock=none")
    res.step(f"checked all {len(data) // REC} records of both processes: intact, none lost, "
             f"chained in lock order; the lock passed between the processes {handoffs} "
             "times")
    if handoffs < min(FEW_HANDOFFS, count):
        res.notes.append(f"the lock passed between the processes only {handoffs} times in "
                         f"{len(data) // REC} records (one wrote while the other could not "
                         "keep up): writes under contended locks were hardly tested; run "
                         "it again, both processes started together")
    note = same_host_note(vol, [party.seen[t].record for t in partners if t in party.seen])
    if note:
        res.notes.append(note)
    if min([*partners, party.token]) == party.token:
        vol.unlink(data_name)


def _turn(lock_t: list[float]) -> float:
    """Seconds a writer pauses after releasing the data file's lock so that a partner
    polling for it (a lock call, then :data:`POLL_GAP`) is granted it: a few of the
    recent lock calls and polls, within 1 ms to 50 ms."""
    recent = sorted(lock_t[-20:])
    typical = recent[len(recent) // 2] if recent else 0.0
    return min(0.05, max(0.001, 3 * (typical + POLL_GAP)))


def _partners_finished(party: Party, partners: list[str]) -> bool:
    """True when every partner has written all its records (or ended): pausing after an
    unlock would only slow this process down."""
    view = party.look()
    return all(tok not in view or view[tok].gone
               or view[tok].record.get("state") in ("finished", "verified")
               for tok in partners)


def interleavings(data: bytes) -> int:
    """How many times the writer changes from one record to the next in a data file:
    each is a hand-off of the lock between the processes (0 or 1: they never contended)."""
    ids = [data[i + 4:i + 12] for i in range(0, len(data) - REC + 1, REC)]
    return sum(1 for a, b in itertools.pairwise(ids) if a != b)


def _finish(party: Party, session: str, partners: list[str],
            wait: float) -> dict[str, int]:
    """Wait for every other writer of ``session`` to finish; their record counts (empty
    when every partner went into another run)."""
    clock = party.clock
    end = clock() + wait
    while True:
        view = party.look()
        # this run's writers: those that say so, and those any of them named that have not
        # gone into another run
        inside = {tok for tok, s in view.items() if s.record.get("session") == session}
        named = set(partners).union(*(view[tok].record["partners"] for tok in inside))
        members = inside | {tok for tok in named - {party.token} if tok in view
                            and view[tok].record.get("session") in (None, session)}
        done = {tok: view[tok] for tok in members if view[tok].record.get("session") == session
                and view[tok].record.get("state") in ("finished", "verified")}
        if not members:
            return {}  # the others went into another run: this one wrote alone
        if len(done) == len(members):
            return {tok: _count(s.record.get("count")) for tok, s in done.items()}
        gone = sorted(tok for tok in members - set(done) if party.silent(view[tok], 5.0))
        if gone or clock() > end:
            raise _PartnerGone(
                f"the other process ({', '.join(gone or sorted(members))}) stopped before it "
                "finished", CAUSE_PARTNER, "run it again on both hosts",
                finished={tok: _count(s.record.get("count")) for tok, s in done.items()},
                stopped=sorted(members - set(done)))
        party.publish()
        party.sleep(PERIOD)


def _lock_timeout(party: Party, partners: list[str], wait: float) -> Failed:
    """The failure for a data file lock not granted within ``wait`` seconds, named by
    what the other writers are doing: one that went silent holds it (stopped, killed with
    its lock kept, or cut off), which says nothing against the locks; one still writing
    kept this process out (the lock is not handed over between the processes)."""
    view = party.look()
    silent = sorted(t for t in partners if t in view and not party.alive(view[t]))
    if silent:
        s = view[silent[0]]
        return Failed(f"the data file's lock was not granted within {wait:g} s: the other "
                      f"process ({silent[0]}) holds it and has been silent for "
                      f"{party.clock() - (s.changed or s.first_seen):.1f} s (stopped, or "
                      "its host cut off)", CAUSE_PARTNER,
                      "let both processes run to the end; a failed holder's lock must pass "
                      "when its NFSv4 lease ends (measure it with -w and --lease)")
    return Failed(f"the data file's lock was not granted within {wait:g} s while the other "
                  f"process ({', '.join(partners)}) kept writing", CAUSE_SLOW,
                  "the lock is not handed over between the hosts in time: check the "
                  "server's lock handling and load")


def _drop_data_file(vol: Volume, party: Party, res: TestResult) -> None:
    """Remove a failed run's data file once no partner is alive to use it (the last one
    out removes it); the records are kept when they showed lost or interleaved writes."""
    name = res.details.get("data_file")
    if not name or res.details.get("keep_data_file"):
        return
    try:
        view = party.look()
        if any(party.alive(s) and not s.gone for s in view.values()):
            return
        vol.unlink(name)
    except LockFsError:
        pass  # gone already, or the filesystem stopped answering: -x removes it


class _PartnerGone(Failed):
    """A partner stopped before it finished: ``finished`` maps the partners that did
    finish to their record counts, ``stopped`` lists the others."""

    def __init__(self, reason: str, cause: str, advice: str, *,
                 finished: dict[str, int], stopped: list[str]) -> None:
        super().__init__(reason, cause, advice)
        self.finished, self.stopped = finished, stopped


def _check_after_partner_gone(vol: Volume, data_name: str, me: bytes, count: int,
                              token: str, gone: _PartnerGone, res: TestResult) -> None:
    """Check the records written before a partner stopped: this process's all there, the
    stopped partner's a complete sequence as far as it got, the chain unbroken. Problems
    fail the test as lost or interleaved writes; otherwise ``gone``'s reason says the
    records were intact."""
    counts = {me: count}
    names = {me: token}
    for tok, n in gone.finished.items():
        counts[writer_id(tok)], names[writer_id(tok)] = n, tok
    for tok in gone.stopped:  # as far as it got: any number, but in sequence
        counts[writer_id(tok)], names[writer_id(tok)] = 0, tok
    try:
        data = vol.read_bytes(data_name)
    except LockFsError:
        return  # the partner failure stands on its own
    problems = verify(data, counts, names)
    res.details["records"] = len(data) // REC
    if problems:
        res.details["keep_data_file"] = True  # the evidence: -x removes it
        raise Failed("concurrent writes under locks were lost or interleaved (checked after "
                     "the other process stopped): " + "; ".join(problems)
                     + f" (the records are kept in {data_name})", CAUSE_LOCKS,
                     "a stopped or cut-off writer's write landed after the lock passed, or "
                     "locks are not enforced across hosts: use NFSv4 with hard, sync, "
                     "local_lock=none")
    gone.reason += (f"; the {len(data) // REC} records written until then are intact and "
                    "chained in lock order")
    res.step(gone.reason)


def _count(value: object) -> int:
    return value if type(value) is int and value >= 0 else 0
