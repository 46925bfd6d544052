"""A Volume wrapper that records every write and every fdatasync, for crash testing.

``RecordingVolume(inner)`` passes every call through to ``inner`` and appends to one
shared :class:`Recorder` the operations that change durable state: ``create``, ``write``
(offset + bytes), ``sync``, ``truncate``, ``rename``, ``unlink``. Files are tracked by
identity (an inode number of our own), so writes through a descriptor opened before a
rename land in the renamed file, as on a real filesystem.

:meth:`Recorder.crash_images` then builds, for a list of crash points (indexes into the
operation list), the content a power loss at that point could leave: every write
followed by an fdatasync of its file is kept; of the later (unforced) writes, split into
4 KiB pages, a random subset is kept, in order, and one of them may be torn (only a
prefix of it written). Metadata operations (create, rename, unlink, truncate) are taken
as durable when they return, which is what the posix backend provides (it syncs the
directory after a rename).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from lockfs.volume import WHOLE_FILE, FileStat, LockMode, Volume, VolumeFile

PAGE = 4096


@dataclass
class Op:
    """One recorded operation."""

    kind: str  # create | write | sync | truncate | rename | unlink
    ino: int = 0
    path: str = ""
    offset: int = 0
    data: bytes = b""
    dst: str = ""


@dataclass
class _FileState:
    durable: bytearray = field(default_factory=bytearray)
    pending: list[tuple[int, bytes]] = field(default_factory=list)


class Recorder:
    """The shared operation log of one or more recording volumes."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.lock = threading.Lock()
        self._next_ino = 1
        self.paths: dict[str, int] = {}  # "<volume tag>:<path>" -> ino

    def add(self, op: Op) -> int:
        """Append an operation; returns its index (a crash point after it is index+1)."""
        with self.lock:
            self.ops.append(op)
            return len(self.ops)

    def position(self) -> int:
        """Number of operations so far (a crash point here keeps all of them)."""
        return len(self.ops)

    def ino_for(self, key: str, create: bool) -> int:
        """The identity of the file at ``key``, creating one (and a create op) if new."""
        with self.lock:
            ino = self.paths.get(key)
            if ino is None:
                ino = self._next_ino
                self._next_ino += 1
                self.paths[key] = ino
                self.ops.append(Op("create", ino, key))
            return ino

    def crash_images(self, points: list[int], seed: int = 0,
                     torn: bool = True) -> Iterator[tuple[int, dict[str, bytes]]]:
        """For each crash point (ascending), the files (key -> bytes) a power loss could
        leave. One pass over the operations; each image gets its own random choices."""
        rng = random.Random(seed)
        files: dict[int, _FileState] = {}
        names: dict[str, int] = {}
        pos = 0
        for point in sorted(points):
            while pos < point and pos < len(self.ops):
                _apply(self.ops[pos], files, names)
                pos += 1
            yield point, _image(files, names, rng, torn)


def _apply(op: Op, files: dict[int, _FileState], names: dict[str, int]) -> None:
    k = op.kind
    if k == "create":
        files[op.ino] = _FileState()
        names[op.path] = op.ino
    elif k == "write":
        files[op.ino].pending.append((op.offset, op.data))
    elif k == "sync":
        st = files[op.ino]
        for off, data in st.pending:
            _put(st.durable, off, data)
        st.pending = []
    elif k == "truncate":
        st = files[op.ino]
        for off, data in st.pending:  # metadata is durable: order writes before it
            _put(st.durable, off, data)
        st.pending = []
        del st.durable[op.offset:]
        if len(st.durable) < op.offset:
            st.durable.extend(bytes(op.offset - len(st.durable)))
    elif k == "rename":
        ino = names.pop(op.path, None)
        if ino is not None:
            names[op.dst] = ino
    elif k == "unlink":
        names.pop(op.path, None)


def _put(buf: bytearray, off: int, data: bytes) -> None:
    end = off + len(data)
    if len(buf) < end:
        buf.extend(bytes(end - len(buf)))
    buf[off:end] = data


def _image(files: dict[int, _FileState], names: dict[str, int], rng: random.Random,
           torn: bool) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    pages: list[tuple[str, int, bytes]] = []
    for name, ino in names.items():
        st = files[ino]
        out[name] = st.durable  # type: ignore[assignment]  # copied below if touched
        for off, data in st.pending:
            # split into the pages the write touches
            p = off
            end = off + len(data)
            while p < end:
                nxt = min(end, (p // PAGE + 1) * PAGE)
                pages.append((name, p, data[p - off:nxt - off]))
                p = nxt
    touched: dict[str, bytearray] = {}
    if pages:
        keep = [rng.random() < 0.5 for _ in pages]
        torn_i = rng.randrange(len(pages)) if torn and rng.random() < 0.5 else -1
        for i, (name, off, data) in enumerate(pages):
            if not keep[i] and i != torn_i:
                continue
            if i == torn_i:
                data = data[:rng.randrange(len(data) + 1)]
            buf = touched.get(name)
            if buf is None:
                buf = touched[name] = bytearray(out[name])
            _put(buf, off, data)
    return {n: bytes(touched.get(n, out[n])) for n in out}


class RecordingFile(VolumeFile):
    """A file whose state-changing calls are recorded."""

    def __init__(self, inner: VolumeFile, rec: Recorder, ino: int) -> None:
        self._inner = inner
        self._rec = rec
        self._ino = ino
        self.path = inner.path

    def pread(self, size: int, offset: int) -> bytes:
        return self._inner.pread(size, offset)

    def pwrite(self, data: bytes | bytearray | memoryview, offset: int) -> None:
        self._inner.pwrite(data, offset)
        self._rec.add(Op("write", self._ino, offset=offset, data=bytes(data)))

    def fdatasync(self) -> None:
        self._inner.fdatasync()
        self._rec.add(Op("sync", self._ino))

    def size(self) -> int:
        return self._inner.size()

    def truncate(self, size: int) -> None:
        self._inner.truncate(size)
        self._rec.add(Op("truncate", self._ino, offset=size))

    def try_lock(self, mode: LockMode, start: int = 0, length: int = WHOLE_FILE) -> bool:
        return self._inner.try_lock(mode, start, length)

    def unlock(self, start: int = 0, length: int = WHOLE_FILE) -> None:
        self._inner.unlock(start, length)

    def lock_lost(self) -> bool:
        return self._inner.lock_lost()

    def file_id(self) -> int | None:
        return self._inner.file_id()

    def close(self) -> None:
        self._inner.close()


class RecordingVolume(Volume):
    """Wraps a volume; ``tag`` prefixes its paths in the shared recorder's images."""

    def __init__(self, inner: Volume, recorder: Recorder, tag: str) -> None:
        self.inner = inner
        self.recorder = recorder
        self.tag = tag
        self.url = inner.url
        self.lease_seconds = inner.lease_seconds

    def _key(self, path: str) -> str:
        return f"{self.tag}:{path}"

    def open(self, path: str, *, create: bool = False, exclusive: bool = False) -> VolumeFile:
        existed = self.inner.exists(path)
        f = self.inner.open(path, create=create, exclusive=exclusive)
        key = self._key(path)
        if not existed or key not in self.recorder.paths:
            if existed and key not in self.recorder.paths:
                # a file made before recording began: its current bytes are durable
                ino = self.recorder.ino_for(key, create=True)
                data = f.pread(f.size(), 0)
                if data:
                    self.recorder.add(Op("write", ino, offset=0, data=data))
                    self.recorder.add(Op("sync", ino))
            else:
                ino = self.recorder.ino_for(key, create=True)
        ino = self.recorder.paths[key]
        return RecordingFile(f, self.recorder, ino)

    def stat(self, path: str) -> FileStat:
        return self.inner.stat(path)

    def listdir(self, path: str = "") -> list[str]:
        return self.inner.listdir(path)

    def makedirs(self, path: str) -> None:
        self.inner.makedirs(path)

    def rename(self, src: str, dst: str) -> None:
        self.inner.rename(src, dst)
        with self.recorder.lock:
            ino = self.recorder.paths.pop(self._key(src), None)
            if ino is not None:
                self.recorder.paths[self._key(dst)] = ino
            self.recorder.ops.append(Op("rename", path=self._key(src), dst=self._key(dst)))

    def unlink(self, path: str) -> None:
        self.inner.unlink(path)
        with self.recorder.lock:
            self.recorder.paths.pop(self._key(path), None)
            self.recorder.ops.append(Op("unlink", path=self._key(path)))

    def rmdir(self, path: str) -> None:
        self.inner.rmdir(path)

    def remove_tree(self, path: str = "") -> None:
        # route through our unlink so the recorder forgets the files
        if not self.inner.exists(path):
            return
        if not self.inner.stat(path).is_dir:
            self.unlink(path)
            return
        for name in self.inner.listdir(path):
            self.remove_tree(f"{path}/{name}" if path else name)
        if path:
            self.inner.rmdir(path)

    def close(self) -> None:
        self.inner.close()

    def describe(self) -> str:
        return self.inner.describe()
