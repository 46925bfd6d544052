"""The mount audit's judgement of NFS options that the first version got wrong."""

from __future__ import annotations

from fsck import mounts
from fsck.report import CAUSE_MOUNT
from fsck.report import TestResult as Result

LOCAL = "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard"


def _audit(options: str) -> Result:
    line = f"36 22 0:44 / /shared rw,sync,relatime shared:1 - nfs4 srv:/export {options}"
    ms = mounts.parse_mountinfo("\n".join([LOCAL, line]))
    m = mounts.mount_of("/shared/qm", ms)
    assert m is not None
    res = Result("mount options")
    mounts.audit(m, res, kernel="6.1.0")
    return res


GOOD = "rw,sync,vers=4.2,hard,noac,proto=tcp,sec=sys"


def test_softerr_fails_as_soft_does() -> None:
    """softerr is a soft mount that returns ETIMEDOUT: it passed the audit."""
    res = _audit(GOOD.replace("hard", "softerr") + ",local_lock=none")
    assert not res.ok and res.cause == CAUSE_MOUNT and "softerr" in res.reason


def test_local_lock_flock_keeps_fcntl_locks_on_the_server() -> None:
    """local_lock=flock keeps only flock() locks local; the fcntl (open-file-description)
    locks the queue manager and lockfs use still reach the server: it failed the audit as
    'locks are kept on this client only'."""
    res = _audit(GOOD + ",local_lock=flock")
    assert res.ok, res.reason
    assert any("local_lock=flock" in n for n in res.notes)
    for bad in ("posix", "all"):
        res = _audit(GOOD + f",local_lock={bad}")
        assert not res.ok and f"local_lock={bad}" in res.reason


def test_actimeo_0_is_noac_and_nocto_is_noted() -> None:
    """actimeo=0 turns attribute caching off as noac does: it was told to mount with noac;
    nocto (no revalidation on open) went unmentioned."""
    res = _audit(GOOD.replace("noac", "actimeo=0") + ",local_lock=none")
    assert res.ok and not any("noac" in n for n in res.notes), res.notes
    res = _audit(GOOD + ",nocto,local_lock=none")
    assert res.ok and any("nocto" in n for n in res.notes)
