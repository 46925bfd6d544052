"""The mount audit: what ``/proc/self/mountinfo`` says about the directory's mount.

For a kernel NFS mount the options that break multi-instance queue managers fail the
test, each with the reason from the MQ guidance; options that only weaken it are noted.
A local filesystem passes with a note that it cannot be shared between hosts.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass

from fsck.report import CAUSE_MOUNT, TestResult

LOCAL_FS = {"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "zfs", "f2fs", "overlay",
            "jfs", "reiserfs", "vfat", "bcachefs"}


@dataclass(frozen=True)
class Mount:
    """One line of mountinfo: where, what, and all its options."""

    mount_point: str
    fstype: str
    source: str
    options: dict[str, str]  # per-mount and per-superblock options together

    def flag(self, name: str) -> bool:
        return name in self.options


def _unescape(text: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as \\ooo."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and len(text[i + 1:i + 4]) == 3 and text[i + 1:i + 4].isdigit():
            out.append(chr(int(text[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _opts(text: str) -> dict[str, str]:
    res: dict[str, str] = {}
    for item in text.split(","):
        if item:
            key, _, value = item.partition("=")
            res[key] = value
    return res


def parse_mountinfo(text: str) -> list[Mount]:
    """Every mount in a mountinfo text (malformed lines are skipped)."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 6 or len(tail) < 2:
            continue
        opts = _opts(fields[5])
        if len(tail) >= 3:
            opts.update(_opts(tail[2]))
        mounts.append(Mount(_unescape(fields[4]), tail[0], _unescape(tail[1]), opts))
    return mounts


def mount_of(path: str, mounts: list[Mount]) -> Mount | None:
    """The mount ``path`` lies on (the last, longest matching mount point)."""
    real = os.path.realpath(path)
    best: Mount | None = None
    for m in mounts:
        mp = m.mount_point.rstrip("/") or "/"
        if (real == mp or real.startswith(mp + "/") or mp == "/") and (
                best is None or len(mp) >= len(best.mount_point.rstrip("/") or "/")):
            best = m
    return best


def _kernel_older_than(release: str, major: int, minor: int) -> bool:
    try:
        parts = release.split(".")
        return (int(parts[0]), int(parts[1].split("-")[0])) < (major, minor)
    except (ValueError, IndexError):
        return False


def audit(m: Mount, res: TestResult, kernel: str | None = None) -> None:
    """Judge one mount into ``res`` (failures for requirements, notes for advice)."""
    kernel = kernel or platform.release()
    res.details["mount"] = {"mount_point": m.mount_point, "fstype": m.fstype,
                            "source": m.source, "options": m.options}
    res.step(f"{m.mount_point} is {m.fstype} from {m.source}")
    fs = m.fstype
    if fs in ("nfs", "nfs4"):
        vers = m.options.get("vers") or m.options.get("nfsvers") or ("4" if fs == "nfs4"
                                                                     else "3")
        problems: list[str] = []
        if vers.split(".")[0] in ("2", "3"):
            problems.append(f"NFS version {vers}: NFSv3 is not supported for multi-instance "
                            "queue managers (locks go through the separate NLM/statd "
                            "protocols and are not released on a client's failure without "
                            "it coming back; use vers=4.x)")
        for soft in ("soft", "softerr"):  # softerr is soft returning ETIMEDOUT
            if m.flag(soft):
                problems.append(f"{soft}: a failed request may still have written data, "
                                "so the queue manager cannot know the state of a failed "
                                "write (use hard)")
        if m.flag("nolock"):
            problems.append("nolock: locks are kept on this client only and never reach the "
                            "server, so the other host is not kept out")
        ll = m.options.get("local_lock", "none")
        if ll in ("posix", "all"):  # fcntl (POSIX and open-file-description) locks
            problems.append(f"local_lock={ll}: locks are kept on this client only "
                            "(use local_lock=none)")
        elif ll == "flock":  # only flock() locks stay local; the queue manager's fcntl
            # locks still reach the server
            res.notes.append("local_lock=flock: flock() locks stay on this client; the "
                             "fcntl locks the queue manager uses reach the server "
                             "(local_lock=none is the usual setting)")
        elif ll not in ("none", ""):
            problems.append(f"local_lock={ll}: not a setting this audit knows "
                            "(use local_lock=none)")
        if m.flag("async"):
            problems.append("async: writes are acknowledged before they reach the server, "
                            "so a forced log write is not known to be on stable storage "
                            "(use sync)")
        if problems:
            res.fail(f"{m.mount_point} is mounted with " + "; ".join(problems), CAUSE_MOUNT,
                     "remount with vers=4.1 (or 4.2), hard, sync, noac, local_lock=none")
        if not m.flag("sync") and not m.flag("async"):
            res.notes.append("no 'sync' option: the client may cache writes until a sync; "
                             "the queue manager forces its log, but 'sync' is the MQ "
                             "requirement")
        if m.flag("nocto"):
            res.notes.append("nocto: a new open does not revalidate the file against the "
                             "server, so another host's writes can be seen late (remove "
                             "nocto)")
        if not m.flag("noac") and m.options.get("actimeo") != "0":
            res.notes.append("no 'noac': attribute caching can show another host's file "
                             "sizes late (mount with noac, or rely on locking to "
                             "revalidate)")
        if m.flag("intr") and _kernel_older_than(kernel, 2, 6):
            res.notes.append("intr on an old kernel: a signal can interrupt an NFS call "
                             "mid-write")
        elif m.flag("intr"):
            res.notes.append("intr is ignored by kernels since 2.6.25")
        return
    if fs.startswith("fuse"):
        res.notes.append(f"{fs} is a FUSE filesystem: its locks are kept by this host's "
                         "kernel per mount unless the filesystem forwards them; run -w from "
                         "two hosts to see whether they hold across mounts")
        return
    if fs in LOCAL_FS:
        # not "it passes": the note is printed over a failed run too
        res.notes.append(f"{m.mount_point} is a local filesystem ({fs}): it cannot be "
                         "shared between hosts, so these tests say nothing about a shared "
                         "filesystem")
        return
    res.notes.append(f"{fs} is not a filesystem this audit knows: check its documentation "
                     "for POSIX byte-range locks released on a client's failure")


def check_mount(directory: str, results: list[TestResult],
                mountinfo: str = "/proc/self/mountinfo") -> None:
    """The ``mount options`` test for a local path (nothing for an nfs4:// URL)."""
    from fsck.report import run_test

    with run_test(results, "mount options") as res:
        try:
            with open(mountinfo, encoding="utf-8", errors="replace") as f:
                mounts = parse_mountinfo(f.read())
        except OSError as exc:
            res.notes.append(f"cannot read {mountinfo}: {exc.strerror}; mount not audited")
            return
        m = mount_of(directory, mounts)
        if m is None:
            res.notes.append("the mount of the directory was not found; not audited")
            return
        audit(m, res)
