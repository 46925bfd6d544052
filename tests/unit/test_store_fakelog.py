"""An in-memory stand-in for RecoveryLog (docs/architecture.md API) used by the pure
unit tests of the store until they run over the real log; plus its own sanity tests."""

from __future__ import annotations

import threading
from typing import Any

from miqm.store.log import LogRecord

# records are yielded as the real log yields them: LogRecord(lsn, generation, payload,
# next_lsn) tuples
FakeRecord = LogRecord


class FakeLog:
    """Records in a list; ``durable`` is the forced prefix (what a crash keeps)."""

    def __init__(self, capacity: int = 1 << 30) -> None:
        self.recs: list[tuple[int, bytes]] = []
        self.next = 16
        self.forced = 16
        self.restart = 16
        self.capacity = capacity
        self.lock = threading.Lock()
        self.forces = 0
        self.fail_after: int | None = None

    def first_lsn(self) -> int:
        return 16

    def records(self, start_lsn: int):
        for lsn, p in list(self.recs):
            if lsn >= start_lsn:
                yield FakeRecord(lsn, 1, p, lsn + len(p) + 8)

    def end_lsn(self) -> int:
        return self.next

    def append(self, payload: bytes) -> int:
        with self.lock:
            if self.fail_after is not None:
                if self.fail_after <= 0:
                    raise OSError("injected log failure")
                self.fail_after -= 1
            lsn = self.next
            self.recs.append((lsn, bytes(payload)))
            self.next += len(payload) + 8
            return lsn

    def force(self, lsn: int) -> None:
        with self.lock:
            self.forces += 1
            self.forced = max(self.forced, self.next)

    def append_and_force(self, payload: bytes) -> int:
        lsn = self.append(payload)
        self.force(lsn)
        return lsn

    def set_restart_lsn(self, lsn: int, media_lsn: int | None = None) -> None:
        self.restart = lsn

    def usage(self) -> float:
        return (self.next - self.restart) / self.capacity

    def oldest_extent_for_restart(self) -> str:
        return "S0000000.LOG"

    def oldest_extent_for_media(self) -> str:
        return "S0000000.LOG"

    def stats(self) -> dict[str, Any]:
        return {"logactive": 3}

    def progress(self) -> tuple[int, int]:
        return (self.forces, 0)

    def close(self) -> None:
        pass

    def crashed(self) -> FakeLog:
        """A log holding only what was forced (what survives a power loss)."""
        new = FakeLog(self.capacity)
        new.recs = [(lsn, p) for lsn, p in self.recs if lsn < self.forced]
        new.next = self.forced
        new.forced = self.forced
        return new


def test_fake_log_keeps_only_forced_records_on_crash() -> None:
    log = FakeLog()
    a = log.append(b"one")
    log.force(a)
    log.append(b"two")
    assert [r.payload for r in log.crashed().records(0)] == [b"one"]


class VolumeFakeLog(FakeLog):
    """A stand-in log on a Volume: one append-only file of ``len, crc, lsn, payload``
    frames; ``force`` writes the buffered frames and fdatasyncs; reading stops at the
    first torn or bad frame. Enough to crash-test the store's own files before (or
    independently of) the real RecoveryLog."""

    import struct as _struct

    _FR = _struct.Struct("<IIQ")

    def __init__(self, volume: Any) -> None:
        super().__init__()
        self.f = volume.open("fake.log", create=True)
        self.buf = bytearray()
        self.buf_start = 0
        self.next = 16
        size = self.f.size()
        for _ in self._scan(size):
            pass
        self.buf_start = self.next

    def _scan(self, size: int):
        import crc32c

        data = self.f.pread(size, 0) if size else b""
        pos = 0
        while pos + self._FR.size <= len(data):
            n, crc, lsn = self._FR.unpack_from(data, pos)
            payload = data[pos + self._FR.size:pos + self._FR.size + n]
            if n == 0 or len(payload) != n or crc32c.crc32c(payload) != crc or lsn != pos + 16:
                break
            yield FakeRecord(lsn, 1, payload, lsn + self._FR.size + n)
            pos += self._FR.size + n
            self.next = pos + 16

    def records(self, start_lsn: int):
        for r in self._scan(self.f.size()):
            if r.lsn >= start_lsn:
                yield r

    def append(self, payload: bytes) -> int:
        import crc32c

        with self.lock:
            lsn = self.next
            self.buf += self._FR.pack(len(payload), crc32c.crc32c(payload), lsn) + payload
            self.next += self._FR.size + len(payload)
            return lsn

    def force(self, lsn: int) -> None:
        with self.lock:
            if self.buf:
                self.f.pwrite(bytes(self.buf), self.buf_start - 16)
                self.buf_start = self.next
                self.buf = bytearray()
                self.f.fdatasync()
            self.forces += 1

    def close(self) -> None:
        self.f.close()
