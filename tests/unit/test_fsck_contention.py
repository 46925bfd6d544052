"""amqmfsck -c: the writers take turns at the data file's lock (a hand-off count and the
pause after an unlock), so that the test is one of writes under contended locks."""

from __future__ import annotations

from fsck.concurrent import REC, _turn, interleavings, make_record, writer_id


def _file(*writers: str) -> bytes:
    prev, seqs, out = 0, {}, b""
    for w in writers:
        seqs[w] = seqs.get(w, 0) + 1
        rec = make_record(writer_id(w), seqs[w], prev)
        prev = int.from_bytes(rec[16:20], "little")
        out += rec
    return out


def test_interleavings_count_the_hand_offs_between_writers() -> None:
    assert interleavings(b"") == 0
    assert interleavings(_file("a")) == 0
    assert interleavings(_file("a", "a", "a", "b", "b", "b")) == 1  # one wrote, then the other
    assert interleavings(_file("a", "b", "a", "b", "b", "a")) == 4
    assert len(_file("a", "b")) == 2 * REC


def test_the_pause_after_an_unlock_outlasts_a_partner_poll() -> None:
    # a local lock call (microseconds): at least a poll gap or two
    assert 0.001 <= _turn([0.00001] * 30) <= 0.01
    # an NFS lock call of a few ms: a few of them, so the polling partner gets a call in
    assert _turn([0.003] * 30) >= 2 * 0.003
    # a slow server: bounded, the run must not crawl
    assert _turn([2.0] * 30) == 0.05
    assert _turn([]) >= 0.001
